"""The memory guard and the I/O controller on a real cgroup v2 kernel (the lane's VM, or a v2 host), written
through the executor on a kubelet-shaped tree (tests/fixtures/cgroup_v2.py) and a loop disk (ext4,
tests/fixtures/blockdev.py):

- memory: dd leaves page cache of a file on the loop disk charged to an offline pod (hence to the BestEffort root);
  the guard, given a deficit (free = low watermark + margin - 32 MiB), sets the root's `memory.high` to what it
  uses - 32 MiB, and the kernel reclaims the clean page cache down to it at the write (dirty pages are written
  back first: dd syncs); with an online memory wait the guard's one-shot
  `memory.reclaim` (never journaled) takes its step of page cache more; `restore` puts `memory.high` back to max;
- I/O: the controller (agent.decide.iopressure) steps on the offline pod's real rate (io.stat, agent.sense.iowait)
  and a given online wait: over the target the limit is half the rate it measured and a direct writer is held
  there (`io.max` on the pod level); calm and no longer binding, the limit is lifted and the writer runs free.

The online waits are given, not provoked: a reliable I/O stall of an online pod under TCG is not reproducible;
the waits' sensing is unit-tested on the kernel's file formats (tests/unit/agent/test_iopressure.py). Figures are
recorded as properties and printed (`pytest -s`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import Journal
from agent.cgroups.fs import FileReader
from agent.config_ioqos import IoQosConfig, TierIoConfig
from agent.config_memqos import TierMemoryConfig
from agent.decide.iopressure import IoLimit, IoSignal, effective, step
from agent.decide.ioqos import io_max_line
from agent.decide.memguard import TierGroup, guard, tier_groups
from agent.decide.ops import SetCgroupValue
from agent.model import NodeMemory
from agent.sense.iowait import OfflineRates
from agent.sense.meminfo import group_memory, node_memory
from tests.fixtures.blockdev import LoopDisk, dd, loop_disk, skip_reason
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.fixtures.cgroups import MiB
from tests.fixtures.vm import in_vm
from tests.integration.agent.test_real_cgroups import report

pytestmark = [pytest.mark.cgroup_v2]

OFFLINE = "0a1b2c3d-0000-4000-8000-00000000f203"


@pytest.fixture
def disk() -> Iterator[LoopDisk]:
    reason = skip_reason()
    if reason:
        if in_vm():
            pytest.fail(f"inside the cgroup v2 VM, but: {reason}")
        pytest.skip(reason)
    with loop_disk(256) as d:
        yield d


def _memory(path: str) -> int:
    with open(os.path.join(path, "memory.current")) as f:
        return int(f.read())


def test_memory_guard_high_and_reclaim_on_the_besteffort_root(
    real_cgroup_v2: RealCgroupV2Tree, disk: LoopDisk, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    tree = real_cgroup_v2
    tree.add_pod(OFFLINE, "BestEffort", {"job": "containerd://" + "b" * 64})
    job = [tree.pods[OFFLINE].containers["job"].cpu]
    # written back before the guard acts (conv=fsync): dirty pages are not reclaimed at the write, they are written
    # back first (measured in this VM: without it memory.current stayed at 107 MiB over a 75 MiB memory.high)
    dd(job, "if=/dev/zero", f"of={os.path.join(disk.mount, 'cache')}", "bs=1M", "count=96", "conv=fsync")
    be = tree.layout.qos("BestEffort")
    reader = FileReader()
    mem = node_memory(reader)
    found = group_memory(reader, be)
    assert mem is not None and mem.low_watermark > 0 and found is not None
    _used, cache, current = found
    assert cache >= 64 * MiB and current is None, found
    cfg = TierMemoryConfig(margin=64 * MiB, reclaim_step=16 * MiB)
    deficit = NodeMemory(mem.low_watermark + cfg.margin - 32 * MiB, mem.available, mem.low_watermark)
    groups, _ = tier_groups([], be, {be.memory: found})
    (limit,) = guard(deficit, groups, None, "v2", cfg).limits
    journal = Journal(str(tmp_path / "journal.json"), fsync=False)
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    try:
        _guard_and_reclaim(writer, be.memory, groups, deficit, limit.limit, cfg, record_property)
    finally:
        back = writer.restore_all()
    assert not back.failed and not back.skipped, back
    with open(os.path.join(be.memory, "memory.high")) as f:
        assert f.read().strip() == "max"


def _guard_and_reclaim(
    writer: CgroupWriter,
    root: str,
    groups: list[TierGroup],
    deficit: NodeMemory,
    high: int,
    cfg: TierMemoryConfig,
    record_property: pytest.RecordProperty,
) -> None:
    used = groups[0].used
    result = writer.apply([SetCgroupValue(root, "memory.high", str(high), None, "the memory guard")])
    assert not result.failed and not result.invalid, result
    held = _memory(root)
    report(f"memory.high {high / MiB:.0f} MiB (used {used / MiB:.0f}): memory.current {held / MiB:.0f} MiB")
    assert held <= high
    # the online pods stall on memory: the step is reclaimed now, and memory.high holds at what the root uses
    now = group_memory(FileReader(), groups[0].dirs)
    assert now is not None
    (again,) = guard(deficit, [replace(groups[0], used=now[0], cache=now[1])], 0.5, "v2", cfg).limits
    assert again.reclaim == 16 * MiB
    shot = writer.apply([SetCgroupValue(root, "memory.reclaim", str(again.reclaim), None, again.reason)])
    assert not shot.failed and not shot.invalid, shot
    after = _memory(root)
    report(f"memory.reclaim {again.reclaim / MiB:.0f} MiB: memory.current {held / MiB:.0f} -> {after / MiB:.0f} MiB")
    record_property("memory_guard_mib", {"used": used / MiB, "high": high / MiB, "held": held / MiB,
                                         "after_reclaim": after / MiB})  # fmt: skip
    assert after <= held - 12 * MiB  # the step, give or take what the kernel charged meanwhile
    assert writer.journal is not None and len(writer.journal.knobs) == 1  # memory.high only: reclaim is a one-shot


def test_io_limit_follows_the_online_wait_with_a_real_writer(
    real_cgroup_v2: RealCgroupV2Tree, disk: LoopDisk, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    tree = real_cgroup_v2
    tree.add_pod(OFFLINE, "BestEffort", {"job": "containerd://" + "b" * 64})
    pod = tree.pods[OFFLINE].dirs
    job = [tree.pods[OFFLINE].containers["job"].cpu]
    # a quarter, not tier.io's default half: the loop disk's own rate swings by a third between two runs of dd
    # (CI: 75.7 then 48.2 MiB/s), so "lifted" must clear the limit by more than that swing
    cfg = TierIoConfig(online_wait_target=0.1, min_bps=MiB, max_bps=0, raise_step=MiB, decrease=0.25)
    rates = OfflineRates(FileReader())
    rates.read({"batch/crunch": pod}, [disk.number], 0.0)
    free = dd(job, "if=/dev/zero", f"of={os.path.join(disk.mount, 'free')}", "bs=1M", "count=32", "oflag=direct")
    peak = rates.read({"batch/crunch": pod}, [disk.number], free.seconds)
    assert peak is not None and peak > 0
    # the online pods wait: the limit is a quarter of the rate the offline pod was measured at
    tight = step(IoLimit(None), IoSignal(0.5, "given", peak), cfg)
    assert tight.bps is not None and tight.bps == max(MiB, int(peak * 0.25))
    io = effective(IoQosConfig(offline_read_iops=0, offline_write_iops=0), tight)
    line = io_max_line(disk.number, io)
    assert line is not None
    journal = Journal(str(tmp_path / "journal.json"), fsync=False)
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    assert not writer.apply([SetCgroupValue(pod.cpu, "io.max", line, None, tight.rule)]).failed
    mib = max(2, 2 * tight.bps // MiB)  # about 2 s at the limit
    held = dd(job, "if=/dev/zero", f"of={os.path.join(disk.mount, 'held')}", "bs=1M", f"count={mib}", "oflag=direct")
    report(f"unlimited {free}; limit {tight.bps / MiB:.1f} MiB/s: {held}")
    assert held.rate <= tight.bps * 1.3
    # calm, and the writer moved under half of it: the limit is lifted, the line goes back to no rule
    lifted = step(tight, IoSignal(0.0, "given", tight.bps * 0.1), cfg)
    assert lifted.bps is None
    none = io_max_line(disk.number, effective(IoQosConfig(offline_read_iops=0, offline_write_iops=0), lifted))
    assert none is None
    back = writer.restore_all()  # what the daemon does for a line the plan no longer lists
    assert not back.failed and not journal.knobs
    assert disk.number not in tree.read(pod.cpu, "io.max")  # the kernel holds no rule for the disk
    after = dd(job, "if=/dev/zero", f"of={os.path.join(disk.mount, 'after')}", "bs=1M", "count=32", "oflag=direct")
    report(f"lifted: {after}")
    record_property("io_controller_mib_s", {"unlimited": free.rate / MiB, "limit": tight.bps / MiB,
                                            "held": held.rate / MiB, "lifted": after.rate / MiB})  # fmt: skip
    assert after.rate > tight.bps * 1.3
