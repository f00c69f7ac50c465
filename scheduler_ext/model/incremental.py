"""The live cache's incremental snapshot: the previous session's model, with only what changed rebuilt.

A build from scratch (snapshot.build_cluster) constructs every TaskInfo, JobInfo/PodGroup and NodeInfo
of the cluster each session. `LiveModel` keeps the model the last session ran on, *frozen*
(api/guard.py: every change a session makes to it is recorded, by class-swapped setters, mutating
methods and touch-aware containers), and at the next snapshot rebuilds only:

- tasks of pods that changed (a new object: a new resourceVersion, or a different assumed
  bind/eviction), were added or deleted, or that the session touched (status, node, ...), and the
  jobs and nodes holding them (an implicit job appears or goes with its pods, in the build's order);
- jobs and PodGroups the session touched (and jobs whose PodGroup object changed or is new, or whose
  creation is the snapshot time), nodes whose object changed (re-read: resources, labels, taints,
  annotations) or whose accounting or kube view changed (NodeTable generation and rows compared with
  the values the build left, so a direct write is seen too);
- the queues (a handful) and the containers (dicts and lists of pointers).

Scratch state a session wrote (task.cache, fit errors, PodGroup conditions/events) is reset. What is
not handled incrementally falls back to the full build, which is always right: a Node added,
removed or changing readiness or resource names, a PriorityClass or PDB object changed, a PodGroup
with pods removed, pods or PodGroups reordered, a changed pod moving to another job or needing other
table dimensions, a pod whose PodGroup is missing, any warning, an unattributed change (a frozen
Resource changed), or more than FULL_BUILD_SHARE of the model to rebuild. The result equals a build
from scratch of the same objects, in order
(tests/unit/scheduler/test_snapshot_isolation.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import is_not
from typing import Any, Final

import numpy as np

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.guard import Tracker
from scheduler_ext.api.job import PG_RUNNING, JobInfo, PodGroup
from scheduler_ext.api.node import NodeInfo, node_static
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.resource import RES_CPU, RES_MEMORY, RES_PODS, Resource
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import FAILED, SUCCEEDED, JobID, QueueID, scheduled_status
from scheduler_ext.model import snapshot as _snapshot
from scheduler_ext.model.snapshot import (
    SnapshotMemo,
    _check_mapping,
    _node_ready,
    _parse_duration,
    _task_dims,
    build_queues,
    implicit_of,
    implicit_pod_group,
    parse_pod_group,
)
from tidemark.apis import ANN_GROUP_NAME

#: the NodeTable arrays a session changes (compared with the build's values at the next snapshot)
_ROW_ARRAYS: Final = ("allocatable", "capacity", "idle", "used", "releasing", "pipelined", "future_idle",
                      "kube_requested", "kube_nonzero", "pod_count", "max_pods", "generation")
#: when more than this share of the tasks and jobs is to be rebuilt, the full build is cheaper
FULL_BUILD_SHARE = 0.5
#: positions of other schedulers' tasks come after all of ours (the build's order)
_FOREIGN_POS: Final = 1 << 40
#: assumed decisions overlaid on a pod: (bind node or None, eviction assumed)
Overlay = tuple[str | None, bool]


class Fallback(Exception):
    """The change is not one the incremental path handles: build from scratch."""


class LiveModel:
    """The model the last session ran on and what it was built from (see the module doc)."""

    def __init__(self, cluster: ClusterInfo, tracker: Tracker, memo: SnapshotMemo, *,
                 nodes: Sequence[Mapping[str, Any]],
                 others: Sequence[Mapping[str, Any]], queues: Sequence[Mapping[str, Any]],
                 pgs: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], uids: Sequence[str],
                 overlay: dict[str, Overlay], now: float) -> None:
        self.cluster = cluster
        self.tracker = tracker
        self.nodes = list(nodes)
        self.others = list(others)
        self.queues = list(queues)
        self.pgs = list(pgs)
        self.pods = list(pods)
        self.uids = list(uids)
        #: uid -> position in pods
        self.index_of = {u: i for i, u in enumerate(self.uids)}
        self.overlay = dict(overlay)
        self.now = now
        #: the tasks of the model by uid, ours (in jobs) first, then other schedulers' placed ones
        self.tasks: dict[str, TaskInfo] = {}
        for job in cluster.jobs.values():
            for t in job.tasks.values():
                self.tasks.setdefault(t.uid, t)
        for t in cluster.foreign_tasks:
            self.tasks.setdefault(t.uid, t)
        ours: set[str] = {t.uid for j in cluster.jobs.values() for t in j.tasks.values()
                          if t.scheduler_name == cluster.scheduler_name}
        self.ours = ours
        # the build's task order: ours in pod order, then the foreign ones
        self.pos: dict[str, int] = {u: i if u in ours else _FOREIGN_POS + i
                                    for i, u in enumerate(self.uids) if u in self.tasks}
        #: what each task was at the build (a touched task's own fields may have changed since)
        self.job_of: dict[str, JobID] = {u: t.job for u, t in self.tasks.items()}
        self.node_of: dict[str, str] = {u: t.node_name if t.status not in (SUCCEEDED, FAILED) else ""
                                        for u, t in self.tasks.items()}
        #: the model's own containers (a session gets copies: it may change its own)
        self.jobs: dict[JobID, JobInfo] = dict(cluster.jobs)
        self.node_list: list[NodeInfo] = list(cluster.node_list)
        self.node_by_name: dict[str, NodeInfo] = dict(cluster.nodes)
        self.foreign: list[str] = [t.uid for t in cluster.foreign_tasks]
        self.priority_classes = dict(cluster.priority_classes)
        self.pdbs = list(cluster.pdbs)
        self.not_ready = list(cluster.not_ready_nodes)
        self.job_uids: dict[JobID, list[str]] = {jid: list(j.tasks) for jid, j in cluster.jobs.items()}
        self.node_uids: dict[str, list[str]] = {n.name: list(n.tasks) for n in cluster.node_list}
        self.explicit: set[JobID] = set()
        self.now_jobs: set[JobID] = set()
        self.pg_of: dict[JobID, Mapping[str, Any]] = {}
        #: the job of each PodGroup object, in their order
        self.pg_keys: list[JobID] = [_jid(pg) for pg in pgs]
        for pg, jid in zip(pgs, self.pg_keys):
            md = pg["metadata"]
            self.explicit.add(jid)
            self.pg_of[jid] = pg
            if not md.get("creationTimestamp"):
                self.now_jobs.add(jid)
        #: tasks mapped to an implicit PodGroup (a pod without a group annotation)
        self.implicit_uids: set[str] = set(memo.implicit)  # (the build's: exactly its implicit tasks)
        #: an implicit job's place among the implicit jobs: its first task by (namespace, name)
        self.first_key: dict[JobID, tuple[str, str]] = {}
        for u in self.implicit_uids:
            t = self.tasks[u]
            k = (t.namespace, t.name)
            if t.job not in self.first_key or k < self.first_key[t.job]:
                self.first_key[t.job] = k
        #: the next position of a task entering the model (pods are appended to the pod order)
        self.next_pos = len(self.uids)
        #: table dimensions: those the nodes need, and per set of task dimensions the tasks needing it
        self.node_dims: set[str] = {RES_PODS}
        for n in cluster.node_list:
            self.node_dims.update(memo.nodes[n.name][1][0].scalar_resources or {})
        self.dim_count: dict[frozenset[str], int] = {}
        for uid in self.tasks:
            ds = memo.task_dims[uid][1]
            self.dim_count[ds] = self.dim_count.get(ds, 0) + 1
        tb = cluster.table
        self.rows = {a: getattr(tb, a).copy() for a in _ROW_ARRAYS}
        self.affinity = dict(tb.affinity_pods)
        self.names = list(tb.names)
        self.labels = list(tb.labels)
        tb.change_log = []
        self.kube_pods: list[Any] = tb.kube_pods  # (re-read after freezing, below)
        for task in self.tasks.values():
            tracker.freeze_task(task)
        for job in cluster.jobs.values():
            tracker.freeze_pod_group(job.pod_group)
            tracker.freeze_job(job)
        for node in cluster.node_list:
            tracker.freeze_node(node)
        self.kube_pods = list(tb.kube_pods)


def _jid(pg: Mapping[str, Any]) -> JobID:
    md = pg["metadata"]
    return JobID(f"{md.get('namespace') or 'default'}/{md['name']}")


def _group(task: TaskInfo) -> bool:
    return bool(((task.pod.get("metadata") or {}).get("annotations") or {}).get(ANN_GROUP_NAME))


def _changed_positions(old: Sequence[object], new: Sequence[object]) -> list[int]:
    return list(compress(range(len(new)), map(is_not, old, new)))


@dataclass(slots=True)
class _Delta:
    """What `update` rebuilds, found in the inputs and the last session's changes and handed between its steps."""

    #: positions of the Nodes whose object changed
    changed_nodes: list[int]
    #: uids of the pods deleted and added since the model was built
    removed: set[str]
    added: set[str]
    #: the tasks (uids), jobs and nodes (names) to rebuild
    tasks: set[str]
    jobs: set[JobID] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    #: PodGroup objects new or changed, by job
    changed_pgs: dict[JobID, Mapping[str, Any]] = field(default_factory=dict)
    #: implicit jobs whose tasks changed (their place among the implicit jobs may move)
    implicit_changed: set[JobID] = field(default_factory=set)


