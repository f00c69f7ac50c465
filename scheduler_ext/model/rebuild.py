"""The steps of the incremental rebuild: tasks, jobs, nodes and the session's ClusterInfo, as build_cluster makes them.

Called in this order by `update` (scheduler_ext/model/incremental.py) once it has found what changed
(a `Delta`); each step raises Fallback where only a full build is right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.job import PG_RUNNING, JobInfo, PodGroup
from scheduler_ext.api.node import NodeInfo, node_static
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.resource import RES_CPU, RES_MEMORY, Resource
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import FAILED, SUCCEEDED, JobID, QueueID, scheduled_status
from scheduler_ext.model import snapshot as _snapshot
from scheduler_ext.model.live_model import FOREIGN_POS, ROW_ARRAYS, Delta, Fallback, LiveModel, in_group
from scheduler_ext.model.snapshot import (
    SnapshotMemo,
    _check_mapping,
    _node_ready,
    _parse_duration,
    _task_dims,
    implicit_of,
    implicit_pod_group,
    parse_pod_group,
)


def remove_tasks(model: LiveModel, memo: SnapshotMemo, table: Any, delta: Delta) -> None:
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


def rebuild_tasks(
    model: LiveModel, memo: SnapshotMemo, table: Any, delta: Delta, pods: Sequence[Mapping[str, Any]], now: float,
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
            if in_group(task):
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


def place_new_tasks(model: LiveModel, new_tasks: Mapping[str, TaskInfo]) -> None:
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


def rebuild_jobs(model: LiveModel, memo: SnapshotMemo, delta: Delta, queue_infos: Mapping[QueueID, QueueInfo],
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


def rebuild_nodes(model: LiveModel, memo: SnapshotMemo, table: Any, redo_nodes: set[str]) -> None:
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
        for a in ROW_ARRAYS:
            rows[a][i] = getattr(table, a)[i]
    if affinity_changed:
        entries = [(u, v) for u, v in table.affinity_pods.items()]
        entries.sort(key=lambda e: pos[e[0]])
        table.affinity_pods = dict(entries)
        model.affinity = dict(table.affinity_pods)
    table.change_log = []


def session_cluster(model: LiveModel, prev: ClusterInfo, queue_infos: dict[QueueID, QueueInfo],
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


def node_changed(model: LiveModel, memo: SnapshotMemo, table: Any, old: Mapping[str, Any],
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
        if not in_group(task):
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
    model.pos[uid] = model.next_pos if ours else FOREIGN_POS + model.next_pos
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


