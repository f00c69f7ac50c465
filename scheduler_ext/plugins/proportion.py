"""proportion: share the cluster between queues by weight, capped by capability (Volcano's proportion.go).

Each queue's `deserved` is found by water-filling the cluster's total resource by weight, bounded by
the queue's real capability (capability, and total minus others' guarantees) and by its request, and
raised to its guarantee. Queues are ordered by spec.priority then share (allocated/deserved); a queue
is overused once allocated >= deserved; a task is allocatable while allocated + request <= deserved in
the dimensions it asks for; a job is enqueueable while minResources + allocated + inqueue - elastic
fits the real capability.
"""

from __future__ import annotations

import math
from typing import Final

from scheduler_ext.api.job import PG_INQUEUE, PG_RUNNING, JobInfo, get_inqueue_resource
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.queue import QUEUE_OPEN, QueueInfo
from scheduler_ext.api.resource import INFINITY, MAX_FLOAT, ZERO, Resource, exceeded_part, res_max, share
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PENDING, PERMIT, REJECT, QueueID, allocated_status
from scheduler_ext.framework.interface import Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.session_plugins import CycleState, Event, EventHandler

STATE_KEY: Final = "proportionState"


class QueueAttr:
    """A queue's accounting within the session."""

    __slots__ = (
        "allocated",
        "capability",
        "deserved",
        "elastic",
        "guarantee",
        "inqueue",
        "name",
        "queue_id",
        "real_capability",
        "request",
        "share",
        "weight",
    )

    def __init__(self, queue_id: QueueID, name: str, weight: int) -> None:
        self.queue_id = queue_id
        self.name = name
        self.weight = weight
        self.share = 0.0
        self.deserved = Resource()
        self.allocated = Resource()
        self.request = Resource()
        self.elastic = Resource()
        self.inqueue = Resource()
        self.capability: Resource | None = None
        self.real_capability: Resource | None = None
        self.guarantee = Resource()

    def clone(self) -> QueueAttr:
        c = QueueAttr(self.queue_id, self.name, self.weight)
        c.share = self.share
        c.deserved = self.deserved.clone()
        c.allocated = self.allocated.clone()
        c.request = self.request.clone()
        c.elastic = self.elastic.clone()
        c.inqueue = self.inqueue.clone()
        c.capability = self.capability.clone() if self.capability is not None else None
        c.real_capability = self.real_capability.clone() if self.real_capability is not None else None
        c.guarantee = self.guarantee.clone()
        return c

    def update_share(self) -> None:
        res = 0.0
        for rn in self.deserved.resource_names():
            s = share(self.allocated.get(rn), self.deserved.get(rn))
            if s > res:
                res = s
        self.share = res


