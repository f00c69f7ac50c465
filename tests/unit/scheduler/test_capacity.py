"""The capacity plugin: flat and hierarchical queue quotas, reclaim votes, orders and simulations.

Callbacks are exercised through the session's dispatch (as the actions call them), so the reclaim
rules are tested here without the reclaim action.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.resource import Resource
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import JobID, QueueID
from scheduler_ext.framework.session import Session
from scheduler_ext.plugins.capacity import CapacityPlugin
from scheduler_ext.plugins.capacity.compare import (
    greater_partly_with_relevant_dimensions,
    less_equal_partly_zero_filtered,
)
from scheduler_ext.plugins.capacity.queues import MAX_INT64_FLOAT

from .helpers import conf as parse
from .helpers import node, pod, podgroup, queue, run, session

GI = 1024**3

FLAGS_OFF = (
    "enableJobOrder: false, enableJobReady: false, enableJobPipelined: false, enableTaskOrder: false, "
    "enablePreemptable: false, enablePredicate: false, enableBestNode: false, enableNodeOrder: false, "
    "enableTargetJob: false, enableReservedNodes: false, enabledVictim: false, enableJobStarving: false"
)


def cap_conf(
    *,
    hierarchy: bool = False,
    level: int | None = None,
    actions: str = "enqueue, allocate",
    extra: str = "predicates",
    predicate: bool = False,
) -> str:
    args = f", arguments: {{ancestorReclaimLevel: {level}}}" if level is not None else ""
    h = "true" if hierarchy else "false"
    flags = FLAGS_OFF.replace("enablePredicate: false", "enablePredicate: true") if predicate else FLAGS_OFF
    plugins = f"  - {{name: capacity, enableHierarchy: {h}, {flags}{args}}}\n"
    for p in extra.split():
        plugins += f"  - {{name: {p}}}\n"
    return f"actions: {actions}\ntiers:\n- plugins:\n{plugins}"


def gpod(
    name: str, group: str, cpu: str = "1", memory: str = "1Gi", node_name: str = "", phase: str = "", **scalars: str
) -> dict[str, Any]:
    """A pod with extra scalar requests (keyword names use '_' for '/' and '.': nvidia_com_gpu)."""
    running = bool(node_name)
    p = pod(
        name,
        group=group,
        cpu=cpu,
        memory=memory,
        node_name=node_name,
        phase=phase or ("Running" if running else "Pending"),
    )
    req = p["spec"]["containers"][0]["resources"]["requests"]
    for k, v in scalars.items():
        req[k.replace("nvidia_com_", "nvidia.com/")] = v
    return p


def binds(ssn: Session) -> dict[str, str]:
    return {b.task.key: b.node for b in ssn.binds}


def plugin(ssn: Session) -> CapacityPlugin:
    p = ssn.plugins["capacity"]
    assert isinstance(p, CapacityPlugin)
    return p


def task(ssn: Session, key: str) -> TaskInfo:
    for job in ssn.jobs.values():
        for t in job.tasks.values():
            if t.key == key:
                return t
    raise KeyError(key)


def job(ssn: Session, uid: str) -> JobInfo:
    return ssn.jobs[JobID(uid)]


def q(ssn: Session, name: str) -> Any:
    return ssn.queues[QueueID(name)]


# --- Resource helpers --------------------------------------------------------------------------


def test_greater_partly_with_relevant_dimensions_ignores_dimensions_rr_lacks() -> None:
    gpu = "nvidia.com/gpu"
    # rr has no gpu at all: not relevant
    assert not greater_partly_with_relevant_dimensions(
        Resource(scalar_resources={gpu: 2000}), Resource(), Resource(scalar_resources={gpu: 1000})
    )[0]
    # rr has zero cpu: not relevant
    assert not greater_partly_with_relevant_dimensions(Resource(4000), Resource(0), Resource(2000))[0]
    # rr names gpu (even 0): relevant
    assert greater_partly_with_relevant_dimensions(
        Resource(scalar_resources={gpu: 2000}),
        Resource(scalar_resources={gpu: 0}),
        Resource(scalar_resources={gpu: 1000}),
    )[0]
    ok, names = greater_partly_with_relevant_dimensions(
        Resource(4000, 8192, {gpu: 2000}), Resource(2000, 8192, {gpu: 1000}), Resource(2000, 0, {gpu: 1000})
    )
    assert ok and sorted(names) == ["cpu", gpu]
    assert not greater_partly_with_relevant_dimensions(
        Resource(4000, 8192, {gpu: 2000}), Resource(2000, 8192, {gpu: 1000}), Resource(0, 4096, {gpu: 0})
    )[0]


def test_less_equal_partly_zero_filtered_skips_dimensions_zero_on_both_sides() -> None:
    gpu = "nvidia.com/gpu"
    # cpu over deserved, gpu zero on both sides: gpu must not count as "<= deserved"
    assert not less_equal_partly_zero_filtered(Resource(3000), Resource(2000), Resource(1000, 0, {gpu: 1000}))[0]
    ok, names = less_equal_partly_zero_filtered(Resource(3000, 2 * GI), Resource(2000, 4 * GI), Resource(1000, GI))
    assert ok and names == ["memory"]


# --- flat queues ---------------------------------------------------------------------------------


def test_capability_limits_allocation_per_requested_dimension() -> None:
    objs = [
        queue("q1", capability={"cpu": "2", "memory": "2Gi"}),
        node("n1", cpu="8", memory="16Gi"),
        podgroup("run", phase="Running"),
        pod("r1", group="run", node_name="n1", phase="Running"),
        podgroup("pg"),
        pod("a-1", group="pg"),
        pod("a-2", group="pg"),
    ]
    ssn = run(objs, cap_conf())
    assert binds(ssn) == {"ns1/a-1": "n1"}  # the second would need 3 cpu of the queue's 2


def test_unset_capability_cpu_is_unlimited_but_memory_still_caps() -> None:
    objs = [
        queue("q1", capability={"memory": "2Gi"}),
        node("n1", cpu="8", memory="16Gi"),
        podgroup("pg"),
        pod("a-1", group="pg", cpu="6", memory="1Gi"),
        pod("a-2", group="pg", cpu="1", memory="2Gi"),
    ]
    ssn = run(objs, cap_conf())
    assert binds(ssn) == {"ns1/a-1": "n1"}
    attr = plugin(session(objs, cap_conf())).queue_opts[QueueID("q1")]
    assert attr.capability.milli_cpu > 1e300  # unset cpu: unlimited
    assert attr.real_capability.milli_cpu == 8000  # ... but never above the cluster


def test_guarantee_of_other_queues_shrinks_real_capability() -> None:
    objs = [
        queue("q1", guarantee={"resource": {"cpu": "3", "memory": "1Gi"}}),
        queue("q2"),
        node("n1", cpu="4", memory="8Gi"),
        podgroup("g1", queue="q1", phase="Running"),
        pod("x", group="g1", cpu="0.5", node_name="n1", phase="Running"),
        podgroup("g2", queue="q2"),
        pod("b-1", group="g2", cpu="2"),
    ]
    ssn = session(objs, cap_conf())
    opts = plugin(ssn).queue_opts
    assert opts[QueueID("q2")].real_capability.milli_cpu == 1000  # 4 - q1's guarantee 3
    assert opts[QueueID("q1")].real_capability.milli_cpu == 4000  # its own guarantee added back
    assert opts[QueueID("q1")].deserved.milli_cpu == 3000  # deserved raised to the guarantee
    assert not ssn.allocatable(q(ssn, "q2"), task(ssn, "ns1/b-1"))


def test_closed_queue_neither_allocates_nor_enqueues() -> None:
    objs = [
        queue("q1", state="Closed"),
        node("n1"),
        podgroup("pg", phase="Pending", minResources={"cpu": "1"}),
        pod("a-1", group="pg"),
    ]
    ssn = session(objs, cap_conf())
    assert not ssn.allocatable(q(ssn, "q1"), task(ssn, "ns1/a-1"))
    assert not ssn.job_enqueueable(job(ssn, "ns1/pg"))
    assert not ssn.preemptive(q(ssn, "q1"), [task(ssn, "ns1/a-1")])


def test_enqueue_counts_inqueue_minus_elastic_and_books_enqueued_jobs() -> None:
    objs = [
        queue("q1", capability={"cpu": "4", "memory": "8Gi"}),
        node("n1", cpu="8", memory="16Gi"),
        # running job with minResources 1 cpu but 2 cpu allocated: 1 cpu elastic
        podgroup("run", phase="Running", min_member=1, minResources={"cpu": "1", "memory": "1Gi"}),
        pod("r-1", group="run", node_name="n1", phase="Running"),
        pod("r-2", group="run", node_name="n1", phase="Running"),
        podgroup("p1", phase="Pending", minResources={"cpu": "2", "memory": "1Gi"}),
        pod("p1-0", group="p1", cpu="2"),
        podgroup("p2", phase="Pending", minResources={"cpu": "1", "memory": "1Gi"}),
        pod("p2-0", group="p2"),
    ]
    ssn = session(objs, cap_conf())
    # 2 + allocated 2 + inqueue 0 - elastic 1 = 3 <= 4
    assert ssn.job_enqueueable(job(ssn, "ns1/p1"))
    ssn.job_enqueued(job(ssn, "ns1/p1"))
    assert plugin(ssn).queue_opts[QueueID("q1")].inqueue.milli_cpu == 2000
    # 1 + 2 + 2 - 1 = 4 <= 4
    assert ssn.job_enqueueable(job(ssn, "ns1/p2"))
    ssn.job_enqueued(job(ssn, "ns1/p2"))
    assert not ssn.job_enqueueable(job(ssn, "ns1/p1"))  # 2 + 2 + 3 - 1 > 4
    out = run(objs, cap_conf())
    assert {j.uid: j.pod_group.phase for j in out.jobs.values()}["ns1/p2"] in ("Inqueue", "Running")


def test_inqueue_jobs_reserve_only_what_their_tasks_do_not_hold() -> None:
    objs = [
        queue("q1", capability={"cpu": "4", "memory": "8Gi"}),
        node("n1", cpu="8", memory="16Gi"),
        podgroup("a", min_member=3, minResources={"cpu": "3", "memory": "3Gi"}),
        *[pod(f"a-{i}", group="a") for i in range(3)],
        podgroup("b", phase="Pending", minResources={"cpu": "2", "memory": "1Gi"}),
        pod("b-0", group="b", cpu="2"),
    ]
    ssn = session(objs, cap_conf())
    assert plugin(ssn).queue_opts[QueueID("q1")].inqueue.milli_cpu == 3000
    assert not ssn.job_enqueueable(job(ssn, "ns1/b"))  # 2 + 3 inqueue > 4
    for i in range(2):  # two of a's tasks bound, a still Inqueue: 1 cpu left reserved
        objs[3 + i]["spec"]["nodeName"] = "n1"
    ssn = session(objs, cap_conf())
    attr = plugin(ssn).queue_opts[QueueID("q1")]
    assert (attr.allocated.milli_cpu, attr.inqueue.milli_cpu) == (2000, 1000)
    assert not ssn.job_enqueueable(job(ssn, "ns1/b"))  # 2 + 2 + 1 > 4
    objs[5]["spec"]["nodeName"] = "n1"
    ssn = session(objs, cap_conf())
    assert plugin(ssn).queue_opts[QueueID("q1")].inqueue.milli_cpu == 0
    objs[6]["spec"]["minResources"] = {"cpu": "1"}
    ssn = session(objs, cap_conf())
    assert ssn.job_enqueueable(job(ssn, "ns1/b"))  # 1 + 3 + 0 <= 4: no double counting


def test_queue_order_priority_then_share_then_deserved_first() -> None:
    objs = [
        queue("a-besteffort"),
        queue("b-deserved", deserved={"cpu": "2"}),
        queue("c-half", deserved={"cpu": "2"}),
        queue("d-prio", priority=5, deserved={"cpu": "1"}),
        node("n1", cpu="16", memory="64Gi"),
    ]
    for name in ("a-besteffort", "b-deserved", "c-half", "d-prio"):
        objs.append(podgroup(f"pg-{name}", queue=name, phase="Running"))
    objs += [
        pod("x-b", group="pg-b-deserved", cpu="2", node_name="n1", phase="Running"),  # share 1
        pod("x-c", group="pg-c-half", cpu="1", node_name="n1", phase="Running"),  # share 0.5
        pod("x-d", group="pg-d-prio", cpu="4", node_name="n1", phase="Running"),  # share 4, priority 5
        pod("x-a", group="pg-a-besteffort", cpu="1", node_name="n1", phase="Running"),  # best effort: 1
    ]
    ssn = session(objs, cap_conf())
    qq = ssn.new_queue_queue()
    for name in ("a-besteffort", "b-deserved", "c-half", "d-prio"):
        qq.push(q(ssn, name))
    order = [qq.pop().name for _ in range(4)]  # type: ignore[union-attr]
    assert order == ["d-prio", "c-half", "b-deserved", "a-besteffort"]


def test_share_follows_allocations_through_events() -> None:
    objs = [queue("q1", deserved={"cpu": "4"}), node("n1", cpu="8"), podgroup("pg")]
    objs += [pod(f"a-{i}", group="pg") for i in range(2)]
    ssn = session(objs, cap_conf())
    from scheduler_ext.actions.registry import ACTIONS

    ACTIONS["allocate"].build().execute(ssn)
    attr = plugin(ssn).queue_opts[QueueID("q1")]
    assert attr.allocated.milli_cpu == 2000 and attr.share == pytest.approx(0.5)


# --- reclaim votes (flat) --------------------------------------------------------------------------


def reclaim_objs() -> list[dict[str, Any]]:
    return [
        queue("q-over", deserved={"cpu": "2", "memory": "2Gi"}),
        queue("q-under", deserved={"cpu": "2", "memory": "4Gi"}),
        node("n1", cpu="4", memory="8Gi"),
        podgroup("over", queue="q-over", phase="Running"),
        pod("v-1", group="over", cpu="1", memory="1Gi", node_name="n1", phase="Running"),
        pod("v-2", group="over", cpu="1", memory="1Gi", node_name="n1", phase="Running"),
        pod("v-3", group="over", cpu="1", memory="1Gi", node_name="n1", phase="Running"),
        podgroup("want", queue="q-under"),
        pod("w-0", group="want", cpu="1", memory="1Gi"),
    ]


def test_reclaimable_takes_only_what_the_queue_holds_above_deserved() -> None:
    ssn = session(reclaim_objs(), cap_conf())
    victims = [task(ssn, f"ns1/v-{i}") for i in (1, 2, 3)]
    chosen = ssn.reclaimable(task(ssn, "ns1/w-0"), victims)
    assert len(chosen) == 1  # 3 cpu allocated, 2 deserved: one victim brings it back
    assert ssn.preemptive(q(ssn, "q-under"), [task(ssn, "ns1/w-0")])
    assert not ssn.preemptive(q(ssn, "q-over"), [task(ssn, "ns1/w-0")])  # already above deserved


def test_reclaimable_respects_guarantee() -> None:
    objs = reclaim_objs()
    # over deserved on cpu, but any victim would take memory below the guarantee
    objs[0]["spec"]["guarantee"] = {"resource": {"memory": "3Gi"}}
    objs[0]["spec"]["deserved"] = {"cpu": "2", "memory": "8Gi"}
    ssn = session(objs, cap_conf())
    victims = [task(ssn, f"ns1/v-{i}") for i in (1, 2, 3)]
    assert ssn.reclaimable(task(ssn, "ns1/w-0"), victims) == []


def test_reclaimable_skips_victims_without_resources_the_reclaimer_needs() -> None:
    objs = [
        queue("q-gpu"),
        queue("q-cpu", deserved={"cpu": "2"}),
        node("n1", cpu="4", memory="8Gi", resources={"nvidia.com/gpu": "2"}),
        podgroup("g", queue="q-gpu", phase="Running"),
        gpod("gpu-only", "g", cpu="0", memory="0", node_name="n1", nvidia_com_gpu="1"),
        gpod("both", "g", node_name="n1", nvidia_com_gpu="1"),
        podgroup("want", queue="q-cpu"),
        pod("w-0", group="want"),
    ]
    ssn = session(objs, cap_conf())
    chosen = ssn.reclaimable(task(ssn, "ns1/w-0"), [task(ssn, "ns1/gpu-only"), task(ssn, "ns1/both")])
    assert [t.name for t in chosen] == ["both"]  # gpu-only shares no dimension with the reclaimer


def test_preemptive_refuses_beyond_real_capability() -> None:
    objs = reclaim_objs()
    objs[1]["spec"]["capability"] = {"cpu": "1", "memory": "8Gi"}
    objs.append(podgroup("held", queue="q-under", phase="Running"))
    objs.append(pod("h-0", group="held", cpu="1", memory="1Gi", node_name="n1", phase="Running"))
    ssn = session(objs, cap_conf())
    assert not ssn.preemptive(q(ssn, "q-under"), [task(ssn, "ns1/w-0")])


# --- hierarchy ---------------------------------------------------------------------------------


def tree(**extra_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """root -> a (cap 4 cpu) -> {a1 (cap 1 cpu), a2}; root -> b."""
    qs = [
        queue("root"),
        queue("a", parent="root", capability={"cpu": "4", "memory": "8Gi"}),
        queue("a1", parent="a", capability={"cpu": "1"}),
        queue("a2", parent="a"),
        queue("b", parent="root"),
    ]
    for qq in qs:
        qq["spec"].update(extra_spec.get(qq["metadata"]["name"], {}))
    return [*qs, node("n1", cpu="16", memory="32Gi", resources={"nvidia.com/gpu": "4"})]


def test_hierarchy_links_inherits_capability_and_allocates_only_leaves() -> None:
    objs = tree(a={"capability": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}})
    objs += [podgroup("in-a1", queue="a1"), gpod("a1-0", "in-a1", nvidia_com_gpu="2")]
    ssn = session(objs, cap_conf(hierarchy=True))
    opts = plugin(ssn).queue_opts
    a1 = opts[QueueID("a1")]
    assert a1.ancestors == [QueueID("root"), QueueID("a")]
    assert set(opts[QueueID("a")].children) == {QueueID("a1"), QueueID("a2")}
    assert a1.capability.milli_cpu == 1000  # own
    assert a1.capability.memory == 8 * GI  # inherited from a
    assert (a1.capability.scalar_resources or {})["nvidia.com/gpu"] == 2000  # inherited scalar
    root = opts[QueueID("root")]
    assert (root.capability.scalar_resources or {})["nvidia.com/gpu"] == MAX_INT64_FLOAT  # unset root: unlimited
    assert binds(run(objs, cap_conf(hierarchy=True))) == {"ns1/a1-0": "n1"}
    assert not ssn.allocatable(q(ssn, "a"), task(ssn, "ns1/a1-0"))  # inner queue


def test_hierarchy_ancestor_capability_caps_leaf_allocation() -> None:
    objs = tree()
    objs += [podgroup("busy", queue="a2", phase="Running")]
    objs += [pod(f"busy-{i}", group="busy", node_name="n1", phase="Running") for i in range(3)]
    objs += [podgroup("in-a1", queue="a1"), pod("a1-0", group="in-a1"), pod("a1-1", group="in-a1")]
    ssn = run(objs, cap_conf(hierarchy=True))
    # a has 4 cpu: 3 used by a2, a1 may take one more (a1's own cap is 1 as well)
    assert binds(ssn) == {"ns1/a1-0": "n1"}
    objs[2]["spec"]["capability"] = {"cpu": "2"}
    assert binds(run(objs, cap_conf(hierarchy=True))) == {"ns1/a1-0": "n1"}  # still a's limit


def test_hierarchy_enqueue_books_inqueue_on_ancestors() -> None:
    objs = tree()
    objs += [
        podgroup("e1", queue="a1", phase="Pending", minResources={"cpu": "1"}),
        podgroup("e2", queue="a2", phase="Pending", minResources={"cpu": "3"}),
        podgroup("e3", queue="a2", phase="Pending", minResources={"cpu": "1"}),
    ]
    ssn = run(objs, cap_conf(hierarchy=True, actions="enqueue"))
    phases = {j.uid: j.pod_group.phase for j in ssn.jobs.values()}
    # a1 then a2 (equal shares: name order); e1 (1) and e2 (3) fill a's 4, so e3 (1) is refused by a
    # although a2 alone (real capability 4, 3 inqueue) would take it
    assert phases == {"ns1/e1": "Inqueue", "ns1/e2": "Inqueue", "ns1/e3": "Pending"}


def test_hierarchy_job_in_inner_queue_disables_the_plugin() -> None:
    objs = [*tree(), podgroup("inner", queue="a"), pod("i-0", group="inner")]
    objs += [podgroup("leaf", queue="b"), pod("l-0", group="leaf")]
    ssn = session(objs, cap_conf(hierarchy=True))
    assert plugin(ssn).ready is False
    assert not ssn.allocatable(q(ssn, "b"), task(ssn, "ns1/l-0"))
    assert not ssn.job_enqueueable(job(ssn, "ns1/leaf"))
    assert binds(run(objs, cap_conf(hierarchy=True))) == {}


def test_hierarchy_missing_parent_rejects_everything() -> None:
    objs = [*tree(), podgroup("leaf", queue="b"), pod("l-0", group="leaf"), queue("orphan", parent="nowhere")]
    ssn = session(objs, cap_conf(hierarchy=True))
    assert plugin(ssn).ready is False
    assert binds(run(objs, cap_conf(hierarchy=True))) == {}
    # without hierarchy the same cluster schedules
    assert binds(run(objs, cap_conf())) == {"ns1/l-0": "n1"}


def test_hierarchy_cycle_is_detached_from_root_without_stopping_others() -> None:
    # as Volcano: queues in a parent cycle hang below each other, away from root (zero real capability)
    objs = [*tree(), queue("x", parent="y"), queue("y", parent="x"), queue("z", parent="x")]
    objs += [podgroup("leaf", queue="b"), pod("l-0", group="leaf")]
    objs += [podgroup("lost", queue="z"), pod("z-0", group="lost")]
    ssn = session(objs, cap_conf(hierarchy=True))
    assert plugin(ssn).ready
    assert plugin(ssn).queue_opts[QueueID("z")].real_capability.milli_cpu == 0
    assert binds(run(objs, cap_conf(hierarchy=True))) == {"ns1/l-0": "n1"}


def test_hierarchy_without_root_queue_uses_an_implicit_root() -> None:
    objs = [
        queue("a", capability={"cpu": "1"}),  # no parent: below root
        node("n1", cpu="8"),
        podgroup("pg", queue="a"),
        pod("a-0", group="pg"),
        pod("a-1", group="pg"),
    ]
    ssn = session(objs, cap_conf(hierarchy=True))
    assert plugin(ssn).ready
    assert plugin(ssn).queue_opts[QueueID("a")].ancestors == [QueueID("root")]
    assert binds(run(objs, cap_conf(hierarchy=True))) == {"ns1/a-0": "n1"}


def test_hierarchy_sums_children_into_root_and_splits_guarantees() -> None:
    objs = [
        queue("root", deserved={"cpu": "100"}),
        queue("p", parent="root", capability={"cpu": "6"}, deserved={"cpu": "1"}),
        queue("c1", parent="p", guarantee={"resource": {"cpu": "4"}}),
        queue("c2", parent="p", guarantee={"resource": {"cpu": "4"}}, deserved={"cpu": "5"}),
        node("n1", cpu="8"),
    ]
    opts = plugin(session(objs, cap_conf(hierarchy=True))).queue_opts
    assert opts[QueueID("root")].deserved.milli_cpu == 1000  # the children's sum, not its spec
    assert opts[QueueID("c1")].deserved.milli_cpu == 4000  # raised to its guarantee
    assert opts[QueueID("c2")].deserved.milli_cpu == 5000
    # p's real capability 6, siblings guarantee 8 in total: each keeps its own guarantee
    assert opts[QueueID("c1")].real_capability.milli_cpu == 4000


def test_hierarchy_queue_order_leaves_first_then_subtree_share() -> None:
    objs = [
        queue("root"),
        queue("hot", parent="root", deserved={"cpu": "2"}),
        queue("cold", parent="root", deserved={"cpu": "2"}),
        queue("hot-leaf", parent="hot", deserved={"cpu": "1"}),
        queue("cold-leaf", parent="cold", deserved={"cpu": "1"}),
        node("n1", cpu="16"),
        podgroup("h", queue="hot-leaf", phase="Running"),
        pod("h-0", group="h", cpu="2", node_name="n1", phase="Running"),
        podgroup("c", queue="cold-leaf", phase="Running"),
        pod("c-0", group="c", cpu="1", node_name="n1", phase="Running"),
    ]
    ssn = session(objs, cap_conf(hierarchy=True))
    # hot-leaf's own share (2) is above cold-leaf's (1), but subtrees decide: hot 1.0 vs cold 0.5
    assert ssn.queue_order_fn(q(ssn, "cold-leaf"), q(ssn, "hot-leaf"))
    assert ssn.queue_order_fn(q(ssn, "hot-leaf"), q(ssn, "cold"))  # leaves before inner queues
    assert ssn.queue_order_fn(q(ssn, "cold"), q(ssn, "hot"))


def project_tree() -> list[dict[str, Any]]:
    """Volcano's project tree: two projects under root, each a deserved child and a best-effort child."""
    a100 = "nvidia.com/a100"
    return [
        queue("root"),
        queue("p1", parent="root", deserved={a100: "1"}, capability={a100: "2"}),
        queue("p1-fixed", parent="p1", deserved={a100: "1"}, capability={a100: "1"}),
        queue("p1-free", parent="p1"),
        queue("p2", parent="root", deserved={a100: "3"}, capability={a100: "4"}),
        queue("p2-fixed", parent="p2", deserved={a100: "3"}, capability={a100: "3"}),
        queue("p2-free", parent="p2"),
        node("n1", cpu="16", memory="16Gi", resources={a100: "4"}),
    ]


