"""Usage readers over fake v1 and v2 trees; missing files give None, never an exception."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from agent.cgroups.fs import FileReader
from agent.sense.cgroups import cpu_usage_ns, memory_working_set, pressure, throttling
from tests.fixtures.cgroups import KubeletCgroupTree


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_cpu_usage_ns(kubelet_cgroup_tree: Callable[..., KubeletCgroupTree], version: str) -> None:
    tree = kubelet_cgroup_tree(version)
    tree.add_pod("p1", "Burstable", {"c": "containerd://a"}, cpu_request_milli=100)
    tree.advance(2.0, {"p1": 0.5})
    reader = FileReader()
    assert cpu_usage_ns(reader, tree.pods["p1"].dirs) == 1_000_000_000
    assert cpu_usage_ns(reader, tree.kubepods) == 1_000_000_000  # hierarchical, as the kernel counts
    assert cpu_usage_ns(reader, tree.layout.qos("BestEffort")) == 0


def test_v2_cpu_usage_without_usage_usec(kubelet_cgroup_tree: Callable[..., KubeletCgroupTree]) -> None:
    tree = kubelet_cgroup_tree("v2")
    tree.write(tree.kubepods, "cpu.stat", "nr_periods 0")
    assert cpu_usage_ns(FileReader(), tree.kubepods) is None


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_working_set_is_usage_minus_inactive_file(
    kubelet_cgroup_tree: Callable[..., KubeletCgroupTree], version: str
) -> None:
    tree = kubelet_cgroup_tree(version)
    tree.add_pod("p1")
    tree.set_memory("p1", 500, inactive_file=120)
    assert memory_working_set(FileReader(), tree.pods["p1"].dirs) == 380
    tree.set_memory("p1", 100, inactive_file=120)  # racy counters: floor 0
    assert memory_working_set(FileReader(), tree.pods["p1"].dirs) == 0


def test_v1_working_set_uses_total_inactive_file(kubelet_cgroup_tree: Callable[..., KubeletCgroupTree]) -> None:
    tree = kubelet_cgroup_tree("v1")
    tree.write(tree.kubepods, "memory.usage_in_bytes", 1000)
    tree.write(tree.kubepods, "memory.stat", "inactive_file 10\ntotal_inactive_file 300")
    assert memory_working_set(FileReader(), tree.kubepods) == 700


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_missing_files_are_none_and_counted(
    kubelet_cgroup_tree: Callable[..., KubeletCgroupTree], version: str
) -> None:
    tree = kubelet_cgroup_tree(version)
    gone = tree.layout.pod("vanished", "BestEffort")
    reader = FileReader()
    assert cpu_usage_ns(reader, gone) is None
    assert memory_working_set(reader, gone) is None
    assert throttling(reader, gone) is None
    assert pressure(reader, gone, "cpu") is None
    assert reader.stats.missing == 3  # pressure checks existence first: absent PSI is not a vanished file


def test_pressure_v2_and_absent_on_v1(kubelet_cgroup_tree: Callable[..., KubeletCgroupTree]) -> None:
    v2 = kubelet_cgroup_tree("v2")
    v2.write(
        v2.kubepods,
        "cpu.pressure",
        "some avg10=12.50 avg60=1 avg300=0 total=5\nfull avg10=3.00 avg60=0 avg300=0 total=1",
    )
    p = pressure(FileReader(), v2.kubepods, "cpu")
    assert p is not None and p.some_avg10 == 12.5 and p.full_avg10 == 3.0
    assert pressure(FileReader(), v2.kubepods, "memory") is not None
    v1 = kubelet_cgroup_tree("v1")
    assert pressure(FileReader(), v1.kubepods, "cpu") is None


def test_throttling_v1_and_v2(kubelet_cgroup_tree: Callable[..., KubeletCgroupTree]) -> None:
    v1 = kubelet_cgroup_tree("v1")
    v1.write(v1.kubepods, "cpu.stat", "nr_periods 10\nnr_throttled 4\nthrottled_time 5000\nnr_bursts 0\nburst_time 0")
    t = throttling(FileReader(), v1.kubepods)
    assert t is not None and (t.nr_periods, t.nr_throttled, t.throttled_ns) == (10, 4, 5000)
    v2 = kubelet_cgroup_tree("v2")
    v2.write(v2.kubepods, "cpu.stat", "usage_usec 1\nnr_periods 7\nnr_throttled 2\nthrottled_usec 3")
    t2 = throttling(FileReader(), v2.kubepods)
    assert t2 is not None and (t2.nr_periods, t2.nr_throttled, t2.throttled_ns) == (7, 2, 3000)


def test_combined_cpu_cpuacct_mount(kubelet_cgroup_tree: Callable[..., KubeletCgroupTree]) -> None:
    tree = kubelet_cgroup_tree("v1", combined_cpu_cpuacct=True)
    assert os.path.islink(os.path.join(tree.cgroup_root, "cpu"))
    tree.add_pod("p1")
    tree.advance(1.0, {"p1": 1.0})
    assert cpu_usage_ns(FileReader(), tree.pods["p1"].dirs) == 1_000_000_000
