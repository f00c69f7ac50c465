"""`tidemark-agent plan` on the machine's real cgroup v1 hierarchy with real busy processes.

A kubelet-like tree (kubelet's cpu.shares: kubepods from allocatable, besteffort 2, burstable the sum
of its pods' requests) under a unique prefix; an online and an offline pod run busy loops pinned to
one CPU each (or both to CPU 0 for the isolation tests), moved into their groups before they work.
Truth is each process's own CPU time (/proc/<pid>/schedstat, ns) over exactly the sampler's window (an
instrumented clock records it at the first and last read) and the memory it allocated after the move.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import KnobEntry, StateDir
from agent.cli import main
from agent.decide.ops import SetCgroupValue
from agent.model import CgroupDirs
from tests.fixtures.cgroups import MiB, RealCgroupV1Tree, RealProcess
from tidemark.clock import SystemClock

pytestmark = [pytest.mark.cgroup]

ONLINE_UID = "0a1b2c3d-0000-4000-8000-00000000a001"
OFFLINE_UID = "0a1b2c3d-0000-4000-8000-00000000b002"
ONLINE_MEMORY = 128 * MiB
OFFLINE_MEMORY = 96 * MiB


def cluster_yaml(path: Path, *, allocatable_cpu: str, annotations: dict[str, str], offline_qos: str) -> str:
    offline_resources = "{requests: {cpu: 500m, memory: 64Mi}}" if offline_qos == "Burstable" else "{}"
    ann = json.dumps(annotations)
    path.write_text(
        f"""\
kind: Node
metadata:
  name: n1
  labels: {{volcano.sh/colocation: "true", volcano.sh/oversubscription: "true"}}
  annotations: {ann}
status:
  allocatable: {{cpu: "{allocatable_cpu}", memory: 8Gi, pods: "110"}}
---
kind: Pod
metadata: {{name: web, namespace: shop, uid: {ONLINE_UID}, creationTimestamp: "2024-01-01T00:00:00Z"}}
spec:
  nodeName: n1
  containers: [{{name: app, resources: {{requests: {{cpu: 500m, memory: 128Mi}}}}}}]
status: {{qosClass: Burstable, containerStatuses: [{{name: app, containerID: "containerd://{"a" * 64}"}}]}}
---
kind: Pod
metadata:
  name: crunch
  namespace: batch
  uid: {OFFLINE_UID}
  annotations: {{volcano.sh/qos-level: BE}}
  creationTimestamp: "2024-01-01T01:00:00Z"
spec:
  nodeName: n1
  containers: [{{name: job, resources: {offline_resources}}}]
status: {{qosClass: {offline_qos}, containerStatuses: [{{name: job, containerID: "containerd://{"b" * 64}"}}]}}
"""
    )
    return str(path)


def build(tree: RealCgroupV1Tree, *, offline_qos: str, offline_cpu: int) -> tuple[RealProcess, RealProcess]:
    tree.add_pod(ONLINE_UID, "Burstable", {"app": f"containerd://{'a' * 64}"}, cpu_request_milli=500)
    if offline_qos == "Burstable":
        tree.add_pod(OFFLINE_UID, "Burstable", {"job": f"containerd://{'b' * 64}"}, cpu_request_milli=500)
    else:
        tree.add_pod(OFFLINE_UID, "BestEffort", {"job": f"containerd://{'b' * 64}"})
    # the offline process touches its memory first: a BestEffort pod (cpu.shares=2) on CPU 0 behind the online
    # busy loop got too little CPU to touch it within 120 s on a loaded host (38 MiB of 96, before any plan)
    offline = tree.start_process(OFFLINE_UID, "job", memory_bytes=OFFLINE_MEMORY, cpu=offline_cpu)
    offline.wait_touched(OFFLINE_MEMORY)
    online = tree.start_process(ONLINE_UID, "app", memory_bytes=ONLINE_MEMORY, cpu=0)
    online.wait_touched(ONLINE_MEMORY)
    return online, offline


@dataclass
class Truth:
    online_cpu: float
    offline_cpu: float


class TruthClock(SystemClock):
    """The system clock that records the processes' CPU time whenever the sampler reads the time."""

    def __init__(self, procs: tuple[RealProcess, RealProcess]) -> None:
        self.procs = procs
        self.marks: list[tuple[float, float, float]] = []

    def monotonic(self) -> float:
        now = super().monotonic()
        self.marks.append((now, self.procs[0].cpu_seconds(), self.procs[1].cpu_seconds()))
        return now

    def truth(self) -> Truth:
        (t0, a0, b0), (t1, a1, b1) = self.marks[0], self.marks[-1]
        return Truth(1000 * (a1 - a0) / (t1 - t0), 1000 * (b1 - b0) / (t1 - t0))


