"""Node totals from /proc (root is a parameter, as client_python's `ProcessCollector(proc=...)`).

- CPU: the aggregate `cpu` line of `/proc/stat`; busy = user + nice + system + irq + softirq
  (guest time is already inside user/nice; idle, iowait and steal are not this machine's work), in
  clock ticks (`USER_HZ`, 100 on Linux).
- Memory: `MemTotal - MemAvailable` from `/proc/meminfo` (bytes): what the machine uses and cannot
  give back without swapping, the node-level counterpart of a cgroup's working set.
- `/proc/<pid>/oom_score_adj` for the QoS plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from agent.cgroups.fs import FileReader


@dataclass(frozen=True, slots=True)
class CpuTimes:
    busy_ticks: int
    total_ticks: int
    ncpu: int


@dataclass(frozen=True, slots=True)
class MemInfo:
    total: int
    available: int

    @property
    def used(self) -> int:
        return max(0, self.total - self.available)


def parse_proc_stat(text: str) -> CpuTimes | None:
    busy = total = None
    ncpu = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "cpu":
            try:
                values = [int(v) for v in fields[1:]]
            except ValueError:
                return None
            values += [0] * (8 - len(values))
            user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
            busy = user + nice + system + irq + softirq
            total = user + nice + system + idle + iowait + irq + softirq + steal
        elif fields[0].startswith("cpu") and fields[0][3:].isascii() and fields[0][3:].isdigit():
            ncpu += 1
    if busy is None or total is None:
        return None
    return CpuTimes(busy, total, max(ncpu, 1))


def parse_meminfo(text: str) -> MemInfo | None:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            amount = int(parts[0])
        except ValueError:
            continue
        unit = parts[1].lower() if len(parts) > 1 else ""
        values[key.strip()] = amount * 1024 if unit == "kb" else amount
    if "MemTotal" not in values:
        return None
    available = values.get("MemAvailable")
    if available is None:  # kernels before 3.14
        available = values.get("MemFree", 0) + values.get("Buffers", 0) + values.get("Cached", 0)
    return MemInfo(values["MemTotal"], available)


class ProcFS:
    """Reads /proc under a parameterised root."""

    def __init__(self, root: str = "/proc", reader: FileReader | None = None, clk_tck: int | None = None) -> None:
        self.root = root
        self.reader = reader or FileReader()
        self.clk_tck = clk_tck or _clk_tck()

    def cpu_times(self) -> CpuTimes | None:
        text = self.reader.read(os.path.join(self.root, "stat"))
        return None if text is None else parse_proc_stat(text)

    def meminfo(self) -> MemInfo | None:
        text = self.reader.read(os.path.join(self.root, "meminfo"))
        return None if text is None else parse_meminfo(text)

    def oom_score_adj(self, pid: int) -> str | None:
        text = self.reader.read(os.path.join(self.root, str(pid), "oom_score_adj"))
        return None if text is None else text.strip()

    def mountinfo(self) -> str | None:
        return self.reader.read(os.path.join(self.root, "self", "mountinfo"))


def _clk_tck() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100
