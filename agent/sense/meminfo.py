"""What the memory guard reads (agent.decide.memguard): the node's free memory and the kernel's low watermark, and
what a tier group holds. Nothing here raises: an unreadable file is None.

- /proc/meminfo `MemFree`, `MemAvailable` (kB -> bytes);
- /proc/zoneinfo: the sum of every zone's `low` watermark (pages) x the page size. kswapd wakes when a zone's free
  pages fall under it; an allocation enters direct reclaim under `min`. The sum over zones is the node's line
  (the guard keeps MemFree above it plus a margin);
- a group: v1 `memory.usage_in_bytes`, v2 `memory.current`; its page cache `active_file + inactive_file` of
  memory.stat (v1 `total_*`: hierarchical); its limit (v1 `memory.limit_in_bytes`, v2 `memory.high`).
"""

from __future__ import annotations

import os

from agent.cgroups.fs import FileReader
from agent.decide.memguard import NodeMemory, current_limit, limit_file
from agent.model import CgroupDirs
from agent.sense.cgroups import stat_value


def page_size() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 4096


def parse_meminfo(text: str) -> dict[str, int]:
    """`Key:  N kB` lines -> bytes (lines without a number skipped)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isascii() and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def low_watermark_pages(zoneinfo: str) -> int | None:
    """The sum of every zone's `low` (pages); None when the text has none."""
    total = 0
    found = False
    for line in zoneinfo.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "low" and parts[1].isascii() and parts[1].isdigit():
            total += int(parts[1])
            found = True
    return total if found else None


def node_memory(reader: FileReader, proc_root: str = "/proc", page: int | None = None) -> NodeMemory | None:
    """MemFree, MemAvailable and the summed low watermark; None when either file is unreadable."""
    meminfo = reader.read(os.path.join(proc_root, "meminfo"))
    zoneinfo = reader.read(os.path.join(proc_root, "zoneinfo"))
    if meminfo is None or zoneinfo is None:
        return None
    values = parse_meminfo(meminfo)
    low = low_watermark_pages(zoneinfo)
    if "MemFree" not in values or low is None:
        return None
    free = values["MemFree"]
    return NodeMemory(free, values.get("MemAvailable", free), low * (page or page_size()))


def group_memory(reader: FileReader, dirs: CgroupDirs) -> tuple[int, int, int | None] | None:
    """(bytes charged, page cache, current limit) of one group; None when its usage is unreadable."""
    v1 = dirs.version == "v1"
    used = reader.read_int(os.path.join(dirs.memory, "memory.usage_in_bytes" if v1 else "memory.current"))
    if used is None:
        return None
    text = reader.read(os.path.join(dirs.memory, "memory.stat")) or ""
    prefix = "total_" if v1 else ""
    cache = (stat_value(text, prefix + "active_file") or 0) + (stat_value(text, prefix + "inactive_file") or 0)
    limit = current_limit(reader.read(os.path.join(dirs.memory, limit_file(dirs.version))))
    return used, min(cache, used), limit
