"""The rescheduling plugin (issue 34 item 2, "rebalance before evicting"): the pure choice `choose`, the
candidates a session offers it, and the plugin run by the shuffle action across sessions."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler_ext.actions import shuffle
from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.api.types import RELEASING
from scheduler_ext.framework.session import Session, close_session, open_session
from scheduler_ext.model.snapshot import build_cluster
from scheduler_ext.plugins import rescheduling
from scheduler_ext.plugins.rebalance import Candidate, Limits, NodeLoad, Strategy, choose
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.plugins.rescheduling import parse_strategy, reset_state

from .helpers import conf, node, pod, podgroup, queue

REPO = Path(__file__).resolve().parents[3]
SHIPPED = (REPO / "scheduler_ext" / "volcano-scheduler.conf").read_text()
NOW = 1_700_000_000.0
GI = float(1 << 30)
S = Strategy(thresholds=(40.0, 40.0), target_thresholds=(70.0, 55.0))
L = Limits(max_per_node=1, max_per_run=10, workload_cooldown=300.0)


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    reset_state()
    yield
    reset_state()


# --- the pure choice -------------------------------------------------------------------------------------
def nl(name: str, cpu: float, mem: float = 10.0, **kw: Any) -> NodeLoad:
    """A node of 4 cpu / 8 Gi with the given peak usage."""
    return NodeLoad(name, (cpu, mem), (4000.0, 8 * GI), **kw)


def cand(name: str, node: str = "hot", *, started: float = 0.0, cpu: float = 400.0, mem: float = 0.5 * GI,
         workload: str | None = None, job: str | None = None) -> Candidate:
    return Candidate(f"uid-{name}", f"ns/{name}", node, workload or f"rs-{name}", job or f"ns/pg-{name}",
                     started, (cpu, mem), cpu)


def pick(nodes: list[NodeLoad], cands: list[Candidate], *, limits: Limits = L,
         gangs: dict[str, tuple[int, int]] | None = None, moved: dict[str, float] | None = None,
         relieved: dict[str, float] | None = None, strategy: Strategy = S) -> list[tuple[str, str, str]]:
    plan = choose(nodes, cands, gangs or {}, strategy, limits, moved or {}, relieved or {}, NOW)
    return [(m.name, m.source, m.destination) for m in plan.moves]


def test_hot_and_cool_grouping() -> None:
    nodes = [nl("hot", 83), nl("memhot", 20, 58), nl("warm", 60), nl("cool", 30), nl("edge", 40, 40)]
    plan = choose(nodes, [], {}, S, L, {}, {}, NOW)
    assert plan.hot == ["hot", "memhot"]  # the hottest (cpu + memory) first
    assert plan.cool == ["cool", "edge"]  # at the threshold is still cool (Volcano's lowThresholdFilter)
    # exactly at the target is not hot
    assert choose([nl("n", 70, 55), nl("c", 10)], [], {}, S, L, {}, {}, NOW).hot == []


def test_a_victim_moves_from_a_hot_node_when_a_cool_node_has_room() -> None:
    moves = choose([nl("hot", 83), nl("cool", 10)], [cand("a")], {}, S, L, {}, {}, NOW).moves
    assert [(m.name, m.source, m.destination) for m in moves] == [("ns/a", "hot", "cool")]
    assert moves[0].reason == "Rebalanced: node hot cpu 83% over 70%; cool nodes: cool"
    mem = choose([nl("hot", 20, 61), nl("cool", 10)], [cand("a")], {}, S, L, {}, {}, NOW).moves
    assert mem[0].reason == "Rebalanced: node hot memory 61% over 55%; cool nodes: cool"


def test_hot_on_cpu_means_the_online_pods_cpu_when_the_agent_publishes_it() -> None:
    """A node at 95 % because its offline pods soak idle CPU is busy, not hot: moving them only costs their progress
    (helper-18's review of the fleet arms: the plugin judged on the whole usage and could move what the agent's
    satisfaction measure would leave alone). Online CPU past the target is what squeezes the tier there."""
    soaking = nl("busy", 95, online_cpu=30.0)
    assert pick([soaking, nl("cool", 10)], [cand("a", "busy")]) == []
    squeezed = nl("hot", 78, online_cpu=74.0)
    moves = choose([squeezed, nl("cool", 10)], [cand("a")], {}, S, L, {}, {}, NOW).moves
    assert [(m.name, m.destination) for m in moves] == [("ns/a", "cool")]
    assert moves[0].reason == "Rebalanced: node hot online cpu 74% over 70%; cool nodes: cool"
    # memory stays the whole usage; an agent that does not publish `online` is judged on the whole usage
    assert pick([nl("hot", 20, 61, online_cpu=10.0), nl("cool", 10)], [cand("a")]) == [("ns/a", "hot", "cool")]
    assert pick([nl("hot", 83), nl("cool", 10)], [cand("a")]) == [("ns/a", "hot", "cool")]
    # a node whose online cpu is under "cool" but whose total is not: neither cool (no room) nor hot
    assert choose([nl("n", 60, online_cpu=20.0)], [], {}, S, L, {}, {}, NOW).cool == []


def test_read_usage_takes_the_online_cpu_and_ignores_a_malformed_one() -> None:
    from scheduler_ext.plugins.rescheduling import read_usage

    base = {"cpu": 80, "memory": 20, "window": "60s", "time": "2023-11-14T22:13:20Z"}
    for online, want in (({"cpu": 33.5, "memory": 5}, 33.5), ({"cpu": "x"}, None), ("bad", None), (None, None),
                         ({"cpu": True}, None), ({"cpu": -1}, None)):  # fmt: skip
        doc = dict(base) if online is None else {**base, "online": online}
        reading = read_usage(json.dumps(doc))
        assert reading is not None and reading[3] == want, (online, reading)


def test_nothing_without_a_cool_node_or_without_a_hot_node() -> None:
    assert pick([nl("hot", 83), nl("warm", 50)], [cand("a")]) == []
    assert pick([nl("calm", 60), nl("cool", 10)], [cand("a", "calm")]) == []


def test_stale_usage_is_neither_hot_nor_cool() -> None:
    assert pick([nl("hot", 83, fresh=False), nl("cool", 10)], [cand("a")]) == []
    assert pick([nl("hot", 83), nl("cool", 10, fresh=False)], [cand("a")]) == []
    assert choose([nl("hot", 83, fresh=False)], [], {}, S, L, {}, {}, NOW).hot == []


def test_an_unschedulable_or_evicting_node_is_not_cool() -> None:
    assert pick([nl("hot", 83), nl("cool", 10, schedulable=False)], [cand("a")]) == []


def test_least_progress_first() -> None:
    cands = [cand("old", started=NOW - 3600), cand("new", started=NOW - 60), cand("mid", started=NOW - 600)]
    assert pick([nl("hot", 83), nl("cool", 10)], cands) == [("ns/new", "hot", "cool")]
    two = Limits(max_per_node=2, max_per_run=10)
    assert [m[0] for m in pick([nl("hot", 95), nl("cool", 10)], cands, limits=two)] == ["ns/new", "ns/mid"]


def test_headroom_is_consumed_no_cool_node_is_filled_past_cool() -> None:
    # cool has 30 points of cpu headroom = 1200m of its 4 cpu: one 1000m pod fits, a second does not
    cands = [cand(f"p{i}", f"hot{i}", cpu=1000.0) for i in range(3)]
    hot = [nl(f"hot{i}", 80 + i) for i in range(3)]
    assert pick([*hot, nl("cool", 10)], cands) == [("ns/p2", "hot2", "cool")]
    # a second cool node takes the next one; the one with the most room left is chosen first (cooler: 40
    # points, 15 left after p2; cool: 30, 5 left after p1): p0 (25 points) fits neither any more
    moves = pick([*hot, nl("cool", 10), nl("cooler", 0)], cands)
    assert moves == [("ns/p2", "hot2", "cooler"), ("ns/p1", "hot1", "cool")]
    # a pod too big for every cool node is passed over for the next one
    big = [cand("big", cpu=3000.0, started=NOW), cand("small", cpu=500.0)]
    assert pick([nl("hot", 83), nl("cool", 10)], big) == [("ns/small", "hot", "cool")]
    # memory counts too
    assert pick([nl("hot", 83), nl("cool", 10, 35)], [cand("fat", mem=1.0 * GI)]) == []


def test_per_node_and_per_run_caps() -> None:
    cands = [cand(f"a{i}", "hotA", started=float(i)) for i in range(3)] + [cand("b0", "hotB")]
    nodes = [nl("hotA", 99), nl("hotB", 90), nl("cool", 0), nl("cool2", 0)]
    assert pick(nodes, cands) == [("ns/a2", "hotA", "cool"), ("ns/b0", "hotB", "cool2")]
    three = Limits(max_per_node=3, max_per_run=10)
    assert [m[0] for m in pick(nodes, cands, limits=three)] == ["ns/a2", "ns/a1", "ns/a0", "ns/b0"]
    assert [m[0] for m in pick(nodes, cands, limits=Limits(max_per_node=3, max_per_run=2))] == ["ns/a2", "ns/a1"]
    # maxPerRun 0: 5 % of the nodes, at least one
    assert Limits(max_per_run=0).per_run(4) == 1
    assert Limits(max_per_run=0).per_run(100) == 5


def test_a_node_stops_once_its_estimate_is_under_the_target() -> None:
    # 72 % of 4 cpu: one 400m pod (10 points) brings it to 62, under 70: the second stays
    cands = [cand("a", started=2.0), cand("b", started=1.0)]
    assert [m[0] for m in pick([nl("hot", 72), nl("cool", 0)], cands, limits=Limits(max_per_node=5))] == ["ns/a"]


def test_workload_cooldown() -> None:
    nodes = [nl("hot", 83), nl("cool", 10)]
    assert pick(nodes, [cand("a", workload="rs")], moved={"rs": NOW - 299}) == []
    assert pick(nodes, [cand("a", workload="rs")], moved={"rs": NOW - 300}) == [("ns/a", "hot", "cool")]
    # two pods of one workload are never moved in the same run either
    two = [cand("a", workload="rs", started=2.0), cand("b", workload="rs", started=1.0)]
    nodes = [nl("hot", 99), nl("cool", 0)]
    assert [m[0] for m in pick(nodes, two, limits=Limits(max_per_node=5))] == ["ns/a"]


def test_a_gang_member_is_skipped_when_its_gang_would_fall_below_min_member() -> None:
    nodes = [nl("hot", 83), nl("cool", 0)]
    cands = [cand("g0", job="ns/gang", started=2.0), cand("solo", started=1.0)]
    assert pick(nodes, cands, gangs={"ns/gang": (3, 3), "ns/pg-solo": (1, 1)}) == [("ns/solo", "hot", "cool")]
    # with a spare member the gang may lose one, but only one
    g = [cand("g0", job="ns/gang", started=2.0, workload="w0"), cand("g1", job="ns/gang", started=1.0, workload="w1")]
    moves = pick([nl("hot", 99), nl("cool", 0)], g, gangs={"ns/gang": (4, 3)}, limits=Limits(max_per_node=5))
    assert [m[0] for m in moves] == ["ns/g0"]


def test_a_relieved_node_waits_until_its_usage_shows_the_move() -> None:
    nodes = [nl("hot", 83, window_start=NOW - 60), nl("cool", 10)]
    assert pick(nodes, [cand("a")], relieved={"hot": NOW - 30}) == []
    assert pick(nodes, [cand("a")], relieved={"hot": NOW - 90}) == [("ns/a", "hot", "cool")]


def test_a_node_hot_by_online_cpu_does_not_wait_for_a_move_to_show() -> None:
    # moving an offline pod leaves the online CPU as it is: the next run moves the next one at once
    nodes = [nl("hot", 83, window_start=NOW - 60, online_cpu=83.0), nl("cool", 10)]
    assert pick(nodes, [cand("a")], relieved={"hot": NOW - 30}) == [("ns/a", "hot", "cool")]
    # hot by memory (the whole usage), it waits as before
    mem_hot = [nl("hot", 30, 80, window_start=NOW - 60, online_cpu=30.0), nl("cool", 10)]
    assert pick(mem_hot, [cand("a")], relieved={"hot": NOW - 30}) == []


def test_a_node_starving_its_offline_tier_is_hot_and_moves_until_the_rest_is_satisfied() -> None:
    """Online CPU under the target, but the agent's allowance for the offline tier is at or under its published
    satisfaction (0.6) of what the offline pods request: the agent's CPUStarvation measure, which it evicts by once
    its rebalanceGrace is over. The fleet test's ramp (online 95 % of the node minus the offline requests) squeezed
    the tier this way and the agent evicted while the plugin, judging online CPU alone, saw nothing hot."""
    starved = nl("hot", 60, online_cpu=45.0, offline_allowance=500.0, offline_requests=1200.0, offline_satisfaction=0.6)
    three = [cand("a", started=3), cand("b", started=2), cand("c", started=1)]  # 400m each
    plan = choose([starved, nl("cool", 10)], three, {}, S, replace(L, max_per_node=5), {}, {}, NOW)
    # 500m for 1200m (42 %) -> 800m (62 %, over 0.6): one move, the newest, as the agent's own victims would go
    assert [m.name for m in plan.moves] == ["ns/a"]
    assert plan.hot == ["hot"] and plan.moves[0].resource == "cpu"
    assert plan.moves[0].reason == ("Rebalanced: node hot offline tier starving: its allowance 500m is 42% of the "
                                    "1200m offline pods request (at or under 60%); cool nodes: cool")
    # the node's own satisfaction: at 0.8 a second move (800m: 62 % -> 400m: 125 %)
    strict = replace(starved, offline_satisfaction=0.8)
    assert len(choose([strict, nl("cool", 10)], three, {}, S, replace(L, max_per_node=5), {}, {}, NOW).moves) == 2
    # satisfied (over 0.6 of the requests), not written by the agent, or no offline request: not hot
    for n in (nl("n", 60, online_cpu=45.0, offline_allowance=721.0, offline_requests=1200.0),
              nl("n", 60, online_cpu=45.0, offline_requests=1200.0),
              nl("n", 60, online_cpu=45.0, offline_allowance=0.0)):
        assert choose([n, nl("cool", 10)], three, {}, S, L, {}, {}, NOW).hot == [], n
    # exactly at 0.6 is starved (the agent's `<=`); a cool node is never hot
    edge = nl("n", 60, online_cpu=45.0, offline_allowance=720.0, offline_requests=1200.0)
    assert choose([edge, nl("cool", 10)], [], {}, S, L, {}, {}, NOW).hot == ["n"]
    cool_starved = nl("c2", 30, online_cpu=20.0, offline_allowance=100.0, offline_requests=1200.0)
    assert choose([cool_starved, nl("cool", 10)], [], {}, S, L, {}, {}, NOW).hot == []


def test_a_starving_node_does_not_wait_for_its_usage_to_show_a_move() -> None:
    # its requests are the session's: a move shows in the next run, no published window to wait for
    n = nl("hot", 60, window_start=NOW - 60, online_cpu=45.0, offline_allowance=300.0, offline_requests=800.0)
    assert pick([n, nl("cool", 10)], [cand("a")], relieved={"hot": NOW - 30}) == [("ns/a", "hot", "cool")]


def test_read_usage_takes_the_offline_allowance_and_satisfaction_and_ignores_malformed_ones() -> None:
    from scheduler_ext.plugins.rescheduling import read_usage

    base = {"cpu": 80, "memory": 20, "window": "60s", "time": "2023-11-14T22:13:20Z"}
    for offline, want in (({"allowance": 12.5, "satisfaction": 0.5}, (12.5, 0.5)), ({"allowance": 12.5}, (12.5, 0.6)),
                          ({"allowance": "x"}, None), ("bad", None), (None, None), ({"allowance": True}, None),
                          ({"allowance": -1}, None), ({}, None), ({"allowance": 3, "satisfaction": 0}, None),
                          ({"allowance": 3, "satisfaction": 1.5}, None)):  # fmt: skip
        doc = dict(base) if offline is None else {**base, "offline": offline}
        reading = read_usage(json.dumps(doc))
        assert reading is not None and reading[4] == want, (offline, reading)


def test_strategy_arguments_keep_defaults_on_bad_input(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    good = [{"name": "lowNodeUtilization",
             "parameters": {"thresholds": {"cpu": 30, "memory": 35}, "targetThresholds": {"cpu": 80}}}]
    assert parse_strategy(good) == Strategy((30.0, 35.0), (80.0, 55.0))
    assert parse_strategy(None) == Strategy()
    bad = [{"name": "lowNodeUtilization", "parameters": {"thresholds": {"cpu": "lots", "memory": 150}}},
           {"name": "highNodeUtilization"}]
    assert parse_strategy(bad) == Strategy()
    assert "thresholds.cpu='lots'" in caplog.text and "highNodeUtilization" in caplog.text
    assert parse_strategy([{"name": "lowNodeUtilization", "parameters": {"thresholds": {"cpu": 90}}}]) == Strategy()
    assert "above targetThresholds" in caplog.text


# --- the plugin in a session -----------------------------------------------------------------------------
def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unode(name: str, cpu: float, mem: float = 10.0, *, age: float = 10.0, evicting: bool = False,
          allowance: float | None = None, satisfaction: float = 0.6, **kw: Any) -> dict[str, Any]:
    """A node whose agent published a calm mean and newest sample, and the given p95 (the peak); `allowance`: the
    offline tier's, percent of allocatable CPU."""
    doc: dict[str, Any] = {"cpu": cpu / 2, "memory": mem, "window": "60s", "time": stamp(NOW - age),
                           "p95": {"cpu": cpu, "memory": mem}, "latest": {"cpu": cpu / 2, "memory": mem}}
    if allowance is not None:
        doc["offline"] = {"allowance": allowance, "satisfaction": satisfaction}
    ann = {"tidemark.io/node-usage": json.dumps(doc)}
    if evicting:
        ann["volcano.sh/offline-job-evicting"] = "true"
    return node(name, annotations=ann, **kw)


