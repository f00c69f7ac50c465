"""Memory QoS on a real cgroup v2 kernel, driven by the AGENT's plan (`tidemark-agent plan` on the tree, its
memory writes applied through the executor), as docs/design.md, "Memory QoS" states it.

- Under a real OOM inside a capped parent (kubepods `memory.max`), the kernel kills the offline process
  (`oom_score_adj=1000`), not the online one, even when the online one is the larger.
- With the online pod protected (`memory.low` from its request on the pod, on its container and the sums on
  `kubepods/burstable` and `kubepods`) and the offline pod capped (`memory.high` = allocatable x
  capacity.ratio.memory x memoryQoS.highRatio), a memory hog in the offline group is reclaimed and throttled
  while the online group keeps its protected memory.
- With `memory.min` (memoryQoS.minRatio 1) and NO offline cap, the online pod still keeps its memory while
  kubepods itself is reclaimed at its limit. This failed (13-23 MiB left) while protection was written on the
  pod and burstable only: a child cgroup with no protection of its own gets none of its parent's unless
  cgroup2 is mounted with memory_recursiveprot, and the process lives in the container's group. The plan
  writes the container level too.
Reclaiming anonymous memory needs swap: inside the lane's VM a zram swap device is set up for these tests
(the VM is thrown away afterwards).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.cli import main
from agent.decide.ops import SetCgroupValue, SetProcessValue
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.fixtures.cgroups import MiB, RealProcess
from tests.fixtures.vm import in_vm
from tests.integration.agent.test_real_cgroups import report
from tidemark.clock import SystemClock

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


CLUSTER = """\
kind: Node
metadata:
  name: n1
  labels: {{volcano.sh/colocation: "true"}}
status:
  allocatable: {{cpu: "2", memory: 256Mi, pods: "110"}}
---
kind: Pod
metadata: {{name: web, namespace: shop, uid: {online}, creationTimestamp: "2024-01-01T00:00:00Z"}}
spec:
  nodeName: n1
  containers: [{{name: app, resources: {{requests: {{cpu: 500m, memory: 160Mi}}}}}}]
status: {{qosClass: Burstable, containerStatuses: [{{name: app, containerID: "containerd://{a}"}}]}}
---
kind: Pod
metadata:
  name: hog
  namespace: batch
  uid: {offline}
  annotations: {{volcano.sh/qos-level: BE}}
  creationTimestamp: "2024-01-01T01:00:00Z"
spec:
  nodeName: n1
  containers: [{{name: job}}]
status: {{qosClass: BestEffort, containerStatuses: [{{name: job, containerID: "containerd://{b}"}}]}}
"""


def agent_memory_plan(
    tree: RealCgroupV2Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str
) -> list[SetCgroupValue]:
    """`tidemark-agent plan` on the tree (the node's 256Mi allocatable = kubepods' limit): its memory writes. The
    offline tier's memory guard is off (its own test: test_tier_v2.py): these tests are about per-pod memory QoS,
    and the guard's limit on the BestEffort root follows the VM's free memory."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER.format(online=ONLINE, offline=OFFLINE, a="a" * 64, b="b" * 64))
    conf = tmp_path / "agent.yaml"
    conf.write_text(config + "tier: {memory: {enabled: false}}\n")
    argv = ["plan", "--node-name", "n1", "--cluster", str(cluster), "--config", str(conf)]
    argv += ["--kube-cgroup-root", tree.kube_cgroup_root, "--samples", "1", "--interval", "0.2", "-o", "json"]
    rc = main(argv, clock=SystemClock())
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    return [
        SetCgroupValue(w["path"], w["file"], w["value"])
        for w in doc["cgroup_writes"]
        if w["file"].startswith("memory.")
    ]


def apply(tree: RealCgroupV2Tree, writes: list[SetCgroupValue]) -> None:
    result = CgroupWriter(None, roots=[tree.kubepods.cpu]).apply(writes)
    assert not result.failed and not result.invalid and len(result.applied) == len(writes), result
    for w in writes:
        assert tree.read(w.path, w.file) == w.value, w


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


def protected_dirs(tree: RealCgroupV2Tree) -> list[str]:
    online = tree.pods[ONLINE]
    return [
        online.dirs.memory,
        online.containers["app"].memory,
        tree.layout.qos("Burstable").memory,
        tree.kubepods.memory,
    ]


