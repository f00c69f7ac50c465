"""Memory QoS, the pure decision (agent.decide.memqos): the pressure hysteresis and every memory value wanted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.config import AgentConfig, QosConfig, load_config
from agent.config_memqos import MemoryQosConfig
from agent.decide import memqos
from agent.decide.memqos import (
    MIN_HIGH,
    MemoryInputs,
    MemoryPressure,
    MemoryWant,
    plan_memory,
    pressure_reason,
    pressure_step,
)
from agent.decide.ops import Plan
from agent.decide.plan import decide
from agent.decide.qos import QosInputs, plan_qos
from agent.knobs import validate_cgroup_value
from agent.model import (
    AgentState,
    CgroupDirs,
    CgroupState,
    ContainerView,
    MemoryPressureState,
    PodCgroups,
    PodView,
    Sample,
    Snapshot,
)
from tidemark.apis import PodUID

from .helpers import node, pod, sample

MiB = 2**20
GiB = 2**30
CFG = MemoryQosConfig()
CALM = MemoryPressureState()
TIGHT = MemoryPressureState(tightened=True)


def obs(usage: float | None, psi: float | None = None, triggered: bool = False, high: float = 60) -> MemoryPressure:
    return MemoryPressure(usage, high, psi, triggered)


# --- the pressure hysteresis ---------------------------------------------------------------------------------


def test_pressure_starts_at_the_watermark_minus_the_margin() -> None:
    assert pressure_step(CALM, obs(54.9), CFG) == CALM
    assert pressure_step(CALM, obs(55.0), CFG) == TIGHT  # 60 - 5, at once (no consecutive count)
    reason = pressure_reason(obs(57.0), CFG)
    assert reason is not None and "57.0 % >= 55 %" in reason
    assert pressure_step(CALM, obs(59.0), MemoryQosConfig(pressure_margin=0)) == CALM
    assert pressure_step(CALM, obs(1.0, high=5), MemoryQosConfig(pressure_margin=10)) == TIGHT  # threshold floors at 0


def test_pressure_starts_on_psi_or_a_trigger() -> None:
    assert pressure_step(CALM, obs(10, psi=9.9), CFG) == CALM
    assert pressure_step(CALM, obs(10, psi=10.0), CFG) == TIGHT
    assert pressure_step(CALM, obs(10, psi=99.0), MemoryQosConfig(pressure_psi=0)) == CALM  # PSI rule off
    assert pressure_step(CALM, obs(None, triggered=True), CFG) == TIGHT
    assert pressure_reason(obs(None, triggered=True), CFG) == "a memory pressure trigger fired"
    assert pressure_reason(obs(None), CFG) is None


def test_pressure_ends_after_release_samples_calm_ones_below_the_band() -> None:
    state = TIGHT
    for expected in (1, 2):
        state = pressure_step(state, obs(49.9), CFG)  # < 55 - 5
        assert state == MemoryPressureState(tightened=True, calm=expected)
    assert pressure_step(state, obs(49.9), CFG) == CALM  # the third calm sample releases
    # inside the hysteresis band (50..55) a tightened node stays tightened and the count starts over
    assert pressure_step(state, obs(52.0), CFG) == TIGHT
    # PSI still high, a trigger, or an unknown usage are not calm
    assert pressure_step(state, obs(10, psi=20), CFG) == TIGHT
    assert pressure_step(state, obs(None), CFG) == TIGHT
    assert pressure_step(state, obs(10, psi=20), MemoryQosConfig(pressure_psi=0)) == CALM  # PSI rule off: calm
    one = MemoryQosConfig(release_samples=1)
    assert pressure_step(TIGHT, obs(10), one) == CALM


@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.floats(0, 120)), st.one_of(st.none(), st.floats(0, 100)), st.booleans()),
        max_size=30,
    ),
    st.integers(1, 5),
)
def test_pressure_never_releases_without_enough_calm_samples(
    steps: list[tuple[float | None, float | None, bool]], n: int
) -> None:
    cfg = MemoryQosConfig(release_samples=n)
    state = CALM
    run = 0  # consecutive calm observations
    for usage, psi, trig in steps:
        o = obs(usage, psi, trig)
        before = state
        state = pressure_step(state, o, cfg)
        run = run + 1 if memqos.calm(o, cfg) else 0
        if pressure_reason(o, cfg) is not None:
            assert state == TIGHT
        if before.tightened and not state.tightened:
            assert run >= n
        assert 0 <= state.calm < n
        assert state.tightened or state.calm == 0


# --- the knobs ------------------------------------------------------------------------------------------------


class Tree:
    """A CgroupState by hand: kubelet's cgroupfs layout under /cg (v2: one directory; v1: memory hierarchy)."""

    def __init__(self, version: str) -> None:
        self.version = version
        root = "/cg" if version == "v2" else "/cg/memory"
        self.kubepods = self._dirs(f"{root}/kubepods")
        self.burstable = self._dirs(f"{root}/kubepods/burstable")
        self.besteffort = self._dirs(f"{root}/kubepods/besteffort")
        self.pods: dict[PodUID, PodCgroups] = {}
        self.files: dict[str, dict[str, str]] = {}
        for d in (self.kubepods, self.burstable, self.besteffort):
            self._files(d)

    def _dirs(self, path: str) -> CgroupDirs:
        cpu = path.replace("/cg/memory", "/cg/cpu")
        return CgroupDirs(cpu, cpu, path, "v2" if self.version == "v2" else "v1")

    def _files(self, d: CgroupDirs, limit: str | None = None) -> None:
        if self.version == "v2":
            self.files[d.memory] = {
                "memory.max": limit or "max",
                "memory.high": "max",
                "memory.low": "0",
                "memory.min": "0",
            }
        else:
            self.files[d.memory] = {
                "memory.limit_in_bytes": limit or "9223372036854771712",
                "memory.soft_limit_in_bytes": "9223372036854771712",
            }

    def add(self, p: PodView, limit: int | None = None, containers: Sequence[str] = ("c",)) -> None:
        parent = {"Guaranteed": self.kubepods, "Burstable": self.burstable, "BestEffort": self.besteffort}[p.qos_class]
        d = parent.child(f"pod{p.uid}")
        self._files(d, None if limit is None else str(limit))
        cs = {name: d.child(name) for name in containers}
        for c in cs.values():
            self._files(c)
        self.pods[p.uid] = PodCgroups(d, cs)

    def state(self) -> CgroupState:
        v = "v2" if self.version == "v2" else "v1"
        ancestors = {memqos.KUBEPODS: self.kubepods, memqos.BURSTABLE: self.burstable}
        return CgroupState(v, dict(self.pods), self.files, {}, {}, ancestors)


