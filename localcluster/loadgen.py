"""A tiny CPU load generator: the command the local scenario's pods run.

`python -m localcluster.loadgen --target 0.15 [--target-file F] [--memory 32Mi] [--work 60]`

Every 50 ms slice it burns CPU until its own CPU time advanced by `target` x slice (or the slice
ends), then sleeps for the rest: its *demand* is `target` cores (0..1, one thread). Under contention
it simply gets less; it never catches up later, so what a cgroup counter shows is what the kernel
granted. With `--target-file` the target is re-read from the file whenever its mtime changes (the
scenario raises and lowers the online service's load this way). `--memory` touches that many bytes
once at start (charged to the pod's memory cgroup). `--work S` exits 0 after S CPU-seconds (a batch
job that finishes); without it, it runs until signalled. SIGTERM exits at once with status 0 after
printing what it did (a well-behaved container).

Imports nothing heavy: it starts in ~20 ms, inside the cgroups it was moved into before it ran.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from types import FrameType

SLICE = 0.05
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_bytes(text: str) -> int:
    for suffix, mult in _UNITS.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * mult)
    return int(text)


def read_target(path: str, default: float) -> float:
    try:
        with open(path) as f:
            value = float(f.read().strip() or default)
    except (OSError, ValueError):
        return default
    return min(1.0, max(0.0, value))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="loadgen", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--target", type=float, default=0.1, help="CPU demand in cores, 0..1 (default 0.1)")
    p.add_argument("--target-file", help="re-read the target from this file when it changes")
    p.add_argument("--memory", default="0", help="bytes to touch once at start (e.g. 32Mi)")
    p.add_argument("--work", type=float, default=0.0, help="exit 0 after this many CPU-seconds (0: never)")
    args = p.parse_args(argv)
    stop = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    blob = bytearray(parse_bytes(args.memory))
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    target = min(1.0, max(0.0, args.target))
    mtime = -1.0
    start_cpu = time.process_time()
    while not stop:
        if args.target_file:
            try:
                m = os.stat(args.target_file).st_mtime
            except OSError:
                m = -1.0
            if m != mtime:
                mtime = m
                target = read_target(args.target_file, target)
        t0 = time.monotonic()
        c0 = time.process_time()
        budget = target * SLICE
        end = t0 + SLICE
        while time.process_time() - c0 < budget and time.monotonic() < end:
            pass
        if args.work and time.process_time() - start_cpu >= args.work:
            break
        rest = end - time.monotonic()
        if rest > 0:
            time.sleep(rest)
    used = time.process_time() - start_cpu
    print(f"loadgen: {'stopped' if stop else 'done'} after {used:.2f} CPU-seconds", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
