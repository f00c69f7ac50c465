"""The usage plugin, fed by the agent's tidemark.io/node-usage annotation (Volcano's usage_test.go cases)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from scheduler_ext.framework.conf import ConfError
from scheduler_ext.plugins.usage import (
    NODE_USAGE_CPU_EXTEND,
    NODE_USAGE_MEMORY_EXTEND,
    UsagePlugin,
    estimate_pod_resource,
    parse_node_usage,
    pod_limits,
)

from .helpers import conf, node, pod, run, session

NOW = 1_700_000_000.0


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def usage(cpu: float, mem: float, age: float = 10.0) -> dict[str, str]:
    doc = {"cpu": cpu, "memory": mem, "window": "60s", "time": stamp(NOW - age)}
    return {"tidemark.io/node-usage": json.dumps(doc)}


def unode(
    name: str, cpu_pct: float | None = None, mem_pct: float | None = None, age: float = 10.0, **kw: Any
) -> dict[str, Any]:
    ann = usage(cpu_pct or 0.0, mem_pct or 0.0, age) if cpu_pct is not None else kw.pop("annotations", {})
    return node(name, cpu="4", memory="8Gi", pods="10", annotations=ann, **kw)


def usage_conf(extra: str = "", actions: str = "allocate") -> str:
    args = (
        "    arguments:\n      usage.weight: 5\n      cpu.weight: 1\n      memory.weight: 1\n"
        "      thresholds: {cpu: 80, mem: 80}\n" + extra
    )
    return f"actions: {actions}\ntiers:\n- plugins:\n  - name: usage\n{args}  - name: predicates\n"


def plugin_of(ssn: Any) -> UsagePlugin:
    p = ssn.plugins["usage"]
    assert isinstance(p, UsagePlugin)
    return p


def only_task(ssn: Any) -> Any:
    return next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.status.name == "PENDING")


# --- predicate -------------------------------------------------------------------------------------


def test_predicate_thresholds_staleness_and_missing_metrics() -> None:
    nodes = [
        unode("n1", 81, 60),  # cpu over
        unode("n2", 60, 81),  # memory over
        unode("n3", 80, 79),  # at the threshold: passes (strictly above fails)
        unode("n4", 90, 81, age=6 * 60),  # stale: ignored
        unode("n5"),  # no annotation
        unode("n6", 81, 81),  # both over: cpu is named
    ]
    ssn = session([*nodes, pod("p1")], usage_conf())
    plugin = plugin_of(ssn)
    task = only_task(ssn)
    res = plugin.batch_predicate(task, ssn.all_nodes)
    assert res.passed.tolist() == [False, False, True, True, True, False]
    reasons = {ssn.table.names[int(i)]: sts[0].reason for idx, sts in res.all_failures() for i in idx}
    assert reasons == {"n1": NODE_USAGE_CPU_EXTEND, "n2": NODE_USAGE_MEMORY_EXTEND, "n6": NODE_USAGE_CPU_EXTEND}
    for n in ssn.node_list:  # the scalar form agrees
        err = ssn.predicate_fn(task, n)
        assert (err is None) == bool(res.passed[n.index])
        if err is not None:
            assert err.statuses[0].code.name == "UNSCHEDULABLE_AND_UNRESOLVABLE"


def test_predicate_through_allocate_and_enable_flag() -> None:
    objs = [unode("n1", 95, 10), unode("n2", 70, 10), pod("p1")]
    assert {b.task.name: b.node for b in run(objs, usage_conf()).binds} == {"p1": "n2"}
    objs = [unode("n1", 95, 10), pod("p1")]
    assert run(objs, usage_conf()).binds == []
    off = usage_conf().replace("  - name: usage\n", "  - name: usage\n    enablePredicate: false\n")
    assert {b.task.name: b.node for b in run(objs, off).binds} == {"p1": "n1"}


def test_custom_thresholds() -> None:
    objs = [unode("n1", 95, 10), pod("p1")]
    assert len(run(objs, usage_conf().replace("cpu: 80", "cpu: 96")).binds) == 1


def test_malformed_annotation_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    bad = [
        "not json",
        "[1, 2]",
        json.dumps({"cpu": "high", "memory": 1, "time": stamp(NOW)}),
        json.dumps({"cpu": -1, "memory": 1, "time": stamp(NOW)}),
        json.dumps({"cpu": True, "memory": 1, "time": stamp(NOW)}),
        json.dumps({"cpu": 99, "memory": 99}),
        json.dumps({"cpu": 99, "memory": 99, "time": "yesterday"}),
        json.dumps({"cpu": 99, "memory": 99, "time": "2023-11-14T22:13:20"}),  # no zone
        json.dumps({"cpu": 99, "memory": 99, "time": stamp(NOW), "window": 60}),
    ]
    for raw in bad:
        assert isinstance(parse_node_usage(raw), str), raw
    assert parse_node_usage(json.dumps({"cpu": 99, "memory": 1.5, "time": "2023-11-14T22:13:20+01:00"})) == (
        99.0,
        1.5,
        datetime.fromisoformat("2023-11-14T22:13:20+01:00").timestamp(),
    )
    objs = [node(f"m{i}", annotations={"tidemark.io/node-usage": raw}) for i, raw in enumerate(bad)] + [pod("p1")]
    with caplog.at_level(logging.WARNING, logger="scheduler_ext.plugins.usage"):
        ssn = session(objs, usage_conf())
    plugin = plugin_of(ssn)
    assert not plugin.fresh.any()
    assert plugin.batch_predicate(only_task(ssn), ssn.all_nodes).passed.all()
    assert sum("is malformed" in r.message for r in caplog.records) == len(bad)


def test_a_huge_annotation_is_logged_as_a_bounded_excerpt(caplog: pytest.LogCaptureFixture) -> None:
    """The agent's Node writes are capped now (hardening round 2, item 7), but an annotation written by anyone
    else reaches the scheduler too: its warning carries a bounded excerpt and the length, never the value, and
    what it remembers to warn once per value is bounded as well."""
    import scheduler_ext.plugins.usage as usage_module

    huge = "x" * 1_000_000
    objs = [node("big", annotations={"tidemark.io/node-usage": huge}), pod("p1")]
    with caplog.at_level(logging.WARNING, logger="scheduler_ext.plugins.usage"):
        session(objs, usage_conf())
        session(objs, usage_conf())  # the next session warns no more
    (record,) = [r for r in caplog.records if "is malformed" in r.message]
    assert len(record.getMessage()) < 400 and "chars)" in record.getMessage()
    assert all(len(str(k)) < 400 for k in usage_module._WARNED)


# --- score ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ("", [300, 225, 150, 0, 0]),
        ("cpu.weight: 2\n      memory.weight: 8\n", [270, 240, 120, 0, 0]),
    ],
)
def test_scores_match_volcano(weights: str, expected: list[float]) -> None:
    nodes = [
        unode("n1", 30, 50),
        unode("n2", 60, 50),
        unode("n3", 60, 80),
        unode("n4", 10, 20, age=6 * 60),
        unode("n5"),
    ]
    text = usage_conf()
    if weights:
        text = text.replace("      cpu.weight: 1\n      memory.weight: 1\n", "      " + weights)
    ssn = session([*nodes, pod("p1")], text)
    scores = plugin_of(ssn).score(only_task(ssn), ssn.all_nodes)
    assert np.allclose(scores, expected)


def test_lower_usage_wins_in_allocate() -> None:
    objs = [unode("n1", 50, 50), unode("n2", 20, 20), unode("n3", 40, 10), pod("p1")]
    assert {b.task.name: b.node for b in run(objs, usage_conf()).binds} == {"p1": "n2"}


def test_shadow_load_spreads_one_session_over_equal_nodes() -> None:
    objs = [unode("n1", 10, 10), unode("n2", 10, 10)] + [pod(f"p{i}", cpu="1", memory="1Gi") for i in range(4)]
    got = {b.task.name: b.node for b in run(objs, usage_conf()).binds}
    assert sorted(got.values()) == ["n1", "n1", "n2", "n2"]
    assert got["p0"] != got["p1"]


def test_shadow_estimates_and_warm_up() -> None:
    started_recently = pod("recent", node_name="n1", phase="Running", cpu="1", memory="1Gi")
    started_recently["status"]["startTime"] = stamp(NOW - 5)
    started_long_ago = pod("old", node_name="n1", phase="Running", cpu="1", memory="1Gi")
    started_long_ago["status"]["startTime"] = stamp(NOW - 3600)
    bound = pod("bound", node_name="n2", phase="Pending", cpu="2", memory="2Gi")
    bound["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "4", "memory": "4Gi"}
    objs = [unode("n1", 10, 10), unode("n2", 10, 10), started_recently, started_long_ago, bound, pod("p1")]
    ssn = session(objs, usage_conf())
    plugin = plugin_of(ssn)
    assert plugin.shadow_cpu.tolist() == [700.0, 1400.0]  # 0.7 * request, the old pod is in the usage already
    assert plugin.shadow_mem[0] == pytest.approx(0.7 * 1024**3)
    # metrics.interval widens the blind spot
    text = "metrics: {interval: 2h}\n" + usage_conf()
    assert plugin_of(session(objs, text)).shadow_cpu.tolist() == [1400.0, 1400.0]
    # the composite load then lowers the score: n1 (10% + 700m/4000m) vs n2 (10% + 1400m/4000m)
    s = plugin.score(only_task(ssn), ssn.all_nodes)
    assert s[0] > s[1]


def test_deallocate_takes_back_exactly_what_was_added() -> None:
    objs = [unode("n1", 70, 70), pod("p1", cpu="1", memory="1Gi")]
    ssn = session(objs, usage_conf())
    plugin = plugin_of(ssn)
    task = only_task(ssn)
    stmt = ssn.statement()
    stmt.allocate(task, ssn.nodes["n1"])
    # composite 0.7 >= risk threshold 0.6: risk factor 1.2
    assert plugin.shadow_cpu[0] == pytest.approx(1000 * 0.7 * 1.2)
    stmt.discard()
    assert plugin.shadow_cpu[0] == 0.0 and plugin.shadow_mem[0] == 0.0
    assert plugin.snapshots == {}


def test_best_effort_and_estimator_arguments() -> None:
    extra = "      estimator: {request_ratio: 1.0, burst_ratio: 0.5, risk_factor: 2, be_cpu: 500m, be_mem: 100}\n"
    objs = [unode("n1", 10, 10), pod("be", cpu=None, memory=None), pod("p1")]
    ssn = session(objs, usage_conf(extra))
    plugin = plugin_of(ssn)
    be = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.name == "be")
    assert plugin.estimate(be, 1.0) == (500.0, 100 * 1024 * 1024)
    assert plugin.request_ratio == 1.0 and plugin.burst_ratio == 0.5 and plugin.risk_factor == 2.0
    # out-of-range values keep Volcano's defaults
    bad = "      estimator: {request_ratio: 2, burst_ratio: -1, risk_threshold: 5, risk_factor: 0.5}\n"
    p2 = plugin_of(session(objs, usage_conf(bad)))
    assert (p2.request_ratio, p2.burst_ratio, p2.risk_threshold, p2.risk_factor) == (0.7, 0.0, 0.6, 1.2)


def test_estimate_pod_resource() -> None:
    assert estimate_pod_resource(1000, 2000, 0.7, 0.0, 1.0) == pytest.approx(700)
    assert estimate_pod_resource(1000, 2000, 0.7, 0.5, 1.0) == pytest.approx(1200)
    assert estimate_pod_resource(1000, 2000, 1.0, 1.0, 1.2) == 2000  # clamped to the limit
    assert estimate_pod_resource(1000, 500, 1.0, 1.0, 1.2) == 1000  # limit below request: request
    assert estimate_pod_resource(-5, 0, 1.0, 1.0, 1.0) == 0


def test_pod_limits() -> None:
    p = pod("x")
    p["spec"]["containers"] = [
        {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
        {"name": "b", "resources": {"limits": {"cpu": "500m"}}},
    ]
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": {"cpu": "3"}}}]
    p["spec"]["overhead"] = {"cpu": "100m", "memory": "10Mi"}
    assert pod_limits(p) == (3100.0, 1024**3 + 10 * 1024**2)


def test_conf_arguments() -> None:
    text = usage_conf().replace("cpu: 80, mem: 80", "cpu: 120, mem: 70").replace("usage.weight: 5", "usage.weight: -3")
    p = plugin_of(session([node("n1"), pod("p1")], text))
    assert (p.cpu_threshold, p.mem_threshold, p.usage_weight) == (80.0, 70.0, 5)
    with pytest.raises(ConfError):
        conf(usage_conf().replace("usage.weight: 5", "usage.weight: lots"))