def opod(name: str, node_name: str, *, started: float = NOW - 600, owner: bool = True, offline: bool = True,
         **kw: Any) -> dict[str, Any]:
    ann = {"volcano.sh/qos-level": "-1"} if offline else {}
    meta: dict[str, Any] = kw.pop("metadata", {})
    if owner and "ownerReferences" not in meta:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"rs-{name}",
                                    "uid": f"rs-{name}", "controller": True}]
    kw.setdefault("cpu", "500m")
    p = pod(name, node_name=node_name, phase="Running", annotations={**ann, **kw.pop("annotations", {})},
            metadata=meta, **kw)
    p["status"]["startTime"] = stamp(started)
    return p


CONF = """
actions: shuffle
tiers:
- plugins:
  - name: rescheduling
    arguments:
      interval: 30s
      strategies:
      - name: lowNodeUtilization
        parameters:
          thresholds: {cpu: 40, memory: 40}
          targetThresholds: {cpu: 70, memory: 55}
"""


def run_at(objects: list[dict[str, Any]], now: float = NOW, conf_text: str = CONF) -> Session:
    c = conf(conf_text)
    ssn = open_session(build_cluster(objects, now=now), c, PLUGINS)
    for name in c.actions:
        ACTIONS[name].build().execute(ssn)
    close_session(ssn)
    return ssn


