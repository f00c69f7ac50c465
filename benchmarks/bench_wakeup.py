"""An online thread's wake-up delay beside offline CPU hogs, by how the offline tier is ranked in the kernel.

Why: the colocation benchmark found Tidemark's online p99 no lower than what kubelet's BestEffort gives (its tenth
run). A request's latency beside busy offline work is mostly the time a woken online thread waits for the CPU the
offline work holds; this measures that delay alone, on real cgroups (v1 `cpu` controller, kubelet's shape), with
the mechanisms a node agent can use:

- `alone`: no offline work (the floor);
- `besteffort`: hogs under a `besteffort` group at `cpu.shares=2`, each pod group at kubelet's 2 (kubelet alone);
- `pod_idle`: the same, each pod group `cpu.idle=1` (Tidemark's default, Koordinator's since #2732);
- `root_idle`: the `besteffort` group itself `cpu.idle=1` (Koordinator's before koordinator-sh/koordinator#2732:
  kubelet cannot start on it, its `cpu.shares` write is refused);
- `short_slice`: `pod_idle`, and the online thread asks the kernel for a 0.1-ms slice (`sched_setattr`
  `sched_runtime`, kernel >= 6.12: a waking entity with a shorter slice may preempt the running one before its
  slice ends, PREEMPT_SHORT, and a group's slice is its shortest child's).

The online thread sleeps `--period` ms and records how late it woke (perf_counter); one hog per CPU spins. The arms
run in interleaved rounds (each round every arm, in a rotated order); per arm the medians over rounds of the
p50, p99 and p99.9 lateness, and the p99 paired with `besteffort`'s in the same round.

Run (root, a cgroup v1 `cpu` hierarchy at /sys/fs/cgroup/cpu): python benchmarks/bench_wakeup.py [--rounds 5]
[--seconds 5] [--json OUT]. Nothing else should run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path("/sys/fs/cgroup/cpu/tidemark-wakeup")
ARMS = ("alone", "besteffort", "pod_idle", "root_idle", "short_slice")
SYS_SCHED_SETATTR = 314  # x86_64


class SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64), ("sched_util_min", ctypes.c_uint32),
                ("sched_util_max", ctypes.c_uint32)]


def set_slice(tid: int, ns: int) -> None:
    """SCHED_OTHER with a custom slice of `ns` (0: the default)."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = SchedAttr(size=ctypes.sizeof(SchedAttr), sched_runtime=ns)
    if libc.syscall(SYS_SCHED_SETATTR, tid, ctypes.byref(attr), 0) != 0:
        raise OSError(ctypes.get_errno(), f"sched_setattr({tid}, runtime={ns})")


def probe(period_ms: float, seconds: float, slice_ns: int) -> list[float]:
    """In this process: sleep `period_ms` again and again; how late each wake-up was (ms)."""
    if slice_ns:
        set_slice(0, slice_ns)
    late: list[float] = []
    end = time.perf_counter() + seconds
    step = period_ms / 1000
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        time.sleep(step)
        late.append((time.perf_counter() - t0 - step) * 1000)
    return late


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, float]:
    online, be, pod = ROOT / "online", ROOT / "besteffort", ROOT / "besteffort" / "pod"
    (be / "cpu.idle").write_text("1" if arm == "root_idle" else "0")
    if arm != "root_idle":
        (be / "cpu.shares").write_text("2")
    (pod / "cpu.idle").write_text("1" if arm in ("pod_idle", "root_idle", "short_slice") else "0")
    if arm in ("alone", "besteffort"):
        (pod / "cpu.shares").write_text("2")
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        if arm != "alone":
            for _ in range(os.cpu_count() or 1):
                h = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                (pod / "cgroup.procs").write_text(str(h.pid))
                hogs.append(h)
            time.sleep(0.5)
        child = subprocess.Popen(
            [sys.executable, __file__, "--probe", str(args.period), str(args.seconds),
             str(args.slice_us * 1000 if arm == "short_slice" else 0)],
            stdout=subprocess.PIPE,
        )
        (online / "cgroup.procs").write_text(str(child.pid))
        out, _ = child.communicate(timeout=args.seconds + 30)
        late = json.loads(out)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return {"p50_ms": pct(late, 0.5), "p99_ms": pct(late, 0.99), "p999_ms": pct(late, 0.999), "n": len(late)}


def setup() -> None:
    for d in (ROOT, ROOT / "online", ROOT / "besteffort", ROOT / "besteffort" / "pod"):
        d.mkdir(exist_ok=True)
    (ROOT / "online" / "cpu.shares").write_text("1024")


def teardown() -> None:
    for d in (ROOT / "besteffort" / "pod", ROOT / "besteffort", ROOT / "online", ROOT):
        if d.exists():
            for pid in (d / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (d.parent / "cgroup.procs").write_text(pid)
            try:
                d.rmdir()
            except OSError:
                shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=5.0, help="seconds each arm is measured in a round (5)")
    p.add_argument("--period", type=float, default=1.0, help="ms the online thread sleeps between wake-ups (1)")
    p.add_argument("--slice-us", type=int, default=100, help="the short_slice arm's slice in us (100, the least)")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(float(args.probe[0]), float(args.probe[1]), int(args.probe[2]))))
        return 0
    arms = [a for a in args.arms.split(",") if a]
    if any(a not in ARMS for a in arms) or "besteffort" not in arms:
        print(f"--arms: of {', '.join(ARMS)}, besteffort among them", file=sys.stderr)
        return 2
    if os.geteuid() != 0 or not Path("/sys/fs/cgroup/cpu/cpu.shares").exists():
        print("bench_wakeup needs root and a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu", file=sys.stderr)
        return 2
    setup()
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        for r in range(args.rounds):
            order = arms[r % len(arms):] + arms[: r % len(arms)]
            res = {a: run_arm(a, args) for a in order}
            res["load1"] = {"value": os.getloadavg()[0]}
            rounds.append(res)
            print(f"round {r}: " + ", ".join(f"{a} p99 {res[a]['p99_ms']:.3f}" for a in arms), file=sys.stderr)
    finally:
        teardown()
    summary: dict[str, Any] = {}
    for a in arms:
        summary[a] = {k: round(statistics.median(rr[a][k] for rr in rounds), 3)
                      for k in ("p50_ms", "p99_ms", "p999_ms")}
        ratios = sorted(rr[a]["p99_ms"] / rr["besteffort"]["p99_ms"] for rr in rounds if rr["besteffort"]["p99_ms"] > 0)
        summary[a]["p99_over_besteffort"] = {"median": round(statistics.median(ratios), 3),
                                             "min": round(ratios[0], 3), "max": round(ratios[-1], 3)}
    print(f"{'arm':12s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99.9 ms':>9s}  p99 / besteffort (median, min-max over rounds)")
    for a in arms:
        s = summary[a]
        r = s["p99_over_besteffort"]
        print(f"{a:12s} {s['p50_ms']:8.3f} {s['p99_ms']:8.3f} {s['p999_ms']:9.3f}  {r['median']:.2f} "
              f"[{r['min']:.2f}-{r['max']:.2f}]")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k not in ("json", "probe")},
                                         "summary": summary, "rounds": rounds}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
