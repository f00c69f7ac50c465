"""A session never sees what an earlier session did to its model: the live cache reuses derivations of
unchanged objects across sessions (SnapshotMemo) and the unchanged part of the model itself
(scheduler_ext/model/incremental.py, scheduler_ext/api/guard.py), so a first session that binds, evicts,
changes PodGroups and scribbles on any mutable part of its model must leave the next snapshot equal to a build from
scratch of the same objects. Each mutation path the actions and plugins use is tried on its own
(test_each_mutation_is_seen), and the comparison covers every slot of every model object, so a
change the tracking missed fails the test (test_the_comparison_sees_an_untracked_change)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np
import pytest

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.guard import Tracker
from scheduler_ext.api.job import JobInfo, PodGroup
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.resource import Resource
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import ALLOCATED, PENDING, PIPELINED, RELEASING, RUNNING, FitErrors
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.framework.session import close_session, open_session
from scheduler_ext.model import incremental
from scheduler_ext.model.snapshot import build_cluster
from scheduler_ext.plugins.registry import PLUGINS

from .helpers import conf, node, pod, podgroup, queue

NOW = 1_700_000_000.0
CONF = """
actions: "allocate, backfill"
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
"""


def _objects() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [queue("q1")]
    for i in range(3):
        n = node(f"n{i}", cpu="4", memory="8Gi", resources={"nvidia.com/gpu": "1"} if i == 0 else {})
        n["spec"] = {"taints": [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]}
        objs.append(n)
    gang = podgroup("gang", min_member=2, minResources={"cpu": "2", "memory": "2Gi"}, minTaskMember={"w": 2})
    gang["metadata"]["creationTimestamp"] = "2023-11-14T22:00:00Z"  # (kept by the memo: a fixed creation)
    objs.append(gang)
    for i in range(2):
        objs.append(pod(f"g{i}", group="gang", cpu="1", memory="1Gi",
                        annotations={"volcano.sh/task-spec": "w", "scheduling.volcano.sh/queue-name": "q1"}))
    # implicit PodGroups: running pods (one to be evicted) and pending ones
    for i in range(2):
        objs.append(pod(f"run{i}", cpu="1", memory="1Gi", node_name=f"n{i}", phase="Running",
                        annotations={"scheduling.volcano.sh/queue-name": "q1"}))
    for i in range(3):
        objs.append(pod(f"p{i}", cpu="500m", memory="512Mi", annotations={"scheduling.volcano.sh/queue-name": "q1"}))
    # a placed pod with anti-affinity (the table's affinity view) and another scheduler's placed pod
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    objs.append(pod("aff", cpu="100m", memory="64Mi", node_name="n2", phase="Running", labels={"app": "x"},
                    spec={"affinity": anti}, annotations={"scheduling.volcano.sh/queue-name": "q1"}))
    objs.append(pod("other", cpu="100m", memory="64Mi", node_name="n1", phase="Running", scheduler="default-scheduler"))
    for o in objs:
        o["metadata"]["resourceVersion"] = "1"
        if o["kind"] == "Pod":  # (without one a live pod's creation is the time it was first parsed)
            o["metadata"]["creationTimestamp"] = "2023-11-14T21:00:00Z"
    return objs


def _live(objects: list[dict[str, Any]]) -> LiveCache:
    cache = LiveCache(None, scheduler_name="volcano")
    stores = {"Node": "nodes", "PodGroup": "podgroups", "Queue": "queues"}
    for o in objects:
        if o["kind"] == "Pod":
            cache.watch.on_pod("ADDED", None, o)
        else:
            cache.reflectors[stores[o["kind"]]].store.put(o)
    return cache


def _state(c: ClusterInfo) -> dict[str, Any]:
    """Everything a session reads, as plain values."""
    t = c.table
    return {
        "dims": t.dims,
        "rows": {a: getattr(t, a).tolist() for a in ("allocatable", "capacity", "idle", "used", "releasing",
                                                      "pipelined", "future_idle", "kube_requested",
                                                      "kube_nonzero", "pod_count", "max_pods")},
        "nodes": [(n.name, sorted(n.tasks), [dict(x) for x in n.taints], n.unschedulable, dict(n.labels),
                   n.oversubscription_node, str(n.oversubscription_resource), n.state) for n in c.node_list],
        "jobs": {
            jid: (sorted((u, x.status, x.node_name, str(x.resreq), str(x.init_resreq), sorted(x.cache))
                         for u, x in j.tasks.items()),
                  {s: sorted(ix) for s, ix in j.task_status_index.items()},
                  str(j.total_request), str(j.allocated), j.min_available, dict(j.task_min_available), j.priority,
                  j.pod_group.phase, str(j.pod_group.min_resources), j.pod_group.conditions, j.pod_group.events,
                  dict(j.pod_group.min_task_member), sorted(j.nodes_fit_errors), j.job_fit_errors)
            for jid, j in c.jobs.items()
        },
        "queues": sorted(c.queues),
    }


def _scribble(c: ClusterInfo) -> None:
    """What no session should do, done anyway: every mutable part of the model changed in place."""
    for n in c.node_list:
        n.taints.append({"key": "scribbled", "effect": "NoSchedule"})
        n.unschedulable = True
    for j in c.jobs.values():
        j.pod_group.phase = "Scribbled"
        j.pod_group.min_task_member["w"] = 99
        if j.pod_group.min_resources is not None:
            j.pod_group.min_resources.milli_cpu += 12345
        j.pod_group.conditions.append({"type": "Scribbled"})
        j.min_available = 77
        for task in j.tasks.values():
            task.resreq.milli_cpu += 1
            task.init_resreq.memory += 1
            task.cache["scribbled"] = True


def test_a_second_session_sees_only_the_fresh_snapshot() -> None:
    objects = _objects()
    cache = _live(objects)
    fresh = _state(build_cluster(objects, now=NOW))

    first = cache.snapshot(NOW).cluster
    assert _state(first) == fresh
    c = conf(CONF)
    ssn = open_session(first, c, PLUGINS)
    for name in c.actions:
        ACTIONS[name].build().execute(ssn)
    assert ssn.binds  # the first session binds ...
    victim = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.status == RUNNING)
    ssn.evict(victim, "test")  # ... and evicts
    assert victim.status == RELEASING
    close_session(ssn)
    _scribble(first)
    assert _state(first) != fresh

    # nothing changed in the stores and nothing was assumed: the next session starts from the objects
    second = cache.snapshot(NOW).cluster
    assert _state(second) == fresh
    # and a third one after scribbling on the second
    _scribble(second)
    assert _state(cache.snapshot(NOW).cluster) == fresh
    assert np.array_equal(cache.snapshot(NOW).cluster.table.idle, build_cluster(objects, now=NOW).table.idle)


def _norm(v: Any) -> Any:
    """A plain, comparable value of a model attribute (model objects by identity key, not by content)."""
    if isinstance(v, TaskInfo):
        return ("task", v.uid)
    if isinstance(v, NodeInfo):
        return ("node", v.name)
    if isinstance(v, Resource):
        return ("res", str(v), v.max_task_num)
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, Mapping):  # (in order: the order of the model's dicts is part of what a session sees)
        return [(str(k), _norm(x)) for k, x in v.items()]
    if isinstance(v, list | tuple):
        return [_norm(x) for x in v]
    if isinstance(v, FitErrors):
        return ("fit", v.error())
    return v


def _slots(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    names = [n for c in type(obj).__mro__ for n in getattr(c, "__slots__", ())]
    return {n: _norm(getattr(obj, n, None)) for n in names if n not in skip}


def _full_state(c: ClusterInfo) -> dict[str, Any]:
    """Every slot of every task, job, PodGroup and node, and the whole table (what _state reads and more)."""
    t = c.table
    tasks = {x.uid: x for j in c.jobs.values() for x in j.tasks.values()} | {x.uid: x for x in c.foreign_tasks}
    return {
        "table": {k: _norm(v) for k, v in vars(t).items() if k not in ("generation", "change_log")}
        if hasattr(t, "__dict__") else None,
        "tasks": sorted((u, _slots(x, ("pod",))) for u, x in tasks.items()),
        "jobs": [(jid, _slots(j, ("pod_group",)), _slots(j.pod_group)) for jid, j in c.jobs.items()],
        "nodes": [_slots(n, ("table", "node")) for n in c.node_list],
        "node_names": list(c.nodes),
        "queues": [(q, _slots(x, ("obj",))) for q, x in c.queues.items()],
        "foreign": [x.uid for x in c.foreign_tasks],
        "rest": (c.priority_classes, c.default_priority, c.pdbs, c.not_ready_nodes, c.warnings, c.now),
    }


def _task(c: ClusterInfo, name: str) -> TaskInfo:
    return next(t for j in c.jobs.values() for t in j.tasks.values() if t.name == name)


def _job(c: ClusterInfo, name: str) -> JobInfo:
    return next(j for j in c.jobs.values() for t in j.tasks.values() if t.name == name)


def _pg(c: ClusterInfo, name: str) -> PodGroup:
    return _job(c, name).pod_group


#: what actions, plugins and the session do to the model (and a few things they must not, done anyway)
MUTATIONS: dict[str, Callable[[ClusterInfo], None]] = {
    "job.update_task_status": lambda c: _job(c, "p0").update_task_status(_task(c, "p0"), ALLOCATED),
    "task.status": lambda c: setattr(_task(c, "p1"), "status", PIPELINED),
    "task.node_name": lambda c: setattr(_task(c, "p1"), "node_name", "n2"),
    "task.eviction_occurred": lambda c: setattr(_task(c, "g0"), "eviction_occurred", True),
    "task.generate_last_tx_context": lambda c: _task(c, "g0").generate_last_tx_context(),
    "task.priority": lambda c: setattr(_task(c, "g1"), "priority", 99),
    "task.cache": lambda c: _task(c, "p2").cache.__setitem__("predicates.shape", b"x"),
    "task.cache replaced": lambda c: setattr(_task(c, "p2"), "cache", {"x": 1}),
    "task.resreq in place": lambda c: _task(c, "p2").resreq.add(Resource(1000.0)),
    "task.init_resreq field": lambda c: setattr(_task(c, "p2").init_resreq, "memory", 1.0),
    "node.add_task": lambda c: c.nodes["n2"].add_task(_task(c, "p0")),
    "node.remove_task": lambda c: c.nodes["n0"].remove_task(_task(c, "run0")),
    "node.update_task": lambda c: (setattr(_task(c, "run1"), "status", RELEASING),
                                   c.nodes["n1"].update_task(_task(c, "run1"))),
    "node.taints": lambda c: c.nodes["n0"].taints.append({"key": "x", "effect": "NoSchedule"}),
    "node.unschedulable": lambda c: setattr(c.nodes["n1"], "unschedulable", True),
    "node.state": lambda c: setattr(c.nodes["n2"], "state", "NotReady"),
    "node.oversubscription_resource": lambda c: c.nodes["n2"].oversubscription_resource.add(Resource(5.0)),
    "table.kube_add": lambda c: c.table.kube_add(2, _task(c, "p0")),
    "table.kube_remove": lambda c: c.table.kube_remove(2, _task(c, "aff")),
    "table.idle direct write": lambda c: c.table.idle.__setitem__((1, 0), 1.0),
    "table.pipelined direct write": lambda c: c.table.pipelined.__setitem__((0, 1), 5.0),
    "table.kube_pods dict": lambda c: c.table.kube_pods[0].clear(),
    "table.affinity_pods": lambda c: c.table.affinity_pods.clear(),
    "pod_group.phase": lambda c: setattr(_pg(c, "g0"), "phase", "Running"),
    "implicit pod_group.phase": lambda c: setattr(_pg(c, "p0"), "phase", "Inqueue"),
    "pod_group.conditions": lambda c: _pg(c, "g0").conditions.append({"type": "Scheduled", "status": "True"}),
    "pod_group.events": lambda c: _pg(c, "p1").events.append(("Normal", "x", "y")),
    "pod_group.min_task_member": lambda c: _pg(c, "g0").min_task_member.__setitem__("w", 99),
    "pod_group.min_resources": lambda c: _pg(c, "g0").min_resources.add(Resource(1.0)),  # type: ignore[union-attr]
    "job.nodes_fit_errors": lambda c: _job(c, "p1").nodes_fit_errors.__setitem__(_task(c, "p1").uid, FitErrors()),
    "job.job_fit_errors": lambda c: setattr(_job(c, "g0"), "job_fit_errors", "no"),
    "job.reset_fit_err": lambda c: (_job(c, "g0").reset_fit_err(),  # (a new dict: written after, untracked)
                                    _job(c, "g0").nodes_fit_errors.__setitem__(_task(c, "g0").uid, FitErrors())),
    "job.min_available": lambda c: setattr(_job(c, "g0"), "min_available", 77),
    "job.priority": lambda c: setattr(_job(c, "g0"), "priority", 5),
    "job.allocated": lambda c: _job(c, "g0").allocated.add(Resource(1.0)),
    "job.tasks": lambda c: _job(c, "g0").tasks.clear(),
    "job.task_status_index": lambda c: _job(c, "g0").task_status_index[PENDING].clear(),
    "job.delete_task_info": lambda c: _job(c, "p2").delete_task_info(_task(c, "p2")),
    "queue.weight": lambda c: setattr(c.queues[next(iter(c.queues))], "weight", 0),
    "cluster.jobs": lambda c: c.jobs.clear(),
    "cluster.nodes": lambda c: (c.nodes.clear(), c.node_list.clear()),
}


def _first(objects: list[dict[str, Any]]) -> tuple[LiveCache, dict[str, Any]]:
    cache = _live(objects)
    fresh = _full_state(build_cluster(objects, now=NOW))
    cache.snapshot(NOW)  # the full build the model comes from
    return cache, fresh


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_mutation_is_seen(name: str) -> None:
    objects = _objects()
    cache, fresh = _first(objects)
    snap = cache.snapshot(NOW)
    assert snap.stats.incremental  # the reused model is what is under test
    assert _full_state(snap.cluster) == fresh
    MUTATIONS[name](snap.cluster)
    assert _full_state(snap.cluster) != fresh  # (the mutation changed the model: the check below can fail)
    again = cache.snapshot(NOW)
    assert _full_state(again.cluster) == fresh
    assert _state(again.cluster) == _state(build_cluster(objects, now=NOW))
    # and once more: nothing left over from the rebuild
    assert _full_state(cache.snapshot(NOW).cluster) == fresh


def test_a_whole_session_and_changed_pods_then_equal_a_fresh_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions with the shipped-like conf bind, evict and write conditions; pods change between them
    (a new version, an assumed bind); each next snapshot is incremental and equals a fresh build."""
    monkeypatch.setattr(incremental, "FULL_BUILD_SHARE", 2.0)  # (a session here touches most of this model)
    objects = _objects()
    cache, _ = _first(objects)
    c = conf(CONF)
    for rnd in range(3):
        snap = cache.snapshot(NOW + rnd)
        assert snap.stats.incremental
        ssn = open_session(snap.cluster, c, PLUGINS)
        for name in c.actions:
            ACTIONS[name].build().execute(ssn)
        close_session(ssn)
        if ssn.binds:
            cache.decisions.assume_bound(ssn.binds[0].task.uid, ssn.binds[0].node)
        p = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == f"p{rnd}")
        new = {**p, "metadata": {**p["metadata"], "resourceVersion": str(2 + rnd), "labels": {"r": str(rnd)}}}
        cache.watch.on_pod("MODIFIED", p, new)
        objects[objects.index(p)] = new
        binds, _evictions = cache.decisions.assumed()
        snap = cache.snapshot(NOW + rnd)
        assert snap.stats.incremental
        expect = _live(objects)
        for uid, node_name in binds.items():
            expect.decisions.assume_bound(uid, node_name)
        assert _full_state(snap.cluster) == _full_state(expect.snapshot(NOW + rnd).cluster)


