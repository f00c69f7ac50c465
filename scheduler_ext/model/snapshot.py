"""Build a ClusterInfo from Kubernetes objects (plain dicts), as Volcano's cache snapshot does.

Defaults for what a live cluster would have filled in (docs/design.md, "Simulate"): nodes without a Ready
condition are Ready; objects without creationTimestamp get `now`; pods without a group get an
implicit PodGroup like Volcano's podgroup controller makes (one per controlling owner, else per pod);
the `default` queue always exists; a Queue with an empty status.state is Open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.job import PG_PENDING, PG_RUNNING, JobInfo, PodGroup
from scheduler_ext.api.node import NodeInfo, NodeStatic, NodeTable, build_table, node_static
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.resource import RES_CPU, RES_MEMORY, RES_PODS, Resource
from scheduler_ext.api.task import TaskInfo, parse_time
from scheduler_ext.api.types import FAILED, SUCCEEDED, JobID, QueueID, scheduled_status
from tidemark.apis import (
    ANN_GROUP_NAME,
    ANN_OVERSUBSCRIPTION_CPU,
    ANN_OVERSUBSCRIPTION_MEMORY,
    ANN_QUEUE_NAME,
    DEFAULT_QUEUE,
    LABEL_OVERSUBSCRIPTION,
    label_enabled,
    node_is_evicting,
    node_oversubscription,
    parse_go_duration,
    published_batch,
    short_repr,
)
from tidemark.nodereport import REPORT_RESOURCES, node_bounds
from tidemark.shapes import shape_problems

KINDS = ("Node", "Pod", "PodGroup", "Queue", "PriorityClass", "PodDisruptionBudget")
#: builds the TaskInfo of one pod: (pod, now, problems) -> TaskInfo (see build_cluster)
TaskFactory = Callable[[Mapping[str, Any], float, list[str]], TaskInfo]


class SnapshotError(Exception):
    """A malformed object; the message names it (one line)."""


#: what build_cluster derives from one Node object: allocatable, capacity, X (oversubscription), its
#: warnings, labelled for oversubscription, evicting offline jobs
NodeParse = tuple[Resource, Resource, dict[str, float], list[str], bool, bool]
#: a task's rows over a table's dims: resreq, init_resreq, the init check columns, kube requests
TaskVectors = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: a Node's rows as build_cluster keeps them: (the Node object, table dims, allocatable row, capacity row)
NodeRows = tuple[Mapping[str, Any], tuple[str, ...], np.ndarray, np.ndarray]


class SnapshotMemo:
    """What build_cluster derived from objects in the previous session, reused while an object is the
    same dict (the live cache's stores replace an object when its resourceVersion changes, and keep
    it otherwise), so a session re-derives only what changed: node resources, oversubscription
    annotations, status checks, readiness and NodeInfo fields per Node, the table rows and dimensions
    of each pod (per table dims), PodGroup arguments and minResources parses, implicit PodGroups.
    Entries of objects gone are dropped at each build. Everything reused is read-only in a session
    (rows are copied into the table; a task's vectors are only read; parsed Resources are cloned and
    lists copied into the session's own objects): see tests/unit/scheduler/test_snapshot_isolation.py."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[Mapping[str, Any], NodeParse]] = {}
        self.vectors: dict[str, tuple[Mapping[str, Any], tuple[str, ...], TaskVectors]] = {}
        #: node name -> (the Node object, table dims, allocatable row, capacity row)
        self.node_rows: dict[str, tuple[Mapping[str, Any], tuple[str, ...], np.ndarray, np.ndarray]] = {}
        #: id(object) -> (the object, its identity) for objects that passed the first checks
        self.checked: dict[int, tuple[Mapping[str, Any], tuple[str, str, str]]] = {}
        #: id(PodGroup object) -> (the object, its PodGroup's constructor arguments, parsed minResources)
        self.pod_groups: dict[int, tuple[Mapping[str, Any], dict[str, Any], Resource | None]] = {}
        #: task uid -> (its pod object, controller owner, the implicit PodGroup's minResources list and
        #: its parse, queue, priorityClassName)
        self.implicit: dict[str, tuple[Mapping[str, Any], str, dict[str, str], Resource, str, str]] = {}
        #: task uid -> (its pod object, the table dimensions the task needs)
        self.task_dims: dict[str, tuple[Mapping[str, Any], frozenset[str]]] = {}
        #: id(Node object) -> (the object, Ready) for Nodes that passed their status checks
        self.node_ready: dict[int, tuple[Mapping[str, Any], bool]] = {}
        #: node name -> (the Node object, what NodeInfo reads from it)
        self.node_static: dict[str, tuple[Mapping[str, Any], NodeStatic]] = {}
        #: the model the last session ran on, frozen (`scheduler_ext.model.live_model.LiveModel`), or None: the next
        #: snapshot is then built from scratch
        self.live_model: Any = None
        #: derivations done by the last build (counted for tests and SnapshotStats)
        self.node_parses = 0
        self.vector_builds = 0


def _parse_node(n: Mapping[str, Any]) -> NodeParse:
    st = n.get("status") or {}
    alloc_raw = st.get("allocatable") if st.get("allocatable") is not None else st.get("capacity")
    cap_raw = st.get("capacity") if st.get("capacity") is not None else alloc_raw
    node_problems: list[str] = []
    alloc = Resource.from_resource_list(alloc_raw, node_problems)
    cap = Resource.from_resource_list(cap_raw, node_problems)
    if node_problems:
        raise SnapshotError(f"Node {n['metadata']['name']}: {node_problems[0].removesuffix('; ignored')}")
    x_raw, xw_raw = node_oversubscription(n)
    x, xw = _within_node(n, alloc, cap, dict(x_raw), list(xw_raw))
    return alloc, cap, x, xw, _labelled(n), node_is_evicting(n)


def _within_node(
    n: Mapping[str, Any], alloc: Resource, cap: Resource, x: dict[str, float], warnings: list[str]
) -> tuple[dict[str, float], list[str]]:
    """X and batch-* lowered to what the node has (`tidemark.nodereport.node_bounds`), as the NodeReport
    controller applies them: a Node written past the webhook cannot draw the cluster's offline pods (issue 33,
    item 4: a node publishing 9e12 cores took 54 of 60 offline pods in `simulate`)."""
    bounds = node_bounds(n)
    for resource, key in ((RES_CPU, ANN_OVERSUBSCRIPTION_CPU), (RES_MEMORY, ANN_OVERSUBSCRIPTION_MEMORY)):
        if key in bounds and x.get(resource, 0) > bounds[key]:
            warnings.append(f"{key}={x[resource]} is more than the node has; read as {bounds[key]}")
            x[resource] = bounds[key]
    st = n.get("status") or {}
    for key in REPORT_RESOURCES:
        top = bounds.get(key)
        for row, part in ((alloc, "allocatable"), (cap, "capacity")):
            scalars = row.scalar_resources
            raw = (st.get(part) or {}).get(key) if isinstance(st.get(part), Mapping) else None
            if scalars and key in scalars and raw is not None and (why := published_batch(key, raw)[1]):
                warnings.append(f"{key}={short_repr(raw)} {why}; read as 0")  # the NodeReport gate's grammar
                scalars[key] = 0.0
            if top is not None and scalars and scalars.get(key, 0.0) > top * 1000.0:  # scalars are milli-units
                warnings.append(f"{key}={scalars[key] / 1000:g} is more than the node has; read as {top}")
                scalars[key] = top * 1000.0
    return x, warnings


def _meta(obj: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    md = obj.get("metadata")
    if not isinstance(md, Mapping) or not md.get("name"):
        raise SnapshotError(f"{where}: metadata.name is required")
    for key in ("labels", "annotations"):
        if md.get(key) is not None and not isinstance(md.get(key), Mapping):
            raise SnapshotError(f"{where}: metadata.{key} must be a mapping")
    return md


def _where(kind: str, md: Mapping[str, Any]) -> str:
    return f"{kind} {md.get('namespace', '') + '/' if md.get('namespace') else ''}{md['name']}"


def _check_mapping(obj: Mapping[str, Any], key: str, where: str) -> None:
    v = obj.get(key)
    if v is not None and not isinstance(v, Mapping):
        raise SnapshotError(f"{where}: {key} must be a mapping")


def _node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return True


def _controller_uid(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return None


def _min_resources_of(task: TaskInfo) -> dict[str, str]:
    """The implicit PodGroup's minResources: the pod's request as a ResourceList."""
    out: dict[str, str] = {}
    r = task.resreq
    if r.milli_cpu:
        out[RES_CPU] = f"{int(r.milli_cpu)}m"
    if r.memory:
        out[RES_MEMORY] = str(int(r.memory))
    for name, v in (r.scalar_resources or {}).items():
        if name != RES_PODS and v:
            out[name] = f"{int(v)}m"
    return out


def build_queues(objs: Sequence[Mapping[str, Any]], now: float, warnings: list[str]) -> dict[QueueID, QueueInfo]:
    """The QueueInfos of these Queue objects, plus the implicit `default` queue when there is none."""
    queues: dict[QueueID, QueueInfo] = {}
    for q in objs:
        spec = q.get("spec") or {}
        for key in ("capability", "deserved"):
            _check_mapping(spec, key, f"Queue {q['metadata']['name']}: spec")
        created = parse_time(q["metadata"].get("creationTimestamp"))
        for key in ("capability", "deserved"):
            q_problems: list[str] = []
            Resource.from_resource_list(spec.get(key), q_problems)
            if q_problems:
                reason = q_problems[0].removesuffix("; ignored")
                raise SnapshotError(f"Queue {q['metadata']['name']}: spec.{key}: {reason}")
        q_warnings: list[str] = []
        qi = QueueInfo(q, creation=created if created is not None else now, problems=q_warnings)
        warnings.extend(f"Queue {qi.name}: {w}" for w in q_warnings)
        queues[qi.uid] = qi
    if QueueID(DEFAULT_QUEUE) not in queues:
        dq = {"metadata": {"name": DEFAULT_QUEUE}, "spec": {"weight": 1, "reclaimable": True}}
        queues[QueueID(DEFAULT_QUEUE)] = QueueInfo(dq, creation=now, implicit=True)
    return queues


def parse_pod_group(pg: Mapping[str, Any], now: float) -> tuple[dict[str, Any], float | None]:
    """A PodGroup object's checked constructor arguments and its creationTimestamp (None: `now` used)."""
    md = pg["metadata"]
    spec = pg.get("spec") or {}
    status = pg.get("status") or {}
    ns = str(md.get("namespace") or "default")
    where = f"PodGroup {ns}/{md['name']}"
    mm = spec.get("minMember", 0)
    if not isinstance(mm, int) or isinstance(mm, bool):
        raise SnapshotError(f"{where}: spec.minMember must be an integer")
    if mm < 0:
        raise SnapshotError(f"{where}: spec.minMember={mm} must be >= 0")
    _check_mapping(spec, "minResources", where + ": spec")
    pg_problems: list[str] = []
    Resource.from_resource_list(spec.get("minResources"), pg_problems)
    if pg_problems:
        raise SnapshotError(f"{where}: spec.minResources: {pg_problems[0].removesuffix('; ignored')}")
    _check_mapping(spec, "minTaskMember", where + ": spec")
    for role, count in (spec.get("minTaskMember") or {}).items():
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count < 2**31:
            raise SnapshotError(f"{where}: spec.minTaskMember.{role}={count!r} must be an integer >= 0")
    created = parse_time(md.get("creationTimestamp"))
    kwargs = {
        "name": str(md["name"]),
        "namespace": ns,
        "uid": str(md.get("uid") or ""),
        "queue": str(spec.get("queue") or DEFAULT_QUEUE),
        "min_member": mm,
        "min_resources_raw": spec.get("minResources"),
        "min_task_member": {str(k): int(v) for k, v in (spec.get("minTaskMember") or {}).items()},
        "priority_class_name": str(spec.get("priorityClassName") or ""),
        "phase": str(status.get("phase") or ""),
        "annotations": md.get("annotations") or {},
        "labels": md.get("labels") or {},
        "creation": created if created is not None else now,
        "observed_conditions": status.get("conditions") or (),
    }
    return kwargs, created


#: an implicit PodGroup's derivation from its first pod: (the pod object, controller owner, minResources list,
#: its parse, queue, priorityClassName)
ImplicitHit = tuple[Mapping[str, Any], str, dict[str, str], Resource, str, str]


def implicit_of(task: TaskInfo) -> ImplicitHit:
    """What the implicit PodGroup of a pod without a group is derived from (Volcano's podgroup controller)."""
    owner = _controller_uid(task.pod) or str((task.pod.get("metadata") or {}).get("uid") or task.name)
    ann = (task.pod.get("metadata") or {}).get("annotations") or {}
    raw_min = _min_resources_of(task)
    return (task.pod, owner, raw_min, Resource.from_resource_list(raw_min),
            str(ann.get(ANN_QUEUE_NAME) or DEFAULT_QUEUE),
            str((task.pod.get("spec") or {}).get("priorityClassName") or ""))


def implicit_pod_group(ihit: ImplicitHit, namespace: str, creation: float) -> PodGroup:
    """The implicit PodGroup of `implicit_of`'s derivation (Pending; the build marks it Running)."""
    return PodGroup(
        f"podgroup-{ihit[1]}",
        namespace,
        queue=ihit[4],
        min_member=1,
        min_resources_raw=ihit[2],
        priority_class_name=ihit[5],
        phase=PG_PENDING,
        creation=creation,
        implicit=True,
        min_resources=ihit[3].clone(),
    )


def build_cluster(
    objects: Sequence[Mapping[str, Any]],
    *,
    now: float,
    scheduler_name: str = "volcano",
    task_factory: TaskFactory | None = None,
    memo: SnapshotMemo | None = None,
) -> ClusterInfo:
    """Parse every object into the session model; raises SnapshotError on malformed input.

    `task_factory(pod, now, problems)` replaces `TaskInfo(pod, default_creation=now, problems=problems)`:
    the live cache passes one that returns fresh copies of tasks it parsed in an earlier cycle.
    `memo` (the live cache keeps one across sessions) reuses what earlier builds derived from the same
    Node and Pod objects.
    """
    warnings: list[str] = []
    by_kind = _objects_by_kind(objects, warnings, task_factory, memo)
    priority_classes, default_priority = _priority_classes(by_kind["PriorityClass"])
    queues = build_queues(by_kind["Queue"], now, warnings)
    tasks, foreign = _tasks_of(by_kind["Pod"], now, scheduler_name, task_factory)
    pod_groups = _pod_groups(by_kind["PodGroup"], now, memo)
    _implicit_pod_groups(tasks, pod_groups, memo)
    jobs = _jobs(pod_groups, queues, priority_classes, default_priority, warnings)
    ready_nodes, not_ready = _ready_nodes(by_kind["Node"], memo)
    node_res, new_nodes, node_parses, dims = _parse_nodes(ready_nodes, memo)
    _add_task_dims(tasks, foreign, dims, memo)
    table = build_table(dims, ready_nodes)
    node_list, nodes, new_rows = _node_infos(table, ready_nodes, node_res, warnings, memo)
    new_vectors, vector_builds = _place_tasks(table, tasks, foreign, jobs, pod_groups, nodes, warnings, memo)
    if memo is not None:
        memo.nodes = new_nodes
        memo.node_rows = new_rows
        memo.vectors = new_vectors
        memo.node_parses = node_parses
        memo.vector_builds = vector_builds
    return ClusterInfo(
        table=table,
        node_list=node_list,
        nodes=nodes,
        jobs=jobs,
        queues=queues,
        priority_classes=priority_classes,
        default_priority=default_priority,
        pdbs=list(by_kind["PodDisruptionBudget"]),
        foreign_tasks=foreign,
        not_ready_nodes=not_ready,
        warnings=warnings,
        now=now,
        scheduler_name=scheduler_name,
    )


def _objects_by_kind(
    objects: Sequence[Mapping[str, Any]], warnings: list[str], task_factory: TaskFactory | None,
    memo: SnapshotMemo | None,
) -> dict[str, list[Mapping[str, Any]]]:
    """The objects by kind, each checked once (an object that passed last session is not checked again)."""
    by_kind: dict[str, list[Mapping[str, Any]]] = {k: [] for k in KINDS}
    seen_objects: set[tuple[str, str, str]] = set()
    old_checked = memo.checked if memo is not None else {}
    new_checked: dict[int, tuple[Mapping[str, Any], tuple[str, str, str]]] = {}
    for i, obj in enumerate(objects):
        checked = old_checked.get(id(obj))
        if checked is not None and checked[0] is obj:
            # the very object that passed these checks last session (objects are never changed in place)
            ident = checked[1]
            kind = ident[0]
        else:
            if not isinstance(obj, Mapping):
                raise SnapshotError(f"object {i + 1} is not a mapping")
            raw_kind = obj.get("kind")
            if not isinstance(raw_kind, str) or not raw_kind:
                raise SnapshotError(f"object {i + 1}: kind is required")
            kind = raw_kind
            if kind not in by_kind:
                warnings.append(f"object {i + 1}: kind {kind} is not used by the scheduler; ignored")
                continue
            md = _meta(obj, f"{kind} #{i + 1}")
            where = _where(kind, md)
            for key in ("spec", "status"):
                _check_mapping(obj, key, where)
            # a file may hold anything; the live cache's Pods and Nodes come from the API server's typed
            # resources (well-shaped by construction, and checking 10,000 pods every session costs ~0.25 s)
            shape = shape_problems(obj) if task_factory is None or kind in ("PodGroup", "Queue") else ()
            if shape:
                raise SnapshotError(f"{where}: {shape[0]}")
            ident = (kind, str(md.get("namespace") or "default") if kind in ("Pod", "PodGroup") else "",
                     str(md["name"]))
        if memo is not None:
            new_checked[id(obj)] = (obj, ident)
        if ident in seen_objects and kind != "Node":
            where = _where(kind, obj["metadata"])
            warnings.append(f"{where} is defined twice (object {i + 1}); the later copy is ignored")
            continue
        seen_objects.add(ident)
        by_kind[kind].append(obj)

    if memo is not None:
        memo.checked = new_checked
    return by_kind


def _priority_classes(objs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], int]:
    """The PriorityClasses' values by name and the global default's (0 without one)."""
    priority_classes: dict[str, int] = {}
    default_priority = 0
    for pc in objs:
        name = str(pc["metadata"]["name"])
        value = pc.get("value", 0)
        if not isinstance(value, int) or isinstance(value, bool):
            raise SnapshotError(f"PriorityClass {name}: value must be an integer")
        priority_classes[name] = value
        if pc.get("globalDefault"):
            default_priority = value
    return priority_classes, default_priority


def _tasks_of(
    pods: Sequence[Mapping[str, Any]], now: float, scheduler_name: str, task_factory: TaskFactory | None
) -> tuple[list[TaskInfo], list[TaskInfo]]:
    """The tasks of our pods, and those of other schedulers' pods placed on a node (they hold resources)."""
    tasks: list[TaskInfo] = []
    foreign: list[TaskInfo] = []
    for p in pods:
        spec = p.get("spec") or {}
        if not isinstance(spec.get("containers") or [], list):
            raise SnapshotError(f"{_pod_where(p)}: spec.containers must be a list")
        problems: list[str] = []
        if task_factory is not None:
            task = task_factory(p, now, problems)
        else:
            task = TaskInfo(p, default_creation=now, problems=problems)
        if problems:
            raise SnapshotError(f"{_pod_where(p)}: {problems[0].removesuffix('; ignored')}")
        if task.scheduler_name == scheduler_name:
            tasks.append(task)
        elif task.node_name:
            foreign.append(task)
    return tasks, foreign


def _pod_groups(
    objs: Sequence[Mapping[str, Any]], now: float, memo: SnapshotMemo | None
) -> dict[JobID, PodGroup]:
    """The PodGroup objects' PodGroups by job id (an object read last session reuses its checked arguments)."""
    pod_groups: dict[JobID, PodGroup] = {}
    old_pgs = memo.pod_groups if memo is not None else {}
    new_pgs: dict[int, tuple[Mapping[str, Any], dict[str, Any], Resource | None]] = {}
    for pg in objs:
        pg_hit = old_pgs.get(id(pg))
        if pg_hit is not None and pg_hit[0] is pg:
            # the very object read last session: its checks passed, its arguments are known
            kwargs, parsed_min = pg_hit[1], pg_hit[2]
            pg_obj = PodGroup(**kwargs, min_resources=parsed_min.clone() if parsed_min is not None else None)
            pod_groups[JobID(f"{pg_obj.namespace}/{pg_obj.name}")] = pg_obj
            new_pgs[id(pg)] = pg_hit
            continue
        kwargs, created = parse_pod_group(pg, now)
        ns = kwargs["namespace"]
        md = pg["metadata"]
        pg_obj = PodGroup(**kwargs)
        pod_groups[JobID(f"{ns}/{md['name']}")] = pg_obj
        if memo is not None and created is not None:  # (a default creation is `now`: not kept)
            min_copy = pg_obj.min_resources.clone() if pg_obj.min_resources is not None else None
            new_pgs[id(pg)] = (pg, kwargs, min_copy)
    if memo is not None:
        memo.pod_groups = new_pgs
    return pod_groups


def _implicit_pod_groups(tasks: list[TaskInfo], pod_groups: dict[JobID, PodGroup], memo: SnapshotMemo | None) -> None:
    """Implicit PodGroups for our tasks without a group, as Volcano's podgroup controller creates them."""
    old_implicit = memo.implicit if memo is not None else {}
    new_implicit: dict[str, tuple[Mapping[str, Any], str, dict[str, str], Resource, str, str]] = {}
    for task in sorted(tasks, key=lambda t: (t.namespace, t.name)):
        if task.job:
            continue
        ihit = old_implicit.get(task.uid)
        if ihit is None or ihit[0] is not task.pod:
            ihit = implicit_of(task)
        if memo is not None:
            new_implicit[task.uid] = ihit
        owner = ihit[1]
        jid = JobID(f"{task.namespace}/podgroup-{owner}")
        task.job = jid
        if jid not in pod_groups:
            pod_groups[jid] = implicit_pod_group(ihit, task.namespace, task.creation)
        if scheduled_status(task.status) or task.node_name:
            pod_groups[jid].phase = PG_RUNNING

    if memo is not None:
        memo.implicit = new_implicit


def _jobs(
    pod_groups: Mapping[JobID, PodGroup], queues: Mapping[QueueID, QueueInfo], priority_classes: Mapping[str, int],
    default_priority: int, warnings: list[str],
) -> dict[JobID, JobInfo]:
    """A JobInfo (without tasks yet) per PodGroup whose queue exists; the others are warned about."""
    jobs: dict[JobID, JobInfo] = {}
    for jid, pg_obj in pod_groups.items():
        if QueueID(pg_obj.queue) not in queues:
            warnings.append(f"PodGroup {jid}: queue {pg_obj.queue} does not exist; skipped")
            continue
        job = JobInfo(jid, pg_obj)
        job.priority = priority_classes.get(pg_obj.priority_class_name, default_priority)
        wt = pg_obj.annotations.get("volcano.sh/sla-waiting-time") or pg_obj.annotations.get("sla-waiting-time")
        job.waiting_time = _parse_duration(str(wt)) if wt else None
        jobs[jid] = job
    return jobs


def _ready_nodes(
    objs: Sequence[Mapping[str, Any]], memo: SnapshotMemo | None
) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The Ready Node objects and the names of the others (a Node's status is checked once per object)."""
    ready_nodes: list[Mapping[str, Any]] = []
    not_ready: list[str] = []
    seen: set[str] = set()
    old_ready = memo.node_ready if memo is not None else {}
    new_ready: dict[int, tuple[Mapping[str, Any], bool]] = {}
    for n in objs:
        name = str(n["metadata"]["name"])
        if name in seen:
            raise SnapshotError(f"Node {name}: defined twice")
        seen.add(name)
        rhit = old_ready.get(id(n))
        if rhit is None or rhit[0] is not n:
            st = n.get("status") or {}
            for key in ("allocatable", "capacity"):
                _check_mapping(st, key, f"Node {name}: status")
            rhit = (n, _node_ready(n))
        if memo is not None:
            new_ready[id(n)] = rhit
        if rhit[1]:
            ready_nodes.append(n)
        else:
            not_ready.append(name)

    if memo is not None:
        memo.node_ready = new_ready
    return ready_nodes, not_ready


def _parse_nodes(
    ready_nodes: Sequence[Mapping[str, Any]], memo: SnapshotMemo | None
) -> tuple[list[NodeParse], dict[str, tuple[Mapping[str, Any], NodeParse]], int, set[str]]:
    """Each Ready Node's parse (reused while the object is the same), and the table dimensions the nodes need."""
    node_res: list[NodeParse] = []
    dims: set[str] = {RES_PODS}
    old_nodes = memo.nodes if memo is not None else {}
    new_nodes: dict[str, tuple[Mapping[str, Any], NodeParse]] = {}
    node_parses = 0
    for n in ready_nodes:
        name = str(n["metadata"]["name"])
        hit = old_nodes.get(name)
        if hit is not None and hit[0] is n:
            parse = hit[1]
        else:
            parse = _parse_node(n)
            node_parses += 1
        new_nodes[name] = (n, parse)
        node_res.append(parse)
        dims.update((parse[0].scalar_resources or {}).keys())
    return node_res, new_nodes, node_parses, dims


def _add_task_dims(tasks: list[TaskInfo], foreign: list[TaskInfo], dims: set[str], memo: SnapshotMemo | None) -> None:
    """Add the table dimensions the tasks need to `dims` (a pod's are derived once per object)."""
    old_dims = memo.task_dims if memo is not None else {}
    new_dims: dict[str, tuple[Mapping[str, Any], frozenset[str]]] = {}
    dim_sets: set[frozenset[str]] = set()
    for task in (*tasks, *foreign):
        dhit = old_dims.get(task.uid)
        if dhit is None or dhit[0] is not task.pod:
            dhit = (task.pod, _task_dims(task))
        if memo is not None:
            new_dims[task.uid] = dhit
        dim_sets.add(dhit[1])
    for ds in dim_sets:
        dims.update(ds)
    if memo is not None:
        memo.task_dims = new_dims


def _node_infos(
    table: NodeTable, ready_nodes: Sequence[Mapping[str, Any]], node_res: Sequence[NodeParse], warnings: list[str],
    memo: SnapshotMemo | None,
) -> tuple[list[NodeInfo], dict[str, NodeInfo], dict[str, NodeRows]]:
    """The NodeInfos over the table, their rows filled (reused while the object and the dims are the same)."""
    node_rows = memo.node_rows if memo is not None else {}
    new_rows: dict[str, NodeRows] = {}
    node_list: list[NodeInfo] = []
    nodes: dict[str, NodeInfo] = {}
    old_static = memo.node_static if memo is not None else {}
    new_static: dict[str, tuple[Mapping[str, Any], NodeStatic]] = {}
    for i, (n, (alloc, cap, x, xw, labelled, evicting)) in enumerate(zip(ready_nodes, node_res)):
        shit = old_static.get(str(n["metadata"]["name"]))
        if shit is None or shit[0] is not n:
            shit = (n, node_static(n))
        if memo is not None:
            new_static[shit[1][0]] = shit
        ni = NodeInfo(n, table, i, shit[1])
        table.names[i] = ni.name
        table.labels[i] = ni.labels
        if xw:
            warnings.extend(f"Node {ni.name}: {w}" for w in xw)
        ni.oversubscription_node = labelled
        ni.oversubscription_resource = Resource(float(x.get(RES_CPU, 0)), float(x.get(RES_MEMORY, 0)))
        ni.offline_job_evicting = evicting
        rows = node_rows.get(ni.name) if memo is not None else None
        if rows is None or rows[0] is not n or rows[1] != table.dims:
            rows = (n, table.dims, table.vector(alloc), table.vector(cap))
        if memo is not None:
            new_rows[ni.name] = rows
        table.allocatable[i] = rows[2]
        table.capacity[i] = rows[3]
        table.max_pods[i] = alloc.max_task_num
        node_list.append(ni)
        nodes[ni.name] = ni
    if memo is not None:
        memo.node_static = new_static
    table.idle[:] = table.allocatable
    table.future_idle[:] = table.allocatable
    return node_list, nodes, new_rows


def _place_tasks(
    table: NodeTable, tasks: list[TaskInfo], foreign: list[TaskInfo], jobs: Mapping[JobID, JobInfo],
    pod_groups: Mapping[JobID, PodGroup], nodes: Mapping[str, NodeInfo], warnings: list[str],
    memo: SnapshotMemo | None,
) -> tuple[dict[str, tuple[Mapping[str, Any], tuple[str, ...], TaskVectors]], int]:
    """Each task's table rows (reused while the pod and the dims are the same), into its job and onto its node."""
    old_vectors = memo.vectors if memo is not None else {}
    new_vectors: dict[str, tuple[Mapping[str, Any], tuple[str, ...], TaskVectors]] = {}
    vector_builds = 0
    for task in (*tasks, *foreign):
        vhit = old_vectors.get(task.uid)
        if vhit is not None and vhit[0] is task.pod and vhit[1] == table.dims:
            task.resreq_vec, task.init_vec, task.init_check_cols, task.kube_vec = vhit[2]
        else:
            table.bind_task(task)
            vector_builds += 1
            vhit = (task.pod, table.dims, (task.resreq_vec, task.init_vec, task.init_check_cols, task.kube_vec))
        if memo is not None:
            new_vectors[task.uid] = vhit
        if task.job and task.job in jobs:
            jobs[task.job].add_task_info(task)
        elif task.job and task.job not in pod_groups and not task.node_name:
            warnings.append(
                f"Pod {task.key}: its PodGroup {task.job} ({ANN_GROUP_NAME}) does not exist; "
                "not scheduled until it does"
            )
        if task.node_name and task.status not in (SUCCEEDED, FAILED):
            node = nodes.get(task.node_name)
            if node is not None:
                try:
                    node.add_task(task)
                except ValueError as e:
                    warnings.append(str(e))
                    continue
                table.kube_add(node.index, task)
    return new_vectors, vector_builds


def _pod_where(p: Mapping[str, Any]) -> str:
    md = p["metadata"]
    return f"Pod {md.get('namespace') or 'default'}/{md['name']}"


def _task_dims(task: TaskInfo) -> frozenset[str]:
    """The table dimensions a task's requests name (beyond cpu and memory, always there)."""
    out: set[str] = set((task.init_resreq.scalar_resources or {}).keys())
    out.update((task.resreq.scalar_resources or {}).keys())
    out.update(k for k in task.kube_req if k not in (RES_CPU, RES_MEMORY))
    return frozenset(out)


def _labelled(node: Mapping[str, Any]) -> bool:
    return label_enabled((node.get("metadata") or {}).get("labels"), LABEL_OVERSUBSCRIPTION).value


def _parse_duration(text: str) -> float | None:
    """A Go duration such as `3m`, `1h30m`, `100ms` in seconds; None when malformed or not positive."""
    value = parse_go_duration(text)
    return value if value is not None and value > 0 else None
