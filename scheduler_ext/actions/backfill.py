"""backfill: place BestEffort tasks (no requests) of non-pending jobs (Volcano's backfill.go).

Tasks are picked in queue, job and task order; pipelined BestEffort tasks are taken back first. Each
task goes through PrePredicate and the predicates (no resource fit: it requests nothing) and lands
on the best-scored node through Session.allocate, which binds once the job is ready.
"""

from __future__ import annotations

import logging
from typing import Final

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PENDING, PIPELINED, FitErrors, JobID, QueueID, Status, StatusCode
from scheduler_ext.framework.interface import Action, ActionSpec, ArgSpec
from scheduler_ext.framework.node_search import PredicateHelper, select_best_node
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.util import PriorityQueue

log = logging.getLogger(__name__)

PREDICATE_ERROR_CACHE_KEY: Final = "predicateErrorCacheEnable"


class BackfillAction(Action):
    name = "backfill"

    def execute(self, ssn: Session) -> None:
        enable_cache = ssn.conf.action_arguments(self.name).get_bool(PREDICATE_ERROR_CACHE_KEY, True)
        all_nodes = ssn.node_indices()
        for task in self.pick_up_pending_tasks(ssn):
            job = ssn.jobs[task.job]
            err = ssn.pre_predicate_fn(task)
            if err is not None:
                fe = FitErrors()
                fe.set_group_error(list(ssn.table.names), (Status(StatusCode.ERROR, err),))
                job.nodes_fit_errors[task.uid] = fe
                continue
            ph = PredicateHelper(ssn, enable_cache)
            passing, fit_errors = ph.predicate_nodes(task, all_nodes, resource_fit=False)
            if len(passing) == 0:
                job.nodes_fit_errors[task.uid] = fit_errors
                continue
            node, _ = select_best_node(ssn, task, passing)
            if node is None:
                continue
            try:
                ssn.allocate(task, node)
            except ValueError as e:
                log.error("backfill: failed to bind %s on %s: %s", task.key, node.name, e)
                fe = FitErrors()
                fe.set_node_error(node.name, e)
                job.nodes_fit_errors[task.uid] = fe

    @staticmethod
    def pick_up_pending_tasks(ssn: Session) -> list[TaskInfo]:
        queues: PriorityQueue[QueueInfo] = ssn.new_queue_queue()
        jobs: dict[QueueID, PriorityQueue[JobInfo]] = {}
        tasks: dict[JobID, PriorityQueue[TaskInfo]] = {}
        for job in ssn.jobs.values():
            if job.is_pending():
                continue
            vr = ssn.job_valid(job)
            if vr is not None and not vr.passed:
                continue
            queue = ssn.queues.get(job.queue)
            if queue is None:
                continue
            for task in list(job.tasks_in(PENDING).values()):
                if not task.best_effort or task.sch_gated:
                    continue
                tasks.setdefault(job.uid, ssn.new_task_queue()).push(task)
            for task in list(job.tasks_in(PIPELINED).values()):
                if not task.best_effort:
                    continue
                ssn.statement().unpipeline(task)
                tasks.setdefault(job.uid, ssn.new_task_queue()).push(task)
            if job.uid not in tasks:
                continue
            if queue.uid not in jobs:
                queues.push(queue)
                jobs[queue.uid] = ssn.new_job_queue()
            jobs[queue.uid].push(job)
        out: list[TaskInfo] = []
        while not queues.empty():
            queue = queues.pop()
            assert queue is not None
            jq = jobs[queue.uid]
            while not jq.empty():
                popped = jq.pop()
                assert popped is not None
                tq = tasks[popped.uid]
                while not tq.empty():
                    t = tq.pop()
                    assert t is not None
                    out.append(t)
        return out


SPEC = ActionSpec(
    name="backfill",
    build=BackfillAction,
    arguments=(
        ArgSpec(PREDICATE_ERROR_CACHE_KEY, "bool", True, "skip nodes where a task of the same job role already failed"),
    ),
    doc="Place BestEffort tasks on any node that passes the predicates.",
)
