"""Measurements that must run ON the node: the scenario's 100 ms CPU windows cannot cross a VM boundary.

Standard library only, so the same file runs in-process on the host's real node and as
`python3 probe.py NAME JSON-ARGS` inside the VM node (localcluster/v2node.py ships it in the share),
printing its result as one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import time
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


PROBES = {"cpu_back": cpu_back}


def main(argv: list[str]) -> int:
    name, args = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    print(json.dumps(PROBES[name](**args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