def update(
    model: LiveModel,
    memo: SnapshotMemo,
    *,
    nodes: Sequence[Mapping[str, Any]],
    others: Sequence[Mapping[str, Any]],
    queues: Sequence[Mapping[str, Any]],
    pgs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    uids: Sequence[str],
    overlay: dict[str, Overlay],
    now: float,
    task_factory: Callable[[Mapping[str, Any], float, list[str]], TaskInfo],
) -> ClusterInfo:
    """The next session's model from the last one; raises Fallback when only a full build is right."""
    touched, unknown = model.tracker.drain()
    if unknown:
        raise Fallback(unknown[0])
    prev = model.cluster
    table = prev.table
    # --- the input delta ----------------------------------------------------------------------------
    delta = _pod_delta(model, nodes, others, pods, uids, overlay)
    _pod_group_delta(model, pgs, now, delta)
    # --- what the last session changed ------------------------------------------------------------
    _session_changes(model, table, touched, delta)
    redo = len(delta.tasks) + len(delta.jobs) + len(delta.removed)
    if redo > FULL_BUILD_SHARE * (len(model.tasks) + len(model.jobs)):
        raise Fallback("most of the model changed (a full build is cheaper)")
    # --- Nodes that changed (the agents' annotations change every few seconds): re-read in place ----------
    for i in delta.changed_nodes:
        _node_changed(model, memo, table, model.nodes[i], nodes[i], delta.nodes)
    # --- queues (a handful: rebuilt every session) ------------------------------------------------------
    warnings: list[str] = []
    queue_infos = build_queues(queues, now, warnings)
    if warnings:
        raise Fallback("queue warnings")
    # --- tasks --------------------------------------------------------------------------------------
    _remove_tasks(model, memo, table, delta)
    new_tasks = _rebuild_tasks(model, memo, table, delta, pods, now, task_factory, prev.scheduler_name)
    removed = delta.removed
    for obj in touched:  # a touched task is rebuilt, unless its pod is gone
        if isinstance(obj, TaskInfo) and obj.uid not in new_tasks and obj.uid not in removed:
            raise Fallback("a touched task without its pod")
    _place_new_tasks(model, new_tasks)
    # --- jobs ---------------------------------------------------------------------------------------
    jobs = _rebuild_jobs(model, memo, delta, queue_infos, now, prev.default_priority)
    # --- nodes --------------------------------------------------------------------------------------
    _rebuild_nodes(model, memo, table, delta.nodes)
    # --- scratch: per-session state of reused objects, back to empty ----------------------------------
    cluster = _session_cluster(model, prev, queue_infos, jobs, now)
    tracker = model.tracker
    for task in new_tasks.values():
        tracker.freeze_task(task)
    model.cluster = cluster
    model.pods = list(pods)
    model.nodes = list(nodes)
    model.uids = list(uids)
    model.pgs = list(pgs)
    model.overlay = dict(overlay)
    model.now = now
    memo.node_parses = 0
    return cluster


