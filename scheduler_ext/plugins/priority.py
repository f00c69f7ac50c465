"""priority: order jobs and tasks by priority; lower-priority work may be preempted (Volcano's priority.go)."""

from __future__ import annotations

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PERMIT
from scheduler_ext.framework.interface import Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session


class PriorityPlugin(Plugin):
    name = "priority"

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    def on_session_open(self, ssn: Session) -> None:
        def task_order(lv: TaskInfo, rv: TaskInfo) -> int:
            if lv.priority == rv.priority:
                return 0
            return -1 if lv.priority > rv.priority else 1

        ssn.add_task_order_fn(self.name, task_order)
        ssn.add_task_order_key_fn(self.name, lambda t: -t.priority)

        def job_order(lv: JobInfo, rv: JobInfo) -> int:
            if lv.priority > rv.priority:
                return -1
            if lv.priority < rv.priority:
                return 1
            return 0

        ssn.add_job_order_fn(self.name, job_order)
        ssn.add_job_order_key_fn(self.name, lambda j: -j.priority)

        def preemptable(preemptor: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            pjob = ssn.jobs.get(preemptor.job)
            if pjob is None:
                return [], PERMIT
            victims: list[TaskInfo] = []
            for preemptee in preemptees:
                rjob = ssn.jobs.get(preemptee.job)
                if rjob is None:
                    continue
                if rjob.uid != pjob.uid:
                    # between jobs: only strictly lower job priority
                    if rjob.priority < pjob.priority:
                        victims.append(preemptee)
                elif preemptee.priority < preemptor.priority:
                    # same job: compare task priorities
                    victims.append(preemptee)
            return victims, PERMIT

        ssn.add_preemptable_fn(self.name, preemptable)

        def starving(job: JobInfo) -> bool:
            return job.ready_task_num() + job.waiting_task_num() < len(job.tasks)

        ssn.add_job_starving_fns(self.name, starving)


SPEC = PluginSpec(name="priority", build=PriorityPlugin, doc="Job and task order by priority; preemption by priority.")