def inputs(state: MemoryPressureState = CALM, ws: Mapping[str, float] | None = None) -> MemoryInputs:
    return MemoryInputs(16 * GiB, 0.5, state, {PodUID(k): v for k, v in (ws or {}).items()})


def wants(
    tree: Tree, pods: Sequence[PodView], inp: MemoryInputs | None = None, cfg: MemoryQosConfig = CFG
) -> dict[tuple[str, str], str]:
    found, _ = plan_memory(pods, tree.state(), inp or inputs(), cfg)
    out = {(w.dirs.memory, w.file): w.value for w in found}
    assert len(out) == len(found), "one value per file"
    return out


@pytest.fixture(params=["v1", "v2"])
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_v2_online_protection_on_pods_containers_and_ancestor_sums() -> None:
    t = Tree("v2")
    pods = [
        pod("g", qos="Guaranteed", mem=2 * GiB),
        pod("b1", qos="Burstable", mem=GiB),
        pod("b2", qos="Burstable", mem=512 * MiB + 123),
        pod("be", qos="BestEffort"),
        pod("off", level=-1, qos="Burstable", mem=4 * GiB),  # offline requests protect nothing
    ]
    for p in pods:
        t.add(p, containers=("c", "d") if p.uid == "b1" else ("c",))
    got = wants(t, pods, cfg=MemoryQosConfig(min_ratio=0.5, low_ratio=1.0))
    pod_dir = {p.uid: t.pods[p.uid].pod.memory for p in pods}
    b2_low = (512 * MiB + 123) // 4096 * 4096
    assert got[(pod_dir[PodUID("g")], "memory.low")] == str(2 * GiB)
    assert got[(pod_dir[PodUID("g")], "memory.min")] == str(GiB)
    assert got[(pod_dir[PodUID("b2")], "memory.low")] == str(b2_low)  # page-aligned
    for c in ("c", "d"):  # each container too: a child with no protection of its own gets none
        assert got[(t.pods[PodUID("b1")].containers[c].memory, "memory.low")] == str(GiB)
        assert got[(t.pods[PodUID("b1")].containers[c].memory, "memory.min")] == str(GiB // 2)
    assert got[(t.burstable.memory, "memory.low")] == str(GiB + b2_low)
    assert got[(t.kubepods.memory, "memory.low")] == str(2 * GiB + GiB + b2_low)
    assert got[(t.kubepods.memory, "memory.min")] == str(GiB + GiB // 2 + (512 * MiB + 123) // 2 // 4096 * 4096)
    assert got[(pod_dir[PodUID("be")], "memory.low")] == "0"
    assert (pod_dir[PodUID("off")], "memory.low") not in got
    assert (t.besteffort.memory, "memory.low") not in got  # nothing to protect there
    # every value is one the executor accepts
    for (_, file), value in got.items():
        assert validate_cgroup_value(file, value, "v2") is None


def test_memory_min_sum_is_capped_at_allocatable_minus_the_reserve() -> None:
    t = Tree("v2")
    pods = [pod("a", mem=12 * GiB), pod("b", mem=12 * GiB)]
    for p in pods:
        t.add(p)
    cfg = MemoryQosConfig(min_ratio=1.0, min_reserve=4 * GiB)
    found, notes = plan_memory(pods, t.state(), inputs(), cfg)
    got = {(w.dirs.memory, w.file): w.value for w in found}
    assert got[(t.pods[PodUID("a")].pod.memory, "memory.min")] == str(6 * GiB)  # (16 - 4) / 24 each
    assert got[(t.kubepods.memory, "memory.min")] == str(12 * GiB)
    assert got[(t.pods[PodUID("a")].pod.memory, "memory.low")] == str(12 * GiB)  # low is not capped
    assert any("scaled by 0.500" in n for n in notes)
    # a reserve above allocatable leaves no memory.min at all
    found, _ = plan_memory(pods, t.state(), inputs(), MemoryQosConfig(min_ratio=1.0, min_reserve=32 * GiB))
    assert {w.value for w in found if w.file == "memory.min"} == {"0"}


def test_offline_cap_from_limit_batch_limits_or_the_budget(version: str) -> None:
    t = Tree(version)
    file = "memory.high" if version == "v2" else "memory.soft_limit_in_bytes"
    batch = (
        ContainerView("a", "containerd://a", batch_memory_limit=GiB),
        ContainerView("b", "x", batch_memory_limit=GiB),
    )
    pods = [
        pod("lim", level=-1, qos="Burstable"),
        pod("bat", level=-1, qos="BestEffort", containers=batch),
        pod("none", level=-1, qos="BestEffort"),
        pod("half", level=-1, qos="BestEffort", containers=(batch[0], ContainerView("c", "y"))),
    ]
    t.add(pods[0], limit=1000 * MiB)
    for p in pods[1:]:
        t.add(p)
    found, _ = plan_memory(pods, t.state(), inputs(), CFG)
    got = {w.dirs.memory: (w.file, w.value, w.reason) for w in found}
    dirs = {p.uid: t.pods[p.uid].pod.memory for p in pods}
    assert got[dirs[PodUID("lim")]][:2] == (file, str(int(1000 * MiB * 0.9) // 4096 * 4096))
    assert "x memoryQoS.highRatio 0.9" in got[dirs[PodUID("lim")]][2]
    assert got[dirs[PodUID("bat")]][:2] == (file, str(int(2 * GiB * 0.9) // 4096 * 4096))
    assert "batch-memory" in got[dirs[PodUID("bat")]][2]
    budget = str(int(16 * GiB * 0.5 * 0.9) // 4096 * 4096)  # allocatable x capacity.ratio.memory x highRatio
    assert got[dirs[PodUID("none")]][:2] == (file, budget)
    assert got[dirs[PodUID("half")]][:2] == (file, budget)  # not every container has a batch limit
    assert not any(w.file in ("memory.low", "memory.min") for w in found) or version == "v2"
    if version == "v1":  # v1 has nothing hierarchical for online pods
        assert {w.file for w in found} == {file}


def test_under_pressure_offline_caps_go_down_to_the_working_set(version: str) -> None:
    t = Tree(version)
    file = "memory.high" if version == "v2" else "memory.soft_limit_in_bytes"
    pods = [
        pod("a", level=-1, qos="BestEffort"),
        pod("b", level=-1, qos="BestEffort"),
        pod("c", level=-1, qos="BestEffort"),
    ]
    for p in pods:
        t.add(p)
    t.add(pod("gone", level=-1, qos="BestEffort"))  # a cgroup without a pod: nothing
    ws = {"a": 300 * MiB + 5, "b": 10 * GiB}  # c: no reading -> keeps its normal cap
    found, notes = plan_memory(pods, t.state(), inputs(TIGHT, ws), CFG)
    got = {w.dirs.memory: (w.file, w.value, w.reason) for w in found}
    a, b, c = (t.pods[PodUID(u)].pod.memory for u in "abc")
    assert got[a][:2] == (file, str(300 * MiB)) and "memory pressure: working set 300Mi" in got[a][2]
    normal = str(int(16 * GiB * 0.5 * 0.9) // 4096 * 4096)
    assert got[b][:2] == (file, normal)  # never above the normal cap
    assert got[c][:2] == (file, normal)
    assert any("memory pressure" in n and "before any eviction" in n for n in notes)
    assert len([w for w in found if w.file == file]) == 3  # (v2: plus the ancestors' zero sums)
    # squeeze further with pressureHighRatio; never below the floor
    found, _ = plan_memory(pods, t.state(), inputs(TIGHT, {"a": 300 * MiB}), MemoryQosConfig(pressure_high_ratio=0.5))
    assert {w.dirs.memory: w.value for w in found}[a] == str(150 * MiB)
    found, _ = plan_memory(pods, t.state(), inputs(TIGHT, {"a": 10.0}), CFG)
    assert {w.dirs.memory: w.value for w in found}[a] == str(MIN_HIGH)
    # calm again: back to the normal cap
    found, _ = plan_memory(pods, t.state(), inputs(CALM, ws), CFG)
    assert {w.dirs.memory: w.value for w in found}[a] == normal


def test_pods_without_cgroups_still_count_in_ancestor_sums_but_get_no_writes() -> None:
    t = Tree("v2")
    pods = [pod("on", mem=GiB), pod("off", level=-1, qos="BestEffort")]
    got = wants(t, pods)
    assert got == {
        (t.kubepods.memory, "memory.low"): str(GiB),
        (t.kubepods.memory, "memory.min"): "0",
        (t.burstable.memory, "memory.low"): str(GiB),
        (t.burstable.memory, "memory.min"): "0",
    }


def test_through_the_qos_plan_only_changed_values_are_written_in_order() -> None:
    t = Tree("v2")
    pods = [pod("on", mem=GiB), pod("off", level=-1, qos="BestEffort")]
    for p in pods:
        t.add(p)
    mem, _ = plan_memory(pods, t.state(), inputs(), CFG)
    writes, _, _ = plan_qos(pods, t.state(), QosInputs(), QosConfig(vendor_knobs=False), mem)
    # memory.min stays 0 everywhere (minRatio 0): no write; the CPU files do not exist in this hand-made state
    assert {(w.file, w.value) for w in writes} == {
        ("memory.low", str(GiB)),
        ("memory.high", str(int(16 * GiB * 0.45) // 4096 * 4096)),
    }
    assert all(w.current in ("0", "max") for w in writes)
    # apply them to the state: nothing left to write
    for w in writes:
        t.files[w.path][w.file] = w.value
    mem, _ = plan_memory(pods, t.state(), inputs(), CFG)
    assert plan_qos(pods, t.state(), QosInputs(), QosConfig(vendor_knobs=False), mem)[0] == ()


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Guaranteed", "Burstable", "BestEffort"]),
            st.booleans(),
            st.integers(0, 64 * GiB),
            st.one_of(st.none(), st.integers(1, 64 * GiB)),
            st.integers(0, 64 * GiB),
        ),
        max_size=8,
    ),
    st.floats(0, 1),
    st.floats(0, 1),
    st.integers(0, 64 * GiB),
    st.booleans(),
    st.sampled_from(["v1", "v2"]),
)
def test_properties(
    specs: list[tuple[str, bool, int, int | None, int]],
    min_ratio: float,
    low_ratio: float,
    reserve: int,
    tight: bool,
    version: str,
) -> None:
    """Every value valid for its file; ancestors hold the sums of their children; memory.min fits the cap;
    offline caps never above the calm ones; online pods get nothing on v1."""
    t = Tree(version)
    pods: list[PodView] = []
    ws: dict[str, float] = {}
    for i, (qos, offline, mem, limit, used) in enumerate(specs):
        qos_class = "BestEffort" if mem == 0 and qos != "Guaranteed" else qos
        p = pod(f"p{i}", level=-1 if offline else 0, qos=qos_class, mem=mem)
        pods.append(p)
        t.add(p, limit=limit)
        ws[p.uid] = used
    cfg = MemoryQosConfig(min_ratio=min_ratio, low_ratio=low_ratio, min_reserve=reserve)
    allocatable = 16 * GiB
    state = TIGHT if tight else CALM
    found, _ = plan_memory(pods, t.state(), MemoryInputs(allocatable, 0.5, state, ws), cfg)
    calm, _ = plan_memory(pods, t.state(), MemoryInputs(allocatable, 0.5, CALM, ws), cfg)
    calm_of = {(w.dirs.memory, w.file): int(w.value) for w in calm}
    for w in found:
        assert validate_cgroup_value(w.file, w.value, version) is None, w
        assert w.reason
    by = {(w.dirs.memory, w.file): int(w.value) for w in found}
    online = [p for p in pods if not p.offline]
    if version == "v1":
        assert all(w.file == "memory.soft_limit_in_bytes" for w in found)
    else:
        for file in ("memory.min", "memory.low"):
            pods_sum = sum(by[(t.pods[p.uid].pod.memory, file)] for p in online)
            burst = sum(by[(t.pods[p.uid].pod.memory, file)] for p in online if p.qos_class == "Burstable")
            assert by[(t.kubepods.memory, file)] == pods_sum
            assert by[(t.burstable.memory, file)] == burst
        assert by[(t.kubepods.memory, "memory.min")] <= max(0, allocatable - reserve)
    for p in pods:
        if p.offline:
            key = (t.pods[p.uid].pod.memory, "memory.high" if version == "v2" else "memory.soft_limit_in_bytes")
            assert MIN_HIGH <= by[key] <= max(MIN_HIGH, calm_of[key])
            if not tight:
                assert by[key] == calm_of[key]


def test_want_is_a_frozen_value() -> None:
    w = MemoryWant(CgroupDirs("/a", "/a", "/a", "v2"), "memory.low", "0", "why")
    with pytest.raises(AttributeError):
        w.value = "1"  # type: ignore[misc]


# --- inside decide -----------------------------------------------------------------------------------------------


def _decide(
    samples: Sequence[Sample], state: AgentState, t: Tree, pods: Sequence[PodView], config: AgentConfig
) -> Plan:
    snap = Snapshot(node(), tuple(pods), tuple(samples), new_samples=1, cgroups=t.state(), state=state)
    return decide(snap, config, samples[-1].time)


def test_decide_tightens_offline_memory_before_the_watermark_and_releases_with_hysteresis() -> None:
    t = Tree("v2")
    pods = [pod("on", mem=4 * GiB), pod("off", level=-1, qos="BestEffort")]
    for p in pods:
        t.add(p)
    off = t.pods[PodUID("off")].pod.memory
    config = AgentConfig()
    ws = {"on": (0.0, 6 * GiB), "off": (0.0, 3 * GiB)}

    def at(i: int, percent: float) -> Sample:
        return sample(1000.0 + i, 1000, 16 * GiB * percent / 100, pods=ws)

    samples = [at(0, 40)]
    plan = _decide(samples, AgentState(), t, pods, config)
    normal = str(int(16 * GiB * 0.5 * 0.9) // 4096 * 4096)
    assert {(w.path, w.file): w.value for w in plan.cgroup_writes}[(off, "memory.high")] == normal
    assert not plan.next_state.memory.tightened
    # 56 % of allocatable: past 60 - 5, under the eviction watermark (60): squeeze, no eviction
    samples.append(at(1, 56))
    plan = _decide(samples, plan.next_state, t, pods, config)
    assert plan.next_state.memory.tightened and not plan.evicting and plan.evictions == ()
    high = {(w.path, w.file): w for w in plan.cgroup_writes}[(off, "memory.high")]
    assert high.value == str(3 * GiB) and "memory pressure" in high.reason
    assert any("kubepods memory 56.0 % >= 55 %" in e for e in plan.explanations)
    assert any(f"write memory.high={3 * GiB} in {off}" in e for e in plan.explanations)
    # 52 %: inside the band, still tight; then 3 samples under 50 % release it
    state = plan.next_state
    for i, pct in enumerate((52, 45, 45), start=2):
        samples.append(at(i, pct))
        plan = _decide(samples, state, t, pods, config)
        state = plan.next_state
        assert state.memory.tightened
    samples.append(at(5, 45))
    plan = _decide(samples, state, t, pods, config)
    assert not plan.next_state.memory.tightened
    assert {(w.path, w.file): w.value for w in plan.cgroup_writes}[(off, "memory.high")] == normal


def test_decide_with_memory_qos_off_wants_no_memory_knob() -> None:
    t = Tree("v2")
    pods = [pod("on", mem=4 * GiB), pod("off", level=-1, qos="BestEffort")]
    for p in pods:
        t.add(p)
    config = AgentConfig(memory_qos=MemoryQosConfig(enabled=False))
    plan = _decide([sample(1000.0, 1000, 14 * GiB)], AgentState(), t, pods, config)
    assert not any(w.file.startswith("memory.") for w in plan.cgroup_writes)
    assert any("memoryQoS.enabled is false" in e for e in plan.explanations)
    # no label: no knobs at all, memory included
    snap = Snapshot(
        node(colocation=False, oversubscription=False), tuple(pods), (sample(1000.0, 1000, GiB),), 1, t.state()
    )
    assert decide(snap, AgentConfig(), 1000.0).cgroup_writes == ()


# --- configuration ------------------------------------------------------------------------------------------------


def test_config_keys_defaults_and_malformed_values() -> None:
    config, problems = load_config({"memoryQoS": {"lowRatio": 0.5, "pressurePSI": "0", "minReserve": "512Mi"}})
    m = config.memory_qos
    assert problems == () and m.low_ratio == 0.5 and m.pressure_psi == 0 and m.min_reserve == 512 * MiB
    assert (m.enabled, m.min_ratio, m.high_ratio, m.pressure_high_ratio) == (True, 0.0, 0.9, 1.0)
    assert (m.pressure_margin, m.release_margin, m.release_samples) == (5.0, 5.0, 3)
    bad = {
        "enabled": "maybe",
        "minRatio": 1.5,
        "lowRatio": -0.1,
        "highRatio": 0,
        "pressureHighRatio": "x",
        "pressureMargin": 101,
        "pressurePSI": -1,
        "releaseMargin": [],
        "releaseSamples": 0,
        "minReserve": "lots",
    }
    config, problems = load_config({"memoryQoS": bad})
    assert config.memory_qos == MemoryQosConfig()  # every malformed value keeps its default
    assert sorted(p.path for p in problems) == sorted(f"memoryQoS.{k}" for k in bad)
    assert all("using the default" in p.message for p in problems)
    _, problems = load_config({"qos": {"memory_high": False}})  # the key memoryQoS replaced
    assert [(p.path, p.severity) for p in problems] == [("qos.memory_high", "warning")]
