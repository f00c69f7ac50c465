"""The Kubernetes I/O layer both programs use: client, reflectors, eviction/binding, events, leader election.

Objects flow as plain dicts in the Kubernetes JSON shape (camelCase), never as the official
client's model classes: decoding JSON is several times faster than building models, and plain
dicts are what the decision code takes. The official `kubernetes` client is used only for
transport (configuration loading, auth, TLS, connection pooling); see `tidemark.kube.client.request`.
Nothing here is imported by decision modules (docs/design.md, "Import contracts").
"""
