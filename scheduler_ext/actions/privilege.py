"""privilege: OpenI-Octopus's delayed, job-level preemption inside a queue (seed openi-octopus-on-volcano.txt,
"Volcano-based Secondary Development - Privilege Action").

Who preempts: a job whose gang is not satisfied (ready + pipelined tasks < minAvailable) with pending
tasks, in a PodGroup that is not Pending, whose tenant may preempt. Who is a victim: another job of the
*same queue* with a lower priority, preemptable (Volcano's `volcano.sh/preemptable` on the PodGroup,
annotation or label; default false), with running tasks, no critical pod (system-*-critical class or
kube-system, as the conformance plugin), and not itself Privileged or WillEvicted.

Tenants are the namespaces of a queue. The action's arguments (`configurations:`) may give one a
priority that replaces its jobs' own (`tenant.<namespace>.priority`), forbid its jobs to preempt
(`tenant.<namespace>.preempt: false`) or to be preempted (`tenant.<namespace>.preemptable: false`).

Eviction is by whole job, choosing the fewest jobs whose resources suffice: the preemptor's pending
tasks needed for its gang (in task order) must all be placed, first fit in node order, on nodes that
pass the preempt-mode predicates, against each node's future idle (plus any fit headroom the plugins
grant, e.g. oversubscription) plus the requests of the chosen jobs' tasks there. Sets of 1, 2, ... jobs
are tried, lowest priority first (then smaller requests, then younger) up to `maxCombinations` sets;
beyond that a greedy set (add in that order until it suffices, then drop what is not needed).

Delayed preemption: when victims are found, nothing is evicted yet. The preemptor's PodGroup gets the
condition `Privileged=True` (message `victims=<ns/a,ns/b>; ...`) and every victim's `WillEvicted=True`
(message `preemptor=<ns/p>; ...`), with an Event each, so a job framework can checkpoint. The
conditions live on the PodGroups, so the state survives a scheduler restart; the delay counts from the
earliest lastTransitionTime of the preemptor's and its victims' conditions. Each session re-checks every Privileged job:
- the preemptor is gone, its gang is satisfied, or it now fits without victims (resources were freed):
  both sides return to normal (`Privileged=False` / `WillEvicted=False`, reason `PreemptionCanceled`);
- a victim that finished or vanished is dropped; if the remaining victims no longer suffice the
  preemption is canceled (and the job may choose anew), if fewer suffice the others are released;
  victims whose tasks are all leaving (Releasing: evicted by an earlier session whose condition writes
  the snapshot does not show yet) count as evicted;
- once `evictionDelay` has passed: every task of the victims is evicted (reason `privilege`), the
  victims' condition becomes `WillEvicted=False` reason `Evicted`, the preemptor's `Privileged=False`
  reason `VictimsEvicted`; the freed resources are then the preemptor's (future idle) next session.
A WillEvicted condition whose preemptor is not Privileged (anymore) is cleared, unless that preemptor
still exists and chooses the victim again in the same session (the two PodGroups are written separately,
and the preemptor's write may have failed): then the mark is completed, with the victim's clock.

Run it after allocate (`actions: "enqueue, allocate, privilege, backfill"`), so that a job allocate
could place is never a preemptor. Departures: queue quotas are not re-checked (victims of the same queue
free the same queue's share); pod-level predicates other than resources (affinity, ports) see the
victims still in place, as Volcano's preempt-mode predicates do.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np

from scheduler_ext.api.job import PG_PENDING, JobInfo
from scheduler_ext.api.resource import MIN_RESOURCE
from scheduler_ext.api.task import TaskInfo, parse_time
from scheduler_ext.api.types import BINDING, BOUND, PENDING, RELEASING, RUNNING, JobID
from scheduler_ext.framework.interface import Action, ActionSpec, ArgSpec
from scheduler_ext.framework.node_search import PredicateHelper
from scheduler_ext.framework.session import Session
from tidemark.apis import parse_bool, parse_go_duration

log = logging.getLogger(__name__)

NAME: Final = "privilege"
EVICT_REASON: Final = "privilege"
COND_PRIVILEGED: Final = "Privileged"
COND_WILL_EVICTED: Final = "WillEvicted"
REASON_WAITING: Final = "PreemptionDelayed"
REASON_CANCELED: Final = "PreemptionCanceled"
REASON_EVICTED: Final = "Evicted"
REASON_VICTIMS_EVICTED: Final = "VictimsEvicted"
REASON_RELEASED: Final = "Released"

ARG_DELAY: Final = "evictionDelay"
ARG_MAX_COMBINATIONS: Final = "maxCombinations"
ARG_TENANT: Final = "tenant."
DEFAULT_DELAY: Final = "5m"
DEFAULT_MAX_COMBINATIONS: Final = 4096
CRITICAL_CLASSES: Final = frozenset({"system-cluster-critical", "system-node-critical"})
_OCCUPYING: Final = (RUNNING, BOUND, BINDING)


@dataclass(frozen=True, slots=True)
class Tenant:
    """One namespace's settings inside its queue (None: the job's own)."""

    priority: int | None = None
    preempt: bool = True
    preemptable: bool = True


def parse_tenants(args: Mapping[str, Any]) -> dict[str, Tenant]:
    """`tenant.<namespace>.priority|preempt|preemptable` keys -> Tenant per namespace (bad values ignored)."""
    raw: dict[str, dict[str, Any]] = {}
    for key, value in args.items():
        if not key.startswith(ARG_TENANT):
            continue
        ns, _, field = key[len(ARG_TENANT):].rpartition(".")
        if ns and field in ("priority", "preempt", "preemptable"):
            raw.setdefault(ns, {})[field] = value
        elif key != ARG_TENANT:
            log.warning("privilege: argument %s ignored (tenant.<namespace>.priority|preempt|preemptable)", key)
    out: dict[str, Tenant] = {}
    for ns, fields in raw.items():
        pri = fields.get("priority")
        priority = int(pri) if isinstance(pri, int | float) and not isinstance(pri, bool) else None

        def flag(name: str, fields: dict[str, Any] = fields) -> bool:
            v = fields.get(name)
            if v is None:
                return True
            if isinstance(v, bool):
                return v
            p = parse_bool(v)
            return p.value if p.warning is None else True

        out[ns] = Tenant(priority, flag("preempt"), flag("preemptable"))
    return out


@dataclass(frozen=True, slots=True)
class Mark:
    """A condition of this action as read from a PodGroup: True/False, the other side(s), since when."""

    status: bool
    peers: tuple[str, ...]
    since: float | None


def _peers(message: str, key: str) -> tuple[str, ...]:
    head = message.split(";", 1)[0].strip()
    if not head.startswith(key + "="):
        return ()
    return tuple(p for p in head[len(key) + 1:].split(",") if p)


def read_mark(job: JobInfo, cond_type: str) -> Mark | None:
    key = "victims" if cond_type == COND_PRIVILEGED else "preemptor"
    for c in job.pod_group.observed_conditions:
        if c.get("type") == cond_type:
            return Mark(
                str(c.get("status")) == "True",
                _peers(str(c.get("message") or ""), key),
                parse_time(c.get("lastTransitionTime")),
            )
    return None


def _evicted_for(ssn: Session, vid: str, mark: Mark) -> str | None:
    """The preemptor whose observed `Privileged=False, VictimsEvicted` names victim `vid`, if any.

    The two PodGroups' status writes reach the cache separately: a session that sees the preemptor's
    VictimsEvicted while the victim still shows WillEvicted=True must not call that a cancelation.
    """
    for pid in mark.peers:
        pjob = ssn.jobs.get(JobID(pid))
        if pjob is None:
            continue
        for c in pjob.pod_group.observed_conditions:
            if (c.get("type") == COND_PRIVILEGED and str(c.get("status")) == "False"
                    and c.get("reason") == REASON_VICTIMS_EVICTED
                    and vid in _peers(str(c.get("message") or ""), "victims")):
                return pid
    return None


def _half_marked_by(ssn: Session, mark: Mark, privileged: Mapping[str, Mark]) -> str | None:
    """The preemptor a victim's `WillEvicted=True` names, when that job exists but shows no Privileged=True."""
    if len(mark.peers) != 1:
        return None
    pid = mark.peers[0]
    return pid if JobID(pid) in ssn.jobs and pid not in privileged else None


