"""tdm: time-division multiplexing of revocable nodes (Volcano's plugins/tdm/tdm.go).

Nodes labelled `volcano.sh/revocable-zone: <zone>` belong to a revocable zone; the plugin's
arguments give each zone a daily window, `tdm.revocable-zone.<zone>: "HH:MM-HH:MM"` (local time of
the session's `now`; the window ends the next day when its end is not after its start, so "0:00-0:00"
is the whole day). While a zone's window is open its nodes take only tasks that may use revocable
capacity (pod or PodGroup annotated `volcano.sh/revocable-zone: "*"` or `volcano.sh/preemptable:
"true"`); outside the window they take none, and the shuffle action evicts their preemptable tasks.

Callbacks:
- predicate (vectorised): a revocable node whose zone is unknown, malformed or outside its window
  fails UnschedulableAndUnresolvable with the reason; an open one fails the same way for tasks without
  a revocable zone ("not allow to dispatch to revocable node"); other nodes pass.
- node order (vectorised): 100 on open revocable nodes for tasks with a revocable zone, else 0.
- preemptable: a preemptable task or one with a revocable zone may not preempt (Reject); otherwise the
  victims are Running preemptable tasks on non-revocable nodes, at most the job's disruption budget per
  job (see below).
- victim tasks (shuffle): when `tdm.evict.period` (default 1m) has passed since the last run, the
  preemptable Running tasks on nodes of every closed zone, at most the budget per job.
- job order: non-preemptable jobs first; job pipelined: Permit when the job is pipelined, else Reject;
  job starving: a non-preemptable job with pending tasks.

Disruption budget per job (PodGroup annotations): `volcano.sh/jdb-max-unavailable` (an integer or a
percent of the job's tasks, rounded up) allows that many unavailable tasks (tasks neither Running nor
finished count as unavailable already); else `volcano.sh/jdb-min-available` keeps that many Running;
else 1 eviction.

Like Volcano, the time of the last eviction run is process-wide (it outlives a session; see
`reset_evict_clock`), and a window is only checked against today's start (a window crossing midnight,
"22:00-02:00", is open from 22:00 until midnight and closed after midnight, as in Volcano).
Departures: the predicate and score are vectorised over nodes; a node whose zone is closed scores 0
from tdm (Volcano drops every per-node score of such a node because tdm's NodeOrderFn errors; the
predicate has already excluded it whenever predicates are enabled); argument keys must start with
`tdm.revocable-zone.` (Volcano accepts the prefix anywhere in the key); a malformed `tdm.evict.period`
is a conf error (Volcano silently keeps 1m).
"""

from __future__ import annotations

import logging
import math
import re
from datetime import datetime, timedelta
from typing import Final

import numpy as np

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import (
    FAILED,
    PENDING,
    PERMIT,
    REJECT,
    RUNNING,
    SUCCEEDED,
    FitError,
    JobID,
    Status,
    StatusCode,
)
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.session_plugins import BatchPredicateResult
from tidemark.apis import parse_go_duration

log = logging.getLogger(__name__)

REVOCABLE_ZONE_PREFIX: Final = "tdm.revocable-zone."
EVICT_PERIOD_KEY: Final = "tdm.evict.period"
DEFAULT_EVICT_PERIOD: Final = 60.0
DEFAULT_POD_EVICT_NUM: Final = 1
MAX_NODE_SCORE: Final = 100.0
NOT_ALLOWED_REASON: Final = "not allow to dispatch to revocable node"

#: matched with fullmatch (`$` passes a trailing newline, which Go refuses)
_CLOCK_RE: Final = re.compile(r"([0-9]{1,2}):([0-9]{2})")
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")


class _EvictClock:
    """When tdm last looked for victims (Volcano's package-level lastEvictAt): process-wide."""

    last_evict_at: float | None = None


def reset_evict_clock() -> None:
    """Forget the last eviction run (a fresh scheduler process); for tests."""
    _EvictClock.last_evict_at = None


def parse_duration(text: str) -> float | None:
    """Go's time.ParseDuration in seconds; None when malformed."""
    return parse_go_duration(text)


def _parse_clock(text: str) -> tuple[int, int] | None:
    """Go's time.Parse("15:04", text): hour in one or two digits (0-23), minutes in two (00-59)."""
    m = _CLOCK_RE.fullmatch(text)
    if m is None:
        return None
    h, mi = int(m.group(1)), int(m.group(2))
    if h > 23 or mi > 59:
        return None
    return h, mi


