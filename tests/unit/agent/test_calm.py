"""Calm sampling (agent.decide.calm): the pure rule, each condition alone, and the daemon's periods on a fake clock."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from agent.config import DEFAULT_CONFIG, AgentConfig, load_config_text
from agent.daemon.metrics import AgentCollector
from agent.decide.calm import MARGIN, ROOM, Probe, decide_calm, probe_breaks, reason_not_calm
from agent.decide.ops import CapacityView, EvictPod, Plan, TierView, UsageView
from agent.model import Amounts
from agent.sense.pressure import PressureEvent, Source
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.test_daemon import NODE_MEASURE, scenario
from tidemark.apis import PodUID, Watermarks

MARKS = Watermarks((80, 30), (60, 30))
ALLOC = Amounts(4000.0, 16 * 2**30)
CFG = DEFAULT_CONFIG


def plan(cpu: float = 20.0, memory: float = 20.0, **kw: object) -> Plan:
    usage = UsageView(percent=Amounts(cpu, memory), newest_percent=Amounts(cpu, memory))
    return Plan(node="n1", labels={}, usage=usage, capacity=CapacityView(), evicting=False, **kw)  # type: ignore[arg-type]


def settled(**kw: object) -> TierView:
    return TierView(**{"ceiling": 2000.0, "bound": 2000.0, "rule": "deadband", "reason": "", "online_wait": 0.01,
                       "online_delay_ms": 0.1, **kw})  # type: ignore[arg-type]


def test_a_quiet_node_is_calm_only_after_calm_after_seconds() -> None:
    p = plan(tier=settled())
    first = decide_calm(p, MARKS, ALLOC, CFG, False, None, 100.0)
    assert first.since == 100.0 and not first.calm
    assert not decide_calm(p, MARKS, ALLOC, CFG, False, first.since, 109.9).calm
    late = decide_calm(p, MARKS, ALLOC, CFG, False, first.since, 110.0)
    assert late.calm and late.since == 100.0 and "every 5s" in late.reason


@pytest.mark.parametrize(
    ("p", "lasting", "said"),
    [
        (plan(), True, "pressure lasts"),
        (replace(plan(), evicting=True), False, "evicting"),
        (plan(evictions=(EvictPod(PodUID("u"), "ns", "x", "CPUStarvation"),)), False, "evicting"),
        (plan(cpu=80 - MARGIN + 0.5), False, "cpu usage"),
        (plan(memory=60 - MARGIN + 0.5), False, "memory usage"),
        (plan(tier=settled(rule="raise")), False, "moves (raise)"),
        (plan(tier=settled(rule="wait")), False, "moves (wait)"),
        (plan(tier=settled(rule="floor")), False, "moves (floor)"),
        (plan(tier=settled(online_delay_ms=1.0)), False, "online CPU wait"),
        (plan(offline_io_bps=8 * 2**20), False, "I/O limit"),
        (plan(online_io_wait=0.06), False, "online I/O wait"),
        (plan(tier_memory_headroom=int(ROOM * ALLOC.memory) - 1), False, "headroom"),
    ],
)
def test_each_condition_alone_breaks_calm(p: Plan, lasting: bool, said: str) -> None:
    why = reason_not_calm(p, MARKS, ALLOC, CFG, lasting)
    assert why is not None and said in why[1]
    out = decide_calm(p, MARKS, ALLOC, CFG, lasting, 0.0, 1000.0)
    assert not out.calm and out.since is None and said in out.reason and out.cause == why[0]


def test_the_share_signal_compares_the_wait_share() -> None:
    cfg = replace(CFG, tier=replace(CFG.tier, online_wait_signal="share"))
    target = cfg.tier.online_wait_target
    assert reason_not_calm(plan(tier=settled(online_wait=target * 0.4)), MARKS, ALLOC, cfg, False) is None
    assert reason_not_calm(plan(tier=settled(online_wait=target * 0.6)), MARKS, ALLOC, cfg, False) == (
        "cpu_wait", f"online CPU wait {target * 0.6:.3f} is over half its target {target:.3f}")


def test_just_under_every_line_is_calm() -> None:
    p = plan(cpu=80 - MARGIN, memory=60 - MARGIN, tier=settled(rule="bound"), online_io_wait=0.05,
             tier_memory_headroom=math.ceil(ROOM * ALLOC.memory))
    assert reason_not_calm(p, MARKS, ALLOC, CFG, False) is None


@pytest.mark.parametrize("period", [0.0, 1.0, 0.5])
def test_calm_period_not_above_the_sampler_period_is_off(period: float) -> None:
    cfg = replace(CFG, sampler=replace(CFG.sampler, calm_period=period))
    out = decide_calm(plan(), MARKS, ALLOC, cfg, False, 0.0, 1000.0)
    assert not out.calm and out.since is None and "off" in out.reason


@given(cpu=st.floats(0, 150), memory=st.floats(0, 150), since=st.none() | st.floats(0, 100), now=st.floats(100, 200))
def test_property_calm_only_with_room_under_every_watermark(cpu: float, memory: float, since: float | None,
                                                            now: float) -> None:  # fmt: skip
    out = decide_calm(plan(cpu, memory), MARKS, ALLOC, CFG, False, since, now)
    if out.calm:
        assert cpu <= 80 - MARGIN and memory <= 60 - MARGIN and out.since is not None
        assert now - out.since >= CFG.sampler.calm_after
    if cpu > 80 - MARGIN or memory > 60 - MARGIN:
        assert out.since is None


def test_keys_parse_and_bad_values_fall_back() -> None:
    cfg = load_config_text("sampler: {calmPeriod: 7s, calmAfter: 30s}\n")[0]
    assert (cfg.sampler.calm_period, cfg.sampler.calm_after) == (7.0, 30.0)
    bad, problems = load_config_text("sampler: {calmPeriod: -1}\n")
    assert bad.sampler.calm_period == AgentConfig().sampler.calm_period
    assert any(p.path == "sampler.calmPeriod" for p in problems)


def test_a_probe_breaks_calm_past_the_calm_line_only() -> None:
    prev = Probe(10.0, 0, 2 * 2**30)
    quiet = Probe(11.0, int(0.5 * 4000 * 1e6 * 1.0) // 1000 * 1000, 2 * 2**30)  # 2 cores... of 4: 50 %
    assert probe_breaks(prev, quiet, ALLOC, MARKS) is None
    busy = Probe(11.0, int(2.6e9), 2 * 2**30)  # 2.6 cores of 4 over 1 s: 65 %
    assert probe_breaks(prev, busy, ALLOC, MARKS) == (
        "probe_cpu", "probe: cpu usage 65 % is within 20 points of the 80 % high watermark")
    full = Probe(11.0, 0, int(0.41 * ALLOC.memory))
    assert (probe_breaks(prev, full, ALLOC, MARKS) or ("", ""))[0] == "probe_memory"
    assert probe_breaks(None, busy, ALLOC, MARKS) is None  # no CPU delta without a previous read
    assert probe_breaks(prev, Probe(11.0, None, None), ALLOC, MARKS) is None
    assert probe_breaks(prev, Probe(10.0, int(9e9), None), ALLOC, MARKS) is None  # no time passed
    assert probe_breaks(Probe(10.0, 5, None), Probe(11.0, 4, None), ALLOC, MARKS) is None  # counter reset


# --- the daemon ------------------------------------------------------------------------------------------------


def _samples(h: object) -> int:
    return h.agent.stats.samples  # type: ignore[attr-defined]


def _calm_scenario(tree: KubeletCgroupTree, tmp_path: Path):  # type: ignore[no-untyped-def]
    h = scenario(tree, tmp_path, config_text=NODE_MEASURE + "tier: {enabled: false}\n")
    h.cores = {"u-web": 0.3, "u-crunch": 0.2, "u-etl": 0.1}  # 15 % of 4 cores
    h.tick(12)
    assert h.agent.cycle.calm.calm, h.agent.cycle.calm.reason
    return h


def _gauge(h: object) -> str:
    reg = CollectorRegistry()
    reg.register(AgentCollector(h.agent))  # type: ignore[attr-defined]
    return generate_latest(reg).decode()


def test_a_calm_node_samples_every_calm_period_and_a_step_ends_it_at_the_next_sample(
    kubelet_cgroup_tree: KubeletCgroupTree, tmp_path: Path
) -> None:
    h = _calm_scenario(kubelet_cgroup_tree, tmp_path)
    assert "tidemark_agent_sample_period_seconds 5.0" in _gauge(h)
    before = _samples(h)
    h.tick(15)
    assert _samples(h) - before == 3  # every 5 s, not every second
    while _samples(h) == before + 3:  # to the tick of a calm sample: the next one is 5 s away
        h.tick(1)
    h.cores = {"u-web": 1.0, "u-crunch": 2.5, "u-etl": 0.1}  # 90 %: past the high watermark
    h.tick(1)  # the probe of the kubepods root sees it within a second, four before the next calm sample
    assert not h.agent.cycle.calm.calm and "probe: cpu usage" in h.agent.cycle.calm.reason
    before = _samples(h)
    h.tick(3)
    assert _samples(h) - before == 3  # every second again
    assert "tidemark_agent_sample_period_seconds 1.0" in _gauge(h)
    assert 'tidemark_agent_calm_ends_total{cause="probe_cpu"} 1.0' in _gauge(h)
    h.tick(3)
    assert [c.name for c in h.evictor.calls] == ["crunch"]


def test_a_calm_node_decides_once_per_calm_sample(kubelet_cgroup_tree: KubeletCgroupTree, tmp_path: Path) -> None:
    """The tier's reading and the decision follow the calm sample in its step, and a routine reconcile waits for
    it: before, the reconcile (every 10 s) and the capacity tick (every 10 s) decided on their own, 18 decisions
    a minute for 12 samples (the agent log of the fleet's idle hollow node; the decision is its largest CPU cost)."""
    h = _calm_scenario(kubelet_cgroup_tree, tmp_path)
    h.tick(10)  # the phases settle on the first calm samples
    samples, decisions = _samples(h), h.agent.cycle.decisions
    h.tick(60)
    assert _samples(h) - samples == 12
    assert h.agent.cycle.decisions - decisions == 12  # one per calm sample; the reconciles and capacity ticks with them
    assert h.agent.cycle.calm.calm


def test_a_pressure_trigger_ends_calm_at_once(kubelet_cgroup_tree: KubeletCgroupTree, tmp_path: Path) -> None:
    h = _calm_scenario(kubelet_cgroup_tree, tmp_path)
    before = _samples(h)
    h.agent.inbox.pressure(PressureEvent(h.agent.clock.monotonic(), Source("cpu", "kubepods", "psi", "/x")))
    h.agent.step()
    assert not h.agent.cycle.calm.calm and "pressure" in h.agent.cycle.calm.reason
    h.tick(1, seconds=0.1)  # MIN_SAMPLE_GAP after the last read at the latest
    assert _samples(h) == before + 1
