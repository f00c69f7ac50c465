"""The load step's arms, their pure parts (localcluster/fleet_step.py) and the load model's ramp and progress
(localcluster/fleet_load.py LoadModel): what bench_fleet's `load_step_arms` reports rests on these."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from localcluster.agentmetrics import parse_metrics
from localcluster.fleet_host import SyntheticHost
from localcluster.fleet_load import RAMP_TARGET, LoadModel
from localcluster.fleet_step import (
    EVICTED,
    MOVED,
    PREEMPTED,
    Eviction,
    arm_conf,
    arm_figures,
    arm_order,
    classify_evictions,
    gangs_below_min,
    lost_core_s,
    moved_twice,
    offline_replicaset,
    offline_spec,
    paired_rounds,
    rebalanced_pods,
    rescheduling_seen,
)
from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.framework.conf import parse_conf
from scheduler_ext.plugins.registry import PLUGINS

REPO = Path(__file__).resolve().parents[3]
SHIPPED = yaml.safe_load((REPO / "daemonset/scheduler/configmap.yaml").read_text())["data"]["volcano-scheduler.conf"]


def _pod(name: str, uid: str, node: str, *, offline: bool, cpu: str = "100", load: str = "idle",
         deleting: bool = False) -> dict[str, Any]:
    requests = {"kubernetes.io/batch-cpu": cpu} if offline else {"cpu": f"{cpu}m"}
    meta: dict[str, Any] = {"name": name, "uid": uid, "labels": {"fleet.tidemark.dev/load": load}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"resources": {"requests": requests}}]},
            "status": {"phase": "Running", "qosClass": "BestEffort" if offline else "Burstable"}}


def _node_cpu(host: SyntheticHost) -> int:
    with open(os.path.join(host.kubepods.cpu, "cpu.stat")) as f:
        return int(f.read().split()[1])


# --- the load model: a ramp that holds, and each offline pod's progress ------------------------------------------
def test_a_ramp_rises_from_calm_to_the_surge_level_and_a_pod_leaving_relieves_the_node(tmp_path: Path) -> None:
    host = SyntheticHost(str(tmp_path), ncpu=1, memory_total=4 * 2**30, allocatable_cpu_milli=1000)
    model = LoadModel({"n1": host})
    model.on_pod("ADDED", None, _pod("web", "u-web", "n1", offline=False, cpu="100", load="idle"))
    model.on_pod("ADDED", None, _pod("job-a", "u-a", "n1", offline=True, cpu="200"))
    model.start_ramp({"n1"}, now=100.0, ramp_s=60.0)

    def used(now: float) -> float:
        before = _node_cpu(host)
        model.tick(1.0, now)
        return round((_node_cpu(host) - before) / 1e6, 4)  # the counters count whole microseconds

    assert used(100.0) == pytest.approx(0.1 * 0.10 + 0.2)  # calm: idle at 10 % of its request, the job at 0.2
    assert used(130.0) == pytest.approx((0.01 + RAMP_TARGET) / 2 + 0.2)  # half way
    assert used(160.0) == pytest.approx(RAMP_TARGET + 0.2)  # the top: the online pod alone at RAMP_TARGET of the node
    assert used(400.0) == pytest.approx(RAMP_TARGET + 0.2)  # held
    # the job moved or evicted: the online level stays where the ramp took it (a step's surge_factor would refill)
    model.on_pod("MODIFIED", None, _pod("job-a", "u-a", "n1", offline=True, cpu="200", deleting=True))
    assert used(401.0) == pytest.approx(RAMP_TARGET)
    model.end_surge()
    assert used(402.0) == pytest.approx(0.01)
    model.start_ramp({"n1"}, now=500.0, ramp_s=0.0, top=0.5)  # a lower top, at once
    assert used(500.0) == pytest.approx(0.5)
    model.start_ramp({"n1"}, now=600.0, ramp_s=0.0, top=0.05)  # under the calm load: the online pod at its request
    assert used(600.0) == pytest.approx(0.1)


def test_an_offline_pods_progress_is_what_it_burnt_while_running_and_is_kept_when_it_stops(tmp_path: Path) -> None:
    host = SyntheticHost(str(tmp_path), ncpu=1, memory_total=4 * 2**30, allocatable_cpu_milli=1000)
    model = LoadModel({"n1": host})
    model.on_pod("ADDED", None, _pod("job-a", "u-a", "n1", offline=True, cpu="200"))
    model.on_pod("ADDED", None, _pod("web", "u-web", "n1", offline=False))
    for k in range(10):
        model.tick(0.5, float(k))
    assert model.progress == {"u-a": pytest.approx(1.0)}  # 0.2 cores for 5 s; online pods make none
    model.on_pod("MODIFIED", None, _pod("job-a", "u-a", "n1", offline=True, cpu="200", deleting=True))
    model.tick(5.0, 20.0)  # gone: burns nothing more
    assert model.ended == {"job-a": pytest.approx(1.0)} and model.progress == {}
    assert lost_core_s(["job-a", "job-b"], model.ended) == (pytest.approx(1.0), 1)


# --- the audit log and the Events: who evicted, why ----------------------------------------------------------------
def _evict(t: float, user: str, pod: str, code: int = 201) -> dict[str, Any]:
    return {"verb": "create", "user": {"username": user}, "_t": t, "responseStatus": {"code": code},
            "objectRef": {"resource": "pods", "subresource": "eviction", "name": pod, "namespace": "fleet"}}


def test_evictions_are_classified_by_user_and_the_schedulers_by_its_reason() -> None:
    events = [
        {"reason": "Evict", "involvedObject": {"kind": "Pod", "name": "rb-job-1-x"},
         "message": "Pod fleet/rb-job-1-x evicted from hollow-0001: Rebalanced: node hollow-0001 cpu 83% over 70%"},
        {"reason": "Evict", "involvedObject": {"kind": "Pod", "name": "rb-job-2-y"},
         "message": "Pod fleet/rb-job-2-y evicted from hollow-0002: shuffle"},
        {"reason": "Scheduled", "involvedObject": {"kind": "Pod", "name": "rb-job-3-z"},
         "message": "Rebalanced: not an eviction"},
    ]
    moved = rebalanced_pods(events)
    assert moved == {"rb-job-1-x"}
    audit = [
        _evict(1.0, "tidemark:agent:hollow-0001", "a"),  # an agent's own call (--node-writes direct)
        _evict(2.0, "tidemark-webhook", "b"),  # the controller, on an agent's behalf
        _evict(3.0, "tidemark-scheduler-fleet", "rb-job-1-x"),
        _evict(4.0, "tidemark-scheduler-fleet", "rb-job-2-y"),
        _evict(5.0, "tidemark-webhook", "c", code=429),  # a PDB said no: nothing moved
        _evict(6.0, "fleet-workload", "d"),  # not the step's
        {"verb": "delete", "user": {"username": "tidemark-webhook"}, "_t": 7.0, "responseStatus": {"code": 200},
         "objectRef": {"resource": "pods", "name": "e"}},
    ]
    got = classify_evictions(audit, ["tidemark:agent:hollow-0001"], "tidemark-webhook", "tidemark-scheduler-fleet",
                             moved)
    assert got == [Eviction(1.0, "a", EVICTED), Eviction(2.0, "b", EVICTED), Eviction(3.0, "rb-job-1-x", MOVED),
                   Eviction(4.0, "rb-job-2-y", PREEMPTED)]


def test_a_workload_moved_twice_within_the_cool_down_is_counted_once() -> None:
    moves = [(0.0, "rs-a"), (299.0, "rs-a"), (900.0, "rs-a"), (0.0, "rs-b"), (301.0, "rs-b"), (10.0, "rs-c")]
    assert moved_twice(moves) == 1  # rs-a; rs-b waited past 300 s, rs-c moved once
    assert moved_twice([(5.0, "rs-a"), (0.0, "rs-a")]) == 1  # order of the log does not matter


def test_a_gang_counts_below_min_only_after_it_ran_whole() -> None:
    samples = [{"g1": 5, "g2": 2}, {"g1": 3, "g2": 3}, {"g1": 2, "g2": 3}, {"g1": 5, "g2": 3}]
    assert gangs_below_min(samples, {"g1": 3, "g2": 3, "g3": 3}) == 1  # g1; g2 was still starting; g3 never ran


def test_an_arms_figures_count_lost_progress_of_evicted_and_moved_pods_and_calm_nodes_apart() -> None:
    evictions = [Eviction(1.0, "p1", EVICTED), Eviction(2.0, "p2", MOVED), Eviction(400.0, "p3", MOVED),
                 Eviction(3.0, "p4", EVICTED), Eviction(4.0, "p5", PREEMPTED)]
    node_of = {"p1": "hot", "p2": "hot", "p3": "hot", "p4": "calm", "p5": "hot"}
    owner_of = {"p2": "rs-a", "p3": "rs-a"}
    ended = {"p1": 10.0, "p2": 2.5, "p3": 1.0, "p5": 99.0}
    out = arm_figures(evictions, node_of, owner_of, {"hot"}, ended, gangs_below=0)
    assert out == {"lost_core_s": 13.5, "evictions": 2, "moved": 2, "moved_twice": 0, "calm_node_evictions": 1,
                   "gangs_below_min": 0, "calm_node_moves": 0, "preempted": 1, "lost_unknown_pods": 1}


def test_the_arms_order_is_reversed_every_other_round() -> None:
    arms = ("evict_only", "rebalance")
    assert [arm_order(arms, r) for r in range(3)] == [list(arms), list(reversed(arms)), list(arms)]


def _arm(lost: float, at_risk: int) -> dict[str, Any]:
    return {"lost_core_s": lost, "offline_pods_on_surge_nodes": at_risk}


def test_rounds_are_compared_within_each_round_with_a_median_and_a_range() -> None:
    rounds = [
        {"evict_only": _arm(100.0, 10), "rebalance": _arm(40.0, 10)},  # 60 % lower; per pod 60 %
        {"rebalance": _arm(30.0, 6), "evict_only": _arm(50.0, 10)},  # 40 % lower; per pod 5 vs 5: 0 %
        {"evict_only": _arm(80.0, 8), "rebalance": _arm(20.0, 8)},  # 75 % lower; per pod 75 %
    ]
    out = paired_rounds(rounds)
    assert out["lost_core_s_lower_pct"] == {"median": 60.0, "min": 40.0, "max": 75.0, "rounds": 3,
                                            "each": [60.0, 40.0, 75.0]}
    assert out["per_pod_at_risk_lower_pct"]["each"] == [60.0, 0.0, 75.0]
    assert out["per_pod_at_risk_lower_pct"]["median"] == 60.0
    assert out["met"] is False  # the median is past 50 %, one round is not: the range says not met


def test_a_round_is_met_only_with_every_round_past_half_and_incomplete_rounds_compare_nothing() -> None:
    both = {"evict_only": _arm(100.0, 10), "rebalance": _arm(45.0, 9)}
    assert paired_rounds([both, {"evict_only": _arm(10.0, 2)}])["met"] is True  # the second has no rebalance arm
    assert paired_rounds([both])["lost_core_s_lower_pct"]["median"] == 55.0
    nothing = paired_rounds([{"evict_only": _arm(0.0, 0), "rebalance": _arm(5.0, 1)}])  # evict_only lost nothing
    assert nothing["met"] is None and nothing["lost_core_s_lower_pct"]["median"] is None
    even = paired_rounds([both, {"evict_only": _arm(100.0, 10), "rebalance": _arm(35.0, 10)}])
    assert even["lost_core_s_lower_pct"]["median"] == 60.0  # two rounds: the mean of the middle two


# --- the conf switch --------------------------------------------------------------------------------------------
def _plugins(conf: str) -> list[str]:
    return [p["name"] for t in yaml.safe_load(conf)["tiers"] for p in t["plugins"]]


def test_what_the_rescheduling_plugin_saw_comes_from_the_schedulers_own_metrics() -> None:
    """Scrapes of the real scheduler registry: cool/hot extremes and the held-back candidates between the first and
    the last scrape, by reason (a step with no move says whether it had no cool node or held its candidates)."""
    from prometheus_client import generate_latest

    from scheduler_ext.metrics import SchedulerMetrics

    m = SchedulerMetrics()
    m.record_rebalance({}, {"gang": 1}, hot=0, cool=4)
    first = parse_metrics(generate_latest(m.registry).decode())
    m.record_rebalance({}, {"gang": 2, "no_cool_node": 3}, hot=2, cool=0)
    m.record_rebalance({"cpu": 1}, {}, hot=1, cool=1)
    last = parse_metrics(generate_latest(m.registry).decode())
    seen = rescheduling_seen([{}, first, last])
    assert seen == {"scrapes": 2, "cool_nodes_min": 1, "cool_nodes_max": 4, "hot_nodes_max": 1,
                    "held": {"gang": 2, "no_cool_node": 3}}
    assert rescheduling_seen([{}, {}]) == {"scrapes": 0}


def test_the_evict_only_arm_is_the_shipped_conf_without_shuffle_and_rescheduling() -> None:
    conf = arm_conf(SHIPPED, "evict_only")
    parsed, problems = parse_conf(conf, ACTIONS, PLUGINS)  # the scheduler takes it
    assert "shuffle" not in parsed.actions and "allocate" in parsed.actions and problems == []
    assert "rescheduling" not in _plugins(conf)
    assert [p for p in _plugins(SHIPPED) if p != "rescheduling"] == _plugins(conf)


def test_the_rebalance_arm_is_the_shipped_conf_with_its_interval_when_given() -> None:
    conf = arm_conf(SHIPPED, "rebalance", "10s")
    parsed, problems = parse_conf(conf, ACTIONS, PLUGINS)
    assert "shuffle" in parsed.actions and problems == []
    option = parsed.plugin("rescheduling")
    assert option is not None and option.arguments.get("interval") == "10s"
    assert yaml.safe_load(arm_conf(SHIPPED, "rebalance")) == yaml.safe_load(SHIPPED)
    with pytest.raises(ValueError, match="needs the conf"):
        arm_conf(arm_conf(SHIPPED, "evict_only"), "rebalance")
    with pytest.raises(ValueError, match="unknown arm"):
        arm_conf(SHIPPED, "both")


# --- the arms' workload -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fleet", REPO / "benchmarks" / "bench_fleet.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_benchs_help_prints(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats help strings with %: a bare one (an f-string's `{x:.0%}`) made `--help` a traceback."""
    with pytest.raises(SystemExit) as done:
        bench.main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "80 % of what they published" in out and "--step-rounds" in out


def test_the_bench_refuses_fewer_than_one_round(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--step-rounds", "0"]) == 2
    assert "--step-rounds" in capsys.readouterr().err


def test_an_arms_job_is_a_replicaset_of_offline_pods_in_a_gang_the_plugin_may_move(bench: ModuleType) -> None:
    (pg_path, pg), (rs_path, rs) = offline_replicaset("rb-job-0", "fleet", 5, 3)
    assert pg_path.endswith("/podgroups") and pg["spec"]["minMember"] == 3
    assert rs_path.endswith("/replicasets") and rs["spec"]["replicas"] == 5
    template = rs["spec"]["template"]
    assert template["metadata"]["annotations"] == {"volcano.sh/qos-level": "-1",
                                                   "scheduling.k8s.io/group-name": "rb-job-0"}
    assert rs["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert template["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/batch-cpu"] == "100"
    assert bench.offline_gang(1, 5)[1][1]["spec"] == template["spec"] == offline_spec(100)  # the bench's own pods
