"""The plugins, each through a real session (allocate/enqueue/backfill) on small clusters."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_ext.framework.node_search import _fits
from scheduler_ext.plugins.nodeorder import NodeOrderPlugin
from scheduler_ext.plugins.proportion import ProportionPlugin

from .helpers import node, pod, podgroup, queue, run, session


def binds(ssn) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {b.task.key: b.node for b in ssn.binds}


def conf(*plugins: str, actions: str = "allocate") -> str:
    entries = "".join(f"\n  - name: {p}" for p in plugins)
    return f"actions: {actions}\ntiers:\n- plugins:{entries}\n"


# --- priority / gang / drf ---------------------------------------------------------------------


def test_priority_orders_jobs() -> None:
    objs = [
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 100},
        queue("q1"),
        node("n1", cpu="1"),
        podgroup("a-low"),
        podgroup("z-high", priorityClassName="high"),
        pod("low-0", group="a-low"),
        pod("high-0", group="z-high"),
    ]
    assert binds(run(objs, conf("priority", "predicates"))) == {"ns1/high-0": "n1"}
    assert binds(run(objs, conf("predicates"))) == {"ns1/low-0": "n1"}  # fallback: UID order


def test_gang_all_or_nothing_and_valid() -> None:
    objs = [queue("q1"), node("n1", cpu="2"), podgroup("pg", min_member=3)]
    objs += [pod(f"w-{i}", group="pg") for i in range(3)]
    ssn = run(objs, conf("gang", "predicates"))
    assert binds(ssn) == {}
    cond = ssn.jobs["ns1/pg"].pod_group.conditions  # type: ignore[index]
    assert cond and cond[0]["type"] == "Unschedulable" and "2 Insufficient cpu" not in cond[0]["message"]
    # without gang the two that fit are bound
    assert len(binds(run(objs, conf("predicates")))) == 2
    # a job with fewer valid tasks than minMember is not even tried
    objs2 = [queue("q1"), node("n1", cpu="8"), podgroup("pg", min_member=3), pod("w-0", group="pg")]
    assert binds(run(objs2, conf("gang", "predicates"))) == {}


def test_drf_prefers_smaller_share() -> None:
    objs = [
        queue("q1"),
        node("n1", cpu="4", memory="8Gi"),
        podgroup("big"),
        podgroup("small"),
        pod("big-run", group="big", cpu="2", node_name="n1", phase="Running"),
        pod("big-new", group="big", cpu="2"),
        pod("small-new", group="small", cpu="2"),
    ]
    assert binds(run(objs, conf("drf", "predicates"))) == {"ns1/small-new": "n1"}


# --- proportion ------------------------------------------------------------------------------------


def test_proportion_deserved_by_weight_and_overuse() -> None:
    objs = [
        queue("a", weight=3),
        queue("b", weight=1),
        node("n1", cpu="8", memory="16Gi"),
        podgroup("pa", queue="a"),
        podgroup("pb", queue="b"),
    ]
    objs += [pod(f"pa-x-{i}", group="pa", cpu="1", memory="1Gi") for i in range(8)]
    objs += [pod(f"pb-x-{i}", group="pb", cpu="1", memory="1Gi") for i in range(8)]
    ssn = session(objs, conf("proportion", "predicates"))
    plugin = ssn.plugins["proportion"]
    assert isinstance(plugin, ProportionPlugin)
    deserved = {q: a.deserved.milli_cpu for q, a in plugin.queue_opts.items()}
    assert deserved == {"a": 6000, "b": 2000}
    ssn = run(objs, conf("proportion", "predicates"))
    placed = binds(ssn)
    assert sum(k.startswith("ns1/pa") for k in placed) == 6
    assert sum(k.startswith("ns1/pb") for k in placed) == 2


def test_proportion_capability_blocks_enqueue_and_closed_queue() -> None:
    objs = [
        queue("q1", capability={"cpu": "2", "memory": "2Gi"}),
        queue("q2", state="Closed"),
        node("n1", cpu="8", memory="16Gi"),
        podgroup("big", queue="q1", phase="Pending", minResources={"cpu": "4"}),
        podgroup("ok", queue="q1", phase="Pending", minResources={"cpu": "1"}),
        podgroup("closed", queue="q2", phase="Pending"),
        pod("big-0", group="big", cpu="4"),
        pod("ok-0", group="ok", cpu="1"),
        pod("closed-0", group="closed", cpu="1"),
    ]
    ssn = run(objs, conf("proportion", "predicates", actions='"enqueue, allocate"'))
    phases = {j.uid: j.pod_group.phase for j in ssn.jobs.values()}
    assert phases["ns1/big"] == "Pending"
    assert binds(ssn) == {"ns1/ok-0": "n1"}


def test_overcommit_factor() -> None:
    objs = [
        queue("q1"),
        node("n1", cpu="10", memory="100Gi"),
        podgroup("a", phase="Pending", minResources={"cpu": "11"}),
        podgroup("b", phase="Pending", minResources={"cpu": "2"}),
    ]
    c = conf("overcommit", actions="enqueue")
    ssn = run(objs, c)
    assert ssn.jobs["ns1/a"].pod_group.phase == "Inqueue"  # type: ignore[index]  # 11 <= 12
    assert ssn.jobs["ns1/b"].pod_group.phase == "Pending"  # type: ignore[index]  # 13 > 12
    ssn = run(objs, c.replace("name: overcommit", "name: overcommit\n    arguments: {overcommit-factor: 1.5}"))
    assert ssn.jobs["ns1/b"].pod_group.phase == "Inqueue"  # type: ignore[index]


# --- predicates -------------------------------------------------------------------------------------


def test_predicates_filters_and_reasons() -> None:
    objs = [
        queue("q1"),
        node("sel", labels={"role": "db"}),
        node("tainted", labels={"role": "web"}, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        node("cordoned", labels={"role": "web"}, unschedulable=True),
        node("full", labels={"role": "web"}, pods="1"),
        pod("x", group=None, node_name="full", phase="Running", scheduler="default-scheduler"),
        podgroup("pg"),
        pod("p-0", group="pg", spec={"nodeSelector": {"role": "web"}}),
    ]
    ssn = run(objs, conf("predicates"))
    assert binds(ssn) == {}
    fe = ssn.jobs["ns1/pg"].nodes_fit_errors["ns1-p-0"]  # type: ignore[index]
    assert fe.error() == (
        # the full node fails allocate's own resource fit first (a pod counts as 1 of `pods`)
        "0/4 nodes are unavailable: 1 Insufficient pods, 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {k: v}, 1 node(s) were unschedulable."
    )
    tolerating = dict(objs[-1])
    tolerating["spec"] = dict(tolerating["spec"], tolerations=[{"key": "k", "operator": "Exists"}])
    assert binds(run([*objs[:-1], tolerating], conf("predicates"))) == {"ns1/p-0": "tainted"}


def test_predicates_per_node_form_reports_the_failure() -> None:
    """The per-node predicate (used by preempt on a nominated node) returns the reason, never raises."""
    objs = [
        queue("q1"),
        node("sel", labels={"role": "db"}),
        node("cordoned", labels={"role": "web"}, unschedulable=True),
        podgroup("pg"),
        pod("p-0", group="pg", spec={"nodeSelector": {"role": "web"}}),
    ]
    ssn = session(objs, conf("predicates", actions="enqueue"))
    task = next(iter(ssn.jobs["ns1/pg"].tasks.values()))  # type: ignore[index]
    err = ssn.predicate_fn(task, ssn.nodes["sel"])
    assert err is not None and any("node affinity/selector" in r for r in err.reasons())
    assert ssn.predicate_fn(task, ssn.nodes["cordoned"]) is not None


def test_predicates_host_ports_and_anti_affinity() -> None:
    port_spec = {
        "containers": [
            {"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}], "resources": {"requests": {"cpu": "1"}}}
        ]
    }
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    objs = [
        queue("q1"),
        node("n1", labels={"kubernetes.io/hostname": "n1"}),
        node("n2", labels={"kubernetes.io/hostname": "n2"}),
        podgroup("pg"),
        pod("old", group="pg", node_name="n1", phase="Running", spec=port_spec, labels={"app": "a"}),
        pod("ported", group="pg", spec=port_spec),
        pod("anti", group="pg", labels={"app": "b"}, spec={"affinity": anti}),
    ]
    placed = binds(run(objs, conf("predicates")))
    assert placed == {"ns1/ported": "n2", "ns1/anti": "n2"}


def test_predicates_existing_pod_anti_affinity_rejects_newcomer() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    objs = [
        queue("q1"),
        node("n1", labels={"kubernetes.io/hostname": "n1"}),
        node("n2", labels={"kubernetes.io/hostname": "n2"}, cpu="2"),
        podgroup("pg"),
        pod("guard", group="pg", node_name="n1", phase="Running", spec={"affinity": anti}),
        pod("new", group="pg", labels={"app": "x"}),
    ]
    assert binds(run(objs, conf("predicates", "nodeorder"))) == {"ns1/new": "n2"}


# --- nodeorder / binpack ------------------------------------------------------------------------------


def test_least_and_most_requested() -> None:
    objs = [
        queue("q1"),
        node("busy", cpu="4", memory="8Gi"),
        node("idle", cpu="4", memory="8Gi"),
        podgroup("pg"),
        pod("r", group="pg", cpu="2", memory="4Gi", node_name="busy", phase="Running"),
        pod("new", group="pg", cpu="1", memory="1Gi"),
    ]
    assert binds(run(objs, conf("predicates", "nodeorder"))) == {"ns1/new": "idle"}
    most = conf("predicates", "nodeorder").replace(
        "name: nodeorder", "name: nodeorder\n    arguments: {leastrequested.weight: 0, mostrequested.weight: 1}"
    )
    assert binds(run(objs, most)) == {"ns1/new": "busy"}
    assert binds(run(objs, conf("predicates", "binpack"))) == {"ns1/new": "busy"}


def test_node_affinity_and_taint_preferences() -> None:
    pref = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                }
            ]
        }
    }
    objs = [
        queue("q1"),
        node("a", labels={"disk": "hdd"}),
        node("b", labels={"disk": "ssd"}, taints=[{"key": "t", "effect": "PreferNoSchedule"}]),
        podgroup("pg"),
        pod("p", group="pg", spec={"affinity": pref}),
    ]
    only_aff = conf("nodeorder").replace(
        "name: nodeorder", "name: nodeorder\n    arguments: {tainttoleration.weight: 0}"
    )
    assert binds(run(objs, only_aff)) == {"ns1/p": "b"}
    only_taint = conf("nodeorder").replace(
        "name: nodeorder", "name: nodeorder\n    arguments: {nodeaffinity.weight: 0}"
    )
    assert binds(run(objs, only_taint)) == {"ns1/p": "a"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_resource_scores_python_and_numpy_paths_agree(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = [
        node(
            f"n{i}",
            cpu=str(int(rng.integers(1, 64))),
            memory=f"{int(rng.integers(1, 256))}Gi",
            resources={"nvidia.com/gpu": str(int(rng.integers(0, 8)))},
        )
        for i in range(40)
    ]
    running = [
        pod(
            f"r-{i}",
            group="pg",
            cpu=f"{int(rng.integers(0, 4000))}m",
            memory=f"{int(rng.integers(0, 8))}Gi",
            node_name=f"n{int(rng.integers(0, 40))}",
            phase="Running",
        )
        for i in range(60)
    ]
    new = pod("new", group="pg", cpu="700m", memory="1500Mi")
    new["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    ssn = session([queue("q1"), podgroup("pg"), *nodes, *running, new], conf("nodeorder", "binpack"))
    plugin = ssn.plugins["nodeorder"]
    assert isinstance(plugin, NodeOrderPlugin)
    plugin.weights = {k: 1 for k in plugin.weights}
    task = ssn.jobs["ns1/pg"].tasks["ns1-new"]  # type: ignore[index]
    idx = ssn.all_nodes
    vec = plugin.resource_score(ssn, task, idx)
    one = np.array([plugin.resource_score_one(ssn, task, int(i)) for i in idx])
    assert np.array_equal(vec, one)
    ((bp_fn, _),) = ssn.vector_node_order_fns["binpack"]
    assert np.allclose(bp_fn(task, idx), np.concatenate([bp_fn(task, idx[i : i + 1]) for i in range(len(idx))]))


def test_node_local_cache_tracks_changes() -> None:
    objs = [queue("q1"), podgroup("pg", min_member=1)]
    objs += [node(f"n{i}", cpu="2") for i in range(20)]
    objs += [pod(f"p-x-{i}", group="pg", cpu="1") for i in range(30)]
    ssn = run(objs, conf("predicates", "nodeorder"))
    assert len(ssn.binds) == 30
    task_nodes = [b.node for b in ssn.binds]
    assert max(task_nodes.count(n) for n in set(task_nodes)) == 2  # never over a node's 2 cpus
    some = next(iter(ssn.jobs["ns1/pg"].tasks.values()))  # type: ignore[index]
    fresh = _fits(some, ssn.table.future_idle)
    key = ("fit", "future", some.cache["shape.resources"])
    cached = ssn.node_cache.get(key, lambda i: _fits(some, ssn.table.future_idle[i]))
    assert np.array_equal(fresh, cached)


def test_backfill_places_best_effort_and_respects_pod_count() -> None:
    objs = [queue("q1"), node("n1", pods="2"), podgroup("pg", min_member=1)]
    objs += [pod(f"be-{i}", group="pg", cpu=None, memory=None) for i in range(3)]
    ssn = run(objs, conf("predicates", actions='"allocate, backfill"'))
    assert len(binds(ssn)) == 2


def test_hierarchical_drf_orders_queues_by_weighted_share() -> None:
    def hq(name: str, path: str, weights: str) -> dict:  # type: ignore[type-arg]
        q = queue(name)
        q["metadata"]["annotations"] = {"volcano.sh/hierarchy": path, "volcano.sh/hierarchy-weights": weights}
        return q

    objs = [
        hq("a", "root/a", "1/1"),
        hq("b", "root/b", "1/3"),
        node("n1", cpu="10", memory="100Gi"),
        podgroup("ra", queue="a"),
        podgroup("rb", queue="b"),
        pod("ra-0", group="ra", cpu="2", memory="1Gi", node_name="n1", phase="Running"),
        pod("rb-0", group="rb", cpu="2", memory="1Gi", node_name="n1", phase="Running"),
        pod("ra-1", group="ra", cpu="2", memory="1Gi"),
        pod("rb-1", group="rb", cpu="2", memory="1Gi"),
    ]
    text = "actions: allocate\ntiers:\n- plugins:\n  - name: drf\n    enableHierarchy: true\n  - name: predicates\n"
    ssn = session(objs, text)
    qa, qb = ssn.queues["a"], ssn.queues["b"]  # type: ignore[index]
    assert ssn.queue_order_fn(qb, qa) and not ssn.queue_order_fn(qa, qb)
    flat = session(objs, text.replace("enableHierarchy: true", "enableHierarchy: false"))
    assert "drf" not in flat.queue_order_fns


@pytest.mark.parametrize("node_local", [False, True])
def test_fit_headroom_extends_the_resource_fit(node_local: bool) -> None:
    from scheduler_ext.actions.allocate import AllocateAction
    from scheduler_ext.framework.session import close_session

    objs = [queue("q1"), podgroup("pg", min_member=1)]
    objs += [node("a", cpu="2"), node("b", cpu="2")]
    objs += [pod(f"p-x-{i}", group="pg", cpu="1") for i in range(6)]
    ssn = session(objs, conf("predicates", "nodeorder"))
    extra = np.zeros((ssn.table.n, len(ssn.table.dims)))
    extra[ssn.nodes["b"].index, 0] = 2000.0  # b may take 2 more cpus
    ssn.add_fit_headroom_fn(
        "test", lambda _t, idx: extra if idx is ssn.all_nodes else extra[idx], node_local=node_local
    )
    ssn.tiers = (*ssn.tiers, type(ssn.tiers[0])((type(ssn.tiers[0].plugins[0])(name="test"),)))
    ssn._ordered_cache.clear()
    AllocateAction().execute(ssn)
    close_session(ssn)
    placed = [b.node for b in ssn.binds]
    assert placed.count("a") == 2 and placed.count("b") == 4
