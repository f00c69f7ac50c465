"""Usage readers over one cgroup (v1 or v2 files); each returns None when its files are missing.

- CPU: v1 `cpuacct.usage` (ns, hierarchical); v2 `cpu.stat` `usage_usec` (converted to ns).
- Memory working set, as kubelet/cAdvisor: v1 `memory.usage_in_bytes - total_inactive_file`
  (memory.stat), v2 `memory.current - inactive_file`; floor 0.
- PSI: `cpu.pressure` / `memory.pressure` `some avg10` (and `full avg10`) where the files exist.
- Throttling: `cpu.stat` `nr_periods`, `nr_throttled`, `throttled_time` (v1, ns) / `throttled_usec` (v2).
- Block I/O bytes per disk, the cgroup and its descendants: v1 `blkio.throttle.io_service_bytes_recursive`
  (`MAJ:MIN Read|Write N`), v2 `io.stat` (`MAJ:MIN rbytes=N wbytes=N ...`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from agent.cgroups.fs import FileReader, Pressure, parse_int, parse_pressure
from agent.model import CgroupDirs


@dataclass(frozen=True, slots=True)
class Throttling:
    nr_periods: int
    nr_throttled: int
    throttled_ns: int


def cpu_usage_ns(reader: FileReader, dirs: CgroupDirs) -> int | None:
    if dirs.version == "v1":
        return reader.read_int(os.path.join(dirs.cpuacct, "cpuacct.usage"))
    stat = reader.read_keyed(os.path.join(dirs.cpu, "cpu.stat"))
    if stat is None or "usage_usec" not in stat:
        return None
    return stat["usage_usec"] * 1000


def memory_working_set(reader: FileReader, dirs: CgroupDirs) -> int | None:
    if dirs.version == "v1":
        usage = reader.read_int(os.path.join(dirs.memory, "memory.usage_in_bytes"))
        inactive_key = "total_inactive_file"
    else:
        usage = reader.read_int(os.path.join(dirs.memory, "memory.current"))
        inactive_key = "inactive_file"
    if usage is None:
        return None
    text = reader.read(os.path.join(dirs.memory, "memory.stat")) or ""
    inactive = stat_value(text, inactive_key)
    if inactive is None:
        inactive = stat_value(text, "inactive_file") or 0
    return max(0, usage - inactive)


def stat_value(text: str, key: str) -> int | None:
    """One key of a flat-keyed file without parsing every line (the sampler reads memory.stat per pod per second)."""
    at = 0
    needle = key + " "
    while True:
        at = text.find(needle, at)
        if at < 0:
            return None
        if at == 0 or text[at - 1] == "\n":
            end = text.find("\n", at)
            return parse_int(text[at + len(needle) : end if end >= 0 else len(text)])
        at += len(needle)


def pressure(reader: FileReader, dirs: CgroupDirs, resource: Literal["cpu", "memory"]) -> Pressure | None:
    """PSI of the cgroup; None where the kernel/hierarchy has no pressure file (not counted as missing)."""
    path = os.path.join(dirs.cpu if resource == "cpu" else dirs.memory, f"{resource}.pressure")
    if not os.path.exists(path):
        return None
    text = reader.read(path)
    return None if text is None else parse_pressure(text)


def throttling(reader: FileReader, dirs: CgroupDirs) -> Throttling | None:
    stat = reader.read_keyed(os.path.join(dirs.cpu, "cpu.stat"))
    if stat is None or "nr_periods" not in stat:
        return None
    if dirs.version == "v1":
        throttled_ns = stat.get("throttled_time", 0)
    else:
        throttled_ns = stat.get("throttled_usec", 0) * 1000
    return Throttling(stat["nr_periods"], stat.get("nr_throttled", 0), throttled_ns)


def io_bytes(reader: FileReader, dirs: CgroupDirs) -> dict[str, tuple[int, int]] | None:
    """(read, written) bytes per disk `MAJ:MIN` since the cgroup was made; None where there is no such file
    (v1 without the blkio hierarchy, v2 without the io controller)."""
    if dirs.version == "v1":
        if not dirs.blkio:
            return None
        text = reader.read(os.path.join(dirs.blkio, "blkio.throttle.io_service_bytes_recursive"))
        if text is None:
            return None
        v1: dict[str, list[int]] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in ("Read", "Write") and parts[2].isascii() and parts[2].isdigit():
                v1.setdefault(parts[0], [0, 0])[parts[1] == "Write"] = int(parts[2])
        return {dev: (r, w) for dev, (r, w) in v1.items()}
    text = reader.read(os.path.join(dirs.cpu, "io.stat"))
    if text is None:
        return None
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        fields = dict(p.partition("=")[::2] for p in parts[1:])
        r, w = fields.get("rbytes", ""), fields.get("wbytes", "")
        if (r + w).isascii() and r.isdigit() and w.isdigit():
            out[parts[0]] = (int(r), int(w))
    return out