class ProportionPlugin(Plugin):
    name = "proportion"

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.total_resource = Resource()
        self.total_guarantee = Resource()
        self.queue_opts: dict[QueueID, QueueAttr] = {}

    def on_session_open(self, ssn: Session) -> None:
        self.total_resource = ssn.total_resource.clone()
        for queue in ssn.queues.values():
            if queue.guarantee_raw:
                self.total_guarantee.add(queue.guarantee)

        for job in ssn.jobs.values():
            attr = self.queue_opts.get(job.queue)
            if attr is None:
                attr = self._new_attr(ssn.queues[job.queue])
                self.queue_opts[job.queue] = attr
            for status, tasks in job.task_status_index.items():
                if allocated_status(status):
                    for t in tasks.values():
                        attr.allocated.add(t.resreq)
                        attr.request.add(t.resreq)
                elif status == PENDING:
                    for t in tasks.values():
                        attr.request.add(t.resreq)
            pg = job.pod_group
            if pg.phase == PG_INQUEUE and pg.min_resources is not None:
                attr.inqueue.add(job.deduct_sch_gated_resources(get_inqueue_resource(job, job.allocated)))
            if pg.phase == PG_RUNNING and pg.min_resources is not None and job.allocated_task_num() >= pg.min_member:
                attr.inqueue.add(job.deduct_sch_gated_resources(get_inqueue_resource(job, job.allocated)))
            attr.elastic.add(job.get_elastic_resources())

        self._compute_deserved()
        self._register(ssn)

    def _new_attr(self, queue: QueueInfo) -> QueueAttr:
        attr = QueueAttr(queue.uid, queue.name, queue.weight)
        if queue.capability_raw:
            cap = queue.capability.clone()
            if cap.milli_cpu <= 0:
                cap.milli_cpu = MAX_FLOAT
            if cap.memory <= 0:
                cap.memory = MAX_FLOAT
            attr.capability = cap
        if queue.guarantee_raw:
            attr.guarantee = queue.guarantee.clone()
        real = exceeded_part(self.total_resource, self.total_guarantee).add(attr.guarantee)
        if attr.capability is None:
            attr.capability = Resource()
            attr.real_capability = real
        else:
            real.min_dimension_resource(attr.capability, INFINITY)
            attr.real_capability = real
        return attr

    def _compute_deserved(self) -> None:
        """Water-fill the cluster total between queues by weight until every queue is met."""
        remaining = self.total_resource.clone()
        meet: set[QueueID] = set()
        while True:
            total_weight = sum(a.weight for a in self.queue_opts.values() if a.queue_id not in meet)
            if total_weight == 0:
                break
            old_remaining = remaining.clone()
            increased = Resource()
            decreased = Resource()
            for attr in self.queue_opts.values():
                if attr.queue_id in meet:
                    continue
                old_deserved = attr.deserved.clone()
                attr.deserved.add(remaining.clone().multi(attr.weight / total_weight))
                if attr.real_capability is not None:
                    attr.deserved.min_dimension_resource(attr.real_capability, INFINITY)
                attr.deserved.min_dimension_resource(attr.request, ZERO)
                attr.deserved = res_max(attr.deserved, attr.guarantee)
                attr.update_share()
                if attr.request.less_equal(attr.deserved, ZERO) or _deep_equal(attr.deserved, old_deserved):
                    meet.add(attr.queue_id)
                inc, dec = attr.deserved.diff(old_deserved, ZERO)
                increased.add(inc)
                decreased.add(dec)
            remaining = exceeded_part(remaining.clone().add(decreased), increased)
            if remaining.is_empty() or _deep_equal(remaining, old_remaining):
                break

    def _register(self, ssn: Session) -> None:
        opts = self.queue_opts
        _register_order(ssn, self.name, opts)
        _register_reclaim(ssn, self.name, opts)
        _register_allocatable(ssn, self.name, opts)
        _register_enqueue(ssn, self.name, opts)

    def on_session_close(self, ssn: Session) -> None:
        self.queue_opts = {}


def _register_order(ssn: Session, name: str, opts: dict[QueueID, QueueAttr]) -> None:
    """Queue order: spec.priority, then the lower share first."""

    def queue_order(lv: QueueInfo, rv: QueueInfo) -> int:
        if lv.priority != rv.priority:
            return rv.priority - lv.priority
        ls, rs = opts[lv.uid].share, opts[rv.uid].share
        if ls == rs:
            return 0
        return -1 if ls < rs else 1

    ssn.add_queue_order_fn(name, queue_order)
    ssn.add_queue_order_key_fn(name, lambda q: (-q.priority, opts[q.uid].share if q.uid in opts else 0.0))


