"""The online pods' CPU wait: how much of the time they wanted a CPU they waited for one (docs/agent.md, "The
offline tier"). The offline tier's ceiling falls while it passes `tier.cpu.onlineWaitTarget` (`agent.decide.tier`).

- cgroup v2: the pod group's `cpu.pressure` `some total=` (microseconds during which at least one of its tasks was
  runnable and not running), its increase over the wall time since the last read;
- cgroup v1 (no per-cgroup PSI): the increase of its tasks' run delay, the 2nd field of `/proc/<tid>/schedstat`
  (nanoseconds runnable on a run queue, not running), over the wall time, capped at 1: v2's `some` measure as
  near as v1 allows (delays of tasks waiting at once add up, so it reads high, never low). Not over the delay
  plus the run time: an idle pod's few microseconds of delay then read as a 50 % wait, and the ceiling halved
  to its floor on an idle node (`make run`'s scenario). Tasks are the `tasks` files of the pod's cpu group and
  its children; a task seen only once adds nothing.

The signal is the worst online pod's (protect the worst one); a pod read for the first time has no value yet.
Tidemark's own pods (`PodView.component`) are not read: the feedback protects the node's online services, and an
agent or scheduler waiting for CPU waits for the other online pods or the host (the offline pods sit under them by
`cpu.idle`), which no cut of the tier helps; in the colocation benchmark's eighth run they were the worst online
pod in at least one scrape of 15 of 20 Tidemark cells.
Both are fractions in [0, 1]. A v1 caveat: a task whose own CFS quota throttles it is counted as waiting too (it
stays queued); the ceiling then holds rather than halves when the offline tier is not using CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from agent.cgroups.fs import FileReader
from agent.model import CgroupDirs, OnlineWait, PodView
from tidemark.apis import PodUID

T = TypeVar("T")


def pressure_total_us(text: str) -> int | None:
    """The `some` line's `total=` (microseconds) of a PSI file."""
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] != "some":
            continue
        for token in parts[1:]:
            key, _, value = token.partition("=")
            if key == "total" and value.isascii() and value.isdigit():
                return int(value)
    return None


def schedstat(text: str) -> tuple[int, int] | None:
    """(run time ns, run delay ns) from `/proc/<tid>/schedstat`."""
    parts = text.split()
    if len(parts) < 2 or not all(p.isascii() and p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


@dataclass
class OnlineWaitSensor:
    """Keeps the last counters per pod (and per task on v1) to turn them into fractions."""

    reader: FileReader
    proc_root: str = "/proc"
    #: v2: pod -> (wall seconds, `some total` us); v1: pod -> (wall seconds, {tid: (run ns, delay ns)})
    _psi: dict[PodUID, tuple[float, int]] = field(default_factory=dict)
    _tasks: dict[PodUID, tuple[float, dict[int, tuple[int, int]]]] = field(default_factory=dict)
    last: dict[PodUID, float] = field(default_factory=dict)

    def read(self, pods: Mapping[PodUID, PodView], dirs: Mapping[PodUID, CgroupDirs], wall: float) -> OnlineWait | None:
        """The worst online pod's wait since the previous call (None: no online pod with two reads yet)."""
        worst: OnlineWait | None = None
        self.last = {}
        for uid, d in dirs.items():
            pod = pods.get(uid)
            if pod is None or pod.offline or pod.component:
                continue
            v2 = d.version == "v2"
            ratio, source = (self._v2(uid, d, wall), "cpu.pressure") if v2 else (self._v1(uid, d, wall), "schedstat")
            if ratio is None:
                continue
            self.last[uid] = ratio
            if worst is None or ratio > worst.ratio:
                worst = OnlineWait(ratio, pod.key, source)
        for gone in [u for u in (*self._psi, *self._tasks) if u not in dirs]:
            self._psi.pop(gone, None)
            self._tasks.pop(gone, None)
        return worst

    def _v2(self, uid: PodUID, d: CgroupDirs, wall: float) -> float | None:
        text = self.reader.read(os.path.join(d.cpu, "cpu.pressure"))
        total = pressure_total_us(text) if text is not None else None
        if total is None:
            return None
        before = self._psi.get(uid)
        self._psi[uid] = (wall, total)
        if before is None or wall <= before[0] or total < before[1]:
            return None
        return min(1.0, (total - before[1]) / 1e6 / (wall - before[0]))

    def _v1(self, uid: PodUID, d: CgroupDirs, wall: float) -> float | None:
        now = v1_task_counters(self.reader, self.proc_root, d.cpu, "schedstat", schedstat)
        kept = self._tasks.get(uid)
        self._tasks[uid] = (wall, now)
        if kept is None or wall <= kept[0]:
            return None
        before = kept[1]
        waited = 0
        for tid, (run, delay) in now.items():
            old = before.get(tid)
            if old is None or run < old[0] or delay < old[1]:
                continue
            waited += delay - old[1]
        return min(1.0, waited / 1e9 / (wall - kept[0]))

def v1_tids(reader: FileReader, directory: str) -> list[int]:
    """Every task of a v1 group and its children (their `tasks` files): a pod's threads, its containers'."""
    out: list[int] = []
    for root, _dirs, files in os.walk(directory):
        if "tasks" in files:
            text = reader.read(os.path.join(root, "tasks"))
            if text:
                out.extend(int(t) for t in text.split() if t.isascii() and t.isdigit())
    return out


def v1_task_counters(
    reader: FileReader, proc_root: str, directory: str, file: str, parse: Callable[[str], T | None]
) -> dict[int, T]:
    """`parse` of `/proc/<tid>/<file>` for every task of a v1 group and its children (`v1_tids`); a task whose
    file is gone or unparsable is left out. The v1 CPU wait reads `schedstat`, the v1 I/O wait `stat`."""
    out: dict[int, T] = {}
    for tid in v1_tids(reader, directory):
        text = reader.read(os.path.join(proc_root, str(tid), file))
        parsed = parse(text) if text is not None else None
        if parsed is not None:
            out[tid] = parsed
    return out
