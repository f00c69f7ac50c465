#!/usr/bin/env python3
"""Live snapshot cost against the number of changed pods: LiveCache.snapshot at 5000 nodes / 10000 pods.

Method:
- The cluster of bench_scheduler.py (same seed: 5000 nodes, 10000 pending pods, the online service pods
  of labelled nodes, PodGroups, queues), loaded into a LiveCache's stores in-process (no API server:
  this measures the scheduler's own work between the watch caches and the session).
- One warm-up snapshot (every pod parsed), then for each k in --changed: k pods get a new
  resourceVersion with a changed label (so each is parsed again, the worst case; a bind or a status
  update reuses the parse), then one snapshot is timed. Rounds alternate the snapshot memo on (what
  `run` ships: node and pod derivations reused for unchanged objects) and off (the state before it:
  only the pod parse reused), side by side in one process, with the cyclic GC off as in `run`.
- Reported per k: min/median/max snapshot seconds over --rounds for each side, pods parsed, the load
  average. Output: benchmarks/results/snapshot-cost.json and a plot (matplotlib, the `bench` extra).

    python benchmarks/bench_snapshot.py [--nodes 5000] [--pods 10000] [--changed 0,1,10,100,1000,10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scheduler import NOW, generate  # noqa: E402
from scheduler_ext.cache.live import LiveCache  # noqa: E402
from scheduler_ext.cache.snapshot import SnapshotMemo  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
STORES = {"Node": "nodes", "PodGroup": "podgroups", "Queue": "queues", "PriorityClass": "priorityclasses"}


def load(n_nodes: int, n_pods: int) -> tuple[LiveCache, list[dict[str, Any]]]:
    cache = LiveCache(None, scheduler_name="volcano")
    cache._pdb_discovered.set()
    pods = []
    for obj in generate(n_nodes, n_pods):
        obj = {**obj, "apiVersion": "v1", "metadata": {**obj["metadata"], "resourceVersion": "1"}}
        if obj["kind"] == "Pod":
            cache._on_pod("ADDED", None, obj)
            pods.append(obj)
        else:
            cache.reflectors[STORES[obj["kind"]]].store.put(obj)
    return cache, pods


def change(cache: LiveCache, pods: list[dict[str, Any]], k: int, version: int) -> None:
    """A new version of the first k pods with a changed label: each is parsed again."""
    for i in range(k):
        p = pods[i]
        md = p["metadata"]
        new = {**p, "metadata": {**md, "resourceVersion": str(version), "labels": {"round": str(version)}}}
        cache._on_pod("MODIFIED", p, new)
        pods[i] = new


def timed_snapshot(cache: LiveCache, memo_on: bool) -> tuple[float, int]:
    saved = cache.memo
    if not memo_on:
        cache.memo = None  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        snap = cache.snapshot(NOW)
        return time.perf_counter() - t0, snap.stats.parsed
    finally:
        cache.memo = saved if memo_on else SnapshotMemo()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--changed", default="0,1,10,100,1000,10000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS / "snapshot-cost.json"))
    ns = ap.parse_args()
    cache, pods = load(ns.nodes, ns.pods)
    gc.collect()
    gc.freeze()
    gc.disable()
    version = 1
    rows = []
    try:
        for k in (int(x) for x in ns.changed.split(",")):
            runs: dict[str, list[float]] = {"memo": [], "no_memo": []}
            parsed = 0
            for r in range(ns.rounds):
                for side in (("memo", "no_memo") if r % 2 == 0 else ("no_memo", "memo")):
                    # each side starts from a snapshot of the same state, then k pods change
                    cache.memo = SnapshotMemo()
                    cache.snapshot(NOW)
                    version += 1
                    change(cache, pods, k, version)
                    seconds, parsed = timed_snapshot(cache, side == "memo")
                    runs[side].append(seconds)
            row = {"changed_pods": k, "parsed": parsed, "load_average": [round(x, 2) for x in os.getloadavg()]}
            for side, vals in runs.items():
                row[side] = {"min": round(min(vals), 4), "median": round(statistics.median(vals), 4),
                             "max": round(max(vals), 4)}
            rows.append(row)
            print(f"{k:>6} changed: memo {row['memo']['median'] * 1000:7.1f} ms "
                  f"(min {row['memo']['min'] * 1000:.1f}, max {row['memo']['max'] * 1000:.1f}), "
                  f"no memo {row['no_memo']['median'] * 1000:7.1f} ms "
                  f"(min {row['no_memo']['min'] * 1000:.1f}, max {row['no_memo']['max'] * 1000:.1f}); "
                  f"parsed {parsed}; load {row['load_average'][0]}", flush=True)
    finally:
        gc.enable()
        gc.unfreeze()
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "live snapshot cost against changed pods", "nodes": ns.nodes, "pods": ns.pods,
           "rounds": ns.rounds,
           "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                       "cores": os.cpu_count()},
           "results": rows}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    plot(rows, out.with_suffix(".png"), ns.nodes, ns.pods)
    print(f"wrote {out}")
    return 0


def plot(rows: list[dict[str, Any]], path: Path, nodes: int, pods: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing (pip install -e '.[bench]'): no plot")
        return
    xs = [max(r["changed_pods"], 0.5) for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
    for side, style, label in (("memo", "o-", "memo (shipped)"), ("no_memo", "s--", "pod parse reuse only")):
        med = [r[side]["median"] * 1000 for r in rows]
        lo = [r[side]["median"] * 1000 - r[side]["min"] * 1000 for r in rows]
        hi = [r[side]["max"] * 1000 - r[side]["median"] * 1000 for r in rows]
        ax.errorbar(xs, med, yerr=[lo, hi], fmt=style, capsize=3, label=label)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("pods changed since the previous session (0 plotted at 0.5)")
    ax.set_ylabel("snapshot ms (median, min-max)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"LiveCache.snapshot, {nodes} nodes / {pods} pods", fontsize="small")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