def a100_pod(name: str, group: str, running: bool) -> dict[str, Any]:
    p = gpod(name, group, node_name="n1" if running else "")
    p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/a100"] = "1"
    return p


def test_ancestor_reclaim_level_checks_victim_ancestors_not_shared() -> None:
    objs = project_tree()
    for i in range(4):
        objs += [podgroup(f"v{i}", queue="p2-free", phase="Running"), a100_pod(f"v-{i}", f"v{i}", True)]
    objs += [podgroup("want", queue="p1-free"), a100_pod("w-0", "want", False)]
    victims_in = ["ns1/v-0", "ns1/v-1", "ns1/v-2", "ns1/v-3"]

    ssn = session(objs, cap_conf(hierarchy=True, level=1))
    reclaimer = task(ssn, "ns1/w-0")
    # p1-free has no deserved, but its parent p1 is below its deserved: it may reclaim
    assert ssn.preemptive(q(ssn, "p1-free"), [reclaimer])
    # p2 holds 4 of its deserved 3: exactly one victim may go
    assert len(ssn.reclaimable(reclaimer, [task(ssn, k) for k in victims_in])) == 1

    ssn0 = session(objs, cap_conf(hierarchy=True, level=0))
    reclaimer0 = task(ssn0, "ns1/w-0")
    assert not ssn0.preemptive(q(ssn0, "p1-free"), [reclaimer0])  # leaf-only check
    assert len(ssn0.reclaimable(reclaimer0, [task(ssn0, k) for k in victims_in])) == 4  # immediate victims


