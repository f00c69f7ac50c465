"""From a closed session to a plan of frozen operations for the executor (pure: no I/O, no `kubernetes`).

The session decides (binds, evictions, PodGroup phases and conditions); this module turns that into
what has to be written, compared with the objects as the session read them, so the executor only
writes what changed (house style 1: decide -> plan -> act; `run` prints nothing, it applies):

- `BindOp` / `EvictOp` for every bind and eviction the session committed;
- `PodGroupStatusOp` for each PodGroup object whose status differs from what Volcano's job status
  updater would write (phase, conditions merged by type, running/succeeded/failed counts);
  conditions compare without `transitionID`/`lastTransitionTime`, as Volcano's
  isPodGroupStatusUpdated, so a session that changes nothing writes nothing;
- `QueueStatusOp` for queues whose state (Open when empty) or PodGroup counts per phase changed;
- `QueueCreateOp` for each queue `run` needs (the `default` Queue) that the session did not see;
  once the watch shows the new Queue, its empty state is opened by a `QueueStatusOp` as for any queue;
- `PodConditionOp` for our pods left pending: `PodScheduled=False` with Volcano's
  TaskSchedulingReason (Unschedulable with the fit-error message, or Schedulable when only the
  gang held it back), only when it differs from the pod's current condition.
Implicit PodGroups (pods without a group) have no object: no status is written for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from scheduler_ext.api.job import (
    PG_COMPLETED,
    PG_COND_SCHEDULED,
    PG_COND_UNSCHEDULABLE,
    PG_INQUEUE,
    PG_PENDING,
    PG_RUNNING,
    PG_UNKNOWN,
    JobInfo,
)
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import ALLOCATED, FAILED, PENDING, PIPELINED, RUNNING, SUCCEEDED
from scheduler_ext.framework.cycle import why_pending  # the same explanation `simulate -o table` prints
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.victims import PG_COND_EVICTED

JSON = dict[str, Any]
#: Volcano's pod condition reasons (api/types.go PodReasonUnschedulable / PodReasonSchedulable)
REASON_UNSCHEDULABLE: Final = "Unschedulable"
REASON_SCHEDULABLE: Final = "Schedulable"
POD_SCHEDULED: Final = "PodScheduled"
#: Queue status fields that count PodGroups per phase (Volcano's QueueStatus)
QUEUE_COUNT_FIELDS: Final = {
    PG_PENDING: "pending",
    PG_RUNNING: "running",
    PG_INQUEUE: "inqueue",
    PG_UNKNOWN: "unknown",
    PG_COMPLETED: "completed",
}
_COUNT_FIELDS: Final = ("running", "succeeded", "failed")


@dataclass(frozen=True, slots=True)
class BindOp:
    uid: str
    namespace: str
    name: str
    node: str
    #: epoch seconds the pod was created (task latency metric)
    created: float
    job_name: str
    job_namespace: str
    queue: str


@dataclass(frozen=True, slots=True)
class EvictOp:
    uid: str
    namespace: str
    name: str
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class PodGroupStatusOp:
    namespace: str
    name: str
    #: resourceVersion of the object the session read (the executor's dedup key)
    resource_version: str
    #: the complete status to write (zero counts as None: removed, as Volcano's omitempty)
    status: Mapping[str, Any]
    #: (type, reason, message) of the Event recorded on the PodGroup with this change, or None
    event: tuple[str, str, str] | None
    #: the one-time conditions this session set (`ONE_TIME_CONDITIONS`): no later session sets them again, so on a
    #: conflict (409) the executor re-reads the PodGroup and writes them onto the newer status instead of dropping them
    kept_conditions: tuple[Mapping[str, Any], ...] = ()


#: PodGroup conditions set once, by the session that made the transition (a whole gang evicted,
#: scheduler_ext/framework/victims.py `note_gang_evictions`); every other condition a later session computes again
ONE_TIME_CONDITIONS: Final = frozenset({PG_COND_EVICTED})


@dataclass(frozen=True, slots=True)
class QueueStatusOp:
    name: str
    resource_version: str
    status: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class QueueCreateOp:
    """Create a Queue that must exist (`run` creates the `default` Queue if absent, as Volcano does)."""

    name: str
    spec: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PodConditionOp:
    uid: str
    namespace: str
    name: str
    resource_version: str
    reason: str
    message: str
    #: status.nominatedNodeName wanted: the node a pipelined (preempting) task waits for, else ''
    nominated_node: str = ""
    #: the condition's status changes (absent or True before): stamp lastTransitionTime
    transition: bool = True
    #: the pod has a nominatedNodeName that no longer holds: remove it (else Volcano's preempt
    #: would keep the task waiting for a node whose victims were never evicted, e.g. after a 429)
    clear_nominated: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    binds: tuple[BindOp, ...] = ()
    evictions: tuple[EvictOp, ...] = ()
    podgroups: tuple[PodGroupStatusOp, ...] = ()
    queues: tuple[QueueStatusOp, ...] = ()
    pod_conditions: tuple[PodConditionOp, ...] = ()
    queues_to_create: tuple[QueueCreateOp, ...] = ()
    #: job name -> tasks that could not be placed (volcano_unschedule_task_count), PodGroup objects only
    unschedulable_jobs: Mapping[str, int] = field(default_factory=dict)
    #: unschedulable implicit jobs (pods without a PodGroup)
    unschedulable_implicit: int = 0
    #: tasks left pending with node-fit errors this session (schedule attempts 'unschedulable')
    unschedulable_tasks: int = 0
    pending_tasks: int = 0


# --- PodGroup status (Volcano's jobStatus + UpdatePodGroupCondition) ----------------------------


def _normal_condition(c: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (str(c.get("type") or ""), str(c.get("status") or ""), str(c.get("reason") or ""),
            str(c.get("message") or ""))


def merge_conditions(
    existing: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], now_iso: str
) -> list[JSON]:
    """Volcano's UpdatePodGroupCondition over the object's conditions: replace by type, else append.

    A condition equal to the one it replaces (type, status, reason, message) keeps its
    lastTransitionTime and transitionID, so an unchanged verdict is not a change.
    """
    out: list[JSON] = [dict(c) for c in existing if isinstance(c, Mapping)]
    for cond in new:
        entry: JSON = {
            "type": cond.get("type"),
            "status": cond.get("status"),
            "transitionID": cond.get("transitionID", ""),
            "lastTransitionTime": now_iso,
            "reason": cond.get("reason", ""),
            "message": cond.get("message", ""),
        }
        for i, old in enumerate(out):
            if old.get("type") == entry["type"]:
                if _normal_condition(old) == _normal_condition(entry):
                    entry["lastTransitionTime"] = old.get("lastTransitionTime") or now_iso
                    entry["transitionID"] = old.get("transitionID", entry["transitionID"])
                out[i] = entry
                break
        else:
            out.append(entry)
    # Empty strings are omitted, as Volcano's `omitempty` tags do (a 1.20 apiserver also turns an
    # empty string in a custom resource's merge patch into null and then rejects it).
    return [{k: v for k, v in c.items() if v != "" and v is not None} for c in out]


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def podgroup_status(job: JobInfo, current: Mapping[str, Any], now_iso: str) -> JSON:
    """The status Volcano's job updater writes: phase (from close_session), conditions, task counts."""
    return {
        "phase": job.pod_group.phase,
        "conditions": merge_conditions(list(current.get("conditions") or []), job.pod_group.conditions, now_iso),
        "running": len(job.tasks_in(RUNNING)),
        "succeeded": len(job.tasks_in(SUCCEEDED)),
        "failed": len(job.tasks_in(FAILED)),
    }