def test_a_frozen_resource_refuses_a_direct_item_write() -> None:
    """Its scalar map is read-only in the reused model (Resource methods record the change instead)."""
    cache, _ = _first(_objects())
    task = _task(cache.snapshot(NOW).cluster, "p2")
    with pytest.raises(TypeError):
        task.resreq.scalar_resources["pods"] = 9.0  # type: ignore[index]
    assert task.resreq.clone().scalar_resources == {"pods": 1.0}


def test_the_comparison_sees_an_untracked_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the recording switched off, a session's change leaks into the next snapshot: the checks above
    would fail, so they are not vacuous."""
    objects = _objects()
    cache, fresh = _first(objects)
    snap = cache.snapshot(NOW)
    monkeypatch.setattr(Tracker, "touch", lambda self, obj: None)
    _task(snap.cluster, "p0").priority = 99
    assert _full_state(cache.snapshot(NOW).cluster) != fresh


def _versioned(o: dict[str, Any], rv: str = "1") -> dict[str, Any]:
    o["metadata"].update(resourceVersion=rv, creationTimestamp="2023-11-14T21:00:00Z")
    return o


def test_pods_added_and_removed_are_incremental(monkeypatch: pytest.MonkeyPatch) -> None:
    """New pods (a new implicit job, one joining a gang, one joining an implicit job first by name, a placed
    one, another scheduler's placed one) and deleted ones (an implicit job's only pod, a gang member, a
    running pod): each next snapshot is incremental and equals a fresh build of the same objects, in order."""
    monkeypatch.setattr(incremental, "FULL_BUILD_SHARE", 2.0)  # (a few pods are a large share of this model)
    objects = _objects()
    cache, _ = _first(objects)
    q1 = {"scheduling.volcano.sh/queue-name": "q1"}
    owned = {"ownerReferences": [{"controller": True, "uid": "rs-1", "kind": "ReplicaSet", "name": "rs"}]}
    new_pods = [
        _versioned(pod("new-a", cpu="100m", memory="64Mi", annotations=q1)),
        _versioned(pod("g2", group="gang", cpu="1", memory="1Gi",
                       annotations={"volcano.sh/task-spec": "w", **q1})),
        _versioned(pod("rs-b", cpu="100m", memory="64Mi", annotations=q1, metadata=owned)),
        _versioned(pod("rs-a", cpu="200m", memory="64Mi", annotations=q1, metadata=owned)),
        _versioned(pod("placed", cpu="100m", memory="64Mi", node_name="n0", phase="Running", annotations=q1)),
        _versioned(pod("other2", cpu="100m", memory="64Mi", node_name="n2", phase="Running",
                       scheduler="default-scheduler")),
        _versioned(pod("other-pending", cpu="100m", memory="64Mi", scheduler="default-scheduler")),
    ]

    def check() -> None:
        snap = cache.snapshot(NOW)
        assert snap.stats.incremental
        assert _full_state(snap.cluster) == _full_state(build_cluster(objects, now=NOW))

    for p in new_pods:
        cache.watch.on_pod("ADDED", None, p)
        objects.append(p)
        check()
    for name in ("new-a", "g1", "run0", "rs-a", "other2", "p1"):
        gone = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == name)
        cache.watch.on_pod("DELETED", gone, None)
        objects.remove(gone)
        check()
    # several at once, with a session in between
    c = conf(CONF)
    ssn = open_session(cache.snapshot(NOW).cluster, c, PLUGINS)
    for name in c.actions:
        ACTIONS[name].build().execute(ssn)
    close_session(ssn)
    for p in new_pods[:1]:
        cache.watch.on_pod("ADDED", None, p)
        objects.append(p)
    gone = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "p0")
    cache.watch.on_pod("DELETED", gone, None)
    objects.remove(gone)
    check()


def test_what_the_incremental_path_does_not_handle_is_built_from_scratch() -> None:
    """A Node turning NotReady, a pod needing a new table dimension: a full build (equal to a fresh one);
    then incremental again. A Node's new labels, taints or allocatable are re-read in place."""
    objects = _objects()
    cache, _ = _first(objects)
    n0 = next(o for o in objects if o["kind"] == "Node")
    n0_new = {**n0, "metadata": {**n0["metadata"], "resourceVersion": "2", "labels": {"zone": "b"}},
              "spec": {"taints": []}, "status": {**n0["status"], "allocatable": {"cpu": "3", "memory": "8Gi",
                                                                                   "pods": "110",
                                                                                   "nvidia.com/gpu": "1"}}}
    n1 = next(o for o in objects if o["kind"] == "Node" and o["metadata"]["name"] == "n1")
    n1_down = {**n1, "metadata": {**n1["metadata"], "resourceVersion": "2"},
               "status": {**n1["status"], "conditions": [{"type": "Ready", "status": "False"}]}}
    fpga = _versioned(pod("fpga", cpu="100m", memory="64Mi", annotations={"scheduling.volcano.sh/queue-name": "q1"}))
    fpga["spec"]["containers"][0]["resources"]["requests"]["example.com/fpga"] = "1"
    steps: list[tuple[bool, Callable[[], None]]] = [
        (True, lambda: (cache.reflectors["nodes"].store.put(n0_new), objects.__setitem__(objects.index(n0), n0_new))),
        (False, lambda: (cache.reflectors["nodes"].store.put(n1_down),
                         objects.__setitem__(objects.index(n1), n1_down))),
        (False, lambda: (cache.watch.on_pod("ADDED", None, fpga), objects.append(fpga))),
    ]
    for incremental_expected, step in steps:
        step()
        snap = cache.snapshot(NOW)
        assert snap.stats.incremental == incremental_expected
        assert _full_state(snap.cluster) == _full_state(build_cluster(objects, now=NOW))
        again = cache.snapshot(NOW)
        assert again.stats.incremental
        assert _full_state(again.cluster) == _full_state(build_cluster(objects, now=NOW))


