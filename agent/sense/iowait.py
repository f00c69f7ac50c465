"""The online pods' I/O and memory wait, and the offline pods' disk rates, once per `tier.period` (the I/O controller,
agent.decide.iopressure; the memory guard's proactive reclaim, agent.decide.memguard). Deltas of the kernel's
counters over the wall time between two reads; the first read of anything yields nothing (None).

- wait, cgroup v2: each online pod's `io.pressure` / `memory.pressure` `some total=` (microseconds some task of
  the group was stalled); the fraction = its growth / the wall time, the worst online pod's;
- I/O wait, cgroup v1 with the kernel's delay accounting on (`kernel.task_delayacct = 1`): each online pod's
  own block I/O delay, the growth of its tasks' `delayacct_blkio_ticks` (field 42 of `/proc/<tid>/stat`: time
  spent waiting for block I/O, writeback throttling included: whatever sleeps in `io_schedule`; not a
  filesystem journal's waits) over the wall time, capped at 1, the worst online pod's. Tasks waiting at once
  add up, so it reads high, never low (as the v1 CPU wait, agent.sense.onlinewait). Checked every read, so an
  operator may turn it on without restarting the agent;
- wait, cgroup v1 otherwise (no per-group PSI): the node's /proc/pressure/io or /proc/pressure/memory `some
  total=` the same way (it includes offline pods' own stalls, so the controller errs toward the online pods: an
  offline writer's own waits hold it at `tier.io.minBps`, measured in the colocation benchmark); where the
  kernel has no PSI, for I/O the busiest managed disk's utilisation from /proc/diskstats (the growth of its
  `io_ticks`, ms with I/O in flight, over the wall time; its await, ms per completed I/O, goes into the words);
- the offline pods' fastest rate: each offline pod's bytes on the managed disks (`agent.sense.cgroups.io_bytes`:
  v2 io.stat, v1 blkio.throttle.io_service_bytes_recursive) per second, reads or writes, the highest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.cgroups.fs import FileReader
from agent.model import CgroupDirs
from agent.sense.cgroups import io_bytes
from agent.sense.onlinewait import TaskDirs, v1_task_counters

#: field 42 of /proc/<tid>/stat, counted from the first field after the command's closing parenthesis (field 3)
BLKIO_TICKS_FIELD = 42 - 3


def psi_some_total(text: str) -> int | None:
    """`some ... total=N` (microseconds); None when there is no such line."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "some":
            for token in parts[1:]:
                key, _, value = token.partition("=")
                if key == "total" and value.isascii() and value.isdigit():
                    return int(value)
    return None


def blkio_ticks(text: str) -> int | None:
    """`delayacct_blkio_ticks` (clock ticks) of a `/proc/<tid>/stat` line; the command may hold spaces and `)`."""
    _, paren, rest = text.rpartition(")")
    fields = rest.split() if paren else []
    if len(fields) <= BLKIO_TICKS_FIELD:
        return None
    value = fields[BLKIO_TICKS_FIELD]
    return int(value) if value.isascii() and value.isdigit() else None


def parse_diskstats(text: str) -> dict[str, tuple[int, int, int]]:
    """`MAJ:MIN` -> (completed I/Os, ms spent on them, io_ticks ms) from /proc/diskstats."""
    out: dict[str, tuple[int, int, int]] = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) < 13 or not all(x.isascii() and x.isdigit() for x in (p[0], p[1], *p[3:13])):
            continue
        reads, read_ms, writes, write_ms, ticks = int(p[3]), int(p[6]), int(p[7]), int(p[10]), int(p[12])
        out[f"{p[0]}:{p[1]}"] = (reads + writes, read_ms + write_ms, ticks)
    return out


@dataclass(frozen=True, slots=True)
class Wait:
    ratio: float
    #: which pod, or the node / disk, and how it was read (words)
    source: str


