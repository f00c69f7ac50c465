"""What the rescheduling plugin reports (issue 34 item 4, "cool-downs shown by plan, counted in metrics"): the
held-back candidates by reason, the moves by the resource that made the node hot, the scheduler's metrics fed
from a session's report (scheduler_ext/run/observe.py), and `simulate`'s `rebalance` view."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.cache.builder import SnapshotStats
from scheduler_ext.framework.session import Session
from scheduler_ext.metrics import REBALANCE_HELD_REASONS, SchedulerMetrics
from scheduler_ext.model.plan import build_plan
from scheduler_ext.plugins.rebalance import HELD_REASONS, Limits, choose
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.plugins.rescheduling import reset_state, session_report
from scheduler_ext.run.observe import record_session
from scheduler_ext.simulate import simulate

from .helpers import conf, queue
from .test_rescheduling import CONF, GI, NOW, S, cand, cluster, nl, opod, run_at, unode

L = Limits(max_per_node=1, max_per_run=10, workload_cooldown=300.0)
RS_BATCH = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs-batch", "uid": "rs-batch", "controller": True}]


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    reset_state()
    yield
    reset_state()


def held(nodes: list[Any], cands: list[Any], *, limits: Limits = L, gangs: dict[str, tuple[int, int]] | None = None,
         moved: dict[str, float] | None = None, relieved: dict[str, float] | None = None) -> dict[str, int]:
    return choose(nodes, cands, gangs or {}, S, limits, moved or {}, relieved or {}, NOW).held


# --- the choice counts what it holds back -----------------------------------------------------------------
def test_every_held_back_candidate_is_counted_by_its_reason() -> None:
    hot_cool = [nl("hot", 83), nl("cool", 10)]
    assert held(hot_cool, [cand("a", workload="rs")], moved={"rs": NOW - 10}) == {"workload_cooldown": 1}
    assert held(hot_cool, [cand("g", job="ns/gang")], gangs={"ns/gang": (3, 3)}) == {"gang": 1}
    assert held(hot_cool, [cand("big", cpu=3000.0)]) == {"no_cool_node": 1}
    assert held(hot_cool, [cand("a")], relieved={"hot": NOW - 30}) == {"node_relieved": 1}
    three = [cand(f"a{i}", started=float(i)) for i in range(3)]
    assert held([nl("hot", 99), nl("cool", 0)], three) == {"node_limit": 2}
    two_nodes = [nl("hotA", 99), nl("hotB", 90), nl("cool", 0)]
    one_per_run = Limits(max_per_node=1, max_per_run=1)
    assert held(two_nodes, [cand("a", "hotA"), cand("b", "hotB")], limits=one_per_run) == {"cluster_limit": 1}
    # a node relieved under its target by the first move holds nothing back: it needs no more
    calm_after = [cand("a", started=2.0), cand("b", started=1.0)]
    assert held([nl("hot", 72), nl("cool", 0)], calm_after, limits=Limits(max_per_node=5)) == {}
    assert set(REBALANCE_HELD_REASONS) == set(HELD_REASONS)


def test_a_move_names_the_resource_that_made_its_node_hot() -> None:
    cpu = choose([nl("hot", 83), nl("cool", 10)], [cand("a")], {}, S, L, {}, {}, NOW).moves
    mem = choose([nl("hot", 20, 61), nl("cool", 10)], [cand("a", mem=0.1 * GI)], {}, S, L, {}, {}, NOW).moves
    assert [m.resource for m in cpu] == ["cpu"] and [m.resource for m in mem] == ["memory"]


# --- the scheduler's metrics, fed from the session's report ---------------------------------------------
def observe(m: SchedulerMetrics, ssn: Session) -> None:
    """What `run` does after a session (scheduler_ext/run/scheduler.py, run_once)."""
    plan = build_plan(ssn, pod_groups={}, queues={}, now_iso="2023-11-14T22:13:20Z")
    record_session(m, ssn, plan, SnapshotStats(0.01, 3, 2, 3, 0, 0, 0), 0.01, ssn.now)


def sample(m: SchedulerMetrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return m.registry.get_sample_value(name, labels or {})


def test_a_move_then_its_workload_cooldown_are_counted() -> None:
    m = SchedulerMetrics()
    observe(m, run_at(cluster(opod("batch", "hot", metadata={"ownerReferences": RS_BATCH}))))
    assert sample(m, "tidemark_scheduler_rebalance_moves_total", {"resource": "cpu"}) == 1
    assert sample(m, "tidemark_scheduler_rebalance_moves_total", {"resource": "memory"}) == 0
    assert sample(m, "tidemark_scheduler_rebalance_hot_nodes") == 1
    assert sample(m, "tidemark_scheduler_rebalance_cool_nodes") == 1
    for reason in HELD_REASONS:  # a fixed set, exported from the start
        assert sample(m, "tidemark_scheduler_rebalance_skipped_total", {"reason": reason}) == 0
    # between two runs (the interval) there is no report: nothing counted, the gauges keep the last run's
    assert session_report(run_at(cluster(opod("batch", "hot")), NOW + 10)) is None
    # 100 s later the node's published window starts after the move and it is still hot; the replacement pod
    # of the same ReplicaSet is held back by the workload's cool-down, and counted so
    again = [queue("default"), unode("hot", 83, age=-90), unode("cool", 10, age=-90), unode("cool2", 10, age=-90),
             opod("batch-2", "hot", metadata={"ownerReferences": RS_BATCH})]
    ssn = run_at(again, NOW + 100)
    assert ssn.evictions == []
    observe(m, ssn)
    assert sample(m, "tidemark_scheduler_rebalance_skipped_total", {"reason": "workload_cooldown"}) == 1
    assert sample(m, "tidemark_scheduler_rebalance_moves_total", {"resource": "cpu"}) == 1
    assert sample(m, "tidemark_scheduler_rebalance_cool_nodes") == 2


def test_a_bare_offline_pod_on_a_hot_node_is_counted_not_movable() -> None:
    m = SchedulerMetrics()
    observe(m, run_at(cluster(opod("bare", "hot", owner=False))))
    assert sample(m, "tidemark_scheduler_rebalance_skipped_total", {"reason": "not_movable"}) == 1
    assert sample(m, "tidemark_scheduler_rebalance_moves_total", {"resource": "cpu"}) == 0


def test_a_value_outside_the_label_sets_is_not_a_new_series(caplog: pytest.LogCaptureFixture) -> None:
    m = SchedulerMetrics()
    m.record_rebalance({"gpu": 1}, {"bored": 2, "gang": 1}, 0, 0)
    assert sample(m, "tidemark_scheduler_rebalance_moves_total", {"resource": "gpu"}) is None
    assert sample(m, "tidemark_scheduler_rebalance_skipped_total", {"reason": "bored"}) is None
    assert sample(m, "tidemark_scheduler_rebalance_skipped_total", {"reason": "gang"}) == 1
    assert "rebalance resource='gpu' is not one of" in caplog.text


# --- simulate's view ------------------------------------------------------------------------------------
def sim(objects: list[dict[str, Any]], now: float = NOW, cycles: int = 1) -> Any:
    return simulate(objects, conf(CONF), ACTIONS, PLUGINS, cycles=cycles, now=now)


def test_simulate_shows_the_hot_and_cool_nodes_the_moves_and_the_cooling_workloads() -> None:
    result = sim(cluster(opod("batch", "hot", metadata={"ownerReferences": RS_BATCH})), cycles=2)
    doc = result.to_json()
    assert doc["evictions"] == ["ns1/batch"] and set(doc) == {"binds", "evictions", "pipelined", "podgroups",
                                                              "stats", "rebalance"}
    reason = "Rebalanced: node hot cpu 83% over 70%; cool nodes: cool"
    assert doc["rebalance"] == {
        "hot": ["hot"], "cool": ["cool"],
        "moves": [{"pod": "ns1/batch", "from": "hot", "to": "cool", "resource": "cpu", "reason": reason}],
        "held": {}, "cooling": {"ns1/ReplicaSet/rs-batch": 300}, "relieved": {"hot": 0},
    }
    table = result.to_table()
    assert "rebalance: hot nodes: hot; cool nodes: cool" in table
    assert f"moved ns1/batch from hot (room on cool): {reason}" in table
    assert "cool-down: workload ns1/ReplicaSet/rs-batch not moved again for 300s" in table


def test_the_view_keeps_a_workload_cooling_from_an_earlier_run() -> None:
    sim(cluster(opod("batch", "hot", metadata={"ownerReferences": RS_BATCH})))
    later = [queue("default"), unode("hot", 83, age=-110), unode("cool", 10, age=-110),
             opod("batch-2", "hot", metadata={"ownerReferences": RS_BATCH})]
    view = sim(later, NOW + 120).to_json()["rebalance"]
    assert view["moves"] == [] and view["held"] == {"workload_cooldown": 1}
    assert view["cooling"] == {"ns1/ReplicaSet/rs-batch": 180}
    assert view["relieved"] == {}


def test_without_the_plugin_the_document_is_unchanged() -> None:
    doc = simulate(cluster(opod("batch", "hot")), conf("actions: allocate\ntiers: []\n"), ACTIONS, PLUGINS,
                   now=NOW).to_json()
    assert set(doc) == {"binds", "evictions", "pipelined", "podgroups", "stats"}
