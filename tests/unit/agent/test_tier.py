"""The offline tier's CPU ceiling (agent.decide.tier): the rules, their bounds as properties, the split, the
satisfaction eviction measure, and `decide` end to end with them."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import AgentConfig
from agent.config_tier import EvictionCpuConfig, TierConfig
from agent.decide import decide, tier, watermarks
from agent.decide.ops import Plan
from agent.decide.tier import CpuInputs, Group, ceiling, split
from agent.model import AgentState, OnlineWait, Sample, Snapshot
from tidemark.apis import PodUID

from .helpers import GiB, node, pod, sample

#: the rule's cases at the settings they were written for (the wait share, the system term subtracted; the shipped
#: defaults: test_the_shipped_defaults; the slice signal: test_the_slice_signal_*)
CFG = TierConfig(online_wait_target=0.05, suppress_ratio=0.9, cut="halve", online_wait_signal="share",
                 subtract_system=True)
#: the end-to-end cases' settings (pinned: the cases' figures follow from them)
TIER09 = TierConfig(suppress_ratio=0.9, cut="halve", online_wait_signal="share", subtract_system=True)
AGENT = AgentConfig(tier=TIER09)
NOW = 1_700_000_000.0
CALM = OnlineWait(0.0, "default/web", "cpu.pressure")
WAITING = OnlineWait(0.5, "default/web", "cpu.pressure")


def inputs(
    online: float = 1000, system: float = 200, offline: float = 1500, wait: OnlineWait | None = CALM
) -> CpuInputs:
    return CpuInputs(4000, online, system, offline, wait)


# --- the rules, by example -------------------------------------------------------------------------------------


def test_the_first_ceiling_is_the_bound() -> None:
    c = ceiling(None, inputs(), CFG)
    assert c.ceiling == c.bound == 4000 * 0.9 - 1000 - 200 and c.rule == "bound"
    assert "bound 2400m = allocatable 4000m x 0.9 - online 1000m - system 200m" in c.reason


def test_it_rises_one_step_a_period_and_falls_to_a_lower_bound_at_once() -> None:
    c = ceiling(1000, inputs(), CFG)
    assert c.ceiling == 1400 and c.rule == "raise"  # + 0.1 x 4000
    assert ceiling(2200, inputs(), CFG).ceiling == 2400  # the last step stops at the bound
    spike = ceiling(2400, inputs(online=3000), CFG)  # an online spike: bound 3600 - 3000 - 200 = 400
    assert spike.ceiling == 400 and spike.rule == "bound"


def test_it_halves_while_the_online_pods_wait_and_the_tier_uses_cpu() -> None:
    c = ceiling(2000, inputs(wait=WAITING), CFG)
    assert c.ceiling == 1000 and c.rule == "wait" and "online CPU wait 0.500 (default/web) > target 0.05" in c.reason
    idle = ceiling(2000, inputs(offline=50, wait=WAITING), CFG)  # the tier is not the cause: held, not halved
    assert idle.ceiling == 2000 and idle.rule == "hold"


def test_the_shipped_defaults() -> None:
    """A tenth of the node kept free, and a halving cut: 1.0 and the proportional cut made no difference the
    colocation benchmark's 7 paired rounds could tell; the slice signal at 0.5 ms, the system term not subtracted
    (docs/benchmarks-colocation.md, tenth run)."""
    d = TierConfig()
    assert (d.suppress_ratio, d.cut, d.online_wait_target, d.raise_step, d.min_cores) == (0.9, "halve", 0.10, 0.1,
                                                                                          0.1)
    assert (d.online_wait_signal, d.online_delay_target, d.subtract_system) == ("slice", 0.5, False)
    slightly = OnlineWait(0.9, "default/web", "schedstat", 0.625)
    assert ceiling(2000, inputs(wait=slightly), d).ceiling == 1000  # halved, whatever the excess
    share = TierConfig(online_wait_signal="share")
    assert ceiling(2000, inputs(wait=OnlineWait(0.125, "default/web", "schedstat")), share).ceiling == 1000


def test_the_slice_signal_reads_the_delay_per_slice_against_its_own_target() -> None:
    """`slice`: the delay per slice (ms) against `tier.cpu.onlineDelayTarget`, whatever the share; a share far over
    its own target does not cut (the eighth run's nginx: 0.10-0.12 beside BestEffort at an unchanged p99)."""
    cfg = TierConfig(online_wait_signal="slice", online_delay_target=0.5, subtract_system=True)
    busy_but_quick = OnlineWait(0.6, "default/web", "schedstat", 0.15)
    c = ceiling(1500, inputs(wait=busy_but_quick), cfg)
    assert c.rule == "raise" and "online CPU delay per slice 0.150ms <= target 0.5ms" in c.reason, c.reason
    slow = OnlineWait(0.01, "default/web", "schedstat", 2.0)
    c = ceiling(2000, inputs(wait=slow), cfg)
    assert c.ceiling == 1000 and c.rule == "wait" and "online CPU delay per slice 2.000ms" in c.reason, c.reason
    unread = OnlineWait(0.6, "default/web", "cpu.pressure", None)  # too few slices to tell: no signal
    assert ceiling(1500, inputs(wait=unread), cfg).rule == "raise"
    # its baseline is in ms per slice, capped at BASE_MAX_MS, and one of the other signal is not used
    idle = CpuInputs(4000, 1000, 200, 0, OnlineWait(0.3, "default/web", "schedstat", 5.0))
    b = tier.baseline_for(None, idle, 100.0, NOW, "slice")
    assert b is not None and (b.value, b.signal) == (tier.BASE_MAX_MS, "slice")
    share_base = tier.baseline_for(None, idle, 100.0, NOW, "share")
    assert share_base is not None and (share_base.value, share_base.signal) == (0.3, "share")


def test_the_system_term_is_subtracted_only_when_asked() -> None:
    """`tier.cpu.subtractSystem` false (shipped): the host's processes rank above the tier in the kernel already,
    so the bound is allocatable x ratio - online; true: Koordinator's bound, less the system usage too."""
    loose = TierConfig(subtract_system=False)
    c = ceiling(None, inputs(), loose)
    assert c.bound == 4000 * 0.9 - 1000 and "(system 200m not subtracted)" in c.reason, c.reason
    assert ceiling(None, inputs(), CFG).bound == 4000 * 0.9 - 1000 - 200
    samples = [sample(NOW, 1000.0, node_cpu=1500.0)]
    assert tier.bound_over(samples, [], 4000.0, 0.9, NOW, 5.0, system=False) == 2600.0
    assert tier.bound_over(samples, [], 4000.0, 0.9, NOW, 5.0) == 2100.0


def test_a_proportional_cut_trims_by_the_excess_and_halves_at_most() -> None:
    """`tier.cpu.cut: proportional`: a wait just over the target trims the ceiling, twice the target or more halves
    it (the shipped `halve` halves at every period over the target, whatever the excess)."""
    prop = TierConfig(online_wait_target=0.10, cut="proportional", online_wait_signal="share")
    slightly = OnlineWait(0.125, "default/web", "schedstat")
    c = ceiling(2000, inputs(wait=slightly), prop)
    assert c.ceiling == 1600 and c.rule == "wait" and "cut to 0.80x from 2000m" in c.reason
    assert ceiling(2000, inputs(wait=WAITING), prop).ceiling == 1000  # 0.5 / 0.10: five times the target, halved
    halve = TierConfig(online_wait_target=0.10, cut="halve", online_wait_signal="share")
    assert ceiling(2000, inputs(wait=slightly), halve).ceiling == 1000
    # a baseline raises the target the cut is measured against: 0.125 over 0.10 + 0.025 is within it
    assert ceiling(2000, inputs(wait=slightly), prop, True, 0.025).rule != "wait"
    a_hair = OnlineWait(0.1000001, "default/web", "schedstat")
    assert ceiling(2000, inputs(wait=a_hair), prop).ceiling == 2000 * tier.TRIM  # never a cut of nothing


def test_a_bound_within_the_deadband_keeps_the_ceiling_up_or_down() -> None:
    """Koordinator's bypass (cpu_suppress.go, `suppressBypassQuotaDeltaRatio`): the bound moves with each second's
    online usage; a move under 2 % of allocatable (80m of 4000m) is not worth a quota write and a journal save.
    Before, every such move was one, the larger part of an idle agent's CPU."""
    at = 4000 * 0.9 - 1000 - 200  # 2400
    for online in (1000 - 79, 1000 + 79):  # the bound 79m over and under the ceiling in force
        c = ceiling(at, inputs(online=online), CFG)
        assert c.ceiling == at and c.rule == "deadband" and "within 80m (0.02 of allocatable)" in c.reason
        assert ceiling(at, inputs(online=online), CFG, due=False).ceiling == at
    assert ceiling(at, inputs(online=1000 + 81), CFG).ceiling == at - 81  # past it: the bound, at once
    assert ceiling(at, inputs(online=1000 - 81), CFG).ceiling == at + 81
    assert ceiling(2000, inputs(), CFG).ceiling == 2400  # a raise step is never held by it
    assert ceiling(at, inputs(wait=WAITING), CFG).ceiling == at / 2  # nor the wait rule's cut
    assert ceiling(130, inputs(online=4000), CFG).ceiling == 100  # nor the way to the floor


def test_a_tier_using_under_half_its_ceiling_is_not_raised_and_is_once_it_uses_it() -> None:
    """RFC 7661's rule for an application-limited sender: a raise the tier would not use changes nothing and costs a
    quota write and a journal save. On the fleet's idle hollow node (3 offline pods at 100m each, spiky online pods)
    the ceiling rose and fell every calm sample, 25 writes in 90 s. Cuts still come at once."""
    at = 1000.0
    idle = ceiling(at, inputs(offline=499), CFG)  # bound 2400m, the tier uses 499m < half of 1000m
    assert idle.ceiling == at and idle.rule == "unused" and "the tier uses 499m, under 0.5 of it" in idle.reason
    assert ceiling(at, inputs(offline=500), CFG).ceiling == at + 400  # half: the raise step
    assert ceiling(at, inputs(offline=0, online=3000), CFG).ceiling == 400  # a lower bound: cut at once
    assert ceiling(at, inputs(offline=0, wait=WAITING), CFG).rule == "hold"  # the wait rule as before
    assert ceiling(None, inputs(offline=0), CFG).ceiling == 2400  # the first decision starts at the bound


def test_the_floor_wins_over_the_bound() -> None:
    c = ceiling(500, inputs(online=4000), CFG)
    assert c.ceiling == 100 and c.rule == "floor"  # tier.cpu.minCores 0.1


def test_within_a_period_it_neither_rises_nor_halves_but_follows_a_lower_bound() -> None:
    assert ceiling(1000, inputs(), CFG, due=False).ceiling == 1000
    assert ceiling(2000, inputs(wait=WAITING), CFG, due=False).ceiling == 2000
    assert ceiling(2400, inputs(online=3000), CFG, due=False).ceiling == 400


# --- the bounds, as properties ---------------------------------------------------------------------------------

milli = st.floats(0, 64_000, allow_nan=False)
configs = st.builds(
    TierConfig,
    suppress_ratio=st.floats(0.01, 1.0),
    online_wait_target=st.floats(0.0, 1.0),
    raise_step=st.floats(0.01, 1.0),
    min_cores=st.floats(0.0, 4.0),
    cut=st.sampled_from(["halve", "proportional"]),
    online_wait_signal=st.sampled_from(["slice", "share"]),
    online_delay_target=st.floats(0.0, 10.0),
    subtract_system=st.booleans(),
)
waits = st.one_of(st.none(), st.builds(OnlineWait, st.one_of(st.none(), st.floats(0.0, 1.0)), st.just("p"),
                                       st.just("cpu.pressure"), st.one_of(st.none(), st.floats(0.0, 50.0))))


@settings(max_examples=400, deadline=None)
@given(
    previous=st.one_of(st.none(), milli),
    allocatable=st.floats(1000, 64_000),
    online=milli,
    system=milli,
    offline=milli,
    wait=waits,
    cfg=configs,
    due=st.booleans(),
    base=st.one_of(st.just(0.0), st.floats(0.0, tier.BASE_MAX)),
)
def test_ceiling_bounds(
    previous: float | None,
    allocatable: float,
    online: float,
    system: float,
    offline: float,
    wait: OnlineWait | None,
    cfg: TierConfig,
    due: bool,
    base: float,
) -> None:
    inp = CpuInputs(allocatable, online, system, offline, wait)
    c = ceiling(previous, inp, cfg, due, base)
    floor = cfg.min_cores * 1000
    bound = allocatable * cfg.suppress_ratio - online - (system if cfg.subtract_system else 0.0)
    assert c.bound == bound
    band = tier.DEADBAND * allocatable
    # never above the bound (by more than the deadband, and only when kept) unless at the floor, never below the floor
    assert c.ceiling <= bound + 1e-6 or c.ceiling == floor or (c.rule == "deadband" and c.ceiling < bound + band)
    assert c.ceiling >= floor
    if c.rule == "deadband":
        assert previous is not None and c.ceiling == previous and abs(bound - previous) < band
    if previous is not None and previous >= floor:
        # rises at most raiseStep x allocatable per period (and not at all within one), and only for a tier using
        # at least half of it
        assert c.ceiling <= previous + (cfg.raise_step * allocatable if due else 0.0) + 1e-6
        if c.ceiling > previous + 1e-6:
            assert offline >= tier.UNUSED * previous
        if c.rule == "unused":
            assert c.ceiling == previous and offline < tier.UNUSED * previous and bound > previous
        # falls at once to a lower bound, unless it is within the deadband
        if bound < previous - band:
            assert c.ceiling <= max(bound, floor) + 1e-6
        # falls while the online pods wait past the target over their baseline and the tier uses CPU
        value = tier.signal_of(wait, cfg.online_wait_signal)  # the delay per slice or the share, per the config
        waiting = value is not None and value > tier.target_of(cfg) + base
        if due and waiting and offline >= tier.CAUSE * previous and previous > floor:
            assert c.ceiling < previous
        # one period's cut is at most a half, whatever the wait and the cut mode (only a lower bound goes further)
        assert c.ceiling >= min(max(bound, floor), previous * tier.CUT) - 1e-6
        # never falls for the wait rule while the wait is within target + baseline
        if value is not None and value <= tier.target_of(cfg) + base and bound >= previous:
            assert c.ceiling >= previous - 1e-6


def test_the_target_is_on_top_of_the_wait_the_online_pods_have_without_offline_work() -> None:
    """Before: an online pod waiting 8 % with the tier idle held the ceiling at its floor for good (the colocation
    benchmark's quick run: a 100m quota on a node 63 % idle). The baseline makes that 8 % its own."""
    busy_host = OnlineWait(0.08, "default/web", "schedstat")
    floor = CFG.min_cores * 1000
    idle = CpuInputs(4000, 1000, 200, 80, busy_host)  # the tier at its floor, under IDLE x allocatable
    base = tier.baseline_for(None, idle, floor, NOW)
    assert base is not None and base.value == 0.08 and base.at == NOW
    up = ceiling(100, idle, CFG, True, base.value)
    assert up.rule == "raise" and up.ceiling == 500 and "<= target 0.05 + baseline 0.080" in up.reason
    assert ceiling(100, idle, CFG).rule == "hold" or ceiling(100, idle, CFG).ceiling == 100  # without: stuck
    # the tier then makes them wait more than the target over the baseline: halved at once
    hurt = CpuInputs(4000, 1000, 200, 1500, OnlineWait(0.2, "default/web", "schedstat"))
    cut = ceiling(2000, hurt, CFG, True, base.value)
    assert cut.rule == "wait" and cut.ceiling == 1000 and "> target 0.05 + baseline 0.080" in cut.reason


def test_the_baseline_averages_idle_periods_follows_a_lower_wait_and_expires() -> None:
    floor = 100.0

    def at(offline: float, ratio: float | None) -> CpuInputs:
        return CpuInputs(4000, 1000, 200, offline, None if ratio is None else OnlineWait(ratio, "p", "schedstat"))

    b1 = tier.baseline_for(None, at(0, 0.10), floor, NOW)
    b2 = tier.baseline_for(b1, at(150, 0.20), floor, NOW + 1)  # 150m <= 5 % of 4000m: idle, averaged in
    assert b2 is not None and abs(b2.value - (0.10 + tier.BASE_WEIGHT * 0.10)) < 1e-9 and b2.at == NOW + 1
    busy = tier.baseline_for(b2, at(1500, 0.30), floor, NOW + 2)  # the tier runs: a higher wait is not baseline
    assert busy == b2
    lower = tier.baseline_for(b2, at(1500, 0.01), floor, NOW + 3)  # a lower wait with the tier running: at once
    assert lower is not None and lower.value == 0.01 and lower.at == b2.at
    assert tier.baseline_for(b2, at(0, None), floor, NOW + 3) == b2  # no wait read: kept
    assert tier.baseline_for(b2, at(1500, 0.30), floor, NOW + 1 + tier.BASE_TTL + 1) is None  # expired
    capped = tier.baseline_for(None, at(0, 0.9), floor, NOW)
    assert capped is not None and capped.value == tier.BASE_MAX
    assert tier.baseline_for(None, at(1500, 0.3), floor, NOW) is None  # never measured idle: none


def test_decide_learns_the_baseline_at_the_floor_and_climbs_back() -> None:
    """End to end through `decide`: an online pod waiting 8 % whatever the tier does. Before, the ceiling halved to the
    floor and stayed there; now the periods at the floor measure the baseline and the ceiling climbs again."""
    wait = OnlineWait(0.08, "default/web", "schedstat")
    old: list[float] = []
    prev, jobs = None, 1400.0
    for _ in range(40):  # the old rule (no baseline): each job uses what the ceiling leaves it (1400m demand each)
        prev = ceiling(prev, CpuInputs(4000, 1000, 100, 2 * jobs, wait), CFG).ceiling
        old.append(prev)
        jobs = min(1400.0, prev / 2)
    assert old[-10:] == [100.0] * 10, old  # before: halved to the floor and held there
    state, new, jobs = AgentState(), [], 1400.0
    for i in range(40):
        plan = decide(snap(1000, jobs, n=1, state=state, at=NOW + i, wait=wait), AgentConfig(tier=CFG), NOW + i)
        assert plan.tier is not None
        new.append(plan.tier.ceiling)
        state = plan.next_state
        jobs = min(1400.0, plan.tier.ceiling / 2)
    assert new[-1] >= 2000 and min(new) >= 100, new  # now: back up toward the bound
    assert state.tier_wait_base is not None and abs(state.tier_wait_base.value - 0.08) < 1e-9


@settings(max_examples=400, deadline=None)
@given(
    total=st.floats(0, 64_000),
    demands=st.lists(st.tuples(milli, st.one_of(st.none(), milli)), min_size=1, max_size=12),
    least=st.floats(0, 500),
)
def test_split_never_passes_the_ceiling(total: float, demands: list[tuple[float, float | None]], least: float) -> None:
    groups = [Group(str(i), d, lim) for i, (d, lim) in enumerate(demands)]
    shares = split(total, groups, least)
    assert set(shares) == {g.key for g in groups}
    assert sum(shares.values()) <= total + 1e-6 * max(1.0, total)
    for g in groups:
        assert shares[g.key] >= 0 and (g.limit is None or shares[g.key] <= g.limit + 1e-9)
        if least * len(groups) <= total and (g.limit is None or g.limit >= least):
            assert shares[g.key] >= least - 1e-9


def test_split_by_demand_plus_an_equal_share_of_the_slack() -> None:
    shares = split(1000, [Group("a", 600), Group("b", 0)], 20)
    # 40 held back (20 each); 960 by weight: a 600 + 480, b 0 + 480 -> 960 x 1080/1560 and 960 x 480/1560
    assert round(shares["a"]) == 20 + round(960 * 1080 / 1560) and round(shares["b"]) == 20 + round(960 * 480 / 1560)
    assert split(30, [Group("a", 1), Group("b", 1)], 20) == {"a": 15.0, "b": 15.0}  # too small for 20m each


def test_groups_the_root_takes_besteffort_offline_pods_unless_an_online_pod_sits_in_it() -> None:
    pods = [
        pod("be1", level=-1, qos="BestEffort"),
        pod("be2", level=-1, qos="BestEffort"),
        pod("bu", level=-1, cpu=500, cpu_limit=800),
        pod("web", cpu=1000),
    ]
    usage = {PodUID("be1"): sample(0, 0).node, PodUID("bu"): sample(0, 300).node}
    groups, root = tier.groups_of(pods, {k: v for k, v in usage.items() if v is not None})
    assert root and [g.key for g in groups] == [tier.ROOT, "bu"] and groups[1].limit == 800
    groups, root = tier.groups_of([*pods, pod("be-online", qos="BestEffort")], {})
    assert not root and [g.key for g in groups] == ["be1", "be2", "bu"]


# --- eviction by starvation ------------------------------------------------------------------------------------


def test_starved_only_when_the_tier_uses_its_ceiling_and_the_ceiling_is_under_the_satisfaction() -> None:
    assert watermarks.starved(950, 1000, 2000, 0.9, 0.6)  # uses 95 %, ceiling 50 % of requests
    assert not watermarks.starved(500, 1000, 2000, 0.9, 0.6)  # lacks work, not CPU
    assert not watermarks.starved(950, 1000, 1500, 0.9, 0.6)  # ceiling 67 % of requests: satisfied enough
    assert not watermarks.starved(950, 1000, 0, 0.9, 0.6)  # nothing requested, nothing promised


PODS = (
    pod("web", cpu=1000, mem=GiB, created=1),
    pod("job-a", level=-1, qos="BestEffort", bcpu=2000, created=2),
    pod("job-b", level=-1, qos="BestEffort", bcpu=2000, created=3),
)


def snap(
    web: float, jobs: float, n: int = 3, state: AgentState | None = None, at: float = NOW,
    history: tuple[Sample, ...] = (), wait: OnlineWait = CALM,
) -> Snapshot:
    samples = tuple(
        sample(at - n + 1 + i, web + 2 * jobs, GiB, node_cpu=web + 2 * jobs + 100,
               pods={"web": (web, GiB), "job-a": (jobs, 0), "job-b": (jobs, 0)})
        for i in range(n)
    )  # fmt: skip
    return Snapshot(node(), PODS, (*history, *samples), n, None, state or AgentState(), online_wait=wait)


def test_offline_pods_soaking_idle_cpu_are_not_evicted_under_the_satisfaction_measure() -> None:
    # kubepods 1000 + 2 x 1400 = 95 % of 4000 (past the 80 % watermark), online alone 25 %, the tier under its ceiling
    s = snap(1000, 1400)
    assert not decide(s, AGENT, NOW).evictions
    node_rule = decide(s, AgentConfig(tier=TIER09, eviction_cpu=EvictionCpuConfig(measure="node")), NOW)
    assert node_rule.evicting and node_rule.evictions and node_rule.evictions[0].reason == "CPUHighWatermark"


def test_a_starved_tier_waits_the_rebalance_grace_then_evicts_until_the_ceiling_satisfies_what_remains() -> None:
    # online 2700m: ceiling = 3600 - 2700 - 100 = 800m for 4000m of batch requests (20 %), used in full
    # (30 s of it: `eviction.cpu.window`)
    def run(cfg: AgentConfig, at: tuple[float, ...], state: AgentState) -> Plan:
        plan = None
        for t in at:
            s = snap(2700, 400, n=30, state=state, at=t)
            s = Snapshot(s.node, s.pods, s.samples, 1, None, state, online_wait=CALM)
            plan = decide(s, cfg, t)
            state = plan.next_state
        assert plan is not None
        return plan

    plan = run(AGENT, (NOW, NOW + 1, NOW + 2), AgentState())
    assert plan.evicting and plan.tier is not None and plan.tier.ceiling == 800
    # starved from the cycle the node turned evicting: CPUStarvation waits `eviction.cpu.rebalanceGrace` (40 s) for
    # the scheduler's rescheduling plugin, which the published node-usage `offline` tells (allowance 20 %, 0.6)
    assert plan.evictions == () and plan.next_state.starved_since == NOW + 2
    assert any("CPUStarvation evictions wait 40 s more" in e for e in plan.explanations), plan.explanations
    waiting = run(AGENT, (NOW + 41,), plan.next_state)
    assert waiting.evictions == () and waiting.next_state.starved_since == NOW + 2
    # 800 / 4000 = 20 %; evicting one pod leaves 800 / 2000 = 40 % <= 60 %: both go, once the grace is over
    done = run(AGENT, (NOW + 42,), plan.next_state)
    assert [e.reason for e in done.evictions] == ["CPUStarvation", "CPUStarvation"]
    # no grace (0): at once, as before it; a tier no longer starved forgets its start
    no_grace = AgentConfig(tier=TIER09, eviction_cpu=EvictionCpuConfig(rebalance_grace=0))
    at_once = run(no_grace, (NOW, NOW + 1, NOW + 2), AgentState())
    assert [e.reason for e in at_once.evictions] == ["CPUStarvation", "CPUStarvation"]
    calm = decide(snap(1000, 400, n=30, state=plan.next_state, at=NOW + 3), AGENT, NOW + 3)
    assert calm.next_state.starved_since is None


def test_a_tier_turning_starved_is_published_at_once_out_of_the_capacity_tick() -> None:
    """The rescheduling plugin's move must come within the grace: node-usage carries the starving tier in the same
    cycle, not at the next capacity tick (here 100 s away), even before the node turns evicting (one sample)."""
    calm = {"cpu": 10, "memory": 10, "window": "3s", "time": "2023-11-14T22:13:10Z",
            "offline": {"allowance": 70.0, "satisfaction": 0.6}}  # 2800m for 4000m requested: not starved
    n = node(annotations={"tidemark.io/node-usage": json.dumps(calm)}, last_publish=NOW - 10)
    history = snap(2700, 400, n=29, at=NOW - 1).samples
    starved = snap(2700, 400, n=1, history=history)
    state = AgentState(capacity_due=NOW + 100)
    plan = decide(Snapshot(n, PODS, starved.samples, 1, None, state, online_wait=CALM), AGENT, NOW)
    assert not plan.evicting and not plan.capacity_tick
    assert plan.report is not None, plan.explanations
    doc = json.loads(str(plan.report.annotations["tidemark.io/node-usage"]))
    assert doc["offline"] == {"allowance": 20.0, "satisfaction": 0.6}  # 800m of 4000m, for 4000m requested
    # already published as starved: nothing to write off the tick
    n2 = node(annotations={"tidemark.io/node-usage": json.dumps({**calm, "offline": doc["offline"]})},
              last_publish=NOW - 10)
    again = decide(Snapshot(n2, PODS, starved.samples, 1, None, state, online_wait=CALM), AGENT, NOW)
    assert again.report is None or "tidemark.io/node-usage" not in again.report.annotations


def blip(at: float, web: float = 700, jobs: float = 400) -> Sample:
    """One sample whose online usage reads low: a counter read between two updates, or a one-second lull."""
    return sample(at, web + 2 * jobs, GiB, node_cpu=web + 2 * jobs + 100,
                  pods={"web": (web, GiB), "job-a": (jobs, 0), "job-b": (jobs, 0)})  # fmt: skip


def test_a_one_sample_lull_neither_ends_the_starvation_nor_restarts_its_grace() -> None:
    """The allowance is the median bound of the last 5 s (`ALLOWANCE_WINDOW`): a starving tier (800m for 4000m,
    20 %) with one sample whose bound reads 2800m (70 %) stays starved: node-usage is not flipped back, the grace goes
    on, and the evictions come when it ends. Judged by the newest sample, each such second restarted the grace (a CI
    fleet run moved and evicted nothing in a minute of starvation)."""
    state, n, plan = AgentState(), node(), None
    for t in (NOW - 3, NOW - 2, NOW - 1):  # the node turns evicting after `eviction.consecutive` samples
        plan = decide(Snapshot(n, PODS, snap(2700, 400, n=30, at=t).samples, 1, None, state, online_wait=CALM),
                      AGENT, t)  # fmt: skip
        state = plan.next_state
        if plan.report is not None and "tidemark.io/node-usage" in plan.report.annotations:
            n = node(annotations={"tidemark.io/node-usage": str(plan.report.annotations["tidemark.io/node-usage"])},
                     last_publish=t)  # fmt: skip
    assert plan is not None and state.starved_since == NOW - 1, plan.explanations
    assert json.loads(n.annotations["tidemark.io/node-usage"])["offline"]["allowance"] == 20.0
    starved = snap(2700, 400, n=30, at=NOW - 1).samples
    lull = decide(Snapshot(n, PODS, (*starved, blip(NOW)), 1, None, state, online_wait=CALM), AGENT, NOW)
    assert lull.tier is not None and lull.tier.bound == 2800  # the newest sample's own bound
    assert lull.next_state.starved_since == NOW - 1, lull.explanations
    written = lull.report.annotations.get("tidemark.io/node-usage") if lull.report is not None else None
    assert written is None or json.loads(str(written))["offline"]["allowance"] == 20.0
    assert not any("back over" in e for e in lull.explanations), lull.explanations
    # three lulls in five seconds are no lull: the median is theirs (2800m, 70 %)
    calm = (*starved[:-2], *(blip(NOW - 2 + i) for i in range(3)))
    back = decide(Snapshot(n, PODS, calm, 3, None, state, online_wait=CALM), AGENT, NOW)
    assert back.next_state.starved_since is None
    # the grace runs on through the lull: the evictions come 40 s after the start
    late = (*snap(2700, 400, n=30, at=NOW + 38).samples, blip(NOW + 39))
    done = decide(Snapshot(n, PODS, late, 1, None, lull.next_state, online_wait=CALM), AGENT, NOW + 39)
    assert [e.reason for e in done.evictions] == ["CPUStarvation", "CPUStarvation"], done.explanations


def test_the_judged_bound_is_the_median_of_the_windows_samples() -> None:
    pods = PODS
    samples = (blip(NOW - 5, web=100), blip(NOW - 4, web=2700), blip(NOW - 3, web=200), blip(NOW - 2, web=700),
               blip(NOW - 1, web=2700), blip(NOW, web=2700))  # fmt: skip
    # the last 5 s (NOW-4..NOW): bounds 800, 3300, 2800, 800, 800 (3600 - online - 100 of system): the median, 800
    assert tier.bound_over(samples, pods, 4000.0, 0.9, NOW, 5.0) == 800.0
    assert tier.bound_over(samples, pods, 4000.0, 0.9, NOW - 1, 2.0) == (2800.0 + 800.0) / 2
    assert tier.bound_over(samples, pods, 4000.0, 0.9, NOW, 0.0) is None  # eviction.cpu.window 0: the sample alone
    assert tier.bound_over((), pods, 4000.0, 0.9, NOW, 5.0) is None
    # the floor still counts: a ceiling above the bound is the allowance
    floor = tier.TierCpu(tier.ceiling(400.0, CpuInputs(2000.0, 1700.0, 250.0, 400.0), TIER09), None, {}, 50.0)
    assert floor.decision.ceiling == 100.0 and floor.allowance == 100.0
    # else the judged bound, whatever the ceiling rose to on an odd sample
    raised = tier.TierCpu(tier.ceiling(800.0, CpuInputs(4000.0, 700.0, 100.0, 800.0), TIER09), None, {}, 800.0)
    assert raised.decision.ceiling > 800.0 and raised.allowance == 800.0


def test_online_usage_alone_past_the_high_watermark_evicts_with_its_own_reason() -> None:
    state = AgentState()
    plan = None
    for i in range(3):
        s = snap(3300, 100, state=state)  # online 82.5 %
        plan = decide(s, AgentConfig(tier=TIER09, eviction_cpu=EvictionCpuConfig(satisfaction=0.01)), NOW + i)
        state = plan.next_state
    assert plan is not None and plan.evicting
    assert plan.evictions and {e.reason for e in plan.evictions} == {"OnlineCPUHighWatermark"}


def test_decide_carries_the_ceiling_and_raises_it_once_a_period() -> None:
    cfg = AGENT
    p1 = decide(snap(3000, 100), cfg, NOW)
    assert p1.tier is not None and p1.tier.ceiling == 500 and p1.next_state.tier_cpu == 500  # 3600 - 3000 - 100
    low = p1.next_state
    p2 = decide(snap(1000, 200, state=low), cfg, NOW + 1)  # the tier uses 400m of its 500m: it wants more
    assert p2.tier is not None and p2.tier.ceiling == 900 and p2.tier.rule == "raise"
    p3 = decide(snap(1000, 200, state=p2.next_state), cfg, NOW + 1.2)  # a pod event 0.2 s later: no second step
    assert p3.tier is not None and p3.tier.ceiling == 900
    off = decide(snap(1000, 100, state=p2.next_state), AgentConfig(tier=TierConfig(enabled=False)), NOW + 2)
    assert off.tier is None and off.next_state.tier_cpu is None


def test_a_tier_still_climbing_to_its_bound_is_not_starved() -> None:
    # after an agent start the ceiling climbs from the floor a step a period; a busy offline tier at 100m of a
    # 1500m bound is being given more, not starved (make run's scenario evicted both jobs on an idle node)
    cfg = TIER09
    climbing = tier.ceiling(100.0, CpuInputs(2000.0, 50.0, 150.0, 100.0), cfg)
    assert climbing.rule == "raise" and climbing.ceiling < climbing.bound
    t = tier.TierCpu(climbing, None, {})
    assert t.allowance == climbing.bound
    assert not watermarks.starved(100.0, t.allowance, 400.0, 0.9, 0.6)
    # a cut holds it: judged against the ceiling it is held to
    cut = tier.TierCpu(tier.ceiling(1500.0, CpuInputs(2000.0, 1550.0, 150.0, 100.0), cfg), None, {})
    assert cut.decision.rule in ("bound", "floor") and cut.allowance == cut.ceiling


def test_a_tier_cut_for_the_online_wait_is_not_starved() -> None:
    # the colocation benchmark's two-thirds cpu cell: the online pods wait, the busy tier is halved period after
    # period to the floor while the bound leaves it 1000m; judged by the cut it was starved (100m <= 0.6 x 860m)
    # and both offline pods were evicted at 30 % node CPU. The cut gives the CPU back once the wait falls.
    cfg = TIER09
    waiting = OnlineWait(0.30, "default/nginx", "schedstat")
    c, d = 400.0, None
    for _ in range(4):
        d = tier.ceiling(c, CpuInputs(2000.0, 600.0, 200.0, c, waiting), cfg)
        c = d.ceiling
    assert d is not None and d.ceiling == 100.0 and d.bound == 1000.0
    t = tier.TierCpu(d, None, {})
    assert t.allowance == d.bound
    assert not watermarks.starved(100.0, t.allowance, 860.0, 0.9, 0.6)
    # the same cut on a node whose capacity leaves the tier nothing: starved, judged by the floor
    busy = tier.TierCpu(tier.ceiling(400.0, CpuInputs(2000.0, 1500.0, 250.0, 400.0, waiting), cfg), None, {})
    assert busy.decision.bound < 100.0 and busy.allowance == 100.0
    assert watermarks.starved(100.0, busy.allowance, 860.0, 0.9, 0.6)


def test_a_start_up_burst_is_not_a_starved_tier() -> None:
    # the same starved shape for the last 3 s only, after 27 s of an idle tier (kubelet restarting, pods starting):
    # the window's mean (30 s) is far under the ceiling, so no eviction and the node is not evicting
    state = AgentState()
    idle = snap(2700, 0, n=27, at=NOW - 3).samples
    plan = None
    for i in range(3):
        s = snap(2700, 400, n=1 + i, state=state, at=NOW + i, history=idle)
        s = Snapshot(s.node, s.pods, s.samples, 1, None, state, online_wait=CALM)
        plan = decide(s, AGENT, NOW + i)
        state = plan.next_state
    assert plan is not None and plan.tier is not None and plan.tier.ceiling == 800
    assert not plan.evicting and not plan.evictions
    # judged sample by sample (window 0, the old rule) the same burst evicts both pods
    state = AgentState()
    cfg = AgentConfig(tier=TIER09, eviction_cpu=EvictionCpuConfig(window=0, rebalance_grace=0))
    for i in range(3):
        s = snap(2700, 400, n=1 + i, state=state, at=NOW + i, history=idle)
        s = Snapshot(s.node, s.pods, s.samples, 1, None, state, online_wait=CALM)
        plan = decide(s, cfg, NOW + i)
        state = plan.next_state
    assert plan.evicting and [e.reason for e in plan.evictions] == ["CPUStarvation", "CPUStarvation"]


def test_offline_usage_over_the_window_weighs_each_sample_and_needs_90_percent_of_it() -> None:
    pods = PODS
    s = [sample(NOW - 9 + i, 0, pods={"job-a": (100.0 * i, 0), "web": (5000, 0)}) for i in range(10)]
    assert tier.offline_over(s, pods, NOW, 10) == 450.0  # the online pod does not count
    assert tier.offline_over(s, pods, NOW, 5) == 700.0  # the samples ending at NOW-4 .. NOW
    assert tier.offline_over(s, pods, NOW - 5, 4) == 250.0  # those after `until` are left out
    assert tier.offline_over(s[-8:], pods, NOW, 10) is None  # 8 s of a 10 s window
    assert tier.offline_over(s[-9:], pods, NOW, 10) == 500.0  # 9 s: enough
    long = [sample(NOW - 5 + 5 * i, 0, pods={"job-a": (1000.0 * i, 0)}, elapsed=5.0) for i in range(2)]
    assert tier.offline_over(long, pods, NOW, 10) == 500.0
    assert tier.offline_over([], pods, NOW, 10) is None
