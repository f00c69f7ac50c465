"""rescheduling: move offline pods off hot nodes onto cool ones before any agent has to evict them.

Volcano's `rescheduling` plugin (pkg/scheduler/plugins/rescheduling: rescheduling.go,
low_node_utilization.go, node_utilization_util.go) with its `lowNodeUtilization` strategy: every
`interval` the plugin's victim-tasks fn groups the nodes into "low" (every resource at or under
`thresholds`) and "high" (some resource over `targetThresholds`) and, when both exist, names pods on
the high nodes as victims; the `shuffle` action (scheduler_ext/actions/shuffle.py) evicts them and
the scheduler places the replacements by the same rules as any pod. Why here and not in the
NodeReport controller: the scheduler has leader election (one replica acts), the whole snapshot
each session (every node's usage, every pod, gangs and their minMember) and the placement rules the
replacement will meet; Volcano already names the mechanism.

What Tidemark changes, and why:
- Usage is the agents' real usage (`tidemark.io/node-usage`, read with the `usage` plugin's parser,
  scheduler_ext/plugins/usage.py), aggregated as `peak` = max(p95, latest) (the mean when the agent
  wrote neither); Volcano's version reads requests. Stale (older than 5 minutes), future-dated, missing
  or malformed usage: the node is neither hot nor cool.
- Hot on CPU means the ONLINE pods' CPU (the document's `online` key, which the agent adds; the whole
  peak for an agent that does not write it): offline pods soaking idle CPU make a node busy, not hot,
  and moving them only costs their progress (the agent's satisfaction measure never evicts them for it
  either). An online load past the target is what squeezes the offline tier there and ends in its
  eviction. Memory stays the whole usage (offline memory is not given back by a ceiling). Cool is always
  the whole usage: room for the moved pod.
- Hot also means the offline tier is starving: the allowance the agent leaves it (`offline.allowance`, the
  tier's bound, agent.decide.tier) is under `offlineSatisfaction` (default 1.0) of what the node's Running offline
  pods request. That is the agent's own CPUStarvation measure (it evicts at `eviction.cpu.satisfaction`, 0.6), read
  earlier: the online pods need not pass the target for the offline ones to be squeezed off their requests (a node
  packed with offline work whose online load rises by half). Moves go until what remains requested is satisfied
  (Koordinator's cpu_evict.go releases requests the same way); the requests are the session's, so a move shows in
  the next run without waiting for the agent's next publication.
- Cool nodes must also be schedulable and not marked evicting by their agent
  (`volcano.sh/offline-job-evicting`).
- Victims are Running offline pods (`volcano.sh/qos-level` < 0) with a controller owner (a bare pod
  evicted is work lost, not moved), not exempt (tidemark.pods.eviction_exemption), least progress
  first (the newest `status.startTime`; Volcano sorts by priority and QoS), never a member whose
  eviction leaves its running gang below minMember (a job of minMember 1 moves whole).
- No ping-pong: a victim's estimated usage (its cpu/memory request, batch-cpu/batch-memory for
  oversubscribed pods, kube-scheduler's non-zero defaults for neither) in percent of a cool node's
  allocatable must fit that node's remaining headroom (`thresholds` - usage), which the choice
  consumes: no cool node is planned past "cool" (Volcano sums one headroom over all low nodes).
- Rate limits: `maxPerNode` victims per hot node per run, `maxPerRun` per cluster, and a workload
  (its controller owner) is not moved again within `workloadCooldown` (Koordinator's per-workload
  limiter, default 5m). A hot node that was relieved waits until its published window starts after
  the move (its p95 still holds the samples from before), so one hot spell is not answered twice;
  not a node hot by its online pods' CPU, which no move of an offline pod can show.
- The eviction reason (Event and log) is `Rebalanced: node X cpu 83% over 70%; cool nodes: Y`,
  handed to shuffle through the task's cycle state (scheduler_ext/actions/shuffle.py REASON_KEY).

What a run decided and held back is its `Report` (the session's, `session_report`): the scheduler counts it
(tidemark_scheduler_rebalance_*, fed by scheduler_ext/run/observe.py) and `simulate` shows it (`rebalance`: hot and
cool nodes, moves with their reason, the workloads in their cool-down with the time left). Held-back candidates
are counted by a fixed set of reasons (HELD_REASONS); a run without a cool node looks at no candidate (the
hot/cool gauges say why).

Like tdm's, the run clock, the workload cool-downs and the relieved nodes are process-wide: they
outlive a session (see `reset_state`). The choice itself (`choose`, scheduler_ext/plugins/rebalance.py) is a pure
function; this module reads the session for it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.task import TaskInfo, parse_time
from scheduler_ext.api.types import RUNNING
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.plugins.rebalance import (
    COOL_NAMES_SHOWN,
    DEFAULT_MAX_PER_NODE,
    DEFAULT_OFFLINE_SATISFACTION,
    DEFAULT_TARGET_THRESHOLDS,
    DEFAULT_THRESHOLDS,
    DEFAULT_WORKLOAD_COOLDOWN,
    HELD_NOT_MOVABLE,
    RESOURCES,
    Candidate,
    Limits,
    Move,
    NodeLoad,
    Plan,
    Strategy,
    choose,
    is_cool,
    is_hot,
)
from scheduler_ext.plugins.usage import parse_node_usage, parse_usage_aggregates
from tidemark.apis import (
    ANN_NODE_USAGE,
    NODE_USAGE_FUTURE_SECONDS,
    NODE_USAGE_STALE_SECONDS,
    RES_BATCH_CPU,
    RES_BATCH_MEMORY,
    json_annotation,
    parse_go_duration,
)
from tidemark.pods import eviction_exemption

log = logging.getLogger(__name__)

NAME: Final = "rescheduling"
STRATEGY: Final = "lowNodeUtilization"
#: the key of the per-victim eviction reason in the task's cycle state (read by the shuffle action)
REASON_KEY: Final = "shuffle.reason"
DEFAULT_INTERVAL: Final = 30.0
#: Volcano's scalar resources are milli-units: batch-cpu "2000" (milli-cores) is 2,000,000 here
_SCALAR_UNIT: Final = 1000.0


# --- reading the session -------------------------------------------------------------------------------
def controller_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid of the pod's controller owner (ownerReferences controller=true), else None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("uid"):
            return str(ref["uid"])
    return None


def controller_name(task: TaskInfo) -> str:
    """The task's controller owner as `namespace/Kind/name` (what the view shows for a cooling workload)."""
    for ref in (task.pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return f"{task.namespace}/{ref.get('kind') or '?'}/{ref.get('name') or '?'}"
    return f"{task.namespace}/{task.name}"


def cpu_request(task: TaskInfo) -> float:
    """Milli-cpu the task requests, plain + batch-cpu (what the agent's starvation measure counts)."""
    return task.resreq.milli_cpu + task.resreq.get(RES_BATCH_CPU) / _SCALAR_UNIT


def estimated_request(task: TaskInfo) -> tuple[float, float]:
    """Milli-cpu and bytes: the request, plus batch-cpu/batch-memory; kube-scheduler's non-zero defaults for none."""
    r = task.resreq
    cpu = r.milli_cpu + r.get(RES_BATCH_CPU) / _SCALAR_UNIT
    mem = r.memory + r.get(RES_BATCH_MEMORY) / _SCALAR_UNIT
    return (cpu if cpu > 0 else task.kube_nonzero[0]), (mem if mem > 0 else task.kube_nonzero[1])


def candidate_of(task: TaskInfo) -> Candidate | str:
    """The task as a rebalancing candidate, or why it is not one."""
    if task.status != RUNNING or not task.node_name:
        return "not Running on a node"
    if not task.offline:
        return "not offline"
    owner = controller_uid(task.pod)
    if owner is None:
        return "no controller owner (evicting it would lose its work)"
    exempt = eviction_exemption(task.pod)
    if exempt is not None:
        return f"exempt from eviction: {exempt}"
    started = parse_time((task.pod.get("status") or {}).get("startTime"))
    return Candidate(str(task.uid), task.key, task.node_name, owner, str(task.job),
                     started if started is not None else task.creation, estimated_request(task), cpu_request(task))


def _window_seconds(doc: Mapping[str, Any] | None) -> float:
    w = doc.get("window") if doc is not None else None
    d = parse_go_duration(w) if isinstance(w, str) else None
    return d if d is not None and d > 0 else 0.0


#: (cpu %, memory %) peak, time, window start, online cpu % and (offline allowance %, satisfaction) (None: not
#: written); or None when malformed
_Reading = tuple[tuple[float, float], float, float, float | None, tuple[float, float] | None] | None


def _online_cpu(doc: Mapping[str, Any] | None) -> float | None:
    """The document's `online.cpu` (percent of allocatable), None when absent or malformed (the whole usage then)."""
    online = doc.get("online") if doc is not None else None
    cpu = online.get("cpu") if isinstance(online, Mapping) else None
    if isinstance(cpu, bool) or not isinstance(cpu, int | float) or not 0 <= cpu <= 1000:
        return None
    return float(cpu)


def _offline(doc: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """The document's `offline`: its allowance (percent of allocatable CPU) and satisfaction (a fraction in (0, 1];
    DEFAULT_OFFLINE_SATISFACTION when absent), None when the allowance is absent or malformed (then the node is never
    hot by starvation) or the satisfaction malformed."""
    offline = doc.get("offline") if doc is not None else None
    if not isinstance(offline, Mapping):
        return None
    v, sat = offline.get("allowance"), offline.get("satisfaction", DEFAULT_OFFLINE_SATISFACTION)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1000:
        return None
    if isinstance(sat, bool) or not isinstance(sat, int | float) or not 0 < sat <= 1:
        return None
    return float(v), float(sat)


def read_usage(raw: object) -> _Reading:
    """The peak (max of p95 and latest; the mean for what the agent did not write), its time, its window start,
    the online pods' CPU (`online`, when the agent wrote it) and the offline tier's allowance and the agent's
    satisfaction (`offline`)."""
    parsed = parse_node_usage(raw)
    if isinstance(parsed, str):  # the usage plugin warns about malformed values
        return None
    cpu, mem, t = parsed
    aggregates, _why = parse_usage_aggregates(raw)
    latest = aggregates.get("latest", (cpu, mem))
    p95 = aggregates.get("p95", (cpu, mem))
    doc = json_annotation(raw)
    return ((max(latest[0], p95[0]), max(latest[1], p95[1])), t, t - _window_seconds(doc), _online_cpu(doc),
            _offline(doc))


class _Readings:
    """The last run's readings by annotation text: an agent republishes once a minute, a run is every 30 s."""

    by_raw: ClassVar[dict[str, _Reading]] = {}


def node_load(
    node: NodeInfo, now: float, seen: dict[str, _Reading] | None = None, offline_requests: float = 0.0
) -> NodeLoad:
    """The node's peak usage from its agent's annotation (fresh=False when missing, malformed or stale), with the
    CPU its Running offline pods request (`offline_requests`, milli-cpu)."""
    alloc = node.table.allocatable[node.index]
    allocatable = (float(alloc[0]), float(alloc[1]))
    usable = not node.unschedulable and not node.offline_job_evicting
    raw = node.annotations.get(ANN_NODE_USAGE)
    if not isinstance(raw, str):
        return NodeLoad(node.name, allocatable=allocatable, fresh=False, schedulable=usable)
    reading = _Readings.by_raw[raw] if raw in _Readings.by_raw else read_usage(raw)
    if seen is not None:
        seen[raw] = reading
    if reading is None:
        return NodeLoad(node.name, allocatable=allocatable, fresh=False, schedulable=usable)
    peak, t, window_start, online_cpu, offline = reading
    fresh = -NODE_USAGE_FUTURE_SECONDS <= now - t <= NODE_USAGE_STALE_SECONDS
    allowance, sat = (None, DEFAULT_OFFLINE_SATISFACTION) if offline is None else (
        offline[0] * allocatable[0] / 100.0, offline[1])
    return NodeLoad(node.name, peak, allocatable, fresh, usable, window_start, online_cpu, allowance, offline_requests,
                    sat)


# --- arguments -----------------------------------------------------------------------------------------
def _percent_pair(raw: object, what: str, default: tuple[float, float]) -> tuple[float, float]:
    """{cpu, memory} percents in 0..100; a bad or missing value keeps its default, said in the log."""
    out = list(default)
    if not isinstance(raw, Mapping):
        if raw is not None:
            log.warning("rescheduling: %s=%r is not a mapping {cpu, memory}; using %g/%g", what, raw, *default)
        return default
    for i, key in enumerate(RESOURCES):
        v = raw.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 100:
            log.warning("rescheduling: %s.%s=%r is not a percent in 0..100; using %g", what, key, v, out[i])
            continue
        out[i] = float(v)
    return out[0], out[1]


def parse_strategy(raw: object) -> Strategy:
    """The lowNodeUtilization parameters of `strategies` (Volcano's list of {name, parameters})."""
    if raw is None:
        return Strategy()
    items = raw if isinstance(raw, list) else []
    if not isinstance(raw, list):
        log.warning("rescheduling: strategies=%r is not a list; using %s with its defaults", raw, STRATEGY)
    found: Mapping[str, Any] | None = None
    for item in items:
        name = item.get("name") if isinstance(item, Mapping) else None
        if name == STRATEGY:
            params = item.get("parameters")
            found = params if isinstance(params, Mapping) else {}
        else:
            log.warning("rescheduling: strategy %r is not supported (only %s); ignored", name, STRATEGY)
    if found is None:
        return Strategy()
    s = Strategy(_percent_pair(found.get("thresholds"), "thresholds", DEFAULT_THRESHOLDS),
                 _percent_pair(found.get("targetThresholds"), "targetThresholds", DEFAULT_TARGET_THRESHOLDS))
    if any(lo > hi for lo, hi in zip(s.thresholds, s.target_thresholds, strict=True)):
        log.warning("rescheduling: thresholds %s above targetThresholds %s; using the defaults",
                    s.thresholds, s.target_thresholds)
        return Strategy()
    return s


def _count(arguments: Arguments, key: str, default: int) -> int:
    v = arguments.get_int(key, default)
    if v < 0:
        log.warning("rescheduling: %s=%r is negative; using %d", key, v, default)
        return default
    return v


def _duration(arguments: Arguments, key: str, default: float) -> float:
    raw = arguments.get(key)
    d = parse_go_duration(raw) if isinstance(raw, str) else None
    if raw is not None and (d is None or d < 0):
        log.warning("rescheduling: %s=%r is not a duration; using %gs", key, raw, default)
    return d if d is not None and d >= 0 else default


# --- the plugin ----------------------------------------------------------------------------------------
class _State:
    """What outlives a session (Volcano's util.IsToBeExecuted clock; Koordinator's workload limiter)."""

    last_run: ClassVar[float | None] = None
    moved_at: ClassVar[dict[str, float]] = {}
    relieved_at: ClassVar[dict[str, float]] = {}
    #: workload (controller uid) -> `namespace/Kind/name`, for the moved ones (the view names them)
    workload_names: ClassVar[dict[str, str]] = {}


def reset_state() -> None:
    """Forget every run, move and relieved node (a fresh scheduler process); for tests."""
    _State.last_run = None
    _State.moved_at = {}
    _State.relieved_at = {}
    _State.workload_names = {}
    _Readings.by_raw = {}


@dataclass(frozen=True, slots=True)
class Report:
    """One rebalancing run as the scheduler shows it: its metrics (scheduler_ext/run/observe.py feeds
    scheduler_ext/metrics.py from it; a plugin has no metrics object) and simulate's `rebalance` view."""

    hot: tuple[str, ...] = ()
    cool: tuple[str, ...] = ()
    moves: tuple[Move, ...] = ()
    #: candidates held back, by reason (HELD_REASONS)
    held: Mapping[str, int] = field(default_factory=dict)
    #: workload (`namespace/Kind/name`) -> seconds left of its cool-down, after this run's moves
    cooling: Mapping[str, float] = field(default_factory=dict)
    #: node -> seconds since a pod was moved off it, while its published usage does not show the move yet
    relieved: Mapping[str, float] = field(default_factory=dict)

    def moved_by_resource(self, evicted: Iterable[str]) -> dict[str, int]:
        """The moves the session did evict (task uids `evicted`), counted by the resource that made the node hot."""
        done = set(evicted)
        out: dict[str, int] = {}
        for m in self.moves:
            if m.uid in done:
                out[m.resource] = out.get(m.resource, 0) + 1
        return out


def session_report(ssn: Session) -> Report | None:
    """The report of the session's rebalancing run; None when the plugin is off or did not run (its interval)."""
    plugin = ssn.plugins.get(NAME)
    return plugin.report if isinstance(plugin, ReschedulingPlugin) else None


class ReschedulingPlugin(Plugin):
    name = NAME

    def __init__(self, arguments: Arguments) -> None:
        self.interval = _duration(arguments, "interval", DEFAULT_INTERVAL)
        self.strategy = parse_strategy(arguments.get("strategies"))
        self.limits = Limits(
            max_per_node=_count(arguments, "maxPerNode", DEFAULT_MAX_PER_NODE),
            max_per_run=_count(arguments, "maxPerRun", 0),
            workload_cooldown=_duration(arguments, "workloadCooldown", DEFAULT_WORKLOAD_COOLDOWN),
        )
        #: this session's run (session_report), None until the plugin runs in it
        self.report: Report | None = None

    def on_session_open(self, ssn: Session) -> None:
        def victims_fn(tasks: list[TaskInfo]) -> list[TaskInfo]:
            now = ssn.now
            last = _State.last_run
            if last is not None and now < last + self.interval:
                return []
            _State.last_run = now
            return self._run(ssn, tasks, now)

        ssn.add_victim_tasks_fns(self.name, [victims_fn])

    def _run(self, ssn: Session, tasks: list[TaskInfo], now: float) -> list[TaskInfo]:
        horizon = max(self.limits.workload_cooldown, self.interval)
        _State.moved_at = {w: t for w, t in _State.moved_at.items() if now - t < horizon}
        _State.relieved_at = {n: t for n, t in _State.relieved_at.items() if now - t < NODE_USAGE_STALE_SECONDS}
        _State.workload_names = {w: name for w, name in _State.workload_names.items() if w in _State.moved_at}
        seen: dict[str, _Reading] = {}
        requests: dict[str, float] = {}
        for task in tasks:
            if task.offline and task.node_name and task.status == RUNNING:
                requests[task.node_name] = requests.get(task.node_name, 0.0) + cpu_request(task)
        nodes = [node_load(n, now, seen, requests.get(n.name, 0.0)) for n in ssn.node_list]
        _Readings.by_raw = seen
        # only pods on hot nodes can be victims (and none at all without a cool node): at 5000 nodes, reading
        # every pod's owner and exemption each run cost more than the rest of the run
        hot = {n.name for n in nodes if is_hot(n, self.strategy)}
        if not any(is_cool(n, self.strategy) for n in nodes):
            hot = set()
        by_uid: dict[str, TaskInfo] = {}
        candidates: list[Candidate] = []
        not_movable = 0
        for task in tasks:
            if task.node_name not in hot:
                continue
            c = candidate_of(task)
            if isinstance(c, Candidate):
                candidates.append(c)
                by_uid[c.uid] = task
            elif task.offline and task.status == RUNNING:  # a bare or exempt offline pod
                not_movable += 1
        jobs = (ssn.jobs.get(by_uid[c.uid].job) for c in candidates)
        gangs = {str(j.uid): (j.ready_task_num(), j.min_available) for j in jobs if j is not None}
        plan = choose(nodes, candidates, gangs, self.strategy, self.limits, _State.moved_at, _State.relieved_at, now)
        if not_movable:
            plan.hold(HELD_NOT_MOVABLE, "offline pod(s) on hot nodes without a controller owner or exempt", not_movable)
        for why in plan.skipped:
            log.debug("rescheduling: not moved: %s", why)
        waiting = {n.name: now - _State.relieved_at[n.name] for n in nodes
                   if n.name in _State.relieved_at and n.window_start < _State.relieved_at[n.name]}
        victims: list[TaskInfo] = []
        for m in plan.moves:
            task = by_uid[m.uid]
            ssn.get_cycle_state(task.uid)[REASON_KEY] = m.reason
            _State.moved_at[m.workload] = now
            _State.relieved_at[m.source] = now
            _State.workload_names[m.workload] = controller_name(task)
            waiting[m.source] = 0.0
            victims.append(task)
        self.report = self._report(plan, waiting, now)
        if plan.moves:
            log.info("rescheduling: moving %d offline pod(s) off hot node(s) %s (cool nodes: %s): %s",
                     len(plan.moves), ", ".join(sorted({m.source for m in plan.moves})),
                     ", ".join(plan.cool[:COOL_NAMES_SHOWN]) + ("..." if len(plan.cool) > COOL_NAMES_SHOWN else ""),
                     "; ".join(f"{m.name} from {m.source} (room on {m.destination})" for m in plan.moves))
        return victims

    def _report(self, plan: Plan, waiting: Mapping[str, float], now: float) -> Report:
        cooldown = self.limits.workload_cooldown
        cooling = {_State.workload_names.get(w, w): cooldown - (now - t)
                   for w, t in _State.moved_at.items() if now - t < cooldown}
        return Report(tuple(plan.hot), tuple(plan.cool), tuple(plan.moves), dict(plan.held), cooling, dict(waiting))


SPEC = PluginSpec(
    name=NAME,
    build=ReschedulingPlugin,
    arguments=(
        ArgSpec("interval", "duration", "30s", "time between two rebalancing runs (Volcano's default 5m)"),
        ArgSpec("strategies", "any", None, "[{name: lowNodeUtilization, parameters: {thresholds: {cpu, memory}, "
                "targetThresholds: {cpu, memory}}}]: percent of allocatable; cool at or under thresholds "
                "(default 40/40), hot over targetThresholds (default 70/55)"),
        ArgSpec("maxPerNode", "int", DEFAULT_MAX_PER_NODE, "victims per hot node per run"),
        ArgSpec("maxPerRun", "int", 0, "victims per run in the cluster (0: 5 % of the nodes, at least 1)"),
        ArgSpec("workloadCooldown", "duration", "5m", "a workload (controller owner) is not moved again within it"),
    ),
    doc="Move offline pods off hot nodes to cool ones by the agents' real usage (Volcano's lowNodeUtilization).",
)
