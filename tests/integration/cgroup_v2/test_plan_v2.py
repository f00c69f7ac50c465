"""`tidemark-agent plan` on a real cgroup v2 kernel with real busy processes: the v2 twins of
tests/integration/agent/test_real_cgroups.py (which runs on this machine's cgroup v1).

A kubelet-shaped v2 tree (cgroupfs layout, kubelet's `cpu.weight` values) under a unique prefix; an
online and an offline pod run busy loops pinned to one CPU each (or both to CPU 0 for isolation),
moved into their container groups before they work. Truth is each process's own CPU time
(/proc/<pid>/schedstat) over exactly the sampler's window and the memory it allocated after the move.
Under QEMU's TCG everything runs about 10x slower: only ratios and relative errors are asserted.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.decide.ops import SetCgroupValue
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.fixtures.cgroups import MiB
from tests.integration.agent.test_real_cgroups import (
    NODE_MEASURE,
    OFFLINE_MEMORY,
    OFFLINE_UID,
    ONLINE_MEMORY,
    TruthClock,
    build,
    close,
    cluster_yaml,
    cpu_share,
    plan,
    report,
)
from tidemark.clock import SystemClock

pytestmark = [pytest.mark.cgroup_v2]


def test_usage_capacity_and_knobs_v2(
    real_cgroup_v2: RealCgroupV2Tree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
) -> None:
    tree = real_cgroup_v2
    online, offline = build(tree, offline_qos="Burstable", offline_cpu=1)  # type: ignore[arg-type]
    cluster = cluster_yaml(tmp_path / "c.yaml", allocatable_cpu="4", annotations={}, offline_qos="Burstable")
    clock = TruthClock((online, offline))
    doc = plan(tree, cluster, clock, capsys)  # type: ignore[arg-type]
    truth = clock.truth()
    usage = doc["usage"]
    for name, measured, true in (
        ("online_cpu", usage["online"]["cpu"], truth.online_cpu),
        ("offline_cpu", usage["offline"]["cpu"], truth.offline_cpu),
        ("online_memory", usage["online"]["memory"], ONLINE_MEMORY),
        ("offline_memory", usage["offline"]["memory"], OFFLINE_MEMORY),
    ):
        record_property(f"{name}_error_percent", round(100 * (measured - true) / true, 2) if true else None)
        report(f"v2 {name}: plan {measured:.0f} truth {true:.0f}")
    assert any(e.startswith("cgroup v2 under /sys/fs/cgroup") for e in doc["explanations"])
    # the sampler's PSI of the kubepods group (cpu.pressure, memory.pressure) reaches the plan
    psi = next(e for e in doc["explanations"] if e.startswith("kubepods pressure (PSI some avg10): "))
    assert re.fullmatch(r"kubepods pressure \(PSI some avg10\): cpu [0-9.]+ %, memory [0-9.]+ %", psi), psi
    # usage_usec (cpu.stat) against each process's own CPU time
    assert close(usage["online"]["cpu"], truth.online_cpu, 20)
    assert close(usage["offline"]["cpu"], truth.offline_cpu, 20)
    assert close(usage["cpu"], truth.online_cpu + truth.offline_cpu, 30)
    # working set = memory.current - inactive_file, against what each process allocated after its move;
    # v2's memory.current also charges kernel memory (page tables, slab): measured +5 to +6.4 MiB here
    assert close(usage["online"]["memory"], ONLINE_MEMORY, 8 * MiB)
    assert close(usage["offline"]["memory"], OFFLINE_MEMORY, 8 * MiB)
    assert usage["cpu_percent"] == pytest.approx(100 * usage["cpu"] / 4000, abs=0.05)

    line = next(e for e in doc["explanations"] if e.startswith("cpu: B = "))
    u_non = int(re.search(r"U_non (\d+)m", line).group(1))  # type: ignore[union-attr]
    # U_non comes from /proc/stat ticks; under TCG the guest loses timer ticks when its virtual CPUs
    # starve (measured 699m of machine usage against 946m in the online cgroup), so the v1 twin's 0.85 is 0.6
    assert u_non >= usage["online"]["cpu"] * 0.6
    b = doc["capacity"]["computed"]["B"]["cpu"]
    assert b == max(0, int(4000 * 0.70 - u_non))

    # the v2 knobs: cpu.idle and a cpu.max "<quota> <period>" for the offline pod, oom_score_adj
    pod_dir = tree.pods[OFFLINE_UID].dirs.cpu
    writes = {(w["path"], w["file"]): w["value"] for w in doc["cgroup_writes"]}
    assert writes[(pod_dir, "cpu.idle")] == "1"
    assert re.fullmatch(r"\d+ 100000", writes[(pod_dir, "cpu.max")])
    assert not any(f.startswith(("cpu.shares", "cpu.cfs_", "memory.limit_in_bytes")) for _, f in writes)
    assert all(w["path"].startswith(os.path.join(tree.cgroup_root, tree.prefix)) for w in doc["cgroup_writes"])
    assert {"pid": offline.pid, "file": "oom_score_adj", "value": "1000"} in doc["process_writes"]
    assert not any(p["pid"] == online.pid for p in doc["process_writes"])


def test_watermarks_evict_exactly_the_offline_pod_v2(
    real_cgroup_v2: RealCgroupV2Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = real_cgroup_v2
    online, offline = build(tree, offline_qos="Burstable", offline_cpu=1)  # type: ignore[arg-type]
    probe = cluster_yaml(tmp_path / "probe.yaml", allocatable_cpu="4", offline_qos="Burstable", annotations={})
    percent = plan(tree, probe, SystemClock(), capsys)["usage"]["cpu_percent"]  # type: ignore[arg-type]
    assert percent > 5, "the busy loops should use some CPU"
    # 2 %, not half the probe's figure: under TCG the guest's CPU time is what the host gives its vCPUs, which halved
    # between the two plans while the whole suite loaded the host (the probe read more than twice the second plan)
    high = 2
    over = cluster_yaml(
        tmp_path / "over.yaml",
        allocatable_cpu="4",
        offline_qos="Burstable",
        annotations={"volcano.sh/evicting-cpu-high-watermark": str(high), "volcano.sh/evicting-cpu-low-watermark": "0"},
    )
    doc = plan(tree, over, SystemClock(), capsys, NODE_MEASURE)  # type: ignore[arg-type]
    assert doc["evicting"]
    assert doc["evictions"] == [{"pod": "batch/crunch", "reason": "CPUHighWatermark"}]
    assert online.popen.poll() is None and offline.popen.poll() is None  # plan changes nothing


def apply_plan(tree: RealCgroupV2Tree, doc: dict) -> list[str]:  # type: ignore[type-arg]
    """The plan's CPU writes through the real executor (validation, safe order)."""
    writes = [
        SetCgroupValue(w["path"], w["file"], w["value"]) for w in doc["cgroup_writes"] if w["file"].startswith("cpu.")
    ]
    result = CgroupWriter(None, roots=[tree.kubepods.cpu]).apply(writes)
    assert not result.failed and not result.invalid, (result.failed, result.invalid)
    return [f"{o.file}={o.value}" for o in result.applied]


