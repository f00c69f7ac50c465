"""The "tier" duty's readings for the memory guard and the I/O controller, in one `TierSense` per tier period:
/proc/meminfo and /proc/zoneinfo and the BestEffort root's memory (`agent.sense.meminfo`), the online pods' memory
and I/O wait and the offline pods' fastest disk rate (`agent.sense.iowait`). The decisions are
`agent.decide.memguard` and `agent.decide.iopressure`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agent.cgroups.fs import FileReader
from agent.model import CgroupDirs, TierSense
from agent.sense.iowait import OfflineRates, OnlineWaitSensor
from agent.sense.meminfo import group_memory, node_memory


class TierSensor:
    def __init__(self, reader: FileReader, proc_root: str = "/proc") -> None:
        self.reader = reader
        self.proc_root = proc_root
        self.memory_wait = OnlineWaitSensor(reader, "memory", proc_root)
        self.io_wait = OnlineWaitSensor(reader, "io", proc_root)
        self.rates = OfflineRates(reader)

    def read(
        self,
        now: float,
        besteffort: CgroupDirs | None,
        online: Mapping[str, CgroupDirs],
        offline: Mapping[str, CgroupDirs],
        disks: Iterable[str],
        *,
        memory: bool = True,
        io: bool = True,
    ) -> TierSense:
        """`online`/`offline`: pod key -> pod cgroup; `disks`: the managed disks' `MAJ:MIN`."""
        groups: dict[str, tuple[int, int, int | None]] = {}
        mem = None
        mwait = None
        if memory:
            mem = node_memory(self.reader, self.proc_root)
            found = group_memory(self.reader, besteffort) if besteffort is not None else None
            if besteffort is not None and found is not None:
                groups[besteffort.memory] = found
            mwait = self.memory_wait.read(online, now)
        iwait = peak = None
        numbers = list(disks)
        if io:
            iwait = self.io_wait.read(online, now, numbers)
            peak = self.rates.read(offline, numbers, now)
        return TierSense(
            now,
            mem,
            groups,
            mwait.ratio if mwait is not None else None,
            mwait.source if mwait is not None else "",
            iwait.ratio if iwait is not None else None,
            iwait.source if iwait is not None else "",
            peak,
        )
