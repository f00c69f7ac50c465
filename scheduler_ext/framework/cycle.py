"""One scheduling cycle: open a session over a snapshot, run the conf's actions, close it.

Both `simulate` (scheduler_ext.simulate) and the live loop (scheduler_ext.run.scheduler) call
`run_session`, so the two cannot drift; `why_pending` gives both the same explanation of a task
that stayed pending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.types import JobID, TaskID
from scheduler_ext.framework.conf import SchedulerConf
from scheduler_ext.framework.interface import Action, PluginSpec
from scheduler_ext.framework.session import Session, SessionOptions, close_session, open_session

log = logging.getLogger(__name__)


def why_pending(ssn: Session, task_uid: TaskID, job_uid: JobID) -> str:
    """Why a task that was pending at the start of the session is still pending (`simulate -o table`
    and the Unschedulable reasons `run` writes give the same words)."""
    job = ssn.jobs.get(job_uid)
    if job is None:
        return "its PodGroup or queue does not exist"
    fe = job.nodes_fit_errors.get(task_uid)
    if fe is not None:
        return fe.error()
    if job.is_pending():
        return f"PodGroup {job.uid} is Pending (not enqueued: queue quota or cluster capacity)"
    for c in job.pod_group.conditions:
        if c.get("type") == "Unschedulable" and c.get("transitionID") == ssn.uid:
            return str(c.get("message") or "")
    queue = ssn.queues.get(job.queue)
    if queue is not None and not queue.is_open():
        return f"queue {queue.name} is {queue.state}"
    return "not placed this cycle (queue share used up or gang not satisfiable)"


def run_session(
    cluster: ClusterInfo,
    conf: SchedulerConf,
    plugins: Mapping[str, PluginSpec],
    actions: Sequence[Action],
    *,
    options: SessionOptions | None = None,
    implicit_phases: dict[str, str] | None = None,
    on_action: Callable[[str, float], None] | None = None,
    log_prefix: str = "",
) -> Session:
    """One scheduling cycle over a snapshot, shared by `simulate` and `run` (scheduler_ext.run).

    Implicit PodGroups have no object to remember their phase, so `implicit_phases` (job uid ->
    phase) carries it from one cycle to the next: restored here before the session opens and
    updated after it closes. `on_action(name, seconds)` observes each action's duration.
    Returns the closed session; its `binds`, `evictions` and PodGroup phases are the decisions.
    """
    if implicit_phases:
        for jid, phase in implicit_phases.items():
            job = cluster.jobs.get(JobID(jid))
            if job is not None and job.pod_group.implicit:
                job.pod_group.phase = phase
    ssn = open_session(cluster, conf, plugins, options=options)
    for act in actions:
        ta = time.perf_counter()
        act.execute(ssn)
        took = time.perf_counter() - ta
        log.info("%saction %s took %.3fs", log_prefix, act.name, took)
        if on_action is not None:
            on_action(act.name, took)
    close_session(ssn)
    if implicit_phases is not None:
        for j in ssn.jobs.values():
            if j.pod_group.implicit:
                implicit_phases[j.uid] = j.pod_group.phase
    return ssn
