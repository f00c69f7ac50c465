"""The session's callback tables and the rules that combine them (Volcano's session_plugins.go).

This module alone decides how plugin callbacks combine: tiers in conf order, a plugin's callback
used only when its enable flag is on, first non-zero comparison wins for orders (then a documented
total tie-break), votes (Permit/Abstain/Reject) per tier for pipelined/enqueueable, intersection of
victims within the first tier that decides, and so on. Plugins only register.

Besides Volcano's callbacks there are three speed extensions, each optional for a plugin:
- `add_*_order_key_fn`: a sort key consistent with the plugin's compare function; when every
  enabled plugin of an order supplies one, priority queues compare tuples instead of calling Python
  compare chains.
- `add_batch_predicate_fn` / `add_vector_node_order_fn`: predicates and scores over many nodes at once
  (numpy), used by allocate/backfill instead of per-node calls.
- `add_fit_headroom_fn`: extra room a plugin grants a task on some nodes in the resource-fit check
  (the oversubscription plugin's `allocatable + X` for offline pods).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.task import TaskInfo, compare_task
from scheduler_ext.api.types import FitError, Status, ValidateResult

if TYPE_CHECKING:
    from scheduler_ext.framework.conf import PluginOption, Tier

CompareFn = Callable[[Any, Any], int]
KeyFn = Callable[[Any], Any]
VictimCompareFn = Callable[[QueueInfo, QueueInfo, QueueInfo], int]
PredicateFn = Callable[[TaskInfo, NodeInfo], "FitError | None"]
PrePredicateFn = Callable[[TaskInfo], "str | None"]
BestNodeFn = Callable[[TaskInfo, dict[float, list[NodeInfo]]], "NodeInfo | None"]
NodeOrderFn = Callable[[TaskInfo, NodeInfo], float]
BatchNodeOrderFn = Callable[[TaskInfo, list[NodeInfo]], dict[str, float]]
VectorNodeOrderFn = Callable[[TaskInfo, np.ndarray], np.ndarray]
NodeMapFn = Callable[[TaskInfo, NodeInfo], float]
NodeReduceFn = Callable[[TaskInfo, list[list[Any]]], None]
EvictableFn = Callable[[TaskInfo, list[TaskInfo]], tuple[list[TaskInfo], int]]
UnifiedEvictableFn = Callable[[Any, list[TaskInfo]], tuple[list[TaskInfo], int]]
ValidateFn = Callable[[Any], bool]
ValidateWithCandidateFn = Callable[[QueueInfo, list[TaskInfo]], bool]
AllocatableFn = Callable[[QueueInfo, TaskInfo], bool]
VoteFn = Callable[[Any], int]
ValidateExFn = Callable[[Any], "ValidateResult | None"]
JobEnqueuedFn = Callable[[Any], None]
TargetJobFn = Callable[[list[JobInfo]], "JobInfo | None"]
ReservedNodesFn = Callable[[], None]
VictimTasksFn = Callable[[list[TaskInfo]], list[TaskInfo]]
CycleState = dict[str, Any]
SimulateAddRemoveFn = Callable[[CycleState, TaskInfo, TaskInfo, NodeInfo], "Exception | None"]
SimulatePredicateFn = Callable[[CycleState, TaskInfo, NodeInfo], "Exception | None"]
SimulateAllocatableFn = Callable[[CycleState, QueueInfo, TaskInfo], bool]
FitHeadroomFn = Callable[[TaskInfo, np.ndarray], "np.ndarray | None"]


@dataclass(slots=True)
class BatchPredicateResult:
    """A batch predicate's verdict for node indices `nodes`: which pass, and why the others fail.

    `failures` groups failing node indices (table indices) by their statuses; a plugin may instead
    give `failures_fn`, called only when the reasons are needed (most tasks find a node and never
    need them).
    """

    passed: np.ndarray
    failures: Sequence[tuple[np.ndarray, tuple[Status, ...]]] = field(default_factory=list)
    failures_fn: Callable[[], Sequence[tuple[np.ndarray, tuple[Status, ...]]]] | None = None

    def all_failures(self) -> list[tuple[np.ndarray, tuple[Status, ...]]]:
        if self.failures_fn is not None:
            self.failures = [*self.failures, *self.failures_fn()]
            self.failures_fn = None
        return list(self.failures)


BatchPredicateFn = Callable[[TaskInfo, np.ndarray], BatchPredicateResult]


@dataclass(slots=True)
class Event:
    task: TaskInfo
    err: Exception | None = None


@dataclass(slots=True)
class EventHandler:
    allocate_func: Callable[[Event], None] | None = None
    deallocate_func: Callable[[Event], None] | None = None


class PluginTables:
    """Callback tables keyed by plugin name, and their dispatch over tiers."""

    tiers: tuple[Tier, ...]

    def __init__(self) -> None:
        self.event_handlers: list[EventHandler] = []
        self.job_order_fns: dict[str, CompareFn] = {}
        self.job_order_key_fns: dict[str, KeyFn] = {}
        self.queue_order_fns: dict[str, CompareFn] = {}
        self.queue_order_key_fns: dict[str, KeyFn] = {}
        self.victim_queue_order_fns: dict[str, VictimCompareFn] = {}
        self.task_order_fns: dict[str, CompareFn] = {}
        self.task_order_key_fns: dict[str, KeyFn] = {}
        self.cluster_order_fns: dict[str, CompareFn] = {}
        self.predicate_fns: dict[str, PredicateFn] = {}
        self.batch_predicate_fns: dict[str, BatchPredicateFn] = {}
        self.pre_predicate_fns: dict[str, PrePredicateFn] = {}
        self.best_node_fns: dict[str, BestNodeFn] = {}
        self.node_order_fns: dict[str, NodeOrderFn] = {}
        self.batch_node_order_fns: dict[str, BatchNodeOrderFn] = {}
        self.vector_node_order_fns: dict[str, list[tuple[VectorNodeOrderFn, bool]]] = {}
        self.node_map_fns: dict[str, NodeMapFn] = {}
        self.node_reduce_fns: dict[str, NodeReduceFn] = {}
        self.preemptable_fns: dict[str, EvictableFn] = {}
        self.reclaimable_fns: dict[str, EvictableFn] = {}
        self.unified_evictable_fns: dict[str, UnifiedEvictableFn] = {}
        self.overused_fns: dict[str, ValidateFn] = {}
        self.preemptive_fns: dict[str, ValidateWithCandidateFn] = {}
        self.allocatable_fns: dict[str, AllocatableFn] = {}
        self.job_ready_fns: dict[str, ValidateFn] = {}
        self.job_pipelined_fns: dict[str, VoteFn] = {}
        self.job_valid_fns: dict[str, ValidateExFn] = {}
        self.job_enqueueable_fns: dict[str, VoteFn] = {}
        self.job_enqueued_fns: dict[str, JobEnqueuedFn] = {}
        self.target_job_fns: dict[str, TargetJobFn] = {}
        self.reserved_nodes_fns: dict[str, ReservedNodesFn] = {}
        self.victim_tasks_fns: dict[str, list[VictimTasksFn]] = {}
        self.job_starving_fns: dict[str, ValidateFn] = {}
        self.simulate_add_task_fns: dict[str, SimulateAddRemoveFn] = {}
        self.simulate_remove_task_fns: dict[str, SimulateAddRemoveFn] = {}
        self.simulate_predicate_fns: dict[str, SimulatePredicateFn] = {}
        self.simulate_allocatable_fns: dict[str, SimulateAllocatableFn] = {}
        self.fit_headroom_fns: dict[str, FitHeadroomFn] = {}
        self.node_local_headroom: set[str] = set()
        self._ordered_cache: dict[tuple[int, str], list[tuple[int, str, Any]]] = {}

    # --- registration ------------------------------------------------------------------------
    def _reg(self, table: dict[str, Any], name: str, fn: Any) -> None:
        table[name] = fn
        self._ordered_cache.clear()

    def add_event_handler(self, eh: EventHandler) -> None:
        self.event_handlers.append(eh)

    def add_job_order_fn(self, name: str, fn: CompareFn) -> None:
        self._reg(self.job_order_fns, name, fn)

    def add_job_order_key_fn(self, name: str, fn: KeyFn) -> None:
        """Optional: a key with sign(cmp(l, r)) == sign(key(l) - key(r)) for this plugin's JobOrderFn."""
        self._reg(self.job_order_key_fns, name, fn)

    def add_queue_order_fn(self, name: str, fn: CompareFn) -> None:
        self._reg(self.queue_order_fns, name, fn)

    def add_queue_order_key_fn(self, name: str, fn: KeyFn) -> None:
        self._reg(self.queue_order_key_fns, name, fn)

    def add_victim_queue_order_fn(self, name: str, fn: VictimCompareFn) -> None:
        self._reg(self.victim_queue_order_fns, name, fn)

    def add_cluster_order_fn(self, name: str, fn: CompareFn) -> None:
        self._reg(self.cluster_order_fns, name, fn)

    def add_task_order_fn(self, name: str, fn: CompareFn) -> None:
        self._reg(self.task_order_fns, name, fn)

    def add_task_order_key_fn(self, name: str, fn: KeyFn) -> None:
        self._reg(self.task_order_key_fns, name, fn)

    def add_predicate_fn(self, name: str, fn: PredicateFn) -> None:
        self._reg(self.predicate_fns, name, fn)

    def add_batch_predicate_fn(self, name: str, fn: BatchPredicateFn) -> None:
        """Optional vectorised form of this plugin's PredicateFn (same verdicts, many nodes at once)."""
        self._reg(self.batch_predicate_fns, name, fn)

    def add_pre_predicate_fn(self, name: str, fn: PrePredicateFn) -> None:
        self._reg(self.pre_predicate_fns, name, fn)

    def add_best_node_fn(self, name: str, fn: BestNodeFn) -> None:
        self._reg(self.best_node_fns, name, fn)

    def add_node_order_fn(self, name: str, fn: NodeOrderFn) -> None:
        self._reg(self.node_order_fns, name, fn)

    def add_batch_node_order_fn(self, name: str, fn: BatchNodeOrderFn) -> None:
        self._reg(self.batch_node_order_fns, name, fn)

    def add_vector_node_order_fn(self, name: str, fn: VectorNodeOrderFn, *, node_local: bool = False) -> None:
        """Scores for node indices as an array (summed with the other node-order scores).

        node_local=True promises that a node's score depends only on the task's resource requests
        and that node's table row; the session then caches scores per request shape and recomputes
        only nodes whose row changed. A plugin may register several fns.
        """
        self.vector_node_order_fns.setdefault(name, []).append((fn, node_local))
        self._ordered_cache.clear()

    def add_node_map_fn(self, name: str, fn: NodeMapFn) -> None:
        self._reg(self.node_map_fns, name, fn)

    def add_node_reduce_fn(self, name: str, fn: NodeReduceFn) -> None:
        self._reg(self.node_reduce_fns, name, fn)

    def add_preemptable_fn(self, name: str, fn: EvictableFn) -> None:
        self._reg(self.preemptable_fns, name, fn)

    def add_reclaimable_fn(self, name: str, fn: EvictableFn) -> None:
        self._reg(self.reclaimable_fns, name, fn)

    def add_unified_evictable_fn(self, name: str, fn: UnifiedEvictableFn) -> None:
        self._reg(self.unified_evictable_fns, name, fn)

    def add_overused_fn(self, name: str, fn: ValidateFn) -> None:
        self._reg(self.overused_fns, name, fn)

    def add_preemptive_fn(self, name: str, fn: ValidateWithCandidateFn) -> None:
        self._reg(self.preemptive_fns, name, fn)

    def add_allocatable_fn(self, name: str, fn: AllocatableFn) -> None:
        self._reg(self.allocatable_fns, name, fn)

    def add_job_ready_fn(self, name: str, fn: ValidateFn) -> None:
        self._reg(self.job_ready_fns, name, fn)

    def add_job_pipelined_fn(self, name: str, fn: VoteFn) -> None:
        self._reg(self.job_pipelined_fns, name, fn)

    def add_job_valid_fn(self, name: str, fn: ValidateExFn) -> None:
        self._reg(self.job_valid_fns, name, fn)

    def add_job_enqueueable_fn(self, name: str, fn: VoteFn) -> None:
        self._reg(self.job_enqueueable_fns, name, fn)

    def add_job_enqueued_fn(self, name: str, fn: JobEnqueuedFn) -> None:
        self._reg(self.job_enqueued_fns, name, fn)

    def add_target_job_fn(self, name: str, fn: TargetJobFn) -> None:
        self._reg(self.target_job_fns, name, fn)

    def add_reserved_nodes_fn(self, name: str, fn: ReservedNodesFn) -> None:
        self._reg(self.reserved_nodes_fns, name, fn)

    def add_victim_tasks_fns(self, name: str, fns: list[VictimTasksFn]) -> None:
        self._reg(self.victim_tasks_fns, name, list(fns))

    def add_job_starving_fns(self, name: str, fn: ValidateFn) -> None:
        self._reg(self.job_starving_fns, name, fn)

    def add_simulate_add_task_fn(self, name: str, fn: SimulateAddRemoveFn) -> None:
        self._reg(self.simulate_add_task_fns, name, fn)

    def add_simulate_remove_task_fn(self, name: str, fn: SimulateAddRemoveFn) -> None:
        self._reg(self.simulate_remove_task_fns, name, fn)

    def add_simulate_predicate_fn(self, name: str, fn: SimulatePredicateFn) -> None:
        self._reg(self.simulate_predicate_fns, name, fn)

    def add_simulate_allocatable_fn(self, name: str, fn: SimulateAllocatableFn) -> None:
        self._reg(self.simulate_allocatable_fns, name, fn)

    def add_fit_headroom_fn(self, name: str, fn: FitHeadroomFn, *, node_local: bool = False) -> None:
        """Extra (n, D) room for `task` on node indices, added to idle/future idle in the fit check.

        node_local=True promises that the fn returns the same array object for tasks of the same
        kind and that a row of it only changes when that node's table generation changes; the
        session then caches fit checks with the headroom as it does without.
        """
        self._reg(self.fit_headroom_fns, name, fn)
        if node_local:
            self.node_local_headroom.add(name)
        else:
            self.node_local_headroom.discard(name)

    # --- ordering helper -----------------------------------------------------------------------
    def _ordered(self, table: dict[str, Any], flag: str | None) -> list[tuple[int, str, Any]]:
        """(tier index, plugin name, fn) for enabled plugins with a registered fn, in conf order."""
        key = (id(table), flag or "")
        hit = self._ordered_cache.get(key)
        if hit is not None:
            return hit
        out: list[tuple[int, str, Any]] = []
        for ti, tier in enumerate(self.tiers):
            for p in tier.plugins:
                if flag is not None and not p.enabled(flag):
                    continue
                fn = table.get(p.name)
                if fn is not None:
                    out.append((ti, p.name, fn))
        self._ordered_cache[key] = out
        return out

    def _by_tier(self, table: dict[str, Any], flag: str | None) -> list[list[tuple[str, Any]]]:
        tiers: list[list[tuple[str, Any]]] = [[] for _ in self.tiers]
        for ti, name, fn in self._ordered(table, flag):
            tiers[ti].append((name, fn))
        return tiers

    def plugin_option(self, name: str) -> PluginOption | None:
        for tier in self.tiers:
            for p in tier.plugins:
                if p.name == name:
                    return p
        return None

    # --- victims -----------------------------------------------------------------------------
    def _victims(self, table: dict[str, Any], flag: str | None, *args: Any) -> list[TaskInfo]:
        for tier in self._by_tier(table, flag):
            victims: list[TaskInfo] | None = None
            for _name, fn in tier:
                candidates, abstain = fn(*args)
                if abstain == 0:
                    continue
                if not candidates:
                    victims = None
                    break
                if victims is None:
                    victims = list(candidates)
                else:
                    uids = {c.uid for c in candidates}
                    # Volcano: an empty intersection is a nil slice, i.e. "undecided" again, so the
                    # next plugin's candidates (or the next tier) decide.
                    victims = [v for v in victims if v.uid in uids] or None
            if victims is not None:
                return victims
        return []

    def reclaimable(self, reclaimer: TaskInfo, reclaimees: list[TaskInfo]) -> list[TaskInfo]:
        """Victims every deciding plugin of the first deciding tier agrees on (intersection)."""
        return self._victims(self.reclaimable_fns, "reclaimable", reclaimer, reclaimees)

    def preemptable(self, preemptor: TaskInfo, preemptees: list[TaskInfo]) -> list[TaskInfo]:
        return self._victims(self.preemptable_fns, "preemptable", preemptor, preemptees)

    def unified_evictable(self, ctx: Any, candidates: list[TaskInfo]) -> list[TaskInfo]:
        return self._victims(self.unified_evictable_fns, None, ctx, candidates)

    # --- queue checks ------------------------------------------------------------------------
    def overused(self, queue: QueueInfo) -> bool:
        return any(fn(queue) for _, _, fn in self._ordered(self.overused_fns, "overused"))

    def preemptive(self, queue: QueueInfo, candidates: list[TaskInfo]) -> bool:
        return all(fn(queue, candidates) for _, _, fn in self._ordered(self.preemptive_fns, "preemptive"))

    def allocatable(self, queue: QueueInfo, candidate: TaskInfo) -> bool:
        return all(fn(queue, candidate) for _, _, fn in self._ordered(self.allocatable_fns, "allocatable"))

    # --- job checks --------------------------------------------------------------------------
    def job_ready(self, job: JobInfo) -> bool:
        return all(fn(job) for _, _, fn in self._ordered(self.job_ready_fns, "job_ready"))

    def _vote(self, table: dict[str, Any], flag: str, obj: Any) -> bool:
        for tier in self._by_tier(table, flag):
            found = False
            for _name, fn in tier:
                res = fn(obj)
                if res < 0:
                    return False
                if res > 0:
                    found = True
            if found:
                return True
        return True

    def job_pipelined(self, job: JobInfo) -> bool:
        """Reject wins; a Permit in a tier (others abstaining) decides; no vote at all permits."""
        return self._vote(self.job_pipelined_fns, "job_pipelined", job)

    def job_enqueueable(self, job: JobInfo) -> bool:
        return self._vote(self.job_enqueueable_fns, "job_enqueued", job)

    def job_starving(self, job: JobInfo) -> bool:
        """The first tier with a starving fn decides (all must agree); no fn at all: not starving."""
        for tier in self._by_tier(self.job_starving_fns, "job_starving"):
            if not tier:
                continue
            return all(fn(job) for _name, fn in tier)
        return False

    def job_valid(self, job: JobInfo) -> ValidateResult | None:
        for _, _, fn in self._ordered(self.job_valid_fns, None):
            vr: ValidateResult | None = fn(job)
            if vr is not None and not vr.passed:
                return vr
        return None

    def job_enqueued(self, job: JobInfo) -> None:
        for _, _, fn in self._ordered(self.job_enqueued_fns, "job_enqueued"):
            fn(job)

    def target_job(self, jobs: list[JobInfo]) -> JobInfo | None:
        for _, _, fn in self._ordered(self.target_job_fns, "target_job"):
            return fn(jobs)  # type: ignore[no-any-return]
        return None

    def victim_tasks(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        """Union of the victims of the first tier that names any (order of first appearance)."""
        for tier in self._by_tier(self.victim_tasks_fns, "victim"):
            seen: dict[Any, TaskInfo] = {}
            for _name, fns in tier:
                for fn in fns:
                    for v in fn(tasks):
                        seen.setdefault(v.uid, v)
            if seen:
                return list(seen.values())
        return []

    def reserved_nodes(self) -> None:
        for _, _, fn in self._ordered(self.reserved_nodes_fns, "reserved_nodes"):
            fn()

    # --- orders ------------------------------------------------------------------------------
    def job_order_compare(self, left: JobInfo, right: JobInfo) -> int:
        for _, _, fn in self._ordered(self.job_order_fns, "job_order"):
            j = fn(left, right)
            if j != 0:
                return int(j)
        return 0

    def job_order_fn(self, left: JobInfo, right: JobInfo) -> bool:
        """left before right: first non-zero plugin comparison, then creation time, then UID."""
        res = self.job_order_compare(left, right)
        if res != 0:
            return res < 0
        if left.creation == right.creation:
            return left.uid < right.uid
        return left.creation < right.creation

    def job_order_key_fn(self) -> Callable[[JobInfo], tuple[Any, ...]] | None:
        """A tuple key equivalent to job_order_fn, or None when some enabled plugin has no key fn."""
        return self._key_fn(
            self.job_order_fns, self.job_order_key_fns, "job_order", lambda j: (j.creation, j.uid)
        )

    def queue_order_fn(self, left: QueueInfo, right: QueueInfo) -> bool:
        for _, _, fn in self._ordered(self.queue_order_fns, "queue_order"):
            j = fn(left, right)
            if j != 0:
                return bool(j < 0)
        if left.creation == right.creation:
            return left.uid < right.uid
        return left.creation < right.creation

    def queue_order_key_fn(self) -> Callable[[QueueInfo], tuple[Any, ...]] | None:
        return self._key_fn(
            self.queue_order_fns, self.queue_order_key_fns, "queue_order", lambda q: (q.creation, q.uid)
        )

    def victim_queue_order_fn(self, left: QueueInfo, right: QueueInfo, preemptor: QueueInfo) -> bool:
        for _, _, fn in self._ordered(self.victim_queue_order_fns, None):
            j = fn(left, right, preemptor)
            if j != 0:
                return bool(j < 0)
        return not self.queue_order_fn(left, right)

    def task_compare_fns(self, left: TaskInfo, right: TaskInfo) -> int:
        for _, _, fn in self._ordered(self.task_order_fns, "task_order"):
            j = fn(left, right)
            if j != 0:
                return int(j)
        return 0

    def task_order_fn(self, left: TaskInfo, right: TaskInfo) -> bool:
        """left before right: first non-zero plugin comparison, then Volcano's CompareTask."""
        res = self.task_compare_fns(left, right)
        if res != 0:
            return res < 0
        return compare_task(left, right)

    def task_order_key_fn(self) -> Callable[[TaskInfo], tuple[Any, ...]] | None:
        """A tuple key equivalent to task_order_fn (plugin keys, then CompareTask), or None."""
        return self._key_fn(self.task_order_fns, self.task_order_key_fns, "task_order", lambda t: (TaskTieBreak(t),))

    def _all_keys(self, cmp_table: dict[str, Any], key_table: dict[str, Any], flag: str) -> bool:
        return all(name in key_table for _, name, _ in self._ordered(cmp_table, flag))

    def _key_fn(
        self,
        cmp_table: dict[str, Any],
        key_table: dict[str, Any],
        flag: str,
        tail: Callable[[Any], tuple[Any, ...]],
    ) -> Callable[[Any], tuple[Any, ...]] | None:
        if not self._all_keys(cmp_table, key_table, flag):
            return None
        fns = [key_table[name] for _, name, _ in self._ordered(cmp_table, flag)]
        if not fns:
            return tail

        def key(obj: Any) -> tuple[Any, ...]:
            return (*(f(obj) for f in fns), *tail(obj))

        return key

    def cluster_order_fn(self, left: Any, right: Any) -> bool:
        for _, _, fn in self._ordered(self.cluster_order_fns, "cluster_order"):
            j = fn(left, right)
            if j != 0:
                return bool(j < 0)
        return bool(left.name < right.name)

    # --- predicates ----------------------------------------------------------------------------
    def predicate_fn(self, task: TaskInfo, node: NodeInfo) -> FitError | None:
        """The first plugin error for this node, or None when every enabled predicate passes."""
        for _, _, fn in self._ordered(self.predicate_fns, "predicate"):
            err = fn(task, node)
            if err is not None:
                return err  # type: ignore[no-any-return]
        return None

    def predicate_plugins(self) -> list[tuple[str, PredicateFn, BatchPredicateFn | None]]:
        """Enabled predicate plugins in order, with their batch form when they have one."""
        return [
            (name, fn, self.batch_predicate_fns.get(name))
            for _, name, fn in self._ordered(self.predicate_fns, "predicate")
        ]

    def pre_predicate_fn(self, task: TaskInfo) -> str | None:
        for _, _, fn in self._ordered(self.pre_predicate_fns, "predicate"):
            err = fn(task)
            if err is not None:
                return err  # type: ignore[no-any-return]
        return None

    def fit_headroom(self, task: TaskInfo, nodes: np.ndarray) -> np.ndarray | None:
        """Sum of the headroom plugins grant `task` on these node indices, or None when none does."""
        total: np.ndarray | None = None
        for _, _, fn in self._ordered(self.fit_headroom_fns, "predicate"):
            extra = fn(task, nodes)
            if extra is None:
                continue
            total = extra if total is None else total + extra
        return total

    def fit_headroom_keyed(self, task: TaskInfo, nodes: np.ndarray) -> tuple[np.ndarray | None, object | None]:
        """fit_headroom plus a cache key when every contributing plugin is node-local (else None)."""
        total: np.ndarray | None = None
        key: list[object] | None = []
        for _, name, fn in self._ordered(self.fit_headroom_fns, "predicate"):
            extra = fn(task, nodes)
            if extra is None:
                continue
            total = extra if total is None else total + extra
            if key is not None and name in self.node_local_headroom:
                key.append((name, id(extra)))
            else:
                key = None
        if total is None:
            return None, None
        return total, (tuple(key) if key else None)

    def best_node_fn(self, task: TaskInfo, node_scores: dict[float, list[NodeInfo]]) -> NodeInfo | None:
        for _, _, fn in self._ordered(self.best_node_fns, "best_node"):
            best = fn(task, node_scores)
            if best is not None:
                return best  # type: ignore[no-any-return]
        return None

    def node_order_fn(self, task: TaskInfo, node: NodeInfo) -> float:
        return float(sum(fn(task, node) for _, _, fn in self._ordered(self.node_order_fns, "node_order")))

    def batch_node_order_fn(self, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
        scores: dict[str, float] = {}
        for _, _, fn in self._ordered(self.batch_node_order_fns, "node_order"):
            for name, s in fn(task, nodes).items():
                scores[name] = scores.get(name, 0.0) + s
        return scores

    def node_order_map_fn(self, task: TaskInfo, node: NodeInfo) -> tuple[dict[str, float], float]:
        map_scores: dict[str, float] = {}
        order = 0.0
        for tier in self.tiers:
            for p in tier.plugins:
                if not p.node_order:
                    continue
                fn = self.node_order_fns.get(p.name)
                if fn is not None:
                    order += fn(task, node)
                mfn = self.node_map_fns.get(p.name)
                if mfn is not None:
                    map_scores[p.name] = mfn(task, node)
        return map_scores, order

    def node_order_reduce_fn(self, task: TaskInfo, plugin_scores: dict[str, list[list[Any]]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for _, name, fn in self._ordered(self.node_reduce_fns, "node_order"):
            lst = plugin_scores.get(name, [])
            fn(task, lst)
            for node_name, score in lst:
                out[node_name] = out.get(node_name, 0.0) + float(score)
        return out

    def has_scalar_node_order(self) -> bool:
        """Whether any enabled plugin scores node by node (then prioritizing loops over nodes)."""
        return bool(
            self._ordered(self.node_order_fns, "node_order")
            or self._ordered(self.node_map_fns, "node_order")
            or self._ordered(self.batch_node_order_fns, "node_order")
        )

    def vector_node_order(self, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
        total = np.zeros(len(nodes))
        for _, name, fns in self._ordered(self.vector_node_order_fns, "node_order"):
            for k, (fn, node_local) in enumerate(fns):
                if node_local:
                    total += self.node_local_scores(f"{name}#{k}", fn, task, nodes)
                else:
                    total += fn(task, nodes)
        return total

    def node_local_scores(self, key: str, fn: VectorNodeOrderFn, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
        """Hook for caching node-local scores (the Session caches per request shape)."""
        return fn(task, nodes)

    # --- simulation (preempt's what-if helpers) ------------------------------------------------
    def simulate_allocatable_fn(self, state: CycleState, queue: QueueInfo, task: TaskInfo) -> bool:
        return all(
            fn(state, queue, task) for _, _, fn in self._ordered(self.simulate_allocatable_fns, "allocatable")
        )

    def simulate_predicate_fn(self, state: CycleState, task: TaskInfo, node: NodeInfo) -> Exception | None:
        for _, _, fn in self._ordered(self.simulate_predicate_fns, "predicate"):
            err = fn(state, task, node)
            if err is not None:
                return err  # type: ignore[no-any-return]
        return None

    def _simulate_change(
        self, table: dict[str, SimulateAddRemoveFn], state: CycleState, a: TaskInfo, b: TaskInfo, node: NodeInfo
    ) -> Exception | None:
        for tier in self.tiers:
            for p in tier.plugins:
                if not p.preemptable and not p.allocatable:
                    continue
                fn = table.get(p.name)
                if fn is None:
                    continue
                err = fn(state, a, b, node)
                if err is not None:
                    return err
        return None

    def simulate_remove_task_fn(
        self, state: CycleState, to_schedule: TaskInfo, to_remove: TaskInfo, node: NodeInfo
    ) -> Exception | None:
        return self._simulate_change(self.simulate_remove_task_fns, state, to_schedule, to_remove, node)

    def simulate_add_task_fn(
        self, state: CycleState, to_schedule: TaskInfo, to_add: TaskInfo, node: NodeInfo
    ) -> Exception | None:
        return self._simulate_change(self.simulate_add_task_fns, state, to_schedule, to_add, node)


class TaskTieBreak:
    """Volcano's CompareTask as a sort-key element (it is not expressible as a plain tuple)."""

    __slots__ = ("task",)

    def __init__(self, task: TaskInfo) -> None:
        self.task = task

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskTieBreak) and other.task.uid == self.task.uid

    def __hash__(self) -> int:
        return hash(self.task.uid)

    def __lt__(self, other: TaskTieBreak) -> bool:
        return compare_task(self.task, other.task)


def first_enabled(options: Sequence[PluginOption], flag: str) -> list[str]:
    return [p.name for p in options if p.enabled(flag)]
