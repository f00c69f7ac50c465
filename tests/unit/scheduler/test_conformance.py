"""The conformance plugin: critical pods (system-*-critical classes, kube-system) are never victims."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_ext.api.task import TaskInfo
from scheduler_ext.plugins.conformance import evictable

from .helpers import node, pod, podgroup, queue, run, session

PRIORITY_CLASSES = [
    {"kind": "PriorityClass", "metadata": {"name": "low"}, "value": 10},
    {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
    {"kind": "PriorityClass", "metadata": {"name": "system-node-critical"}, "value": 2000001000},
    {"kind": "PriorityClass", "metadata": {"name": "system-cluster-critical"}, "value": 2000000000},
]


def conf(actions: str, conformance: bool = True) -> str:
    plugins = "  - name: priority\n  - name: gang\n    enablePreemptable: false\n"
    if conformance:
        plugins += "  - name: conformance\n"
    return f"actions: {actions}\ntiers:\n- plugins:\n{plugins}- plugins:\n  - name: proportion\n  - name: predicates\n"


def victim(name: str, ns: str = "ns1", pc: str = "low", group: str = "low") -> dict[str, Any]:
    p = pod(name, ns, group=group, node_name="n1", phase="Running")
    p["spec"]["priorityClassName"] = pc
    return p


def preempt_cluster(*victims: dict[str, Any]) -> list[dict[str, Any]]:
    high = pod("high-0", group="high")
    high["spec"]["priorityClassName"] = "high"
    return [
        *PRIORITY_CLASSES,
        queue("q1"),
        node("n1", cpu=str(len(victims)), memory="64Gi"),
        podgroup("low", min_member=0, phase="Running", priorityClassName="low"),
        podgroup("low", "kube-system", min_member=0, phase="Running", priorityClassName="low"),
        podgroup("high", min_member=1, priorityClassName="high"),
        *victims,
        high,
    ]


def tasks(ssn: Any) -> dict[str, TaskInfo]:
    return {t.key: t for j in ssn.jobs.values() for t in j.tasks.values()}


@pytest.mark.parametrize(
    ("ns", "pc", "protected"),
    [
        ("ns1", "low", False),
        ("ns1", "system-node-critical", True),
        ("ns1", "system-cluster-critical", True),
        ("kube-system", "low", True),
    ],
)
def test_evictable_filters_critical_pods(ns: str, pc: str, protected: bool) -> None:
    ssn = session(preempt_cluster(victim("v", ns, pc)), conf("preempt"))
    t = tasks(ssn)[f"{ns}/v"]
    assert evictable([t]) == ([] if protected else [t])


def test_session_dispatch_keeps_only_non_critical_victims() -> None:
    objs = preempt_cluster(victim("a"), victim("b", pc="system-node-critical"), victim("c", "kube-system"))
    ssn = session(objs, conf("preempt"))
    t = tasks(ssn)
    cands = [t["ns1/a"], t["ns1/b"], t["kube-system/c"]]
    for verdict in (ssn.preemptable(t["ns1/high-0"], cands), ssn.reclaimable(t["ns1/high-0"], cands)):
        assert [v.key for v in verdict] == ["ns1/a"]


def test_preempt_never_evicts_critical_pods() -> None:
    objs = preempt_cluster(victim("b", pc="system-node-critical"), victim("c", "kube-system"))
    ssn = run(objs, conf("preempt"))
    assert ssn.evictions == []
    # the same cluster without the plugin: the lower-priority pods are evicted (the test can fail)
    ssn = run(objs, conf("preempt", conformance=False))
    assert len(ssn.evictions) == 1


def test_preempt_takes_the_ordinary_victim_beside_critical_ones() -> None:
    objs = preempt_cluster(victim("a"), victim("b", pc="system-cluster-critical"))
    ssn = run(objs, conf("preempt"))
    assert [e.task.key for e in ssn.evictions] == ["ns1/a"]


def reclaim_cluster(pc: str) -> list[dict[str, Any]]:
    hogs = [pod(f"hog-{i}", group="hog", node_name="n1", phase="Running") for i in range(3)]
    for h in hogs:
        h["spec"]["priorityClassName"] = pc
    return [
        *PRIORITY_CLASSES,
        queue("q1"), queue("q2"),
        node("n1", cpu="3", memory="64Gi"),
        podgroup("hog", queue="q1", min_member=0, phase="Running"),
        podgroup("starved", queue="q2", min_member=1),
        *hogs,
        pod("reclaimer", group="starved"),
    ]


ONE_TIER_RECLAIM = """
actions: reclaim
tiers:
- plugins:
  - name: gang
  - name: conformance
  - name: proportion
"""


def test_reclaim_never_evicts_critical_pods_when_conformance_decides_with_proportion() -> None:
    assert len(run(reclaim_cluster("low"), ONE_TIER_RECLAIM).evictions) == 1
    assert run(reclaim_cluster("system-node-critical"), ONE_TIER_RECLAIM).evictions == []


def test_empty_verdict_hands_the_decision_to_the_next_tier_as_volcano() -> None:
    """Volcano's Reclaimable: a plugin returning no victims ends its tier undecided, and the next tier
    decides. With conformance in tier 1 and proportion in tier 2 (Volcano's default conf), tier 2
    alone picks among critical pods; Tidemark keeps that rule (session_plugins._victims)."""
    assert len(run(reclaim_cluster("system-node-critical"), conf("reclaim")).evictions) == 1
