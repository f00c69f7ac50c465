#!/usr/bin/env python3
"""Live snapshot cost against the number of changed pods: LiveCache.snapshot at 5000 nodes / 10000 pods.

Method:
- The cluster of bench_scheduler.py (same seed: 5000 nodes, 10000 pending pods, the online service pods
  of labelled nodes, PodGroups, queues), loaded into a LiveCache's stores in-process (no API server:
  this measures the scheduler's own work between the watch caches and the session).
- Per round: a snapshot from scratch (a fresh SnapshotMemo), optionally one session with the shipped
  conf over it (`--session`: what that session touched is rebuilt too), then k pods get a new
  resourceVersion with a changed label (so each is parsed again, the worst case; a bind or a status
  update reuses the parse), then one snapshot is timed. Sides, alternating within a round:
  `incremental` (what `run` ships: the last session's model reused, scheduler_ext/model/incremental.py) and
  `full` (the same code building from scratch with the memo, as when the incremental path falls
  back). A checkout without the incremental path (`--before DIR`, e.g. an older commit exported with
  `git archive`) measures its shipped snapshot (`memo`). Cyclic GC off as in `run`.
- Each code runs in its own process; with `--before`, the runs alternate (after, before, after, ...,
  `--runs` of each). Reported per k: min/median/max snapshot seconds over --rounds for each side, pods
  parsed, the load average. Output: benchmarks/results/snapshot-cost.json and a plot (every run;
  matplotlib, the `bench` extra).

    python benchmarks/bench_snapshot.py [--before DIR] [--runs 2] [--nodes 5000] [--pods 10000]
        [--changed 0,1,10,100,1000,10000] [--rounds 5] [--session]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if "--child" in sys.argv[:-1]:  # a child measures the code of another checkout: imported from there
    sys.path.insert(0, sys.argv[sys.argv.index("--child") + 1])

from benchmarks.bench_scheduler import generate  # noqa: E402
from scheduler_ext.cache.live import LiveCache  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
STORES = {"Node": "nodes", "PodGroup": "podgroups", "Queue": "queues", "PriorityClass": "priorityclasses"}


def load(n_nodes: int, n_pods: int) -> tuple[LiveCache, list[dict[str, Any]]]:
    cache = LiveCache(None, scheduler_name="volcano")
    cache.watch.pdb_discovered.set()
    pods = []
    for obj in generate(n_nodes, n_pods):
        obj = {**obj, "apiVersion": "v1", "metadata": {**obj["metadata"], "resourceVersion": "1"}}
        if obj["kind"] == "Pod":
            cache.watch.on_pod("ADDED", None, obj)
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
        cache.watch.on_pod("MODIFIED", p, new)
        pods[i] = new


def sweep(root: str, n_nodes: int, n_pods: int, changed: list[int], rounds: int, session: bool) -> list[dict[str, Any]]:
    """The measurements of one code (run in a child process whose sys.path starts at `root`)."""
    from benchmarks.bench_scheduler import CONF, NOW
    from benchmarks.bench_snapshot import change, load
    from scheduler_ext.actions.registry import ACTIONS
    from scheduler_ext.framework.conf import load_conf
    from scheduler_ext.framework.cycle import run_session
    from scheduler_ext.model.snapshot import SnapshotMemo
    from scheduler_ext.plugins.registry import PLUGINS

    cache, pods = load(n_nodes, n_pods)
    owner = getattr(cache, "builder", cache)  # the memo's holder (LiveCache itself before the cache split)
    incremental = hasattr(SnapshotMemo(), "live_model")
    sides = ("incremental", "full") if incremental else ("memo",)
    conf, _ = load_conf(str(CONF), ACTIONS, PLUGINS)
    actions = [ACTIONS[name].build() for name in conf.actions]
    gc.collect()
    gc.freeze()
    gc.disable()
    version = 1
    rows = []
    for k in changed:
        runs: dict[str, list[float]] = {side: [] for side in sides}
        parsed = 0
        for r in range(rounds):
            for side in (sides if r % 2 == 0 else sides[::-1]):
                # each side starts from a snapshot of the same state (and a session over it), then k pods change
                owner.memo = SnapshotMemo()
                first = cache.snapshot(NOW)
                if session:
                    run_session(first.cluster, conf, PLUGINS, actions)
                version += 1
                change(cache, pods, k, version)
                if side == "full":
                    owner.memo.live_model = None
                t0 = time.perf_counter()
                snap = cache.snapshot(NOW)
                runs[side].append(time.perf_counter() - t0)
                parsed = snap.stats.parsed
            gc.collect()
        row: dict[str, Any] = {"changed_pods": k, "parsed": parsed,
                               "load_average": [round(x, 2) for x in os.getloadavg()]}
        for side, vals in runs.items():
            row[side] = {"min": round(min(vals), 4), "median": round(statistics.median(vals), 4),
                         "max": round(max(vals), 4)}
        rows.append(row)
        print(f"{k:>6} changed: " + ", ".join(
            f"{side} {row[side]['median'] * 1000:7.1f} ms (min {row[side]['min'] * 1000:.1f}, "
            f"max {row[side]['max'] * 1000:.1f})" for side in sides)
            + f"; parsed {parsed}; load {row['load_average'][0]}", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--changed", default="0,1,10,100,1000,10000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1, help="runs of each code (alternating with --before)")
    ap.add_argument("--before", default="", help="another checkout measured alongside (its shipped snapshot)")
    ap.add_argument("--session", action="store_true", help="a session between the first snapshot and the timed one")
    ap.add_argument("--out", default=str(RESULTS / "snapshot-cost.json"))
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    changed = [int(x) for x in ns.changed.split(",")]
    if ns.child:
        print(json.dumps(sweep(ns.child, ns.nodes, ns.pods, changed, ns.rounds, ns.session)))
        return 0
    codes = [("after", str(ROOT))] + ([("before", str(Path(ns.before).resolve()))] if ns.before else [])
    runs = []
    for run in range(ns.runs):
        for label, root in codes:
            print(f"run {run + 1}, {label} ({root}); load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
            cmd = [sys.executable, __file__, "--child", root, "--nodes", str(ns.nodes), "--pods", str(ns.pods),
                   "--changed", ns.changed, "--rounds", str(ns.rounds)] + (["--session"] if ns.session else [])
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            runs.append({"run": run + 1, "code": label, "root": root, "results": json.loads(out)})
    out_path = Path(ns.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "live snapshot cost against changed pods", "nodes": ns.nodes, "pods": ns.pods,
           "rounds": ns.rounds, "session_between": ns.session,
           "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                       "cores": os.cpu_count()},
           "runs": runs}
    out_path.write_text(json.dumps(doc, indent=2) + "\n")
    plot(runs, out_path.with_suffix(".png"), ns.nodes, ns.pods, ns.session)
    print(f"wrote {out_path}")
    return 0


def plot(runs: list[dict[str, Any]], path: Path, nodes: int, pods: int, session: bool) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing (pip install -e '.[bench]'): no plot")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    styles = {("after", "incremental"): ("o-", "C0", "incremental (shipped)"),
              ("after", "full"): ("s--", "C1", "full build (the fallback)"),
              ("before", "memo"): ("^:", "C2", "before (full build with the memo)")}
    seen: set[tuple[str, str]] = set()
    for run in runs:
        rows = run["results"]
        xs = [max(r["changed_pods"], 0.5) for r in rows]
        for side in ("incremental", "full", "memo"):
            if side not in rows[0]:
                continue
            style, color, label = styles[(run["code"], side)]
            first = (run["code"], side) not in seen
            seen.add((run["code"], side))
            med = [r[side]["median"] * 1000 for r in rows]
            lo = [r[side]["median"] * 1000 - r[side]["min"] * 1000 for r in rows]
            hi = [r[side]["max"] * 1000 - r[side]["median"] * 1000 for r in rows]
            ax.errorbar(xs, med, yerr=[lo, hi], fmt=style, color=color, capsize=3, alpha=1.0 if first else 0.45,
                        label=f"{label}, run {run['run']}")
    ax.set_yscale("log")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlim(left=0.3)
    ax.set_xlabel("pods changed since the previous session (0 plotted at 0.5)")
    ax.set_ylabel("snapshot ms (median, min-max; log)")
    title = f"LiveCache.snapshot, {nodes} nodes / {pods} pods" + (", a session between" if session else "")
    ax.set_title(title, fontsize="small")
    ax.legend(fontsize="x-small", ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