def evicted(ssn: Session) -> dict[str, str]:
    return {e.task.name: e.reason for e in ssn.evictions}


def cluster(*pods: dict[str, Any], hot: float = 83.0) -> list[dict[str, Any]]:
    return [queue("default"), unode("hot", hot), unode("cool", 10), *pods]


def test_the_shuffle_action_evicts_the_victim_with_reason_rebalanced(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scheduler_ext.plugins.rescheduling")
    ssn = run_at(cluster(opod("batch", "hot"), opod("other", "cool")))
    assert evicted(ssn) == {"batch": "Rebalanced: node hot cpu 83% over 70%; cool nodes: cool"}
    assert ssn.evictions[0].task.status == RELEASING
    assert "moving 1 offline pod(s) off hot node(s) hot (cool nodes: cool)" in caplog.text
    assert shuffle.REASON_KEY == rescheduling.REASON_KEY


def test_only_running_offline_owned_not_exempt_pods_move() -> None:
    objs = cluster(
        opod("online", "hot", started=NOW - 1),
        opod("bare", "hot", owner=False, started=NOW - 2),
        opod("system", "hot", started=NOW - 3, spec={"priorityClassName": "system-node-critical",
                                                       "priority": 2000001000}),
        opod("ds", "hot", started=NOW - 4, metadata={"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "d", "controller": True}]}),
        opod("old", "hot", started=NOW - 5000),
    )
    objs[3]["metadata"]["annotations"] = {}  # online: no qos-level
    ssn = run_at(objs)
    assert list(evicted(ssn)) == ["old"]


def test_nothing_moves_with_both_nodes_cool_or_stale_usage() -> None:
    assert evicted(run_at(cluster(opod("batch", "hot"), hot=30.0))) == {}
    objs = [queue("default"), unode("hot", 83, age=600), unode("cool", 10), opod("batch", "hot")]
    assert evicted(run_at(objs)) == {}
    for usable in ({"unschedulable": True}, {"evicting": True}):
        objs = [queue("default"), unode("hot", 83), unode("cool", 10, **usable), opod("batch", "hot")]
        assert evicted(run_at(objs)) == {}, usable


def test_a_session_moves_off_a_node_whose_agent_publishes_a_starving_offline_tier() -> None:
    """The agent's `offline` (allowance 20 % of 4 cpu: 800m; satisfaction 0.6) against the Running offline pods'
    requests on the node (3 x 500m = 1500m, 900m at 0.6): starving; the node's CPU (50 %) is under the target. One
    move (maxPerNode 1), the newest."""
    pods = [opod(f"b{i}", "hot", started=NOW - 100 * (i + 1)) for i in range(3)]
    ssn = run_at([queue("default"), unode("hot", 50, allowance=20.0), unode("cool", 10), *pods])
    assert list(evicted(ssn)) == ["b0"]
    assert "offline tier starving: its allowance 800m is 53% of the 1500m" in evicted(ssn)["b0"]
    # satisfied (1000m for 1500m, over 0.6), or an agent whose satisfaction is lower (0.5: 750m): nothing
    assert evicted(run_at([queue("default"), unode("hot", 50, allowance=25.0), unode("cool", 10), *pods])) == {}
    reset_state()
    lax = [queue("default"), unode("hot", 50, allowance=20.0, satisfaction=0.5), unode("cool", 10), *pods]
    assert evicted(run_at(lax)) == {}


def test_the_interval_and_the_workload_cooldown_hold_across_sessions() -> None:
    objs = cluster(opod("batch", "hot"))
    assert list(evicted(run_at(objs, NOW))) == ["batch"]
    # the eviction did not happen (say, a PDB): the next run is 30 s later, and the workload waits 5 min
    assert evicted(run_at(objs, NOW + 10)) == {}
    later = [queue("default"), unode("hot", 83, age=-200), unode("cool", 10, age=-200), opod("batch", "hot")]
    assert evicted(run_at(later, NOW + 240)) == {}
    moved = [queue("default"), unode("hot", 83, age=-300), unode("cool", 10, age=-300), opod("batch", "hot")]
    assert list(evicted(run_at(moved, NOW + 310))) == ["batch"]


def test_a_gang_member_stays_when_its_gang_would_break() -> None:
    pg = podgroup("gang", min_member=2, phase="Running", queue="default")
    objs = cluster(opod("g0", "hot", group="gang", started=NOW - 1), opod("g1", "cool", group="gang"),
                   opod("solo", "hot", started=NOW - 5000), pg)
    assert list(evicted(run_at(objs))) == ["solo"]


def test_the_shipped_conf_turns_it_on() -> None:
    c = conf(SHIPPED)
    assert "shuffle" in c.actions
    assert any(p.name == "rescheduling" for tier in c.tiers for p in tier.plugins)
    ssn = run_at(cluster(opod("batch", "hot")), conf_text=SHIPPED)
    assert list(evicted(ssn)) == ["batch"]


def test_the_estimate_is_the_request_or_batch_request_or_kube_defaults() -> None:
    batch = opod("b", "hot",
                 spec={"containers": [{"name": "c", "resources": {"requests": {
                     "kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": str(256 << 20)}}}]})
    best_effort = opod("e", "hot", spec={"containers": [{"name": "c"}]})
    ssn = run_at(cluster(batch, best_effort, opod("r", "hot")), conf_text="actions: allocate\ntiers: []\n")
    est = {t.name: rescheduling.estimated_request(t) for j in ssn.jobs.values() for t in j.tasks.values()}
    assert est == {"b": (500.0, float(256 << 20)), "e": (100.0, float(200 << 20)), "r": (500.0, float(1 << 30))}