def _evicted_by(victim: JobInfo, pid: str) -> bool:
    """Whether the victim's observed condition is `WillEvicted=False, Evicted` naming preemptor `pid`."""
    return any(
        c.get("type") == COND_WILL_EVICTED and str(c.get("status")) == "False" and c.get("reason") == REASON_EVICTED
        and _peers(str(c.get("message") or ""), "preemptor") == (pid,)
        for c in victim.pod_group.observed_conditions
    )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PrivilegeAction(Action):
    name = NAME

    def __init__(self) -> None:
        self.delay = parse_go_duration(DEFAULT_DELAY) or 300.0
        self.max_combinations = DEFAULT_MAX_COMBINATIONS
        self.tenants: dict[str, Tenant] = {}
        self._candidates: dict[str, np.ndarray] = {}

    # --- settings ------------------------------------------------------------------------------
    def _configure(self, ssn: Session) -> None:
        args = ssn.conf.action_arguments(self.name)
        d = parse_go_duration(args.get(ARG_DELAY, DEFAULT_DELAY))
        self.delay = max(0.0, d) if d is not None else 300.0
        mc = args.get(ARG_MAX_COMBINATIONS, DEFAULT_MAX_COMBINATIONS)
        self.max_combinations = mc if isinstance(mc, int) and not isinstance(mc, bool) and mc > 0 else 1
        self.tenants = parse_tenants(args)
        self._candidates = {}

    def tenant(self, job: JobInfo) -> Tenant:
        return self.tenants.get(job.namespace) or Tenant()

    def priority(self, job: JobInfo) -> int:
        p = self.tenant(job).priority
        return job.priority if p is None else p

    # --- the action ------------------------------------------------------------------------------
    def execute(self, ssn: Session) -> None:
        self._configure(ssn)
        privileged: dict[str, Mark] = {}
        will_evicted: dict[str, Mark] = {}
        for job in ssn.jobs.values():
            m = read_mark(job, COND_PRIVILEGED)
            if m is not None and m.status:
                privileged[job.uid] = m
            w = read_mark(job, COND_WILL_EVICTED)
            if w is not None and w.status:
                will_evicted[job.uid] = w
        busy: set[str] = set(privileged) | set(will_evicted)
        claimed: dict[str, str] = {}  # victim -> preemptor still holding it after the re-check

        order = sorted((ssn.jobs[JobID(u)] for u in privileged if JobID(u) in ssn.jobs), key=_job_key(ssn))
        for p in order:
            self._recheck(ssn, p, privileged[p.uid], will_evicted, claimed)

        # victims whose preemptor is gone or no longer holds them
        half: dict[str, dict[str, Mark]] = {}  # preemptor -> its victims marked without it (see below)
        for vid in will_evicted:
            vjob = ssn.jobs.get(JobID(vid))
            if vjob is None or vid in claimed or _has_condition(vjob, COND_WILL_EVICTED):
                continue
            evicted_by = _evicted_for(ssn, vid, will_evicted[vid])
            if evicted_by is not None:
                # the cache saw the preemptor's VictimsEvicted before this victim's Evicted: say so again
                _set(vjob, COND_WILL_EVICTED, False, REASON_EVICTED, f"preemptor={evicted_by}; evicted")
                continue
            pid = _half_marked_by(ssn, will_evicted[vid], privileged)
            if pid is not None:
                # the mark's write reached the victim but not the preemptor (its status write failed, e.g. a 409
                # on a read older than the preemptor's last write): the preemptor may choose it again below,
                # keeping the victim's clock, instead of a cancelation its job framework would see
                half.setdefault(pid, {})[vid] = will_evicted[vid]
                continue
            _set(vjob, COND_WILL_EVICTED, False, REASON_CANCELED, "preemptor=; the preemption was canceled")

        # new preemptors, in job order
        jobs = ssn.new_job_queue()
        for job in ssn.jobs.values():
            if job.uid in busy or not self._wants(ssn, job):
                continue
            jobs.push(job)
        while not jobs.empty():
            popped = jobs.pop()
            assert popped is not None
            p = popped
            own = half.get(p.uid, {})
            victims = self._candidates_for(ssn, p, busy - own.keys())
            if not victims:
                continue
            chosen = self.choose(ssn, p, victims)
            if chosen is None:
                log.debug("privilege: no set of victim jobs makes room for %s", p.uid)
                continue
            busy.add(p.uid)
            busy.update(v.uid for v in chosen)
            since = ssn.now
            if all(v.uid in own for v in chosen):
                since = min((t for v in chosen if (t := own[v.uid].since) is not None), default=ssn.now)
            for v in chosen:
                own.pop(v.uid, None)
            self._mark(ssn, p, chosen, since=since)
            if ssn.now >= since + self.delay:
                self._evict(ssn, p, chosen)
        for own in half.values():  # half-written marks their preemptor did not take up again
            for vid in own:
                _set(ssn.jobs[JobID(vid)], COND_WILL_EVICTED, False, REASON_CANCELED,
                     "preemptor=; the preemption was canceled")

    # --- who -------------------------------------------------------------------------------------
    def _needed(self, job: JobInfo) -> list[TaskInfo]:
        """The pending tasks the job needs for its gang, in task order (empty: it needs none)."""
        short = job.min_available - job.ready_task_num() - job.waiting_task_num()
        if short <= 0:
            return []
        pending = [t for t in job.tasks_in(PENDING).values() if not t.sch_gated]
        if len(pending) < short:
            return []
        return pending

    def _wants(self, ssn: Session, job: JobInfo) -> bool:
        if job.pod_group.phase == PG_PENDING or not self.tenant(job).preempt:
            return False
        if job.queue not in ssn.queues:
            return False
        return bool(self._needed(job))

    def _candidates_for(self, ssn: Session, p: JobInfo, busy: set[str]) -> list[JobInfo]:
        pri = self.priority(p)
        out: list[JobInfo] = []
        for j in ssn.jobs.values():
            if j.uid == p.uid or j.uid in busy or j.queue != p.queue or self.priority(j) >= pri:
                continue
            if not j.preemptable or not self.tenant(j).preemptable:
                continue
            occupying = _occupying(j)
            if not occupying or any(_critical(t) for t in occupying):
                continue
            out.append(j)
        out.sort(key=lambda j: (self.priority(j), float(_request(j).sum()), -j.creation, j.uid))
        return out

    # --- how many ----------------------------------------------------------------------------------
    def _nodes_for(self, ssn: Session, task: TaskInfo) -> np.ndarray:
        """Nodes passing the preempt-mode predicates for the task's shape (cached for the session)."""
        key = f"{task.job}/{task.task_role}/{task.init_vec.tobytes().hex()}"
        nodes = self._candidates.get(key)
        if nodes is None:
            nodes, _ = PredicateHelper(ssn, False).predicate_nodes(task, ssn.all_nodes, mode="preempt")
            self._candidates[key] = nodes
        return nodes

    def fits(self, ssn: Session, p: JobInfo, victims: Sequence[JobInfo]) -> dict[str, str] | None:
        """Placement (task key -> node) of the preemptor's needed tasks if `victims` were gone, else None."""
        needed = self._needed(p)
        if not needed:
            return None
        tasks = sorted(needed, key=_task_sort_key(ssn))
        short = p.min_available - p.ready_task_num() - p.waiting_task_num()
        avail = ssn.table.future_idle.copy()
        for v in victims:
            for t in _occupying(v):
                node = ssn.nodes.get(t.node_name)
                if node is not None:
                    avail[node.index] += t.resreq_vec
        placed: dict[str, str] = {}
        for t in tasks:
            if len(placed) >= short:
                break
            nodes = self._nodes_for(ssn, t)
            if len(nodes) == 0:
                continue
            room = avail[nodes]
            head = ssn.fit_headroom(t, nodes)
            if head is not None:
                room = room + head
            cols = t.init_check_cols
            req = t.init_vec[cols]
            a = room[:, cols]
            ok = np.flatnonzero(((req < a) | (np.abs(req - a) < MIN_RESOURCE)).all(axis=1))
            if len(ok) == 0:
                continue
            i = int(nodes[ok[0]])
            avail[i] -= t.resreq_vec
            placed[t.key] = ssn.node_list[i].name
        return placed if len(placed) >= short else None

    def choose(self, ssn: Session, p: JobInfo, candidates: Sequence[JobInfo]) -> list[JobInfo] | None:
        """The fewest victim jobs (in candidate order among equals) whose eviction makes room, or None."""
        if self.fits(ssn, p, ()) is not None:
            return None  # room already: nothing to preempt for
        if self.fits(ssn, p, candidates) is None:
            return None
        tried = 0
        for k in range(1, len(candidates) + 1):
            for combo in itertools.combinations(candidates, k):
                tried += 1
                if tried > self.max_combinations:
                    return self._greedy(ssn, p, candidates)
                if self.fits(ssn, p, combo) is not None:
                    return list(combo)
        return None

    def _greedy(self, ssn: Session, p: JobInfo, candidates: Sequence[JobInfo]) -> list[JobInfo] | None:
        chosen: list[JobInfo] = []
        for c in candidates:
            chosen.append(c)
            if self.fits(ssn, p, chosen) is not None:
                break
        else:
            return None
        for c in reversed(list(chosen)):
            rest = [x for x in chosen if x is not c]
            if rest and self.fits(ssn, p, rest) is not None:
                chosen = rest
        return chosen

    # --- state -------------------------------------------------------------------------------------
    def _mark(self, ssn: Session, p: JobInfo, victims: Sequence[JobInfo], *, since: float) -> None:
        names = ",".join(sorted(v.uid for v in victims))
        due = _iso(since + self.delay)
        _set(p, COND_PRIVILEGED, True, REASON_WAITING,
             f"victims={names}; evicting them at {due} unless the need vanishes")
        for v in victims:
            _set(v, COND_WILL_EVICTED, True, REASON_WAITING,
                 f"preemptor={p.uid}; evicted at {due} unless the need vanishes")
        log.info("privilege: %s will preempt %s at %s", p.uid, names, due)

    def _recheck(
        self, ssn: Session, p: JobInfo, mark: Mark, will_evicted: Mapping[str, Mark], claimed: dict[str, str]
    ) -> None:
        live: list[JobInfo] = []
        leaving: list[JobInfo] = []
        for vid in mark.peers:
            v = ssn.jobs.get(JobID(vid))
            w = will_evicted.get(vid)
            if v is not None and w is None and _evicted_by(v, p.uid):
                # the cache saw the victim's Evicted before the preemptor's VictimsEvicted (the two
                # PodGroups' status writes arrive separately): evicted, not a cancelation
                leaving.append(v)
                continue
            if v is None or w is None or w.peers != (p.uid,):
                continue
            if _occupying(v):
                live.append(v)
            elif v.tasks_in(RELEASING):
                leaving.append(v)
        if leaving and not live:
            # evicted by an earlier session whose condition writes this snapshot does not show yet
            self._evicted_marks(p, leaving)
            return
        if not self._needed(p) or not self.tenant(p).preempt:
            self._cancel(p, live, "the preemptor no longer needs resources")
            return
        if self.fits(ssn, p, ()) is not None:
            self._cancel(p, live, "resources were freed")
            return
        keep = self.choose_within(ssn, p, live)
        if keep is None:
            self._cancel(p, live, "the remaining victims no longer make room")
            return
        for v in live:
            if v not in keep:
                _set(v, COND_WILL_EVICTED, False, REASON_RELEASED, f"preemptor={p.uid}; no longer needed")
        # the clock: the earliest of the marks (a mark completed after a lost write keeps the victims' time)
        times = [t for t in (mark.since, *(will_evicted[v.uid].since for v in keep)) if t is not None]
        since = min(times, default=ssn.now)
        for v in keep:
            claimed[v.uid] = p.uid
        if ssn.now >= since + self.delay:
            self._mark(ssn, p, keep, since=since)
            self._evict(ssn, p, keep)
        else:
            self._mark(ssn, p, keep, since=since)

    def choose_within(self, ssn: Session, p: JobInfo, live: Sequence[JobInfo]) -> list[JobInfo] | None:
        if not live or self.fits(ssn, p, live) is None:
            return None
        for k in range(1, len(live) + 1):
            for combo in itertools.combinations(live, k):
                if self.fits(ssn, p, combo) is not None:
                    return list(combo)
        return list(live)

    def _cancel(self, p: JobInfo, live: Iterable[JobInfo], why: str) -> None:
        _set(p, COND_PRIVILEGED, False, REASON_CANCELED, f"victims=; {why}")
        for v in live:
            _set(v, COND_WILL_EVICTED, False, REASON_CANCELED, f"preemptor={p.uid}; {why}")
        log.info("privilege: preemption by %s canceled: %s", p.uid, why)

    def _evict(self, ssn: Session, p: JobInfo, victims: Sequence[JobInfo]) -> None:
        stmt = ssn.statement()
        for v in victims:
            for t in sorted(_occupying(v), key=lambda t: t.key):
                stmt.evict(t, EVICT_REASON)
        stmt.commit()
        self._evicted_marks(p, victims)
        log.info("privilege: evicted %s for %s", ",".join(sorted(v.uid for v in victims)), p.uid)

    @staticmethod
    def _evicted_marks(p: JobInfo, victims: Sequence[JobInfo]) -> None:
        names = ",".join(sorted(v.uid for v in victims))
        _set(p, COND_PRIVILEGED, False, REASON_VICTIMS_EVICTED, f"victims={names}; evicted")
        for v in victims:
            _set(v, COND_WILL_EVICTED, False, REASON_EVICTED, f"preemptor={p.uid}; evicted")


