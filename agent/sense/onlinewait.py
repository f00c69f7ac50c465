"""The online pods' CPU wait (docs/agent.md, "The offline tier"), two signals; the offline tier's ceiling falls while
the one `tier.cpu.onlineWaitSignal` names passes its target (`agent.decide.tier`).

The run delay per run slice (`slice`, the default): over the pod's tasks, the increase of their run delay (the 2nd
field of `/proc/<tid>/schedstat`) over the increase of their run slices (the 3rd, times scheduled in), in ms: how
long a wake-up waits for a CPU, on v1 and v2 alike (v2 lists the tasks in `cgroup.threads`). A request's latency is
made of such waits; the share below grows with the pod's own load as well (more wake-ups, each as short) and read
0.10-0.12 for nginx beside BestEffort pods at an unchanged p99 (docs/benchmarks-colocation.md, eighth run). Read
only over at least `MIN_SLICES_PER_S` slices a second.

The fraction of the time it waited (`share`): how much of the time they wanted a CPU they waited for one.

- cgroup v2: the pod group's `cpu.pressure` `some total=` (microseconds during which at least one of its tasks was
  runnable and not running), its increase over the wall time since the last read;
- cgroup v1 (no per-cgroup PSI): the increase of its tasks' run delay, the 2nd field of `/proc/<tid>/schedstat`
  (nanoseconds runnable on a run queue, not running), over the wall time, capped at 1: v2's `some` measure as
  near as v1 allows (delays of tasks waiting at once add up, so it reads high, never low). Not over the delay
  plus the run time: an idle pod's few microseconds of delay then read as a 50 % wait, and the ceiling halved
  to its floor on an idle node (`make run`'s scenario). Tasks are the `tasks` files of the pod's cpu group and
  its children (the tree walked again only when it changed: `TaskDirs`); a task seen only once adds nothing.

The signal is the worst online pod's (protect the worst one); a pod read for the first time has no value yet.
Tidemark's own pods (`PodView.component`) are not read: the feedback protects the node's online services, and an
agent or scheduler waiting for CPU waits for the other online pods or the host (the offline pods sit under them by
`cpu.idle`), which no cut of the tier helps; in the colocation benchmark's eighth run they were the worst online
pod in at least one scrape of 15 of 20 Tidemark cells.
Shares are fractions in [0, 1]. A v1 caveat: a task whose own CFS quota throttles it is counted as waiting too (it
stays queued); the ceiling then holds rather than halves when the offline tier is not using CPU.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
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


def schedstat(text: str) -> tuple[int, int, int] | None:
    """(run time ns, run delay ns, run slices) from `/proc/<tid>/schedstat` (slices 0 where the kernel writes two
    fields: then no delay per slice is read)."""
    parts = text.split()
    if len(parts) < 2 or not all(p.isascii() and p.isdigit() for p in parts[:3]):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) > 2 else 0


#: a pod's delay per slice is read only over at least this many run slices a second (fewer: a near-idle pod's two
#: wake-ups, one of them delayed, would read as its typical wait)
MIN_SLICES_PER_S = 10.0


def _task_dirs(directory: str, file: str) -> tuple[str, ...]:
    """`directory` and each group below it that lists tasks in `file`."""
    return tuple(root for root, _dirs, files in os.walk(directory) if file in files)


def _read_tids(reader: FileReader, directories: Iterable[str], file: str) -> tuple[list[int], bool]:
    """The tasks listed in `file` of each directory, and whether every file was there (False: the tree changed)."""
    out: list[int] = []
    complete = True
    for d in directories:
        text = reader.read(os.path.join(d, file))
        if text is None:
            complete = False
            continue
        out.extend(int(t) for t in text.split() if t.isascii() and t.isdigit())
    return out, complete


#: a pod's task directories are walked again at least this often (a change below its containers' level, which the
#: pod directory's link count does not show: a container's own child groups)
REWALK_S = 60.0


class TaskDirs:
    """The directories of each pod's cgroup tree that list tasks, walked again only when the tree changed: the pod
    directory's link count (2 + its subdirectories, on cgroupfs and tmpfs alike) moved, a listed directory is gone,
    or REWALK_S passed. A walk of every online pod's tree every tier period was a twentieth of an idle agent's loop
    on a hollow node (docs/scale.md)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._known: dict[tuple[str, str], tuple[int, float, tuple[str, ...]]] = {}
        self.walks = 0

    def tids(self, reader: FileReader, directory: str, file: str) -> list[int]:
        """Every task of `directory` and its children (their `file`: `tasks`, v2 `cgroup.threads`)."""
        key = (directory, file)
        try:
            links = os.stat(directory).st_nlink
        except OSError:
            self._known.pop(key, None)
            return []
        now = self._clock()
        known = self._known.get(key)
        if known is not None and known[0] == links and now - known[1] < REWALK_S:
            out, complete = _read_tids(reader, known[2], file)
            if complete:
                return out
        self.walks += 1
        found = _task_dirs(directory, file)
        self._known[key] = (links, now, found)
        return _read_tids(reader, found, file)[0]

    def keep(self, directories: Iterable[str]) -> None:
        """Forget the trees not among `directories` (pods gone)."""
        wanted = set(directories)
        for k in [k for k in self._known if k[0] not in wanted]:
            del self._known[k]


