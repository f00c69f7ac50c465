"""The local colocation cluster behind `make run`: a control plane, Tidemark's programs and real pods, on one machine.

- `cluster`: brings up etcd + kube-apiserver (`controlplane`, built once from Debian's source), the pod
  runner, `tidemark-agent run` and `tidemark-scheduler run` as subprocesses, and tears everything down;
- `podrunner`: runs the pods bound to this machine's Node as host processes in a kubelet-like cgroup
  tree (`cgroups`), with a stock kubelet's admission (`admission`). It is NOT a kubelet;
- `scenario`: the live scenario (online spike, offline eviction, re-admission) with measurements;
- `view`, `watch`: the live view; `loadgen`: the CPU load generator the demo pods run;
- `cli`: `python -m localcluster run | podrunner | cleanup`.

Nothing here is imported by the agent or the scheduler.
"""