#: the watermark tests hold Volcano's node measure (kubepods usage, offline included); the default, the
#: satisfaction measure, is tested in tests/unit/agent/test_tier.py and on the real node
NODE_MEASURE = "eviction: {cpu: {measure: node}}\n"


def plan(
    tree: RealCgroupV1Tree,
    cluster: str,
    clock: SystemClock,
    capsys: pytest.CaptureFixture[str],
    config: str | None = None,
) -> dict:  # type: ignore[type-arg]
    extra: list[str] = []
    if config is not None:
        path = Path(cluster).with_suffix(".agent.yaml")
        path.write_text(config)
        extra = ["--config", str(path)]
    rc = main(
        [
            "plan",
            *extra,
            "--node-name",
            "n1",
            "--cluster",
            cluster,
            "--kube-cgroup-root",
            tree.kube_cgroup_root,
            "--samples",
            "3",
            "--interval",
            "0.5",
            "-o",
            "json",
        ],
        clock=clock,
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def report(line: str) -> None:
    """Figures for the reader (`pytest -s`), outside pytest's capture of the plan's stdout."""
    print(line, file=sys.__stderr__)


def close(measured: float, truth: float, floor: float) -> bool:
    """Within 15 % of the truth (or `floor` absolute, for tiny amounts)."""
    return abs(measured - truth) <= max(0.15 * truth, floor)


def cpu_share(online: RealProcess, offline: RealProcess, seconds: float = 1.0) -> float:
    a0, b0 = online.cpu_seconds(), offline.cpu_seconds()
    time.sleep(seconds)
    a1, b1 = online.cpu_seconds(), offline.cpu_seconds()
    total = (a1 - a0) + (b1 - b0)
    return 100.0 * (a1 - a0) / total if total > 0 else 0.0


def apply_cpu_writes(doc: dict) -> list[str]:  # type: ignore[type-arg]
    """What the executor does for the CPU knobs: write them in the plan's order."""
    done = []
    for w in doc["cgroup_writes"]:
        if w["file"].startswith("cpu."):
            with open(os.path.join(w["path"], w["file"]), "w") as f:
                f.write(w["value"])
            done.append(f"{w['file']}={w['value']}")
    return done


def test_usage_capacity_and_knobs(
    real_cgroup_v1: RealCgroupV1Tree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
) -> None:
    tree = real_cgroup_v1
    online, offline = build(tree, offline_qos="Burstable", offline_cpu=1)
    cluster = cluster_yaml(tmp_path / "c.yaml", allocatable_cpu="4", annotations={}, offline_qos="Burstable")
    clock = TruthClock((online, offline))
    doc = plan(tree, cluster, clock, capsys)
    truth = clock.truth()
    usage = doc["usage"]
    errors = {
        "online_cpu": (usage["online"]["cpu"], truth.online_cpu),
        "offline_cpu": (usage["offline"]["cpu"], truth.offline_cpu),
        "kubepods_cpu": (usage["cpu"], truth.online_cpu + truth.offline_cpu),
        "online_memory": (usage["online"]["memory"], ONLINE_MEMORY),
        "offline_memory": (usage["offline"]["memory"], OFFLINE_MEMORY),
    }
    for name, (measured, true) in errors.items():
        record_property(f"{name}_error_percent", round(100 * (measured - true) / true, 2) if true else None)
        report(f"{name}: plan {measured:.0f} truth {true:.0f}")
    assert close(usage["online"]["cpu"], truth.online_cpu, 20)
    assert close(usage["offline"]["cpu"], truth.offline_cpu, 20)
    assert close(usage["cpu"], truth.online_cpu + truth.offline_cpu, 30)
    assert close(usage["online"]["memory"], ONLINE_MEMORY, 4 * MiB)
    assert close(usage["offline"]["memory"], OFFLINE_MEMORY, 4 * MiB)
    assert usage["cpu_percent"] == pytest.approx(100 * usage["cpu"] / 4000, abs=0.05)  # cpu is rounded to 1m

    # B and X from the same figures: U_non = machine - offline >= the online pod's usage
    line = next(e for e in doc["explanations"] if e.startswith("cpu: B = "))
    u_non = int(re.search(r"U_non (\d+)m", line).group(1))  # type: ignore[union-attr]
    assert u_non >= usage["online"]["cpu"] * 0.85
    b = doc["capacity"]["computed"]["B"]["cpu"]
    assert b == max(0, int(4000 * 0.70 - u_non))
    assert doc["capacity"]["batch"]["cpu"] == max(0, b - 500)  # Rp = the offline pod's plain request
    assert doc["capacity"]["computed"]["X"]["cpu"] == max(0, b - 0 - max(0, 4000 - 500))
    assert doc["oversubscription"]["cpu"] == doc["capacity"]["computed"]["X"]["cpu"]
    assert not doc["evicting"] and doc["evictions"] == []

    # the knobs: idle scheduling and a CFS quota for the offline pod, oom_score_adj for its process
    pod_dir = tree.pods[OFFLINE_UID].dirs.cpu
    files = {(w["path"], w["file"]) for w in doc["cgroup_writes"]}
    assert (pod_dir, "cpu.idle") in files and (pod_dir, "cpu.cfs_quota_us") in files
    ctrl = {w["file"]: w["file"].split(".")[0] if w["file"].startswith(("memory.", "blkio.")) else "cpu"
            for w in doc["cgroup_writes"]}  # fmt: skip
    assert all(
        w["path"].startswith(os.path.join(tree.cgroup_root, ctrl[w["file"]], tree.prefix)) for w in doc["cgroup_writes"]
    )
    assert (tree.pods[OFFLINE_UID].dirs.memory, "memory.soft_limit_in_bytes") in files  # memory QoS (v1)
    assert {"pid": offline.pid, "file": "oom_score_adj", "value": "1000"} in doc["process_writes"]
    assert not any(p["pid"] == online.pid for p in doc["process_writes"])


def test_watermarks_evict_exactly_the_offline_pod(
    real_cgroup_v1: RealCgroupV1Tree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
) -> None:
    tree = real_cgroup_v1
    online, offline = build(tree, offline_qos="Burstable", offline_cpu=1)
    # under the high watermark (two busy cores are at most 50 % of 4 allocatable): nobody is evicted
    under = cluster_yaml(
        tmp_path / "under.yaml",
        allocatable_cpu="4",
        offline_qos="Burstable",
        annotations={"volcano.sh/evicting-cpu-high-watermark": "95", "volcano.sh/evicting-cpu-low-watermark": "90"},
    )
    doc = plan(tree, under, SystemClock(), capsys)
    assert not doc["evicting"] and doc["evictions"] == []
    assert "volcano.sh/offline-job-evicting" not in doc["node_report"].get("annotations", {})
    percent = doc["usage"]["cpu_percent"]
    record_property("kubepods_cpu_percent", percent)
    report(f"kubepods at {percent} % of 4 allocatable cores; high watermark set to {max(1, int(percent * 0.5))} %")
    assert percent > 5, "the busy loops should use some CPU"
    # past it: a high watermark well under the measured usage
    high = max(1, int(percent * 0.5))
    over = cluster_yaml(
        tmp_path / "over.yaml",
        allocatable_cpu="4",
        offline_qos="Burstable",
        annotations={"volcano.sh/evicting-cpu-high-watermark": str(high), "volcano.sh/evicting-cpu-low-watermark": "0"},
    )
    doc = plan(tree, over, SystemClock(), capsys, NODE_MEASURE)
    assert doc["evicting"]
    assert doc["evictions"] == [{"pod": "batch/crunch", "reason": "CPUHighWatermark"}]
    patch = doc["node_report"]["annotations"]
    assert patch["volcano.sh/offline-job-evicting"] == "true"
    assert doc["oversubscription"] == {"cpu": 0, "memory": 0} and doc["capacity"]["batch"] == {"cpu": 0, "memory": 0}
    assert online.popen.poll() is None and offline.popen.poll() is None  # plan changes nothing


@pytest.mark.parametrize("offline_qos", ["BestEffort", "Burstable"])
def test_planned_cpu_knobs_protect_the_online_pod(
    real_cgroup_v1: RealCgroupV1Tree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
    offline_qos: str,
) -> None:
    tree = real_cgroup_v1
    online, offline = build(tree, offline_qos=offline_qos, offline_cpu=0)  # both on CPU 0
    before = cpu_share(online, offline)
    cluster = cluster_yaml(tmp_path / "c.yaml", allocatable_cpu="2", annotations={}, offline_qos=offline_qos)
    doc = plan(tree, cluster, SystemClock(), capsys)
    applied = apply_cpu_writes(doc)
    assert "cpu.idle=1" in applied
    after = cpu_share(online, offline)
    record_property("online_share_before_percent", round(before, 1))
    record_property("online_share_after_percent", round(after, 1))
    report(f"{offline_qos}: online share of CPU 0 before {before:.1f} %, after {after:.1f} % ({', '.join(applied)})")
    assert after >= 90.0
    if offline_qos == "Burstable":
        assert before < 80.0, "equal requests in the burstable subtree should share CPU 0 about evenly"
    # the plan is idempotent: a second plan has no CPU write left
    doc = plan(tree, cluster, SystemClock(), capsys)
    assert not [w for w in doc["cgroup_writes"] if w["file"] in ("cpu.idle", "cpu.shares")]


def _knob(directory: str, file: str) -> str:
    with open(os.path.join(directory, file)) as f:
        return f.read().strip()


def test_restore_puts_back_real_values_and_refuses_planted_entries(
    real_cgroup_v1: RealCgroupV1Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#13 D3 on the real hierarchy: `tidemark-agent restore` puts back what the executor wrote (the kernel's EINVAL
    trap included: idle=0 before shares) and refuses journal entries planted outside the kubepods roots: a real
    group of this test's prefix beside kubepods, the same group through `..`, and an ordinary file."""
    tree = real_cgroup_v1
    cid = f"containerd://{'b' * 64}"
    tree.add_pod(OFFLINE_UID, "Burstable", {"job": cid}, cpu_request_milli=500)
    pod_dirs, job = tree.pods[OFFLINE_UID].dirs, tree.pods[OFFLINE_UID].containers["job"]
    kp = tree.kubepods
    outside = CgroupDirs(*(os.path.join(os.path.dirname(d), "outside") for d in (kp.cpu, kp.cpuacct, kp.memory)), "v1")
    tree.add_group(outside, 2)  # a real group of this test's prefix, not under kubepods
    files = [(pod_dirs.cpu, "cpu.shares"), (pod_dirs.cpu, "cpu.idle"), (pod_dirs.cpu, "cpu.cfs_quota_us"),
             (pod_dirs.memory, "memory.limit_in_bytes"), (job.memory, "memory.limit_in_bytes"),
             (job.cpu, "cpu.shares"), (job.cpu, "cpu.idle")]  # fmt: skip
    before = {key: _knob(*key) for key in files}
    assert before[(pod_dirs.cpu, "cpu.idle")] == "0" and before[(pod_dirs.cpu, "cpu.shares")] == "512"
    assert before[(job.cpu, "cpu.shares")] == "512"

    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    writer = CgroupWriter(state.journal, roots=tree.kubepods.distinct())
    result = writer.apply(
        [
            SetCgroupValue(pod_dirs.cpu, "cpu.shares", "2"),
            SetCgroupValue(pod_dirs.cpu, "cpu.idle", "1"),
            SetCgroupValue(pod_dirs.cpu, "cpu.cfs_quota_us", "20000"),
            SetCgroupValue(pod_dirs.memory, "memory.limit_in_bytes", str(512 * MiB)),
            SetCgroupValue(job.memory, "memory.limit_in_bytes", str(256 * MiB)),
            SetCgroupValue(job.cpu, "cpu.idle", "1"),  # idle alone, as the QoS plan writes it
        ]
    )
    assert not result.failed and not result.invalid and len(result.applied) == 6, result
    assert _knob(pod_dirs.cpu, "cpu.idle") == "1" and _knob(job.memory, "memory.limit_in_bytes") == str(256 * MiB)
    # the kernel's trap that `cpu.idle`'s declared `resets` covers: idle groups show the minimal shares...
    assert _knob(job.cpu, "cpu.shares") == "3"

    # planted: valid knobs and values, outside the roots
    ordinary = tmp_path / "etc" / "cpu.shares"
    ordinary.parent.mkdir()
    ordinary.write_text("2\n")
    planted = [
        KnobEntry(outside.cpu, "cpu.shares", "1024", "2"),
        KnobEntry(outside.memory, "memory.limit_in_bytes", "-1", str(64 * MiB)),
        KnobEntry(str(ordinary.parent), "cpu.shares", "1024", "2"),
    ]
    for e in planted:
        state.journal.knobs[e.key] = e
    with open(os.path.join(outside.memory, "memory.limit_in_bytes"), "w") as f:
        f.write(str(64 * MiB))
    state.journal.save()
    # ... and one through `..`, which loading rejects outright
    doc = json.loads(Path(state.journal.path).read_text())
    doc["knobs"].append({"path": f"{pod_dirs.cpu}/../../../outside", "file": "cpu.shares", "original": "1024",
                         "written": "2"})  # fmt: skip
    Path(state.journal.path).write_text(json.dumps(doc))

    rc = main(["restore", "--state-dir", state.path, "--kube-cgroup-root", tree.kube_cgroup_root])
    out, err = capsys.readouterr()
    report(f"restore on real cgroup v1: exit {rc}: {out.strip()}")
    assert rc == 1, err
    # every real value is back (...and leaving idle resets shares to 1024: the journaled 512 is written after it)
    assert {key: _knob(*key) for key in files} == before
    assert _knob(outside.cpu, "cpu.shares") == "2" and _knob(outside.memory, "memory.limit_in_bytes") == str(64 * MiB)
    assert ordinary.read_text() == "2\n"
    assert "restored 5 of 10 journaled value(s) (and 2 the kernel had reset with them)" in out, out
    assert "1 no longer held our value" in out and "3 skipped" in out and "1 rejected" in out, out
    assert err.count("outside the kubepods cgroups") == 3 and "not a normalized absolute path" in err


def test_memory_qos_soft_limit_is_planned_written_and_restored(
    real_cgroup_v1: RealCgroupV1Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """v1 memory QoS on the real hierarchy: `plan` wants the offline pod's `memory.soft_limit_in_bytes` at
    allocatable 8Gi x capacity.ratio.memory 0.5 x memoryQoS.highRatio 0.9 (page-aligned) and nothing for the online
    pod (v1 has no hierarchical protection); the executor writes it, journaled; `restore` puts the kernel's back."""
    tree = real_cgroup_v1
    tree.add_pod(ONLINE_UID, "Burstable", {"app": f"containerd://{'a' * 64}"}, cpu_request_milli=500)
    tree.add_pod(OFFLINE_UID, "BestEffort", {"job": f"containerd://{'b' * 64}"})
    off, on = tree.pods[OFFLINE_UID].dirs.memory, tree.pods[ONLINE_UID].dirs.memory
    original = _knob(off, "memory.soft_limit_in_bytes")
    cluster = cluster_yaml(tmp_path / "c.yaml", allocatable_cpu="2", annotations={}, offline_qos="BestEffort")
    # the offline tier's memory guard (its own test: test_memguard_real.py) is off: this is per-pod memory QoS
    doc = plan(tree, cluster, SystemClock(), capsys, "tier: {memory: {enabled: false}}\n")
    memory = [w for w in doc["cgroup_writes"] if w["file"].startswith("memory.")]
    want = str(int(8 * 2**30 * 0.5 * 0.9) // 4096 * 4096)
    assert memory == [{"path": off, "file": "memory.soft_limit_in_bytes", "value": want}], memory
    assert any("is offline: memory.soft_limit_in_bytes" in e for e in doc["explanations"])

    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    writes = [SetCgroupValue(w["path"], w["file"], w["value"]) for w in memory]
    result = CgroupWriter(state.journal, roots=tree.kubepods.distinct()).apply(writes)
    assert not result.failed and not result.invalid and len(result.applied) == 1, result
    assert _knob(off, "memory.soft_limit_in_bytes") == want
    assert _knob(on, "memory.soft_limit_in_bytes") == original  # online untouched
    report(f"v1 memory QoS: offline soft limit {int(want) / MiB:.0f} MiB written (was {original})")

    rc = main(["restore", "--state-dir", state.path, "--kube-cgroup-root", tree.kube_cgroup_root])
    out, err = capsys.readouterr()
    assert rc == 0, (out, err)
    assert _knob(off, "memory.soft_limit_in_bytes") == original


def test_the_kernel_takes_a_root_loosened_before_its_child_in_one_batch(real_cgroup_v1: RealCgroupV1Tree) -> None:
    """v1 refuses a child's quota above its parent's (EINVAL): a batch that takes the BestEffort root from the quota
    an earlier period left (20m) back to unlimited and gives a pod in it a larger share (26.8m) must write the root
    first, although the declared order writes tightening (the pod: unlimited -> 26.8m) before loosening (the whole
    suite's test_faults saw the pod's write refused every 100 ms until the journal released the root)."""
    tree = real_cgroup_v1
    tree.add_pod("be", "BestEffort")
    root = tree.layout.qos("BestEffort").cpu
    pod_dir = tree.pods["be"].dirs.cpu
    with open(os.path.join(root, "cpu.cfs_quota_us"), "w") as f:
        f.write("2000")
    writes = [
        SetCgroupValue(pod_dir, "cpu.cfs_quota_us", "26800", "-1", "its share"),
        SetCgroupValue(root, "cpu.cfs_quota_us", "-1", "2000", "no root quota this period"),
    ]
    result = CgroupWriter(None, roots=tree.kubepods.distinct()).apply(writes)
    assert not result.failed and not result.invalid, (result.failed, result.invalid)
    with open(os.path.join(pod_dir, "cpu.cfs_quota_us")) as f:
        assert f.read().strip() == "26800"
    with open(os.path.join(root, "cpu.cfs_quota_us")) as f:
        assert f.read().strip() == "-1"
