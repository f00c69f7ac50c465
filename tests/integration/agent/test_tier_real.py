"""The offline tier's control loop on the machine's real cgroup v1 hierarchy: sense (each pod's `cpuacct.usage`, the
online pod's task run delay from /proc/<tid>/schedstat), decide (agent.decide.tier, then the QoS plan), act (the one
executor writing the BestEffort root's `cpu.cfs_quota_us`), every half second, through an online spike.

A kubelet-like tree (tests/fixtures/cgroups.py) with 2 allocatable cores: an offline BestEffort pod busy on both
CPUs, an online Burstable pod idle, then spinning on CPU 0, then idle again. Asserted: the ceiling falls under the
spike within two periods, the online pod's measured CPU wait is read, the ceiling rises again after the spike a step
a period and the offline pod resumes; `restore` puts the root's quota back. The trace is printed (`pytest -s`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import Journal
from agent.cgroups.fs import FileReader
from agent.config import QosConfig
from agent.config_tier import TierConfig
from agent.decide.qos import QosInputs, plan_qos
from agent.decide.tier import CpuInputs, decide_cpu
from agent.model import Amounts, ContainerView, PodView
from agent.sense.onlinewait import OnlineWaitSensor, schedstat
from agent.sense.procfs import ProcFS
from agent.sense.snapshot import resolve_pod_cgroups, sense_cgroups
from tests.fixtures.cgroups import RealCgroupV1Tree, RealProcess
from tests.integration.agent.test_real_cgroups import report
from tidemark.apis import PodUID

pytestmark = [pytest.mark.cgroup]

OFFLINE = "0a1b2c3d-0000-4000-8000-00000000e501"
ONLINE = "0a1b2c3d-0000-4000-8000-00000000e502"
PERIOD = 0.5
CFG = TierConfig(period=PERIOD)
#: the bound with nothing else running: allocatable (2 cores) x the shipped suppress ratio
BOUND = 2000 * CFG.suppress_ratio


def views() -> list[PodView]:
    return [
        PodView(PodUID(OFFLINE), "batch", "job", -1, "BestEffort",
                containers=(ContainerView("job", "containerd://" + "e" * 64),)),
        PodView(PodUID(ONLINE), "web", "app", 0, "Burstable", requests=Amounts(500, 0),
                containers=(ContainerView("app", "containerd://" + "f" * 64),)),
    ]  # fmt: skip


def test_the_tier_loop_follows_an_online_spike_on_the_real_kernel(
    real_cgroup_v1: RealCgroupV1Tree, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    tree = real_cgroup_v1
    tree.add_pod(OFFLINE, "BestEffort", {"job": "containerd://" + "e" * 64})
    tree.add_pod(ONLINE, "Burstable", {"app": "containerd://" + "f" * 64}, cpu_request_milli=500)
    jobs = [tree.start_process(OFFLINE, "job", cpu=c) for c in (0, 1)]
    pods = views()
    by_uid = {p.uid: p for p in pods}
    reader = FileReader()
    cgroups = resolve_pod_cgroups(tree.layout, pods)
    dirs = {uid: pc.pod for uid, pc in cgroups.items()}
    waits = OnlineWaitSensor(reader)
    writer = CgroupWriter(Journal(str(tmp_path / "journal.json"), fsync=False), roots=tree.kubepods.distinct())
    root = tree.layout.qos("BestEffort").cpu
    last: dict[PodUID, tuple[float, int]] = {}
    ceiling: float | None = None
    trace: list[tuple[float, str, int, int, float | None, float | None]] = []
    t0 = time.monotonic()

    def quota() -> str:
        return (reader.read(os.path.join(root, "cpu.cfs_quota_us")) or "").strip()

    def usage() -> dict[PodUID, Amounts]:
        out: dict[PodUID, Amounts] = {}
        for uid, d in dirs.items():
            ns = int(reader.read(os.path.join(d.cpuacct, "cpuacct.usage")) or 0)
            now = time.monotonic()
            before = last.get(uid)
            last[uid] = (now, ns)
            if before is not None:
                out[uid] = Amounts((ns - before[1]) / 1e6 / (now - before[0]), 0)
        return out

    def period(phase: str) -> float:
        nonlocal ceiling
        time.sleep(PERIOD)
        used = usage()
        wait = waits.read(by_uid, dirs, time.time())
        online = used.get(PodUID(ONLINE), Amounts()).cpu
        offline = used.get(PodUID(OFFLINE), Amounts()).cpu
        tier = decide_cpu(ceiling, pods, CpuInputs(2000, online, 0.0, offline, wait), used, CFG, 20.0)
        ceiling = tier.ceiling
        state = sense_cgroups(tree.layout, pods, cgroups, reader, ProcFS("/proc", reader))
        writes, _, _ = plan_qos(pods, state, QosInputs(tier), QosConfig(vendor_knobs=False))
        result = writer.apply(writes)
        assert not result.failed and not result.invalid, result
        ratio = round(wait.ratio, 3) if wait and wait.ratio is not None else None
        delay = round(wait.delay_ms, 3) if wait and wait.delay_ms is not None else None
        trace.append((round(time.monotonic() - t0, 1), phase, round(online), round(tier.ceiling), ratio, delay))
        return tier.ceiling

    for _ in range(6):
        calm = period("calm")
    # written through the executor (to the microsecond: the split's float sum may land a hair under the ceiling)
    assert abs(int(quota()) - int(calm * 100)) <= 1, (quota(), calm)
    spike: RealProcess = tree.start_process(ONLINE, "app", cpu=0)
    spiked = [period("spike") for _ in range(4)]
    spike.popen.kill()
    spike.popen.wait()
    after = [period("after") for _ in range(6)]
    o0 = sum(j.cpu_seconds() for j in jobs)
    time.sleep(1.0)
    resumed = (sum(j.cpu_seconds() for j in jobs) - o0) * 1000
    report(f"tier loop on real v1 cgroups (s, phase, online m, ceiling m, online wait, ms per slice): {trace}; offline "
           f"{resumed:.0f}m after")
    record_property("tier_trace", str(trace))
    # the spike's first full period: the ceiling falls at once to the bound, allocatable x ratio - what it used (the
    # shared machine decides how much CPU the spike gets; it got some)
    first = next(t for t in trace if t[1] == "spike")
    assert first[2] >= 50 and first[3] <= max(100, BOUND - first[2]) + 1, trace
    assert any(t[4] is not None for t in trace if t[1] == "spike"), trace
    # this kernel's schedstat counts the run slices the delay per slice (the shipped signal) is taken over
    own = schedstat(reader.read("/proc/self/schedstat") or "")
    assert own is not None and own[2] > 0, own
    # after it, a step (0.1 x 2 cores) a period at most, and up again
    ups = [b - a for a, b in zip([spiked[-1], *after], after)]
    assert max(ups) <= 200 + 1e-6 and (after[-1] >= min(spiked) + 400 or after[-1] == BOUND), trace
    assert resumed >= 100, f"the offline pod resumed at only {resumed:.0f}m"
    restored = writer.restore_all()
    assert not restored.failed and quota() == "-1"
