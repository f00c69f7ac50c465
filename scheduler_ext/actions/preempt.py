"""preempt: evict lower-priority work in a starving job's own queue so its tasks can run (Volcano's
actions/preempt/preempt.go).

Jobs that are not Pending, pass JobValid and are starving (JobStarving) become preemptors, grouped by
queue. Queues are visited in queue order, and each queue in two phases:

1. Between jobs: its starving jobs in job order; each job's pending tasks in task order preempt
   running tasks of *other jobs of the same queue* until the job no longer starves. The job's
   evictions and pipelines form one statement, committed only if the job is then pipelined
   (JobPipelined), else rolled back.
2. Within a job: for every starving job of the queue, its still-pending tasks preempt running tasks
   of the *same job*, one statement per task, committed only when the task was placed; the first task
   that cannot be placed ends the job's turn.

Per preemptor task: `preemptionPolicy: Never` and a nominated node that is still usable (or has a
terminating lower-priority victim of an earlier preemption) make it ineligible; then PrePredicate, the
preempt-mode predicates (only failures eviction cannot fix rule a node out) over the nodes that did
not fail UnschedulableAndUnresolvable in allocate, and one of two strategies:

- normal (default): nodes in descending score order; on each, the victims every deciding plugin
  agrees on (Preemptable) are evicted in victim order (BuildVictimsPriorityQueue) until the preemptor
  fits: its queue is Allocatable, its request fits the node's future idle, and every predicate passes.
  The preemptor is then pipelined there. The evictions of a node are a statement of their own, merged
  into the job's statement only on the node where the preemptor was pipelined; on any other node they
  are rolled back (so a queue capacity that the preemptor would exceed even after evicting rolls back).
- topology-aware (`enableTopologyAwarePreemption: true`): kube-scheduler's dry run. On candidate
  nodes the victims are removed one by one in a simulation (SimulateRemoveTask / SimulateAllocatable /
  SimulatePredicate callbacks over a copy of the preemptor's cycle state) until the preemptor fits,
  then reprieved highest priority first while it still fits; a node needs at least one victim. Among
  the candidates one is picked by kube-scheduler's rules (lowest highest-victim priority, smallest sum
  of priorities, fewest victims, latest start time), its victims are evicted and the preemptor is
  pipelined there.

What preempt shares with reclaim (node pruning, evicting in victim order until the preemptor fits,
skipping twins of a failed attempt) is in scheduler_ext/framework/victims.py.

Gangs are one unit (issue 34; scheduler_ext/framework/victims.py GangRule): between jobs, a victim
that would leave its running gang below minMember is taken only after the other victims, and then
with its whole gang (PodGroup condition Evicted=True, reason GangEvicted) or not at all. The
topology-aware dry run never takes such a victim (another victim or another node; no whole gangs).

Best-effort rules (both phases): only Running or Bound tasks are victims; a BestEffort preemptor never
evicts a task that requests resources; tasks annotated `volcano.sh/preemptable: "false"` are never
victims.

Departures from Volcano (deterministic results and speed):
- candidate nodes are visited in node order where Volcano runs them in parallel: the normal strategy
  sorts by score with ties in node order; the topology-aware dry run starts at the first node (Volcano:
  a random offset) and stops after `numCandidates` candidates, so `topologyAwarePreemptWorkerNum` has
  no effect; among equally good candidates the first wins (Volcano: map order).
- nodes where the preemptor could not fit even if every task the filter accepts there were evicted
  (future idle plus their requests, kept per node across the action in a VictimRoom) are skipped
  before any per-node work; Volcano reaches the same verdict node by node in ValidateVictims.
- the dry run tracks the simulated removals in a copy of the node's future-idle vector; simulate
  callbacks receive the session's NodeInfo (whose task list does not show the removals); the
  predicates plugin's simulate callbacks re-run every filter on the node without the removed tasks
  (Volcano's re-run inter-pod affinity only), so no victim is chosen on a node that a remaining
  pod's anti-affinity keeps useless for the preemptor.
- the dry run rules a node out when the preemptor still does not fit (queue allocatable, resources,
  simulate predicates) after removing every potential victim; Volcano re-checks only SimulatePredicate
  there and would evict victims for a preemptor its queue cannot admit (its own comment, and
  kube-scheduler, say such a node "is not suitable for preemption").
- each attempt starts from a fresh cycle state for the preemptor (Volcano's PrePredicate overwrites
  the plugins' simulation state the same way).
- jobs with network topology and hyper-node sharding do not exist in Tidemark.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.queue import QueueInfo
from scheduler_ext.api.resource import Resource
from scheduler_ext.api.task import TaskInfo, parse_time
from scheduler_ext.api.types import BOUND, PENDING, RUNNING, JobID, QueueID, StatusCode, preemptable_status
from scheduler_ext.framework.interface import Action, ActionSpec, ArgSpec
from scheduler_ext.framework.node_search import PredicateHelper, score_nodes
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.session_plugins import CycleState
from scheduler_ext.framework.statement import Statement
from scheduler_ext.framework.util import PriorityQueue
from scheduler_ext.framework.victims import (
    PREDICATE_ERROR_CACHE_KEY,
    FailureMemo,
    GangRule,
    TaskFilter,
    VictimRoom,
    breaks_gang,
    evict_until_fits,
    fits_rows,
    fits_vector,
    note_gang_evictions,
    preemption_policy_never,
    resolvable_nodes,
    validate_victims,
)

log = logging.getLogger(__name__)

ENABLE_TOPOLOGY_AWARE_PREEMPTION: Final = "enableTopologyAwarePreemption"
TOPOLOGY_AWARE_PREEMPT_WORKER_NUM: Final = "topologyAwarePreemptWorkerNum"
MIN_CANDIDATE_NODES_PERCENTAGE: Final = "minCandidateNodesPercentage"
MIN_CANDIDATE_NODES_ABSOLUTE: Final = "minCandidateNodesAbsolute"
MAX_CANDIDATE_NODES_ABSOLUTE: Final = "maxCandidateNodesAbsolute"

DISRUPTION_TARGET: Final = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
#: kube-scheduler adds MaxInt32+1 to every priority before summing them
_PRIORITY_OFFSET: Final = 2**31

_PREEMPTABLE_STATUSES: Final = frozenset({BOUND, RUNNING})  # api.types.preemptable_status


@dataclass(frozen=True, slots=True)
class VictimFilter:
    """Which tasks a preemptor may evict (`accept`), and per node an upper bound of the room it could
    get: future idle plus the requests of every task `accept` could offer there (`room()`, (N, D))."""

    accept: TaskFilter
    room: Callable[[], np.ndarray]
    #: which rule `accept` follows (part of FailureMemo's signature)
    kind: str = ""


def pod_priority(task: TaskInfo) -> int:
    """The pod's `spec.priority` (0 when unset), as kube-scheduler's PodPriority."""
    p = (task.pod.get("spec") or {}).get("priority")
    return p if isinstance(p, int) and not isinstance(p, bool) else 0


def _terminating_by_preemption(pod: Mapping[str, Any]) -> bool:
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == DISRUPTION_TARGET:
            return cond.get("status") == "True" and cond.get("reason") == REASON_PREEMPTION_BY_SCHEDULER
    return False


# --- candidates (topology-aware preemption) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the dry run found a way in, and the victims it needs (highest priority first)."""

    node: NodeInfo
    victims: tuple[TaskInfo, ...]


