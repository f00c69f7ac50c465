"""benchmarks/bench_capacity.py and benchmarks/capacity_traces.py: the trace format, the seeded generator, the peers'
formulas as reproduced, and a short replay (hours, not days: the figures are the benchmark's, not a test's)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agent.config_profile import ProfileConfig
from agent.model import Amounts, PodView, Sample
from tidemark.apis import PodUID

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ct() -> ModuleType:
    return load("capacity_traces")


@pytest.fixture(scope="module")
def bc() -> ModuleType:
    load("capacity_traces")
    return load("bench_capacity")


def small(ct: ModuleType, name: str = "bursty", hours: float = 6.0):  # type: ignore[no-untyped-def]
    return ct.generate(name, seed=3, days=hours / 24)


def test_the_generator_is_seeded_and_the_format_round_trips(ct: ModuleType, tmp_path: Path) -> None:
    a, b = small(ct), small(ct)
    assert a.to_json() == b.to_json()
    assert small(ct, "diurnal").to_json() != a.to_json()
    path = tmp_path / "t.json"
    path.write_text(json.dumps(a.to_json()))
    back = ct.load(path)
    assert back.to_json() == a.to_json()
    assert sum(p.request_cpu for p in back.online) <= 0.9 * back.node_cpu + 100 * len(back.online)
    assert back.offline and all(p.work > 0 and p.request_cpu > 0 for p in back.offline)


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda d: d.update(kind="x"), "not a trace"),
        (lambda d: d["system"].update(cpu=[1, 2]), "system.cpu: expected a list of"),
        (lambda d: d["online"][0]["cpu"].__setitem__(3, -1), r"online\[0\].cpu\[3\]"),
        (lambda d: d["offline"][0].update(work=0), r"offline\[0\].work"),
        (lambda d: d["node"].update(cpu="32"), "node.cpu"),
    ],
)
def test_a_bad_trace_names_its_field(ct: ModuleType, mutate: object, why: str) -> None:
    doc = small(ct).to_json()
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(ct.TraceError, match=why):
        ct.from_json(doc)


def step(bc: ModuleType, trace: object, t: int, u: float) -> object:
    now = 1_767_571_200.0 + t * 15
    return bc.Step(t, now, {}, Amounts(u, 0.0), Sample(now, 15.0, Amounts(u, 0.0), Amounts()), ())


def test_katalyst_reports_a_two_minute_mean_capped_per_report(bc: ModuleType, ct: ModuleType) -> None:
    trace = small(ct)
    k = bc.KatalystPolicy(trace)
    target = trace.node_cpu * 0.7
    got = [k.budget(step(bc, trace, t, 4000.0)).cpu for t in range(0, 16, 2)]  # one sync every 30 s = 2 steps
    assert got[:3] == [0.0, 0.0, 0.0]  # no report until the window holds 4 samples
    assert got[3] == pytest.approx(target - 4000)
    # usage drops by 10 cores: the budget rises by at most 4 cores per report
    more = [k.budget(step(bc, trace, t, 0.0)).cpu for t in range(16, 40, 2)]
    rises = [b - a for a, b in zip([got[-1], *more], more)]
    assert max(rises) <= 4000 + 1e-6 and more[-1] == pytest.approx(target)
    # a change under 0.3 core is not reported
    assert k.budget(step(bc, trace, 40, 200.0)).cpu == pytest.approx(target)


def test_koordinator_takes_the_smaller_predictor_and_skips_cold_pods(bc: ModuleType, ct: ModuleType) -> None:
    trace = small(ct)
    kp = bc.KoordinatorPolicy(trace)
    t0 = 1_767_571_200.0
    warm = PodView(PodUID("w"), "o", "w", 0, "Burstable", created=t0 - 3 * 86400, requests=Amounts(8000, 8 * 2**30))
    cold = PodView(PodUID("c"), "o", "c", 0, "Burstable", created=t0 - 3600, requests=Amounts(4000, 4 * 2**30))
    online = {"w": Amounts(2000, 2 * 2**30), "c": Amounts(1000, 2**30)}
    for m in range(30):
        now = t0 + m * 60
        s = bc.Step(m, now, online, Amounts(3500, 4 * 2**30), Sample(now, 60.0, None, None), (warm, cold))
        b = kp.budget(s)
    from agent.decide.profile import percentile

    cap = trace.node_cpu * 0.7
    peak_w = 1.1 * percentile(kp.pods["w"]["cpu"], "cpu", 0.95)  # the cold pod reclaims nothing, counts nothing
    by_pod = min(cap - peak_w, 8000 - peak_w)
    unrecl = 1.1 * (percentile(kp.sys["cpu"], "cpu", 0.95) + percentile(kp.prod["cpu"], "cpu", 0.95))
    by_prio = min(cap - unrecl, 12000 - unrecl)
    assert 2000 <= peak_w / 1.1 <= 2100 and 3000 <= unrecl / 1.1 <= 3700
    assert b.cpu == pytest.approx(min(by_pod, by_prio))


def test_cce_is_mean_plus_z_sigma(bc: ModuleType, ct: ModuleType) -> None:
    trace = small(ct)
    c = bc.CcePolicy(trace)
    t0 = 1_767_571_200.0
    for m in range(200):
        v = 2000.0 if m % 2 else 1000.0
        now = t0 + m * 60
        b = c.budget(bc.Step(m, now, {"p": Amounts(v, 0.0)}, Amounts(v, 0.0), Sample(now, 60.0, None, None), ()))
    # mean 1500, sigma 500 for the pod; the system (0) has none: U = 1500 + 1.645 x 500
    assert trace.node_cpu * 0.7 - b.cpu == pytest.approx(1500 + 1.645 * 500, rel=0.05)


def test_a_short_replay_scores_every_policy_and_fit_is_the_scheduler(bc: ModuleType, ct: ModuleType) -> None:
    trace = small(ct, "mixed", hours=4)
    for name in bc.POLICIES:
        s = bc.replay(trace, bc.make_policy(name, trace, ProfileConfig()), bc.Scheduler("fit"))
        assert s.hours == pytest.approx(4.0) and s.offered_core_hours >= 0 and s.used_core_hours >= 0
        assert s.lost_core_hours <= s.used_core_hours + 1e-9 and math.isfinite(s.useful_core_hours)
    window = bc.replay(trace, bc.make_policy("window-mean", trace, ProfileConfig()), bc.Scheduler("fit"))
    assert window.offered_core_hours > 0 and window.completed_pods > 0


@pytest.mark.slow
def test_fit_places_what_the_real_scheduler_places(bc: ModuleType, ct: ModuleType) -> None:
    trace = small(ct, "bursty", hours=3)
    a = bc.replay(trace, bc.make_policy("window-mean", trace, ProfileConfig()), bc.Scheduler("fit"))
    b = bc.replay(trace, bc.make_policy("window-mean", trace, ProfileConfig()), bc.Scheduler("simulate"))
    assert a.to_json() == {**b.to_json(), "scheduler_calls": a.scheduler_calls}


def test_the_replay_publishes_by_the_agents_whole_rule(bc: ModuleType, ct: ModuleType,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`--publish` changes the rule the replay publishes by (the shipped rule has urgent_decrease 0.3; the rule
    before it publishes otherwise on the same trace); an unknown field is exit 2."""
    trace = small(ct, "mixed", hours=4)
    swings = {}
    for label, items in (("before", ["urgent_decrease=0"]), ("shipped", [])):
        monkeypatch.setattr(bc, "PUBLISH", bc.publish_config(items))
        s = bc.replay(trace, bc.make_policy("window-mean", trace, ProfileConfig()), bc.Scheduler("fit"))
        swings[label] = (s.swing_milli, s.capacity_changes)
    assert swings["shipped"] != swings["before"], swings
    assert bc.publish_config(["envelope=30"]).envelope == 30.0
    assert bc.main(["--publish", "nope=1", "--days", "0.01"]) == 2
