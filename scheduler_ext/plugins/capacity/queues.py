"""The capacity plugin's queue accounting: one QueueAttr per queue, built at session open, flat
(Volcano's buildQueueAttrs) or as a tree (buildHierarchicalQueueAttrs + checkHierarchicalQueue).

Private to the capacity plugin (plugin.py here, named `capacity` in the conf, registers the
callbacks that read this accounting; the framework needs none of it); the rules are in that
module's docstring and docs/scheduler-capacity.md:
- flat: an attr for every queue that has a job; `real_capability` = the cluster total minus every
  queue's guarantee, plus its own guarantee, capped by `spec.capability`; `deserved` capped by the
  real capability and raised to the guarantee;
- hierarchical: every Queue hangs below `spec.parent` (empty: `root`, implicit when absent); jobs
  book into their leaf and each ancestor; capabilities are inherited top down, a child's real
  capability is its parent's minus its siblings' guarantees; a missing parent or a job in an inner
  queue raises HierarchyError.
The builders fill the dict they are given in place (a tree that breaks half way stays as far as it
got, as in Volcano, and the plugin then refuses everything).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from scheduler_ext.api.job import PG_INQUEUE, PG_RUNNING, JobInfo, get_inqueue_resource
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.resource import INFINITY, MAX_FLOAT, ZERO, Resource, exceeded_part, res_max, share
from scheduler_ext.api.types import PENDING, QueueID, allocated_status
from scheduler_ext.framework.session import Session

log = logging.getLogger(__name__)

ROOT_QUEUE: Final = QueueID("root")
#: math.MaxInt64 as Volcano stores it in a float64 scalar (the root's unlimited scalar capability)
MAX_INT64_FLOAT: Final = float(2**63 - 1)


class HierarchyError(Exception):
    """The queue tree is broken (missing parent, cycle); the plugin refuses everything this session."""


class QueueAttr:
    """A queue's accounting within the session (Volcano's queueAttr)."""

    __slots__ = (
        "allocated",
        "ancestors",
        "capability",
        "children",
        "deserved",
        "elastic",
        "guarantee",
        "inqueue",
        "name",
        "queue_id",
        "real_capability",
        "request",
        "share",
    )

    def __init__(self, queue_id: QueueID, name: str) -> None:
        self.queue_id = queue_id
        self.name = name
        self.share = 0.0
        #: from the root down to the parent (empty for the root and for flat queues)
        self.ancestors: list[QueueID] = []
        self.children: dict[QueueID, QueueAttr] = {}
        self.deserved = Resource()
        self.allocated = Resource()
        self.request = Resource()
        self.elastic = Resource()
        self.inqueue = Resource()
        self.capability = Resource()
        self.real_capability = Resource()
        self.guarantee = Resource()

    def __repr__(self) -> str:
        return (
            f"QueueAttr({self.name}: deserved <{self.deserved}>, real capability <{self.real_capability}>, "
            f"allocated <{self.allocated}>, inqueue <{self.inqueue}>, share {self.share:.2f})"
        )

    def clone(self) -> QueueAttr:
        """A copy of the accounting (children are not copied: simulations never walk them)."""
        c = QueueAttr(self.queue_id, self.name)
        c.share = self.share
        c.ancestors = list(self.ancestors)
        c.children = dict(self.children)
        c.deserved = self.deserved.clone()
        c.allocated = self.allocated.clone()
        c.request = self.request.clone()
        c.elastic = self.elastic.clone()
        c.inqueue = self.inqueue.clone()
        c.capability = self.capability.clone()
        c.real_capability = self.real_capability.clone()
        c.guarantee = self.guarantee.clone()
        return c

    def update_share(self) -> None:
        """max(allocated/deserved) over the deserved dimensions; 1 for a queue without deserved."""
        if self.deserved.is_empty():
            self.share = 1.0
            return
        res = 0.0
        for rn in self.deserved.resource_names():
            res = max(res, share(self.allocated.get(rn), self.deserved.get(rn)))
        self.share = res

    def is_leaf(self) -> bool:
        return not self.children


# --- positions in the tree ---------------------------------------------------------------------------


def queue_level(left: QueueAttr, right: QueueAttr) -> int:
    """Index in `ancestors` of the deepest ancestor both share (0 when only the root or none)."""
    level = 0
    for i in range(min(len(left.ancestors), len(right.ancestors))):
        if left.ancestors[i] != right.ancestors[i]:
            return level
        level = i
    return level


def ancestor_at_depth(attr: QueueAttr | None, depth: int) -> QueueID | None:
    """The ancestor `depth` levels up (1: the parent), or None."""
    if attr is None or depth <= 0 or len(attr.ancestors) < depth:
        return None
    return attr.ancestors[len(attr.ancestors) - depth]


def ancestors_up_to(attr: QueueAttr | None, max_level: int) -> dict[int, QueueID]:
    out: dict[int, QueueID] = {}
    for level in range(1, max_level + 1):
        aid = ancestor_at_depth(attr, level)
        if aid is not None:
            out[level] = aid
    return out


def compare_share_with_deserved(left: QueueAttr, right: QueueAttr) -> int:
    """Lower share first; on equal shares a queue with deserved goes before a best-effort one."""
    if left.share == right.share:
        lhas = not left.deserved.is_empty()
        rhas = not right.deserved.is_empty()
        if lhas == rhas:
            return 0
        return -1 if lhas else 1
    return -1 if left.share < right.share else 1


# --- building the accounting -------------------------------------------------------------------------


def add_job(attr: QueueAttr, job: JobInfo) -> tuple[Resource, Resource, Resource, Resource]:
    """Book the job into `attr`; returns the (allocated, request, inqueue, elastic) it added."""
    allocated = Resource()
    request = Resource()
    for status, tasks in job.task_status_index.items():
        if allocated_status(status):
            for t in tasks.values():
                allocated.add(t.resreq)
                request.add(t.resreq)
        elif status == PENDING:
            for t in tasks.values():
                request.add(t.resreq)
    inqueue = Resource()
    pg = job.pod_group
    if pg.min_resources is not None:
        # minResources not yet covered by allocated tasks (tasks in Binding count as allocated,
        # while the PodGroup may still be Inqueue: no double counting)
        if pg.phase == PG_INQUEUE:
            inqueue.add(job.deduct_sch_gated_resources(get_inqueue_resource(job, job.allocated)))
        if pg.phase == PG_RUNNING and job.allocated_task_num() >= pg.min_member:
            inqueue.add(job.deduct_sch_gated_resources(get_inqueue_resource(job, job.allocated)))
    elastic = job.get_elastic_resources()
    attr.allocated.add(allocated)
    attr.request.add(request)
    attr.inqueue.add(inqueue)
    attr.elastic.add(elastic)
    return allocated, request, inqueue, elastic


def build_flat(
    ssn: Session, total_resource: Resource, total_guarantee: Resource, opts: dict[QueueID, QueueAttr]
) -> None:
    """Volcano's buildQueueAttrs: an attr for every queue that has a job."""
    for queue in ssn.queues.values():
        if queue.guarantee_raw:
            total_guarantee.add(queue.guarantee)
    for job in ssn.jobs.values():
        attr = opts.get(job.queue)
        if attr is None:
            found = ssn.queues.get(job.queue)
            if found is None:
                log.warning("capacity: job %s references missing queue %s; skipped", job.uid, job.queue)
                continue
            attr = new_flat_attr(found, total_resource, total_guarantee)
            opts[job.queue] = attr
        add_job(attr, job)
    for attr in opts.values():
        attr.deserved.min_dimension_resource(attr.real_capability, INFINITY)
        attr.deserved = res_max(attr.deserved, attr.guarantee)
        attr.update_share()
        log.debug("capacity: %r", attr)