@dataclass
class OnlineWaitSensor:
    """Keeps the last counters per pod (and per task) to turn them into fractions and delays per slice."""

    reader: FileReader
    proc_root: str = "/proc"
    #: v2: pod -> (wall seconds, `some total` us); tasks: pod -> (wall seconds, {tid: (run ns, delay ns, slices)})
    _psi: dict[PodUID, tuple[float, int]] = field(default_factory=dict)
    _tasks: dict[PodUID, tuple[float, dict[int, tuple[int, int, int]]]] = field(default_factory=dict)
    last: dict[PodUID, float] = field(default_factory=dict)
    task_dirs: TaskDirs = field(default_factory=TaskDirs)

    def read(self, pods: Mapping[PodUID, PodView], dirs: Mapping[PodUID, CgroupDirs], wall: float,
             signal: str = "share") -> OnlineWait | None:  # fmt: skip
        """The worst online pod's wait since the previous call, worst by `signal` (`slice`: the run delay per run
        slice, which on v2 also reads the tasks' schedstat; `share`: the fraction of the time); None: no online
        pod with two reads yet."""
        worst: OnlineWait | None = None
        worst_value = -1.0
        self.last = {}
        for uid, d in dirs.items():
            pod = pods.get(uid)
            if pod is None or pod.offline or pod.component:
                continue
            ratio: float | None = None
            delay: float | None = None
            if d.version == "v2":
                ratio, source = self._v2(uid, d, wall), "cpu.pressure"
                if signal == "slice":
                    _, delay = self._threads(uid, d.cpu, wall, "cgroup.threads")
                    source = "schedstat"
            else:
                (ratio, delay), source = self._threads(uid, d.cpu, wall, "tasks"), "schedstat"
            value = delay if signal == "slice" else ratio
            if value is None:
                continue
            self.last[uid] = value
            if value > worst_value:
                worst, worst_value = OnlineWait(ratio, pod.key, source, delay), value
        for gone in [u for u in (*self._psi, *self._tasks) if u not in dirs]:
            self._psi.pop(gone, None)
            self._tasks.pop(gone, None)
        self.task_dirs.keep(d.cpu for d in dirs.values())
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

    def _threads(self, uid: PodUID, directory: str, wall: float, file: str) -> tuple[float | None, float | None]:
        """(the summed run delay over the wall time, capped at 1; the run delay per run slice in ms) of the pod's
        tasks since the last read; a task seen only once adds nothing."""
        now = v1_task_counters(self.reader, self.proc_root, directory, "schedstat", schedstat, file,
                               dirs=self.task_dirs)
        kept = self._tasks.get(uid)
        self._tasks[uid] = (wall, now)
        if kept is None or wall <= kept[0]:
            return None, None
        before = kept[1]
        waited = slices = 0
        for tid, (run, delay, count) in now.items():
            old = before.get(tid)
            if old is None or run < old[0] or delay < old[1] or count < old[2]:
                continue
            waited += delay - old[1]
            slices += count - old[2]
        elapsed = wall - kept[0]
        per_slice = None if slices < MIN_SLICES_PER_S * elapsed else waited / 1e6 / slices
        return min(1.0, waited / 1e9 / elapsed), per_slice


def v1_tids(reader: FileReader, directory: str, file: str = "tasks", dirs: TaskDirs | None = None) -> list[int]:
    """Every task of a group and its children (their `tasks` files; v2: `cgroup.threads`): a pod's threads, its
    containers'. `dirs`: the tree as last walked, while it has not changed."""
    if dirs is not None:
        return dirs.tids(reader, directory, file)
    return _read_tids(reader, _task_dirs(directory, file), file)[0]


def v1_task_counters(
    reader: FileReader, proc_root: str, directory: str, file: str, parse: Callable[[str], T | None],
    tasks: str = "tasks", dirs: TaskDirs | None = None,
) -> dict[int, T]:
    """`parse` of `/proc/<tid>/<file>` for every task of a group and its children (`v1_tids`, of the `tasks` files
    named so); a task whose file is gone or unparsable is left out. The CPU wait reads `schedstat`, the v1 I/O wait
    `stat`."""
    out: dict[int, T] = {}
    for tid in v1_tids(reader, directory, tasks, dirs):
        text = reader.read(os.path.join(proc_root, str(tid), file))
        parsed = parse(text) if text is not None else None
        if parsed is not None:
            out[tid] = parsed
    return out
