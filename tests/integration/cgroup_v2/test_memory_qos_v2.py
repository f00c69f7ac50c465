"""Memory QoS on a real cgroup v2 kernel: the mechanisms DESIGN.md's memory QoS relies on, with the
agent's executor writing `oom_score_adj` and `memory.high`.

- Under a real OOM inside a capped parent (kubepods `memory.max`), the kernel kills the offline process
  (`oom_score_adj=1000`), not the online one, even when the online one is the larger.
- With online memory protected (`memory.low` on the pod AND on its ancestors below the reclaim root:
  cgroup v2 protection is hierarchical, a child gets at most what its parent is given) and offline
  memory capped (`memory.high`), a memory hog in an offline group is reclaimed and throttled while the
  online group keeps its protected memory. Without the cap, protection alone did not hold here (an
  xfail below records the figures). Reclaiming anonymous memory needs swap: inside the lane's VM
  a zram swap device is set up for these tests (the VM is thrown away afterwards).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.decide.ops import SetCgroupValue, SetProcessValue
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.fixtures.cgroups import MiB, RealProcess
from tests.fixtures.vm import in_vm
from tests.integration.agent.test_real_cgroups import report

pytestmark = [pytest.mark.cgroup_v2]

ONLINE = "0a1b2c3d-0000-4000-8000-00000000a001"
OFFLINE = "0a1b2c3d-0000-4000-8000-00000000b002"


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def memory(tree: RealCgroupV2Tree, d: str, name: str = "memory.current") -> int:
    return int(tree.read(d, name))


def events(tree: RealCgroupV2Tree, d: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in tree.read(d, "memory.events").splitlines())}


def offline_oom_first(tree: RealCgroupV2Tree) -> Callable[[RealProcess], None]:
    """The agent's process write for an offline pod, through its executor, before the process allocates."""

    def apply(proc: RealProcess) -> None:
        result = CgroupWriter(None, roots=[tree.kubepods.cpu]).apply(
            [], [SetProcessValue(proc.pid, "oom_score_adj", "1000")]
        )
        assert not result.failed and not result.invalid, (result.failed, result.invalid)

    return apply


def test_oom_in_a_capped_parent_kills_the_offline_process(real_cgroup_v2: RealCgroupV2Tree) -> None:
    tree = real_cgroup_v2
    tree.add_pod(ONLINE, "Burstable", {"app": "containerd://" + "a" * 64}, cpu_request_milli=500)
    tree.add_pod(OFFLINE, "BestEffort", {"job": "containerd://" + "b" * 64})
    tree.write(tree.kubepods, "memory.max", 200 * MiB)
    online = tree.start_process(ONLINE, "app", memory_bytes=130 * MiB, busy=False)
    wait_until(lambda: memory(tree, tree.pods[ONLINE].dirs.memory) >= 128 * MiB, 120, "the online pod's 130 MiB")
    # the offline process is the SMALLER one: without oom_score_adj the kernel would kill the online one
    offline = tree.start_process(OFFLINE, "job", memory_bytes=90 * MiB, busy=False, before_work=offline_oom_first(tree))
    wait_until(lambda: offline.popen.poll() is not None, 120, "the OOM kill inside kubepods")
    assert offline.popen.returncode == -9
    time.sleep(0.5)
    assert online.popen.poll() is None, "the online process must survive the OOM"
    assert events(tree, tree.kubepods.memory)["oom_kill"] >= 1


@pytest.fixture
def swap() -> Iterator[None]:
    """Swap for anonymous-memory reclaim: a zram device inside the lane's VM; elsewhere the host's own."""
    with open("/proc/swaps") as f:
        if len(f.read().splitlines()) > 1:
            yield
            return
    if not in_vm():
        pytest.skip("no swap on this host: anonymous memory cannot be reclaimed (the VM lane sets up zram)")
    subprocess.run(["modprobe", "zram", "num_devices=1"], check=True)
    with open("/sys/block/zram0/disksize", "w") as f:
        f.write("1G")
    subprocess.run(["mkswap", "/dev/zram0"], check=True, capture_output=True)
    subprocess.run(["swapon", "/dev/zram0"], check=True)
    try:
        yield
    finally:
        subprocess.run(["swapoff", "/dev/zram0"], check=False)
        with open("/sys/block/zram0/reset", "w") as f:  # free the device for the next test's swap
            f.write("1")


def protect_online(tree: RealCgroupV2Tree, file: str, value: int) -> None:
    """`memory.low`/`memory.min` through the executor on the online pod and every ancestor below the
    reclaim root (kubepods): v2 protection is hierarchical, a child is protected only as far as its parent is."""
    dirs = (tree.layout.qos("Burstable").memory, tree.pods[ONLINE].dirs.memory)
    result = CgroupWriter(None, roots=[tree.kubepods.cpu]).apply([SetCgroupValue(d, file, str(value)) for d in dirs])
    assert not result.failed and not result.invalid, (result.failed, result.invalid)
    assert [tree.read(d, file) for d in dirs] == [str(value)] * 2


