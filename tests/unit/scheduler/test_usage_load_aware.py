"""The usage plugin's load-aware extensions (issue 34): the p95 and latest aggregates of the agent's
annotation, offline/online thresholds, and the shipped conf that turns them on."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from scheduler_ext.plugins.usage import NODE_USAGE_CPU_EXTEND, UsagePlugin, parse_usage_aggregates

from .helpers import node, pod, run, session
from .test_usage import NOW, stamp

REPO = Path(__file__).resolve().parents[3]
SHIPPED = (REPO / "scheduler_ext" / "volcano-scheduler.conf").read_text()


def unode(name: str, mean: float, *, latest: float | None = None, p95: float | None = None, mem: float = 10.0,
          age: float = 10.0, online: float | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"cpu": mean, "memory": mem, "window": "60s", "time": stamp(NOW - age)}
    if online is not None:
        doc["online"] = {"cpu": online, "memory": mem}
    if latest is not None:
        doc["latest"] = {"cpu": latest, "memory": mem}
    if p95 is not None:
        doc["p95"] = {"cpu": p95, "memory": mem}
    return node(name, cpu="4", memory="8Gi", pods="10", annotations={"tidemark.io/node-usage": json.dumps(doc)})


def offline_pod(name: str, **kw: Any) -> dict[str, Any]:
    return pod(name, annotations={"volcano.sh/qos-level": "-1"}, **kw)


def conf(args: str) -> str:
    return (
        "actions: allocate\ntiers:\n- plugins:\n  - name: usage\n    arguments:\n"
        + "".join(f"      {line}\n" for line in args.strip().splitlines())
        + "  - name: predicates\n"
    )


def binds(ssn: Any) -> dict[str, str]:
    return {b.task.name: b.node for b in ssn.binds}


def plugin(ssn: Any) -> UsagePlugin:
    p = ssn.plugins["usage"]
    assert isinstance(p, UsagePlugin)
    return p


def test_filter_on_the_peak_refuses_a_node_whose_mean_is_low() -> None:
    # n1: a calm mean hides a p95 of 95 (spiky); n2: a calm mean hides a node that just turned hot
    objs = [unode("n1", 40, p95=95), unode("n2", 40, latest=92), unode("n3", 60, latest=60, p95=70), pod("p1")]
    peak = conf("thresholds: {cpu: 85, mem: 90}\naggregation: {filter: peak, score: mean}")
    assert binds(run(objs, peak)) == {"p1": "n3"}
    # Volcano's reading (the mean) takes the calmest-looking node
    assert binds(run(objs, conf("thresholds: {cpu: 85, mem: 90}"))) == {"p1": "n1"}


def test_score_on_the_p95_prefers_the_steady_node() -> None:
    # same mean; n1 spikes to 90, n2 stays near 45
    objs = [unode("n1", 40, p95=90), unode("n2", 40, p95=45), pod("p1")]
    ssn = session(objs, conf("aggregation: {filter: mean, score: p95}"))
    scores = plugin(ssn).score(next(iter(next(iter(ssn.jobs.values())).tasks.values())), ssn.all_nodes)
    assert scores[1] > scores[0]
    assert binds(run(objs, conf("aggregation: {filter: mean, score: p95}"))) == {"p1": "n2"}


def test_missing_or_bad_aggregates_fall_back_to_the_mean(caplog: pytest.LogCaptureFixture) -> None:
    bad = json.dumps({"cpu": 30, "memory": 10, "time": stamp(NOW - 10), "p95": {"cpu": "x"}, "latest": 5})
    found, why = parse_usage_aggregates(bad)
    assert found == {} and len(why) == 2
    objs = [
        node("n1", cpu="4", memory="8Gi", pods="10", annotations={"tidemark.io/node-usage": bad}),
        unode("n2", 50),  # an older agent: mean only
        pod("p1"),
    ]
    with caplog.at_level(logging.WARNING, logger="scheduler_ext.plugins.usage"):
        ssn = session(objs, conf("thresholds: {cpu: 40, mem: 90}\naggregation: {filter: peak, score: p95}"))
    p = plugin(ssn)
    assert p.cpu.tolist() == [30.0, 50.0]  # the mean stands in for the p95
    assert p.over.tolist() == [False, True]  # and for the peak
    assert "the window mean is used instead" in caplog.text


def test_offline_pods_have_their_own_thresholds() -> None:
    # 75 % busy: above the offline threshold (70), below the online one (85)
    objs = [unode("n1", 75, p95=75, latest=75), offline_pod("batch"), pod("web")]
    args = "thresholds: {cpu: 85, mem: 90}\noffline.thresholds: {cpu: 70, mem: 50}\naggregation: {filter: peak}"
    ssn = run(objs, conf(args))
    assert binds(ssn) == {"web": "n1"}
    job = next(j for j in ssn.jobs.values() if any(t.name == "batch" for t in j.tasks.values()))
    assert NODE_USAGE_CPU_EXTEND in str(job.fit_error())
    # without offline.thresholds both classes share `thresholds` (Volcano's single set)
    shared = run(objs, conf("thresholds: {cpu: 85, mem: 90}\naggregation: {filter: peak}"))
    assert binds(shared) == {"web": "n1", "batch": "n1"}


def test_offline_pods_are_filtered_without_the_offline_pods_own_usage() -> None:
    """The node at 75 % peak is 60 points offline work (mean 75, online 15): by the agent's B (A x ratio - U_non) it has
    room, and the offline tier shares the CPU among offline pods. A node whose online pods alone pass 70 keeps offline
    pods off. Before, both were refused: a node whose offline job had just ended kept the next job's pods off for a
    window (the colocation benchmark's two-thirds cells after a cell at 80 % node CPU)."""
    args = "thresholds: {cpu: 85, mem: 90}\noffline.thresholds: {cpu: 70, mem: 50}\naggregation: {filter: peak}"
    soaked = [unode("n1", 75, p95=75, latest=75, online=15), offline_pod("batch")]
    assert binds(run(soaked, conf(args))) == {"batch": "n1"}
    hot = [unode("n1", 75, p95=80, latest=80, online=72), offline_pod("batch")]  # 80 - 3 = 77 > 70
    assert binds(run(hot, conf(args))) == {}


def test_online_pods_are_not_refused_by_offline_pods_idle_cpu_use() -> None:
    """A node at 90 % CPU of which 80 points are offline work (mean 90, online 10): the offline tier yields that CPU
    to online pods (cpu.idle, the tier's ceiling), so an online pod is placed (before, "the CPU load of the node
    exceeds the upper limit": the tier test's online spike stayed Pending on the real node). Online pods' own 86
    still refuse it; memory still counts the offline pods' pages against online pods."""
    args = "thresholds: {cpu: 85, mem: 90}\noffline.thresholds: {cpu: 70, mem: 50}\naggregation: {filter: peak}"
    soaked = [unode("n1", 90, p95=90, latest=90, online=10), pod("web")]
    assert binds(run(soaked, conf(args))) == {"web": "n1"}
    assert binds(run(soaked, conf("thresholds: {cpu: 85, mem: 90}"))) == {"web": "n1"}  # no offline thresholds
    hot = [unode("n1", 95, p95=95, latest=95, online=91), pod("web")]  # 95 - 4 = 91 > 85
    assert binds(run(hot, conf(args))) == {}
    # an older agent's annotation (no `online`): the whole usage, as Volcano
    assert binds(run([unode("n1", 90, p95=90, latest=90), pod("web")], conf(args))) == {}
    full = node("n1", cpu="4", memory="8Gi", pods="10", annotations={"tidemark.io/node-usage": json.dumps({
        "cpu": 90, "memory": 95, "window": "60s", "time": stamp(NOW - 10), "online": {"cpu": 10, "memory": 20}})})
    assert binds(run([full, pod("web")], conf(args))) == {}  # memory 95 > 90: offline pages count for online pods


def test_bad_arguments_keep_the_defaults(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="scheduler_ext.plugins.usage"):
        ssn = session([unode("n1", 10), pod("p1")], conf(
            "thresholds: {cpu: 85, mem: 90}\noffline.thresholds: {cpu: 170, mem: 50}\n"
            "aggregation: {filter: p99, score: p95}"))
    p = plugin(ssn)
    assert (p.offline_cpu_threshold, p.offline_mem_threshold) == (85.0, 50.0)
    assert (p.filter_by, p.score_by) == ("mean", "p95")
    assert "offline.thresholds.cpu=170" in caplog.text and "aggregation.filter='p99'" in caplog.text


def test_the_shipped_conf_places_by_real_load() -> None:
    # the shipped conf (scheduler_ext/volcano-scheduler.conf = examples/ = the ConfigMap) has usage on
    assert (REPO / "examples" / "volcano-scheduler.conf").read_text() == SHIPPED
    objs = [
        unode("busy", 40, p95=88, latest=50),  # spiky: refused to both classes
        unode("warm", 60, p95=72, latest=65),  # above the offline threshold only
        unode("cool", 20, p95=25, latest=20),
        pod("web-0", cpu="500m"),
        offline_pod("batch-0", cpu="500m"),
    ]
    ssn = run(objs, SHIPPED)
    assert binds(ssn) == {"web-0": "cool", "batch-0": "cool"}
    only_warm = [objs[0], objs[1], objs[3], objs[4]]
    assert binds(run(only_warm, SHIPPED)) == {"web-0": "warm"}
    # stale usage (agent gone for 6 minutes) is not trusted: the node passes and scores 0
    assert binds(run([unode("gone", 99, p95=99, age=360), pod("p", cpu="500m")], SHIPPED)) == {"p": "gone"}


def test_what_the_agent_publishes_is_what_the_plugin_reads() -> None:
    """The contract end to end: agent/decide/capacity.py writes it, the plugin filters by its peak."""
    from agent.decide.capacity import node_usage_json
    from agent.decide.ops import UsageView
    from agent.model import Amounts

    view = UsageView(samples=60, window_seconds=60, percent=Amounts(40.0, 10.0),
                     newest_percent=Amounts(50.0, 10.0), p95_percent=Amounts(88.0, 12.0))
    raw = node_usage_json(view, NOW - 5)
    assert parse_usage_aggregates(raw) == ({"latest": (50.0, 10.0), "p95": (88.0, 12.0), "online": (40.0, 10.0)}, [])
    spiky = node(name="spiky", cpu="4", memory="8Gi", pods="10", annotations={"tidemark.io/node-usage": raw})
    assert binds(run([spiky, pod("p1", cpu="500m")], SHIPPED)) == {}  # peak 88 > 85: refused
