"""The real one-node Kubernetes behind `make run` and the real-node tests (not shipped in the wheel).

- `realnode`: etcd + kube-apiserver, kube-controller-manager, kube-scheduler, containerd and a real
  kubelet 1.20.2 on this machine, Tidemark's image and `daemonset/` applied as users apply them, and
  a teardown that leaves no process, mount, cgroup, bridge or changed sysctl (`runc_wrapper`: the
  runc containerd execs);
- `realscenario`: the colocation scenario on it (placement, CPU back to online, eviction,
  re-admission), every step measured;
- `view`, `watch`: the live view (usage against the watermarks with a one-minute trend, B and X,
  the evicting state, pods, Events); `view.render` is a pure function of a `ViewState`;
- `cli`: `python -m localcluster run | down` (`make run`).

Nothing here is imported by the agent or the scheduler.
"""