class WaitMeter:
    """Deltas of cumulative counters by key, over the wall time between reads."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, tuple[int, ...]]] = {}

    def delta(self, key: str, now: float, value: tuple[int, ...]) -> tuple[float, tuple[int, ...]] | None:
        before = self._last.get(key)
        self._last[key] = (now, value)
        if before is None or now <= before[0] or any(a < b for a, b in zip(value, before[1], strict=True)):
            return None
        return now - before[0], tuple(a - b for a, b in zip(value, before[1], strict=True))

    def known(self, key: str) -> bool:
        return key in self._last

    def keep(self, keys: Iterable[str]) -> None:
        wanted = set(keys)
        for k in [k for k in self._last if k not in wanted]:
            del self._last[k]


class OnlineWaitSensor:
    """The online wait of one resource (`io` or `memory`), read every tier period."""

    def __init__(self, reader: FileReader, resource: str, proc_root: str = "/proc") -> None:
        self.reader = reader
        self.resource = resource
        self.proc_root = proc_root
        self.meter = WaitMeter()
        self.task_dirs = TaskDirs()
        #: v1 with delay accounting: pod key -> (wall seconds, {tid: blkio ticks})
        self._blkio: dict[str, tuple[float, dict[int, int]]] = {}
        self._hz = float(os.sysconf("SC_CLK_TCK"))

    def delayacct(self) -> bool:
        """The kernel accounts tasks' block I/O delays (`kernel.task_delayacct`, Linux 5.14+, or boot `delayacct`)."""
        text = self.reader.read(os.path.join(self.proc_root, "sys", "kernel", "task_delayacct"))
        return text is not None and text.strip() == "1"

    def _blkio_delay(self, key: str, dirs: CgroupDirs, now: float) -> float | None:
        ticks = v1_task_counters(self.reader, self.proc_root, dirs.cpu, "stat", blkio_ticks, dirs=self.task_dirs)
        kept = self._blkio.get(key)
        self._blkio[key] = (now, ticks)
        if kept is None or now <= kept[0]:
            return None
        waited = sum(t - kept[1][tid] for tid, t in ticks.items() if tid in kept[1] and t >= kept[1][tid])
        return min(1.0, waited / self._hz / (now - kept[0]))

    def _psi(self, key: str, path: str, now: float) -> float | None:
        text = self.reader.read(path) if os.path.exists(path) else None
        total = psi_some_total(text) if text is not None else None
        if total is None:
            return None
        d = self.meter.delta(key, now, (total,))
        return None if d is None else min(1.0, d[1][0] / 1e6 / d[0])

    def read(self, online: Mapping[str, CgroupDirs], now: float, disks: Iterable[str] = ()) -> Wait | None:
        """`online`: pod key -> pod cgroup; `disks`: the managed disks' `MAJ:MIN` (the v1 fallback for I/O)."""
        file = f"{self.resource}.pressure"
        worst: Wait | None = None
        per_pod = False
        for key, dirs in online.items():
            if dirs.version != "v2":
                break
            per_pod = True
            r = self._psi(key, os.path.join(dirs.memory, file), now)
            if r is not None and (worst is None or r > worst.ratio):
                worst = Wait(r, f"{key} {file}")
        if per_pod:
            self.meter.keep(online)
            return worst
        if self.resource == "io" and online and self.delayacct():
            for key, dirs in online.items():
                r = self._blkio_delay(key, dirs, now)
                if r is not None and (worst is None or r > worst.ratio):
                    worst = Wait(r, f"{key} block I/O delay (delayacct)")
            for gone in [k for k in self._blkio if k not in online]:
                del self._blkio[gone]
            self.task_dirs.keep(d.cpu for d in online.values())
            return worst
        self._blkio.clear()
        r = self._psi("node", os.path.join(self.proc_root, "pressure", self.resource), now)
        if r is not None:
            hint = " (the node's, offline stalls included; kernel.task_delayacct=1: each online pod's own)"
            return Wait(r, f"/proc/pressure/{self.resource}" + (hint if self.resource == "io" else ""))
        if self.resource == "io":
            return self._diskstats(set(disks), now)
        return None

    def _diskstats(self, disks: set[str], now: float) -> Wait | None:
        text = self.reader.read(os.path.join(self.proc_root, "diskstats"))
        if text is None or not disks:
            return None
        worst: Wait | None = None
        for number, (ios, ms, ticks) in parse_diskstats(text).items():
            if number not in disks:
                continue
            d = self.meter.delta(f"disk {number}", now, (ios, ms, ticks))
            if d is None:
                continue
            wall, (dios, dms, dticks) = d
            util = min(1.0, dticks / 1000 / wall)
            await_ms = dms / dios if dios else 0.0
            if worst is None or util > worst.ratio:
                worst = Wait(util, f"/proc/diskstats {number} busy {util:.2f}, await {await_ms:.1f} ms")
        return worst


class OfflineRates:
    """The fastest offline pod's bytes per second on the managed disks (reads or writes). A pod read before whose
    io.stat gains a disk's line (v2 lists a disk only once the group did I/O on it) counts from 0."""

    def __init__(self, reader: FileReader) -> None:
        self.reader = reader
        self.meter = WaitMeter()
        self._seen: dict[str, float] = {}

    def read(self, offline: Mapping[str, CgroupDirs], disks: Iterable[str], now: float) -> float | None:
        wanted = set(disks)
        peak: float | None = None
        keys: list[str] = []
        seen: dict[str, float] = {}
        for key, dirs in offline.items():
            counts = io_bytes(self.reader, dirs)
            if counts is None:
                continue
            seen[key] = now
            for number, (r, w) in counts.items():
                if number not in wanted:
                    continue
                k = f"{key} {number}"
                keys.append(k)
                before = self._seen.get(key)
                if before is not None and not self.meter.known(k):
                    self.meter.delta(k, before, (0, 0))  # no line at the last read: nothing moved then
                d = self.meter.delta(k, now, (r, w))
                if d is not None:
                    rate = max(d[1]) / d[0]
                    peak = rate if peak is None else max(peak, rate)
        self.meter.keep(keys)
        self._seen = seen
        return peak
