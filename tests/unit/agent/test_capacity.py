"""B and X exactly as docs/design.md, "Capacity model": publishing rules and thresholds."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.config import CapacityConfig
from agent.decide.capacity import (
    OfflineDoc,
    cadence,
    capacity_view,
    compute_terms,
    moved,
    node_usage_json,
    publication,
    request_totals,
)
from agent.decide.ops import CapacityView, UsageView
from agent.decide.usage import summarize
from agent.model import Amounts, Sample

from .helpers import GiB, node, pod

CFG = CapacityConfig()


def test_formula_worked_example() -> None:
    # A = 4000m; online pods request 2500m and use (with the system) U_non = 1200m
    pods = [
        pod("web", cpu=2000, mem=4 * GiB),
        pod("db", cpu=500, mem=2 * GiB),
        pod("plain-off", level=-1, cpu=300, mem=GiB),  # Rp
        pod("batch-off", level=-1, qos="BestEffort", bcpu=400, bmem=GiB),  # Rb
    ]
    terms = compute_terms(node(), pods, Amounts(1200, 3 * GiB), CFG)
    cpu = terms["cpu"]
    assert (cpu.allocatable, cpu.u_non, cpu.r_on, cpu.rb, cpu.rp) == (4000, 1200, 2500, 400, 300)
    assert cpu.B == 4000 * 0.7 - 1200 == 1600
    assert cpu.batch_allocatable == 1600 - 300
    assert cpu.X == max(0, 1600 - 400 - (4000 - 2500)) == 0
    mem = terms["memory"]
    assert int(16 * GiB * 0.5 - 3 * GiB) == mem.B
    assert mem.batch_allocatable == mem.B - GiB
    assert max(0, mem.B - GiB - (16 * GiB - 6 * GiB)) == mem.X


def test_x_positive_when_online_requests_fill_allocatable() -> None:
    pods = [pod("web", cpu=3800), pod("batch", level=-1, qos="BestEffort", bcpu=200)]
    terms = compute_terms(node(), pods, Amounts(800, 0), CFG)
    # B = 2800 - 800 = 2000; X = 2000 - 200 - (4000 - 3800) = 1600
    assert terms["cpu"].B == 2000 and terms["cpu"].X == 1600
    # the two budgets agree: plain offline pods get A + X - R_on = B - Rb
    assert 4000 + terms["cpu"].X - 3800 == terms["cpu"].B - 200


def test_reserve_and_ratio_and_floor() -> None:
    cfg = CapacityConfig(ratio_cpu=0.5, reserve_cpu=300)
    assert compute_terms(node(), [], Amounts(1000, 0), cfg)["cpu"].B == 2000 - 1000 - 300
    assert compute_terms(node(), [], Amounts(5000, 0), cfg)["cpu"].B == 0


def test_request_totals() -> None:
    pods = [pod("on", cpu=100, bcpu=7), pod("off", level=-2, cpu=20, mem=5, bcpu=3, bmem=9)]
    r_on, rb, rp = request_totals(pods)
    assert r_on == Amounts(100, 0) and rb == Amounts(10, 9) and rp == Amounts(20, 5)


@pytest.mark.parametrize(
    ("colocation", "oversub", "types", "evicting", "stale", "published"),
    [
        (False, False, ("cpu", "memory"), False, False, False),
        (True, False, ("cpu", "memory"), False, False, False),
        (False, True, ("cpu", "memory"), False, False, True),
        (True, True, ("cpu", "memory"), False, False, True),
        (True, True, ("memory",), False, False, False),
        (True, True, ("cpu", "memory"), True, False, False),
        (True, True, ("cpu", "memory"), False, True, False),
    ],
)
def test_published_values_per_label_table(
    colocation: bool, oversub: bool, types: tuple[str, ...], evicting: bool, stale: bool, published: bool
) -> None:
    n = node(colocation=colocation, oversubscription=oversub, types=types)  # type: ignore[arg-type]
    pods = [pod("web", cpu=3800), pod("b", level=-1, qos="BestEffort", bcpu=200)]
    terms = compute_terms(n, pods, Amounts(800, 0), CFG)
    view = capacity_view(n, terms, evicting, stale)
    assert view.B.cpu == 2000 and view.X.cpu == 1600  # computed whatever the labels say
    assert view.published_x.cpu == (1600 if published else 0)
    # never under the bound batch pod's 200m: kubelet re-admits it against the Node on a restart
    assert view.published_batch.cpu == (2000 if published else 200)
    assert view.batch_bound.cpu == 200


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, 0, True),
        (0, 0, False),
        (0, 1, True),
        (1000, 1100, False),
        (1000, 1101, True),
        (1000, 899, True),
        (1000, 900, False),
    ],
)
def test_moved(old: int | None, new: int, expected: bool) -> None:
    assert moved(old, new, 0.10) is expected


USAGE = UsageView(percent=Amounts(41.234, 12.5), samples=3, window_seconds=2.5)
CAP = CapacityView(published_batch=Amounts(1500, 2 * GiB), published_x=Amounts(700, GiB))
NOW = 1_700_000_000.0


def _published_node(**kw: object) -> object:
    return node(
        published_x={"cpu": 700, "memory": GiB},
        published_batch={"cpu": 1500, "memory": 2 * GiB},
        last_publish=NOW - 30,
        annotations={"tidemark.io/node-usage": "{}"},
        **kw,  # type: ignore[arg-type]
    )


def test_node_usage_is_written_at_once_when_the_offline_tier_turns_starved_or_stops() -> None:
    """The rescheduling plugin moves offline pods off a node whose published allowance is at or under the agent's
    satisfaction times their requests; B may sit at 0 then (nothing else to publish), so the turn itself makes
    node-usage due (and `starving_flip` writes it out of the capacity tick), both ways, once."""
    def with_allowance(pct: float | None) -> object:
        doc = {"cpu": 41.23, "memory": 12.5, "window": "3s", "time": "2023-11-14T22:12:50Z"}
        if pct is not None:
            doc["offline"] = {"allowance": pct, "satisfaction": 0.6}  # type: ignore[assignment]
        return node(published_x={"cpu": 700, "memory": GiB}, published_batch={"cpu": 1500, "memory": 2 * GiB},
                    last_publish=NOW - 30, annotations={"tidemark.io/node-usage": json.dumps(doc)})

    # 4000m node: 15 % = 600m allowance against 0.6 x 1200m = 720m: starved; the published 50 % (2000m) was not
    pub = publication(with_allowance(50.0), CAP, USAGE, CFG, NOW, False, OfflineDoc(15.0, 0.6), 1200.0)  # type: ignore[arg-type]
    assert json.loads(pub.annotations["tidemark.io/node-usage"] or "")["offline"] == {"allowance": 15.0,
                                                                                      "satisfaction": 0.6}
    assert pub.starving_flip and any("600m is at or under 60% of the 1200m" in r for r in pub.reasons), pub.reasons
    back = publication(with_allowance(15.0), CAP, USAGE, CFG, NOW, False, OfflineDoc(50.0, 0.6), 1200.0)  # type: ignore[arg-type]
    assert back.starving_flip and any("back over 60% of the 1200m" in r for r in back.reasons)
    # no turn (starved before and now, or neither; at 0.6 x 1200 = 720m = 18 % exactly is starved), or no tier
    for old, new, req in ((15.0, 18.0, 1200.0), (50.0, 19.0, 1200.0), (50.0, None, 1200.0), (50.0, 10.0, 0.0)):
        offline = None if new is None else OfflineDoc(new, 0.6)
        quiet = publication(with_allowance(old), CAP, USAGE, CFG, NOW, False, offline, req)  # type: ignore[arg-type]
        assert "tidemark.io/node-usage" not in quiet.annotations and not quiet.starving_flip, (old, new, quiet.reasons)
    # an agent's first document with the key (an older agent wrote none) and a starved tier: due
    first = publication(with_allowance(None), CAP, USAGE, CFG, NOW, False, OfflineDoc(15.0, 0.6), 1200.0)  # type: ignore[arg-type]
    assert "tidemark.io/node-usage" in first.annotations


def test_publication_first_time_writes_every_key() -> None:
    pub = publication(node(), CAP, USAGE, CFG, NOW, stale=False)
    assert pub.annotations["volcano.sh/oversubscription-cpu"] == "700"
    assert pub.annotations["volcano.sh/oversubscription-memory"] == str(GiB)
    assert pub.status == {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": str(2 * GiB)}
    usage = json.loads(pub.annotations["tidemark.io/node-usage"] or "")
    # no kubepods total read yet: all of it counted as online (never "all offline")
    assert usage == {"cpu": 41.23, "memory": 12.5, "window": "3s", "time": "2023-11-14T22:13:20Z",
                     "online": {"cpu": 41.23, "memory": 12.5}}  # fmt: skip
    assert any("missing" in r for r in pub.reasons)


def test_the_usage_document_carries_the_online_pods_part() -> None:
    """`online`: the online pods' share of the kubepods percent, which the scheduler's rescheduling plugin judges a
    node hot by on CPU (offline pods soaking idle CPU make a node busy, not hot)."""
    u = UsageView(kubepods=Amounts(3000, 4 * GiB), percent=Amounts(75.0, 50.0), online=Amounts(1000, 3 * GiB),
                  samples=3, window_seconds=2.5)  # fmt: skip
    doc = json.loads(node_usage_json(u, NOW))
    assert doc["cpu"] == 75.0 and doc["online"] == {"cpu": 25.0, "memory": 37.5}


def test_publication_quiet_when_current() -> None:
    pub = publication(_published_node(), CAP, USAGE, CFG, NOW, stale=False)  # type: ignore[arg-type]
    assert not pub.annotations and not pub.status and not pub.reasons


def test_publication_on_move_and_resync() -> None:
    moved_cap = CapacityView(published_batch=Amounts(1500, 2 * GiB), published_x=Amounts(400, GiB))
    pub = publication(_published_node(), moved_cap, USAGE, CFG, NOW, stale=False)  # type: ignore[arg-type]
    assert pub.annotations["volcano.sh/oversubscription-cpu"] == "400"  # a decrease past the floor: at once
    assert "kubernetes.io/batch-cpu" in pub.status  # every key is written together
    resync = publication(_published_node(), CAP, USAGE, CFG, NOW + 30, stale=False)  # type: ignore[arg-type]
    assert resync.annotations and any("resync" in r for r in resync.reasons)
    small = CapacityView(published_batch=Amounts(1500, 2 * GiB), published_x=Amounts(760, GiB))
    assert not publication(_published_node(), small, USAGE, CFG, NOW, stale=False).annotations  # type: ignore[arg-type]


def test_publication_stale_skips_node_usage() -> None:
    zero = CapacityView()
    pub = publication(_published_node(), zero, USAGE, CFG, NOW, stale=True)  # type: ignore[arg-type]
    assert pub.annotations == {"volcano.sh/oversubscription-cpu": "0", "volcano.sh/oversubscription-memory": "0"}


def test_publication_switches() -> None:
    cfg = CapacityConfig(extended_resources=False)
    pub = publication(node(), CAP, USAGE, cfg, NOW, stale=False)
    assert not pub.status and "volcano.sh/oversubscription-cpu" in pub.annotations
    cfg = CapacityConfig(annotations=False)
    pub = publication(node(), CAP, USAGE, cfg, NOW, stale=False)
    assert pub.status and "volcano.sh/oversubscription-cpu" not in pub.annotations


def test_label_removed_publishes_zero_once_then_nothing() -> None:
    was = node(
        colocation=False,
        oversubscription=False,
        published_x={"cpu": 700, "memory": 0},
        published_batch={"cpu": 1500, "memory": None},
    )
    pub = publication(was, CapacityView(), USAGE, CFG, NOW, stale=False)
    assert pub.annotations == {"volcano.sh/oversubscription-cpu": "0"}
    assert pub.status == {"kubernetes.io/batch-cpu": "0"}
    after = node(
        colocation=False,
        oversubscription=False,
        published_x={"cpu": 0, "memory": 0},
        published_batch={"cpu": 0, "memory": None},
    )
    pub = publication(after, CapacityView(), USAGE, CFG, NOW, stale=False)
    assert not pub.annotations and not pub.status


def test_colocation_only_publishes_node_usage() -> None:
    n = node(oversubscription=False)
    pub = publication(n, CapacityView(), USAGE, CFG, NOW, stale=False)
    assert set(pub.annotations) == {"tidemark.io/node-usage"} and not pub.status
    fresh = node(oversubscription=False, annotations={"tidemark.io/node-usage": "{}"}, last_publish=NOW - 5)
    assert not publication(fresh, CapacityView(), USAGE, CFG, NOW, stale=False).annotations


def test_node_usage_json_window() -> None:
    assert json.loads(node_usage_json(UsageView(samples=1, window_seconds=0.2), NOW))["window"] == "1s"


def test_node_usage_json_latest_and_p95() -> None:
    """The contract's optional keys (docs/design.md): present when known, absent otherwise (no kubepods)."""
    view = UsageView(samples=3, window_seconds=3, percent=Amounts(40.0, 10.0),
                     newest_percent=Amounts(75.123, 11.0), p95_percent=Amounts(62.5, 12.0))
    doc = json.loads(node_usage_json(view, NOW))
    assert doc["latest"] == {"cpu": 75.12, "memory": 11.0} and doc["p95"] == {"cpu": 62.5, "memory": 12.0}
    assert "latest" not in json.loads(node_usage_json(UsageView(samples=1, window_seconds=1), NOW))
    # the offline tier's allowance, percent of allocatable CPU, and the agent's satisfaction: with a tier, never < 0
    assert json.loads(node_usage_json(view, NOW, OfflineDoc(12.345, 0.6)))["offline"] == {"allowance": 12.35,
                                                                                          "satisfaction": 0.6}
    assert json.loads(node_usage_json(view, NOW, OfflineDoc(-3.0, 0.5)))["offline"]["allowance"] == 0.0
    assert "offline" not in doc