def test_ancestor_reclaim_level_blocks_when_victim_parent_within_deserved() -> None:
    objs = project_tree()
    for i in range(3):
        objs += [podgroup(f"v{i}", queue="p2-free", phase="Running"), a100_pod(f"v-{i}", f"v{i}", True)]
    objs += [podgroup("want", queue="p1-free"), a100_pod("w-0", "want", False)]
    ssn = session(objs, cap_conf(hierarchy=True, level=1))
    assert ssn.reclaimable(task(ssn, "ns1/w-0"), [task(ssn, f"ns1/v-{i}") for i in range(3)]) == []


def test_siblings_without_deserved_do_not_reclaim_from_each_other() -> None:
    objs = [
        queue("root"),
        queue("parent", parent="root", deserved={"cpu": "4", "memory": "4Gi"}),
        queue("qa", parent="parent"),
        queue("qb", parent="parent"),
        node("n1", cpu="2", memory="2Gi"),
        podgroup("victim", queue="qb", phase="Running"),
        pod("v-0", group="victim", cpu="2", memory="2Gi", node_name="n1", phase="Running"),
        podgroup("want", queue="qa"),
        pod("w-0", group="want", cpu="2", memory="2Gi"),
    ]
    for level, expect in ((1, 0), (0, 1)):
        ssn = session(objs, cap_conf(hierarchy=True, level=level))
        assert len(ssn.reclaimable(task(ssn, "ns1/w-0"), [task(ssn, "ns1/v-0")])) == expect


