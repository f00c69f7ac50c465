"""agent.sense.counters: the kernel's cumulative counters handed on as deltas since the previous read."""

from __future__ import annotations

from pathlib import Path

from agent.cgroups.fs import FileReader
from agent.model import CgroupDirs
from agent.sense.counters import IoDelta, PodCounters, ThrottlingDelta
from tidemark.apis import PodUID

A, B = PodUID("a"), PodUID("b")


def _v2(root: Path, name: str, cpu_stat: str, io_stat: str = "") -> CgroupDirs:
    d = root / name
    d.mkdir(exist_ok=True)
    (d / "cpu.stat").write_text(cpu_stat)
    (d / "io.stat").write_text(io_stat)
    return CgroupDirs(str(d), str(d), str(d), "v2")


def test_throttling_counts_from_the_second_read_and_a_reset_counts_nothing(tmp_path: Path) -> None:
    counters = PodCounters(FileReader())
    a = _v2(tmp_path, "a", "nr_periods 10\nnr_throttled 2\nthrottled_usec 1000\n")
    assert counters.throttling([(A, "online", a)]) == []  # first sight: nothing to compare with
    a = _v2(tmp_path, "a", "nr_periods 25\nnr_throttled 5\nthrottled_usec 4000\n")
    assert counters.throttling([(A, "online", a)]) == [ThrottlingDelta("online", 15, 3, 0.003)]
    a = _v2(tmp_path, "a", "nr_periods 3\nnr_throttled 1\nthrottled_usec 10\n")  # a new cgroup, same UID
    assert counters.throttling([(A, "online", a)]) == []
    gone = _v2(tmp_path, "gone", "")  # no cpu.stat values: the pod's counters are forgotten
    assert counters.throttling([(A, "online", gone)]) == []
    a = _v2(tmp_path, "a", "nr_periods 9\nnr_throttled 1\nthrottled_usec 10\n")
    assert counters.throttling([(A, "online", a)]) == []  # seen again after a gap: a first sight


def test_io_counts_the_managed_disks_only_and_never_negative(tmp_path: Path) -> None:
    counters = PodCounters(FileReader())
    disks = {"8:0": "sda"}
    b = _v2(tmp_path, "b", "", "8:0 rbytes=100 wbytes=50 rios=1 wios=1\n8:16 rbytes=7 wbytes=7\n")
    assert counters.io([(B, b)], disks) == []
    b = _v2(tmp_path, "b", "", "8:0 rbytes=160 wbytes=40 rios=2 wios=2\n8:16 rbytes=99 wbytes=99\n")
    assert counters.io([(B, b)], disks) == [IoDelta("sda", "read", 60), IoDelta("sda", "write", 0)]
    assert counters.io([(B, b)], {}) == []  # no managed disk: nothing read
