"""The rescheduling plugin's choice (scheduler_ext/plugins/rescheduling.py): which offline pods to move off hot nodes
onto cool ones, as a pure function of the nodes' loads, the candidates, the gangs and the rate limits (Volcano's
lowNodeUtilization victimsFnForLnu + evictPodsFromSourceNodes, with Tidemark's changes listed in the plugin's
docstring). Its own module so the plugin reads the session and this decides; unit-tested exhaustively."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from tidemark.apis import offline_starving

EVICT_REASON: Final = "Rebalanced"
RESOURCES: Final = ("cpu", "memory")
#: cool: under both, so a moved pod lands well under the `usage` plugin's offline filter (70/50 shipped)
DEFAULT_THRESHOLDS: Final = (40.0, 40.0)
#: hot: past the agent's B target on cpu (70, 10 points under its 80 eviction watermark); on memory
#: halfway between the B target (50) and the watermark (60): moved before the agent has to evict
DEFAULT_TARGET_THRESHOLDS: Final = (70.0, 55.0)
DEFAULT_MAX_PER_NODE: Final = 1
#: starving: the offline tier's allowance at or under this fraction of the offline pods' CPU requests, when the
#: agent's node-usage does not say its own (its eviction.cpu.satisfaction default)
DEFAULT_OFFLINE_SATISFACTION: Final = 0.6
#: maxPerRun 0: 5 % of the nodes, at least 1
MAX_PER_RUN_PERCENT: Final = 5
DEFAULT_WORKLOAD_COOLDOWN: Final = 300.0
COOL_NAMES_SHOWN: Final = 3
#: why a candidate was held back (the label of tidemark_scheduler_rebalance_skipped_total: a fixed set)
HELD_COOLDOWN: Final = "workload_cooldown"
HELD_GANG: Final = "gang"
HELD_NO_ROOM: Final = "no_cool_node"
HELD_NODE_LIMIT: Final = "node_limit"
HELD_CLUSTER_LIMIT: Final = "cluster_limit"
HELD_RELIEVED: Final = "node_relieved"
HELD_NOT_MOVABLE: Final = "not_movable"
HELD_REASONS: Final = (HELD_COOLDOWN, HELD_GANG, HELD_NO_ROOM, HELD_NODE_LIMIT, HELD_CLUSTER_LIMIT, HELD_RELIEVED,
                       HELD_NOT_MOVABLE)


# --- the pure choice -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Strategy:
    """lowNodeUtilization's thresholds, (cpu, memory) percent of allocatable."""

    thresholds: tuple[float, float] = DEFAULT_THRESHOLDS
    target_thresholds: tuple[float, float] = DEFAULT_TARGET_THRESHOLDS