def _set(job: JobInfo, cond_type: str, status: bool, reason: str, message: str) -> None:
    """Set the session's condition; an Event goes with it only when it differs from the object's."""
    conds = job.pod_group.conditions
    cond = {"type": cond_type, "status": "True" if status else "False", "reason": reason, "message": message}
    seen = next((c for c in job.pod_group.observed_conditions if c.get("type") == cond_type), None)
    if seen is None and not status and not _has_condition(job, cond_type):
        return  # never marked: nothing to undo
    changed = seen is None or any(str(seen.get(k) or "") != cond[k] for k in ("status", "reason", "message"))
    for i, c in enumerate(conds):
        if c.get("type") == cond_type:
            conds[i] = cond
            break
    else:
        conds.append(cond)
    if changed:
        job.pod_group.events.append(("Normal", reason, f"{cond_type}={cond['status']}: {message}"))


def _has_condition(job: JobInfo, cond_type: str) -> bool:
    return any(c.get("type") == cond_type for c in job.pod_group.conditions)


def _occupying(job: JobInfo) -> list[TaskInfo]:
    out: list[TaskInfo] = []
    for s in _OCCUPYING:
        out.extend(job.tasks_in(s).values())
    return out


def _critical(t: TaskInfo) -> bool:
    return (t.pod.get("spec") or {}).get("priorityClassName") in CRITICAL_CLASSES or t.namespace == "kube-system"