def _pod_delta(model: LiveModel, nodes: Sequence[Mapping[str, Any]], others: Sequence[Mapping[str, Any]],
               pods: Sequence[Mapping[str, Any]], uids: Sequence[str], overlay: dict[str, Overlay]) -> _Delta:
    """The Nodes and pods that changed since the build (new objects, new overlays); a Fallback for the rest."""
    if len(nodes) != len(model.nodes):
        raise Fallback("a Node was added or removed")
    if len(others) != len(model.others) or _changed_positions(model.others, others):
        raise Fallback("a PriorityClass or PodDisruptionBudget changed")
    changed_nodes = _changed_positions(model.nodes, nodes)
    removed: set[str] = set()
    added: set[str] = set()
    if len(uids) == len(model.uids) and uids == model.uids:
        changed_pods = _changed_positions(model.pods, pods)
    else:
        # pods come in the order they were first seen: a new one is appended, a deleted one leaves a gap
        old_set, new_set = set(model.uids), set(uids)
        if len(new_set) != len(uids):
            raise Fallback("a pod uid twice")
        removed = old_set - new_set
        added = new_set - old_set
        tail = len(uids) - len(added)
        if removed:
            keep = [i for i, u in enumerate(model.uids) if u not in removed]
            kept_uids = [model.uids[i] for i in keep]
            kept_pods = [model.pods[i] for i in keep]
        else:
            kept_uids, kept_pods = model.uids, model.pods
        if uids[:tail] != kept_uids:
            raise Fallback("the pods' order changed")
        changed_pods = _changed_positions(kept_pods, pods[:tail])
        model.index_of = dict(zip(uids, range(len(uids))))
    redo_tasks: set[str] = {uids[i] for i in changed_pods} | added
    for uid in overlay.keys() | model.overlay.keys():
        if overlay.get(uid) != model.overlay.get(uid):
            redo_tasks.add(uid)
    return _Delta(changed_nodes, removed, added, redo_tasks)