def new_flat_attr(queue: QueueInfo, total_resource: Resource, total_guarantee: Resource) -> QueueAttr:
    attr = QueueAttr(queue.uid, queue.name)
    attr.deserved = queue.deserved.clone()
    if queue.guarantee_raw:
        attr.guarantee = queue.guarantee.clone()
    real = exceeded_part(total_resource, total_guarantee).add(attr.guarantee)
    if queue.capability_raw:
        cap = queue.capability.clone()
        if cap.milli_cpu <= 0:
            cap.milli_cpu = MAX_FLOAT
        if cap.memory <= 0:
            cap.memory = MAX_FLOAT
        attr.capability = cap
        real.min_dimension_resource(cap, INFINITY)
    attr.real_capability = real
    return attr


def new_tree_attr(queue: QueueInfo) -> QueueAttr:
    attr = QueueAttr(queue.uid, queue.name)
    attr.deserved = queue.deserved.clone()
    if queue.capability_raw:
        attr.capability = queue.capability.clone()
    if queue.guarantee_raw:
        attr.guarantee = queue.guarantee.clone()
    return attr


def build_hierarchical(ssn: Session, total_resource: Resource, opts: dict[QueueID, QueueAttr]) -> None:
    """Volcano's buildHierarchicalQueueAttrs; raises HierarchyError when the tree is unusable."""
    queues: dict[QueueID, QueueInfo] = dict(ssn.queues)
    if ROOT_QUEUE not in queues:
        log.warning("capacity: no queue %r; using an implicit root queue with an empty spec", ROOT_QUEUE)
        root_obj: Mapping[str, Any] = {
            "metadata": {"name": ROOT_QUEUE},
            "spec": {"weight": 1, "reclaimable": False},
        }
        queues[ROOT_QUEUE] = QueueInfo(root_obj, creation=ssn.now, implicit=True)
    for queue in queues.values():
        if queue.uid in opts:
            continue
        opts[queue.uid] = new_tree_attr(queue)
        link_ancestors(queue, queues, opts, set())

    for job in ssn.jobs.values():
        attr = opts.get(job.queue)
        if attr is None:
            log.warning("capacity: job %s references missing queue %s; skipped", job.uid, job.queue)
            continue
        if attr.children:
            raise HierarchyError(f"queue {attr.name} of job {job.uid} is not a leaf queue")
        deltas = add_job(attr, job)
        for aid in attr.ancestors:
            anc = opts[aid]
            for total, delta in zip((anc.allocated, anc.request, anc.inqueue, anc.elastic), deltas):
                total.add(delta)

    root = opts[ROOT_QUEUE]
    if root.capability.is_empty():
        # the root is not bounded by today's cluster size: users bound queues they create
        inf = Resource.infinite()
        for name in total_resource.scalar_resources or {}:
            inf.set_scalar(name, MAX_INT64_FLOAT)
        root.capability = inf
    root.real_capability = root.capability
    check_children(root)
    for attr in opts.values():
        attr.update_share()
        log.debug("capacity: %r", attr)


