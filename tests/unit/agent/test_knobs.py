"""The knob declarations (agent/knobs.py) are the one source the QoS plan, the order, the writer and the
sensor use: every knob the plan can emit is declared (with a value its grammar accepts, in a directory of
the declared controller, on a version that has it), the order and the sensed lists are derived from them,
and docs/agent.md's knob table names every declared knob."""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import agent.decide.qos as qos_module
import agent.knobs as knobs_module
from agent.act.cgroup_writer import CgroupWriter
from agent.cgroups.fs import FileReader
from agent.config import QosConfig
from agent.config_memqos import MemoryQosConfig
from agent.decide import memqos
from agent.decide.ops import SetCgroupValue, SetProcessValue
from agent.decide.qos import QosInputs, plan_qos
from agent.knobs import (
    CGROUP_KNOBS,
    KNOBS,
    KNOBS_DECLARED,
    OOM_SCORE_ADJ,
    order_key,
    sensed_files,
    validate_cgroup_value,
)
from agent.model import ContainerView, MemoryPressureState, PodView
from agent.sense.procfs import ProcFS
from agent.sense.snapshot import CPU_KNOBS, IO_KNOBS, MEMORY_KNOBS, resolve_pod_cgroups, sense_cgroups
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tidemark.apis import PodUID

from .helpers import pod

Tree = Callable[..., KubeletCgroupTree]
REPO = Path(__file__).resolve().parents[3]


def test_declarations_are_unique_and_complete() -> None:
    assert len(KNOBS) == len(KNOBS_DECLARED)
    for k in KNOBS_DECLARED:
        assert k.grammar and k.why, k.file
        assert k.where == "proc" or (k.versions <= {"v1", "v2"} and k.versions), k.file
    # docs/design.md, "QoS enforcement" and "Memory QoS": every knob they name, and the v2/v1 memory QoS ones
    # nothing writes yet
    named = {
        "cpu.idle", "cpu.shares", "cpu.weight", "cpu.cfs_quota_us", "cpu.max", "cpu.cfs_burst_us", "cpu.max.burst",
        "memory.limit_in_bytes", "memory.soft_limit_in_bytes", "memory.max", "memory.high", "memory.low",
        "memory.min", "cpu.qos_level", "memory.qos_level", "oom_score_adj",
    }  # fmt: skip
    assert named <= set(KNOBS)
    assert OOM_SCORE_ADJ.where == "proc" and "oom_score_adj" not in CGROUP_KNOBS


def _all_features_plan(tree: KubeletCgroupTree) -> tuple[tuple[SetCgroupValue, ...], tuple[SetProcessValue, ...]]:
    """A node where the QoS plan emits every kind of write it has: offline BestEffort/Burstable/batch-* pods,
    an online pod with a CPU limit (burst), vendor knobs, memory past its high watermark, offline processes."""
    cid = {name: f"containerd://{name * 8}" for name in ("a", "b", "c", "o")}
    tree.add_pod("be", "BestEffort", {"c": cid["c"]})
    tree.add_pod("bu", "Burstable", {"c": cid["b"]}, cpu_request_milli=500)
    tree.add_pod("bt", "BestEffort", {"a": cid["a"]})
    tree.add_pod("on", "Guaranteed", {"o": cid["o"]}, cpu_request_milli=1000, cpu_limit_milli=1000)
    tree.add_process("bu", 4242, oom_score_adj=0)
    batch = ContainerView("a", cid["a"], batch_cpu_request=1000, batch_cpu_limit=2000, batch_memory_limit=GiB)
    pods: list[PodView] = [
        pod("be", level=-1, qos="BestEffort", containers=(ContainerView("c", cid["c"]),)),
        pod("bu", level=-1, cpu=500, containers=(ContainerView("c", cid["b"]),)),
        pod("bt", level=-1, qos="BestEffort", bcpu=1000, bmem=GiB, containers=(batch,)),
        pod("on", qos="Guaranteed", cpu=1000, mem=GiB, cpu_limit=1000, containers=(ContainerView("o", cid["o"]),)),
    ]
    reader = FileReader()
    cgroups = resolve_pod_cgroups(tree.layout, pods)
    state = sense_cgroups(tree.layout, pods, cgroups, reader, ProcFS(tree.proc_root, reader))
    memory = {PodUID(u): 300.0 * 2**20 for u in ("be", "bu", "bt")}
    tight = memqos.MemoryInputs(8 * GiB, 0.5, MemoryPressureState(tightened=True), memory)
    mem, _ = memqos.plan_memory(pods, state, tight, MemoryQosConfig(min_ratio=0.5))
    inputs = QosInputs()
    writes, procs, _ = plan_qos(pods, state, inputs, QosConfig(cpu_burst=True, vendor_knobs=True), mem)
    return writes, procs


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("cpu_idle", [True, False])
def test_every_knob_the_qos_plan_emits_is_declared(kubelet_cgroup_tree: Tree, version: str, cpu_idle: bool) -> None:
    tree = kubelet_cgroup_tree(version, vendor_knobs=True, cpu_idle=cpu_idle)
    writes, procs = _all_features_plan(tree)
    emitted = {w.file for w in writes}
    expected_v1 = {"cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_burst_us", "memory.limit_in_bytes"}
    expected_v1 |= {"memory.soft_limit_in_bytes"}
    expected_v2 = {"cpu.weight", "cpu.max", "cpu.max.burst", "memory.max", "memory.high", "memory.low", "memory.min"}
    expected = (expected_v1 if version == "v1" else expected_v2) | {"cpu.qos_level", "memory.qos_level"}
    assert expected | ({"cpu.idle"} if cpu_idle else set()) <= emitted  # the scenario covers the plan's writes
    for w in writes:
        k = CGROUP_KNOBS.get(w.file)
        assert k is not None and k.writable, w
        assert version in k.versions, w
        assert validate_cgroup_value(w.file, w.value, version) is None, w
        root = tree.hierarchy.dir_for(k.where)
        assert w.path.startswith(root + "/"), (w, k.where)
    assert procs and all(p.file == OOM_SCORE_ADJ.file and OOM_SCORE_ADJ.validate(p.value) is None for p in procs)
    # ... and the writer takes every one of them
    result = CgroupWriter(None, roots=tree.kubepods.distinct()).apply(writes)
    assert not result.invalid and len(result.applied) == len(writes)


