"""Sensing: everything that reads the host, in one room.

- `cgroups`: cgroup file readers (CPU usage, working set, pressure) over `agent.cgroups.fs`.
- `procfs`: `/proc` through psutil (PIDs, per-process values), bounded and never raising.
- `sampler`: the usage sampler (node and per-pod samples each cycle).
- `snapshot`: Kubernetes objects and cgroup knob files into the frozen model (`agent.model`).
- `knobs`: knob re-sensing (what the cgroup files hold now, and the journal's counterfactual).
- `network`: per-pod network sensing for network QoS (veths, addresses, byte counters).
- `pressure`: PSI triggers (poll on `*.pressure` files) that wake the cycle early.

Sensing parses quantities and tolerates vanished files; it never writes (writes are `agent.act`).
"""