@pytest.mark.parametrize("seed", range(6))
def test_random_changes_and_sessions_equal_a_fresh_build(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random pod arrivals, deletions, new versions, binds seen by the watch, assumed binds and sessions:
    after each, the snapshot equals a fresh build of the same objects (and most are incremental)."""
    import random

    monkeypatch.setattr(incremental, "FULL_BUILD_SHARE", 2.0)
    rng = random.Random(seed)
    objects = _objects()
    cache, _ = _first(objects)
    c = conf(CONF)
    q1 = {"scheduling.volcano.sh/queue-name": "q1"}
    incremental_snaps = 0
    for step in range(40):
        pods = [o for o in objects if o["kind"] == "Pod"]
        op = rng.choice(("add", "add", "delete", "label", "bind", "session", "assume", "pg", "pg-delete", "node"))
        if op == "node":  # the agent's annotations, a label, a taint, allocatable
            n = rng.choice([o for o in objects if o["kind"] == "Node"])
            what = rng.choice(("annotations", "labels", "taints", "allocatable"))
            new_n = {**n, "metadata": {**n["metadata"], "resourceVersion": str(100 + step)}}
            if what in ("annotations", "labels"):
                new_n["metadata"][what] = {"x": str(step)}
            elif what == "taints":
                new_n["spec"] = {"taints": [{"key": "t", "value": str(step), "effect": "PreferNoSchedule"}]}
            else:
                alloc = dict(n["status"]["allocatable"])
                alloc["cpu"] = str(rng.randint(1, 8))
                new_n["status"] = {**n["status"], "allocatable": alloc}
            cache.reflectors["nodes"].store.put(new_n)
            objects[objects.index(n)] = new_n
        elif op == "pg":  # a new PodGroup, with a pod in it or not (yet)
            pg = podgroup(f"pg{step}", min_member=rng.randint(0, 2))
            if rng.random() < 0.5:
                pg["metadata"]["creationTimestamp"] = "2023-11-14T22:30:00Z"
            pg["metadata"]["resourceVersion"] = "1"
            cache.reflectors["podgroups"].store.put(pg)
            objects.append(pg)
            if rng.random() < 0.7:
                p = _versioned(pod(f"in-pg{step}", group=f"pg{step}", cpu="100m", memory="64Mi", annotations=q1))
                cache.watch.on_pod("ADDED", None, p)
                objects.append(p)
        elif op == "pg-delete":  # a PodGroup without pods
            groups = {(o["metadata"].get("annotations") or {}).get("scheduling.k8s.io/group-name") for o in pods}
            empty = [o for o in objects if o["kind"] == "PodGroup" and o["metadata"]["name"] not in groups]
            if empty:
                gone = rng.choice(empty)
                cache.reflectors["podgroups"].store.delete(gone)
                objects.remove(gone)
        elif op == "add":
            kind = rng.choice(("implicit", "gang", "placed", "owned"))
            extra: dict[str, Any] = {"annotations": dict(q1)}
            if kind == "gang":
                extra = {"group": "gang", "annotations": {"volcano.sh/task-spec": "w", **q1}}
            elif kind == "placed":
                extra["node_name"] = rng.choice(("n0", "n1", "n2"))
                extra["phase"] = "Running"
            elif kind == "owned":
                extra["metadata"] = {"ownerReferences": [{"controller": True, "uid": f"rs-{rng.randint(0, 2)}"}]}
            p = _versioned(pod(f"x{step}-{rng.randint(0, 99)}", cpu="100m", memory="64Mi", **extra))
            cache.watch.on_pod("ADDED", None, p)
            objects.append(p)
        elif op == "delete" and pods:
            gone = rng.choice(pods)
            cache.watch.on_pod("DELETED", gone, None)
            objects.remove(gone)
        elif op in ("label", "bind") and pods:
            p = rng.choice(pods)
            md = {**p["metadata"], "resourceVersion": str(100 + step)}
            new = {**p, "metadata": md}
            if op == "label":
                md["labels"] = {"step": str(step)}
            elif not p["spec"].get("nodeName"):
                new["spec"] = {**p["spec"], "nodeName": rng.choice(("n0", "n1", "n2"))}
                new["status"] = {"phase": "Running"}
            cache.watch.on_pod("MODIFIED", p, new)
            objects[objects.index(p)] = new
        elif op == "session":
            ssn = open_session(cache.snapshot(NOW).cluster, c, PLUGINS)
            for name in c.actions:
                ACTIONS[name].build().execute(ssn)
            close_session(ssn)
            continue
        elif op == "assume":
            pending = [o for o in pods if not o["spec"].get("nodeName") and o["spec"].get("schedulerName") == "volcano"]
            if pending:
                cache.decisions.assume_bound(rng.choice(pending)["metadata"]["uid"], rng.choice(("n0", "n1", "n2")))
        snap = cache.snapshot(NOW)
        incremental_snaps += snap.stats.incremental
        expect = _live(objects)
        binds, _evictions = cache.decisions.assumed()
        for uid, node_name in binds.items():
            expect.decisions.assume_bound(uid, node_name)
        assert _full_state(snap.cluster) == _full_state(expect.snapshot(NOW).cluster), (step, op)
    assert incremental_snaps >= 20


def _bare_jobs(objects: list[dict[str, Any]], *, missing: bool = False) -> list[dict[str, Any]]:
    """Two PodGroups (job-a, job-b) with two Running pods each on n0 and n1 (the pods of a missing job-b
    when `missing`): the harness's bare pods."""
    q1 = {"scheduling.volcano.sh/queue-name": "q1"}
    for name in ("job-a", "job-b"):
        if name != "job-b" or not missing:
            pg = podgroup(name, min_member=2)
            pg["metadata"].update(resourceVersion="1", creationTimestamp="2023-11-14T22:00:00Z")
            objects.append(pg)
        for i in range(2):
            objects.append(_versioned(pod(f"{name}-{i}", group=name, cpu="100m", memory="64Mi", node_name=f"n{i}",
                                          phase="Running", annotations=q1)))
    return objects


def _terminate(cache: LiveCache, objects: list[dict[str, Any]], group: str) -> None:
    """The group's pods get a deletionTimestamp (still Running on their nodes)."""
    for p in [o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"].startswith(group + "-")]:
        new = {**p, "metadata": {**p["metadata"], "resourceVersion": "2", "deletionTimestamp": "2023-11-14T23:00:00Z"}}
        cache.watch.on_pod("MODIFIED", p, new)
        objects[objects.index(p)] = new


def _delete_pods(cache: LiveCache, objects: list[dict[str, Any]], group: str) -> None:
    for p in [o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"].startswith(group + "-")]:
        cache.watch.on_pod("DELETED", p, None)
        objects.remove(p)


def _delete_pg(cache: LiveCache, objects: list[dict[str, Any]], group: str) -> None:
    pg = next(o for o in objects if o["kind"] == "PodGroup" and o["metadata"]["name"] == group)
    cache.reflectors["podgroups"].store.delete(pg)
    objects.remove(pg)


def _touch_nodes(cache: LiveCache, objects: list[dict[str, Any]], step: int) -> None:
    """The agents' annotations on every Node (each node's tasks are rebuilt)."""
    for n in [o for o in objects if o["kind"] == "Node"]:
        new = {**n, "metadata": {**n["metadata"], "resourceVersion": str(100 + step), "annotations": {"x": str(step)}}}
        cache.reflectors["nodes"].store.put(new)
        objects[objects.index(n)] = new


#: the harness's burst, in the orders its events can reach one snapshot delta or several
ORPHAN_STEPS: dict[str, list[Callable[[LiveCache, list[dict[str, Any]]], None]]] = {
    "terminating and PodGroup deleted together": [
        lambda c, o: (_terminate(c, o, "job-a"), _delete_pg(c, o, "job-a")),
        lambda c, o: _delete_pods(c, o, "job-a"),
    ],
    "PodGroup deleted, then the pods": [
        lambda c, o: _delete_pg(c, o, "job-a"),
        lambda c, o: _terminate(c, o, "job-a"),
        lambda c, o: _delete_pods(c, o, "job-a"),
    ],
    "pods terminating and deleted, then the PodGroup": [
        lambda c, o: _terminate(c, o, "job-a"),
        lambda c, o: _delete_pods(c, o, "job-a"),
        lambda c, o: _delete_pg(c, o, "job-a"),
    ],
    "pods and PodGroup deleted together": [
        lambda c, o: (_delete_pods(c, o, "job-a"), _delete_pg(c, o, "job-a")),
    ],
    "both jobs, PodGroups first": [
        lambda c, o: (_delete_pg(c, o, "job-a"), _delete_pg(c, o, "job-b")),
        lambda c, o: (_delete_pods(c, o, "job-a"), _terminate(c, o, "job-b")),
        lambda c, o: _delete_pods(c, o, "job-b"),
    ],
}


@pytest.mark.parametrize("name", [*sorted(ORPHAN_STEPS), "a placed pod's PodGroup missing from the start"])
def test_placed_pods_of_a_deleted_pod_group_are_followed(name: str, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """Running pods and their PodGroup deleted in one burst, in any order (a live run's KeyError in
    rebuild_nodes): a placed pod whose PodGroup is missing is on its node but in no job. After each step and
    after the Nodes' next annotations, the snapshot equals a fresh build, the update never fails, the kept
    model's nodes hold only its tasks, and once the pods are gone the snapshots are incremental again."""
    monkeypatch.setattr(incremental, "FULL_BUILD_SHARE", 2.0)
    missing = name not in ORPHAN_STEPS
    objects = _bare_jobs(_objects(), missing=missing)
    cache, _ = _first(objects)
    steps = [lambda c, o: _delete_pods(c, o, "job-b")] if missing else ORPHAN_STEPS[name]
    memo = cache.builder.memo
    for step, change in enumerate([lambda c, o: None, *steps]):
        for what, act in (("change", change), ("node annotations", partial(_touch_nodes, step=step))):
            act(cache, objects)
            snap = cache.snapshot(NOW)
            assert _full_state(snap.cluster) == _full_state(build_cluster(objects, now=NOW)), (step, what)
            model = memo.live_model
            if model is not None:
                assert all(u in model.tasks for uids in model.node_uids.values() for u in uids), (step, what)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    _touch_nodes(cache, objects, 99)
    assert cache.snapshot(NOW).stats.incremental