def _start_time(task: TaskInfo, now: float) -> float:
    raw = (task.pod.get("status") or {}).get("startTime")
    t = parse_time(raw)
    return t if t is not None else now


def _earliest_start_of_highest(victims: tuple[TaskInfo, ...], now: float) -> float:
    earliest = _start_time(victims[0], now)
    top = pod_priority(victims[0])
    for v in victims:
        p = pod_priority(v)
        if p == top:
            earliest = min(earliest, _start_time(v, now))
        elif p > top:
            top = p
            earliest = _start_time(v, now)
    return earliest


def select_candidate(candidates: list[Candidate], now: float) -> Candidate | None:
    """kube-scheduler's pickOneNodeForPreemption: lowest highest-victim priority, then smallest sum of
    priorities, then fewest victims, then latest start of the highest-priority victims, then first."""
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    score_fns: list[Callable[[Candidate], float]] = [
        lambda c: -pod_priority(c.victims[0]),
        lambda c: -sum(pod_priority(v) + _PRIORITY_OFFSET for v in c.victims),
        lambda c: -len(c.victims),
        lambda c: _earliest_start_of_highest(c.victims, now),
    ]
    remaining = candidates
    for fn in score_fns:
        scores = [fn(c) for c in remaining]
        best = max(scores)
        remaining = [c for c, s in zip(remaining, scores) if s == best]
        if len(remaining) == 1:
            return remaining[0]
    return remaining[0]