def _pod_group_delta(model: LiveModel, pgs: Sequence[Mapping[str, Any]], now: float, delta: _Delta) -> None:
    """The PodGroup objects added, removed or changed: the model's PodGroup records follow, their jobs are redone."""
    redo_jobs = delta.jobs
    changed_pgs = delta.changed_pgs
    pgs_added: list[JobID] = []
    pgs_removed: set[JobID] = set()
    if len(pgs) == len(model.pgs):
        kept_pgs, kept_old = pgs, model.pgs
    else:
        # PodGroups come in the order they were first seen, as pods do
        keys = [_jid(pg) for pg in pgs]
        old_keys = model.pg_keys
        pgs_removed = set(old_keys) - set(keys)
        added_keys = set(keys) - set(old_keys)
        tail = len(keys) - len(added_keys)
        keep = [i for i, k in enumerate(old_keys) if k not in pgs_removed]
        if len(set(keys)) != len(keys) or keys[:tail] != [old_keys[i] for i in keep]:
            raise Fallback("the PodGroups' order changed")
        kept_pgs, kept_old = pgs[:tail], [model.pgs[i] for i in keep]
        pgs_added = keys[tail:]
        model.pg_keys = keys
    for i in _changed_positions(kept_old, kept_pgs):
        jid = _jid(kept_pgs[i])
        if model.pg_of.get(jid) is not kept_old[i]:
            raise Fallback("a PodGroup was replaced by another")
        changed_pgs[jid] = kept_pgs[i]
        redo_jobs.add(jid)
    for jid in pgs_removed:
        if model.job_uids.get(jid):
            raise Fallback("a PodGroup with pods was removed")
        model.job_uids.pop(jid, None)
        model.jobs.pop(jid, None)
        model.explicit.discard(jid)
        model.now_jobs.discard(jid)
        del model.pg_of[jid]
    for i, jid in enumerate(pgs_added, start=len(pgs) - len(pgs_added)):
        if jid in model.job_uids:
            raise Fallback("a new PodGroup takes an implicit job's name")
        model.explicit.add(jid)
        model.pg_of[jid] = changed_pgs[jid] = pgs[i]
        model.job_uids[jid] = []
        if not pgs[i]["metadata"].get("creationTimestamp"):
            model.now_jobs.add(jid)
        redo_jobs.add(jid)
    if now != model.now:
        redo_jobs.update(model.now_jobs)


def _session_changes(model: LiveModel, table: Any, touched: Sequence[Any], delta: _Delta) -> None:
    """What the last session changed: the objects it touched and the NodeTable rows it wrote are redone."""
    redo_tasks, redo_jobs, redo_nodes = delta.tasks, delta.jobs, delta.nodes
    for obj in touched:
        if isinstance(obj, TaskInfo):
            redo_tasks.add(obj.uid)
        elif isinstance(obj, JobInfo):
            redo_jobs.add(obj.uid)
        elif isinstance(obj, PodGroup):
            redo_jobs.add(JobID(f"{obj.namespace}/{obj.name}"))
        elif isinstance(obj, NodeInfo):
            redo_nodes.add(obj.name)
    rows = model.rows
    for a in _ROW_ARRAYS:
        cur, old = getattr(table, a), rows[a]
        diff = (cur != old) if cur.ndim == 1 else (cur != old).any(axis=1)
        for row in np.flatnonzero(diff).tolist():
            redo_nodes.add(model.names[row])
    for i in _changed_positions(model.kube_pods, table.kube_pods):
        redo_nodes.add(model.names[i])
    if table.names != model.names or any(map(is_not, table.labels, model.labels)):
        raise Fallback("the NodeTable's names or labels changed")


