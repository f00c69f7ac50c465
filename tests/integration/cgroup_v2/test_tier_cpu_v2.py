"""The offline tier's CPU ceiling on a real cgroup v2 kernel (the lane's VM, or a v2 host): the QoS plan puts the
tier's quota on the BestEffort root as `cpu.max`, the executor writes it (validated, journaled), the kernel holds a
busy offline pod to it, the online pod's `cpu.pressure` is what the tier's feedback reads (agent/sense/onlinewait.py),
and `restore` puts `max` back. Under QEMU's TCG only ratios are asserted, never absolute times.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import Journal
from agent.cgroups.fs import FileReader
from agent.config import QosConfig
from agent.decide.qos import QosInputs, plan_qos
from agent.decide.tier import CpuCeiling, TierCpu
from agent.model import ContainerView, PodView
from agent.sense.onlinewait import OnlineWaitSensor, schedstat, v1_tids
from agent.sense.procfs import ProcFS
from agent.sense.snapshot import resolve_pod_cgroups, sense_cgroups
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.integration.agent.test_real_cgroups import report
from tidemark.apis import PodUID

pytestmark = [pytest.mark.cgroup_v2]

OFFLINE = "0a1b2c3d-0000-4000-8000-00000000c301"
ONLINE = "0a1b2c3d-0000-4000-8000-00000000c302"


def views() -> list[PodView]:
    return [
        PodView(PodUID(OFFLINE), "batch", "job", -1, "BestEffort",
                containers=(ContainerView("job", "containerd://" + "c" * 64),)),
        PodView(PodUID(ONLINE), "web", "app", 0, "Burstable",
                containers=(ContainerView("app", "containerd://" + "d" * 64),)),
    ]  # fmt: skip


def test_the_tier_quota_on_the_besteffort_root_holds_the_offline_pod_and_restores(
    real_cgroup_v2: RealCgroupV2Tree, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    tree = real_cgroup_v2
    tree.add_pod(OFFLINE, "BestEffort", {"job": "containerd://" + "c" * 64})
    tree.add_pod(ONLINE, "Burstable", {"app": "containerd://" + "d" * 64}, cpu_request_milli=500)
    job = tree.start_process(OFFLINE, "job", cpu=0)
    app = tree.start_process(ONLINE, "app", cpu=0)
    pods = views()
    reader = FileReader()
    cgroups = resolve_pod_cgroups(tree.layout, pods)
    waits = OnlineWaitSensor(reader)
    dirs = {uid: pc.pod for uid, pc in cgroups.items()}
    by_uid = {p.uid: p for p in pods}
    waits.read(by_uid, dirs, time.time())
    slices = OnlineWaitSensor(reader)  # the delay per slice: the online pod's threads from cgroup.threads
    slices.read(by_uid, dirs, time.time(), "slice")
    state = sense_cgroups(tree.layout, pods, cgroups, reader, ProcFS("/proc", reader))
    assert "besteffort" in state.ancestors
    tier = TierCpu(CpuCeiling(200.0, 200.0, "bound", "test"), 200.0, {})
    writes, _, _ = plan_qos(pods, state, QosInputs(tier), QosConfig(vendor_knobs=False))
    root = tree.layout.qos("BestEffort").cpu
    assert [(w.path, w.file, w.value) for w in writes if w.file == "cpu.max"] == [(root, "cpu.max", "20000 100000")]
    journal = Journal(str(tmp_path / "journal.json"), fsync=False)
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    result = writer.apply(writes)
    assert not result.failed and not result.invalid, result
    assert tree.read(root, "cpu.max") == "20000 100000"
    j0, a0 = job.cpu_seconds(), app.cpu_seconds()
    t0 = time.monotonic()
    time.sleep(2.0)
    elapsed = time.monotonic() - t0
    held = (job.cpu_seconds() - j0) / elapsed
    online = (app.cpu_seconds() - a0) / elapsed
    wait = waits.read(by_uid, dirs, time.time())
    per_slice = slices.read(by_uid, dirs, time.time(), "slice")
    report(f"tier quota 200m on the BestEffort root: offline {held * 1000:.0f}m, online {online * 1000:.0f}m, "
           f"online CPU wait {wait.ratio if wait else None}, "
           f"delay per slice {per_slice.delay_ms if per_slice else None} ms")
    # v2 lists the online pod's threads in its containers' cgroup.threads, and this kernel's schedstat has the slices
    assert app.pid in v1_tids(reader, cgroups[PodUID(ONLINE)].pod.cpu, "cgroup.threads")
    own = schedstat(reader.read(f"/proc/{app.pid}/schedstat") or "")
    assert own is not None and own[2] > 0, own
    record_property("offline_milli_under_200m_tier", round(held * 1000))
    assert held <= 0.2 * 1.25, f"the offline pod used {held * 1000:.0f}m under a 200m tier quota"
    assert wait is not None and wait.source == "cpu.pressure" and 0.0 <= wait.ratio <= 1.0
    restored = writer.restore_all()
    assert not restored.failed, restored
    assert tree.read(root, "cpu.max") == "max 100000"
