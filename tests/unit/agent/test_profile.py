"""Usage profiles (agent.decide.profile): the decaying histogram as Koordinator's, the fold, the estimate and
the checkpoint document."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.config_profile import HOUR, ProfileConfig
from agent.decide import profile as pf
from agent.model import EMPTY_HISTOGRAM, Amounts, Histogram, ProfileState
from tests.unit.agent.helpers import GiB, MiB, pod, sample

CFG = ProfileConfig(horizon=2 * HOUR)
DAY = 86400.0
T0 = 1_700_000_000.0 - (1_700_000_000.0 % DAY)  # a midnight UTC


# --- buckets and one histogram (Koordinator's pkg/util/histogram semantics) -------------------------------------


def test_bucket_counts_are_koordinators() -> None:
    # NewExponentialHistogramOptions(1024 cores, 0.025, 1.05) and (2 TiB, 5 MiB, 1.05)
    assert pf.SCHEME["cpu"].count == 158
    assert pf.SCHEME["memory"].count == 205


@given(st.floats(min_value=0.0, max_value=2e6, allow_nan=False))
def test_find_is_the_inverse_of_start(value: float) -> None:
    s = pf.SCHEME["cpu"]
    b = s.find(value)
    assert s.start(b) <= value * (1 + 1e-12) + 1e-9
    if b < s.count - 1:
        assert value < s.start(b + 1) * (1 + 1e-12)


def test_percentile_is_the_end_of_its_bucket() -> None:
    h = pf.add(EMPTY_HISTOGRAM, "cpu", 1000.0, 1.0, T0, CFG.half_life_cpu)
    s = pf.SCHEME["cpu"]
    b = s.find(1000.0)
    assert pf.percentile(h, "cpu", 0.95) == pytest.approx(s.start(b + 1))
    assert 1000.0 <= pf.percentile(h, "cpu", 0.95) <= 1000.0 * 1.051
    assert pf.percentile(EMPTY_HISTOGRAM, "cpu", 0.5) == 0.0


def test_older_samples_weigh_half_per_half_life() -> None:
    hl = 3600.0
    # 10 minutes at 1000m one half-life ago against 10 minutes at 3000m now: weights 1:2 per sample
    old = [(1000.0, 1.0, T0 + i * 60) for i in range(10)]
    new = [(3000.0, 1.0, T0 + hl + i * 60) for i in range(10)]
    h = pf.add_many(EMPTY_HISTOGRAM, "cpu", old + new, hl)
    at = T0 + hl + 540
    assert pf.weight_at(h, at, hl) == pytest.approx(sum(2 ** ((t - at) / hl) for _, _, t in old + new))
    assert pf.percentile(h, "cpu", 0.3) < 1100  # a third of the weight is the old level
    assert pf.percentile(h, "cpu", 0.4) > 2900


def test_a_far_sample_moves_the_reference_and_keeps_the_percentiles() -> None:
    hl = 60.0
    h = pf.add_many(EMPTY_HISTOGRAM, "memory", [(100 * MiB, 1.0, T0), (900 * MiB, 1.0, T0)], hl)
    later = pf.add(h, "memory", 500 * MiB, 1e-30, T0 + 60 * hl, hl)  # 60 half-lives on: exponent past 50
    assert later.reference == T0 + 60 * hl
    assert later.buckets == {}  # the old weights fell under the epsilon, the new one carries no weight
    h2 = pf.add(h, "memory", 500 * MiB, 1.0, T0 + 10 * hl, hl)
    assert h2.reference == T0  # under the limit: no shift
    assert pf.percentile(h2, "memory", 0.99) >= 500 * MiB


@given(
    st.lists(
        st.tuples(st.floats(0, 1e5, allow_nan=False), st.floats(0.01, 5), st.floats(0, 86400)), min_size=1, max_size=40
    ),
    st.floats(0.01, 1.0),
    st.floats(0.01, 1.0),
)
def test_percentiles_are_monotone_and_order_free(
    samples: list[tuple[float, float, float]], q1: float, q2: float
) -> None:
    samples = [(v, w, T0 + t) for v, w, t in samples]
    h = pf.add_many(EMPTY_HISTOGRAM, "cpu", sorted(samples, key=lambda s: s[2]), 12 * HOUR)
    lo, hi = sorted((q1, q2))
    assert pf.percentile(h, "cpu", lo) <= pf.percentile(h, "cpu", hi)
    again = EMPTY_HISTOGRAM
    for s in reversed(samples):
        again = pf.add(again, "cpu", *s, 12 * HOUR)
    assert pf.percentile(again, "cpu", hi) == pytest.approx(pf.percentile(h, "cpu", hi))


# --- the fold -------------------------------------------------------------------------------------------------


def minute(t0: float, *, node_cpu: float, offline_cpu: float = 0.0, web: float = 500.0, mem: float = GiB) -> list:
    return [
        sample(
            t0 + i,
            0.0,
            node_cpu=node_cpu,
            node_mem=4 * GiB,
            pods={"web": (web, mem), "job": (offline_cpu, 512 * MiB)},
        )
        for i in range(1, 61)
    ]


PODS = (pod("web", created=T0 - 10 * DAY, cpu=2000, mem=2 * GiB), pod("job", level=-1, created=T0))


def test_fold_takes_each_minute_once_into_pods_and_the_hour() -> None:
    state = ProfileState()
    samples = minute(T0 + 5 * HOUR, node_cpu=3000, offline_cpu=1000)
    state = pf.fold(state, samples, PODS, CFG, T0 + 5 * HOUR + 60)
    assert state.folded == T0 + 5 * HOUR + 60
    assert set(state.pods) == {"web", "job"}
    web = state.pods["web"]  # type: ignore[index]
    assert pf.weight_at(web.cpu, web.last, CFG.half_life_cpu) == pytest.approx(1.0)
    assert 500 <= pf.percentile(web.cpu, "cpu", 0.95) <= 550  # the end of its bucket (~10 % wide here)
    # U_non = node 3000 - offline 1000 into hour 05 only, one minute of weight
    slot = state.node.cpu[5]
    assert pf.weight_at(slot, T0 + 5 * HOUR + 60, CFG.half_life_cpu) == pytest.approx(1.0, rel=1e-3)
    assert 2000 <= pf.percentile(slot, "cpu", 0.95) <= 2100
    assert all(not h.buckets for i, h in enumerate(state.node.cpu) if i != 5)
    # the same samples again add nothing
    again = pf.fold(state, samples, PODS, CFG, T0 + 5 * HOUR + 120)
    assert again.node == state.node and again.pods == state.pods


def test_a_pod_gone_for_half_an_hour_loses_its_profile() -> None:
    state = pf.fold(ProfileState(), minute(T0, node_cpu=1000), PODS, CFG, T0 + 60)
    only_web = PODS[:1]
    state = pf.fold(state, minute(T0 + 60, node_cpu=1000), only_web, CFG, T0 + 120)
    assert "job" in state.pods  # gone a minute: kept
    state = pf.fold(state, minute(T0 + 1900, node_cpu=1000), only_web, CFG, T0 + 1960)
    assert set(state.pods) == {"web"}


def test_a_new_half_life_rescales_the_history_once() -> None:
    state = pf.fold(ProfileState(), minute(T0, node_cpu=1000), PODS, CFG, T0 + 60)
    short = replace(CFG, half_life_cpu=600.0)
    later = pf.fold(state, minute(T0 + 3600, node_cpu=1000), PODS, short, T0 + 3660)
    assert later.half_life_cpu == 600.0 and later.half_life_memory == CFG.half_life_memory
    assert later.node.cpu[0].reference == T0 + 3660  # rescaled at the change
    # the old minute weighs what it weighed at the change under the old half-life (2^(-1h/12h))
    assert pf.weight_at(later.node.cpu[0], T0 + 3660, 600.0) == pytest.approx(2 ** (-3660 / (12 * HOUR)), rel=1e-3)


# --- the estimate ---------------------------------------------------------------------------------------------


def day_profile(days: int = 3) -> ProfileState:
    """U_non 1000m at night, 3000m from 09:00 to 17:00 UTC, for `days` days, one sample a minute."""
    state = ProfileState()
    for d in range(days):
        for h in range(24):
            cpu = 3000.0 if 9 <= h < 17 else 1000.0
            t = T0 + d * DAY + h * HOUR
            samples = [
                sample(t + m * 60, 0.0, node_cpu=cpu, node_mem=2 * GiB, pods={"web": (cpu, GiB)}, elapsed=60.0)
                for m in range(60)
            ]
            state = pf.fold(state, samples, PODS[:1], CFG, t + 3600)
    return state


def test_the_profile_plans_for_the_hours_ahead() -> None:
    state = day_profile()
    window = Amounts(1000.0, 2 * GiB)
    at_night = T0 + 3 * DAY + 2 * HOUR
    est = pf.estimate(state, window, PODS[:1], {}, CFG, "profile", at_night)
    assert est.slots == (2, 3, 4)
    assert est.u_non.cpu == pytest.approx(1.1 * pf.percentile(state.node.cpu[2], "cpu", 0.95))
    assert 1100 <= est.u_non.cpu <= 1160
    before_work = T0 + 3 * DAY + 7 * HOUR + 30 * 60  # 07:30: 2 h ahead reaches 09:00
    est = pf.estimate(state, window, PODS[:1], {}, CFG, "profile", before_work)
    assert est.slots == (7, 8, 9) and 3300 <= est.u_non.cpu <= 3470
    day_peak = pf.estimate(state, window, PODS[:1], {}, replace(CFG, horizon=24 * HOUR), "profile", at_night)
    assert len(day_peak.slots) == 24 and day_peak.u_non.cpu >= 3300


def test_the_present_wins_over_a_lower_profile() -> None:
    state = day_profile()
    window = Amounts(2500.0, 2 * GiB)  # a busy night
    est = pf.estimate(state, window, PODS[:1], {}, CFG, "profile", T0 + 3 * DAY + 2 * HOUR)
    assert est.u_non.cpu == 2500.0 and est.u_non.memory == pytest.approx(1.1 * pf.SCHEME["memory"].start(
        pf.SCHEME["memory"].find(2 * GiB) + 1
    ))


def test_window_policy_uses_the_window_and_shows_the_profile() -> None:
    state = day_profile(1)
    window = Amounts(900.0, GiB)
    est = pf.estimate(state, window, PODS[:1], {}, CFG, "window", T0 + DAY + 2 * HOUR)
    assert est.u_non == window and est.profile is not None and est.profile.cpu > 1000
    assert "not in force" in est.describe(CFG)


def test_without_a_profile_the_window_decides() -> None:
    est = pf.estimate(ProfileState(), Amounts(700.0, GiB), PODS[:1], {}, CFG, "profile", T0)
    assert est.profile is None and est.u_non == Amounts(700.0, GiB)
    assert "no profile yet" in est.describe(CFG)


def test_an_hour_without_data_reads_the_whole_profile() -> None:
    state = ProfileState()
    t = T0 + 10 * HOUR
    samples = [sample(t + i * 60, 0.0, node_cpu=2000.0, node_mem=GiB, elapsed=1440.0) for i in range(60)]  # a day
    state = pf.fold(state, samples, (), CFG, t + 3600)
    est = pf.estimate(state, Amounts(100.0, GiB), (), {}, CFG, "profile", T0 + 2 * DAY + 2 * HOUR)
    assert est.slots == () and 2200 <= est.u_non.cpu <= 2320


def test_a_young_profile_is_not_read() -> None:
    """A profile holding less than a day of samples (a new node): the window alone, as the window policy; a day
    on, P. Gaps do not count: what the agent saw does."""
    state = ProfileState()
    samples = [sample(T0 + i * 600, 0.0, node_cpu=3000.0, node_mem=GiB, elapsed=600.0) for i in range(143)]
    state = pf.fold(state, samples, (), CFG, T0 + 143 * 600)  # 23 h 50 min
    est = pf.estimate(state, Amounts(500.0, GiB), (), {}, CFG, "profile", T0 + 143 * 600)
    assert est.profile is None and est.u_non == Amounts(500.0, GiB)
    assert "read once it holds a day of samples" in est.describe(CFG)
    state = pf.fold(state, [sample(T0 + DAY, 0.0, node_cpu=3000.0, node_mem=GiB, elapsed=600.0)], (), CFG, T0 + DAY)
    assert pf.estimate(state, Amounts(500.0, GiB), (), {}, CFG, "profile", T0 + DAY).profile is not None
    gaps = ProfileState()
    for t in (T0, T0 + 3 * DAY):  # an hour now and then: days apart, not a day of samples
        gaps = pf.fold(gaps, [sample(t + 3600, 0.0, node_cpu=3000.0, node_mem=GiB, elapsed=3600.0)], (), CFG, t + 3600)
    assert gaps.node.last - gaps.node.first > DAY and gaps.node.seconds == 7200.0
    assert pf.estimate(gaps, Amounts(500.0, GiB), (), {}, CFG, "profile", T0 + 3 * DAY + 3600).profile is None


def test_cold_start_is_off_by_default() -> None:
    state = day_profile(1)
    now = T0 + DAY + 2 * HOUR
    new = pod("new", created=now - 3600, cpu=4000, mem=4 * GiB)
    assert ProfileConfig().cold_start == 0
    assert pf.cold_pods(state, (new,), {}, ProfileConfig(), now) == ()


def test_a_new_online_pod_counts_at_its_request() -> None:
    state = day_profile(1)
    now = T0 + DAY + 2 * HOUR
    new = pod("new", created=now - 3600, cpu=4000, mem=4 * GiB)
    offline = pod("batch", level=-1, created=now - 60, cpu=8000)
    usage = {new.uid: Amounts(300.0, GiB)}
    cfg = replace(CFG, cold_start=24 * HOUR)
    est = pf.estimate(state, Amounts(1300.0, 2 * GiB), (PODS[0], new, offline), usage, cfg, "profile", now)
    assert [c.key for c in est.cold] == ["default/new"]
    base = max(1300.0, est.profile.cpu)  # type: ignore[union-attr]
    assert est.u_non.cpu == pytest.approx(base + 4000 - 300)
    assert "cold start" in est.describe(cfg)
    grown = pf.estimate(state, Amounts(1300.0, 2 * GiB), (PODS[0], replace(new, created=now - DAY)), usage, cfg,
                        "profile", now)  # fmt: skip
    assert grown.cold == ()


def test_horizon_slots_wrap_and_cap() -> None:
    assert pf.horizon_slots(T0 + 23 * HOUR + 1800, HOUR) == (23, 0)
    assert pf.horizon_slots(T0, 0.0) == (0,)
    assert len(pf.horizon_slots(T0 + 1, 24 * HOUR)) == 24


# --- the checkpoint document ---------------------------------------------------------------------------------


def test_checkpoint_round_trips() -> None:
    state = day_profile(1)
    doc = json.loads(json.dumps(pf.to_json(state)))
    back = pf.from_json(doc)
    assert back.folded == state.folded and back.half_life_cpu == state.half_life_cpu
    assert set(back.pods) == set(state.pods)
    for mine, theirs in zip(back.node.cpu, state.node.cpu):
        assert mine.reference == theirs.reference
        assert mine.buckets == pytest.approx(theirs.buckets)
    now = T0 + DAY + 2 * HOUR
    assert pf.estimate(back, Amounts(), (), {}, CFG, "profile", now) == pf.estimate(
        state, Amounts(), (), {}, CFG, "profile", now
    )


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda d: d.update(kind="other"), "not a usage profile"),
        (lambda d: d.update(version=7), "version"),
        (lambda d: d["node"].update(cpu=d["node"]["cpu"][:3]), "node.cpu: not a list of 24"),
        (lambda d: d["node"]["cpu"][2]["buckets"].update({"9999": 1.0}), "is not a bucket"),
        (lambda d: d["node"]["cpu"][2]["buckets"].update({"3": -1.0}), "out of range"),
        (lambda d: d["node"]["cpu"][2].update(reference="x"), "not a finite number"),
        (lambda d: d.update(half_life={"cpu": 0, "memory": 1}), "positive"),
        (lambda d: d["pods"].update({"": {}}), "not a pod UID"),
        (lambda d: d["pods"].update({"p": {"cpu": [], "memory": {}}}), "not an object"),
    ],
)
def test_a_bad_checkpoint_says_what_is_wrong(mutate: object, why: str) -> None:
    doc = json.loads(json.dumps(pf.to_json(day_profile(1))))
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(pf.CheckpointError, match=why):
        pf.from_json(doc)


@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5), lambda c: st.lists(c, max_size=3)
                    | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=20))  # fmt: skip
def test_any_json_loads_or_raises_checkpoint_error(data: object) -> None:
    try:
        state = pf.from_json(data)
    except pf.CheckpointError:
        return
    assert isinstance(state, ProfileState)


def test_histogram_weights_stay_finite_over_a_year() -> None:
    h: Histogram = EMPTY_HISTOGRAM
    for d in range(365):
        h = pf.add(h, "cpu", 1000.0 + d, 1.0, T0 + d * DAY, 12 * HOUR)
        assert all(math.isfinite(w) for w in h.buckets.values())
    assert len(h.buckets) <= 3  # the old ones decayed under the epsilon


def test_the_peak_is_planned_under_the_high_watermark_not_the_ratio() -> None:
    state = day_profile()
    room = pf.headroom(Amounts(32000.0, 64 * GiB), Amounts(80.0, 60.0), Amounts(0.7, 0.5))
    assert room.cpu == pytest.approx(3200.0) and room.memory == pytest.approx(0.1 * 64 * GiB)
    before_work = T0 + 3 * DAY + 7 * HOUR + 30 * 60
    plain = pf.estimate(state, Amounts(1000.0, GiB), PODS[:1], {}, CFG, "profile", before_work)
    est = pf.estimate(state, Amounts(1000.0, GiB), PODS[:1], {}, CFG, "profile", before_work, room)
    assert est.u_non.cpu == pytest.approx(max(1000.0, plain.u_non.cpu - 3200.0))
    assert "headroom 3200m" in est.describe(CFG)
    # a ratio above the watermark leaves no headroom (never negative)
    assert pf.headroom(Amounts(1000.0, GiB), Amounts(60.0, 60.0), Amounts(0.7, 0.7)) == Amounts()


def test_a_checkpoint_ahead_of_the_clock_is_refused_naming_the_time() -> None:
    """Written under a wrong clock (a reference years ahead), a checkpoint would make every read of an empty hour
    raise OverflowError in 2^((reference - now) / half-life): it is refused as a bad checkpoint instead."""
    doc = json.loads(json.dumps(pf.to_json(day_profile(1))))
    now = T0 + 2 * DAY
    assert isinstance(pf.from_json(doc, now), ProfileState)  # a sane one loads
    doc["node"]["cpu"][2]["reference"] = now + 10 * 365 * DAY
    assert isinstance(pf.from_json(doc), ProfileState)  # the document itself is well formed ...
    with pytest.raises(pf.CheckpointError, match=r"node.cpu\[2\].reference: .* ahead of this clock"):
        pf.from_json(doc, now)  # ... but not for this clock
    doc["node"]["cpu"][2]["reference"] = now + pf.FUTURE_SLACK / 2  # a clock adjustment is tolerated
    assert isinstance(pf.from_json(doc, now), ProfileState)