def zone_window(raw: str, now: float) -> tuple[float, float]:
    """Today's window (epoch seconds, local time of `now`) of a "HH:MM-HH:MM" value; ValueError when malformed."""
    parts = raw.strip().split("-")
    if len(parts) != 2:
        raise ValueError(f"revocable zone {raw} format error")
    t1 = _parse_clock(parts[0])
    if t1 is None:
        raise ValueError(f'parsing time "{parts[0]}" as "15:04": cannot parse')
    t2 = _parse_clock(parts[1])
    if t2 is None:
        raise ValueError(f'parsing time "{parts[1]}" as "15:04": cannot parse')
    today = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today.replace(hour=t1[0], minute=t1[1])
    end = today.replace(hour=t2[0], minute=t2[1])
    if t1 >= t2:
        end = (today + timedelta(days=1)).replace(hour=t2[0], minute=t2[1])
    return start.timestamp(), end.timestamp()


def zone_error(zones: dict[str, str], zone: str, now: float) -> str | None:
    """Why the zone is not usable now (Volcano's availableRevocableZone), or None while its window is open."""
    raw = zones.get(zone)
    if raw is None:
        return f"revocable zone {zone} not support"
    try:
        start, end = zone_window(raw, now)
    except ValueError as e:
        return str(e)
    t = math.floor(now)
    if t < math.floor(start) or t > math.floor(end):
        return f"current time beyond revocable zone {zone}:{raw}"
    return None


def parse_int_or_percent(value: str, total: int) -> int:
    """intstr.Parse + GetValueFromIntOrPercent(roundUp): "3" -> 3, "30%" of total rounded up; else 0."""
    if _INT_RE.fullmatch(value) and -(2**31) <= int(value) < 2**31:
        return int(value)
    if value.endswith("%") and _INT_RE.fullmatch(value[:-1]):
        return math.ceil(int(value[:-1]) * total / 100)
    log.warning("tdm: cannot read disruption budget %r", value)
    return 0


def max_pod_evict_num(job: JobInfo) -> int:
    """How many of the job's tasks may still be disrupted (Volcano's getMaxPodEvictNum)."""
    running = len(job.tasks_in(RUNNING))
    min_available, max_unavailable = job.budget
    if max_unavailable:
        allowed = parse_int_or_percent(max_unavailable, len(job.tasks))
        final = len(job.tasks_in(SUCCEEDED)) + len(job.tasks_in(FAILED))
        unavailable = len(job.tasks) - final - running
        if unavailable >= allowed:
            return 0
        return allowed - unavailable
    if min_available:
        keep = parse_int_or_percent(min_available, len(job.tasks))
        if running >= keep:
            return running - keep
    return DEFAULT_POD_EVICT_NUM


def max_victims(job: JobInfo, victims: list[TaskInfo]) -> list[TaskInfo]:
    n = min(max_pod_evict_num(job), len(victims))
    return victims[: max(n, 0)]