def link_ancestors(
    queue: QueueInfo, queues: Mapping[QueueID, QueueInfo], opts: dict[QueueID, QueueAttr], visiting: set[QueueID]
) -> None:
    """Hang `queue` below its parent (created first when needed), as Volcano's updateAncestors."""
    if queue.uid == ROOT_QUEUE:
        return
    if queue.uid in visiting:
        raise HierarchyError(f"cycle detected in queue hierarchy for queue {queue.name}")
    visiting.add(queue.uid)
    try:
        parent_id = QueueID(queue.parent or ROOT_QUEUE)
        parent = queues.get(parent_id)
        if parent is None:
            raise HierarchyError(f"the queue {queue.name} has invalid parent queue {parent_id}")
        if parent.uid not in opts:
            opts[parent.uid] = new_tree_attr(parent)
            link_ancestors(parent, queues, opts, visiting)
        parent_attr = opts[parent.uid]
        attr = opts[queue.uid]
        parent_attr.children[queue.uid] = attr
        attr.ancestors = [*parent_attr.ancestors, parent.uid]
    finally:
        visiting.discard(queue.uid)


def check_children(attr: QueueAttr) -> None:
    """Volcano's checkHierarchicalQueue: inherit capability, derive real capability, sum guarantees."""
    total_guarantee = Resource()
    total_deserved = Resource()
    for child in attr.children.values():
        child.deserved = res_max(child.deserved, child.guarantee)
        total_deserved.add(child.deserved)
        total_guarantee.add(child.guarantee)
        if child.capability.milli_cpu <= 0:
            child.capability.milli_cpu = attr.capability.milli_cpu
        if child.capability.memory <= 0:
            child.capability.memory = attr.capability.memory
        if attr.capability.scalar_resources is not None:
            if child.capability.scalar_resources is None:
                child.capability.scalar_resources = {}
            for name, v in attr.capability.scalar_resources.items():
                child.capability.scalar_resources.setdefault(name, v)
        exceeds, names = child.capability.greater_partly(attr.capability, INFINITY)
        if exceeds:
            log.warning(
                "capacity: child queue %s capability exceeds parent %s capability on %s; the parent limits it",
                child.name,
                attr.name,
                names,
            )
    if attr.queue_id == ROOT_QUEUE:
        attr.guarantee = total_guarantee
        attr.deserved = total_deserved
    for child in attr.children.values():
        real = exceeded_part(attr.real_capability, total_guarantee).add(child.guarantee)
        real.min_dimension_resource(child.capability, INFINITY)
        child.real_capability = real
    if attr.deserved.less_partly(total_deserved, ZERO):
        log.warning(
            "capacity: children of queue %s deserve more (%s) than it does (%s)",
            attr.name,
            total_deserved,
            attr.deserved,
        )
    if attr.guarantee.less_partly(total_guarantee, ZERO):
        log.warning(
            "capacity: children of queue %s are guaranteed more (%s) than it is (%s)",
            attr.name,
            total_guarantee,
            attr.guarantee,
        )
    for child in attr.children.values():
        check_children(child)