def test_summarize_p95_of_the_window() -> None:
    samples = [Sample(time=float(t), elapsed=1.0, node=None, kubepods=Amounts(100.0 * t, 0.0)) for t in range(1, 21)]
    view = summarize(samples, [], Amounts(4000.0, 1.0), "mean")
    assert view.p95_percent is not None and view.p95_percent.cpu == 47.5  # 19th of 20 (nearest rank) = 1900m of 4000m
    assert view.percent.cpu == 26.25  # the mean stays what "cpu" publishes
    assert view.newest_percent is not None and view.newest_percent.cpu == 50.0


@given(
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(0.01, 1.0),
)
def test_formula_properties(a: float, u: float, r_on: float, rb: float, ratio: float) -> None:
    n = node(cpu=a)
    pods = [pod("on", cpu=r_on), pod("b", level=-1, bcpu=rb)]
    t = compute_terms(n, pods, Amounts(u, 0), CapacityConfig(ratio_cpu=ratio))["cpu"]
    assert t.B >= 0 and t.X >= 0 and t.batch_allocatable >= 0
    assert t.X <= t.B and t.batch_allocatable <= t.B
    assert a * ratio + 1 >= t.B


@given(
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_published_batch_never_under_the_bound_pods_and_the_room_is_unchanged(
    a: float, u: float, rb: float, rp: float, labelled: bool, evicting: bool, stale: bool
) -> None:
    """The floor (kubelet's re-admission of running batch pods) never changes whether a new batch pod fits: the
    room over Rb is the old formula's, where the old value was over Rb, and none where it was not."""
    n = node(cpu=a, oversubscription=labelled)
    pods = [pod("b", level=-1, qos="BestEffort", bcpu=rb), pod("p", level=-1, cpu=rp)]
    terms = compute_terms(n, pods, Amounts(u, 0), CFG)
    view = capacity_view(n, terms, evicting, stale)
    t = terms["cpu"]
    old = 0 if (evicting or stale or not labelled) else t.batch_allocatable
    floor = min(t.rb, t.allocatable)  # never over the node (the NodeReport gate's bound)
    assert view.published_batch.cpu >= floor == view.batch_bound.cpu
    assert view.published_batch.cpu <= max(t.allocatable, old)
    assert view.published_batch.cpu - floor == max(0, old - floor)


@pytest.mark.parametrize(
    ("due", "now", "expected"),
    [
        (None, 100.0, (True, 110.0)),  # a fresh state: a tick at once
        (110.0, 105.0, (False, 110.0)),  # between ticks
        (110.0, 110.0, (True, 120.0)),  # on time: drift-free, the next one a period after the due time
        (110.0, 113.5, (True, 120.0)),  # a little late: still on the grid
        (110.0, 135.0, (True, 145.0)),  # fell behind more than a period: a period from now
        (200.0, 105.0, (False, 115.0)),  # due further than a period ahead (shorter period, clock back): pulled in
    ],
)
def test_cadence(due: float | None, now: float, expected: tuple[bool, float]) -> None:
    assert cadence(due, 10.0, now) == expected