@dataclass(frozen=True, slots=True)
class Limits:
    max_per_node: int = DEFAULT_MAX_PER_NODE
    #: 0: MAX_PER_RUN_PERCENT of the nodes, at least 1
    max_per_run: int = 0
    workload_cooldown: float = DEFAULT_WORKLOAD_COOLDOWN

    def per_run(self, nodes: int) -> int:
        return self.max_per_run if self.max_per_run > 0 else max(1, nodes * MAX_PER_RUN_PERCENT // 100)


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A node as the choice sees it: usage in percent of allocatable (peak), allocatable in milli-cpu/bytes."""

    name: str
    usage: tuple[float, float] = (0.0, 0.0)
    allocatable: tuple[float, float] = (0.0, 0.0)
    #: the usage is fresh (not stale, missing or malformed)
    fresh: bool = True
    #: schedulable and not marked evicting by its agent
    schedulable: bool = True
    #: epoch seconds at which the published window starts (its time minus its window)
    window_start: float = 0.0
    #: the online pods' CPU in percent of allocatable (the document's `online`), which "hot" judges CPU by;
    #: None: the agent did not write it, the whole usage judges
    online_cpu: float | None = None
    #: the offline tier's allowance on the node, milli-cpu (the document's `offline.allowance`); None: not written
    offline_allowance: float | None = None
    #: the CPU the node's Running offline pods request, milli-cpu (plain + batch-cpu)
    offline_requests: float = 0.0
    #: starving at or under this fraction of the requests (the agent's eviction.cpu.satisfaction, as it published it)
    offline_satisfaction: float = DEFAULT_OFFLINE_SATISFACTION

    @property
    def pressure(self) -> tuple[float, float]:
        """What "hot" compares with `targetThresholds`: online CPU (when published), the whole memory."""
        return (self.usage[0] if self.online_cpu is None else self.online_cpu, self.usage[1])


@dataclass(frozen=True, slots=True)
class Candidate:
    """A Running offline pod that may be moved: its node, workload, gang, start and estimated usage."""

    uid: str
    name: str
    node: str
    workload: str
    job: str
    started: float
    #: estimated usage, milli-cpu and bytes
    request: tuple[float, float]
    #: the CPU it requests, milli-cpu (plain + batch-cpu; 0 for none): what a move releases of a starving tier
    cpu_request: float = 0.0


@dataclass(frozen=True, slots=True)
class Move:
    uid: str
    name: str
    source: str
    destination: str
    workload: str
    reason: str
    #: the resource that made the source hot ("cpu" or "memory")
    resource: str = RESOURCES[0]


@dataclass(slots=True)
class Plan:
    moves: list[Move] = field(default_factory=list)
    hot: list[str] = field(default_factory=list)
    cool: list[str] = field(default_factory=list)
    #: candidates passed over, and why (debug log)
    skipped: list[str] = field(default_factory=list)
    #: candidates held back by reason (HELD_REASONS)
    held: dict[str, int] = field(default_factory=dict)

    def hold(self, reason: str, why: str, n: int = 1) -> None:
        """`n` candidates held back for `reason` (one of HELD_REASONS); `why` for the debug log."""
        if n > 0:
            self.held[reason] = self.held.get(reason, 0) + n
        self.skipped.append(why if n <= 1 else f"{why} ({n} candidates)")


def is_cool(n: NodeLoad, s: Strategy) -> bool:
    """Volcano's lowThresholdFilter: every resource at or under `thresholds`, on a usable node."""
    return n.fresh and n.schedulable and all(u <= t for u, t in zip(n.usage, s.thresholds, strict=True))


def starving(allowance: float | None, requests: float, satisfaction: float) -> bool:
    """The offline tier's allowance is at or under `satisfaction` of what the offline pods request: the agent's
    CPUStarvation measure (agent.decide.watermarks `starved`), which it evicts by once its rebalanceGrace is over."""
    return allowance is not None and offline_starving(allowance, requests, satisfaction)


def is_hot(n: NodeLoad, s: Strategy) -> bool:
    """Fresh, not cool, and over `targetThresholds` (online CPU, memory) or starving its offline tier."""
    starved = starving(n.offline_allowance, n.offline_requests, n.offline_satisfaction)
    return n.fresh and not is_cool(n, s) and (over_target(n.pressure, s) is not None or starved)


def over_target(usage: Sequence[float], s: Strategy) -> int | None:
    """The first resource (index) over `targetThresholds` (Volcano's highThresholdFilter), else None."""
    for i, (u, t) in enumerate(zip(usage, s.target_thresholds, strict=True)):
        if u > t:
            return i
    return None


def percent_of(request: tuple[float, float], n: NodeLoad) -> tuple[float, float] | None:
    """The request in percent of the node's allocatable; None when the node has none of a requested resource."""
    out = []
    for r, a in zip(request, n.allocatable, strict=True):
        if a <= 0:
            if r > 0:
                return None
            out.append(0.0)
        else:
            out.append(r * 100.0 / a)
    return out[0], out[1]


class _Headroom:
    """The cool nodes' remaining headroom, percent of allocatable per resource (vectorised: 5000 nodes)."""

    def __init__(self, cool: Sequence[NodeLoad], s: Strategy) -> None:
        self.nodes = list(cool)
        self.alloc = np.array([n.allocatable for n in cool], dtype=float).reshape(len(cool), len(RESOURCES))
        self.room = np.array([[t - u for u, t in zip(n.usage, s.thresholds, strict=True)] for n in cool],
                             dtype=float).reshape(len(cool), len(RESOURCES))
        self._most = self._largest()

    def _largest(self) -> np.ndarray:
        """The most any one cool node can still take, per resource (milli-cpu, bytes): a quick no."""
        if not self.nodes:
            return np.zeros(len(RESOURCES))
        return np.asarray((np.maximum(self.room, 0.0) * self.alloc / 100.0).max(axis=0))

    def take(self, request: tuple[float, float]) -> NodeLoad | None:
        """The cool node with the most headroom left once it takes `request` without turning warm (its
        headroom consumed), the first by name on a tie; None when none has room."""
        req = np.asarray(request, dtype=float)
        if (req > self._most).any():
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = np.where(self.alloc > 0, req * 100.0 / np.where(self.alloc > 0, self.alloc, 1.0),
                           np.where(req > 0, np.inf, 0.0))
        left = self.room - pct
        fits = (left >= 0).all(axis=1)
        if not fits.any():
            return None
        j = int(np.argmax(np.where(fits, left.min(axis=1), -np.inf)))
        self.room[j] = left[j]
        self._most = self._largest()
        return self.nodes[j]


def _hot_resource(n: NodeLoad, s: Strategy) -> int:
    i = over_target(n.pressure, s)
    return 0 if i is None else i


def _why_hot(n: NodeLoad, s: Strategy, cool: Sequence[NodeLoad]) -> str:
    r = _hot_resource(n, s)
    names = [c.name for c in cool[:COOL_NAMES_SHOWN]]
    more = f" (+{len(cool) - len(names)} more)" if len(cool) > len(names) else ""
    if over_target(n.pressure, s) is None and n.offline_allowance is not None and n.offline_requests > 0:
        what = (f"offline tier starving: its allowance {n.offline_allowance:.0f}m is "
                f"{n.offline_allowance / n.offline_requests:.0%} of the {n.offline_requests:.0f}m offline pods "
                f"request (at or under {n.offline_satisfaction:.0%})")
    else:
        name = "online cpu" if r == 0 and n.online_cpu is not None else RESOURCES[r]
        what = f"{name} {n.pressure[r]:.0f}% over {s.target_thresholds[r]:.0f}%"
    return f"{EVICT_REASON}: node {n.name} {what}; cool nodes: {', '.join(names)}{more}"


def choose(
    nodes: Sequence[NodeLoad],
    candidates: Iterable[Candidate],
    gangs: Mapping[str, tuple[int, int]],
    strategy: Strategy,
    limits: Limits,
    moved_at: Mapping[str, float],
    relieved_at: Mapping[str, float],
    now: float,
) -> Plan:
    """Which offline pods to move off hot nodes this run (Volcano's victimsFnForLnu + evictPodsFromSourceNodes).

    `gangs`: job -> (ready members, minMember); `moved_at`: workload -> when it was last moved;
    `relieved_at`: node -> when a pod was last moved off it.
    """
    plan = Plan()
    cool = [n for n in nodes if is_cool(n, strategy)]
    hot = [n for n in nodes if is_hot(n, strategy)]
    # the hottest first (Volcano's sortNodes: cpu + memory, descending)
    hot.sort(key=lambda n: (-(n.pressure[0] + n.pressure[1]), n.name))
    plan.cool = sorted(n.name for n in cool)
    plan.hot = [n.name for n in hot]
    if not cool or not hot:
        return plan
    cool.sort(key=lambda n: n.name)
    headroom = _Headroom(cool, strategy)
    by_node: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_node.setdefault(c.node, []).append(c)
    ready = {job: r for job, (r, _m) in gangs.items()}
    moved = dict(moved_at)
    budget = limits.per_run(len(nodes))
    for n in hot:
        # least progress first: the newest start, then the name (stable)
        mine = sorted(by_node.get(n.name, ()), key=lambda c: (-c.started, c.name))
        if budget <= 0:
            plan.hold(HELD_CLUSTER_LIMIT, f"node {n.name}: maxPerRun reached", len(mine))
            continue
        since = relieved_at.get(n.name)
        # a node hot by its online pods' CPU stays as hot after a move (the offline pod's CPU was never counted):
        # waiting for its usage to show the move would wait for nothing while the agent's watermark comes closer
        # (the 20-node fleet's ramp: 1 move, then 2 of the surge nodes' offline pods evicted)
        # nor a node starving its offline tier: its requests are the session's, a move shows in the next run
        by_online_cpu = n.online_cpu is not None and _hot_resource(n, strategy) == 0
        by_starving = over_target(n.pressure, strategy) is None
        if since is not None and n.window_start < since and not by_online_cpu and not by_starving:
            plan.hold(HELD_RELIEVED, f"node {n.name}: its usage does not show the move at {since:.0f} yet", len(mine))
            continue
        usage = list(n.pressure)
        requested = n.offline_requests
        taken = 0
        reason = _why_hot(n, strategy, cool)
        resource = RESOURCES[_hot_resource(n, strategy)]
        for i, c in enumerate(mine):
            if over_target(usage, strategy) is None and not starving(n.offline_allowance, requested,
                                                                     n.offline_satisfaction):
                break
            if taken >= limits.max_per_node or budget <= 0:
                limit = HELD_NODE_LIMIT if taken >= limits.max_per_node else HELD_CLUSTER_LIMIT
                plan.hold(limit, f"node {n.name}: still hot, {limit} reached", len(mine) - i)
                break
            held = _unmovable(c, gangs, ready, moved, limits, now)
            dest = None if held else headroom.take(c.request)
            if held or dest is None:
                code, why = held or (HELD_NO_ROOM, "no cool node has room for it")
                plan.hold(code, f"{c.name} on {n.name}: {why}")
                continue
            src = percent_of(c.request, n) or (0.0, 0.0)
            if n.online_cpu is not None:
                src = (0.0, src[1])  # moving an offline pod leaves the online CPU as it is
            usage = [u - p for u, p in zip(usage, src, strict=True)]
            requested -= c.cpu_request
            moved[c.workload] = now
            if c.job in ready:
                ready[c.job] -= 1
            plan.moves.append(Move(c.uid, c.name, n.name, dest.name, c.workload, reason, resource))
            taken += 1
            budget -= 1
    return plan


def _unmovable(
    c: Candidate,
    gangs: Mapping[str, tuple[int, int]],
    ready: Mapping[str, int],
    moved: Mapping[str, float],
    limits: Limits,
    now: float,
) -> tuple[str, str] | None:
    """Why the candidate may not move now (workload cool-down, gang): (HELD_ reason, words), or None."""
    last = moved.get(c.workload)
    if last is not None and now - last < limits.workload_cooldown:
        return HELD_COOLDOWN, (f"workload {c.workload} moved {now - last:.0f} s ago "
                               f"(cool-down {limits.workload_cooldown:.0f} s)")
    gang = gangs.get(c.job)
    if gang is not None and gang[1] > 1 and ready.get(c.job, gang[0]) - 1 < gang[1]:
        return HELD_GANG, f"job {c.job} would fall below minMember {gang[1]}"
    return None
