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
from agent.decide.calm import MARGIN, ROOM, decide_calm, reason_not_calm
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
    assert late.calm and late.since == 100.0 and "every 3s" in late.reason


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
    assert why is not None and said in why
    out = decide_calm(p, MARKS, ALLOC, CFG, lasting, 0.0, 1000.0)
    assert not out.calm and out.since is None and said in out.reason


def test_the_share_signal_compares_the_wait_share() -> None:
    cfg = replace(CFG, tier=replace(CFG.tier, online_wait_signal="share"))
    target = cfg.tier.online_wait_target
    assert reason_not_calm(plan(tier=settled(online_wait=target * 0.4)), MARKS, ALLOC, cfg, False) is None
    assert "online CPU wait" in (reason_not_calm(plan(tier=settled(online_wait=target * 0.6)), MARKS, ALLOC, cfg, False)
                                 or "")


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
    cfg = load_config_text("sampler: {calmPeriod: 5s, calmAfter: 30s}\n")[0]
    assert (cfg.sampler.calm_period, cfg.sampler.calm_after) == (5.0, 30.0)
    bad, problems = load_config_text("sampler: {calmPeriod: -1}\n")
    assert bad.sampler.calm_period == AgentConfig().sampler.calm_period
    assert any(p.path == "sampler.calmPeriod" for p in problems)


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
    assert "tidemark_agent_sample_period_seconds 3.0" in _gauge(h)
    before = _samples(h)
    h.tick(9)
    assert _samples(h) - before == 3  # every 3 s, not every second
    h.cores = {"u-web": 1.0, "u-crunch": 2.5, "u-etl": 0.1}  # 90 %: past the high watermark
    h.tick(3)  # the next calm sample sees it
    assert not h.agent.cycle.calm.calm and "cpu usage" in h.agent.cycle.calm.reason
    before = _samples(h)
    h.tick(3)
    assert _samples(h) - before == 3  # every second again
    assert "tidemark_agent_sample_period_seconds 1.0" in _gauge(h)
    h.tick(3)
    assert [c.name for c in h.evictor.calls] == ["crunch"]


def test_a_pressure_trigger_ends_calm_at_once(kubelet_cgroup_tree: KubeletCgroupTree, tmp_path: Path) -> None:
    h = _calm_scenario(kubelet_cgroup_tree, tmp_path)
    before = _samples(h)
    h.agent.inbox.pressure(PressureEvent(h.agent.clock.monotonic(), Source("cpu", "kubepods", "psi", "/x")))
    h.agent.step()
    assert not h.agent.cycle.calm.calm and "pressure" in h.agent.cycle.calm.reason
    h.tick(1, seconds=0.1)  # MIN_SAMPLE_GAP after the last read at the latest
    assert _samples(h) == before + 1
