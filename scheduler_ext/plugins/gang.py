"""gang: all-or-nothing for a job's minMember tasks (Volcano's gang.go)."""

from __future__ import annotations

from typing import Final

from scheduler_ext.api.job import PG_COND_SCHEDULED, PG_COND_UNSCHEDULABLE, JobInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PENDING, PERMIT, PIPELINED, REJECT, ValidateResult, allocated_status
from scheduler_ext.framework.interface import Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session

NOT_ENOUGH_PODS_OF_TASK_REASON: Final = "NotEnoughPodsOfTask"
NOT_ENOUGH_PODS_REASON: Final = "NotEnoughTasks"
NOT_ENOUGH_RESOURCES_REASON: Final = "NotEnoughResources"


class GangPlugin(Plugin):
    name = "gang"

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    def on_session_open(self, ssn: Session) -> None:
        def valid(job: JobInfo) -> ValidateResult | None:
            if not job.check_task_valid():
                return ValidateResult(
                    False, NOT_ENOUGH_PODS_OF_TASK_REASON, "Not enough valid pods of each task for gang-scheduling"
                )
            vtn = job.valid_task_num()
            if vtn < job.min_available:
                return ValidateResult(
                    False,
                    NOT_ENOUGH_PODS_REASON,
                    f"Not enough valid tasks for gang-scheduling, valid: {vtn}, min: {job.min_available}",
                )
            return None

        ssn.add_job_valid_fn(self.name, valid)

        def preemptable(_preemptor: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            victims: list[TaskInfo] = []
            occupied: dict[str, int] = {}
            for preemptee in preemptees:
                job = ssn.jobs.get(preemptee.job)
                if job is None:
                    continue
                if job.uid not in occupied:
                    occupied[job.uid] = job.ready_task_num()
                if occupied[job.uid] > job.min_available:
                    occupied[job.uid] -= 1
                    victims.append(preemptee)
            return victims, PERMIT

        ssn.add_reclaimable_fn(self.name, preemptable)
        ssn.add_preemptable_fn(self.name, preemptable)
        ssn.add_unified_evictable_fn(self.name, lambda _ctx, cands: (list(cands), PERMIT))

        def job_order(lv: JobInfo, rv: JobInfo) -> int:
            lr, rr = lv.is_ready(), rv.is_ready()
            if lr and rr:
                return 0
            if lr:
                return 1
            if rr:
                return -1
            return 0

        ssn.add_job_order_fn(self.name, job_order)
        ssn.add_job_order_key_fn(self.name, lambda j: 1 if j.is_ready() else 0)
        # both pure: the cheap count first
        ssn.add_job_ready_fn(self.name, lambda j: j.is_ready() and j.check_task_ready())

        def pipelined(job: JobInfo) -> int:
            return PERMIT if job.check_task_pipelined() and job.is_pipelined() else REJECT

        ssn.add_job_pipelined_fn(self.name, pipelined)
        ssn.add_job_starving_fns(self.name, lambda j: j.is_starving())

    def on_session_close(self, ssn: Session) -> None:
        """Record on each PodGroup whether its gang could be scheduled (the Unschedulable condition)."""
        for job in ssn.jobs.values():
            if not job.tasks:
                continue
            if not job.is_ready():
                if _skip_unschedulable_for_releasing(job):
                    continue
                schedulable = job.ready_task_num() + sum(
                    1
                    for t in job.tasks_in(PENDING).values()
                    if t.last_transaction is not None and allocated_status(t.last_transaction[1])
                )
                unready = job.min_available - schedulable
                msg = f"{unready}/{len(job.tasks)} tasks in gang unschedulable: {job.fit_error()}"
                ssn.update_pod_group_condition(
                    job,
                    {
                        "type": PG_COND_UNSCHEDULABLE,
                        "status": "True",
                        "transitionID": ssn.uid,
                        "reason": NOT_ENOUGH_RESOURCES_REASON,
                        "message": msg,
                    },
                )
            else:
                ssn.update_pod_group_condition(
                    job,
                    {
                        "type": PG_COND_SCHEDULED,
                        "status": "True",
                        "transitionID": ssn.uid,
                        "reason": "tasks in gang are ready to be scheduled",
                        "message": "",
                    },
                )


def _skip_unschedulable_for_releasing(job: JobInfo) -> bool:
    releasing = job.releasing_scheduled_task_num()
    if releasing == 0:
        return False
    if job.tasks_in(PENDING) or job.tasks_in(PIPELINED):
        return False
    return job.scheduled_task_num() + releasing >= job.min_available


SPEC = PluginSpec(name="gang", build=GangPlugin, doc="Gang scheduling: a job runs only with minMember tasks.")
