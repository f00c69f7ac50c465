"""The kept model's state: what the last session ran on and what it was built from (scheduler_ext/model/incremental.py).

`LiveModel` holds the frozen model (api/guard.py) with the inputs of its build and the book-keeping
the incremental rebuild reads (the build's task order, each task's job and node, table rows as the
build left them); `Delta` is what one update rebuilds, handed between its steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import is_not
from typing import Any, Final

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.guard import Tracker
from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.resource import RES_PODS
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import FAILED, SUCCEEDED, JobID
from scheduler_ext.model.snapshot import (
    SnapshotMemo,
)
from tidemark.apis import ANN_GROUP_NAME

#: the NodeTable arrays a session changes (compared with the build's values at the next snapshot)
ROW_ARRAYS: Final = ("allocatable", "capacity", "idle", "used", "releasing", "pipelined", "future_idle",
                      "kube_requested", "kube_nonzero", "pod_count", "max_pods", "generation")
#: when more than this share of the tasks and jobs is to be rebuilt, the full build is cheaper
FULL_BUILD_SHARE = 0.5
#: positions of other schedulers' tasks come after all of ours (the build's order)
FOREIGN_POS: Final = 1 << 40
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
        self.pos: dict[str, int] = {u: i if u in ours else FOREIGN_POS + i
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
        self.pg_keys: list[JobID] = [job_id_of(pg) for pg in pgs]
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
        self.rows = {a: getattr(tb, a).copy() for a in ROW_ARRAYS}
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


def job_id_of(pg: Mapping[str, Any]) -> JobID:
    md = pg["metadata"]
    return JobID(f"{md.get('namespace') or 'default'}/{md['name']}")


def in_group(task: TaskInfo) -> bool:
    return bool(((task.pod.get("metadata") or {}).get("annotations") or {}).get(ANN_GROUP_NAME))


def changed_positions(old: Sequence[object], new: Sequence[object]) -> list[int]:
    return list(compress(range(len(new)), map(is_not, old, new)))


@dataclass(slots=True)
class Delta:
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