@pytest.mark.parametrize("module", [qos_module, memqos], ids=["qos", "memqos"])
def test_the_qos_modules_name_no_undeclared_knob_file(module: object) -> None:
    """Every string literal in agent/decide/qos.py and memqos.py that looks like a knob file is declared."""
    source = Path(str(getattr(module, "__file__", ""))).read_text()
    strings = [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    literals = {v for v in strings if v.partition(".")[0] in ("cpu", "memory") and "." in v and " " not in v}
    assert literals and literals <= set(KNOBS), literals - set(KNOBS)


def test_the_order_is_derived_from_the_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in KNOBS_DECLARED:
        assert order_key("/r/p", k.file, "1", "1")[0] == k.phase_for("1")
    # the EINVAL traps: shares before idle=1; idle=0 before shares (whichever way the batch goes)
    writes = [("cpu.idle", "1"), ("cpu.shares", "2"), ("memory.limit_in_bytes", "1000"), ("cpu.cfs_quota_us", "2000")]
    ordered = sorted(writes, key=lambda fv: order_key("/r/p", fv[0], fv[1], None))
    assert [f for f, _ in ordered] == ["cpu.shares", "cpu.cfs_quota_us", "cpu.idle", "memory.limit_in_bytes"]
    restores = sorted([("cpu.shares", "1024"), ("cpu.idle", "0")], key=lambda fv: order_key("/r/p", *fv, None))
    assert restores[0] == ("cpu.idle", "0")
    # a limit tightens child first; a non-limit knob keeps parent first
    assert order_key("/r/p/c", "memory.max", "100", "max") < order_key("/r/p", "memory.max", "200", "max")
    assert order_key("/r/p", "cpu.qos_level", "-1", "0") < order_key("/r/p/c", "cpu.qos_level", "-1", "0")
    # change a declaration and the order follows: nothing else holds a copy of it
    before = order_key("/r/p", "cpu.qos_level", "-1", "0")
    monkeypatch.setitem(knobs_module.KNOBS, "cpu.qos_level", dataclasses.replace(KNOBS["cpu.qos_level"], phase=0))  # type: ignore[index]
    assert order_key("/r/p", "cpu.qos_level", "-1", "0") < order_key("/r/p", "cpu.shares", "2", "1024") < before


def test_the_sensor_reads_the_declared_sensed_files() -> None:
    assert sensed_files("cpu") == CPU_KNOBS and sensed_files("memory") == MEMORY_KNOBS
    assert sensed_files("blkio") == IO_KNOBS and "io.max" in IO_KNOBS
    assert {k.file for k in CGROUP_KNOBS.values() if k.sensed} == CPU_KNOBS | MEMORY_KNOBS | IO_KNOBS
    # cpu.cfs_period_us is read (for the v1 quota period) and never written
    assert "cpu.cfs_period_us" in CPU_KNOBS and validate_cgroup_value("cpu.cfs_period_us", "100000") is not None


@pytest.mark.parametrize(
    ("file", "value", "ok"),
    [
        ("cpu.max", "max 100000", True),
        ("cpu.max", "max", True),
        ("cpu.max", "20000 100000", True),
        ("cpu.max", "999 100000", False),
        ("cpu.max", "20000 999", False),
        ("cpu.max", "20000 100000 7", False),
        ("cpu.idle", "0", True),
        ("cpu.idle", "-1", False),
        ("cpu.weight", "1", True),
        ("cpu.weight", "10000", True),
        ("cpu.weight", "0", False),
        ("cpu.shares", "262144", True),
        ("cpu.shares", "262145", False),
        ("cpu.cfs_burst_us", "0", True),
        ("memory.max", "max", True),
        ("memory.max", "-1", False),
        ("memory.limit_in_bytes", "-1", True),
        ("memory.limit_in_bytes", "max", False),
        ("memory.min", "0", True),
        ("memory.low", str(2**63 - 1), True),
        ("memory.low", str(2**63), False),
        ("memory.soft_limit_in_bytes", "-1", True),
        ("memory.high", "1e400", False),
        ("memory.high", "12345678901234567890123", False),
        ("cpu.qos_level", "3", False),
        ("oom_score_adj", "1000", False),  # a process knob, not a cgroup file
        ("release_agent", "/bin/sh", False),
        ("../../etc/passwd", "x", False),
    ],
)
def test_grammars(file: str, value: str, ok: bool) -> None:
    assert (validate_cgroup_value(file, value) is None) == ok


def test_versions_are_checked_when_given() -> None:
    assert validate_cgroup_value("cpu.max", "max", "v1") is not None
    assert validate_cgroup_value("cpu.cfs_quota_us", "-1", "v1") is None
    assert validate_cgroup_value("cpu.idle", "1", "v2") is None


def test_the_docs_knob_table_names_every_declared_knob() -> None:
    text = (REPO / "docs" / "agent.md").read_text()
    table = text[text.index("| knob | cgroup v1 | cgroup v2 |") :]
    table = table[: table.index("\n\n")]
    for k in KNOBS_DECLARED:
        assert f"`{k.file}`" in table or f"/{k.file}`" in table, k.file
    assert os.path.basename(knobs_module.__file__) in text
