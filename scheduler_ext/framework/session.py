"""Session: one scheduling cycle over a cluster snapshot (Volcano's framework/session.go, framework.go).

`open_session` builds the plugins of the conf's tiers (each registers callbacks), actions run,
`close_session` lets plugins summarise and computes every PodGroup's phase. Side effects are only
recorded here (`binds`, `evictions`, PodGroup phases); the caller applies or prints them.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.job import (
    PG_COMPLETED,
    PG_COND_UNSCHEDULABLE,
    PG_INQUEUE,
    PG_PENDING,
    PG_RUNNING,
    PG_UNKNOWN,
    JobInfo,
)
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.resource import Resource
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import (
    ALLOCATED,
    BINDING,
    RELEASING,
    RUNNING,
    FitError,
    StatusCode,
    TaskID,
    TaskStatus,
)
from scheduler_ext.framework.conf import SchedulerConf
from scheduler_ext.framework.interface import Plugin, PluginSpec
from scheduler_ext.framework.node_search import NodeLocalCache, resource_shape
from scheduler_ext.framework.session_plugins import CycleState, Event, PluginTables
from scheduler_ext.framework.statement import Statement
from scheduler_ext.framework.util import PriorityQueue

log = logging.getLogger(__name__)
_session_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """Scheduler-wide knobs outside the conf (Volcano's command-line flags).

    percentage_of_nodes_to_find: 100 scores every feasible node (the default here, for reproducible
    results); 1..99 stops the predicate search after that share of nodes (at least
    `min_nodes_to_find`), as kube-scheduler's percentageOfNodesToFind; 0 is Volcano's adaptive
    percentage (50 - nodes/125, at least `min_percentage_of_nodes_to_find`).
    """

    percentage_of_nodes_to_find: int = 100
    min_nodes_to_find: int = 100
    min_percentage_of_nodes_to_find: int = 5


@dataclass(frozen=True, slots=True)
class BindRecord:
    task: TaskInfo
    node: str


@dataclass(frozen=True, slots=True)
class EvictRecord:
    task: TaskInfo
    reason: str


class Session(PluginTables):
    """The mutable state of one cycle plus the plugin callback tables."""

    def __init__(
        self,
        cluster: ClusterInfo,
        conf: SchedulerConf,
        *,
        options: SessionOptions | None = None,
    ) -> None:
        super().__init__()
        self.uid = f"session-{next(_session_ids)}"
        self.cluster = cluster
        self.conf = conf
        self.tiers = conf.tiers
        self.configurations = conf.configurations
        self.enabled_actions = frozenset(conf.actions)
        self.options = options or SessionOptions()
        self.now = cluster.now
        self.table = cluster.table
        self.jobs = cluster.jobs
        self.nodes = cluster.nodes
        self.node_list = cluster.node_list
        self.queues = cluster.queues
        self.priority_classes = cluster.priority_classes
        self.revocable_nodes = {n.name: n for n in cluster.node_list if n.revocable_zone}
        self.total_resource = Resource()
        for n in self.node_list:
            self.total_resource.add(n.allocatable)
        self.plugins: dict[str, Plugin] = {}
        self.binds: list[BindRecord] = []
        self.evictions: list[EvictRecord] = []
        self.dirty_jobs: set[str] = set()
        self.pod_group_old_phase: dict[str, str] = {j.uid: j.pod_group.phase for j in self.jobs.values()}
        self.cycle_states: dict[TaskID, CycleState] = {}
        #: rotating start of the predicate search when sampling nodes (Volcano's lastProcessedNodeIndex)
        self.last_processed_node_index = 0
        #: every node index (position in node_list == row in table)
        self.all_nodes = np.arange(len(self.node_list), dtype=np.intp)
        #: per-shape arrays over all nodes, refreshed on changed rows (see node_search.NodeLocalCache)
        self.node_cache = NodeLocalCache(self.table)
        self.closed = False

    def __repr__(self) -> str:
        return f"Session({self.uid}: {len(self.jobs)} jobs, {len(self.nodes)} nodes, {len(self.queues)} queues)"

    # --- arguments ------------------------------------------------------------------------------
    def action_arguments(self, action: str) -> Mapping[str, Any]:
        return self.conf.action_arguments(action)

    def hierarchy_enabled(self, plugin_name: str) -> bool:
        opt = self.plugin_option(plugin_name)
        return bool(opt is not None and opt.hierarchy)

    def get_cycle_state(self, uid: TaskID) -> CycleState:
        state = self.cycle_states.get(uid)
        if state is None:
            state = self.cycle_states[uid] = {}
        return state

    # --- events ----------------------------------------------------------------------------------
    def fire_allocate(self, task: TaskInfo) -> Exception | None:
        """Tell kube-scheduler's node view and every plugin that the task now occupies its node."""
        node = self.nodes.get(task.node_name)
        if node is not None:
            self.table.kube_add(node.index, task)
        err: Exception | None = None
        for eh in self.event_handlers:
            if eh.allocate_func is not None:
                ev = Event(task)
                eh.allocate_func(ev)
                if ev.err is not None and err is None:
                    err = ev.err
        return err

    def fire_deallocate(self, task: TaskInfo) -> None:
        node = self.nodes.get(task.node_name)
        if node is not None:
            self.table.kube_remove(node.index, task)
        for eh in self.event_handlers:
            if eh.deallocate_func is not None:
                eh.deallocate_func(Event(task))

    # --- operations --------------------------------------------------------------------------------
    def statement(self) -> Statement:
        return Statement(self)

    def pipeline(self, task: TaskInfo, hostname: str) -> None:
        """Session-level pipeline (no statement, never rolled back)."""
        job = self.jobs.get(task.job)
        if job is None:
            raise ValueError(f"failed to find job {task.job} when pipeline")
        from scheduler_ext.api.types import PIPELINED

        job.update_task_status(task, PIPELINED)
        task.node_name = hostname
        node = self.nodes.get(hostname)
        if node is None:
            raise ValueError(f"failed to find node {hostname}")
        node.add_task(task)
        self.fire_allocate(task)

    def allocate(self, task: TaskInfo, node: NodeInfo) -> None:
        """Session-level allocate (backfill): binds the job's allocated tasks once the job is ready."""
        job = self.jobs.get(task.job)
        if job is None:
            raise ValueError(f"failed to find job {task.job}")
        job.update_task_status(task, ALLOCATED)
        task.node_name = node.name
        node.add_task(task)
        self.fire_allocate(task)
        if self.job_ready(job):
            for t in list(job.tasks_in(ALLOCATED).values()):
                self.dispatch(t)

    def dispatch(self, task: TaskInfo) -> None:
        """Hand the task to the binder (recorded in `binds`) and mark it Binding."""
        self.binds.append(BindRecord(task, task.node_name))
        job = self.jobs.get(task.job)
        if job is not None:
            job.update_task_status(task, BINDING)

    def evict(self, reclaimee: TaskInfo, reason: str) -> None:
        """Session-level evict (no statement)."""
        self.record_eviction(reclaimee, reason)
        self.restatus_on_node(reclaimee, RELEASING)
        self.fire_deallocate(reclaimee)

    def restatus_on_node(self, task: TaskInfo, status: TaskStatus) -> None:
        """Change a task's status while it stays on its node: the job's index and the node's accounting."""
        job = self.jobs.get(task.job)
        if job is not None:
            job.update_task_status(task, status)
        node = self.nodes.get(task.node_name)
        if node is not None:
            node.update_task(task)

    def record_eviction(self, task: TaskInfo, reason: str) -> None:
        self.evictions.append(EvictRecord(task, reason))

    def update_pod_group_condition(self, job: JobInfo, cond: dict[str, Any]) -> None:
        conds = job.pod_group.conditions
        for i, c in enumerate(conds):
            if c.get("type") == cond.get("type"):
                conds[i] = cond
                return
        conds.append(cond)

    def mark_job_dirty(self, uid: str) -> None:
        self.dirty_jobs.add(uid)

    # --- predicates as actions use them ----------------------------------------------------------
    def predicate_for_allocate_action(self, task: TaskInfo, node: NodeInfo) -> FitError | None:
        """Any predicate failure rules the node out."""
        return self.predicate_fn(task, node)

    def predicate_for_preempt_action(self, task: TaskInfo, node: NodeInfo) -> FitError | None:
        """Only failures eviction cannot fix (UnschedulableAndUnresolvable, Error, Skip, Wait) rule it out."""
        err = self.predicate_fn(task, node)
        if err is None:
            return None
        if err.contains(
            StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, StatusCode.ERROR, StatusCode.SKIP, StatusCode.WAIT
        ):
            return err
        return None

    def filter_out_unschedulable_and_unresolvable_nodes_for_task(self, task: TaskInfo) -> list[NodeInfo]:
        job = self.jobs.get(task.job)
        fe = job.nodes_fit_errors.get(task.uid) if job is not None else None
        if fe is None:
            return list(self.node_list)
        skip = fe.unschedulable_and_unresolvable_nodes()
        if not skip:
            return list(self.node_list)
        return [n for n in self.node_list if n.name not in skip]

    def build_victims_priority_queue(self, victims: list[TaskInfo], preemptor: TaskInfo) -> PriorityQueue[TaskInfo]:
        """Victims ordered for eviction (Volcano's BuildVictimsPriorityQueue)."""

        def job_then_task(lj: JobInfo, rj: JobInfo, lt: TaskInfo, rt: TaskInfo) -> bool:
            cmp = self.job_order_compare(lj, rj)
            if cmp != 0:
                return cmp > 0
            return not self.task_order_fn(lt, rt)

        def less(lv: TaskInfo, rv: TaskInfo) -> bool:
            if lv.job == rv.job:
                return not self.task_order_fn(lv, rv)
            lj = self.jobs.get(lv.job)
            rj = self.jobs.get(rv.job)
            pj = self.jobs.get(preemptor.job)
            if lj is None or rj is None:
                if lj is None and rj is None:
                    return not self.task_order_fn(lv, rv)
                return lj is None
            if pj is None:
                return job_then_task(lj, rj, lv, rv)
            if lj.queue != rj.queue:
                return self.victim_queue_order_fn(
                    self.queues[lj.queue], self.queues[rj.queue], self.queues[pj.queue]
                )
            return job_then_task(lj, rj, lv, rv)

        pq: PriorityQueue[TaskInfo] = PriorityQueue(less)
        for v in victims:
            pq.push(v)
        return pq

    # --- priority queues with the session's orders --------------------------------------------------
    def new_job_queue(self) -> PriorityQueue[JobInfo]:
        return PriorityQueue(self.job_order_fn, self.job_order_key_fn())

    def new_queue_queue(self) -> PriorityQueue[Any]:
        return PriorityQueue(self.queue_order_fn, self.queue_order_key_fn())

    def new_task_queue(self) -> PriorityQueue[TaskInfo]:
        return PriorityQueue(self.task_order_fn, self.task_order_key_fn())

    # --- node-side helpers ---------------------------------------------------------------------------
    def node_indices(self, nodes: list[NodeInfo] | None = None) -> np.ndarray:
        """Table indices of `nodes` (all nodes when None)."""
        if nodes is None:
            return self.all_nodes
        return np.array([n.index for n in nodes], dtype=np.intp)

    def node_local_scores(
        self, key: str, fn: Callable[[TaskInfo, np.ndarray], np.ndarray], task: TaskInfo, nodes: np.ndarray
    ) -> np.ndarray:
        full = self.node_cache.get(("score", key, resource_shape(task)), lambda idx: fn(task, idx))
        return full if nodes is self.all_nodes else full[nodes]

    def node_at(self, index: int) -> NodeInfo:
        return self.node_list_by_index[index]

    @property
    def node_list_by_index(self) -> list[NodeInfo]:
        # node_list is built in table order, so position == table index
        return self.node_list


# --- open / close ---------------------------------------------------------------------------------


def open_session(
    cluster: ClusterInfo,
    conf: SchedulerConf,
    plugins: Mapping[str, PluginSpec],
    *,
    options: SessionOptions | None = None,
) -> Session:
    """Build the session and let every configured plugin register its callbacks, tier by tier."""
    ssn = Session(cluster, conf, options=options)
    for tier in conf.tiers:
        for opt in tier.plugins:
            spec = plugins.get(opt.name)
            if spec is None:
                continue
            plugin = spec.build(opt.arguments)
            ssn.plugins[opt.name] = plugin
            plugin.on_session_open(ssn)
    return ssn


def close_session(ssn: Session) -> None:
    """Plugins summarise (e.g. gang's Unschedulable condition), then each PodGroup's phase is set."""
    for plugin in ssn.plugins.values():
        plugin.on_session_close(ssn)
    for job in ssn.jobs.values():
        job.pod_group.phase = pod_group_phase(ssn, job)
    ssn.closed = True


def pod_group_phase(ssn: Session, job: JobInfo) -> str:
    """Volcano's getPodGroupPhase for the job at session end."""
    unschedulable = any(
        c.get("type") == PG_COND_UNSCHEDULABLE and c.get("status") == "True" and c.get("transitionID") == ssn.uid
        for c in job.pod_group.conditions
    )
    if job.tasks_in(RUNNING) and unschedulable:
        return PG_UNKNOWN
    scheduled = job.scheduled_task_num() + job.releasing_scheduled_task_num()
    completed = job.completed_task_num()
    if scheduled >= job.pod_group.min_member:
        return PG_COMPLETED if scheduled == completed else PG_RUNNING
    if job.pod_group.phase != PG_INQUEUE:
        return PG_PENDING
    return job.pod_group.phase


def run_actions(ssn: Session, actions: list[Callable[[Session], None]]) -> None:
    for act in actions:
        act(ssn)