def _remove_tasks(model: LiveModel, memo: SnapshotMemo, table: Any, delta: _Delta) -> None:
    """The deleted pods' tasks leave the model (their jobs and nodes are redone, their dimensions released)."""
    tasks = model.tasks
    jobs = model.jobs
    redo_jobs, redo_nodes, implicit_changed = delta.jobs, delta.nodes, delta.implicit_changed
    for uid in delta.removed:
        gone = tasks.pop(uid, None)
        if gone is None:
            continue  # not in the model
        jid = model.job_of.pop(uid)
        if jid in jobs:
            model.job_uids[jid].remove(uid)
            redo_jobs.add(jid)
            if uid in model.implicit_uids:
                implicit_changed.add(jid)
        node_name = model.node_of.pop(uid)
        if node_name in model.node_uids:
            model.node_uids[node_name].remove(uid)
            redo_nodes.add(node_name)
        if uid not in model.ours:
            model.foreign.remove(uid)
        model.ours.discard(uid)
        model.implicit_uids.discard(uid)
        del model.pos[uid]
        ds = memo.task_dims[uid][1]
        model.dim_count[ds] -= 1
        if not model.dim_count[ds]:
            del model.dim_count[ds]
            need = {RES_CPU, RES_MEMORY} | model.node_dims
            for d in model.dim_count:
                need |= d
            if need != set(table.dims):
                raise Fallback("a removed pod took a table dimension with it")


def _rebuild_tasks(
    model: LiveModel, memo: SnapshotMemo, table: Any, delta: _Delta, pods: Sequence[Mapping[str, Any]], now: float,
    task_factory: Callable[[Mapping[str, Any], float, list[str]], TaskInfo], scheduler_name: str,
) -> dict[str, TaskInfo]:
    """The new tasks of the changed, added and touched pods, as the build makes them (their jobs and nodes redone)."""
    tasks = model.tasks
    added = delta.added
    redo_jobs, redo_nodes, implicit_changed = delta.jobs, delta.nodes, delta.implicit_changed
    new_tasks: dict[str, TaskInfo] = {}
    index_of = model.index_of
    for uid in delta.tasks:
        old = tasks.get(uid)
        at = index_of.get(uid)
        if at is None:
            continue  # an assumption about a pod no longer cached (not in the model before or now)
        pod = pods[at]
        md = _snapshot._meta(pod, "Pod")
        for key in ("spec", "status"):
            _check_mapping(pod, key, f"Pod {md.get('namespace') or 'default'}/{md['name']}")
        if not isinstance((pod.get("spec") or {}).get("containers") or [], list):
            raise Fallback("spec.containers is not a list")
        problems: list[str] = []
        task = task_factory(pod, now, problems)
        if problems:
            raise Fallback(problems[0])
        if old is None:
            if task.scheduler_name != scheduler_name and not task.node_name:
                continue  # another scheduler's pending pod: not in the model before or now
            if uid not in added:
                raise Fallback("a changed pod enters the model")
            _enter(model, memo, table, task, uid, pod, scheduler_name)
            if uid in model.implicit_uids:
                implicit_changed.add(task.job)
        if (task.scheduler_name == scheduler_name) != (uid in model.ours):
            raise Fallback("a pod changed scheduler")
        if uid not in model.ours and not task.node_name:
            raise Fallback("another scheduler's pod left its node")
        if uid in model.implicit_uids:
            if _group(task):
                raise Fallback("a pod joined a PodGroup")
            ihit = memo.implicit.get(uid)
            if ihit is None or ihit[0] is not pod:
                ihit = implicit_of(task)
                memo.implicit[uid] = ihit
            task.job = JobID(f"{task.namespace}/podgroup-{ihit[1]}")
        if task.job != model.job_of[uid]:
            raise Fallback("a pod moved to another job")
        dhit = memo.task_dims.get(uid)
        if dhit is None or dhit[0] is not pod:
            dims = _task_dims(task)
            if dhit is None or dims != dhit[1]:
                raise Fallback("a pod's resource dimensions changed")
            memo.task_dims[uid] = (pod, dims)
        vhit = memo.vectors.get(uid)
        if vhit is not None and vhit[0] is pod and vhit[1] == table.dims:
            task.resreq_vec, task.init_vec, task.init_check_cols, task.kube_vec = vhit[2]
        else:
            table.bind_task(task)
            memo.vector_builds += 1
            memo.vectors[uid] = (pod, table.dims, (task.resreq_vec, task.init_vec, task.init_check_cols,
                                                   task.kube_vec))
        new_tasks[uid] = task
        if task.job in model.job_uids:
            redo_jobs.add(task.job)
        if model.node_of[uid]:
            redo_nodes.add(model.node_of[uid])
        if task.node_name and task.status not in (SUCCEEDED, FAILED):
            redo_nodes.add(task.node_name)
    return new_tasks


