"""The preempt action beyond the conformance cases: victim rules, node choice, statements, the dry run."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from scheduler_ext.actions.preempt import Candidate, PreemptAction, clone_cycle_state, select_candidate
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PIPELINED, RELEASING, RUNNING, FitError, Status, StatusCode
from scheduler_ext.framework.session import Session
from scheduler_ext.plugins.proportion import STATE_KEY as PROPORTION_STATE

from .helpers import node, pod, podgroup, queue, run, session

PRIORITY_CLASSES = [
    {"kind": "PriorityClass", "metadata": {"name": "low"}, "value": 10},
    {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
]

BASE_PLUGINS = """
  - name: priority
  - name: gang
    enablePreemptable: true
  - name: conformance
  - name: proportion
"""


def conf(
    *, topology: bool = False, extra_plugins: str = "", actions: str = "preempt", gang_starving: bool = True
) -> str:
    base = (
        BASE_PLUGINS
        if gang_starving
        else BASE_PLUGINS.replace("enablePreemptable: true", "enablePreemptable: true\n    enableJobStarving: false")
    )
    return (
        f"actions: {actions}\n"
        "tiers:\n"
        f"- plugins:{base}{extra_plugins}"
        "configurations:\n"
        "- name: preempt\n"
        f"  arguments: {{enableTopologyAwarePreemption: {str(topology).lower()}}}\n"
    )


def evicted(ssn: Session) -> list[str]:
    return sorted(e.task.key for e in ssn.evictions)


def pipelined(ssn: Session) -> dict[str, str]:
    return {t.key: t.node_name for j in ssn.jobs.values() for t in j.tasks_in(PIPELINED).values()}


def running(name: str, node_name: str, group: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("phase", "Running")
    return pod(name, group=group, node_name=node_name, **kw)


def replace_queue(objs: list[dict[str, Any]], q: dict[str, Any]) -> None:
    """Swap the Queue of the same name for `q`."""
    i = next(i for i, o in enumerate(objs) if o["kind"] == "Queue" and o["metadata"]["name"] == q["metadata"]["name"])
    objs[i] = q


def low_and_high(*victims: dict[str, Any], preemptor_cpu: str = "1", **hi: Any) -> list[dict[str, Any]]:
    """A low-priority running job (minMember 0) and a high-priority pending job in queue q1."""
    return [
        *PRIORITY_CLASSES,
        queue("q1"),
        podgroup("low", min_member=0, priorityClassName="low"),
        podgroup("high", min_member=1, priorityClassName="high"),
        *victims,
        pod("preemptor", group="high", cpu=preemptor_cpu, **hi),
    ]


# --- between jobs -------------------------------------------------------------------------------


def test_preemptor_is_pipelined_where_its_victim_was_evicted() -> None:
    objs = [node("n1", cpu="2"), *low_and_high(running("v1", "n1", "low"), running("v2", "n1", "low"))]
    ssn = run(objs, conf())
    assert len(ssn.evictions) == 1
    assert ssn.evictions[0].reason == "preempt"
    assert pipelined(ssn) == {"ns1/preemptor": "n1"}
    victim = ssn.evictions[0].task
    assert victim.status == RELEASING
    assert ssn.binds == []  # pipelined, not bound


@pytest.mark.parametrize(
    ("victim_extra", "why"),
    [
        ({"annotations": {"volcano.sh/preemptable": "false"}}, "annotated non-preemptable"),
        ({"phase": "Pending"}, "bound but pending is still a victim"),
    ],
)
def test_victim_status_and_annotation_rules(victim_extra: dict[str, Any], why: str) -> None:
    objs = [node("n1", cpu="1"), *low_and_high(running("v1", "n1", "low", **victim_extra))]
    ssn = run(objs, conf())
    if why == "annotated non-preemptable":
        assert evicted(ssn) == []
    else:
        # a Bound task (pod Pending with a node) is preemptable like a Running one
        assert evicted(ssn) == ["ns1/v1"]


def test_releasing_tasks_are_not_victims() -> None:
    victim = running("v1", "n1", "low", metadata={"deletionTimestamp": "2024-01-01T00:00:00Z"})
    ssn = run([node("n1", cpu="1"), *low_and_high(victim)], conf())
    assert evicted(ssn) == []
    # the releasing resources already make room: pipelined without any eviction
    assert pipelined(ssn) == {"ns1/preemptor": "n1"}


def test_best_effort_preemptor_never_evicts_tasks_with_requests() -> None:
    objs = [
        node("n1", cpu="4", pods="1"),
        *low_and_high(running("v1", "n1", "low"), preemptor_cpu=None, memory=None),
    ]
    assert evicted(run(objs, conf())) == []
    # ...but it may evict another best-effort task
    objs = [
        node("n1", cpu="4", pods="1"),
        *low_and_high(running("v1", "n1", "low", cpu=None, memory=None), preemptor_cpu=None, memory=None),
    ]
    assert evicted(run(objs, conf())) == ["ns1/v1"]


def test_same_or_higher_job_priority_is_not_preempted() -> None:
    objs = [
        *PRIORITY_CLASSES,
        queue("q1"),
        node("n1", cpu="1"),
        podgroup("other", min_member=0, priorityClassName="high"),
        podgroup("high", min_member=1, priorityClassName="high"),
        running("v1", "n1", "other"),
        pod("preemptor", group="high"),
    ]
    assert evicted(run(objs, conf())) == []


def test_other_queues_are_not_touched_by_preempt() -> None:
    # q1 deserves 1 of the 2 cpus, so the preemptor would fit once v1 (of q2) were gone
    objs = [node("n1", cpu="2"), queue("q2"), *low_and_high()]
    objs.append(pod("v1", group="lowq2", node_name="n1", phase="Running", cpu="2"))
    objs.append(podgroup("lowq2", queue="q2", min_member=0, priorityClassName="low"))
    assert evicted(run(objs, conf())) == []


def test_job_statement_rolled_back_when_the_job_cannot_be_pipelined() -> None:
    # evicting both low tasks makes room for 2 of the 3 gang members only: nothing is evicted
    objs = [
        *PRIORITY_CLASSES,
        queue("q1"),
        node("n1", cpu="2"),
        podgroup("low", min_member=0, priorityClassName="low"),
        podgroup("high", min_member=3, priorityClassName="high"),
        running("v1", "n1", "low"),
        running("v2", "n1", "low"),
        *(pod(f"p-{i}", group="high") for i in range(3)),
    ]
    ssn = run(objs, conf())
    assert evicted(ssn) == []
    assert pipelined(ssn) == {}
    assert {t.status for t in ssn.jobs["ns1/low"].tasks.values()} == {RUNNING}  # type: ignore[index]
    assert ssn.nodes["n1"].idle.milli_cpu == 0


def test_evictions_on_nodes_where_the_preemptor_does_not_fit_are_rolled_back() -> None:
    # n1 is tried first; evicting v1 there is not enough (queue capability 6 cpu), so it is undone
    objs = [
        node("n1", cpu="3"),
        node("n2", cpu="4"),
        *low_and_high(running("v1", "n1", "low"), running("v2", "n2", "low", cpu="4"), preemptor_cpu="3"),
    ]
    replace_queue(objs, queue("q1", capability={"cpu": "6", "memory": "16Gi"}))
    ssn = run(objs, conf())
    assert evicted(ssn) == ["ns1/v2"]
    assert pipelined(ssn) == {"ns1/preemptor": "n2"}
    v1 = next(t for t in ssn.jobs["ns1/low"].tasks.values() if t.name == "v1")  # type: ignore[index]
    assert v1.status == RUNNING
    assert ssn.nodes["n1"].releasing.milli_cpu == 0
    assert ssn.nodes["n1"].idle.milli_cpu == 2000


@pytest.mark.parametrize("topology", [False, True])
def test_go_case_not_pod_with_preemptable_false_or_higher_priority(topology: bool) -> None:
    # Volcano's TestPreempt "preempt low priority job in same queue but not pod with
    # preemptable=false or higher priority" (queue capability 3 cpu, so one eviction is needed)
    objs = [
        node("n1", cpu="12", memory="12Gi"),
        *PRIORITY_CLASSES,
        queue("q1", capability={"cpu": "3", "memory": "3Gi"}),
        podgroup("pg1", min_member=1, priorityClassName="low"),
        podgroup("pg2", min_member=1, priorityClassName="high"),
        running("preemptee1", "n1", "pg1", annotations={"volcano.sh/preemptable": "false"}),
        running("preemptee2", "n1", "pg1", annotations={"volcano.sh/preemptable": "true"}),
        running("preemptee3", "n1", "pg1", spec={"priority": 1000}),
        pod("preemptor1", group="pg2"),
    ]
    assert evicted(run(objs, conf(topology=topology))) == ["ns1/preemptee2"]


def test_higher_scored_node_is_tried_first() -> None:
    # both nodes can host the preemptor after one eviction (memory is full); n2 has more cpu
    # left, so leastrequested (nodeorder) prefers it, whereas without scores the first node wins
    objs = [
        node("n1", cpu="4", memory="1Gi"),
        node("n2", cpu="4", memory="1Gi"),
        *low_and_high(running("v1", "n1", "low", cpu="3"), running("v2", "n2", "low", cpu="1")),
    ]
    assert evicted(run(objs, conf())) == ["ns1/v1"]
    nodeorder = "\n  - name: nodeorder\n    arguments: {balancedresource.weight: 0}\n"
    scored = run(objs, conf(extra_plugins=nodeorder))
    assert evicted(scored) == ["ns1/v2"]
    assert pipelined(scored) == {"ns1/preemptor": "n2"}


def test_evicts_in_victim_order_until_the_preemptor_fits() -> None:
    # lower task priority goes first; the second victim is spared once the preemptor fits
    objs = [
        node("n1", cpu="3"),
        *low_and_high(
            running("v-a", "n1", "low", spec={"priority": 5}),
            running("v-b", "n1", "low", spec={"priority": 1}),
            running("v-c", "n1", "low", spec={"priority": 3}),
            preemptor_cpu="2",
        ),
    ]
    assert evicted(run(objs, conf())) == ["ns1/v-b", "ns1/v-c"]


# --- eligibility ----------------------------------------------------------------------------------


def test_preemption_policy_never() -> None:
    objs = [node("n1", cpu="1"), *low_and_high(running("v1", "n1", "low"), spec={"preemptionPolicy": "Never"})]
    assert evicted(run(objs, conf())) == []


def _with_nominated(nominated: str | None, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    objs = [node("n1", cpu="1"), node("n2", cpu="1"), *extra]
    objs += low_and_high(running("v1", "n1", "low"))
    if nominated is not None:
        objs[-1]["status"]["nominatedNodeName"] = nominated
    return objs


PREDICATES = "\n  - name: predicates\n"


def test_nominated_node_missing_makes_the_task_ineligible() -> None:
    assert evicted(run(_with_nominated(None, running("v2", "n2", "low")), conf())) == ["ns1/v1"]
    assert evicted(run(_with_nominated("gone", running("v2", "n2", "low")), conf())) == []


def test_nominated_node_that_already_fits_makes_the_task_ineligible() -> None:
    # n2 is empty: preemption is not needed there, so the preemptor waits for allocate
    assert evicted(run(_with_nominated(None), conf(extra_plugins=PREDICATES))) == ["ns1/v1"]
    ssn = run(_with_nominated("n2"), conf(extra_plugins=PREDICATES))
    assert pipelined(ssn) == {}
    assert evicted(ssn) == []


def _full_n2(_task: TaskInfo, node: NodeInfo) -> FitError | None:
    """A stand-in predicate: n2 is full (Unschedulable, which eviction could fix)."""
    if node.name != "n2":
        return None
    return FitError("ns1", _task.name, node.name, [Status(StatusCode.UNSCHEDULABLE, "Too many pods")])


def test_nominated_node_with_a_pod_terminating_by_preemption() -> None:
    terminating = running("old", "n2", "low", metadata={"deletionTimestamp": "2024-01-01T00:00:00Z"})
    terminating["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    objs = _with_nominated("n2", terminating)
    objs[-1]["spec"]["priority"] = 100  # the terminating pod (priority 0) is of lower priority

    def attempt() -> tuple[str | None, list[str]]:
        ssn = session(objs, conf())
        ssn.add_predicate_fn("conformance", _full_n2)  # conformance has no predicate of its own
        preemptor = next(t for t in ssn.jobs["ns1/high"].tasks.values())  # type: ignore[index]
        why = PreemptAction.task_ineligible(ssn, preemptor)
        PreemptAction().execute(ssn)
        return why, evicted(ssn)

    why, victims = attempt()
    assert why is not None and "terminating pod" in why
    assert victims == []
    # without the DisruptionTarget condition the task may preempt again
    terminating["status"]["conditions"] = []
    assert attempt() == (None, ["ns1/v1"])
    # a lower-priority preemptor does not care about the terminating pod
    terminating["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    objs[-1]["spec"]["priority"] = 0
    assert attempt() == (None, ["ns1/v1"])


# --- within a job -----------------------------------------------------------------------------------


def test_within_job_higher_task_priority_evicts_lower() -> None:
    # gang's starving rule (ready + waiting < minMember) never lets a gang evict its own members;
    # priority's (ready + waiting < all tasks) does
    intra = conf(gang_starving=False)
    objs = [
        queue("q1"),
        node("n1", cpu="1"),
        podgroup("job", min_member=0),
        running("low-task", "n1", "job", annotations={"volcano.sh/task-priority": "1"}),
        pod("high-task", group="job", annotations={"volcano.sh/task-priority": "10"}),
    ]
    assert evicted(run(objs, conf())) == []
    ssn = run(objs, intra)
    assert evicted(ssn) == ["ns1/low-task"]
    assert pipelined(ssn) == {"ns1/high-task": "n1"}
    # equal task priorities: nothing to preempt
    objs[-1]["metadata"]["annotations"]["volcano.sh/task-priority"] = "1"
    assert evicted(run(objs, intra)) == []


def test_within_job_stops_at_the_first_task_that_cannot_be_placed() -> None:
    objs = [
        queue("q1"),
        node("n1", cpu="2"),
        podgroup("job", min_member=0),
        running("low-1", "n1", "job", annotations={"volcano.sh/task-priority": "1"}),
        running("low-2", "n1", "job", annotations={"volcano.sh/task-priority": "1"}),
        # task order: big-0 (priority 10) first; it cannot fit even after evicting both
        pod("big-0", group="job", cpu="3", annotations={"volcano.sh/task-priority": "10"}),
        pod("small-1", group="job", annotations={"volcano.sh/task-priority": "5"}),
    ]
    ssn = run(objs, conf(gang_starving=False))
    assert evicted(ssn) == []
    assert pipelined(ssn) == {}


# --- topology-aware (dry run) ---------------------------------------------------------------------------


def _reprieve_cluster() -> list[dict[str, Any]]:
    return [
        node("n1", cpu="4"),
        *low_and_high(
            running("small", "n1", "low", cpu="1", spec={"priority": 1}),
            running("large", "n1", "low", cpu="3", spec={"priority": 2}),
            preemptor_cpu="3",
        ),
    ]


def test_dry_run_reprieves_victims_that_are_not_needed() -> None:
    # normal preemption evicts in victim order (small, then large); the dry run keeps "small"
    assert evicted(run(_reprieve_cluster(), conf())) == ["ns1/large", "ns1/small"]
    ssn = run(_reprieve_cluster(), conf(topology=True))
    assert evicted(ssn) == ["ns1/large"]
    assert pipelined(ssn) == {"ns1/preemptor": "n1"}


def test_dry_run_reprieves_higher_priority_victims_first() -> None:
    # removed in victim order (p0, p1, p2) until 3 cpu are free; reprieving p2 first fails, then p1
    # stays and p0 goes: victims p2 and p0 (reprieving lowest first would keep p0 instead of p1)
    objs = [
        node("n1", cpu="4"),
        *low_and_high(
            running("p0", "n1", "low", cpu="1", spec={"priority": 0}),
            running("p1", "n1", "low", cpu="1", spec={"priority": 1}),
            running("p2", "n1", "low", cpu="2", spec={"priority": 2}),
            preemptor_cpu="3",
        ),
    ]
    assert evicted(run(objs, conf(topology=True))) == ["ns1/p0", "ns1/p2"]


def test_each_attempt_starts_from_a_fresh_cycle_state() -> None:
    # a simulation state left over from an earlier attempt (here: one that knows no queue) is dropped,
    # as Volcano's PrePredicate rewrites it
    ssn = session(_reprieve_cluster(), conf(topology=True))
    preemptor = next(iter(ssn.jobs["ns1/high"].tasks.values()))  # type: ignore[index]
    ssn.get_cycle_state(preemptor.uid)[PROPORTION_STATE] = {}
    PreemptAction().execute(ssn)
    assert evicted(ssn) == ["ns1/large"]


def test_dry_run_picks_the_node_with_the_lowest_priority_victims() -> None:
    objs = [
        node("n1", cpu="1"),
        node("n2", cpu="1"),
        *low_and_high(
            running("v-important", "n1", "low", spec={"priority": 100}),
            running("v-cheap", "n2", "low", spec={"priority": 1}),
        ),
    ]
    assert evicted(run(objs, conf())) == ["ns1/v-important"]  # first node wins in normal mode
    topo = (
        "configurations:\n- name: preempt\n  arguments: {enableTopologyAwarePreemption: true, "
        "minCandidateNodesAbsolute: 2}\n"
    )
    conf_text = conf().split("configurations:")[0] + topo
    assert evicted(run(objs, conf_text)) == ["ns1/v-cheap"]
    # with one candidate wanted, the dry run stops at the first node that works
    assert evicted(run(objs, conf(topology=True))) == ["ns1/v-important"]


def test_dry_run_needs_at_least_one_victim() -> None:
    objs = [node("n1", cpu="4"), *low_and_high(running("v1", "n1", "low"))]
    ssn = run(objs, conf(topology=True))
    assert evicted(ssn) == []
    assert pipelined(ssn) == {}
    # the normal strategy pipelines there without evicting
    assert pipelined(run(objs, conf())) == {"ns1/preemptor": "n1"}


def test_dry_run_respects_queue_capability() -> None:
    # a departure from Volcano, which would evict v1 although q1 can never admit the preemptor
    objs = [node("n1", cpu="4"), *low_and_high(running("v1", "n1", "low"), preemptor_cpu="3")]
    replace_queue(objs, queue("q1", capability={"cpu": "2", "memory": "8Gi"}))
    assert evicted(run(objs, conf(topology=True))) == []


def test_num_candidates() -> None:
    a = PreemptAction()
    assert [a.num_candidates(n) for n in (1, 5, 10, 55, 5000)] == [1, 1, 1, 5, 100]
    a.min_candidate_nodes_absolute = 3
    assert a.num_candidates(2) == 2


def _task(name: str, priority: int, start: str | None = None) -> TaskInfo:
    p = pod(name, spec={"priority": priority})
    if start:
        p["status"]["startTime"] = start
    return TaskInfo(p)


def test_select_candidate_tie_breaks() -> None:
    n1, n2 = object(), object()

    def pick(a: tuple[TaskInfo, ...], b: tuple[TaskInfo, ...]) -> object:
        best = select_candidate([Candidate(n1, a), Candidate(n2, b)], now=2e9)  # type: ignore[arg-type]
        assert best is not None
        return best.node

    # lowest highest-priority victim
    assert pick((_task("a", 5),), (_task("b", 3), _task("c", 1))) is n2
    # then the smallest sum of priorities
    assert pick((_task("a", 5), _task("b", 4)), (_task("c", 5), _task("d", 1))) is n2
    # then the fewest victims
    assert pick((_task("a", 5), _task("b", 0)), (_task("c", 5),)) is n2
    # then the latest start of the highest-priority victims
    early, late = "2024-01-01T00:00:00Z", "2024-06-01T00:00:00Z"
    assert pick((_task("a", 5, late),), (_task("b", 5, early),)) is n1
    # a victim that has not started counts as starting now (latest)
    assert pick((_task("a", 5, late),), (_task("b", 5),)) is n2
    # full tie: the first candidate
    assert pick((_task("a", 5, late),), (_task("b", 5, late),)) is n1
    assert select_candidate([], now=0) is None


def test_clone_cycle_state_is_independent() -> None:
    class Attr:
        def __init__(self, v: int) -> None:
            self.v = v

        def clone(self) -> Attr:
            return Attr(self.v)

    state: dict[str, Any] = {"proportion": {"q1": Attr(1)}, "plain": [1, 2], "obj": Attr(2)}
    c = clone_cycle_state(state)
    c["proportion"]["q1"].v = 5
    c["plain"].append(3)
    c["obj"].v = 7
    assert state["proportion"]["q1"].v == 1
    assert state["plain"] == [1, 2]
    assert state["obj"].v == 2


def test_allocate_then_preempt_uses_allocate_fit_errors() -> None:
    # a node that failed UnschedulableAndUnresolvable for the task in allocate is not considered
    objs = [
        node("n1", cpu="1", labels={"zone": "a"}),
        node("n2", cpu="1", labels={"zone": "b"}),
        *low_and_high(running("v1", "n1", "low"), running("v2", "n2", "low"), spec={"nodeSelector": {"zone": "b"}}),
    ]
    ssn = run(objs, conf(actions="allocate, preempt", extra_plugins="\n  - name: predicates\n"))
    assert evicted(ssn) == ["ns1/v2"]
    assert pipelined(ssn) == {"ns1/preemptor": "n2"}


# --- speed-ups that must not change outcomes ------------------------------------------------------------


def _count_preemptable(ssn: Session) -> list[int]:
    calls = [0]
    original = ssn.preemptable

    def counting(preemptor: TaskInfo, preemptees: list[TaskInfo]) -> list[TaskInfo]:
        calls[0] += 1
        return original(preemptor, preemptees)

    ssn.preemptable = counting  # type: ignore[method-assign]
    return calls


def _twins(annotate: bool) -> list[dict[str, Any]]:
    objs = [
        *PRIORITY_CLASSES,
        queue("q1"),
        node("n1", cpu="1"),
        podgroup("same", min_member=0, priorityClassName="high"),
        podgroup("twins", min_member=3, priorityClassName="high"),
        running("v1", "n1", "same"),
    ]
    for i in range(3):
        extra = {"annotations": {"which": str(i)}} if annotate else {}
        objs.append(pod(f"twin-{i}", group="twins", **extra))
    return objs


def test_a_failed_twin_is_not_tried_again() -> None:
    # equal job priority: no victims on n1 for any of the three identical tasks
    ssn = session(_twins(annotate=False), conf())
    calls = _count_preemptable(ssn)
    PreemptAction().execute(ssn)
    assert evicted(ssn) == []
    assert calls[0] == 1
    # tasks that differ (here in an annotation) are each tried
    ssn = session(_twins(annotate=True), conf())
    calls = _count_preemptable(ssn)
    PreemptAction().execute(ssn)
    assert calls[0] == 3


def test_nodes_without_room_are_never_visited() -> None:
    # n2 hosts only a task of another queue: even evicting everything acceptable there gives no room
    objs = [
        node("n2", cpu="1"),  # first in node order
        node("n1", cpu="1"),
        queue("q2"),
        podgroup("other", queue="q2", min_member=0, priorityClassName="low"),
        running("foreign", "n2", "other"),
        *low_and_high(running("v1", "n1", "low")),
    ]
    ssn = session(objs, conf())
    seen: list[int] = []
    original = ssn.preemptable

    def spy(preemptor: TaskInfo, preemptees: list[TaskInfo]) -> list[TaskInfo]:
        seen.append(len(preemptees))
        return original(preemptor, preemptees)

    ssn.preemptable = spy  # type: ignore[method-assign]
    PreemptAction().execute(ssn)
    assert evicted(ssn) == ["ns1/v1"]
    assert seen == [1]


def _random_cluster(seed: int) -> list[dict[str, Any]]:
    r = random.Random(seed)
    objs: list[dict[str, Any]] = [
        {"kind": "PriorityClass", "metadata": {"name": f"p{i}"}, "value": i * 10} for i in range(4)
    ]
    nq = r.randint(1, 3)
    objs += [queue(f"q{q}", weight=r.randint(1, 3), reclaimable=r.random() < 0.8) for q in range(nq)]
    nn = r.randint(1, 5)
    objs += [node(f"n{n}", cpu=str(r.randint(2, 6)), memory=f"{r.randint(2, 8)}Gi", pods="6") for n in range(nn)]
    k = 0
    for j in range(r.randint(2, 6)):
        runs = r.random() < 0.6
        objs.append(
            podgroup(
                f"j{j}",
                queue=f"q{r.randrange(nq)}",
                min_member=r.randint(0, 2),
                priorityClassName=f"p{r.randrange(4)}",
                phase="Running" if runs else "Inqueue",
            )
        )
        for _ in range(r.randint(1, 4)):
            k += 1
            extra: dict[str, Any] = {"spec": {"priority": r.randrange(3)}}
            if r.random() < 0.2:
                extra["annotations"] = {"volcano.sh/preemptable": "false"}
            cpu = r.choice(["1", "2", "500m", None])
            mem = None if cpu is None else "1Gi"
            if runs and r.random() < 0.8:
                phase = r.choice(["Running", "Running", "Pending"])
                objs.append(
                    pod(
                        f"t{k}",
                        group=f"j{j}",
                        node_name=f"n{r.randrange(nn)}",
                        phase=phase,
                        cpu=cpu,
                        memory=mem,
                        **extra,
                    )
                )
            else:
                objs.append(pod(f"t{k}", group=f"j{j}", cpu=cpu, memory=mem, **extra))
    return objs


RANDOM_CONF = """actions: {action}
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
configurations:
- name: preempt
  arguments: {{enableTopologyAwarePreemption: {topology}}}
"""


def _outcomes() -> list[tuple[list[str], dict[str, str]]]:
    out = []
    for seed in range(60):
        objs = _random_cluster(seed)
        for action, topology in (("preempt", "false"), ("preempt", "true"), ("reclaim", "false")):
            ssn = run(objs, RANDOM_CONF.format(action=action, topology=topology))
            out.append((evicted(ssn), pipelined(ssn)))
    return out


def test_node_skipping_and_twin_memo_change_no_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _outcomes()
    assert any(victims for victims, _ in fast)  # the clusters do exercise eviction
    import scheduler_ext.actions.preempt as preempt_mod
    import scheduler_ext.actions.reclaim as reclaim_mod

    plain_filter = preempt_mod.VictimFilter

    def no_bound(accept: Any, room: Any, kind: str = "") -> Any:
        return plain_filter(accept, lambda: np.full_like(room(), 1e30), kind)

    monkeypatch.setattr(preempt_mod.FailureMemo, "known_failure", lambda self, sig, state: False)
    monkeypatch.setattr(preempt_mod, "VictimFilter", no_bound)
    monkeypatch.setattr(reclaim_mod, "VictimRoom", lambda ssn, select, group: None)
    assert _outcomes() == fast
