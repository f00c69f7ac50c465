#!/usr/bin/env python3
"""Instructions of one LiveCache.snapshot against the number of changed pods, counted by valgrind.

Method (load-independent): the cluster of bench_snapshot.py (5000 nodes, 10000 pending pods, ...) is
loaded into a LiveCache, one warm-up snapshot fills the memo (and, where the code has one, the
reused model), then --repeat times: k pods get a changed label and a new resourceVersion (parsed
again: the worst case), then one more snapshot. Each k runs twice under
`valgrind --tool=cachegrind --cache-sim=no` (PYTHONHASHSEED=0), with and without those snapshots;
the difference divided by --repeat is one snapshot's instruction count. Run-to-run noise of the
totals is some tens of millions, divided by --repeat. `--first` also counts the warm-up snapshot
(every pod parsed, the model built from scratch).

    python benchmarks/bench_snapshot_instructions.py [--root DIR] [--changed 0,1,100,1000] [--repeat 5] [--first]

`--root` measures another checkout's code (e.g. an older commit exported with `git archive`).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(root: str, k: int, final: bool, repeat: int) -> None:
    import gc

    sys.path.insert(0, root)
    from benchmarks.bench_scheduler import NOW
    from benchmarks.bench_snapshot import change, load

    cache, pods = load(5000, 10000)
    gc.collect()
    gc.freeze()
    gc.disable()
    if k < 0:  # --first: the warm-up snapshot itself
        if final:
            cache.snapshot(NOW)
        return
    cache.snapshot(NOW)
    for i in range(repeat):
        change(cache, pods, k, 2 + i)
        if final:
            cache.snapshot(NOW)


def count(root: str, k: int, final: bool, repeat: int) -> int:
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--child", root, str(k), "1" if final else "0", str(repeat)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stderr
    m = re.search(r"I\s+refs:\s+([\d,]+)", out)
    if m is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out[-2000:]}")
    return int(m.group(1).replace(",", ""))


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose code is measured")
    ap.add_argument("--changed", default="0,1,100,1000")
    ap.add_argument("--repeat", type=int, default=5, help="snapshots per run (k <= 1000; one for more)")
    ap.add_argument("--first", action="store_true", help="also count the first snapshot (everything parsed)")
    ns = ap.parse_args()
    if ns.first:
        without = count(ns.root, -1, False, 1)
        with_snapshot = count(ns.root, -1, True, 1)
        print(f" first snapshot: {(with_snapshot - without) / 1e9:.3f} billion instructions "
              f"({with_snapshot:,} - {without:,})", flush=True)
    for k in (int(x) for x in ns.changed.split(",")):
        repeat = ns.repeat if k <= 1000 else 1
        without = count(ns.root, k, False, repeat)
        with_snapshot = count(ns.root, k, True, repeat)
        print(f"{k:>6} changed pods: {(with_snapshot - without) / repeat / 1e9:.3f} billion instructions "
              f"per snapshot (({with_snapshot:,} - {without:,}) / {repeat})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