def _place_new_tasks(model: LiveModel, new_tasks: Mapping[str, TaskInfo]) -> None:
    """The rebuilt tasks replace the old ones; a task that moved leaves its old node's list for the new one's."""
    tasks = model.tasks
    pos = model.pos
    for uid, task in new_tasks.items():
        tasks[uid] = task
        was = model.node_of[uid]
        now_on = task.node_name if task.status not in (SUCCEEDED, FAILED) else ""
        model.node_of[uid] = now_on
        if was != now_on:
            if was in model.node_uids:
                model.node_uids[was].remove(uid)
            if now_on in model.node_uids:
                lst = model.node_uids[now_on]
                lst.append(uid)
                lst.sort(key=pos.__getitem__)


def _rebuild_jobs(model: LiveModel, memo: SnapshotMemo, delta: _Delta, queue_infos: Mapping[QueueID, QueueInfo],
                  now: float, default_priority: int) -> dict[JobID, JobInfo]:
    """The jobs to redo, rebuilt as the build makes them (an implicit job without pods goes), in the build's order."""
    tasks = model.tasks
    jobs = model.jobs
    tracker = model.tracker
    implicit_changed = delta.implicit_changed
    changed_pgs = delta.changed_pgs
    reorder = False
    for jid in delta.jobs:
        if jid not in model.job_uids:
            raise Fallback("a job not in the model")
        if not model.job_uids[jid] and jid not in model.explicit:
            # an implicit job without pods is no more
            del model.job_uids[jid]
            jobs.pop(jid, None)
            model.first_key.pop(jid, None)
            continue
        old_job = jobs.get(jid)
        job_tasks = [tasks[u] for u in model.job_uids[jid]]
        pg_obj = _pod_group(model, memo, jid, old_job, job_tasks, changed_pgs.get(jid), now)
        if old_job is None:
            if QueueID(pg_obj.queue) not in queue_infos:
                raise Fallback("a new job's queue does not exist")
            reorder = True
        elif pg_obj.queue != old_job.pod_group.queue:
            raise Fallback("a PodGroup moved to another queue")
        if jid in implicit_changed:
            first = min((t.namespace, t.name) for t in job_tasks if t.uid in model.implicit_uids)
            if model.first_key.get(jid) != first:
                model.first_key[jid] = first
                reorder = True
        job = JobInfo(jid, pg_obj)
        job.priority = model.priority_classes.get(pg_obj.priority_class_name, default_priority)
        wt = pg_obj.annotations.get("volcano.sh/sla-waiting-time") or pg_obj.annotations.get("sla-waiting-time")
        job.waiting_time = _parse_duration(str(wt)) if wt else None
        for t in job_tasks:
            job.add_task_info(t)
        tracker.freeze_pod_group(pg_obj)
        tracker.freeze_job(job)
        jobs[jid] = job
    for jid in changed_pgs:
        model.pg_of[jid] = changed_pgs[jid]
    if reorder:
        # the build's order: the explicit PodGroups' jobs in object order, then the implicit ones by their
        # first task
        implicit = sorted((j for j in jobs if j not in model.explicit), key=model.first_key.__getitem__)
        order = [j for j in model.pg_keys if j in jobs] + implicit
        model.jobs = jobs = {j: jobs[j] for j in order}
    return jobs


