"""allocate: place pending tasks of Inqueue jobs on nodes (Volcano's allocate.go, flat path).

Queues take turns in queue order; each turn pops the queue's first job (job order) and allocates its
tasks (task order) until the job is ready (gang), committing the statement only when it is; a job
that is merely pipelined keeps its placements in the session without binding. Per task: queue
Allocatable check, PrePredicate, predicates over all nodes (resource fit against future idle first),
then the best node among those where the task fits idle now, else among those where it fits once
releasing resources are freed (pipelined). Hyper-node (network topology) scheduling is not
implemented: every job takes the flat path.
"""

from __future__ import annotations

import logging
from typing import Final

import numpy as np

from scheduler_ext.api.job import PG_INQUEUE, JobInfo
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PENDING, FitErrors, JobID, QueueID, Status, StatusCode
from scheduler_ext.framework.interface import Action, ActionSpec, ArgSpec
from scheduler_ext.framework.node_search import PredicateHelper, fit_mask, select_best_node
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.statement import Statement
from scheduler_ext.framework.util import PriorityQueue

log = logging.getLogger(__name__)

PREDICATE_ERROR_CACHE_KEY: Final = "predicateErrorCacheEnable"


def fits_node(ssn: Session, task: TaskInfo, node: NodeInfo, base: np.ndarray, headroom: np.ndarray | None) -> bool:
    """`task.InitResreq.LessEqual(base[node] (+ headroom), Zero)` for one node."""
    cols = task.init_check_cols
    avail = base[node.index, cols]
    if headroom is not None:
        avail = avail + headroom[node.index, cols]
    req = task.init_vec[cols]
    return bool(((req < avail) | (np.abs(req - avail) < 0.1)).all())