def _register_reclaim(ssn: Session, name: str, opts: dict[QueueID, QueueAttr]) -> None:
    """Reclaim: victims only from queues over their deserved share; overused queues."""

    def reclaimable(_reclaimer: TaskInfo, reclaimees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
        victims: list[TaskInfo] = []
        allocations: dict[QueueID, Resource] = {}
        for reclaimee in reclaimees:
            job = ssn.jobs.get(reclaimee.job)
            if job is None:
                continue
            attr = opts.get(job.queue)
            if attr is None:
                continue
            if job.queue not in allocations:
                allocations[job.queue] = attr.allocated.clone()
            allocated = allocations[job.queue]
            if not allocated.less_equal(attr.deserved, ZERO):
                allocated.sub(reclaimee.resreq)
                victims.append(reclaimee)
        return victims, PERMIT

    ssn.add_reclaimable_fn(name, reclaimable)

    def overused(queue: QueueInfo) -> bool:
        attr = opts.get(queue.uid)
        if attr is None:
            return False
        return attr.deserved.less_equal(attr.allocated, ZERO)

    ssn.add_overused_fn(name, overused)


def _register_allocatable(ssn: Session, name: str, opts: dict[QueueID, QueueAttr]) -> None:
    """Allocate and preempt: a queue takes tasks while allocated + request fits deserved."""

    def queue_allocatable(queue: QueueInfo, candidates: list[TaskInfo]) -> bool:
        if queue.state != QUEUE_OPEN:
            return False
        attr = opts.get(queue.uid)
        if attr is None:
            return True
        total_req = Resource()
        for t in candidates:
            total_req.add(t.resreq)
        future_used = attr.allocated.clone().add(total_req)
        ok, _ = future_used.less_equal_with_dimension_and_resources_name(attr.deserved, total_req)
        return ok

    ssn.add_allocatable_fn(name, lambda q, t: queue_allocatable(q, [t]))
    ssn.add_preemptive_fn(name, queue_allocatable)

    def state_of(cs: CycleState) -> dict[QueueID, QueueAttr]:
        # Volcano snapshots all queue attrs in PrePredicate; taking the copy on first use keeps
        # allocate fast (only preempt's simulations read it).
        st = cs.get(STATE_KEY)
        if st is None:
            st = cs[STATE_KEY] = {qid: a.clone() for qid, a in opts.items()}
        return st  # type: ignore[no-any-return]

    def simulate_allocatable(cs: CycleState, queue: QueueInfo, task: TaskInfo) -> bool:
        attr = state_of(cs).get(queue.uid)
        if attr is None:
            return False
        future_used = attr.allocated.clone().add(task.resreq)
        ok, _ = future_used.less_equal_with_dimension_and_resources_name(attr.deserved, task.resreq)
        return ok

    ssn.add_simulate_allocatable_fn(name, simulate_allocatable)

    def simulate_change(sign: int) -> object:
        def fn(cs: CycleState, _to_schedule: TaskInfo, task: TaskInfo, _node: NodeInfo) -> Exception | None:
            job = ssn.jobs.get(task.job)
            if job is None:
                return ValueError(f"[proportion] job {task.job} not found in session")
            attr = state_of(cs).get(job.queue)
            if attr is None:
                return ValueError(f"[proportion] queue {job.queue} not found")
            if sign > 0:
                attr.allocated.add(task.resreq)
            else:
                attr.allocated.sub(task.resreq)
            attr.update_share()
            return None

        return fn

    ssn.add_simulate_add_task_fn(name, simulate_change(1))  # type: ignore[arg-type]
    ssn.add_simulate_remove_task_fn(name, simulate_change(-1))  # type: ignore[arg-type]


def _register_enqueue(ssn: Session, name: str, opts: dict[QueueID, QueueAttr]) -> None:
    """Enqueue against the real capability, and the allocation events that keep shares current."""

    def enqueueable(job: JobInfo) -> int:
        attr = opts.get(job.queue)
        queue = ssn.queues[job.queue]
        if queue.state != QUEUE_OPEN:
            return REJECT
        if attr is None or attr.real_capability is None:
            return PERMIT
        if job.pod_group.min_resources is None:
            return PERMIT
        min_req = job.get_min_resources()
        r = min_req.clone().add(attr.allocated).add(attr.inqueue).sub(attr.elastic)
        ok, _ = r.less_equal_with_dimension_and_resources_name(attr.real_capability, min_req)
        return PERMIT if ok else REJECT

    ssn.add_job_enqueueable_fn(name, enqueueable)

    def enqueued(job: JobInfo) -> None:
        if job.pod_group.min_resources is None:
            return
        attr = opts.get(job.queue)
        if attr is None:
            return
        attr.inqueue.add(job.deduct_sch_gated_resources(job.get_min_resources()))

    ssn.add_job_enqueued_fn(name, enqueued)

    def on_allocate(ev: Event) -> None:
        job = ssn.jobs.get(ev.task.job)
        attr = opts.get(job.queue) if job is not None else None
        if attr is None:
            return
        attr.allocated.add(ev.task.resreq)
        attr.update_share()

    def on_deallocate(ev: Event) -> None:
        job = ssn.jobs.get(ev.task.job)
        attr = opts.get(job.queue) if job is not None else None
        if attr is None:
            return
        attr.allocated.sub(ev.task.resreq)
        attr.update_share()

    ssn.add_event_handler(EventHandler(on_allocate, on_deallocate))


def _deep_equal(a: Resource, b: Resource) -> bool:
    """equality.Semantic.DeepEqual on two Resources (an empty scalar map equals none)."""
    return (
        (a.milli_cpu == b.milli_cpu or (math.isnan(a.milli_cpu) and math.isnan(b.milli_cpu)))
        and a.memory == b.memory
        and (a.scalar_resources or {}) == (b.scalar_resources or {})
        and a.max_task_num == b.max_task_num
    )


SPEC = PluginSpec(name="proportion", build=ProportionPlugin, doc="Weighted fair share between queues.")
