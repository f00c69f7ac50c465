"""Per-pod kernel counters the agent exports as metrics: CFS throttling (`cpu.stat`) and block I/O bytes.

The kernel's counters only grow over a cgroup's life, so each read at a full reconcile is handed on as the
delta since the previous read of the same pod; a pod seen for the first time (or whose counters went
backwards: a new cgroup under the same UID) contributes nothing until its next read. The daemon adds the
deltas to its `Stats` (`agent.daemon.metrics`); nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.cgroups.fs import FileReader
from agent.model import CgroupDirs
from agent.sense.cgroups import Throttling, io_bytes, throttling
from tidemark.apis import PodUID


@dataclass(frozen=True, slots=True)
class ThrottlingDelta:
    """One pod class's CFS throttling since the last read (`cls`: "online" or "offline")."""

    cls: str
    periods: int
    throttled: int
    seconds: float


@dataclass(frozen=True, slots=True)
class IoDelta:
    """Bytes one offline pod read or wrote on one managed disk since the last read (`op`: "read"/"write")."""

    disk: str
    op: str
    n: int


class PodCounters:
    """Reads the counters of the pods it is given and remembers them for the next delta."""

    def __init__(self, reader: FileReader) -> None:
        self.reader = reader
        #: each pod's cpu.stat throttling at the last read
        self._throttling: dict[PodUID, Throttling] = {}
        #: each offline pod's block I/O bytes per disk `MAJ:MIN` at the last read
        self._io: dict[PodUID, dict[str, tuple[int, int]]] = {}

    def throttling(self, pods: Iterable[tuple[PodUID, str, CgroupDirs]]) -> list[ThrottlingDelta]:
        """`pods`: (uid, class, pod cgroup); the throttling each pod added since the last read."""
        seen: dict[PodUID, Throttling] = {}
        out: list[ThrottlingDelta] = []
        for uid, cls, dirs in pods:
            t = throttling(self.reader, dirs)
            if t is None:
                continue
            seen[uid] = t
            before = self._throttling.get(uid)
            if before is not None and t.nr_periods >= before.nr_periods:
                out.append(
                    ThrottlingDelta(
                        cls,
                        t.nr_periods - before.nr_periods,
                        max(0, t.nr_throttled - before.nr_throttled),
                        max(0, t.throttled_ns - before.throttled_ns) / 1e9,
                    )
                )
        self._throttling = seen
        return out

    def io(self, pods: Iterable[tuple[PodUID, CgroupDirs]], disks: Mapping[str, str]) -> list[IoDelta]:
        """`pods`: the offline pods' (uid, pod cgroup); `disks`: the managed disks, `MAJ:MIN` -> name.
        The bytes each pod moved on those disks since the last read (nothing read without disks)."""
        seen: dict[PodUID, dict[str, tuple[int, int]]] = {}
        out: list[IoDelta] = []
        for uid, dirs in pods:
            now = io_bytes(self.reader, dirs) if disks else None
            if now is None:
                continue
            seen[uid] = now
            before = self._io.get(uid, {})
            for number, (read, written) in now.items():
                if number not in disks or number not in before:
                    continue
                r0, w0 = before[number]
                out.append(IoDelta(disks[number], "read", max(0, read - r0)))
                out.append(IoDelta(disks[number], "write", max(0, written - w0)))
        self._io = seen
        return out
