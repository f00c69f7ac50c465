"""The victim search preempt and reclaim share: which nodes are worth trying, which evictions make
room on one node, and when an attempt is known to fail.

Both actions (Volcano's actions/preempt and actions/reclaim) look for a node where evicting some
running tasks lets a pending task in. What they share lives here:

- `resolvable_nodes`: the nodes allocate did not rule out as UnschedulableAndUnresolvable;
- `fits_vector` / `fits_rows`: the task's InitResreq against one future-idle row, or many;
- `VictimRoom`: per node and group, the summed requests of the tasks an action may evict, kept across
  the action so nodes where even evicting every such task cannot make room are skipped in bulk;
- `validate_victims` (Volcano's ValidateVictims) and `evict_until_fits`: on one node, evict the
  victims in victim order (BuildVictimsPriorityQueue) into a statement of the node's own until the
  task fits, then pipeline it there (the caller merges that statement into the job's, or it is
  rolled back);
- `FailureMemo`: skip an attempt that must fail like its twin's just before;
- `preemption_policy_never`: `spec.preemptionPolicy: Never`;
- `GangRule` (issue 34, not in Volcano): a gang is one unit. A victim whose eviction would leave its
  running gang (ready members >= PodGroup minMember > 1) below minMember is passed over while other
  victims can make room; when they cannot, the whole gang goes (every Running/Bound member, all of
  them accepted by the action's filter and the plugins' verdict), or the victim is not taken at all.
  Leaving a gang below minMember frees one member's resources and strands the rest: the members
  that keep running hold their resources but cannot make progress (Volcano's job controller restarts
  such a job anyway). `note_gang_evictions` then sets the PodGroup's condition `Evicted=True`, reason
  `GangEvicted`, with an Event. With the gang plugin's Preemptable/Reclaimable verdict on
  (`enablePreemptable`), members below minMember are never offered, so only "another victim" applies;
  preempt's topology-aware dry run applies only that half too (`breaks_gang` with its simulated removals).
What differs between the two (who may be a victim, the plugins' Preemptable vs Reclaimable verdict,
the fit test on a node) stays in each action's module.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final

import numpy as np

from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.resource import MIN_RESOURCE
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import BOUND, RUNNING
from scheduler_ext.framework.node_search import num_feasible_nodes_to_find, resource_shape
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.statement import Statement

log = logging.getLogger(__name__)

#: the argument both actions take (Volcano's predicate error cache)
PREDICATE_ERROR_CACHE_KEY: Final = "predicateErrorCacheEnable"
PREEMPT_NEVER: Final = "Never"

#: the PodGroup condition a whole-gang eviction sets (Volcano's PodGroup conditions: type, status, reason)
PG_COND_EVICTED: Final = "Evicted"
GANG_EVICTED: Final = "GangEvicted"

TaskFilter = Callable[[TaskInfo], bool]


def preemption_policy_never(task: TaskInfo) -> bool:
    """`spec.preemptionPolicy: Never`: the pod may not evict others."""
    return (task.pod.get("spec") or {}).get("preemptionPolicy") == PREEMPT_NEVER


def resolvable_nodes(ssn: Session, task: TaskInfo) -> np.ndarray:
    """Table indices of the nodes that did not fail UnschedulableAndUnresolvable for the task in an
    earlier action (Volcano's FilterOutUnschedulableAndUnresolvableNodesForTask), in node order."""
    job = ssn.jobs.get(task.job)
    fe = job.nodes_fit_errors.get(task.uid) if job is not None else None
    if fe is None:
        return ssn.all_nodes
    skip = fe.unschedulable_and_unresolvable_nodes()
    if not skip:
        return ssn.all_nodes
    names = ssn.table.names
    return np.array([i for i in range(len(names)) if names[i] not in skip], dtype=np.intp)


def fits_vector(task: TaskInfo, avail: np.ndarray) -> bool:
    """`task.InitResreq.LessEqual(avail, Zero)` for one row."""
    cols = task.init_check_cols
    req = task.init_vec[cols]
    a = avail[cols]
    return bool(((req < a) | (np.abs(req - a) < MIN_RESOURCE)).all())


def fits_rows(task: TaskInfo, avail: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The nodes (indices into the (N, D) `avail`) where the task's request fits `avail`."""
    if len(nodes) == 0:
        return nodes
    cols = task.init_check_cols
    req = task.init_vec[cols]
    a = avail[np.ix_(nodes, cols)]
    ok = ((req < a) | (np.abs(req - a) < MIN_RESOURCE)).all(axis=1)
    return np.asarray(nodes[ok])


class VictimRoom:
    """Per node and per group, the summed requests and the number of the tasks `select` accepts.

    Kept for one action run: rows whose node changed since (the table's row generation moved) are
    recomputed from the node's tasks, so each refresh costs only the nodes touched by the previous
    evictions and pipelines. Actions use it to skip, in bulk, nodes where even evicting every
    acceptable task could not make room (those nodes would fail ValidateVictims one by one).
    """

    def __init__(self, ssn: Session, select: TaskFilter, group: Callable[[TaskInfo], Hashable]) -> None:
        self.ssn = ssn
        self.select = select
        self.group = group
        table = ssn.table
        self.sums: dict[Hashable, np.ndarray] = {}
        self.counts: dict[Hashable, np.ndarray] = {}
        self._seen = np.full(table.n, -1, dtype=np.int64)

    def refresh(self) -> None:
        table = self.ssn.table
        stale = np.flatnonzero(self._seen != table.generation)
        if len(stale) == 0:
            return
        for arr in self.sums.values():
            arr[stale] = 0.0
        for cnt in self.counts.values():
            cnt[stale] = 0
        nodes = self.ssn.node_list
        for row in stale.tolist():
            for t in nodes[row].tasks.values():
                if not self.select(t):
                    continue
                g = self.group(t)
                if g not in self.sums:
                    self.sums[g] = np.zeros_like(table.future_idle)
                    self.counts[g] = np.zeros(table.n, dtype=np.int64)
                self.sums[g][row] += t.resreq_vec
                self.counts[g][row] += 1
        self._seen[stale] = table.generation[stale]

    def total(self, include: Callable[[Hashable], bool]) -> tuple[np.ndarray, np.ndarray]:
        """(sums (N, D), counts (N,)) over the groups `include` accepts, after a refresh."""
        self.refresh()
        table = self.ssn.table
        sums = np.zeros_like(table.future_idle)
        counts = np.zeros(table.n, dtype=np.int64)
        for g, arr in self.sums.items():
            if include(g):
                sums += arr
                counts += self.counts[g]
        return sums, counts


class FailureMemo:
    """Skips an attempt that must fail like the previous one.

    Two tasks of one job with the same pod spec, labels, annotations, priority and candidate nodes
    are indistinguishable to the plugins (the assumption behind Volcano's predicate error cache, which
    keys on job and role alone). When an attempt for one of them failed without leaving any tentative
    operation behind (no node row changed) and nothing changed since, an attempt for its twin fails
    too; it is skipped instead of scanning every node again. Not used while sampling nodes (the
    sampled subset rotates between attempts) or for tasks with a nominated node.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[Hashable, int] | None = None

    @staticmethod
    def signature(ssn: Session, task: TaskInfo, candidates: np.ndarray, kind: str) -> Hashable | None:
        if num_feasible_nodes_to_find(ssn, len(candidates)) < len(candidates):
            return None
        pod = task.pod
        if (pod.get("status") or {}).get("nominatedNodeName"):
            return None
        spec = task.cache.get("preempt.spec")
        if spec is None:
            md = pod.get("metadata") or {}
            spec = task.cache["preempt.spec"] = json.dumps(
                [pod.get("spec"), md.get("labels"), md.get("annotations")], sort_keys=True, default=str
            )
        where = b"*" if candidates is ssn.all_nodes else candidates.tobytes()
        return (
            kind,
            task.job,
            spec,
            task.priority,
            task.best_effort,
            task.preemptable,
            task.revocable_zone,
            resource_shape(task),
            where,
        )

    @staticmethod
    def state(ssn: Session) -> int:
        """Changes whenever any node row changes (each change bumps its row's generation)."""
        return int(ssn.table.generation.sum())

    def known_failure(self, sig: Hashable | None, state: int) -> bool:
        return sig is not None and self._last == (sig, state)

    def record_failure(self, sig: Hashable | None, state_before: int, state_after: int) -> None:
        if sig is not None and state_before == state_after:
            self._last = (sig, state_before)


@dataclass(frozen=True, slots=True)
class GangRule:
    """Who may go with a victim's gang: the action's filter and the plugins' verdict for the preemptor."""

    accept: TaskFilter
    verdict: Callable[[list[TaskInfo]], list[TaskInfo]]

    def whole_gang(self, ssn: Session, victim: TaskInfo) -> list[TaskInfo] | None:
        """Every Running/Bound member of the victim's gang, or None when one of them may not be evicted."""
        job = ssn.jobs.get(victim.job)
        if job is None:
            return None
        members = [t for status in (RUNNING, BOUND) for t in job.tasks_in(status).values() if t.node_name]
        if not all(self.accept(t) for t in members):
            return None
        allowed = {t.uid for t in self.verdict(list(members))}
        if any(t.uid not in allowed for t in members):
            return None
        return sorted(members, key=lambda t: (t.node_name, t.name))


def breaks_gang(ssn: Session, task: TaskInfo, gone: int = 0) -> bool:
    """Whether evicting the task leaves its running gang below minMember, once `gone` other members
    (a dry run's simulated removals, which do not change the job) are counted out too."""
    job = ssn.jobs.get(task.job)
    if job is None or job.min_available <= 1:
        return False
    ready = job.ready_task_num() - gone
    return ready >= job.min_available > ready - 1


def gang_reason(reason: str, ssn: Session, victim: TaskInfo) -> str:
    """The eviction reason of a whole-gang eviction (shown in the Evict event; `note_gang_evictions` reads it)."""
    job = ssn.jobs.get(victim.job)
    minimum = job.min_available if job is not None else 0
    name = f"{job.namespace}/{job.name}" if job is not None else str(victim.job)
    return (
        f"{reason}: {GANG_EVICTED}: gang {name} evicted whole: evicting {victim.key} alone would leave it "
        f"below minMember {minimum}"
    )


def note_gang_evictions(ssn: Session, since: int, action: str) -> None:
    """PodGroup condition `Evicted=True` (reason GangEvicted) and an Event for each gang an action's committed
    evictions (ssn.evictions[since:]) took whole."""
    taken: dict[str, list[str]] = {}
    for rec in ssn.evictions[since:]:
        if f": {GANG_EVICTED}: " in rec.reason:
            taken.setdefault(str(rec.task.job), []).append(rec.task.name)
    for uid, names in taken.items():
        job = ssn.jobs.get(uid)  # type: ignore[call-overload]
        if job is None:
            continue
        message = (
            f"{action} evicted the whole gang ({len(names)} running: {', '.join(sorted(names))}): evicting fewer "
            f"would have left it below minMember {job.min_available}"
        )
        ssn.update_pod_group_condition(
            job,
            {"type": PG_COND_EVICTED, "status": "True", "transitionID": ssn.uid, "reason": GANG_EVICTED,
             "message": message},
        )
        job.pod_group.events.append(("Warning", GANG_EVICTED, message))


def validate_victims(ssn: Session, preemptor: TaskInfo, node: NodeInfo, victims: list[TaskInfo]) -> bool:
    """Volcano's ValidateVictims: the preemptor fits the node's future idle plus all victims' requests."""
    avail = ssn.table.future_idle[node.index].copy()
    for v in victims:
        avail += v.resreq_vec
    return fits_vector(preemptor, avail)


def evict_until_fits(
    ssn: Session,
    preemptor: TaskInfo,
    node: NodeInfo,
    victims: list[TaskInfo],
    fits: Callable[[], bool],
    reason: str,
    *,
    on_evict: Callable[[TaskInfo], None] | None = None,
    evicted_flag: Callable[[list[TaskInfo]], bool] = bool,
    gang: GangRule | None = None,
) -> Statement | None:
    """Evict `victims` in victim order into a statement of the node's own until `fits()` holds, then
    pipeline the preemptor on the node; that statement (for the caller to merge into the job's), or
    None when the preemptor does not fit even after every victim went (everything rolled back).

    `fits` is asked before the first eviction and after each one; `on_evict` runs after each eviction
    on this node (reclaim tracks its own room vector there); `evicted_flag(evicted)` is the pipeline's
    "evictions occurred" argument (preempt: the evicted requests are non-empty; reclaim: anything was
    evicted). With `gang`, victims that would break a running gang wait until the others are spent, then
    go with their whole gang or not at all (GangRule).
    """
    node_stmt = ssn.statement()
    victims_queue = ssn.build_victims_priority_queue(victims, preemptor)
    evicted: list[TaskInfo] = []
    debug = log.isEnabledFor(logging.DEBUG)

    def evict(victim: TaskInfo, why: str) -> None:
        if debug:
            log.debug("%s: evict %s for %s on %s", why, victim.key, preemptor.key, node.name)
        node_stmt.evict(victim, why)
        evicted.append(victim)
        if on_evict is not None and victim.node_name == node.name:
            on_evict(victim)

    deferred: list[TaskInfo] = []
    ok = fits()
    while not ok and not victims_queue.empty():
        victim = victims_queue.pop()
        assert victim is not None
        if gang is not None and breaks_gang(ssn, victim):
            deferred.append(victim)
            continue
        evict(victim, reason)
        ok = fits()
    for victim in deferred:
        if ok:
            break
        if victim.status not in (RUNNING, BOUND):
            continue  # gone with its gang already
        whole = gang is not None and breaks_gang(ssn, victim)
        members = gang.whole_gang(ssn, victim) if gang is not None and whole else [victim]
        if members is None:
            log.debug("%s: %s is not evicted: its gang cannot go whole", reason, victim.key)
            continue
        why = gang_reason(reason, ssn, victim) if whole else reason
        for member in members:
            evict(member, why)
        ok = fits()
    if not ok:
        node_stmt.discard()
        return None
    try:
        node_stmt.pipeline(preemptor, node.name, evicted_flag(evicted))
    except ValueError as e:
        log.error("%s: %s", reason, e)
        node_stmt.discard()
        return None
    return node_stmt