def _rebuild_nodes(model: LiveModel, memo: SnapshotMemo, table: Any, redo_nodes: set[str]) -> None:
    """The nodes to redo, rebuilt with their tasks (table rows, kube view and pod affinity entries as the build's)."""
    tasks = model.tasks
    tracker = model.tracker
    rows = model.rows
    pos = model.pos
    node_list = model.node_list
    node_by_name = model.node_by_name
    redo_rows = {node_by_name[name].index for name in redo_nodes if name in node_by_name}
    affinity_changed = table.affinity_pods != model.affinity or any(v[0] in redo_rows
                                                                     for v in model.affinity.values())
    if affinity_changed:
        # the entries of the rows not rebuilt as the build left them; rebuilt rows add theirs
        table.affinity_pods = {u: v for u, v in model.affinity.items() if v[0] not in redo_rows}
    for name in redo_nodes:
        old_node = node_by_name.get(name)
        if old_node is None:
            continue  # a task on a node that is not Ready (not in the model)
        i = old_node.index
        n, parse = memo.nodes[name]
        static = memo.node_static[name][1]
        _alloc, _cap, x, _xw, labelled, evicting = parse
        ni = NodeInfo(n, table, i, static)
        ni.oversubscription_node = labelled
        ni.oversubscription_resource = Resource(float(x.get(RES_CPU, 0)), float(x.get(RES_MEMORY, 0)))
        ni.offline_job_evicting = evicting
        table.idle[i] = table.allocatable[i]
        table.future_idle[i] = table.allocatable[i]
        for a in ("used", "releasing", "pipelined", "kube_requested", "kube_nonzero"):
            getattr(table, a)[i] = 0.0
        table.pod_count[i] = 0
        table.kube_pods[i] = {}
        for uid in model.node_uids[name]:
            task = tasks[uid]
            try:
                ni.add_task(task)
            except ValueError as e:
                raise Fallback(str(e)) from e
            table.kube_add(i, task)
            affinity_changed = affinity_changed or task.has_pod_affinity
        tracker.freeze_node(ni)
        node_list[i] = ni
        node_by_name[name] = ni
        model.kube_pods[i] = table.kube_pods[i]
        for a in _ROW_ARRAYS:
            rows[a][i] = getattr(table, a)[i]
    if affinity_changed:
        entries = [(u, v) for u, v in table.affinity_pods.items()]
        entries.sort(key=lambda e: pos[e[0]])
        table.affinity_pods = dict(entries)
        model.affinity = dict(table.affinity_pods)
    table.change_log = []


def _session_cluster(model: LiveModel, prev: ClusterInfo, queue_infos: dict[QueueID, QueueInfo],
                     jobs: dict[JobID, JobInfo], now: float) -> ClusterInfo:
    """The session's ClusterInfo over the model (its own containers), the reused objects' scratch state reset."""
    tracker = model.tracker
    tasks = model.tasks
    s_tasks, s_jobs = tracker.scratched(tasks.values(), jobs.values())
    for st in s_tasks:
        tracker.reset_scratch(st)
    for sj in s_jobs:
        tracker.reset_scratch(sj)
    return ClusterInfo(
        table=prev.table,
        node_list=list(model.node_list),
        nodes=dict(model.node_by_name),
        jobs=dict(jobs),
        queues=queue_infos,
        priority_classes=dict(model.priority_classes),
        default_priority=prev.default_priority,
        pdbs=list(model.pdbs),
        foreign_tasks=[tasks[u] for u in model.foreign],
        not_ready_nodes=list(model.not_ready),
        warnings=[],
        now=now,
        scheduler_name=prev.scheduler_name,
    )


def _node_changed(model: LiveModel, memo: SnapshotMemo, table: Any, old: Mapping[str, Any],
                  new: Mapping[str, Any], redo_nodes: set[str]) -> None:
    """A Node object replaced by a new version: its parse, fields and table rows, as the build reads them."""
    name = str(new["metadata"]["name"])
    if str(old["metadata"]["name"]) != name:
        raise Fallback("the Nodes' order changed")
    _snapshot._meta(new, f"Node #{name}")
    for key in ("spec", "status"):
        _check_mapping(new, key, f"Node {name}")
    st = new.get("status") or {}
    for key in ("allocatable", "capacity"):
        _check_mapping(st, key, f"Node {name}: status")
    ready = _node_ready(new)
    was_ready = name in model.node_by_name
    if ready != was_ready:
        raise Fallback("a Node's readiness changed")
    memo.node_ready[id(new)] = (new, ready)
    if not ready:
        return  # (not in the model before or now)
    parse = _snapshot._parse_node(new)
    before = memo.nodes[name][1]
    memo.nodes[name] = (new, parse)  # (kept for the full build if it comes to that)
    if parse[3]:
        raise Fallback("a Node's oversubscription annotations need a warning")
    if set(parse[0].scalar_resources or {}) != set(before[0].scalar_resources or {}):
        raise Fallback("a Node's resource names changed")
    static = node_static(new)
    memo.node_static[name] = (new, static)
    i = model.node_by_name[name].index
    alloc_row, cap_row = table.vector(parse[0]), table.vector(parse[1])
    memo.node_rows[name] = (new, table.dims, alloc_row, cap_row)
    table.allocatable[i] = alloc_row
    table.capacity[i] = cap_row
    table.max_pods[i] = parse[0].max_task_num
    table.labels[i] = static[1]
    model.labels[i] = static[1]
    redo_nodes.add(name)


