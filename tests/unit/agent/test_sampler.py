"""The sampler on fake trees with a fake clock: K samples from K+1 reads, CPU = delta / elapsed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent.cgroups.fs import FileReader
from agent.model import Amounts
from agent.sense.procfs import ProcFS
from agent.sense.sampler import RawRead, Sampler, to_sample
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tidemark.apis import PodUID
from tidemark.clock import FakeClock


def _sampler(tree: KubeletCgroupTree, clock: FakeClock, reader: FileReader | None = None) -> Sampler:
    reader = reader or FileReader()
    dirs = {PodUID(uid): p.dirs for uid, p in tree.pods.items()}
    return Sampler(tree.layout, dirs, ProcFS(tree.proc_root, reader, clk_tck=100), reader, clock)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_k_samples_from_k_plus_one_reads(
    kubelet_cgroup_tree: Callable[..., KubeletCgroupTree], version: str, driver: str
) -> None:
    tree = kubelet_cgroup_tree(version, driver)
    tree.add_pod("on", "Burstable", {"app": "containerd://a"}, cpu_request_milli=1000)
    tree.add_pod("off", "BestEffort", {"job": "containerd://b"})
    tree.set_memory("on", 3 * GiB, inactive_file=GiB)
    tree.set_memory("off", GiB)
    clock = FakeClock()
    clock.hooks.append(tree.hook({"on": 1.5, "off": 0.25}, other_cores=0.5))
    sampler = _sampler(tree, clock)
    reads = 0
    original = sampler.read

    def counting() -> RawRead:
        nonlocal reads
        reads += 1
        return original()

    sampler.read = counting  # type: ignore[method-assign]
    samples = sampler.samples(3, 1.0)
    assert len(samples) == 3 and reads == 4
    for s in samples:
        assert s.elapsed == pytest.approx(1.0)
        assert s.kubepods is not None and s.kubepods.cpu == pytest.approx(1750.0)
        assert s.kubepods.memory == pytest.approx(3 * GiB)  # kubepods: sum of usage (its own inactive_file 0)
        assert s.pods[PodUID("on")] == Amounts(pytest.approx(1500.0), 2 * GiB)  # type: ignore[arg-type]
        assert s.pods[PodUID("off")].cpu == pytest.approx(250.0)
        assert s.node is not None and s.node.cpu == pytest.approx(2250.0)
        assert s.node.memory == 2 * GiB
        assert s.pressure == ({"cpu": 0.0, "memory": 0.0} if version == "v2" else {})
    assert [s.time for s in samples] == [clock.wall() - 2, clock.wall() - 1, clock.wall()]


def test_interval_is_kept_from_the_start(kubelet_cgroup_tree: Callable[..., KubeletCgroupTree]) -> None:
    tree = kubelet_cgroup_tree()
    clock = FakeClock()
    slept: list[float] = []
    clock.hooks.append(slept.append)
    _sampler(tree, clock).samples(4, 0.5)
    assert slept == [0.5, 0.5, 0.5, 0.5]


def test_vanished_pod_is_left_out_and_counted(kubelet_cgroup_tree: Callable[..., KubeletCgroupTree]) -> None:
    tree = kubelet_cgroup_tree("v1")
    tree.add_pod("p1")
    tree.add_pod("p2")
    clock = FakeClock()
    reader = FileReader()
    sampler = _sampler(tree, clock, reader)
    first = sampler.read()
    tree.remove(tree.pods["p2"].dirs, "cpuacct.usage")
    clock.sleep(1.0)
    tree.advance(1.0, {"p1": 1.0})
    second = sampler.read()
    s = to_sample(first, second, 100)
    assert set(s.pods) == {PodUID("p1")}
    assert reader.stats.missing == 1


def test_to_sample_is_pure_and_guards_resets() -> None:
    a = RawRead(0.0, 100.0, 1000, 5, 10**9, 7, {PodUID("p"): (5 * 10**8, 3)})
    b = RawRead(2.0, 102.0, 1300, 6, 3 * 10**9, 8, {PodUID("p"): (10**8, 4), PodUID("new"): (10**9, 1)})
    s = to_sample(a, b, 100)
    assert s.node == Amounts(1500.0, 6.0)  # 300 ticks / 100 Hz / 2 s = 1.5 cores
    assert s.kubepods == Amounts(1000.0, 8.0)
    assert s.pods == {}  # p's counter went backwards (a new cgroup), "new" has no earlier read
    assert to_sample(b, b, 100).kubepods is None  # zero elapsed time gives no rates
    missing = RawRead(2.0, 102.0, None, None, None, None)
    assert to_sample(a, missing, 100).node is None and to_sample(a, missing, 100).kubepods is None
