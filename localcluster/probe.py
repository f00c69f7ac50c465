"""Measurements that must run ON the node: the scenario's 100 ms CPU windows cannot cross a VM boundary.

Standard library only, so the same file runs in-process on the host's real node and as
`python3 probe.py NAME JSON-ARGS` inside the VM node (localcluster/v2node.py ships it in the share),
printing its result as one JSON object.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def cpu_usage_ns(directory: str, version: str) -> int:
    """Cumulative CPU time of a cgroup: v1 `cpuacct.usage`, v2 `cpu.stat` `usage_usec` x 1000."""
    if version == "v1":
        with open(os.path.join(directory, "cpuacct.usage")) as f:
            return int(f.read())
    with open(os.path.join(directory, "cpu.stat")) as f:
        for line in f:
            k, _, v = line.partition(" ")
            if k == "usage_usec":
                return int(v) * 1000
    raise ValueError(f"no usage_usec in {directory}/cpu.stat")


def cpu_back(
    online: str, offline: list[str], version: str, spike: str, timeout: float = 10.0, window: float = 0.1,
    share: float = 0.9,
) -> dict[str, Any]:
    """Creates `spike` (the online pod starts spinning), then samples the pods' CPU time every `window`: the
    seconds until the first window in which `online` got at least `share` of what all of them got."""

    def sample() -> tuple[int, int]:
        return cpu_usage_ns(online, version), sum(cpu_usage_ns(d, version) for d in offline)

    prev = sample()
    with open(spike, "w"):
        pass
    t0 = time.monotonic()
    windows = 0
    while time.monotonic() - t0 < timeout:
        time.sleep(window)
        cur = sample()
        on, off = cur[0] - prev[0], cur[1] - prev[1]
        prev = cur
        windows += 1
        if on + off > 0 and on / (on + off) >= share:
            return {"seconds": time.monotonic() - t0, "share": on / (on + off), "windows": windows}
    return {"seconds": None, "share": None, "windows": windows}


def spike_and_resume(
    online: str, offline: list[str], version: str, spike: str, timeout: float = 10.0, hold: float = 1.5,
    resume_share: float = 0.5, resume_timeout: float = 10.0, before: float = 1.0, window: float = 0.1,
) -> dict[str, Any]:
    """`cpu_back`, then the spike's end: the offline pods' CPU rate over `before` seconds first (the pre-spike
    rate), the spike held `hold` seconds from its start (long enough for the agent's tier to see it, short of the
    eviction's three consecutive samples over the high watermark), then `spike` removed (unlinked only: the
    online pod's hostPath mount keeps the directory) and the offline pods sampled every `window`: the seconds from
    the spike's end to the first window whose offline rate is at least `resume_share` of the pre-spike rate.
    Also `trace`, the offline rate of each window after the end as a fraction of the pre-spike rate."""

    def offline_ns() -> int:
        return sum(cpu_usage_ns(d, version) for d in offline)

    t_pre, pre = time.monotonic(), offline_ns()
    time.sleep(before)
    pre_rate = (offline_ns() - pre) / 1e9 / (time.monotonic() - t_pre)  # cores
    t_spike = time.monotonic()
    out = cpu_back(online, offline, version, spike, timeout=timeout, window=window)
    try:
        time.sleep(max(0.0, t_spike + hold - time.monotonic()))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spike)
    t_end = time.monotonic()
    out.update(pre_offline_cores=pre_rate, held=t_end - t_spike, resume_seconds=None, resume_ratio=None, trace=[])
    prev_t, prev = t_end, offline_ns()
    while time.monotonic() - t_end < resume_timeout:
        time.sleep(window)
        now_t, cur = time.monotonic(), offline_ns()
        ratio = (cur - prev) / 1e9 / (now_t - prev_t) / pre_rate if pre_rate > 0 else None
        prev_t, prev = now_t, cur
        out["trace"].append(None if ratio is None else round(ratio, 3))
        if ratio is not None and ratio >= resume_share:
            out.update(resume_seconds=now_t - t_end, resume_ratio=ratio)
            break
    return out


def cpu_share(online: str, offline: list[str], version: str, spike: str, seconds: float = 2.0) -> dict[str, Any]:
    """Creates `spike`, then `online`'s share of the CPU time all the pods got over the next `seconds`, and in
    the first 100 ms window (the spike's first moment, `cpu_back`'s figure); removes `spike` afterwards."""

    def sample() -> tuple[int, int]:
        return cpu_usage_ns(online, version), sum(cpu_usage_ns(d, version) for d in offline)

    start = sample()
    with open(spike, "w"):
        pass
    try:
        time.sleep(0.1)
        first = sample()
        time.sleep(max(0.0, seconds - 0.1))
        end = sample()
    finally:
        os.unlink(spike)

    def share(a: tuple[int, int], b: tuple[int, int]) -> float | None:
        on, off = b[0] - a[0], b[1] - a[1]
        return on / (on + off) if on + off > 0 else None

    return {"share": share(start, end), "first_window_share": share(start, first), "seconds": seconds}


def _memory_working_set(directory: str) -> int | None:
    """v2 `memory.current - inactive_file` (kubelet's and the agent's working set), floor 0."""
    try:
        with open(os.path.join(directory, "memory.current")) as f:
            usage = int(f.read())
        with open(os.path.join(directory, "memory.stat")) as f:
            stat = dict(line.split() for line in f if " " in line)
    except (OSError, ValueError):
        return None
    return max(0, usage - int(stat.get("inactive_file", "0")))


def sampler(
    out: str, root: str = "/sys/fs/cgroup/kubepods.slice", period: float = 0.5, count: int = 0
) -> dict[str, Any]:
    """For the live view of a node it cannot read itself (the v2 node's VM): every `period` seconds, the
    cumulative CPU time of kubepods and of every pod slice (by pod UID) and kubepods' memory working set,
    written atomically to `out` as JSON. Runs until killed (or `count` samples)."""
    n = 0
    while count <= 0 or n < count:
        pods: dict[str, int] = {}
        for qos_dir in [root, *(os.path.join(root, d) for d in os.listdir(root) if d.endswith(".slice"))]:
            try:
                names = os.listdir(qos_dir)
            except OSError:
                continue
            for d in names:
                if "-pod" in d and d.endswith(".slice"):
                    uid = d.rsplit("-pod", 1)[1].removesuffix(".slice").replace("_", "-")
                    with contextlib.suppress(OSError, ValueError):
                        pods[uid] = cpu_usage_ns(os.path.join(qos_dir, d), "v2")
        try:
            total: int | None = cpu_usage_ns(root, "v2")
        except (OSError, ValueError):
            total = None
        data = {"t": time.monotonic(), "kubepods_cpu_ns": total, "pods_cpu_ns": pods,
                "kubepods_memory_ws": _memory_working_set(root)}
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, out)
        n += 1
        time.sleep(period)
    return {"samples": n}


PROBES: dict[str, Callable[..., dict[str, Any]]] = {
    "cpu_back": cpu_back, "spike_and_resume": spike_and_resume, "cpu_share": cpu_share, "sampler": sampler,
}


def main(argv: list[str]) -> int:
    name, args = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    print(json.dumps(PROBES[name](**args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
