"""capacity: per-queue quotas with deserved/guarantee/capability, flat or hierarchical (Volcano's capacity.go).

Unlike proportion, nothing is water-filled: a queue's `deserved` is what its spec says (capped by its
real capability, raised to its guarantee). Each queue gets
- `real_capability`: the cluster total minus every queue's guarantee, plus its own guarantee, capped
  per dimension by `spec.capability` (dimensions the capability leaves out are not capped);
- `allocated` / `inqueue` / `elastic`: what its jobs hold, have reserved by being Inqueue (minResources
  not yet covered by allocated tasks) and hold beyond their minResources.

Callbacks:
- AllocatableFn: `allocated + request <= real_capability` on the dimensions the task asks for, for the
  queue and (with hierarchy) each ancestor; closed queues and, with hierarchy, non-leaf queues refuse.
- JobEnqueueableFn: `minResources + allocated + inqueue - elastic <= real_capability` on the dimensions
  minResources names, for the queue and each ancestor; JobEnqueuedFn books minResources as inqueue.
- PreemptiveFn (may this queue reclaim?): the request still fits the real capability and, on at least
  one requested dimension in use, `allocated + request <= deserved` (with `ancestorReclaimLevel` > 0,
  an ancestor within that many levels may stand in for the leaf).
- ReclaimableFn: victims, in victim order, from queues that stay at or above their guarantee and are
  above deserved on a dimension the victim uses (or whose deserved does not name any of them); with
  `ancestorReclaimLevel` > 0 each ancestor of the victim's queue up to that level which is not shared
  with the reclaimer's queue must be above its deserved too.
- QueueOrderFn: spec.priority first, then share (max allocated/deserved over the deserved dimensions;
  a queue without deserved has share 1), queues with deserved first on a tie. With hierarchy leaves go
  before inner queues, and two leaves compare the shares of their subtrees below their deepest common
  ancestor; VictimQueueOrderFn evicts first from queues closest to the reclaimer in the tree.
- Simulate{Allocatable,AddTask,RemoveTask}Fn for preempt's what-if checks, over a copy of the queue
  accounting kept in the task's cycle state.

The accounting these callbacks read (one QueueAttr per queue, flat or as a tree) is built at session
open by scheduler_ext/plugins/capacity/queues.py; the Resource compares it needs that the Resource
class does not have are in scheduler_ext/plugins/capacity/compare.py.

Hierarchy (`enableHierarchy: true`): every Queue hangs below `spec.parent` (empty: `root`); jobs may
only live in leaf queues. The root's capability is unlimited when unset; a child inherits each
capability dimension it leaves unset from its parent; a child's real capability is its parent's real
capability minus the sum of its siblings' guarantees (its own guarantee added back), capped by its
capability. The root's deserved and guarantee are the sums of its children's. A queue naming a
missing parent or a job in an inner queue makes the plugin refuse everything this session (Volcano's
"failed to check queue's hierarchical structure"); queues whose parents form a cycle end up detached
from the root with a zero real capability, as in Volcano (whose cycle check never fires).

Departures from Volcano (see docs/scheduler-capacity.md): a missing `root` Queue is treated as an
implicit root with an empty spec (Volcano's scheduler creates that Queue at start-up; Tidemark does
not); no DRA quotas (the `capacity.DynamicResourceAllocationEnable` / `capacity.DRAConsumableCapacityEnable`
arguments are accepted and ignored); no SchedulingGatesQueueAdmission reservations (an alpha gate,
off by default); no queue metrics; the simulate state is copied on first use (PrePredicate only drops
a stale copy); UnifiedEvictableFn (gang reclaim) is registered though no Tidemark action calls it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.queue import QUEUE_OPEN, QueueInfo
from scheduler_ext.api.resource import ZERO, Resource
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PERMIT, REJECT, QueueID
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.session_plugins import CycleState, Event, EventHandler
from scheduler_ext.plugins.capacity.compare import (
    greater_partly_with_relevant_dimensions,
    intersection,
    intersection_without_ignored,
    less_equal_partly_zero_filtered,
)
from scheduler_ext.plugins.capacity.queues import (
    ROOT_QUEUE,
    HierarchyError,
    QueueAttr,
    ancestor_at_depth,
    ancestors_up_to,
    build_flat,
    build_hierarchical,
    compare_share_with_deserved,
    queue_level,
)

log = logging.getLogger(__name__)

PLUGIN_NAME: Final = "capacity"
ANCESTOR_RECLAIM_LEVEL: Final = "ancestorReclaimLevel"
DRA_ENABLE: Final = "capacity.DynamicResourceAllocationEnable"
DRA_CONSUMABLE_CAPACITY_ENABLE: Final = "capacity.DRAConsumableCapacityEnable"
STATE_KEY: Final = "capacity"


class CapacityPlugin(Plugin):
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        level = arguments.get_int(ANCESTOR_RECLAIM_LEVEL, 0)
        if level < 0:
            log.warning("capacity: %s should be non-negative, got %d; using 0", ANCESTOR_RECLAIM_LEVEL, level)
            level = 0
        self.ancestor_reclaim_level = level
        self.total_resource = Resource()
        self.total_guarantee = Resource()
        self.queue_opts: dict[QueueID, QueueAttr] = {}
        self.hierarchy = False
        self.ready = True

    # --- building the queue accounting ------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        self.total_resource = ssn.total_resource.clone()
        self.hierarchy = ssn.hierarchy_enabled(self.name)
        if self.hierarchy:
            try:
                build_hierarchical(ssn, self.total_resource, self.queue_opts)
                self.ready = True
            except HierarchyError as e:
                log.error("capacity: %s; the plugin rejects every queue this session", e)
                self.ready = False
        else:
            build_flat(ssn, self.total_resource, self.total_guarantee, self.queue_opts)
            self.ready = True
        self._register(ssn)

    # --- checks shared by callbacks -----------------------------------------------------------------
    def _chain(self, attrs: Mapping[QueueID, QueueAttr], attr: QueueAttr) -> list[QueueAttr] | None:
        """The queue and (with hierarchy) its ancestors, leaf first; None if one is unknown."""
        chain = [attr]
        for aid in reversed(attr.ancestors):
            anc = attrs.get(aid)
            if anc is None:
                return None
            chain.append(anc)
        return chain

    @staticmethod
    def _task_fits(attr: QueueAttr, task: TaskInfo) -> bool:
        future_used = attr.allocated.clone().add(task.resreq)
        ok, names = future_used.less_equal_with_dimension_and_resources_name(attr.real_capability, task.resreq)
        if not ok:
            log.debug("capacity: queue %s: task %s does not fit real capability on %s", attr.name, task.name, names)
        return ok

    def _allocatable_in(self, attrs: Mapping[QueueID, QueueAttr], queue: QueueInfo, task: TaskInfo) -> bool:
        attr = attrs.get(queue.uid)
        if attr is None:
            return False
        if self.hierarchy and not attr.is_leaf():
            log.debug("capacity: queue %s is not a leaf queue, cannot allocate task %s", queue.name, task.name)
            return False
        chain = self._chain(attrs, attr)
        return chain is not None and all(self._task_fits(a, task) for a in chain)

    @staticmethod
    def _job_fits(attr: QueueAttr, job: JobInfo) -> bool:
        min_req = job.get_min_resources()
        r = min_req.clone().add(attr.allocated).add(attr.inqueue).sub(attr.elastic)
        ok, names = r.less_equal_with_dimension_and_resources_name(attr.real_capability, min_req)
        if not ok:
            log.debug("capacity: queue %s: job %s quota insufficient on %s", attr.name, job.uid, names)
        return ok

    def _reclaimee_ancestor_to_check(
        self, reclaimer_attr: QueueAttr, reclaimee_attr: QueueAttr, level: int
    ) -> tuple[QueueAttr | None, bool]:
        """(the victim queue's ancestor `level` up, whether it must be checked): only when not shared."""
        rid = ancestor_at_depth(reclaimee_attr, level)
        if rid is None or rid == ROOT_QUEUE:
            return None, False
        if ancestor_at_depth(reclaimer_attr, level) == rid:
            return None, False
        return self.queue_opts.get(rid), True

    def _shares_non_root_ancestor_within_level(self, a: QueueAttr, b: QueueAttr) -> bool:
        if self.ancestor_reclaim_level <= 0:
            return False
        a_set = set(ancestors_up_to(a, self.ancestor_reclaim_level).values())
        b_set = set(ancestors_up_to(b, self.ancestor_reclaim_level).values())
        return any(x != ROOT_QUEUE and x in b_set for x in a_set)

    # --- callbacks ------------------------------------------------------------------------------------
    def _register(self, ssn: Session) -> None:
        """Every callback over this session's accounting (`self.queue_opts`, built just before)."""
        opts = self.queue_opts
        ssn.add_reclaimable_fn(self.name, functools.partial(self._reclaimable, ssn, opts))
        ssn.add_unified_evictable_fn(self.name, functools.partial(self._unified_evictable, ssn, opts))
        ssn.add_preemptive_fn(self.name, functools.partial(self._preemptive, opts))
        ssn.add_allocatable_fn(self.name, functools.partial(self._allocatable, opts))
        ssn.add_job_enqueueable_fn(self.name, functools.partial(self._enqueueable, ssn, opts))
        ssn.add_job_enqueued_fn(self.name, functools.partial(self._enqueued, opts))
        self._register_simulations(ssn, opts)
        ssn.add_event_handler(
            EventHandler(
                functools.partial(self._on_allocation_event, ssn, opts, 1),
                functools.partial(self._on_allocation_event, ssn, opts, -1),
            )
        )
        if not self.ready:
            return  # Volcano registers no queue order when the tree is broken
        if self.hierarchy:
            self._register_tree_orders(ssn)
        else:
            ssn.add_queue_order_fn(self.name, self._flat_queue_order)

    def _reclaimable(
        self, ssn: Session, opts: Mapping[QueueID, QueueAttr], reclaimer: TaskInfo, reclaimees: list[TaskInfo]
    ) -> tuple[list[TaskInfo], int]:
        """ReclaimableFn: in victim order, the reclaimees whose queues can give them up (module doc)."""
        victims: list[TaskInfo] = []
        if not self.ready:
            return victims, REJECT
        reclaimer_job = ssn.jobs.get(reclaimer.job)
        if reclaimer_job is None:
            return victims, REJECT
        reclaimer_attr = opts.get(reclaimer_job.queue)
        if reclaimer_attr is None:
            return victims, REJECT
        allocations: dict[QueueID, Resource] = {}
        pq = ssn.build_victims_priority_queue(reclaimees, reclaimer)
        while not pq.empty():
            reclaimee = pq.pop()
            assert reclaimee is not None
            job = ssn.jobs.get(reclaimee.job)
            attr = opts.get(job.queue) if job is not None else None
            if job is None or attr is None:
                continue
            if not intersection_without_ignored(reclaimee.resreq, reclaimer.init_resreq):
                continue  # nothing the reclaimer needs
            allocated = allocations.get(job.queue)
            if allocated is None:
                allocated = allocations[job.queue] = attr.allocated.clone()
            # the victim's queue must stay at or above its guarantee
            if not attr.guarantee.less_equal(allocated.clone().sub(reclaimee.resreq), ZERO):
                continue
            if not intersection(reclaimee.resreq, attr.deserved):
                # an immediate victim: its queue deserves none of what it uses
                if (
                    self.hierarchy
                    and self.ancestor_reclaim_level > 0
                    and self._shares_non_root_ancestor_within_level(reclaimer_attr, attr)
                    and not intersection(reclaimer.resreq, reclaimer_attr.deserved)
                ):
                    continue  # siblings without deserved under a shared ancestor: no real contention
            elif not greater_partly_with_relevant_dimensions(allocated, attr.deserved, reclaimee.resreq)[0]:
                continue
            ancestor_allocations = self._reclaimable_through_ancestors(reclaimer_attr, attr, reclaimee, allocations)
            if ancestor_allocations is None:
                continue
            allocated.sub(reclaimee.resreq)
            for a in ancestor_allocations:
                a.sub(reclaimee.resreq)
            victims.append(reclaimee)
        log.debug("capacity: victims for %s: %s", reclaimer.name, [v.name for v in victims])
        return victims, PERMIT

    def _reclaimable_through_ancestors(
        self,
        reclaimer_attr: QueueAttr,
        attr: QueueAttr,
        reclaimee: TaskInfo,
        allocations: dict[QueueID, Resource],
    ) -> list[Resource] | None:
        """With `ancestorReclaimLevel`: the running allocations of the victim queue's ancestors that
        must give the victim up (each above its deserved), or None when one of them may not."""
        ancestor_allocations: list[Resource] = []
        if not (self.hierarchy and self.ancestor_reclaim_level > 0):
            return ancestor_allocations
        for lv in range(1, self.ancestor_reclaim_level + 1):
            anc, need = self._reclaimee_ancestor_to_check(reclaimer_attr, attr, lv)
            if not need:
                continue
            if anc is None:
                return None
            anc_alloc = allocations.get(anc.queue_id)
            if anc_alloc is None:
                anc_alloc = allocations[anc.queue_id] = anc.allocated.clone()
            ancestor_allocations.append(anc_alloc)
            if not intersection(reclaimee.resreq, anc.deserved):
                continue
            if not greater_partly_with_relevant_dimensions(anc_alloc, anc.deserved, reclaimee.resreq)[0]:
                return None
        return ancestor_allocations

    def _unified_evictable(
        self, ssn: Session, opts: Mapping[QueueID, QueueAttr], ctx: Any, candidates: list[TaskInfo]
    ) -> tuple[list[TaskInfo], int]:
        """Gang reclaim: guarantee and deserved checks per victim queue (gang preempt: all pass)."""
        if str(getattr(ctx, "kind", "")) in ("1", "GangPreempt"):
            return list(candidates), PERMIT
        if not self.ready:
            return [], REJECT
        victims: list[TaskInfo] = []
        allocations: dict[QueueID, Resource] = {}
        for reclaimee in candidates:
            job = ssn.jobs.get(reclaimee.job)
            attr = opts.get(job.queue) if job is not None else None
            if job is None or attr is None:
                continue
            allocated = allocations.get(job.queue)
            if allocated is None:
                allocated = allocations[job.queue] = attr.allocated.clone()
            if not attr.guarantee.less_equal(allocated.clone().sub(reclaimee.resreq), ZERO):
                continue
            if not intersection(reclaimee.resreq, attr.deserved) or greater_partly_with_relevant_dimensions(
                allocated, attr.deserved, reclaimee.resreq
            )[0]:
                allocated.sub(reclaimee.resreq)
                victims.append(reclaimee)
        return victims, PERMIT

    def _preemptive(self, opts: Mapping[QueueID, QueueAttr], queue: QueueInfo, candidates: list[TaskInfo]) -> bool:
        """PreemptiveFn: may this queue reclaim for these tasks?"""
        if not self.ready or queue.state != QUEUE_OPEN:
            return False
        attr = opts.get(queue.uid)
        if attr is None:
            return False
        total_req = Resource()
        for t in candidates:
            total_req.add(t.resreq)
        future_used = attr.allocated.clone().add(total_req)
        if not future_used.less_equal_with_dimension_and_resources_name(attr.real_capability, total_req)[0]:
            log.debug("capacity: queue %s cannot reclaim: %s exceeds real capability", queue.name, future_used)
            return False
        ok, names = less_equal_partly_zero_filtered(future_used, attr.deserved, total_req)
        if ok:
            log.debug("capacity: queue %s can reclaim on %s", queue.name, names)
            return True
        if self.hierarchy and self.ancestor_reclaim_level > 0:
            for lv in range(1, self.ancestor_reclaim_level + 1):
                aid = ancestor_at_depth(attr, lv)
                if aid is None or aid == ROOT_QUEUE:
                    continue
                anc = opts.get(aid)
                if anc is None:
                    continue
                anc_used = anc.allocated.clone().add(total_req)
                if less_equal_partly_zero_filtered(anc_used, anc.deserved, total_req)[0]:
                    log.debug("capacity: queue %s can reclaim through ancestor %s", queue.name, anc.name)
                    return True
        return False

    def _allocatable(self, opts: Mapping[QueueID, QueueAttr], queue: QueueInfo, task: TaskInfo) -> bool:
        """AllocatableFn: the task fits the real capability of its queue (and, with hierarchy, ancestors)."""
        if queue.state != QUEUE_OPEN or not self.ready:
            return False
        return self._allocatable_in(opts, queue, task)

    def _enqueueable(self, ssn: Session, opts: Mapping[QueueID, QueueAttr], job: JobInfo) -> int:
        """JobEnqueueableFn: the job's minResources fit its queue (and, with hierarchy, ancestors)."""
        if not self.ready:
            return REJECT
        attr = opts.get(job.queue)
        queue = ssn.queues.get(job.queue)
        if attr is None or queue is None:
            return REJECT
        if self.hierarchy and not attr.is_leaf():
            return REJECT
        if queue.state != QUEUE_OPEN:
            return REJECT
        if job.pod_group.min_resources is None:
            return PERMIT
        chain = self._chain(opts, attr)
        if chain is None or not all(self._job_fits(a, job) for a in chain):
            return REJECT
        return PERMIT

    def _enqueued(self, opts: Mapping[QueueID, QueueAttr], job: JobInfo) -> None:
        """JobEnqueuedFn: book the job's minResources as inqueue."""
        attr = opts.get(job.queue)
        if attr is None or job.pod_group.min_resources is None:
            return
        booked = job.deduct_sch_gated_resources(job.get_min_resources())
        attr.inqueue.add(booked)
        if self.hierarchy:
            for aid in attr.ancestors:
                anc = opts.get(aid)
                if anc is not None:
                    anc.inqueue.add(booked)

    def _on_allocation_event(self, ssn: Session, opts: Mapping[QueueID, QueueAttr], sign: int, ev: Event) -> None:
        """Allocate (+1) / deallocate (-1): the queue's allocated follows the task."""
        job = ssn.jobs.get(ev.task.job)
        attr = opts.get(job.queue) if job is not None else None
        if attr is None:
            return
        _apply(attr.allocated, ev.task.resreq, sign)
        # as Volcano: only the leaf's share follows; ancestors keep their session-open share
        attr.update_share()
        if self.hierarchy:
            for aid in attr.ancestors:
                anc = opts.get(aid)
                if anc is not None:
                    _apply(anc.allocated, ev.task.resreq, sign)

    # --- simulations (preempt's what-if), over a copy of the accounting per task ------------------------
    def _register_simulations(self, ssn: Session, opts: Mapping[QueueID, QueueAttr]) -> None:
        hierarchy = self.hierarchy

        def state_of(cs: CycleState) -> dict[QueueID, QueueAttr]:
            st = cs.get(STATE_KEY)
            if st is None:
                st = cs[STATE_KEY] = {qid: a.clone() for qid, a in opts.items()}
            return st  # type: ignore[no-any-return]

        def pre_predicate(task: TaskInfo) -> str | None:
            # Volcano snapshots the accounting here; the copy is taken lazily on first use instead,
            # so only an older copy is dropped (cheap on allocate's hot path)
            cs = ssn.cycle_states.get(task.uid)
            if cs is not None:
                cs.pop(STATE_KEY, None)
            return None

        ssn.add_pre_predicate_fn(self.name, pre_predicate)

        def simulate_allocatable(cs: CycleState, queue: QueueInfo, task: TaskInfo) -> bool:
            if not self.ready:
                return False
            return self._allocatable_in(state_of(cs), queue, task)

        ssn.add_simulate_allocatable_fn(self.name, simulate_allocatable)

        def simulate_change(sign: int) -> Callable[[CycleState, TaskInfo, TaskInfo, NodeInfo], Exception | None]:
            def fn(cs: CycleState, _to_schedule: TaskInfo, task: TaskInfo, _node: NodeInfo) -> Exception | None:
                job = ssn.jobs.get(task.job)
                if job is None:
                    return ValueError(f"[capacity] job {task.job} not found in session")
                st = state_of(cs)
                attr = st.get(job.queue)
                if attr is None:
                    return ValueError(f"[capacity] queue {job.queue} not found")
                _apply(attr.allocated, task.resreq, sign)
                attr.update_share()
                if hierarchy:
                    for aid in attr.ancestors:
                        anc = st.get(aid)
                        if anc is not None:
                            _apply(anc.allocated, task.resreq, sign)
                return None

            return fn

        ssn.add_simulate_add_task_fn(self.name, simulate_change(1))
        ssn.add_simulate_remove_task_fn(self.name, simulate_change(-1))

    # --- queue orders ------------------------------------------------------------------------------------
    def _flat_queue_order(self, lv: QueueInfo, rv: QueueInfo) -> int:
        if lv.priority != rv.priority:
            return rv.priority - lv.priority
        la, ra = self.queue_opts.get(lv.uid), self.queue_opts.get(rv.uid)
        if la is None or ra is None:
            return 0
        return compare_share_with_deserved(la, ra)

    def _register_tree_orders(self, ssn: Session) -> None:
        opts = self.queue_opts

        def queue_order(lv: QueueInfo, rv: QueueInfo) -> int:
            if lv.priority != rv.priority:
                return rv.priority - lv.priority
            la, ra = opts.get(lv.uid), opts.get(rv.uid)
            if la is None or ra is None:
                return 0
            lleaf, rleaf = la.is_leaf(), ra.is_leaf()
            if lleaf != rleaf:
                return -1 if lleaf else 1
            if not lleaf:
                return compare_share_with_deserved(la, ra)
            # two leaves: compare the subtrees just below their deepest common ancestor
            lvl = queue_level(la, ra)
            lp = opts.get(la.ancestors[lvl + 1]) if lvl + 1 < len(la.ancestors) else la
            rp = opts.get(ra.ancestors[lvl + 1]) if lvl + 1 < len(ra.ancestors) else ra
            if lp is None or rp is None:
                return 0
            return compare_share_with_deserved(lp, rp)

        ssn.add_queue_order_fn(self.name, queue_order)

        def victim_queue_order(lv: QueueInfo, rv: QueueInfo, pv: QueueInfo) -> int:
            la, ra, pa = opts.get(lv.uid), opts.get(rv.uid), opts.get(pv.uid)
            if la is None or ra is None or pa is None:
                return 0
            ll, rl = queue_level(la, pa), queue_level(ra, pa)
            if ll == rl:
                return 0
            return -1 if ll > rl else 1

        ssn.add_victim_queue_order_fn(self.name, victim_queue_order)

    def on_session_close(self, ssn: Session) -> None:
        self.queue_opts = {}
        self.total_guarantee = Resource()


def _apply(total: Resource, delta: Resource, sign: int) -> None:
    if sign > 0:
        total.add(delta)
    else:
        total.sub(delta)


SPEC = PluginSpec(
    name=PLUGIN_NAME,
    build=CapacityPlugin,
    arguments=(
        ArgSpec(
            ANCESTOR_RECLAIM_LEVEL,
            "int",
            0,
            "with enableHierarchy: how many levels of the victim queue's ancestors (not shared with the "
            "reclaimer's) must also be over deserved for a reclaim, and may stand in for the reclaimer's "
            "queue in PreemptiveFn; 0 checks leaves only; negative values count as 0",
        ),
        ArgSpec(DRA_ENABLE, "bool", False, "accepted for Volcano compatibility; Tidemark has no DRA quotas"),
        ArgSpec(DRA_CONSUMABLE_CAPACITY_ENABLE, "bool", False, "accepted for Volcano compatibility; no effect"),
    ),
    doc="Queue quotas: deserved, guarantee, capability; optionally hierarchical.",
)
