"""The cgroup layer: hierarchy and driver detection, kubelet's layout, and a small file layer.

cgroup v1 (per-controller hierarchies, `cpu,cpuacct` combined or separate), v2 (one unified
hierarchy) and hybrid (v1 controllers plus an empty cgroup2 mount: cpu/memory live on v1). Every
root is a parameter. Reads never raise out of a cycle: missing or vanished files give None and are
counted (`agent.cgroups.fs.ReadStats`). This package re-exports nothing, so importing one of its
modules loads only that module; the pure knob table is `agent.knobs`, beside the model.
"""
