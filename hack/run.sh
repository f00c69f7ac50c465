#!/usr/bin/env bash
# `make run`: the main job on the embedded default (examples/). It grows with the project:
# today the scheduler's `simulate` on examples/ and the agent's `plan` on this host's real cgroups.
set -uo pipefail
cd "$(dirname "$0")/.."
CONF=examples/volcano-scheduler.conf
CLUSTER=examples/cluster.yaml
status=0

echo "== Tidemark: what the scheduler would do with examples/cluster.yaml (tidemark-scheduler simulate)"
if [ -f "$CONF" ] && [ -f "$CLUSTER" ]; then
  tidemark-scheduler simulate --conf "$CONF" --cluster "$CLUSTER" -o table || status=1
else
  echo "   (examples/ not written yet)"
fi
echo
NODE=$(python - <<'PY'
import yaml
try:
    for o in yaml.safe_load_all(open("examples/cluster.yaml")):
        if isinstance(o, dict) and o.get("kind") == "Node" and (o.get("metadata", {}).get("labels") or {}).get("volcano.sh/oversubscription") == "true":
            print(o["metadata"]["name"]); break
except OSError:
    pass
PY
)
echo "== Tidemark: what the agent would do on this host for node '${NODE:-?}' (tidemark-agent plan, real cgroups)"
if [ -n "$NODE" ]; then
  tidemark-agent plan --node-name "$NODE" --cluster "$CLUSTER" --samples 2 --interval 0.5 -o table || status=1
fi
echo
echo "Next: the live cluster on this machine (issue: make run: a real colocation cluster) is not built yet."
exit $status
