"""sla: jobs that waited longer than their SLA go first and are let through (Volcano's sla.go).

A job's waiting time is its PodGroup annotation `volcano.sh/sla-waiting-time` (or the older
`sla-waiting-time`), else the plugin argument `sla-waiting-time`; a Go duration (`1h2m3s`, `90s`),
positive. A job without one has no SLA.
- JobOrderFn: jobs with an SLA before jobs without; between two jobs with one, the earlier deadline
  (creation + waiting time) first.
- JobEnqueueableFn and JobPipelinedFn: Permit once the job has waited at least its waiting time
  (`now - creation`, `now` being the session's, so decisions are reproducible), else Abstain.
  A Permit lets enqueue admit the job even when other plugins of the tier abstain, and lets allocate
  keep a partially placed gang's placements (pipelined) so resources are reserved for it.
Where Volcano logs and ignores a malformed or non-positive argument, so does this plugin (the conf
parser has already rejected values that are not durations at all); a malformed annotation is
ignored with a warning, as Volcano does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.types import ABSTAIN, PERMIT, JobID
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from tidemark.apis import parse_go_duration

log = logging.getLogger(__name__)

JOB_WAITING_TIME: Final = "sla-waiting-time"
#: the PodGroup annotation keys Volcano reads, in order (v1beta1.JobWaitingTime, then the plain key)
ANNOTATION_KEYS: Final = ("volcano.sh/sla-waiting-time", JOB_WAITING_TIME)

def job_waiting_time(annotations: Mapping[str, Any]) -> float | None:
    """The per-job waiting time from PodGroup annotations (first valid positive key), in seconds."""
    for key in ANNOTATION_KEYS:
        raw = annotations.get(key)
        if raw is None:
            continue
        v = parse_go_duration(str(raw))
        if v is None or v <= 0:
            log.warning("sla: annotation %s=%r is not a positive duration; ignored", key, raw)
            continue
        return v
    return None


class SlaPlugin(Plugin):
    name = "sla"

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        #: the global waiting time (seconds), None when unset or invalid
        self.waiting: float | None = None
        if JOB_WAITING_TIME in arguments:
            raw = arguments.get(JOB_WAITING_TIME)
            v = parse_go_duration(raw) if isinstance(raw, str) else None
            if v is None:
                log.error("sla: cannot parse the global %s %r; ignored", JOB_WAITING_TIME, raw)
            elif v <= 0:
                log.warning("sla: invalid global waiting time %r; ignored", raw)
            else:
                self.waiting = v
        self._per_job: dict[JobID, float | None] = {}

    def waiting_time(self, job: JobInfo) -> float | None:
        """The job's own waiting time (annotation), else the global one (Volcano's readJobWaitingTime)."""
        if job.uid in self._per_job:
            own = self._per_job[job.uid]
        else:
            own = job_waiting_time(job.pod_group.annotations)
            if own is None:
                own = job.waiting_time
            self._per_job[job.uid] = own
        return own if own is not None else self.waiting

    def on_session_open(self, ssn: Session) -> None:
        self._per_job = {}

        def job_order(lv: JobInfo, rv: JobInfo) -> int:
            lw, rw = self.waiting_time(lv), self.waiting_time(rv)
            if lw is None:
                return 0 if rw is None else 1
            if rw is None:
                return -1
            ld, rd = lv.creation + lw, rv.creation + rw
            if ld < rd:
                return -1
            if ld > rd:
                return 1
            return 0

        def job_order_key(job: JobInfo) -> tuple[int, float]:
            w = self.waiting_time(job)
            return (1, 0.0) if w is None else (0, job.creation + w)

        def permit(job: JobInfo) -> int:
            w = self.waiting_time(job)
            if w is None:
                return ABSTAIN
            if ssn.now - job.creation < w:
                return ABSTAIN
            return PERMIT

        ssn.add_job_order_fn(self.name, job_order)
        ssn.add_job_order_key_fn(self.name, job_order_key)
        ssn.add_job_enqueueable_fn(self.name, permit)
        ssn.add_job_pipelined_fn(self.name, permit)

    def on_session_close(self, ssn: Session) -> None:
        self._per_job = {}


SPEC = PluginSpec(
    name="sla",
    build=SlaPlugin,
    arguments=(
        ArgSpec(
            JOB_WAITING_TIME,
            "duration",
            "",
            "how long a job may wait before it goes first and is enqueued/pipelined at once; a PodGroup's "
            "sla-waiting-time annotation overrides it",
        ),
    ),
    doc="Jobs waiting longer than their SLA go first and are enqueued/pipelined.",
)
