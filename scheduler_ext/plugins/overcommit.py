"""overcommit: enqueue jobs while the cluster, inflated by a factor, has room (Volcano's overcommit.go).

idle = total * overcommit-factor - used; a job may be enqueued while the minResources of the jobs
already inqueue plus its own fit that idle, in the dimensions it asks for.
"""

from __future__ import annotations

import logging
from typing import Final

from scheduler_ext.api.job import PG_INQUEUE, PG_RUNNING, JobInfo, get_inqueue_resource
from scheduler_ext.api.resource import Resource
from scheduler_ext.api.types import PERMIT, REJECT
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session

log = logging.getLogger(__name__)
OVERCOMMIT_FACTOR: Final = "overcommit-factor"
DEFAULT_OVERCOMMIT_FACTOR: Final = 1.2


class OvercommitPlugin(Plugin):
    name = "overcommit"

    def __init__(self, arguments: Arguments) -> None:
        self.factor = arguments.get_float(OVERCOMMIT_FACTOR, DEFAULT_OVERCOMMIT_FACTOR)
        if self.factor < 1.0:
            log.warning(
                "overcommit: invalid overcommit-factor %s (must be >= 1); using %s",
                self.factor,
                DEFAULT_OVERCOMMIT_FACTOR,
            )
            self.factor = DEFAULT_OVERCOMMIT_FACTOR
        self.idle = Resource()
        self.inqueue = Resource()

    def on_session_open(self, ssn: Session) -> None:
        used = Resource()
        for node in ssn.node_list:
            used.add(node.used)
        self.idle = ssn.total_resource.clone().multi(self.factor).sub_without_assert(used)
        for job in ssn.jobs.values():
            pg = job.pod_group
            if pg.phase == PG_INQUEUE and pg.min_resources is not None:
                self.inqueue.add(job.deduct_sch_gated_resources(job.get_min_resources()))
                continue
            if pg.phase == PG_RUNNING and pg.min_resources is not None and job.allocated_task_num() >= pg.min_member:
                self.inqueue.add(job.deduct_sch_gated_resources(get_inqueue_resource(job, job.allocated)))

        def enqueueable(job: JobInfo) -> int:
            if job.pod_group.min_resources is None:
                return PERMIT
            min_req = job.get_min_resources()
            ok, _ = self.inqueue.clone().add(min_req).less_equal_with_dimension_and_resources_name(self.idle, min_req)
            return PERMIT if ok else REJECT

        def enqueued(job: JobInfo) -> None:
            if job.pod_group.min_resources is None:
                return
            self.inqueue.add(job.deduct_sch_gated_resources(job.get_min_resources()))

        ssn.add_job_enqueueable_fn(self.name, enqueueable)
        ssn.add_job_enqueued_fn(self.name, enqueued)


SPEC = PluginSpec(
    name="overcommit",
    build=OvercommitPlugin,
    arguments=(
        ArgSpec(
            OVERCOMMIT_FACTOR, "float", DEFAULT_OVERCOMMIT_FACTOR, "inflation of the cluster total for enqueue (>= 1)"
        ),
    ),
    doc="Admit jobs up to a multiple of the cluster's capacity.",
)