def test_victim_queue_order_prefers_queues_closer_to_the_reclaimer() -> None:
    objs = project_tree()
    ssn = session(objs, cap_conf(hierarchy=True, extra="predicates"))
    assert ssn.victim_queue_order_fn(q(ssn, "p2-free"), q(ssn, "p1-free"), q(ssn, "p2-fixed"))
    assert not ssn.victim_queue_order_fn(q(ssn, "p1-free"), q(ssn, "p2-free"), q(ssn, "p2-fixed"))
    # the reverse holds for a reclaimer in p1 (queue order alone would still put p2-free first)
    assert ssn.victim_queue_order_fn(q(ssn, "p1-free"), q(ssn, "p2-free"), q(ssn, "p1-fixed"))


def test_negative_ancestor_reclaim_level_counts_as_zero() -> None:
    ssn = session(project_tree(), cap_conf(hierarchy=True, level=-3))
    assert plugin(ssn).ancestor_reclaim_level == 0


def test_conf_rejects_non_integer_level() -> None:
    from scheduler_ext.actions.registry import ACTIONS
    from scheduler_ext.framework.conf import ConfError, parse_conf
    from scheduler_ext.plugins.registry import PLUGINS

    with pytest.raises(ConfError, match="ancestorReclaimLevel"):
        parse_conf(
            cap_conf(hierarchy=True).replace("}", ", arguments: {ancestorReclaimLevel: deep}}", 1), ACTIONS, PLUGINS
        )