def test_offline_hog_is_capped_while_online_keeps_its_protected_memory(
    swap: None,
    real_cgroup_v2: RealCgroupV2Tree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
) -> None:
    """The agent's plan: online `memory.low` 160Mi (its request x lowRatio 1) on the pod, its container and both
    ancestors; the offline pod's `memory.high` = 256Mi x capacity.ratio.memory 0.35 x highRatio 0.9 = 80.6 MiB.
    The hog is reclaimed within its own group and throttled; the online pod keeps every page."""
    tree = real_cgroup_v2
    on, off = two_pods(tree)
    writes = agent_memory_plan(tree, tmp_path, capsys, "capacity: {ratio: {memory: 0.35}}\n")
    high = str(int(256 * MiB * 0.35 * 0.9) // 4096 * 4096)
    assert {(w.path, w.file): w.value for w in writes} == {
        (off, "memory.high"): high,
        **{(d, "memory.low"): str(160 * MiB) for d in protected_dirs(tree)},
    }
    apply(tree, writes)
    online, hog = start_online_and_hog(tree)
    online_current, online_swapped = memory(tree, on), memory(tree, on, "memory.swap.current")
    hog_current, hog_swapped = memory(tree, off), memory(tree, off, "memory.swap.current")
    report(
        f"v2 memory QoS (agent plan, offline capped): online {online_current / MiB:.0f} MiB resident "
        f"({online_swapped / MiB:.1f} swapped); offline hog {hog_current / MiB:.0f} MiB resident, "
        f"{hog_swapped / MiB:.0f} MiB swapped"
    )
    record_property("online_resident_mib", round(online_current / MiB, 1))
    record_property("offline_resident_mib", round(hog_current / MiB, 1))
    record_property("online_swapped_mib", round(online_swapped / MiB, 1))
    record_property("offline_swapped_mib", round(hog_swapped / MiB, 1))
    assert online.popen.poll() is None and hog.popen.poll() is None
    assert online_current >= 145 * MiB and online_swapped <= 2 * MiB
    assert hog_current <= int(high) + 4 * MiB and hog_swapped >= 200 * MiB
    assert events(tree, off)["high"] > 0 and events(tree, off)["oom_kill"] == 0

    # kubepods now past the memory high watermark minus pressureMargin (60 - 5 % of 256Mi): the next plan
    # lowers the hog's memory.high toward its working set (x pressureHighRatio 0.8), before any eviction
    squeeze = "capacity: {ratio: {memory: 0.35}}\nmemoryQoS: {pressureHighRatio: 0.8}\n"
    again = agent_memory_plan(tree, tmp_path, capsys, squeeze)
    assert [(w.path, w.file) for w in again] == [(off, "memory.high")], again
    tight = int(again[0].value)
    assert tight <= 0.8 * (int(high) + 4 * MiB)
    apply(tree, again)
    time.sleep(2)
    report(f"v2 memory pressure: the hog's memory.high {int(high) / MiB:.1f} -> {tight / MiB:.1f} MiB")
    record_property("pressure_high_mib", round(tight / MiB, 1))
    assert hog.popen.poll() is None and online.popen.poll() is None
    assert memory(tree, off) <= tight + 4 * MiB and memory(tree, on) >= 145 * MiB


def test_memory_min_holds_against_an_uncapped_hog(
    swap: None,
    real_cgroup_v2: RealCgroupV2Tree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
) -> None:
    """Only the plan's protection (memoryQoS.minRatio 1: `memory.min` 160Mi on the pod, its container, burstable
    and kubepods), no offline cap: kubepods itself is reclaimed at its 256 MiB and the hard guarantee holds."""
    tree = real_cgroup_v2
    on, off = two_pods(tree)
    writes = agent_memory_plan(tree, tmp_path, capsys, "memoryQoS: {minRatio: 1.0}\n")
    protection = [w for w in writes if w.file in ("memory.min", "memory.low")]
    assert {(w.path, w.file): w.value for w in protection} == {
        (d, f): str(160 * MiB) for d in protected_dirs(tree) for f in ("memory.min", "memory.low")
    }
    apply(tree, protection)
    assert tree.read(off, "memory.high") == "max"
    online, hog = start_online_and_hog(tree)
    online_current, online_swapped = memory(tree, on), memory(tree, on, "memory.swap.current")
    hog_swapped = memory(tree, off, "memory.swap.current")
    report(
        f"v2 memory.min (agent plan, no offline cap): online {online_current / MiB:.0f} MiB resident; "
        f"hog {hog_swapped / MiB:.0f} MiB swapped"
    )
    record_property("online_resident_mib", round(online_current / MiB, 1))
    record_property("online_swapped_mib", round(online_swapped / MiB, 1))
    record_property("offline_swapped_mib", round(hog_swapped / MiB, 1))
    assert online.popen.poll() is None and hog.popen.poll() is None
    assert online_current >= 145 * MiB and online_swapped <= 2 * MiB
    assert hog_swapped >= 40 * MiB


def test_reference_without_the_container_level_memory_min_does_not_hold(
    swap: None,
    real_cgroup_v2: RealCgroupV2Tree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
) -> None:
    """The A/B reference of the test above, in the same VM: the same plan's `memory.min` WITHOUT the container
    level (pod, burstable and kubepods only, as before the container level was written). The process lives in
    the container's group, which has no protection of its own, and without memory_recursiveprot it gets none
    of its parent's: the online pod loses its pages. If a kernel ever protects it here, this fails and the
    docs' reason for the container level needs a look."""
    tree = real_cgroup_v2
    on, _ = two_pods(tree)
    writes = agent_memory_plan(tree, tmp_path, capsys, "memoryQoS: {minRatio: 1.0}\n")
    container = tree.pods[ONLINE].containers["app"].memory
    protection = [w for w in writes if w.file in ("memory.min", "memory.low") and w.path != container]
    assert len(protection) == 6
    apply(tree, protection)
    online, hog = start_online_and_hog(tree)
    online_current = memory(tree, on)
    report(f"v2 memory.min without the container level: online {online_current / MiB:.0f} MiB resident")
    record_property("online_resident_mib", round(online_current / MiB, 1))
    assert online.popen.poll() is None and hog.popen.poll() is None
    assert online_current < 145 * MiB