class TdmPlugin(Plugin):
    name = "tdm"

    def __init__(self, arguments: Arguments) -> None:
        self.revocable_zone: dict[str, str] = {
            k[len(REVOCABLE_ZONE_PREFIX) :]: str(v)
            for k, v in arguments.items()
            if k.startswith(REVOCABLE_ZONE_PREFIX) and isinstance(v, str)
        }
        period = parse_duration(arguments.get_str(EVICT_PERIOD_KEY, ""))
        self.evict_period = period if period is not None else DEFAULT_EVICT_PERIOD
        #: per node index: the reason the node's zone is closed (None: open, or not revocable)
        self._closed_reason: list[str | None] = []
        self._revocable = np.zeros(0, dtype=bool)
        self._closed = np.zeros(0, dtype=bool)

    def zone_error(self, zone: str, now: float) -> str | None:
        return zone_error(self.revocable_zone, zone, now)

    def on_session_open(self, ssn: Session) -> None:
        now = ssn.now
        n = len(ssn.node_list)
        self._revocable = np.zeros(n, dtype=bool)
        self._closed = np.zeros(n, dtype=bool)
        self._closed_reason = [None] * n
        zone_state: dict[str, str | None] = {}
        for node in ssn.node_list:
            if not node.revocable_zone:
                continue
            if node.revocable_zone not in zone_state:
                zone_state[node.revocable_zone] = self.zone_error(node.revocable_zone, now)
            self._revocable[node.index] = True
            reason = zone_state[node.revocable_zone]
            if reason is not None:
                self._closed[node.index] = True
                self._closed_reason[node.index] = reason
        open_revocable = self._revocable & ~self._closed

        def predicate(task: TaskInfo, node: NodeInfo) -> FitError | None:
            if not self._revocable[node.index]:
                return None
            reason = self._closed_reason[node.index]
            if reason is None:
                if task.revocable_zone:
                    return None
                reason = NOT_ALLOWED_REASON
            return FitError(
                task.namespace,
                task.name,
                node.name,
                [Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, reason, self.name)],
            )

        def batch_predicate(task: TaskInfo, nodes: np.ndarray) -> BatchPredicateResult:
            bad = self._closed[nodes]
            if not task.revocable_zone:
                bad = bad | open_revocable[nodes]
            if not bad.any():
                return BatchPredicateResult(np.ones(len(nodes), dtype=bool))
            failing = nodes[bad]

            def failures() -> list[tuple[np.ndarray, tuple[Status, ...]]]:
                by_reason: dict[str, list[int]] = {}
                for i in failing:
                    reason = self._closed_reason[int(i)] or NOT_ALLOWED_REASON
                    by_reason.setdefault(reason, []).append(int(i))
                return [
                    (
                        np.array(idx, dtype=np.intp),
                        (Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, reason, self.name),),
                    )
                    for reason, idx in by_reason.items()
                ]

            return BatchPredicateResult(~bad, failures_fn=failures)

        ssn.add_predicate_fn(self.name, predicate)
        ssn.add_batch_predicate_fn(self.name, batch_predicate)

        def node_order(task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
            if not task.revocable_zone:
                return np.zeros(len(nodes))
            return np.where(open_revocable[nodes], MAX_NODE_SCORE, 0.0)

        ssn.add_vector_node_order_fn(self.name, node_order)

        def preemptable(preemptor: TaskInfo, preemptees: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            # preemptable work, or work that may use revocable zones, never preempts
            if preemptor.preemptable or preemptor.revocable_zone:
                return [], REJECT
            by_job: dict[JobID, list[TaskInfo]] = {}
            for task in preemptees:
                if not task.preemptable or task.status != RUNNING:
                    continue
                node = ssn.nodes.get(task.node_name)
                if node is None or node.revocable_zone:
                    continue
                by_job.setdefault(task.job, []).append(task)
            victims: list[TaskInfo] = []
            for jid, tasks in by_job.items():
                job = ssn.jobs.get(jid)
                if job is not None:
                    victims.extend(max_victims(job, tasks))
            return victims, PERMIT

        ssn.add_preemptable_fn(self.name, preemptable)

        def victims_fn(_tasks: list[TaskInfo]) -> list[TaskInfo]:
            last = _EvictClock.last_evict_at
            if last is not None and last + self.evict_period > now:
                log.debug("tdm: next eviction run after %s", last + self.evict_period)
                return []
            victims: list[TaskInfo] = []
            for zone in self.revocable_zone:
                reason = self.zone_error(zone, now)
                if reason is None:
                    continue
                log.debug("tdm: revocable zone %s is closed: %s", zone, reason)
                for jid, tasks in self._preemptable_tasks_in_zone(ssn, zone).items():
                    job = ssn.jobs.get(jid)
                    if job is not None:
                        victims.extend(max_victims(job, tasks))
            _EvictClock.last_evict_at = now
            return victims

        ssn.add_victim_tasks_fns(self.name, [victims_fn])

        def job_order(lv: JobInfo, rv: JobInfo) -> int:
            if lv.preemptable == rv.preemptable:
                return 0
            return 1 if lv.preemptable else -1

        ssn.add_job_order_fn(self.name, job_order)
        ssn.add_job_order_key_fn(self.name, lambda j: 1 if j.preemptable else 0)
        ssn.add_job_pipelined_fn(self.name, lambda j: PERMIT if j.is_pipelined() else REJECT)
        ssn.add_job_starving_fns(self.name, lambda j: not j.preemptable and bool(j.tasks_in(PENDING)))

    @staticmethod
    def _preemptable_tasks_in_zone(ssn: Session, zone: str) -> dict[JobID, list[TaskInfo]]:
        by_job: dict[JobID, list[TaskInfo]] = {}
        for node in ssn.revocable_nodes.values():
            if node.revocable_zone != zone:
                continue
            for task in node.tasks.values():
                if task.preemptable and task.status == RUNNING:
                    by_job.setdefault(task.job, []).append(task)
        return by_job


SPEC = PluginSpec(
    name="tdm",
    build=TdmPlugin,
    arguments=(
        ArgSpec(
            REVOCABLE_ZONE_PREFIX,
            "str",
            "",
            'daily window of a revocable zone, "HH:MM-HH:MM" local time (end <= start: until the next day)',
            prefix=True,
        ),
        ArgSpec(EVICT_PERIOD_KEY, "duration", "1m", "minimum time between two eviction runs on closed zones"),
    ),
    doc="Time-division multiplexing: revocable nodes serve preemptable work only within their zone's window.",
)