# --- simulations ----------------------------------------------------------------------------------


def test_simulations_work_on_a_copy_and_prepredicate_drops_it() -> None:
    objs = [
        queue("q1", capability={"cpu": "2", "memory": "8Gi"}),
        node("n1", cpu="8"),
        podgroup("run", phase="Running"),
        pod("r-0", group="run", node_name="n1", phase="Running"),
        pod("r-1", group="run", node_name="n1", phase="Running"),
        podgroup("pg"),
        pod("a-0", group="pg"),
    ]
    ssn = session(objs, cap_conf(predicate=True))
    t = task(ssn, "ns1/a-0")
    victim = task(ssn, "ns1/r-0")
    n1 = ssn.nodes["n1"]
    cs = ssn.get_cycle_state(t.uid)
    assert not ssn.simulate_allocatable_fn(cs, q(ssn, "q1"), t)  # 2 of 2 used
    assert ssn.simulate_remove_task_fn(cs, t, victim, n1) is None
    assert ssn.simulate_allocatable_fn(cs, q(ssn, "q1"), t)
    assert plugin(ssn).queue_opts[QueueID("q1")].allocated.milli_cpu == 2000  # session untouched
    assert not ssn.allocatable(q(ssn, "q1"), t)
    assert ssn.pre_predicate_fn(t) is None
    assert not ssn.simulate_allocatable_fn(cs, q(ssn, "q1"), t)  # fresh copy after PrePredicate
    assert ssn.simulate_add_task_fn(cs, t, t, n1) is None


def test_unified_evictable_gang_preempt_permits_all_and_reclaim_checks_deserved() -> None:
    ssn = session(reclaim_objs(), cap_conf())
    victims = [task(ssn, f"ns1/v-{i}") for i in (1, 2, 3)]
    assert len(ssn.unified_evictable(SimpleNamespace(kind="GangPreempt"), victims)) == 3
    assert len(ssn.unified_evictable(SimpleNamespace(kind="GangReclaim"), victims)) == 1


def test_callbacks_survive_jobs_without_queue_attrs() -> None:
    # session opened, then a job appears whose queue the plugin never saw (no crash, just refusal)
    objs = [queue("q1"), node("n1"), podgroup("pg"), pod("a-0", group="pg"), queue("q2")]
    ssn = session(objs, cap_conf())
    t = task(ssn, "ns1/a-0")
    assert not ssn.allocatable(q(ssn, "q2"), t)
    assert not ssn.preemptive(q(ssn, "q2"), [t])
    assert ssn.queue_order_fn(q(ssn, "q1"), q(ssn, "q2")) in (True, False)
    parsed = parse(cap_conf())
    assert parsed.tiers[0].plugins[0].name == "capacity"
