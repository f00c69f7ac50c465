"""The sampler: K samples from K+1 reads of the kubepods root, each pod, and /proc.

Paths are resolved when the sampler is built, so a read is nothing but small file reads (everything
slow happens before the first one). CPU is the counter delta over the wall time between reads, on
the injected clock; memory is the working set at the end of the interval. A pod whose counters are
missing in either read is left out of that sample (and counted by the reader).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from agent.cgroups.fs import FileReader, parse_pressure
from agent.cgroups.layout import KubeLayout
from agent.model import Amounts, CgroupDirs, Sample
from agent.sense.cgroups import cpu_usage_ns, memory_working_set, pressure
from agent.sense.procfs import ProcFS
from tidemark.apis import PodUID, Resource
from tidemark.clock import Clock

RESOURCE_NAMES: tuple[Literal["cpu", "memory"], ...] = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class RawRead:
    """One read of every counter, stamped with both clocks."""

    mono: float
    wall: float
    node_busy_ticks: int | None
    node_memory: int | None
    kubepods_cpu_ns: int | None
    kubepods_memory: int | None
    pods: Mapping[PodUID, tuple[int | None, int | None]] = field(default_factory=dict)
    pressure: Mapping[Resource, float] = field(default_factory=dict)
    node_pressure: Mapping[Resource, float] = field(default_factory=dict)
    pod_pressure: Mapping[PodUID, Mapping[Resource, float]] = field(default_factory=dict)


def to_sample(prev: RawRead, cur: RawRead, clk_tck: int) -> Sample:
    """The usage between two reads (pure): CPU in milli-cores, memory in bytes at `cur`."""
    elapsed = cur.mono - prev.mono
    if elapsed <= 0:
        return Sample(cur.wall, 0.0, None, None, {}, dict(cur.pressure), dict(cur.node_pressure), cur.pod_pressure)

    def milli_ns(a: int | None, b: int | None) -> float | None:
        if a is None or b is None or b < a:
            return None
        return (b - a) / elapsed / 1e6

    node: Amounts | None = None
    if prev.node_busy_ticks is not None and cur.node_busy_ticks is not None and cur.node_memory is not None:
        busy = max(0, cur.node_busy_ticks - prev.node_busy_ticks)
        node = Amounts(busy / clk_tck / elapsed * 1000.0, float(cur.node_memory))
    kube_cpu = milli_ns(prev.kubepods_cpu_ns, cur.kubepods_cpu_ns)
    kubepods = (
        None if kube_cpu is None or cur.kubepods_memory is None else Amounts(kube_cpu, float(cur.kubepods_memory))
    )
    pods: dict[PodUID, Amounts] = {}
    for uid, (cpu_ns, mem) in cur.pods.items():
        before = prev.pods.get(uid)
        cpu = milli_ns(before[0] if before else None, cpu_ns)
        if cpu is not None and mem is not None:
            pods[uid] = Amounts(cpu, float(mem))
    return Sample(
        cur.wall, elapsed, node, kubepods, pods, dict(cur.pressure), dict(cur.node_pressure), cur.pod_pressure
    )


class Sampler:
    """Reads the counters of the kubepods root and the given pods (UID -> pod cgroup dirs)."""

    def __init__(
        self,
        layout: KubeLayout,
        pod_dirs: Mapping[PodUID, CgroupDirs],
        procfs: ProcFS,
        reader: FileReader,
        clock: Clock,
    ) -> None:
        self.kubepods = layout.kubepods()
        self.pod_dirs = dict(pod_dirs)
        self.procfs = procfs
        self.reader = reader
        self.clock = clock
        #: the online pods whose PSI is read with each sample (cgroup v2 only: v1 groups have none)
        self.online: frozenset[PodUID] = frozenset()
        self._node_psi = {
            r: path for r in RESOURCE_NAMES if os.path.exists(path := os.path.join(procfs.root, "pressure", r))
        }

    def read(self) -> RawRead:
        mono, wall = self.clock.monotonic(), self.clock.wall()
        times = self.procfs.cpu_times()
        mem = self.procfs.meminfo()
        pods = {
            uid: (cpu_usage_ns(self.reader, d), memory_working_set(self.reader, d)) for uid, d in self.pod_dirs.items()
        }
        kube_cpu = cpu_usage_ns(self.reader, self.kubepods)
        kube_mem = memory_working_set(self.reader, self.kubepods)
        psi: dict[Resource, float] = {}
        for r in RESOURCE_NAMES:
            p = pressure(self.reader, self.kubepods, r)
            if p is not None:
                psi[r] = p.some_avg10
        node_psi: dict[Resource, float] = {}
        for r, path in self._node_psi.items():
            text = self.reader.read(path)
            parsed = None if text is None else parse_pressure(text)
            if parsed is not None:
                node_psi[r] = parsed.some_avg10
        pod_psi: dict[PodUID, Mapping[Resource, float]] = {}
        if self.kubepods.version == "v2":
            for uid in self.online:
                d = self.pod_dirs.get(uid)
                if d is None:
                    continue
                values = {r: p.some_avg10 for r in RESOURCE_NAMES if (p := pressure(self.reader, d, r)) is not None}
                if values:
                    pod_psi[uid] = values
        return RawRead(
            mono,
            wall,
            None if times is None else times.busy_ticks,
            None if mem is None else mem.used,
            kube_cpu,
            kube_mem,
            pods,
            psi,
            node_psi,
            pod_psi,
        )

    def probe(self) -> tuple[float, int | None, int | None]:
        """The kubepods root alone (monotonic seconds, CPU counter ns, working set bytes): a calm node's check
        between two samples (`agent.decide.calm`)."""
        mono = self.clock.monotonic()
        return mono, cpu_usage_ns(self.reader, self.kubepods), memory_working_set(self.reader, self.kubepods)

    def samples(self, count: int, interval: float) -> tuple[Sample, ...]:
        """`count` samples, `interval` seconds apart (count + 1 reads)."""
        out: list[Sample] = []
        prev = self.read()
        start = prev.mono
        for i in range(1, count + 1):
            self.clock.sleep(max(0.0, start + i * interval - self.clock.monotonic()))
            cur = self.read()
            out.append(to_sample(prev, cur, self.procfs.clk_tck))
            prev = cur
        return tuple(out)


class SampleWindow:
    """The daemon's samples: one per read after the first, oldest first, kept for `horizon` seconds.

    `new` counts the samples the decision has not seen yet (`Snapshot.new_samples`); `taken()` hands
    that count over and resets it.
    """

    def __init__(self) -> None:
        self.samples: collections.deque[Sample] = collections.deque()
        self.new = 0
        self._prev: RawRead | None = None

    def add(self, read: RawRead, clk_tck: int, horizon: float, triggered: tuple[Resource, ...] = ()) -> Sample | None:
        """Add the sample ending at `read`; `triggered`: the pressure triggers that fired since the last read."""
        prev, self._prev = self._prev, read
        if prev is None:
            return None
        sample = to_sample(prev, read, clk_tck)
        if triggered:
            sample = replace(sample, triggered=triggered)
        self.samples.append(sample)
        self.new += 1
        while self.samples and self.samples[0].time < sample.time - horizon:
            self.samples.popleft()
        return sample

    def taken(self) -> int:
        n, self.new = self.new, 0
        return n