def _enter(model: LiveModel, memo: SnapshotMemo, table: Any, task: TaskInfo, uid: str, pod: Mapping[str, Any],
           scheduler_name: str) -> None:
    """Book-keeping for a new pod's task entering the model (its job, node, position, dimensions)."""
    ours = task.scheduler_name == scheduler_name
    if ours:
        model.ours.add(uid)
        if not _group(task):
            ihit = memo.implicit.get(uid)
            if ihit is None or ihit[0] is not pod:
                ihit = implicit_of(task)
                memo.implicit[uid] = ihit
            task.job = JobID(f"{task.namespace}/podgroup-{ihit[1]}")
            model.implicit_uids.add(uid)
            if task.job not in model.job_uids:
                if task.job in model.explicit:
                    raise Fallback("an implicit pod maps to a PodGroup without a job")
                model.job_uids[task.job] = []
        elif task.job not in model.job_uids:
            raise Fallback("a new pod's PodGroup does not exist")
    else:
        model.foreign.append(uid)
    model.pos[uid] = model.next_pos if ours else _FOREIGN_POS + model.next_pos
    model.next_pos += 1
    model.job_of[uid] = task.job
    model.node_of[uid] = ""
    if task.job in model.job_uids:
        lst = model.job_uids[task.job]
        lst.append(uid)
        if len(lst) > 1 and model.pos[lst[-2]] > model.pos[uid]:
            lst.sort(key=model.pos.__getitem__)
    dhit = memo.task_dims.get(uid)
    ds = dhit[1] if dhit is not None and dhit[0] is pod else _task_dims(task)
    if not ds <= set(table.dims):
        raise Fallback("a new pod needs another table dimension")
    memo.task_dims[uid] = (pod, ds)
    model.dim_count[ds] = model.dim_count.get(ds, 0) + 1


def _pod_group(model: LiveModel, memo: SnapshotMemo, jid: JobID, old_job: JobInfo | None, job_tasks: list[TaskInfo],
               changed: Mapping[str, Any] | None, now: float) -> PodGroup:
    """The job's PodGroup as build_cluster makes it."""
    pg_obj: PodGroup
    if jid in model.explicit:
        obj = changed if changed is not None else model.pg_of[jid]
        hit = memo.pod_groups.get(id(obj))
        if hit is not None and hit[0] is obj:
            min_res = hit[2]
            pg_obj = PodGroup(**hit[1], min_resources=min_res.clone() if min_res is not None else None)
        else:
            kwargs, created = parse_pod_group(obj, now)
            pg_obj = PodGroup(**kwargs)
            if created is not None:
                min_copy = pg_obj.min_resources.clone() if pg_obj.min_resources is not None else None
                memo.pod_groups[id(obj)] = (obj, kwargs, min_copy)
    else:
        implicit = [t for t in job_tasks if t.uid in model.implicit_uids]
        if not implicit:
            raise Fallback("an implicit job without its pods")
        first = min(implicit, key=lambda t: (t.namespace, t.name))
        ihit = memo.implicit.get(first.uid)
        if ihit is None or ihit[0] is not first.pod:
            ihit = implicit_of(first)
            memo.implicit[first.uid] = ihit
        if old_job is not None and f"podgroup-{ihit[1]}" != old_job.pod_group.name:
            raise Fallback("an implicit PodGroup changed owner")
        pg_obj = implicit_pod_group(ihit, first.namespace, first.creation)
    for t in job_tasks:
        if t.uid in model.implicit_uids and (scheduled_status(t.status) or t.node_name):
            pg_obj.phase = PG_RUNNING
    return pg_obj


def new_model(cluster: ClusterInfo, tracker: Tracker, memo: SnapshotMemo, **inputs: Any) -> LiveModel | None:
    """A LiveModel of a fresh full build, or None when the incremental path cannot follow it (warnings)."""
    if cluster.warnings:
        return None
    return LiveModel(cluster, tracker, memo, **inputs)

