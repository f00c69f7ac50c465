"""Gangs are one unit in preempt's and reclaim's victim search (issue 34, framework/victims.py GangRule).

A victim whose eviction would leave its running gang below minMember is passed over while other
victims make room; otherwise the whole gang goes, with `Evicted=True, reason GangEvicted` on the
PodGroup, or the victim is not taken. The gang plugin's own Preemptable verdict is off here, as in the
shipped conf (`enablePreemptable: false`), so the rule is the only thing protecting the gang.
"""

from __future__ import annotations

from typing import Any

from scheduler_ext.framework.session import Session
from scheduler_ext.framework.victims import GANG_EVICTED, PG_COND_EVICTED
from scheduler_ext.model.plan import build_plan

from .helpers import node, pod, podgroup, queue, run

PRIORITY_CLASSES = [
    {"kind": "PriorityClass", "metadata": {"name": "low"}, "value": 10},
    {"kind": "PriorityClass", "metadata": {"name": "mid"}, "value": 100},
    {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
]

PREEMPT = """
actions: preempt
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
    enableJobStarving: true
  - name: conformance
  - name: proportion
"""

#: no proportion: its verdict lets q1 lose only what it holds beyond its share, one task here, which would
#: leave no choice of victim to test
RECLAIM = """
actions: reclaim
tiers:
- plugins:
  - name: gang
    enablePreemptable: false
    enableReclaimable: false
  - name: conformance
"""


def evicted(ssn: Session) -> list[str]:
    return sorted(e.task.name for e in ssn.evictions)


def running(name: str, node_name: str, group: str, **kw: Any) -> dict[str, Any]:
    return pod(name, group=group, node_name=node_name, phase="Running", **kw)


def gang_condition(ssn: Session, name: str) -> dict[str, Any] | None:
    job = next(j for j in ssn.jobs.values() if j.name == name)
    return next((c for c in job.pod_group.conditions if c.get("type") == PG_COND_EVICTED), None)


def preempt_cluster(*nodes_and_pods: dict[str, Any], gang_min: int = 2) -> list[dict[str, Any]]:
    """Queue q1: a low-priority gang `g` (minMember gang_min), a mid-priority single job `solo`, and a
    high-priority pending 1-cpu preemptor."""
    return [
        *PRIORITY_CLASSES,
        queue("q1"),
        podgroup("g", min_member=gang_min, phase="Running", priorityClassName="low"),
        podgroup("solo", min_member=0, phase="Running", priorityClassName="mid"),
        podgroup("hi", min_member=1, priorityClassName="high"),
        *nodes_and_pods,
        pod("preemptor", group="hi"),
    ]


def test_preempt_takes_another_victim_before_breaking_a_gang() -> None:
    # the gang's members are the lowest-priority victims: Volcano evicts one and strands the other
    objs = preempt_cluster(
        node("n1", cpu="3"), running("g-0", "n1", "g"), running("g-1", "n1", "g"), running("solo-0", "n1", "solo")
    )
    ssn = run(objs, PREEMPT)
    assert evicted(ssn) == ["solo-0"]
    assert gang_condition(ssn, "g") is None


def test_preempt_takes_the_whole_gang_when_no_other_victim_will_do() -> None:
    # g-1 runs on another node: it goes too, since g-0 alone would leave the gang at 1 of minMember 2
    objs = preempt_cluster(node("n1", cpu="1"), node("n2", cpu="1"), running("g-0", "n1", "g"),
                           running("g-1", "n2", "g"))
    ssn = run(objs, PREEMPT)
    assert evicted(ssn) == ["g-0", "g-1"]
    assert all(GANG_EVICTED in e.reason for e in ssn.evictions)
    cond = gang_condition(ssn, "g")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == GANG_EVICTED
    assert "minMember 2" in cond["message"]
    job = next(j for j in ssn.jobs.values() if j.name == "g")
    assert any(reason == GANG_EVICTED for _t, reason, _m in job.pod_group.events)


def test_the_condition_reaches_the_podgroup_status_write() -> None:
    objs = preempt_cluster(node("n1", cpu="1"), node("n2", cpu="1"), running("g-0", "n1", "g"),
                           running("g-1", "n2", "g"))
    ssn = run(objs, PREEMPT)
    pgs = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs if o["kind"] == "PodGroup"}
    plan = build_plan(ssn, pod_groups=pgs, queues={}, now_iso="2023-11-14T22:13:20Z")
    op = next(op for op in plan.podgroups if op.name == "g")
    conds = {c["type"]: c for c in op.status["conditions"]}
    assert conds[PG_COND_EVICTED]["reason"] == GANG_EVICTED


def test_no_eviction_when_the_gang_cannot_go_whole() -> None:
    # g-1 may not be preempted: g-0 alone would break the gang, so nothing is evicted
    objs = preempt_cluster(node("n1", cpu="1"), node("n2", cpu="1"), running("g-0", "n1", "g"),
                           running("g-1", "n2", "g", annotations={"volcano.sh/preemptable": "false"}))
    ssn = run(objs, PREEMPT)
    assert evicted(ssn) == []
    assert gang_condition(ssn, "g") is None


def test_a_member_above_minmember_still_goes_alone() -> None:
    objs = preempt_cluster(
        node("n1", cpu="3"), running("g-0", "n1", "g"), running("g-1", "n1", "g"), running("g-2", "n1", "g"),
        gang_min=2,
    )
    ssn = run(objs, PREEMPT)
    assert len(ssn.evictions) == 1 and ssn.evictions[0].reason == "preempt"


def reclaim_cluster(*objs: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        queue("q1"),
        queue("q2"),
        podgroup("g", queue="q1", min_member=2, phase="Running"),
        podgroup("solo", queue="q1", min_member=0, phase="Running"),
        podgroup("starved", queue="q2", min_member=1),
        *objs,
        pod("reclaimer", group="starved"),
    ]


def test_reclaim_takes_another_victim_before_breaking_a_gang() -> None:
    # the gang's tasks come first in victim order here (Volcano's, without the rule, takes z-g-1)
    objs = reclaim_cluster(
        node("n1", cpu="3"), running("z-g-0", "n1", "g"), running("z-g-1", "n1", "g"), running("a-solo", "n1", "solo")
    )
    ssn = run(objs, RECLAIM)
    assert evicted(ssn) == ["a-solo"]


def test_reclaim_takes_the_whole_gang() -> None:
    objs = reclaim_cluster(node("n1", cpu="2"), node("n2", cpu="1"), running("g-0", "n1", "g"),
                           running("g-1", "n1", "g"), running("solo", "n2", "solo"))
    ssn = run(objs, RECLAIM)
    assert evicted(ssn) == ["g-0", "g-1"]
    cond = gang_condition(ssn, "g")
    assert cond is not None and cond["reason"] == GANG_EVICTED and "reclaim" in cond["message"]


TOPOLOGY = PREEMPT + "configurations:\n- name: preempt\n  arguments: {enableTopologyAwarePreemption: true}\n"


def test_the_dry_run_takes_another_victim_and_never_breaks_a_gang() -> None:
    objs = preempt_cluster(
        node("n1", cpu="3"), running("g-0", "n1", "g"), running("g-1", "n1", "g"), running("solo-0", "n1", "solo")
    )
    assert evicted(run(objs, TOPOLOGY)) == ["solo-0"]
    # no other victim: the dry run does not take whole gangs, so nothing goes
    objs = preempt_cluster(node("n1", cpu="2"), running("g-0", "n1", "g"), running("g-1", "n1", "g"))
    assert evicted(run(objs, TOPOLOGY)) == []
