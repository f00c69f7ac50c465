"""Controllers: loops that make cluster objects match a desired state (one module per controller).

- `nodereport`: applies each agent's NodeReport to its Node (runs in the webhook's pods).
"""