class AllocateAction(Action):
    name = "allocate"

    def __init__(self) -> None:
        self.enable_predicate_error_cache = True

    def execute(self, ssn: Session) -> None:
        self.enable_predicate_error_cache = ssn.conf.action_arguments(self.name).get_bool(
            PREDICATE_ERROR_CACHE_KEY, True
        )
        queues: PriorityQueue[QueueInfo] = ssn.new_queue_queue()
        jobs_by_queue: dict[QueueID, PriorityQueue[JobInfo]] = {}
        tasks_by_job: dict[JobID, PriorityQueue[TaskInfo]] = {}
        with_enqueue = "enqueue" in ssn.enabled_actions
        for job in ssn.jobs.values():
            if job.is_pending():
                if with_enqueue:
                    continue
                # no enqueue action configured: allocate admits pending jobs itself
                job.pod_group.phase = PG_INQUEUE
            vr = ssn.job_valid(job)
            if vr is not None and not vr.passed:
                log.debug("allocate: skip job %s: %s %s", job.uid, vr.reason, vr.message)
                continue
            if job.queue not in ssn.queues:
                log.warning("allocate: skip job %s: queue %s not found", job.uid, job.queue)
                continue
            tasks = ssn.new_task_queue()
            for task in job.tasks_in(PENDING).values():
                if task.sch_gated:
                    continue
                if task.resreq.is_empty():
                    continue  # BestEffort: left to backfill
                tasks.push(task)
            if tasks.empty():
                continue
            jq = jobs_by_queue.get(job.queue)
            if jq is None:
                jq = jobs_by_queue[job.queue] = ssn.new_job_queue()
                queues.push(ssn.queues[job.queue])
            jq.push(job)
            tasks_by_job[job.uid] = tasks

        while not queues.empty():
            queue = queues.pop()
            assert queue is not None
            if ssn.overused(queue):
                log.debug("allocate: queue %s is overused", queue.name)
                continue
            jobs = jobs_by_queue.get(queue.uid)
            if jobs is None or jobs.empty():
                continue
            popped = jobs.pop()
            assert popped is not None
            job = popped
            tasks = tasks_by_job[job.uid]
            stmt = self.allocate_resources_for_tasks(ssn, job, tasks)
            if stmt is not None and ssn.job_ready(job):
                stmt.commit()
                if not tasks.empty():
                    jobs.push(job)
            queues.push(queue)

    def allocate_resources_for_tasks(
        self, ssn: Session, job: JobInfo, tasks: PriorityQueue[TaskInfo]
    ) -> Statement | None:
        queue = ssn.queues[job.queue]
        all_nodes = ssn.node_indices()
        if len(all_nodes) == 0:
            return None
        stmt = ssn.statement()
        ph = PredicateHelper(ssn, self.enable_predicate_error_cache)
        table = ssn.table
        while not tasks.empty():
            task = tasks.pop()
            assert task is not None
            if not ssn.allocatable(queue, task):
                log.debug("allocate: queue %s is overused when considering task %s", queue.name, task.name)
                continue
            if task.sch_gated:
                continue
            if job.task_has_fit_errors(task):
                fe = FitErrors()
                fe.set_error(f"Task {task.name} with role spec {task.task_role} has already predicated failed, skip")
                job.nodes_fit_errors[task.uid] = fe
                continue
            err = ssn.pre_predicate_fn(task)
            if err is not None:
                fe = FitErrors()
                fe.set_group_error(list(table.names), (Status(StatusCode.ERROR, err),))
                job.nodes_fit_errors[task.uid] = fe
                if job.need_continue_allocating():
                    continue
                break

            headroom, hkey = ssn.fit_headroom_keyed(task, all_nodes) if ssn.fit_headroom_fns else (None, None)
            passing = np.zeros(0, dtype=np.intp)
            fit_errors: FitErrors | None = None
            nominated = str(((task.pod.get("status") or {}).get("nominatedNodeName")) or "")
            if nominated and nominated in ssn.nodes:
                nn = ssn.nodes[nominated]
                if fits_node(ssn, task, nn, table.future_idle, headroom):
                    idx = np.array([nn.index], dtype=np.intp)
                    passing, fit_errors = ph.predicate_nodes(
                        task, idx, resource_fit=True, headroom=headroom, headroom_key=hkey
                    )
            if len(passing) == 0:
                passing, fit_errors = ph.predicate_nodes(
                    task, all_nodes, resource_fit=True, headroom=headroom, headroom_key=hkey
                )
            if len(passing) == 0:
                job.nodes_fit_errors[task.uid] = fit_errors if fit_errors is not None else FitErrors()
                if job.need_continue_allocating():
                    continue
                break

            best = self.prioritize_nodes(ssn, task, passing, headroom, hkey, fits_future=True)
            if best is None:
                continue
            self.allocate_resources_for_task(ssn, stmt, task, best, headroom, hkey)
            if ssn.job_ready(job):
                break

        if ssn.job_ready(job):
            return stmt
        if ssn.job_pipelined(job):
            return stmt
        stmt.discard()
        return None

    def prioritize_nodes(
        self,
        ssn: Session,
        task: TaskInfo,
        nodes: np.ndarray,
        headroom: np.ndarray | None,
        headroom_key: object | None = None,
        *,
        fits_future: bool = False,
    ) -> NodeInfo | None:
        """Prefer nodes where the task fits idle now; otherwise those where it fits future idle.

        fits_future: every node in `nodes` is known to fit future idle with this headroom (allocate's
        candidates passed that very check), so the second group is simply the rest; whether all of
        them fit idle too is then read off the two cached full masks without indexing.
        """
        idle_ok = fit_mask(ssn, task, "idle", headroom, headroom_key)
        future_ok = fit_mask(ssn, task, "future", headroom, headroom_key)
        if fits_future:
            if not (future_ok & ~idle_ok).any():  # whatever fits future idle fits idle: all of `nodes`
                best, _score = select_best_node(ssn, task, nodes)
                return best
            idle_sub = idle_ok if nodes is ssn.all_nodes else idle_ok[nodes]
            if idle_sub.all():
                best, _score = select_best_node(ssn, task, nodes)
                return best
            return _best_of_first_group(ssn, task, (nodes[idle_sub], nodes[~idle_sub]))
        if nodes is not ssn.all_nodes:
            idle_ok = idle_ok[nodes]
            future_ok = future_ok[nodes]
        if idle_ok.all():
            # every candidate fits idle: keep the array itself (all nodes stays all nodes, which lets
            # the node-local score caches hand back their arrays without indexing)
            best, _score = select_best_node(ssn, task, nodes)
            return best
        return _best_of_first_group(ssn, task, (nodes[idle_ok], nodes[future_ok & ~idle_ok]))

    def allocate_resources_for_task(
        self,
        ssn: Session,
        stmt: Statement,
        task: TaskInfo,
        node: NodeInfo,
        headroom: np.ndarray | None,
        headroom_key: object | None = None,
    ) -> None:
        if headroom is None or headroom_key is not None:
            # the cached masks prioritize_nodes just used (same formula as fits_node, node unchanged since)
            fits_idle = bool(fit_mask(ssn, task, "idle", headroom, headroom_key)[node.index])
        else:
            fits_idle = fits_node(ssn, task, node, ssn.table.idle, headroom)
        try:
            if fits_idle:
                stmt.allocate(task, node)
            elif fits_node(ssn, task, node, ssn.table.future_idle, headroom):
                stmt.pipeline(task, node.name, False)
        except ValueError as e:
            log.error("allocate: %s", e)


SPEC = ActionSpec(
    name="allocate",
    build=AllocateAction,
    arguments=(
        ArgSpec(PREDICATE_ERROR_CACHE_KEY, "bool", True, "skip nodes where a task of the same job role already failed"),
    ),
    doc="Place pending tasks of Inqueue jobs, gang by gang.",
)


def _best_of_first_group(ssn: Session, task: TaskInfo, groups: tuple[np.ndarray, ...]) -> NodeInfo | None:
    """The best node of the first group that has one (an empty group has none)."""
    for group in groups:
        best, _score = select_best_node(ssn, task, group)
        if best is not None:
            return best
    return None
