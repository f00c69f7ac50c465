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

This module finds what changed and runs the rebuild in order (`update`); the kept state is
scheduler_ext/model/live_model.py, the rebuild steps scheduler_ext/model/rebuild.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import is_not
from typing import Any

import numpy as np

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.guard import Tracker
from scheduler_ext.api.job import JobInfo, PodGroup
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import JobID
from scheduler_ext.model.live_model import (
    FULL_BUILD_SHARE,
    ROW_ARRAYS,
    Delta,
    Fallback,
    LiveModel,
    Overlay,
    changed_positions,
    job_id_of,
)
from scheduler_ext.model.rebuild import (
    node_changed,
    place_new_tasks,
    rebuild_jobs,
    rebuild_nodes,
    rebuild_tasks,
    remove_tasks,
    session_cluster,
)
from scheduler_ext.model.snapshot import SnapshotMemo, build_queues


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
        node_changed(model, memo, table, model.nodes[i], nodes[i], delta.nodes)
    # --- queues (a handful: rebuilt every session) ------------------------------------------------------
    warnings: list[str] = []
    queue_infos = build_queues(queues, now, warnings)
    if warnings:
        raise Fallback("queue warnings")
    # --- tasks --------------------------------------------------------------------------------------
    remove_tasks(model, memo, table, delta)
    new_tasks = rebuild_tasks(model, memo, table, delta, pods, now, task_factory, prev.scheduler_name)
    removed = delta.removed
    for obj in touched:  # a touched task is rebuilt, unless its pod is gone
        if isinstance(obj, TaskInfo) and obj.uid not in new_tasks and obj.uid not in removed:
            raise Fallback("a touched task without its pod")
    place_new_tasks(model, new_tasks)
    # --- jobs ---------------------------------------------------------------------------------------
    jobs = rebuild_jobs(model, memo, delta, queue_infos, now, prev.default_priority)
    # --- nodes --------------------------------------------------------------------------------------
    rebuild_nodes(model, memo, table, delta.nodes)
    # --- scratch: per-session state of reused objects, back to empty ----------------------------------
    cluster = session_cluster(model, prev, queue_infos, jobs, now)
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
               pods: Sequence[Mapping[str, Any]], uids: Sequence[str], overlay: dict[str, Overlay]) -> Delta:
    """The Nodes and pods that changed since the build (new objects, new overlays); a Fallback for the rest."""
    if len(nodes) != len(model.nodes):
        raise Fallback("a Node was added or removed")
    if len(others) != len(model.others) or changed_positions(model.others, others):
        raise Fallback("a PriorityClass or PodDisruptionBudget changed")
    changed_nodes = changed_positions(model.nodes, nodes)
    removed: set[str] = set()
    added: set[str] = set()
    if len(uids) == len(model.uids) and uids == model.uids:
        changed_pods = changed_positions(model.pods, pods)
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
        changed_pods = changed_positions(kept_pods, pods[:tail])
        model.index_of = dict(zip(uids, range(len(uids))))
    redo_tasks: set[str] = {uids[i] for i in changed_pods} | added
    for uid in overlay.keys() | model.overlay.keys():
        if overlay.get(uid) != model.overlay.get(uid):
            redo_tasks.add(uid)
    return Delta(changed_nodes, removed, added, redo_tasks)


def _pod_group_delta(model: LiveModel, pgs: Sequence[Mapping[str, Any]], now: float, delta: Delta) -> None:
    """The PodGroup objects added, removed or changed: the model's PodGroup records follow, their jobs are redone."""
    redo_jobs = delta.jobs
    changed_pgs = delta.changed_pgs
    pgs_added: list[JobID] = []
    pgs_removed: set[JobID] = set()
    if len(pgs) == len(model.pgs):
        kept_pgs, kept_old = pgs, model.pgs
    else:
        # PodGroups come in the order they were first seen, as pods do
        keys = [job_id_of(pg) for pg in pgs]
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
    for i in changed_positions(kept_old, kept_pgs):
        jid = job_id_of(kept_pgs[i])
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


def _session_changes(model: LiveModel, table: Any, touched: Sequence[Any], delta: Delta) -> None:
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
    for a in ROW_ARRAYS:
        cur, old = getattr(table, a), rows[a]
        diff = (cur != old) if cur.ndim == 1 else (cur != old).any(axis=1)
        for row in np.flatnonzero(diff).tolist():
            redo_nodes.add(model.names[row])
    for i in changed_positions(model.kube_pods, table.kube_pods):
        redo_nodes.add(model.names[i])
    if table.names != model.names or any(map(is_not, table.labels, model.labels)):
        raise Fallback("the NodeTable's names or labels changed")

def new_model(cluster: ClusterInfo, tracker: Tracker, memo: SnapshotMemo, **inputs: Any) -> LiveModel | None:
    """A LiveModel of a fresh full build, or None when the incremental path cannot follow it (warnings, or a
    placed pod of ours whose PodGroup is missing: the build puts it on its node but in no job, and the
    model's tasks are its jobs' and the foreign ones)."""
    if cluster.warnings:
        return None
    held = {u for j in cluster.jobs.values() for u in j.tasks}
    held.update(t.uid for t in cluster.foreign_tasks)
    if any(u not in held for n in cluster.node_list for u in n.tasks):
        return None
    return LiveModel(cluster, tracker, memo, **inputs)