#: Measured in the lane's VM (Debian 6.1 under QEMU TCG, 2-core host): with the plan's knobs applied the
#: online loop got 94.8 % (BestEffort offline pod) and 98.5 % (Burstable, cpu.idle=1 + quota) of CPU 0
#: while the host's load average was about 3, but 57-87 % and 62-78 % while other jobs loaded it to 9-12
#: (TCG's virtual CPUs starve; 48 % -> 70 % once, with the real-node suite running beside it). The v1
#: host gives 99.6-100 % (tests/integration/agent). The test asserts 60 % and either 90 % or a gain of 10
#: points over the same pair without the knobs (about 50 %): it fails when the knobs do not work, and holds on a
#: loaded host (a BestEffort offline pod already starts near 80 %: kubelet gives besteffort weight 1, so
#: there the knobs must reach 90 %); the figures go to the report against the 90 % target.
ISOLATION_FLOOR_PERCENT = 60.0


@pytest.mark.parametrize("offline_qos", ["BestEffort", "Burstable"])
def test_isolation_knobs_land_and_converge_v2(
    real_cgroup_v2: RealCgroupV2Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str], offline_qos: str
) -> None:
    """The plan's CPU knobs apply through the executor on a real v2 kernel, and a second plan has none left."""
    tree = real_cgroup_v2
    build(tree, offline_qos=offline_qos, offline_cpu=0)  # type: ignore[arg-type]
    cluster = cluster_yaml(tmp_path / "c.yaml", allocatable_cpu="2", annotations={}, offline_qos=offline_qos)
    doc = plan(tree, cluster, SystemClock(), capsys)  # type: ignore[arg-type]
    applied = apply_plan(tree, doc)
    assert "cpu.idle=1" in applied
    assert tree.read(tree.pods[OFFLINE_UID].dirs, "cpu.idle") == "1"
    if offline_qos == "Burstable":
        assert any(a.startswith("cpu.max=") for a in applied)
    doc = plan(tree, cluster, SystemClock(), capsys)  # type: ignore[arg-type]
    assert not [w for w in doc["cgroup_writes"] if w["file"] in ("cpu.idle", "cpu.weight")]


@pytest.mark.parametrize("offline_qos", ["BestEffort", "Burstable"])
def test_isolation_online_keeps_a_contended_cpu_v2(
    real_cgroup_v2: RealCgroupV2Tree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
    offline_qos: str,
) -> None:
    """Isolation on v2: the online pod keeps most of a CPU it shares with an offline one (target 90 %)."""
    tree = real_cgroup_v2
    online, offline = build(tree, offline_qos=offline_qos, offline_cpu=0)  # type: ignore[arg-type]  # both on CPU 0
    before = cpu_share(online, offline, 2.0)
    cluster = cluster_yaml(tmp_path / "c.yaml", allocatable_cpu="2", annotations={}, offline_qos=offline_qos)
    doc = plan(tree, cluster, SystemClock(), capsys)  # type: ignore[arg-type]
    applied = apply_plan(tree, doc)
    after = cpu_share(online, offline, 2.0)
    record_property("online_share_before_percent", round(before, 1))
    record_property("online_share_after_percent", round(after, 1))
    report(f"v2 {offline_qos}: online share of CPU 0 before {before:.1f} %, after {after:.1f} % ({', '.join(applied)})")
    assert after >= ISOLATION_FLOOR_PERCENT and (after >= 90.0 or after >= before + 10.0), (before, after)
