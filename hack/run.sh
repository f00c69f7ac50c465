#!/usr/bin/env bash
# `make run`: the main job.
#
# As root on a Linux machine with cgroups: a real colocation cluster on this machine, and a live
# scenario (python -m localcluster run; docs/quickstart.md): etcd + kube-apiserver 1.20.2
# (built once from Debian's source package, about 5 minutes, progress shown), the local pod runner
# (NOT a kubelet), `tidemark-agent run` and `tidemark-scheduler run`. In a terminal the live view
# stays up after the scenario until Ctrl-C, which tears everything down; without a terminal the
# scenario runs once and the exit status says whether it passed.
#
# Where that is not possible (not root, no usable cgroups, no apiserver and no apt to build one), or
# with TIDEMARK_RUN=simulate: what runs anywhere, `tidemark-scheduler simulate` on examples/ and
# `tidemark-agent plan` on this host's cgroups.
#
# Extra arguments for the cluster: TIDEMARK_RUN_ARGS, e.g. TIDEMARK_RUN_ARGS="--extra-nodes 2".
#
# TIDEMARK_RUN=realnode: the same scenario on a real kubelet 1.20.2 + containerd running the project
# image and daemonset/ (localcluster/realnode.py; docs/quickstart.md, "On a real node"), once, the
# exit status is the verdict; everything it starts is torn down and the host restored.
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
        echo "    'make run' lays one out itself and runs the agent on it)"
      else
        status=1
      fi
    fi
    rm -f "$err"
  fi
  return $status
}

if [ "${TIDEMARK_RUN:-cluster}" = realnode ]; then
  # The real node: kubelet 1.20.2 + containerd, the image and daemonset/ as users install them, and
  # the scenario once with its measured figures (localcluster/realnode.py, localcluster/realscenario.py).
  echo "== Tidemark on a real node: kubelet + containerd on this machine (python -m localcluster.realnode scenario)"
  python -m localcluster.realnode scenario "${TMPDIR:-/tmp}/tidemark-realnode/run-$(date +%Y%m%d-%H%M%S)"
  rc=$?
  [ "$rc" -ne 3 ] && exit "$rc"
  echo
  echo "== falling back to what runs without root, cgroups or a kubelet: simulate + plan"
  echo
elif [ "${TIDEMARK_RUN:-cluster}" != simulate ]; then
  # A quick preview (under a second): the scheduler's decisions for the example cluster file.
  echo "== Tidemark: what the scheduler would do with examples/cluster.yaml (tidemark-scheduler simulate)"
  tidemark-scheduler simulate --conf "$CONF" --cluster "$CLUSTER" -o table
  echo
  echo "== Tidemark: a real colocation cluster on this machine (python -m localcluster run)"
  # shellcheck disable=SC2086 # TIDEMARK_RUN_ARGS is a list of words on purpose
  python -m localcluster run ${TIDEMARK_RUN_ARGS:-}
  rc=$?
  # 3: this machine cannot run it (the reason was printed); anything else is the cluster's verdict.
  [ "$rc" -ne 3 ] && exit "$rc"
  echo
  echo "== falling back to what runs without root, cgroups or an apiserver: simulate + plan"
  echo
fi
simulate_and_plan
exit $?
