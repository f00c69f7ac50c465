#!/usr/bin/env bash
# `make run`: the main job.
#
# As root on a Linux machine with cgroup v1 (Debian): a real one-node Kubernetes on this machine and
# the colocation scenario under a live view (python -m localcluster run; docs/quickstart.md):
# etcd + kube-apiserver, kube-controller-manager, kube-scheduler and a real kubelet 1.20.2 (built
# once from Debian's source package, progress shown), Debian's containerd + runc + bridge CNI,
# Tidemark's image (hack/image.sh) and daemonset/ applied with kubectl through the local overlay:
# the agent as its DaemonSet's pod, the scheduler as its Deployment, the workloads real containers.
# The live view shows the node's usage against its cpu/memory watermarks with a one-minute trend,
# B and X published, the evicting state, the pods and the Events. In a terminal it stays up after
# the scenario until Ctrl-C; without one the scenario runs once, the view prints line by line, and
# the exit status is the verdict. Either way everything is torn down: no process, mount, cgroup,
# bridge or changed sysctl is left (a run killed with -9 is cleaned by the next one, or by
# `python -m localcluster down`).
#
# Where that is not possible (not root, no cgroup v1, no apt to install containerd, another
# real-node cluster running), or with TIDEMARK_RUN=simulate: what runs anywhere,
# `tidemark-scheduler simulate` on examples/ and `tidemark-agent plan` on this host's cgroups.
#
# TIDEMARK_NODE=v2: the same scenario on a production-shaped node instead: a QEMU VM (TCG) with systemd as
# PID 1, cgroup v2, containerd with SystemdCgroup = true and kubelet's systemd driver, registered to the
# control plane on this machine (localcluster/v2node.py, hack/v2node.sh; about ten times slower: its timings
# are reported, not asserted). Needs root and QEMU, Debian's kernel and mmdebstrap (installed once by
# hack/v2node.sh install); the host's cgroup version does not matter.
#
# Extra arguments for the cluster: TIDEMARK_RUN_ARGS, e.g. TIDEMARK_RUN_ARGS="--once --lock-wait 900".
set -uo pipefail
cd "$(dirname "$0")/.."
CONF=examples/volcano-scheduler.conf
CLUSTER=examples/cluster.yaml

simulate_and_plan() {
  local status=0
  echo "== Tidemark: what the scheduler would do with examples/cluster.yaml (tidemark-scheduler simulate)"
  if [ -f "$CONF" ] && [ -f "$CLUSTER" ]; then
    tidemark-scheduler simulate --conf "$CONF" --cluster "$CLUSTER" -o table || status=1
  else
    echo "   (examples/ not written yet)"
  fi
  echo
  local node
  node=$(python - <<'PY'
import yaml
try:
    for o in yaml.safe_load_all(open("examples/cluster.yaml")):
        if isinstance(o, dict) and o.get("kind") == "Node" and (o.get("metadata", {}).get("labels") or {}).get("volcano.sh/oversubscription") == "true":
            print(o["metadata"]["name"]); break
except OSError:
    pass
PY
  )
  echo "== Tidemark: what the agent would do on this host for node '${node:-?}' (tidemark-agent plan, real cgroups)"
  if [ -n "$node" ]; then
    local err
    err=$(mktemp)
    if ! tidemark-agent plan --node-name "$node" --cluster "$CLUSTER" --samples 2 --interval 0.5 -o table 2>"$err"; then
      cat "$err" >&2
      if grep -q "no kubepods cgroup" "$err"; then
        # Not a failure: a machine without kubelet has no pods for the agent to measure.
        echo "   (this host runs no kubelet, so there is no kubepods cgroup tree to measure; as root,"
        echo "    'make run' starts a real kubelet and runs the agent as its DaemonSet's pod)"
      else
        status=1
      fi
    fi
    rm -f "$err"
  fi
  return $status
}

if [ "${TIDEMARK_RUN:-realnode}" != simulate ]; then
  # A quick preview (under a second): the scheduler's decisions for the example cluster file.
  echo "== Tidemark: what the scheduler would do with examples/cluster.yaml (tidemark-scheduler simulate)"
  tidemark-scheduler simulate --conf "$CONF" --cluster "$CLUSTER" -o table
  echo
  if [ "${TIDEMARK_NODE:-v1}" = v2 ]; then
    echo "== Tidemark on a real node: cgroup v2, systemd driver (kubelet + containerd in a QEMU VM with systemd as PID 1; python -m localcluster run)"
  else
    echo "== Tidemark on a real node: kubelet + containerd on this machine (python -m localcluster run)"
  fi
  # shellcheck disable=SC2086 # TIDEMARK_RUN_ARGS is a list of words on purpose
  python -m localcluster run ${TIDEMARK_RUN_ARGS:-}
  rc=$?
  # 3: this machine cannot run it (the reason was printed); anything else is the cluster's verdict.
  [ "$rc" -ne 3 ] && exit "$rc"
  echo
  echo "== falling back to what runs without root, cgroup v1 or a kubelet: simulate + plan"
  echo
fi
simulate_and_plan
exit $?