def start_online_and_hog(tree: RealCgroupV2Tree) -> tuple[RealProcess, RealProcess]:
    """The online pod's 150 MiB first (its pages are then the oldest: plain LRU would take them first),
    then an offline hog wanting 300 MiB inside a kubepods capped at 256 MiB."""
    on, off = tree.pods[ONLINE].dirs.memory, tree.pods[OFFLINE].dirs.memory
    online = tree.start_process(ONLINE, "app", memory_bytes=150 * MiB, busy=False)
    wait_until(lambda: memory(tree, on) >= 148 * MiB, 120, "the online pod's 150 MiB")
    hog = tree.start_process(OFFLINE, "job", memory_bytes=300 * MiB, busy=False, before_work=offline_oom_first(tree))
    wait_until(
        lambda: memory(tree, off) + memory(tree, off, "memory.swap.current") >= 295 * MiB,
        300,
        "the hog to touch its 300 MiB",
    )
    return online, hog


def two_pods(tree: RealCgroupV2Tree) -> tuple[str, str]:
    tree.add_pod(ONLINE, "Burstable", {"app": "containerd://" + "a" * 64}, cpu_request_milli=500)
    tree.add_pod(OFFLINE, "BestEffort", {"job": "containerd://" + "b" * 64})
    tree.write(tree.kubepods, "memory.max", 256 * MiB)  # the reclaim root
    return tree.pods[ONLINE].dirs.memory, tree.pods[OFFLINE].dirs.memory


def test_offline_hog_is_capped_while_online_keeps_its_protected_memory(
    swap: None, real_cgroup_v2: RealCgroupV2Tree, record_property: pytest.RecordProperty
) -> None:
    """DESIGN.md's memory QoS: online `memory.low`, offline `memory.high` at all times (written by the
    executor). The hog is reclaimed within its own group and throttled; kubepods never reaches its
    limit, so the online pod keeps every page."""
    tree = real_cgroup_v2
    on, off = two_pods(tree)
    protect_online(tree, "memory.low", 160 * MiB)
    result = CgroupWriter(None, roots=[tree.kubepods.cpu]).apply([SetCgroupValue(off, "memory.high", str(80 * MiB))])
    assert not result.failed and not result.invalid
    online, hog = start_online_and_hog(tree)
    online_current, online_swapped = memory(tree, on), memory(tree, on, "memory.swap.current")
    hog_current, hog_swapped = memory(tree, off), memory(tree, off, "memory.swap.current")
    report(
        f"v2 memory QoS: online {online_current / MiB:.0f} MiB resident ({online_swapped / MiB:.1f} swapped); "
        f"offline hog {hog_current / MiB:.0f} MiB resident, {hog_swapped / MiB:.0f} MiB swapped"
    )
    record_property("online_resident_mib", round(online_current / MiB, 1))
    record_property("offline_resident_mib", round(hog_current / MiB, 1))
    assert online.popen.poll() is None and hog.popen.poll() is None
    assert online_current >= 145 * MiB and online_swapped <= 2 * MiB
    assert hog_current <= 84 * MiB and hog_swapped >= 200 * MiB
    assert events(tree, off)["high"] > 0 and events(tree, off)["oom_kill"] == 0


@pytest.mark.xfail(
    reason="measured in the VM (6.1, zram swap): with kubepods as the reclaim root and an uncapped offline hog, "
    "the online pod fell to 13 MiB resident with memory.min=160 MiB (23 MiB with memory.low) on it and on "
    "kubepods/burstable; the offline memory.high cap (the test above) is what keeps online memory "
    "(strict: a kernel that honours memory.min here turns this into a failure to look at)",
    strict=True,
)
def test_memory_min_holds_against_an_uncapped_hog(
    swap: None, real_cgroup_v2: RealCgroupV2Tree, record_property: pytest.RecordProperty
) -> None:
    """Without the offline cap, kubepods itself is reclaimed: `memory.min` should be the hard guarantee."""
    tree = real_cgroup_v2
    on, off = two_pods(tree)
    protect_online(tree, "memory.min", 160 * MiB)
    online, hog = start_online_and_hog(tree)
    online_current, online_swapped = memory(tree, on), memory(tree, on, "memory.swap.current")
    hog_swapped = memory(tree, off, "memory.swap.current")
    report(f"v2 memory.min: online {online_current / MiB:.0f} MiB resident; hog {hog_swapped / MiB:.0f} MiB swapped")
    record_property("online_resident_mib", round(online_current / MiB, 1))
    assert online.popen.poll() is None and hog.popen.poll() is None
    assert online_current >= 145 * MiB and online_swapped <= 2 * MiB
    assert hog_swapped >= 40 * MiB
