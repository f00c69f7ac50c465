"""The reclaim action beyond the conformance cases: who may be reclaimed, statements, queue checks."""

from __future__ import annotations

from typing import Any

from scheduler_ext.api.types import PIPELINED, RUNNING
from scheduler_ext.framework.session import Session

from .helpers import node, pod, podgroup, queue, run

CONF = """
actions: reclaim
tiers:
- plugins:
  - name: conformance
  - name: gang
  - name: proportion
"""


def evicted(ssn: Session) -> list[str]:
    return sorted(e.task.key for e in ssn.evictions)


def pipelined(ssn: Session) -> dict[str, str]:
    return {t.key: t.node_name for j in ssn.jobs.values() for t in j.tasks_in(PIPELINED).values()}


def running(name: str, node_name: str, group: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("phase", "Running")
    return pod(name, group=group, node_name=node_name, **kw)


def cluster(*victims: dict[str, Any], q1: dict[str, Any] | None = None, cpu: str = "3") -> list[dict[str, Any]]:
    """q1 runs a job (minMember 0) filling n1; q2 (same weight) has a pending 1-cpu task."""
    return [
        q1 or queue("q1"),
        queue("q2"),
        node("n1", cpu=cpu, memory="8Gi"),
        podgroup("hog", queue="q1", min_member=0, phase="Running"),
        podgroup("starved", queue="q2", min_member=1),
        *victims,
        pod("reclaimer", group="starved"),
    ]


def three_hogs() -> list[dict[str, Any]]:
    return [running(f"hog-{i}", "n1", "hog") for i in range(3)]


def test_reclaims_from_the_overused_queue() -> None:
    ssn = run(cluster(*three_hogs()), CONF)
    assert len(ssn.evictions) == 1
    assert ssn.evictions[0].reason == "reclaim"
    assert pipelined(ssn) == {"ns1/reclaimer": "n1"}
    assert ssn.binds == []


def test_non_reclaimable_queue_keeps_its_tasks() -> None:
    ssn = run(cluster(*three_hogs(), q1=queue("q1", reclaimable=False)), CONF)
    assert evicted(ssn) == []
    assert pipelined(ssn) == {}


def test_only_running_preemptable_tasks_are_reclaimed() -> None:
    victims = [
        running("hog-0", "n1", "hog", phase="Pending"),  # Bound: not yet running
        running("hog-1", "n1", "hog", annotations={"volcano.sh/preemptable": "false"}),
        running("hog-2", "n1", "hog"),
    ]
    assert evicted(run(cluster(*victims), CONF)) == ["ns1/hog-2"]
    victims[2]["metadata"]["labels"] = {"volcano.sh/preemptable": "false"}
    assert evicted(run(cluster(*victims), CONF)) == []


def test_no_reclaim_within_the_same_queue() -> None:
    # proportion's own checks are off, so only reclaim's queue rule keeps q1's tasks
    objs = cluster(*three_hogs())
    objs[4] = podgroup("starved", queue="q1", min_member=1)
    lenient = CONF.replace(
        "- name: proportion", "- name: proportion\n    enablePreemptive: false\n    enableReclaimable: false"
    )
    assert evicted(run(objs, lenient)) == []
    objs[4] = podgroup("starved", queue="q2", min_member=1)
    assert len(run(objs, lenient).evictions) == 1


def test_evicts_only_what_the_task_needs_and_counts_idle_resources() -> None:
    # 2 of 4 cpu idle is not enough for a 3-cpu task: one 1-cpu hog is evicted, not two
    objs = cluster(*(running(f"hog-{i}", "n1", "hog") for i in range(2)), cpu="4")
    objs[-1] = pod("reclaimer", group="starved", cpu="3")
    objs[0] = queue("q1", weight=1)
    objs[1] = queue("q2", weight=3)
    ssn = run(objs, CONF)
    assert len(ssn.evictions) == 1
    assert pipelined(ssn) == {"ns1/reclaimer": "n1"}


def test_stops_evicting_once_the_task_fits() -> None:
    # q1 deserves 0.4 cpu, so both hogs are reclaimable, but one eviction is enough
    objs = cluster(*(running(f"hog-{i}", "n1", "hog") for i in range(2)), cpu="4")
    objs[1] = queue("q2", weight=9)
    objs[-1] = pod("reclaimer", group="starved", cpu="3")
    assert len(run(objs, CONF).evictions) == 1


def test_job_statement_rolled_back_when_the_gang_cannot_be_pipelined() -> None:
    objs = cluster(*three_hogs())
    objs[4] = podgroup("starved", queue="q2", min_member=3)
    objs += [pod(f"more-{i}", group="starved", cpu="2") for i in range(2)]
    ssn = run(objs, CONF)
    assert evicted(ssn) == []
    assert pipelined(ssn) == {}
    assert {t.status for t in ssn.jobs["ns1/hog"].tasks.values()} == {RUNNING}  # type: ignore[index]


def test_overused_reclaimer_queue_does_not_reclaim() -> None:
    # q2 already holds its whole share (capability 1 cpu / 1Gi / 1 pod, used by q2-0 on n2); proportion's
    # preemptive check is off here so that only the overused check can stop the reclaim
    objs = cluster(*three_hogs(), q1=queue("q1", capability={"cpu": "2", "memory": "8Gi"}))
    objs[1] = queue("q2", capability={"cpu": "1", "memory": "1Gi", "pods": "1"})
    objs += [
        node("n2", cpu="1", memory="1Gi"),
        podgroup("q2-running", queue="q2", min_member=0, phase="Running"),
        running("q2-0", "n2", "q2-running"),
    ]
    no_preemptive = CONF.replace("- name: proportion", "- name: proportion\n    enablePreemptive: false")
    assert evicted(run(objs, no_preemptive)) == []
    no_overused = no_preemptive.replace(
        "enablePreemptive: false", "enablePreemptive: false\n    enabledOverused: false"
    )
    assert len(run(objs, no_overused).evictions) == 1


def test_preemptive_check_blocks_a_task_beyond_the_queue_share() -> None:
    # q2 deserves at most its capability (1 cpu); a 2-cpu task may not reclaim for it
    objs = cluster(*three_hogs(), cpu="4")
    objs[1] = queue("q2", capability={"cpu": "1", "memory": "8Gi"})
    objs[-1] = pod("reclaimer", group="starved", cpu="2")
    assert evicted(run(objs, CONF)) == []
    objs[1] = queue("q2", capability={"cpu": "2", "memory": "8Gi"})
    assert len(run(objs, CONF).evictions) == 1


def test_node_that_needs_more_than_its_reclaimees_is_skipped() -> None:
    # n1's only reclaimee is too small; n2 has a big one
    objs = cluster(running("small", "n1", "hog", cpu="1"), cpu="1")
    objs[1] = queue("q2", weight=3)
    objs[-1] = pod("reclaimer", group="starved", cpu="2")
    objs += [node("n2", cpu="2", memory="8Gi"), running("big", "n2", "hog", cpu="2")]
    ssn = run(objs, CONF)
    assert evicted(ssn) == ["ns1/big"]
    assert pipelined(ssn) == {"ns1/reclaimer": "n2"}
