"""When a new offline pod's knobs land on the real node, against when kubelet makes its cgroups.

Setup: the real one-node cluster (`localcluster.realnode`: kubelet 1.20.2 + containerd, the shipped image
and manifests, examples/local-agent-config.yaml as `make run` has it; one cluster per machine, the lock is
waited for up to 15 minutes), the Node's CPU watermarks at 99/90 % so nothing is evicted. PODS offline
pods (qos-level -1, `kubernetes.io/batch-cpu: 100` as request and limit, a busy loop pinned to CPU 0) are
started one at a time through the volcano scheduler, each deleted before the next.

Measured, on the monotonic clock with a 10 ms poll of the pod's cgroup directory in the cpu hierarchy:
the pod cgroup appearing, each child (the sandbox's, the container's), the pod's `cpu.idle` = 1 and
`cpu.cfs_quota_us` = 10000 (the batch-cpu limit) and the container's `cpu.cfs_quota_us` = 10000; and
from a watch, each pod event. Reported per pod and as median/min/max: pod cgroup -> pod knobs, sandbox
cgroup -> pod knobs (never negative: the agent waits for kubelet to finish the pod cgroup), pod knobs
-> container cgroup (how long before the container the pod was capped), container cgroup -> container
quota; kubelet's `invalid argument` log lines about the measured pods (at creation: its pod cgroup writes
raced; at deletion: `ReduceCPULimits` on an idle group); plus the agent's
`tidemark_agent_qos_resenses_total` and the `qos` reaction-latency histogram.

Run: python benchmarks/bench_knob_latency.py [--pods 5] [--json benchmarks/results/knob-latency.json]
(root, cgroup v1, the real node's binaries: it says why and exits 0 where the machine cannot run it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from localcluster.realnode import (  # noqa: E402
    WORKLOAD_IMAGE,
    RealNode,
    Unsupported,
    host_is_supported,
    local_agent_config,
)
from tidemark.quantities import quantity_to_int  # noqa: E402

CG = Path("/sys/fs/cgroup/cpu/kubepods/besteffort")
NS = "knob-latency"
QUOTA = "10000"  # batch-cpu 100 (0.1 core) at the 100 ms period


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def offline_pod(name: str) -> dict[str, Any]:
    batch = {"kubernetes.io/batch-cpu": "100"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"volcano.sh/qos-level": "-1"}},
        "spec": {
            "schedulerName": "volcano",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "taskset -c 0 sh -c 'while :; do :; done'"],
                    "resources": {"requests": batch, "limits": batch},
                }
            ],
        },
    }


def measure_pod(core: Any, name: str, hold: float) -> dict[str, Any]:
    """Start one pod, poll its cgroups and watch its events for `hold` seconds, delete it."""
    from kubernetes import watch  # type: ignore[import-untyped,unused-ignore]

    seen: dict[str, float] = {}
    events: list[tuple[float, str, str]] = []
    uid: list[str] = []
    stop = threading.Event()

    def watcher() -> None:
        w = watch.Watch()
        stream = w.stream(core.list_namespaced_pod, NS, field_selector=f"metadata.name={name}", timeout_seconds=60)
        for ev in stream:
            p = ev["object"]
            states = [
                "running" if c.state.running else "waiting" if c.state.waiting else "terminated"
                for c in p.status.container_statuses or []
            ]
            events.append((time.monotonic(), f"{ev['type']} {p.status.phase}", ",".join(states)))
            if not uid and ev["type"] != "DELETED":
                uid.append(p.metadata.uid)
            if stop.is_set():
                w.stop()

    def poller() -> None:
        while not stop.is_set():
            now = time.monotonic()
            pod = CG / f"pod{uid[0]}" if uid else None
            if pod is not None and pod.is_dir():
                seen.setdefault("pod cgroup", now)
                if read(pod / "cpu.idle") == "1":
                    seen.setdefault("pod cpu.idle", now)
                if read(pod / "cpu.cfs_quota_us") == QUOTA:
                    seen.setdefault("pod cpu.cfs_quota_us", now)
                try:
                    children = [c for c in os.scandir(pod) if c.is_dir()]
                except OSError:
                    children = []
                for c in children:
                    seen.setdefault(f"dir {c.name}", now)
                    if read(Path(c.path) / "cpu.cfs_quota_us") == QUOTA:
                        seen.setdefault(f"quota {c.name}", now)
            time.sleep(0.01)

    threads = [threading.Thread(target=watcher, daemon=True), threading.Thread(target=poller, daemon=True)]
    threads[0].start()
    time.sleep(0.5)  # the watch is open before the pod exists
    threads[1].start()
    created = time.monotonic()
    core.create_namespaced_pod(NS, offline_pod(name))
    time.sleep(hold)
    p = core.read_namespaced_pod(name, NS)
    statuses = p.status.container_statuses or []
    cid = statuses[0].container_id.split("://", 1)[1] if statuses and statuses[0].container_id else ""
    stop.set()
    core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    deadline = time.monotonic() + 60
    while core.list_namespaced_pod(NS).items and time.monotonic() < deadline:
        time.sleep(0.3)
    for t in threads:
        t.join(timeout=5)
    rel = {k: round(v - created, 3) for k, v in seen.items()}
    out: dict[str, Any] = {
        "name": name,
        "uid": uid[0] if uid else "",
        "seen": rel,
        "events": [(round(t - created, 3), e, s) for t, e, s in events],
    }
    pod_knobs = max(rel.get("pod cpu.idle", -1), rel.get("pod cpu.cfs_quota_us", -1))
    if cid and f"dir {cid}" in rel and "pod cgroup" in rel and pod_knobs >= 0:
        out["pod cgroup -> pod knobs"] = round(pod_knobs - rel["pod cgroup"], 3)
        sandbox = [v for k, v in rel.items() if k.startswith("dir ") and k != f"dir {cid}"]
        if sandbox:  # negative: the agent wrote into the pod cgroup before kubelet had finished it
            out["sandbox cgroup -> pod knobs"] = round(pod_knobs - min(sandbox), 3)
        out["pod knobs -> container cgroup"] = round(rel[f"dir {cid}"] - pod_knobs, 3)
        if f"quota {cid}" in rel:
            out["container cgroup -> container quota"] = round(rel[f"quota {cid}"] - rel[f"dir {cid}"], 3)
    return out


def kubelet_einval(run_dir: Path, results: list[dict[str, Any]]) -> dict[str, int]:
    """kubelet's EINVAL lines about the measured pods: at creation (its pod cgroup writes raced) and at deletion
    (`ReduceCPULimits` on an idle group, harmless: docs/agent.md "Known limits")."""
    uids = [r["uid"] for r in results if r.get("uid")]
    try:
        lines = (run_dir / "kubelet.log").read_text(errors="replace").splitlines()
    except OSError:
        return {}
    ours = [ln for ln in lines if "invalid argument" in ln and any(u in ln for u in uids)]
    return {
        "pods": len(uids),
        "kubelet EINVAL at creation": sum("cgroup update failed" in ln for ln in ours),
        "kubelet EINVAL at deletion": sum("Failed to reduce cpu time" in ln for ln in ours),
        "kubelet EINVAL other": sum(
            "cgroup update failed" not in ln and "Failed to reduce cpu time" not in ln for ln in ours
        ),
    }


def agent_metrics(node: RealNode, core: Any) -> list[str]:
    lines: list[str] = []
    for p in core.list_namespaced_pod("tidemark-system").items:
        if "agent" not in p.metadata.name:
            continue
        path = f"/api/v1/namespaces/tidemark-system/pods/{p.metadata.name}:9102/proxy/metrics"
        done = node.kubectl("get", "--raw", path, check=False, timeout=30)
        lines += [x for x in done.stdout.splitlines() if "qos_resenses_total " in x or 'action="qos"' in x]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=5)
    ap.add_argument("--hold", type=float, default=12.0, help="seconds each pod lives")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "knob-latency.json"))
    ap.add_argument("--run-dir", default="/tmp/tidemark-knob-latency")
    args = ap.parse_args()
    reason = host_is_supported()
    if reason:
        print(f"skipped: {reason}")
        return 0
    node = RealNode(
        run_dir=Path(args.run_dir), log=lambda s: print(f"realnode: {s}", flush=True), agent_config=local_agent_config()
    )
    try:
        node.up(lock_wait=900)
    except Unsupported as e:
        print(f"skipped: {e}")
        return 0
    results: list[dict[str, Any]] = []
    metrics: list[str] = []
    try:
        from kubernetes import client, config  # type: ignore[import-untyped,unused-ignore]

        node.kubectl("annotate", "node", node.node_name, "--overwrite", "volcano.sh/evicting-cpu-high-watermark=99")
        node.kubectl("annotate", "node", node.node_name, "--overwrite", "volcano.sh/evicting-cpu-low-watermark=90")
        api = config.new_client_from_config(config_file=str(node.kubeconfig))
        core: Any = client.CoreV1Api(api)
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        for i in range(args.pods):
            # the ServiceAccount token (pods are refused before it) and B >= 100m: the machine is shared, and
            # the offline capacity the agent publishes falls while other work loads it
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                accounts = {a.metadata.name: a for a in core.list_namespaced_service_account(NS).items}
                alloc = core.read_node(node.node_name).status.allocatable or {}
                token = "default" in accounts and bool(accounts["default"].secrets)
                if token and (quantity_to_int(alloc.get("kubernetes.io/batch-cpu", "0")) or 0) >= 100:
                    break
                time.sleep(1)
            r = measure_pod(core, f"off-{i}", args.hold)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "events"}), flush=True)
        metrics = agent_metrics(node, core)
    finally:
        problems = node.down()
        print(f"down{': left ' + ', '.join(problems) if problems else ', clean'}", flush=True)
    summary: dict[str, Any] = {"load_average": os.getloadavg(), **kubelet_einval(Path(args.run_dir), results)}
    for key in (
        "pod cgroup -> pod knobs",
        "sandbox cgroup -> pod knobs",
        "pod knobs -> container cgroup",
        "container cgroup -> container quota",
    ):
        values = [r[key] for r in results if key in r]
        if values:
            summary[key] = {
                "n": len(values),
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
    summary["agent metrics"] = metrics
    print(json.dumps(summary, indent=1))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"summary": summary, "pods": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