def clone_cycle_state(state: CycleState) -> CycleState:
    """A copy plugins may change freely (Volcano's CycleState.Clone: every entry cloned)."""
    out: CycleState = {}
    for key, value in state.items():
        if hasattr(value, "clone"):
            out[key] = value.clone()
        elif isinstance(value, dict):
            out[key] = {k: (v.clone() if hasattr(v, "clone") else copy.deepcopy(v)) for k, v in value.items()}
        else:
            out[key] = copy.deepcopy(value)
    return out


def _released_something(evicted: list[TaskInfo]) -> bool:
    """Whether the evicted tasks' requests sum to more than nothing (BestEffort victims release none)."""
    preempted = Resource()
    for v in evicted:
        preempted.add(v.resreq)
    return not preempted.is_empty()


# --- the action -------------------------------------------------------------------------------------


def _own_offers(ssn: Session, job: JobInfo, be_only: bool) -> list[TaskInfo]:
    """The job's Running/Bound preemptable tasks that sit on a session node."""
    out: list[TaskInfo] = []
    for status in (BOUND, RUNNING):
        for t in job.tasks_in(status).values():
            if not t.preemptable or (be_only and not t.best_effort):
                continue
            node = ssn.nodes.get(t.node_name)
            if node is not None and t.uid in node.tasks:
                out.append(t)
    return out