def podgroup_status_changed(new: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Volcano's isPodGroupStatusUpdated: any field, or a condition other than its times/IDs."""
    if str(new.get("phase") or "") != str(current.get("phase") or ""):
        return True
    for key in _COUNT_FIELDS:
        if _count(new.get(key)) != _count(current.get(key)):
            return True
    a = [_normal_condition(c) for c in new.get("conditions") or [] if isinstance(c, Mapping)]
    b = [_normal_condition(c) for c in current.get("conditions") or [] if isinstance(c, Mapping)]
    return a != b


def status_fingerprint(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two written statuses the same: every field, conditions without times and IDs."""
    conds = tuple(_normal_condition(c) for c in status.get("conditions") or [] if isinstance(c, Mapping))
    rest = tuple(sorted((k, str(v)) for k, v in status.items() if k != "conditions"))
    return rest, conds


def status_for_patch(status: Mapping[str, Any], fields: tuple[str, ...]) -> JSON:
    """Zero counts become None (a merge patch removes them), as Volcano omits empty counts."""
    out = dict(status)
    for key in fields:
        if key in out and not out[key]:
            out[key] = None
    return out


def _podgroup_event(job: JobInfo) -> tuple[str, str, str] | None:
    """Volcano's RecordJobStatusEvent on the PodGroup, without its noise.

    Volcano warns "tasks in gang unschedulable" whenever the phase is still Pending/Inqueue/Unknown,
    which includes the session that just bound the whole gang (Binding is not a scheduled status) and
    groups whose pods are all gone. Tidemark warns only when some task is actually left pending.
    An event an action recorded on the PodGroup (the privilege action's Privileged/WillEvicted) wins.
    """
    if job.pod_group.events:
        return job.pod_group.events[-1]
    if job.pod_group.phase in (PG_UNKNOWN, PG_PENDING, PG_INQUEUE):
        pending = len(job.tasks_in(PENDING))
        if pending == 0:
            return None
        msg = f"{pending}/{len(job.tasks)} tasks in gang unschedulable: {job.fit_error()}"
        return "Warning", PG_COND_UNSCHEDULABLE, msg
    return "Normal", PG_COND_SCHEDULED, "pod group is ready"


# --- pods left pending (Volcano's TaskSchedulingReason) ---------------------------------------------


def task_scheduling_reason(ssn: Session, job: JobInfo, task: TaskInfo) -> tuple[str, str, str]:
    """(reason, message, nominated node) for a task left pending; kube-scheduler's fit-error wording."""
    status, node = task.status, task.node_name
    if task.last_transaction is not None:
        node, status = task.last_transaction
    if status == ALLOCATED:
        msg = f"Pod {task.namespace}/{task.name} can possibly be assigned to {node}, once minAvailable is satisfied"
        return REASON_SCHEDULABLE, msg, ""
    if status == PIPELINED:
        msg = (f"Pod {task.namespace}/{task.name} can possibly be assigned to {node}, once resource is released "
               "and minAvailable is satisfied")
        return REASON_UNSCHEDULABLE, msg, node
    fe = job.nodes_fit_errors.get(task.uid)
    if fe is not None:
        return REASON_UNSCHEDULABLE, fe.error(), ""
    if job.job_fit_errors:
        return REASON_UNSCHEDULABLE, job.job_fit_errors, ""
    return REASON_UNSCHEDULABLE, why_pending(ssn, task.uid, job.uid), ""


def current_pod_scheduled(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == POD_SCHEDULED:
            return str(c.get("status") or ""), str(c.get("reason") or ""), str(c.get("message") or "")
    return None


# --- the plan ------------------------------------------------------------------------------------------


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def build_plan(
    ssn: Session,
    *,
    pod_groups: Mapping[str, Mapping[str, Any]],
    queues: Mapping[str, Mapping[str, Any]],
    now_iso: str,
    required_queues: Mapping[str, Mapping[str, Any]] | None = None,
) -> Plan:
    """Everything to write after `ssn` (closed), given the PodGroup (`ns/name`) and Queue objects it read.

    `required_queues`: name -> spec of Queues that must exist; those missing from `queues` are created.
    """
    binds = _bind_ops(ssn)
    evictions = tuple(
        EvictOp(str(e.task.uid), e.task.namespace, e.task.name, e.task.node_name, e.reason) for e in ssn.evictions
    )
    jp = _job_ops(ssn, pod_groups, now_iso)
    queue_ops = _queue_ops(queues, jp.phase_counts)
    creates = tuple(
        QueueCreateOp(name, dict(spec)) for name, spec in (required_queues or {}).items() if name not in queues
    )
    return Plan(
        binds=binds,
        evictions=evictions,
        podgroups=tuple(jp.podgroups),
        queues=queue_ops,
        pod_conditions=tuple(jp.pod_conditions),
        queues_to_create=creates,
        unschedulable_jobs=jp.unschedulable_jobs,
        unschedulable_implicit=jp.unschedulable_implicit,
        unschedulable_tasks=jp.unschedulable_tasks,
        pending_tasks=jp.pending_tasks,
    )


def _bind_ops(ssn: Session) -> tuple[BindOp, ...]:
    """A BindOp per committed bind, with its job's name and queue for the executor's metrics."""
    binds: list[BindOp] = []
    for b in ssn.binds:
        t = b.task
        job = ssn.jobs.get(t.job)
        binds.append(
            BindOp(
                uid=str(t.uid),
                namespace=t.namespace,
                name=t.name,
                node=b.node,
                created=t.creation,
                job_name=job.name if job is not None else "",
                job_namespace=job.namespace if job is not None else t.namespace,
                queue=str(job.queue) if job is not None else "",
            )
        )
    return tuple(binds)


@dataclass(slots=True)
class _JobPlan:
    """What one pass over the session's jobs gathers: status and condition writes, counts for metrics."""

    podgroups: list[PodGroupStatusOp] = field(default_factory=list)
    pod_conditions: list[PodConditionOp] = field(default_factory=list)
    unschedulable_jobs: dict[str, int] = field(default_factory=dict)
    unschedulable_implicit: int = 0
    unschedulable_tasks: int = 0
    pending_tasks: int = 0
    #: queue name -> PodGroup phase -> jobs
    phase_counts: dict[str, dict[str, int]] = field(default_factory=dict)


def _job_ops(ssn: Session, pod_groups: Mapping[str, Mapping[str, Any]], now_iso: str) -> _JobPlan:
    """The PodGroup status and pod condition writes of every job, with the counts the queues and metrics need."""
    jp = _JobPlan()
    podgroups = jp.podgroups
    pod_conditions = jp.pod_conditions
    unschedulable_jobs = jp.unschedulable_jobs
    phase_counts = jp.phase_counts
    for job in ssn.jobs.values():
        counts = phase_counts.setdefault(str(job.queue), {})
        counts[job.pod_group.phase] = counts.get(job.pod_group.phase, 0) + 1
        if any(
            c.get("type") == PG_COND_UNSCHEDULABLE and c.get("transitionID") == ssn.uid
            for c in job.pod_group.conditions
        ):
            if job.pod_group.implicit:
                jp.unschedulable_implicit += 1
            else:
                unschedulable_jobs[job.name] = max(0, job.min_available - job.ready_task_num())
        if not job.pod_group.implicit:
            obj = pod_groups.get(job.uid)
            if obj is not None:
                current = obj.get("status") or {}
                new = podgroup_status(job, current, now_iso)
                if podgroup_status_changed(new, current):
                    podgroups.append(
                        PodGroupStatusOp(
                            namespace=job.namespace,
                            name=job.name,
                            resource_version=_rv(obj),
                            status=status_for_patch(new, _COUNT_FIELDS),
                            event=_podgroup_event(job),
                            kept_conditions=tuple(
                                c for c in new.get("conditions") or ()
                                if c.get("type") in ONE_TIME_CONDITIONS and c.get("transitionID") == ssn.uid
                            ),
                        )
                    )
        for status in (ALLOCATED, PENDING, PIPELINED):
            for task in job.tasks_in(status).values():
                if task.sch_gated:
                    continue
                jp.pending_tasks += 1
                if task.uid in job.nodes_fit_errors:
                    jp.unschedulable_tasks += 1
                reason, message, nominated = task_scheduling_reason(ssn, job, task)
                cur_cond = current_pod_scheduled(task.pod)
                cur_nominated = str((task.pod.get("status") or {}).get("nominatedNodeName") or "")
                if cur_cond == ("False", reason, message) and cur_nominated == nominated:
                    continue
                pod_conditions.append(
                    PodConditionOp(
                        uid=str(task.uid),
                        namespace=task.namespace,
                        name=task.name,
                        resource_version=_rv(task.pod),
                        reason=reason,
                        message=message,
                        nominated_node=nominated,
                        transition=cur_cond is None or cur_cond[0] != "False",
                        clear_nominated=bool(cur_nominated) and not nominated,
                    )
                )
    return jp


def _queue_ops(
    queues: Mapping[str, Mapping[str, Any]], phase_counts: Mapping[str, Mapping[str, int]]
) -> tuple[QueueStatusOp, ...]:
    """A QueueStatusOp for each queue whose state or PodGroup counts per phase differ from its status."""
    queue_ops: list[QueueStatusOp] = []
    for name, obj in queues.items():
        current = obj.get("status") or {}
        counts = phase_counts.get(name, {})
        qstatus: JSON = {"state": str(current.get("state") or "Open")}
        for phase, key in QUEUE_COUNT_FIELDS.items():
            qstatus[key] = counts.get(phase, 0)
        changed = str(current.get("state") or "") != qstatus["state"] or any(
            _count(current.get(key)) != qstatus[key] for key in QUEUE_COUNT_FIELDS.values()
        )
        if changed:
            queue_ops.append(
                QueueStatusOp(name, _rv(obj), status_for_patch(qstatus, tuple(QUEUE_COUNT_FIELDS.values())))
            )
    return tuple(queue_ops)