def _request(job: JobInfo) -> np.ndarray:
    occ = _occupying(job)
    if not occ:
        return np.zeros(1)
    total: np.ndarray = np.sum([t.resreq_vec for t in occ], axis=0)
    return total


def _job_key(ssn: Session) -> Any:
    import functools

    return functools.cmp_to_key(lambda a, b: -1 if ssn.job_order_fn(a, b) else (1 if ssn.job_order_fn(b, a) else 0))


def _task_sort_key(ssn: Session) -> Any:
    import functools

    return functools.cmp_to_key(lambda a, b: -1 if ssn.task_order_fn(a, b) else (1 if ssn.task_order_fn(b, a) else 0))


SPEC = ActionSpec(
    name=NAME,
    build=PrivilegeAction,
    arguments=(
        ArgSpec(ARG_DELAY, "duration", DEFAULT_DELAY,
                "how long victims stay WillEvicted (time to checkpoint) before they are evicted; 0 evicts at once"),
        ArgSpec(ARG_MAX_COMBINATIONS, "int", DEFAULT_MAX_COMBINATIONS,
                "victim-job sets tried for the fewest jobs before a greedy choice"),
        ArgSpec(ARG_TENANT, "any", None,
                "tenant.<namespace>.priority (int, replaces its jobs' priority), .preempt / .preemptable (bool)",
                prefix=True),
    ),
    doc="Delayed, job-level preemption inside a queue, with per-tenant priority and permissions (OpenI-Octopus).",
)