class PreemptAction(Action):
    name = "preempt"

    def __init__(self) -> None:
        self.enable_predicate_error_cache = True
        self.enable_topology_aware_preemption = False
        self.topology_aware_preempt_worker_num = 16
        self.min_candidate_nodes_percentage = 10
        self.min_candidate_nodes_absolute = 1
        self.max_candidate_nodes_absolute = 100
        self._victim_room: VictimRoom | None = None
        self._memo = FailureMemo()

    def parse_arguments(self, ssn: Session) -> None:
        args = ssn.conf.action_arguments(self.name)
        self.enable_predicate_error_cache = args.get_bool(PREDICATE_ERROR_CACHE_KEY, True)
        self.enable_topology_aware_preemption = args.get_bool(ENABLE_TOPOLOGY_AWARE_PREEMPTION, False)
        self.topology_aware_preempt_worker_num = args.get_int(TOPOLOGY_AWARE_PREEMPT_WORKER_NUM, 16)
        self.min_candidate_nodes_percentage = args.get_int(MIN_CANDIDATE_NODES_PERCENTAGE, 10)
        self.min_candidate_nodes_absolute = args.get_int(MIN_CANDIDATE_NODES_ABSOLUTE, 1)
        self.max_candidate_nodes_absolute = args.get_int(MAX_CANDIDATE_NODES_ABSOLUTE, 100)

    def execute(self, ssn: Session) -> None:
        self.parse_arguments(ssn)
        self._victim_room = None
        self._memo = FailureMemo()
        preemptors_map: dict[QueueID, PriorityQueue[JobInfo]] = {}
        preemptor_tasks: dict[JobID, PriorityQueue[TaskInfo]] = {}
        under_request: dict[QueueID, list[JobInfo]] = {}

        for job in ssn.jobs.values():
            if job.is_pending():
                continue
            vr = ssn.job_valid(job)
            if vr is not None and not vr.passed:
                log.debug("preempt: skip job %s: %s %s", job.uid, vr.reason, vr.message)
                continue
            if job.queue not in ssn.queues:
                log.debug("preempt: skip job %s: queue %s not found", job.uid, job.queue)
                continue
            if not ssn.job_starving(job):
                continue
            jq = preemptors_map.get(job.queue)
            if jq is None:
                jq = preemptors_map[job.queue] = ssn.new_job_queue()
            jq.push(job)
            under_request.setdefault(job.queue, []).append(job)
            preemptor_tasks[job.uid] = self._pending_tasks(ssn, job)

        queues: PriorityQueue[QueueInfo] = ssn.new_queue_queue()
        for qid in preemptors_map:
            q = ssn.queues.get(qid)
            if q is not None:
                queues.push(q)

        ph = PredicateHelper(ssn, self.enable_predicate_error_cache)
        since = len(ssn.evictions)
        self._run_queues(ssn, queues, preemptors_map, preemptor_tasks, under_request, ph)
        note_gang_evictions(ssn, since, self.name)

    def _run_queues(
        self,
        ssn: Session,
        queues: PriorityQueue[QueueInfo],
        preemptors_map: dict[QueueID, PriorityQueue[JobInfo]],
        preemptor_tasks: dict[JobID, PriorityQueue[TaskInfo]],
        under_request: dict[QueueID, list[JobInfo]],
        ph: PredicateHelper,
    ) -> None:
        while not queues.empty():
            queue = queues.pop()
            assert queue is not None
            # Phase 1: preemption between jobs within the queue.
            while True:
                preemptors = preemptors_map.get(queue.uid)
                if preemptors is None or preemptors.empty():
                    break
                preemptor_job = preemptors.pop()
                assert preemptor_job is not None
                stmt = ssn.statement()
                while ssn.job_starving(preemptor_job):
                    tasks = preemptor_tasks[preemptor_job.uid]
                    if tasks.empty():
                        break
                    preemptor = tasks.pop()
                    assert preemptor is not None
                    flt = self._between_jobs_filter(ssn, preemptor, preemptor_job)
                    self.preempt(ssn, stmt, preemptor, flt, ph)
                if ssn.job_pipelined(preemptor_job):
                    stmt.commit()
                else:
                    stmt.discard()

            # Phase 2: preemption between tasks within a job.
            for job in under_request.get(queue.uid, []):
                intra = self._pending_tasks(ssn, job)
                while not intra.empty():
                    preemptor = intra.pop()
                    assert preemptor is not None
                    stmt = ssn.statement()
                    flt = self._within_job_filter(ssn, preemptor, job)
                    assigned = self.preempt(ssn, stmt, preemptor, flt, ph)
                    if not assigned:
                        stmt.discard()
                        break
                    stmt.commit()

    @staticmethod
    def _pending_tasks(ssn: Session, job: JobInfo) -> PriorityQueue[TaskInfo]:
        tasks = ssn.new_task_queue()
        for task in job.tasks_in(PENDING).values():
            if not task.sch_gated:
                tasks.push(task)
        return tasks

    def _between_jobs_filter(self, ssn: Session, preemptor: TaskInfo, preemptor_job: JobInfo) -> VictimFilter:
        """Running/Bound preemptable tasks of other jobs in the preemptor's queue (BestEffort ones only
        for a BestEffort preemptor)."""
        be_only = preemptor.best_effort

        jobs = ssn.jobs
        queue = preemptor_job.queue
        own = preemptor.job

        def accept(task: TaskInfo) -> bool:
            if task.status not in _PREEMPTABLE_STATUSES or not task.preemptable:
                return False
            if be_only and not task.best_effort:
                return False
            if task.job == own:
                return False
            job = jobs.get(task.job)
            return job is not None and job.queue == queue

        def room() -> np.ndarray:
            sums, _ = self._room(ssn).total(lambda g: g[0] == queue and (g[1] or not be_only))  # type: ignore[index]
            avail: np.ndarray = ssn.table.future_idle + sums
            # the preemptor's own job offers no victims here
            for task in _own_offers(ssn, preemptor_job, be_only):
                avail[ssn.nodes[task.node_name].index] -= task.resreq_vec
            return avail

        return VictimFilter(accept, room, "between-jobs")

    @staticmethod
    def _within_job_filter(ssn: Session, preemptor: TaskInfo, job: JobInfo) -> VictimFilter:
        """Running/Bound preemptable tasks of the preemptor's own job."""
        be_only = preemptor.best_effort

        def accept(task: TaskInfo) -> bool:
            if not preemptable_status(task.status):
                return False
            if be_only and not task.best_effort:
                return False
            if not task.preemptable:
                return False
            return preemptor.job == task.job

        def room() -> np.ndarray:
            avail = ssn.table.future_idle.copy()
            for task in _own_offers(ssn, job, be_only):
                avail[ssn.nodes[task.node_name].index] += task.resreq_vec
            return avail

        return VictimFilter(accept, room, "within-job")

    def _room(self, ssn: Session) -> VictimRoom:
        """Running/Bound preemptable tasks per node, grouped by (queue, best effort)."""
        if self._victim_room is None or self._victim_room.ssn is not ssn:

            def select(t: TaskInfo) -> bool:
                return preemptable_status(t.status) and t.preemptable and t.job in ssn.jobs

            def group(t: TaskInfo) -> Hashable:
                return (ssn.jobs[t.job].queue, t.best_effort)

            self._victim_room = VictimRoom(ssn, select, group)
        return self._victim_room

    # --- one preemptor ------------------------------------------------------------------------------
    def preempt(
        self, ssn: Session, stmt: Statement, preemptor: TaskInfo, flt: VictimFilter, ph: PredicateHelper
    ) -> bool:
        """Try to make room for the preemptor; True when it was pipelined (its operations are in stmt)."""
        why = self.task_ineligible(ssn, preemptor)
        if why is not None:
            log.debug("preempt: %s: %s", preemptor.key, why)
            return False
        # a fresh simulation state for this attempt (Volcano's PrePredicate rewrites it)
        ssn.cycle_states.pop(preemptor.uid, None)
        err = ssn.pre_predicate_fn(preemptor)
        if err is not None:
            log.debug("preempt: PrePredicate for task %s failed: %s", preemptor.key, err)
            return False
        candidates = resolvable_nodes(ssn, preemptor)
        sig = FailureMemo.signature(ssn, preemptor, candidates, flt.kind)
        before = FailureMemo.state(ssn)
        if self._memo.known_failure(sig, before):
            log.debug("preempt: %s fails like its twin before it", preemptor.key)
            return False
        nodes, _fe = ph.predicate_nodes(preemptor, candidates, mode="preempt")
        if self.enable_topology_aware_preemption:
            ok = self.topology_aware_preempt(ssn, stmt, preemptor, flt, nodes)
        else:
            ok = self.normal_preempt(ssn, stmt, preemptor, flt, nodes)
        if not ok:
            self._memo.record_failure(sig, before, FailureMemo.state(ssn))
        return ok

    @staticmethod
    def task_ineligible(ssn: Session, preemptor: TaskInfo) -> str | None:
        """Why the task may not preempt (Volcano's taskEligibleToPreempt), or None."""
        if preemption_policy_never(preemptor):
            return "not eligible to preempt other tasks due to preemptionPolicy is Never"
        nominated = str((preemptor.pod.get("status") or {}).get("nominatedNodeName") or "")
        if not nominated:
            return None
        node = ssn.nodes.get(nominated)
        if node is None:
            return "not eligible due to the pod's nominated node is not found in the session"
        fit = ssn.predicate_fn(preemptor, node)
        if fit is None:
            return "not eligible due to the pod's nominated node is already schedulable"
        if fit.contains(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE):
            return None
        prio = pod_priority(preemptor)
        for task in node.tasks.values():
            if pod_priority(task) < prio and _terminating_by_preemption(task.pod):
                return "not eligible due to a terminating pod caused by preemption on the nominated node"
        return None

    def _fits_on_node(self, ssn: Session, queue: QueueInfo, preemptor: TaskInfo, node: NodeInfo) -> bool:
        """Volcano's preemptorFitsOnNode: queue allocatable, request within future idle, predicates pass."""
        return (
            ssn.allocatable(queue, preemptor)
            and fits_vector(preemptor, ssn.table.future_idle[node.index])
            and ssn.predicate_fn(preemptor, node) is None
        )

    def normal_preempt(
        self, ssn: Session, stmt: Statement, preemptor: TaskInfo, flt: VictimFilter, nodes: np.ndarray
    ) -> bool:
        job = ssn.jobs.get(preemptor.job)
        if job is None:
            return False
        queue = ssn.queues[job.queue]
        if len(nodes) == 0:
            return False
        # nodes that could never pass ValidateVictims are skipped in bulk
        promising = fits_rows(preemptor, flt.room(), nodes)
        if len(promising) == 0:
            return False
        # nodes by descending score, ties in node order (Volcano's PrioritizeNodes + SortNodes)
        scores = score_nodes(ssn, preemptor, nodes) if len(nodes) > 1 else np.zeros(len(nodes))
        ordered = nodes[np.argsort(-scores, kind="stable")]
        ordered = ordered[np.isin(ordered, promising)]
        # ValidateVictims without victims: the request against future idle (a node's row changes only
        # once it is visited, and is restored when its evictions are rolled back)
        fits_idle = set(fits_rows(preemptor, ssn.table.future_idle, ordered).tolist())
        debug = log.isEnabledFor(logging.DEBUG)
        accept = flt.accept
        for i in ordered.tolist():
            node = ssn.node_list[i]
            preemptees = [t for t in node.tasks.values() if accept(t)]
            victims = ssn.preemptable(preemptor, preemptees)
            valid = validate_victims(ssn, preemptor, node, victims) if victims else i in fits_idle
            if not valid:
                if debug:
                    log.debug("preempt: no validated victims on node %s for %s", node.name, preemptor.key)
                continue
            node_stmt = evict_until_fits(
                ssn,
                preemptor,
                node,
                victims,
                functools.partial(self._fits_on_node, ssn, queue, preemptor, node),
                "preempt",
                evicted_flag=_released_something,
                # between jobs a gang is one unit; within a job the preemptor takes the victim's place
                gang=GangRule(accept, functools.partial(ssn.preemptable, preemptor))
                if flt.kind == "between-jobs"
                else None,
            )
            if node_stmt is not None:
                stmt.merge(node_stmt)
                return True
        return False

    # --- topology-aware preemption ------------------------------------------------------------------
    def num_candidates(self, num_nodes: int) -> int:
        """kube-scheduler's calculateNumCandidates."""
        n = num_nodes * self.min_candidate_nodes_percentage // 100
        n = max(n, self.min_candidate_nodes_absolute)
        n = min(n, self.max_candidate_nodes_absolute)
        return min(n, num_nodes)

    def topology_aware_preempt(
        self, ssn: Session, stmt: Statement, preemptor: TaskInfo, flt: VictimFilter, nodes: np.ndarray
    ) -> bool:
        job = ssn.jobs.get(preemptor.job)
        if job is None or len(nodes) == 0:
            return False
        queue = ssn.queues[job.queue]
        wanted = self.num_candidates(len(nodes))
        state = ssn.get_cycle_state(preemptor.uid)
        candidates: list[Candidate] = []
        for i in fits_rows(preemptor, flt.room(), nodes):
            node = ssn.node_list[int(i)]
            victims = self.select_victims_on_node(
                ssn, clone_cycle_state(state), preemptor, queue, node, flt.accept, gang=flt.kind == "between-jobs"
            )
            if victims:
                candidates.append(Candidate(node, tuple(victims)))
                if len(candidates) >= wanted:
                    break
        best = select_candidate(candidates, ssn.now)
        if best is None:
            log.debug("preempt: no candidate node for %s", preemptor.key)
            return False
        tmp = ssn.statement()
        for victim in best.victims:
            log.debug("preempt: evict %s for %s on %s", victim.key, preemptor.key, best.node.name)
            tmp.evict(victim, "preempt")
        try:
            tmp.pipeline(preemptor, best.node.name, True)
        except ValueError as e:
            log.error("preempt: %s", e)
            tmp.discard()
            return False
        stmt.merge(tmp)
        return True

    @staticmethod
    def select_victims_on_node(
        ssn: Session,
        state: CycleState,
        preemptor: TaskInfo,
        queue: QueueInfo,
        node: NodeInfo,
        flt: TaskFilter,
        gang: bool = False,
    ) -> list[TaskInfo] | None:
        """kube-scheduler's SelectVictimsOnNode over a simulation: the fewest victims (highest priority
        first) that make room, or None when the node cannot host the preemptor. With `gang`, a victim
        that would leave its running gang below minMember is never a potential victim (the dry run does
        not take whole gangs: another victim or another node)."""
        preemptees = [t for t in node.tasks.values() if flt(t)]
        all_victims = ssn.preemptable(preemptor, preemptees)
        if not validate_victims(ssn, preemptor, node, all_victims):
            return None
        future_idle = ssn.table.future_idle[node.index].copy()

        def fits() -> bool:
            return (
                ssn.simulate_allocatable_fn(state, queue, preemptor)
                and fits_vector(preemptor, future_idle)
                and ssn.simulate_predicate_fn(state, preemptor, node) is None
            )

        victims_queue = ssn.build_victims_priority_queue(all_victims, preemptor)
        potential: list[TaskInfo] = []
        gone: dict[str, int] = {}
        while not victims_queue.empty():
            task = victims_queue.pop()
            assert task is not None
            if gang and breaks_gang(ssn, task, gone.get(task.job, 0)):
                continue
            gone[task.job] = gone.get(task.job, 0) + 1
            potential.append(task)
            if ssn.simulate_remove_task_fn(state, preemptor, task, node) is not None:
                return None
            future_idle += task.resreq_vec
            if fits():
                break
        if not potential:
            return None
        # Not fitting after removing every potential victim rules the node out. Volcano checks only
        # SimulatePredicate here (so it would evict for a preemptor its queue cannot admit, or that
        # still lacks resources); kube-scheduler, whose algorithm this is, re-runs every filter.
        if not fits():
            return None
        victims: list[TaskInfo] = []
        # reprieve the highest-priority victims first (they were popped last)
        for task in reversed(potential):
            if ssn.simulate_add_task_fn(state, preemptor, task, node) is not None:
                return None
            future_idle -= task.resreq_vec
            if not fits():
                if ssn.simulate_remove_task_fn(state, preemptor, task, node) is not None:
                    return None
                future_idle += task.resreq_vec
                victims.append(task)
        return victims


SPEC = ActionSpec(
    name="preempt",
    build=PreemptAction,
    arguments=(
        ArgSpec(PREDICATE_ERROR_CACHE_KEY, "bool", True, "skip nodes where a task of the same job role already failed"),
        ArgSpec(
            ENABLE_TOPOLOGY_AWARE_PREEMPTION,
            "bool",
            False,
            "choose victims with kube-scheduler's dry run (fewest, lowest-priority victims) instead of "
            "evicting in victim order on the best-scored node",
        ),
        ArgSpec(TOPOLOGY_AWARE_PREEMPT_WORKER_NUM, "int", 16, "accepted for compatibility; the dry run is sequential"),
        ArgSpec(MIN_CANDIDATE_NODES_PERCENTAGE, "int", 10, "dry run: candidates wanted, percent of the feasible nodes"),
        ArgSpec(MIN_CANDIDATE_NODES_ABSOLUTE, "int", 1, "dry run: at least this many candidates wanted"),
        ArgSpec(MAX_CANDIDATE_NODES_ABSOLUTE, "int", 100, "dry run: at most this many candidates wanted"),
    ),
    doc="Evict lower-priority tasks of the same queue (between jobs) or job (between tasks) for starving jobs.",
)
