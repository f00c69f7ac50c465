"""Node totals from /proc through psutil (root is a parameter: `psutil.PROCFS_PATH`, as client_python's
`ProcessCollector(proc=...)`).

- CPU: psutil's `cpu_times()` (the aggregate `cpu` line of `<proc>/stat`); busy = user + nice + system +
  irq + softirq (guest time is already inside user/nice; idle, iowait and steal are not this machine's
  work), in clock ticks (`USER_HZ`, 100 on Linux); the CPU count = psutil's per-CPU lines.
- Memory: `total - available` of psutil's `virtual_memory()` (`MemTotal - MemAvailable` of
  `<proc>/meminfo`, bytes): what the machine uses and cannot give back without swapping, the
  node-level counterpart of a cgroup's working set.
- Process start: psutil's `Process(pid).create_time()` minus `boot_time()`, back in clock ticks since
  boot (`starttime`, field 22 of `<proc>/<pid>/stat`): a PID's identity across reuse, for the journal.
- `/proc/<pid>/oom_score_adj` for the QoS plan (psutil has no reader for it).

psutil reads its root from the module-wide `psutil.PROCFS_PATH`; every read here sets it to this
instance's root under a lock and puts the previous value back, so two roots in one process (tests)
never mix. A file psutil cannot parse reads as None, never as an exception.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import psutil

from agent.cgroups.fs import FileReader

T = TypeVar("T")
_PSUTIL_ROOT = threading.Lock()


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


@contextmanager
def psutil_root(root: str) -> Iterator[None]:
    """psutil reads `root` instead of /proc inside the block (thread-safe among ProcFS readers)."""
    with _PSUTIL_ROOT:
        previous = psutil.PROCFS_PATH
        psutil.PROCFS_PATH = root
        try:
            yield
        finally:
            psutil.PROCFS_PATH = previous


def _ticks(seconds: float) -> int:
    # psutil divides the kernel's ticks by sysconf(SC_CLK_TCK); multiplying back gives them exactly
    return round(seconds * _clk_tck())


def cpu_times_of(root: str) -> CpuTimes | None:
    def read() -> CpuTimes:
        t = psutil.cpu_times()
        per_cpu = psutil.cpu_times(percpu=True)
        busy = _ticks(t.user) + _ticks(t.nice) + _ticks(t.system) + _ticks(t.irq) + _ticks(t.softirq)
        idle = _ticks(t.idle) + _ticks(getattr(t, "iowait", 0.0)) + _ticks(getattr(t, "steal", 0.0))
        return CpuTimes(busy, busy + idle, max(len(per_cpu), 1))

    return _quiet(root, read)


def meminfo_of(root: str) -> MemInfo | None:
    def read() -> MemInfo:
        vm = psutil.virtual_memory()
        return MemInfo(int(vm.total), int(vm.available))

    return _quiet(root, read)


def process_start(root: str, pid: int) -> int | None:
    """Clock ticks from boot to the process's start (None: gone, unreadable, or no `btime` in `<root>/stat`)."""

    def read() -> int:
        return _ticks(psutil.Process(pid).create_time() - psutil.boot_time())

    return _quiet(root, read)


def _quiet(root: str, read: Callable[[], T]) -> T | None:
    import warnings

    with psutil_root(root), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # psutil warns about meminfo fields a minimal kernel lacks
        try:
            return read()
        except (OSError, ValueError, TypeError, KeyError, IndexError, RuntimeError, psutil.Error):
            return None


class ProcFS:
    """Reads /proc under a parameterised root."""

    def __init__(self, root: str = "/proc", reader: FileReader | None = None, clk_tck: int | None = None) -> None:
        self.root = root
        self.reader = reader or FileReader()
        self.clk_tck = clk_tck or _clk_tck()

    def cpu_times(self) -> CpuTimes | None:
        return cpu_times_of(self.root)

    def meminfo(self) -> MemInfo | None:
        return meminfo_of(self.root)

    def process_start(self, pid: int) -> int | None:
        return process_start(self.root, pid)

    def oom_score_adj(self, pid: int) -> str | None:
        text = self.reader.read(os.path.join(self.root, str(pid), "oom_score_adj"))
        return None if text is None else text.strip()

    def mountinfo(self) -> str | None:
        return self.reader.read(os.path.join(self.root, "self", "mountinfo"))

    def host_mountinfo(self) -> str | None:
        """The mounts of PID 1 (the host's, where the agent shares the host's PID namespace, as the DaemonSet
        does: its own mount namespace shows only the container's), else this process's."""
        path = os.path.join(self.root, "1", "mountinfo")
        text = self.reader.read(path) if os.path.exists(path) else None
        return text if text else self.mountinfo()


def _clk_tck() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100
