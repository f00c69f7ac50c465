"""JobInfo (a PodGroup and its tasks) and the PodGroup fields the scheduler reads and writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from scheduler_ext.api.resource import RES_CPU, RES_MEMORY, RES_PODS, Resource, exceeded_part
from scheduler_ext.api.task import POD_PREEMPTABLE, TaskInfo, revocable_zone_of
from scheduler_ext.api.types import (
    ALLOCATED,
    BINDING,
    BOUND,
    PENDING,
    PIPELINED,
    RELEASING,
    RUNNING,
    SUCCEEDED,
    FitErrors,
    JobID,
    QueueID,
    TaskID,
    TaskStatus,
    allocated_status,
    completed_status,
    scheduled_status,
)
from tidemark.apis import parse_bool

PG_PENDING: Final = "Pending"
PG_INQUEUE: Final = "Inqueue"
PG_RUNNING: Final = "Running"
PG_UNKNOWN: Final = "Unknown"
PG_COMPLETED: Final = "Completed"
PG_COND_UNSCHEDULABLE: Final = "Unschedulable"
PG_COND_SCHEDULED: Final = "Scheduled"


class PodGroup:
    """The PodGroup object: spec as read, status as the scheduler will write it (mutable)."""

    __slots__ = (
        "annotations",
        "conditions",
        "creation",
        "events",
        "implicit",
        "labels",
        "min_member",
        "min_resources",
        "min_resources_raw",
        "min_task_member",
        "name",
        "namespace",
        "observed_conditions",
        "phase",
        "priority_class_name",
        "queue",
        "uid",
    )

    def __init__(
        self,
        name: str,
        namespace: str,
        *,
        uid: str = "",
        queue: str = "default",
        min_member: int = 0,
        min_resources_raw: Mapping[str, Any] | None = None,
        min_task_member: Mapping[str, int] | None = None,
        priority_class_name: str = "",
        phase: str = "",
        annotations: Mapping[str, Any] | None = None,
        labels: Mapping[str, Any] | None = None,
        creation: float = 0.0,
        implicit: bool = False,
        observed_conditions: Sequence[Mapping[str, Any]] = (),
        min_resources: Resource | None = None,
    ) -> None:
        """`min_resources`, when given, is the parse of `min_resources_raw` (the caller's own copy)."""
        self.name = name
        self.namespace = namespace
        self.uid = uid or f"{namespace}/{name}"
        self.queue = queue
        self.min_member = min_member
        self.min_resources_raw: Mapping[str, Any] | None = min_resources_raw
        self.min_resources: Resource | None = (
            min_resources if min_resources is not None or min_resources_raw is None
            else Resource.from_resource_list(min_resources_raw)
        )
        self.min_task_member: dict[str, int] = dict(min_task_member or {})
        self.priority_class_name = priority_class_name
        self.phase = phase
        self.annotations: Mapping[str, Any] = annotations or {}
        self.labels: Mapping[str, Any] = labels or {}
        self.creation = creation
        self.implicit = implicit
        #: what this session decides (merged by type into the object's conditions when written)
        self.conditions: list[dict[str, Any]] = []
        #: (type, reason, message) Events an action records on the PodGroup this session
        self.events: list[tuple[str, str, str]] = []
        #: `status.conditions` of the object as read (state kept on the PodGroup, e.g. the privilege
        #: action's Privileged/WillEvicted with their lastTransitionTime)
        self.observed_conditions: tuple[Mapping[str, Any], ...] = tuple(
            c for c in (observed_conditions if isinstance(observed_conditions, list | tuple) else ())
            if isinstance(c, Mapping)
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class JobInfo:
    """A gang of tasks with its PodGroup; task status index kept in step with every transition."""

    __slots__ = (
        "allocated",
        "budget",
        "creation",
        "job_fit_errors",
        "min_available",
        "name",
        "namespace",
        "nodes_fit_errors",
        "pod_group",
        "preemptable",
        "priority",
        "queue",
        "revocable_zone",
        "task_min_available",
        "task_min_available_total",
        "task_status_index",
        "tasks",
        "total_request",
        "uid",
        "waiting_time",
    )

    def __init__(self, uid: JobID, pod_group: PodGroup) -> None:
        self.uid = uid
        self.name = pod_group.name
        self.namespace = pod_group.namespace
        self.queue = QueueID(pod_group.queue)
        self.priority = 0
        self.min_available = pod_group.min_member
        self.creation = pod_group.creation
        self.pod_group = pod_group
        self.tasks: dict[TaskID, TaskInfo] = {}
        self.task_status_index: dict[TaskStatus, dict[TaskID, TaskInfo]] = {}
        self.allocated = Resource()
        self.total_request = Resource()
        self.nodes_fit_errors: dict[TaskID, FitErrors] = {}
        self.job_fit_errors = ""
        self.task_min_available: dict[str, int] = dict(pod_group.min_task_member)
        self.task_min_available_total = sum(self.task_min_available.values())
        self.preemptable = _pg_preemptable(pod_group)
        self.revocable_zone = revocable_zone_of(pod_group.annotations)
        ann = pod_group.annotations
        self.budget: tuple[str, str] = (
            (str(ann["volcano.sh/jdb-min-available"]), "")
            if "volcano.sh/jdb-min-available" in ann
            else ("", str(ann.get("volcano.sh/jdb-max-unavailable", "")))
        )
        self.waiting_time: float | None = None

    def __repr__(self) -> str:
        return f"Job({self.uid}, queue {self.queue}, minAvailable {self.min_available}, tasks {len(self.tasks)})"

    # --- task index --------------------------------------------------------------------------
    def add_task_info(self, ti: TaskInfo) -> None:
        self.tasks[ti.uid] = ti
        idx = self.task_status_index.get(ti.status)
        if idx is None:
            idx = self.task_status_index[ti.status] = {}
        idx[ti.uid] = ti
        self.total_request.add(ti.resreq)
        if allocated_status(ti.status):
            self.allocated.add(ti.resreq)

    def delete_task_info(self, ti: TaskInfo) -> None:
        task = self.tasks.get(ti.uid)
        if task is None:
            return
        self.total_request.sub(task.resreq)
        if allocated_status(task.status):
            self.allocated.sub(task.resreq)
        del self.tasks[task.uid]
        idx = self.task_status_index.get(task.status)
        if idx is not None:
            idx.pop(task.uid, None)
            if not idx:
                del self.task_status_index[task.status]

    def update_task_status(self, task: TaskInfo, status: TaskStatus) -> None:
        if task.uid in self.tasks:
            self.delete_task_info(task)
        task.status = status
        self.add_task_info(task)

    def tasks_in(self, status: TaskStatus) -> dict[TaskID, TaskInfo]:
        return self.task_status_index.get(status, {})

    # --- counts ------------------------------------------------------------------------------
    def _count(self, *statuses: TaskStatus) -> int:
        idx = self.task_status_index
        return sum(len(idx[s]) for s in statuses if s in idx)

    def ready_task_num(self) -> int:
        return self._count(BOUND, BINDING, RUNNING, ALLOCATED, SUCCEEDED)

    def waiting_task_num(self) -> int:
        return self._count(PIPELINED)

    def pending_best_effort_task_num(self) -> int:
        return sum(1 for t in self.tasks_in(PENDING).values() if t.best_effort)

    def allocated_task_num(self) -> int:
        return self._count(BOUND, BINDING, RUNNING, ALLOCATED)

    def valid_task_num(self) -> int:
        return self._count(BOUND, BINDING, RUNNING, ALLOCATED, SUCCEEDED, PIPELINED, PENDING)

    def scheduled_task_num(self) -> int:
        return sum(len(ts) for s, ts in self.task_status_index.items() if scheduled_status(s))

    def releasing_scheduled_task_num(self) -> int:
        return sum(1 for t in self.tasks_in(RELEASING).values() if t.node_name)

    def completed_task_num(self) -> int:
        return sum(len(ts) for s, ts in self.task_status_index.items() if completed_status(s))

    def is_ready(self) -> bool:
        return self.ready_task_num() + self.pending_best_effort_task_num() >= self.min_available

    def is_pipelined(self) -> bool:
        return (
            self.waiting_task_num() + self.ready_task_num() + self.pending_best_effort_task_num()
            >= self.min_available
        )

    def is_starving(self) -> bool:
        return self.waiting_task_num() + self.ready_task_num() < self.min_available

    def is_pending(self) -> bool:
        return self.pod_group.phase in (PG_PENDING, "")

    def has_pending_tasks(self) -> bool:
        return bool(self.tasks_in(PENDING))

    # --- per-role gang checks ----------------------------------------------------------------
    def _roles(self, statuses: tuple[TaskStatus, ...], empty_pending: bool) -> dict[str, int]:
        occupied: dict[str, int] = {}
        for status, tasks in self.task_status_index.items():
            if status in statuses:
                for t in tasks.values():
                    occupied[t.task_role] = occupied.get(t.task_role, 0) + 1
            elif empty_pending and status == PENDING:
                for t in tasks.values():
                    if t.init_resreq.is_empty():
                        occupied[t.task_role] = occupied.get(t.task_role, 0) + 1
        return occupied

    def _allocated_roles(self) -> dict[str, int]:
        return self._roles((BOUND, BINDING, RUNNING, ALLOCATED, SUCCEEDED), True)

    def check_task_valid(self) -> bool:
        if self.min_available < self.task_min_available_total:
            return True
        actual = self._roles((BOUND, BINDING, RUNNING, ALLOCATED, SUCCEEDED, PIPELINED, PENDING), False)
        return all(m == 0 or actual.get(role, 0) >= m for role, m in self.task_min_available.items())

    def check_task_ready(self) -> bool:
        if self.min_available < self.task_min_available_total:
            return True
        occupied = self._allocated_roles()
        return all(occupied.get(role, 0) >= m for role, m in self.task_min_available.items())

    def check_task_pipelined(self) -> bool:
        if self.min_available < self.task_min_available_total:
            return True
        occupied = self._roles((BOUND, BINDING, RUNNING, ALLOCATED, SUCCEEDED, PIPELINED), True)
        return all(occupied.get(role, 0) >= m for role, m in self.task_min_available.items())

    def check_task_starving(self) -> bool:
        if self.min_available < self.task_min_available_total:
            return True
        occupied = self._roles((BOUND, BINDING, RUNNING, ALLOCATED, SUCCEEDED, PIPELINED), False)
        return any(occupied.get(role, 0) < m for role, m in self.task_min_available.items())

    def fit_failed_roles(self) -> set[str]:
        return {self.tasks[tid].task_role for tid in self.nodes_fit_errors if tid in self.tasks}

    def task_has_fit_errors(self, task: TaskInfo) -> bool:
        """A task whose role already failed its predicates is skipped (same spec, same result)."""
        if not task.task_role:
            return False
        return task.task_role in self.fit_failed_roles()

    def need_continue_allocating(self) -> bool:
        """After a task fails: keep trying the job's other tasks only if the gang can still be met."""
        if self.min_available >= len(self.tasks):
            return False
        failed = self.fit_failed_roles()
        pending: dict[str, int] = {}
        for t in self.tasks_in(PENDING).values():
            pending[t.task_role] = pending.get(t.task_role, 0) + 1
        if self.min_available < self.task_min_available_total:
            left = sum(cnt for role, cnt in pending.items() if role not in failed)
            return self.ready_task_num() + left >= self.min_available
        allocated = self._allocated_roles()
        for role in failed:
            m = self.task_min_available.get(role, 0)
            if m == 0:
                continue
            if allocated.get(role, 0) < m:
                return False
        return True

    # --- resources ---------------------------------------------------------------------------
    def get_min_resources(self) -> Resource:
        mr = self.pod_group.min_resources
        return mr.clone() if mr is not None else Resource()

    def get_sch_gated_pod_resources(self) -> Resource:
        res = Resource()
        for t in self.tasks.values():
            if t.sch_gated:
                res.add(t.resreq)
        return res

    def deduct_sch_gated_resources(self, res: Resource) -> Resource:
        gated = self.get_sch_gated_pod_resources()
        if gated.is_empty():
            return res
        out = res.clone()
        out.milli_cpu = max(out.milli_cpu - gated.milli_cpu, 0.0)
        out.memory = max(out.memory - gated.memory, 0.0)
        for name, v in (res.scalar_resources or {}).items():
            if gated.scalar_resources and name in gated.scalar_resources:
                assert out.scalar_resources is not None
                out.scalar_resources[name] = max(v - gated.scalar_resources[name], 0.0)
        return out

    def get_elastic_resources(self) -> Resource:
        return exceeded_part(self.allocated, self.get_min_resources())

    def reset_fit_err(self) -> None:
        self.job_fit_errors = ""
        self.nodes_fit_errors = {}

    # --- explanations ------------------------------------------------------------------------
    def fit_error(self) -> str:
        """Volcano's JobInfo.FitError: a histogram of task statuses and the first node-fit error."""
        reasons: dict[str, int] = {}
        for status, tasks in self.task_status_index.items():
            reasons[str(status)] = reasons.get(str(status), 0) + len(tasks)
        reasons["minAvailable"] = self.min_available
        head = "pod group is ready" if self.is_ready() else "pod group is not ready"
        msg = head + ", " + ", ".join(sorted(f"{v} {k}" for k, v in reasons.items()))
        if self.job_fit_errors:
            return msg + ". Origin reason is: " + self.job_fit_errors
        for t in self.tasks.values():
            fe = self.nodes_fit_errors.get(t.uid)
            if fe is not None:
                return msg + f". Origin reason is {t.name}: {fe.error()}"
        return msg


def _pg_preemptable(pg: PodGroup) -> bool:
    for src in (pg.annotations, pg.labels):
        if POD_PREEMPTABLE in src:
            p = parse_bool(src[POD_PREEMPTABLE])
            return p.value if p.warning is None else False
    return False


def get_inqueue_resource(job: JobInfo, allocated: Resource) -> Resource:
    """The part of the PodGroup's minResources not yet covered by allocated tasks (util.GetInqueueResource)."""
    raw = job.pod_group.min_resources_raw or {}
    min_res = job.get_min_resources()
    inqueue = Resource()
    for name in raw:
        name = str(name)
        if name == RES_CPU:
            v = min_res.milli_cpu - allocated.milli_cpu
            if v > 0:
                inqueue.milli_cpu = v
        elif name == RES_MEMORY:
            v = min_res.memory - allocated.memory
            if v > 0:
                inqueue.memory = v
        elif name == RES_PODS:
            v = min_res.get(name) - allocated.get(name)
            if v > 0:
                inqueue.set_scalar(name, v)
        else:
            if min_res.scalar_resources is None or name not in min_res.scalar_resources:
                continue  # count quotas and non-scalar names
            reserved = min_res.scalar_resources[name]
            if allocated.scalar_resources is None or name not in allocated.scalar_resources:
                inqueue.set_scalar(name, reserved)
            else:
                v = reserved - allocated.scalar_resources[name]
                if v > 0:
                    inqueue.set_scalar(name, v)
    return inqueue
