"""The safe order of cgroup writes, shared by the QoS plan and the executor that applies it.

DESIGN.md: `cpu.shares` before `cpu.idle=1` when applying (the kernel refuses shares while idle is
set), `cpu.idle=0` before `cpu.shares` when restoring; limits tighten children first and loosen
parents first, so a child never exceeds its parent mid-way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

#: apply phases; restores use RESTORE_PHASE (cpu.idle goes back to 0 before shares can be written)
PHASE: Final[Mapping[str, int]] = {
    "cpu.shares": 1,
    "cpu.weight": 1,
    "cpu.cfs_quota_us": 2,
    "cpu.max": 2,
    "cpu.cfs_burst_us": 3,
    "cpu.max.burst": 3,
    "cpu.idle": 4,
    "memory.limit_in_bytes": 5,
    "memory.max": 5,
    "memory.high": 5,
    "cpu.qos_level": 6,
    "memory.qos_level": 6,
}
RESTORE_PHASE: Final[Mapping[str, int]] = {**PHASE, "cpu.idle": 0}
LIMIT_FILES: Final = frozenset({"cpu.cfs_quota_us", "cpu.max", "memory.limit_in_bytes", "memory.max", "memory.high"})
KNOB_FILES: Final = frozenset(PHASE)


def limit_value(text: str | None) -> float:
    """A quota/limit value as a number; infinity for unlimited (`-1`, `max`, huge v1 values) or unknown."""
    if text is None:
        return math.inf
    parts = text.split()
    if not parts or parts[0] == "max":
        return math.inf
    try:
        v = int(parts[0])
    except ValueError:
        return math.inf
    return math.inf if v < 0 or v >= 2**62 else float(v)


def order_key(path: str, file: str, new: str, current: str | None, restore: bool) -> tuple[int, int, int, str, str]:
    """Safe order: phase, then for limits tightening children first and loosening parents first."""
    phase = (RESTORE_PHASE if restore else PHASE).get(file, 9)
    depth = path.count("/")
    if file in LIMIT_FILES and limit_value(new) < limit_value(current):
        return (phase, 0, -depth, path, file)
    if file in LIMIT_FILES:
        return (phase, 1, depth, path, file)
    return (phase, 0, depth, path, file)
