#!/usr/bin/env python3
"""Scheduler throughput: ONE session of the example conf over 10000 pending pods, at 500/1000/5000 nodes.

Method (docs/scheduler-oversubscription.md, "Benchmark"):
- A synthetic cluster, generated from a fixed seed (same input every run): nodes of 32 cores /
  128Gi / 110 pods; 30 % of them labelled `volcano.sh/oversubscription=true` with X (2-8 cores,
  4-16Gi), each running one online service pod (8 cores / 32Gi), 1 % of the labelled nodes evicting.
  10000 pending pods: about 60 % in single-pod jobs (implicit PodGroups) and 40 % in gang PodGroups
  of 4-16 pods (minMember = size); 30 % of the pods offline (qos-level -1, whole jobs), in their own
  queue; requests 250m-2 cores, 512Mi-4Gi; 10 % of the jobs in a high PriorityClass.
- Conf: examples/volcano-scheduler.conf (the shipped default: the seed guide's allocate, backfill,
  preempt; the oversubscription plugin in tier 1), or `--conf FILE`.
- Timed: from parsed objects to decisions, i.e. snapshot build (`build_cluster`) + the session
  (open, actions, close), exactly what `tidemark-scheduler simulate` reports as session_seconds
  (YAML parsing excluded: the objects are generated in memory). Like simulate, the cyclic GC is
  frozen/disabled during the session. Best of `--repeat` runs (default 3).
- Reported: pods/s = pending pods / session seconds (wall clock), pods per CPU second of the process
  (steadier on a loaded machine), bound pods, bound/s, per-action seconds, the load average.
- Output: benchmarks/results/scheduler-throughput.json and a plot of throughput against node count
  (matplotlib, the `bench` extra: pip install -e '.[bench]').

    python benchmarks/bench_scheduler.py [--nodes 500,1000,5000] [--pods 10000] [--repeat 3] [--profile N]

`--profile N` runs one session at N nodes under cProfile and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler_ext.actions.registry import ACTIONS  # noqa: E402
from scheduler_ext.framework.conf import load_conf  # noqa: E402
from scheduler_ext.framework.cycle import run_session  # noqa: E402
from scheduler_ext.model.snapshot import build_cluster  # noqa: E402
from scheduler_ext.plugins.registry import PLUGINS  # noqa: E402
from tidemark.apis import parse_quantity  # noqa: E402

CONF = ROOT / "examples" / "volcano-scheduler.conf"
RESULTS = ROOT / "benchmarks" / "results"
NOW = 1_700_000_000.0
SEED = 20240611
TARGET = 5000.0  # issue #15: >= 5000 pods/s at 5000 nodes with the shipped conf
GI = 1024**3


def generate(n_nodes: int, n_pods: int, seed: int = SEED) -> list[dict[str, Any]]:
    """The synthetic cluster (Kubernetes objects as dicts); deterministic for a seed."""
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        {"kind": "Queue", "metadata": {"name": "default"}, "spec": {"weight": 1}, "status": {"state": "Open"}},
        {"kind": "Queue", "metadata": {"name": "batch"}, "spec": {"weight": 1}, "status": {"state": "Open"}},
    ]
    res = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    for i in range(n_nodes):
        name = f"node-{i:05d}"
        labels = {"kubernetes.io/hostname": name}
        ann: dict[str, str] = {}
        labelled = rng.random() < 0.30
        if labelled:
            labels["volcano.sh/oversubscription"] = "true"
            ann["volcano.sh/oversubscription-cpu"] = str(rng.choice([2000, 4000, 6000, 8000]))
            ann["volcano.sh/oversubscription-memory"] = str(rng.choice([4, 8, 12, 16]) * GI)
            if rng.random() < 0.01:
                ann["volcano.sh/offline-job-evicting"] = "true"
        objs.append({
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": ann},
            "spec": {},
            "status": {"capacity": dict(res), "allocatable": dict(res)},
        })
        if labelled:
            objs.append(_pod(f"svc-{i:05d}", "prod", "8", "32Gi", offline=False, node=name))
    cpus = ["250m", "500m", "1", "2"]
    mems = ["512Mi", "1Gi", "2Gi", "4Gi"]
    made = 0
    j = 0
    while made < n_pods:
        gang = rng.random() < 0.16  # ~40 % of the pods end up in gangs (mean size 10)
        size = min(rng.randint(4, 16) if gang else 1, n_pods - made)
        offline = rng.random() < 0.30
        ns = "batch" if offline else "apps"
        high = rng.random() < 0.10
        cpu, mem = rng.choice(cpus), rng.choice(mems)
        group = f"job-{j:05d}" if gang else ""
        if gang:
            pg: dict[str, Any] = {
                "kind": "PodGroup",
                "metadata": {"name": group, "namespace": ns},
                "spec": {"minMember": size, "queue": "batch" if offline else "default"},
                "status": {"phase": "Pending"},
            }
            if high:
                pg["spec"]["priorityClassName"] = "high"
            objs.append(pg)
        for k in range(size):
            objs.append(_pod(f"job-{j:05d}-{k}", ns, cpu, mem, offline=offline, group=group, high=high))
        made += size
        j += 1
    return objs


def _pod(name: str, ns: str, cpu: str, mem: str, *, offline: bool, node: str = "", group: str = "",
         high: bool = False) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if offline:
        ann["volcano.sh/qos-level"] = "-1"
        ann["scheduling.volcano.sh/queue-name"] = "batch"
    if group:
        ann["scheduling.k8s.io/group-name"] = group
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
    }
    if node:
        spec["nodeName"] = node
    if high:
        spec["priorityClassName"] = "high"
        spec["priority"] = 1000
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": f"{ns}-{name}", "annotations": ann},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def one_session(objs: list[dict[str, Any]]) -> dict[str, Any]:
    conf, _ = load_conf(str(CONF), ACTIONS, PLUGINS)  # CONF: --conf rebinds it
    actions = [ACTIONS[name].build() for name in conf.actions]
    per_action: dict[str, float] = {}
    parse_quantity("1")  # warm the lazily imported parser, as simulate does
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        c0 = time.process_time()
        t0 = time.perf_counter()
        cluster = build_cluster(objs, now=NOW)
        t1 = time.perf_counter()
        ssn = run_session(cluster, conf, PLUGINS, actions,
                          on_action=lambda name, s: per_action.__setitem__(name, round(s, 4)))
        t2 = time.perf_counter()
        c2 = time.process_time()
    finally:
        gc.enable()
        gc.unfreeze()
    pending = sum(1 for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName"))
    bound_offline = sum(1 for b in ssn.binds if b.task.offline)
    labelled = {n.name for n in ssn.node_list if n.oversubscription_node}
    return {
        "session_seconds": t2 - t0,
        "session_cpu_seconds": c2 - c0,
        "snapshot_seconds": t1 - t0,
        "actions_seconds": per_action,
        "pending_pods": pending,
        "bound": len(ssn.binds),
        "bound_offline": bound_offline,
        "bound_offline_on_labelled": sum(1 for b in ssn.binds if b.task.offline and b.node in labelled),
        "pods_per_second": pending / (t2 - t0),
        "bound_per_second": len(ssn.binds) / (t2 - t0),
        "pods_per_cpu_second": pending / max(c2 - c0, 1e-9),
    }


def measure(n_nodes: int, n_pods: int, repeat: int) -> dict[str, Any]:
    objs = generate(n_nodes, n_pods)
    runs = [one_session(objs) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["session_seconds"])
    return {"nodes": n_nodes, **best, "runs_seconds": [round(r["session_seconds"], 4) for r in runs],
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def profile(n_nodes: int, n_pods: int, top: int = 30) -> None:
    objs = generate(n_nodes, n_pods)
    one_session(objs)  # warm caches (imports, quantity parsing)
    prof = cProfile.Profile()
    prof.enable()
    r = one_session(objs)
    prof.disable()
    print(f"profiled session: {r['session_seconds']:.2f}s (under cProfile), {r['bound']} bound")
    st = pstats.Stats(prof).strip_dirs().sort_stats("tottime")
    st.print_stats(top)
    st.sort_stats("cumulative").print_stats(top)


# --- the plot (matplotlib, the `bench` extra) ------------------------------------------------------------


def plot(results: list[dict[str, Any]], path: Path, pods: int, conf: str) -> None:
    """Throughput against node count (pods/s and pods per CPU-second), with the target line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing (pip install -e '.[bench]'): no plot")
        return
    nodes = [r["nodes"] for r in results]
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
    ax.plot(nodes, [r["pods_per_second"] for r in results], "o-", label="pods/s (wall clock)")
    ax.plot(nodes, [r["pods_per_cpu_second"] for r in results], "s--", label="pods per CPU-second")
    for r in results:
        ax.annotate(f"{r['pods_per_second']:.0f}", (r["nodes"], r["pods_per_second"]),
                    textcoords="offset points", xytext=(0, 6), ha="center")
    ax.axhline(TARGET, color="tab:red", linewidth=1, label=f"target {TARGET:.0f} pods/s")
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(nodes, [str(n) for n in nodes])
    ax.set_xlabel("nodes")
    ax.set_ylabel("pending pods per second")
    top = max([TARGET, *(r["pods_per_second"] for r in results), *(r["pods_per_cpu_second"] for r in results)])
    ax.set_ylim(0, top * 1.25)
    ax.set_title(f"One session, {pods} pending pods\nconf: {conf}", fontsize="small")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> int:
    global CONF
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="500,1000,5000")
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, help="profile one session at this many nodes and exit")
    ap.add_argument("--out", default=str(RESULTS / "scheduler-throughput.json"))
    ap.add_argument("--conf", default=str(CONF), help="the scheduler conf (default: the shipped one)")
    ns = ap.parse_args()
    CONF = Path(ns.conf).resolve()
    if ns.profile:
        profile(ns.profile, ns.pods)
        return 0
    results = []
    for n in (int(x) for x in ns.nodes.split(",")):
        r = measure(n, ns.pods, ns.repeat)
        results.append(r)
        acts = ", ".join(f"{k} {v:.2f}s" for k, v in r["actions_seconds"].items())
        print(f"{n:>5} nodes: {r['pods_per_second']:7.0f} pods/s ({r['pods_per_cpu_second']:.0f}/cpu-s)  "
              f"session {r['session_seconds']:.2f}s "
              f"(snapshot {r['snapshot_seconds']:.2f}s; {acts})  bound {r['bound']}/{r['pending_pods']} "
              f"({r['bound_offline']} offline, {r['bound_offline_on_labelled']} of them on labelled nodes)")
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "scheduler session throughput",
        "conf": str(CONF.relative_to(ROOT)) if CONF.is_relative_to(ROOT) else str(CONF),
        "pending_pods": ns.pods,
        "seed": SEED,
        "target_pods_per_second_at_5000_nodes": TARGET,
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count()},
        "results": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in results],
    }
    out.write_text(json.dumps(doc, indent=2, default=lambda v: round(v, 4)) + "\n")
    png = out.with_suffix(".png")
    plot(results, png, ns.pods, str(doc["conf"]))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} and {png.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
