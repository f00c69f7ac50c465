"""Eviction cool-downs: the node rests between eviction rounds, a workload loses at most one pod per cool-down.

Why: an eviction's effect shows in the samples only after the pod's grace period, so a node that evicts every
decision takes more pods than the pressure needed; and a workload hit again and again (its controller puts each
pod back, the pressure returns) loses its progress every time while the rest of the offline tier keeps running.
Koordinator limits each workload the same way: a rate limiter per controller owner
(koordinator-sh/koordinator pkg/descheduler/controllers/migration/arbitrator/filter.go, `filterLimitedObject`),
5 minutes by default (pkg/descheduler/apis/config/v1alpha2/defaults.go, `defaultObjectLimiters`).

The rules (`Round.admit`, one decision's victims in victim order):
- workload (`eviction.cooldown.workload`, default 5m): a pod whose workload (its controller owner, kind/name in
  its namespace; a pod without one is its own workload) lost a pod less than the cool-down ago, or loses one in
  this round already, is held back: "cooldown: workload <ns>/<kind>/<name> until T". Every reason.
- node (`eviction.cooldown.node`, default 30 s): until the cool-down has passed since the newest eviction issued
  on this node, every victim is held back: "cooldown: node until T".
- memory safety: while the node is past its memory high watermark, the node rule does not apply, and a victim
  the workload rule holds back is replaced by the next pod in victim order (of another workload; the search in
  `agent.decide.eviction.watermark_victims` goes on): memory overuse ends in OOM kills, which take online pods
  too and lose more work than an eviction. For every other reason (CPU, starvation, the admission guard) a held
  victim is not replaced: its place in the shortest prefix stays, since CPU pressure throttles rather than
  kills and the next pod in order is one the victim order means to protect more.
0 turns a rule off. The history (`agent.model.EvictionHistory`) holds evictions the Eviction API accepted (the
daemon's; `plan` starts with none); `expire` keeps it bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from agent.decide.ops import EvictionReason, HeldEviction
from agent.model import EvictionHistory, PodView

NODE = "node_cooldown"
WORKLOAD = "workload_cooldown"


class _Candidate(Protocol):
    @property
    def pod(self) -> PodView: ...

    @property
    def reason(self) -> EvictionReason: ...


V = TypeVar("V", bound=_Candidate)


@dataclass(frozen=True, slots=True)
class Cooldowns:
    """The two cool-downs in seconds (`eviction.cooldown.node`, `eviction.cooldown.workload`); 0 = off."""

    node: float = 30.0
    workload: float = 300.0


def workload_of(pod: PodView) -> str:
    """"<namespace>/<kind>/<name>" of the pod's controller owner; "<namespace>/Pod/<name>" without one."""
    return f"{pod.namespace}/{pod.owner or f'Pod/{pod.name}'}"


def _at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Round:
    """One decision's victims against the cool-downs: `admit` says whether a victim goes now and remembers the
    workloads this round takes; `held` lists the victims held back, each once, in victim order."""

    def __init__(self, history: EvictionHistory, cooldowns: Cooldowns, now: float) -> None:
        self.history = history
        self.cooldowns = cooldowns
        self.now = now
        #: workloads losing a pod in this round
        self.taken: set[str] = set()
        self.held: list[HeldEviction] = []

    def node_until(self) -> float | None:
        """When the node cool-down ends, None when it is not running."""
        last, cd = self.history.last_round, self.cooldowns.node
        if cd <= 0 or last is None or self.now >= last + cd:
            return None
        return last + cd

    def workload_until(self, workload: str) -> float | None:
        """When the workload's cool-down ends (a pod taken this round starts one now), None when not running."""
        cd = self.cooldowns.workload
        if cd <= 0:
            return None
        if workload in self.taken:
            return self.now + cd
        last = self.history.workloads.get(workload)
        if last is None or self.now >= last + cd:
            return None
        return last + cd

    def check(self, pod: PodView, reason: EvictionReason, memory: bool = False) -> HeldEviction | None:
        """Why `pod` may not go now (None: it may); `memory`: the node is past its memory high watermark."""
        workload = workload_of(pod)
        node = None if memory else self.node_until()
        if node is not None:
            why = f"cooldown: node until {_at(node)} ({node - self.now:.0f} s)"
            return HeldEviction(pod.uid, pod.namespace, pod.name, reason, NODE, node, why, workload)
        until = self.workload_until(workload)
        if until is not None:
            why = f"cooldown: workload {workload} until {_at(until)} ({until - self.now:.0f} s)"
            return HeldEviction(pod.uid, pod.namespace, pod.name, reason, WORKLOAD, until, why, workload)
        return None

    def admit(self, pod: PodView, reason: EvictionReason, memory: bool = False) -> bool:
        """True: `pod` goes in this round (its workload is taken); False: held back (listed in `held`)."""
        held = self.check(pod, reason, memory)
        if held is None:
            self.taken.add(workload_of(pod))
            return True
        if all(h.uid != pod.uid for h in self.held):
            self.held.append(held)
        return False

    def filter(self, victims: Sequence[V]) -> list[V]:
        """The victims that go now, in order; the others are held back and not replaced (not memory)."""
        return [v for v in victims if self.admit(v.pod, v.reason)]

    def defer(self, deferred: Sequence[PodView]) -> None:
        """Victims admitted but not evicted after all (`eviction.max_per_cycle`): their workloads lose nothing this
        round, so a pod held only because of them is no longer held."""
        self.taken -= {workload_of(p) for p in deferred}
        self.held = [h for h in self.held if h.cooldown != WORKLOAD or self.workload_until(h.workload) is not None]

    def held_except(self, going: Sequence[PodView]) -> tuple[HeldEviction, ...]:
        """The held victims, minus pods a later search of this round took after all (memory bypasses the node rule)."""
        uids = {p.uid for p in going}
        return tuple(h for h in self.held if h.uid not in uids)


def select(
    victims: Sequence[V], history: EvictionHistory, cooldowns: Cooldowns, now: float, memory: bool = False
) -> tuple[list[V], tuple[HeldEviction, ...]]:
    """The victims (in victim order) that go now and the ones held back with the reason.

    `memory`: the node is past its memory high watermark; then the node rule does not apply and a victim the
    workload rule holds is skipped (the caller's search supplies the next one, see the module docstring).
    """
    r = Round(history, cooldowns, now)
    going = [v for v in victims if r.admit(v.pod, v.reason, memory)]
    return going, r.held_except([v.pod for v in going])


def expire(history: EvictionHistory, cooldowns: Cooldowns, now: float) -> EvictionHistory:
    """The history without what no cool-down needs any more (entries older than their cool-down): bounded."""
    last = history.last_round
    if last is not None and now >= last + cooldowns.node:
        last = None
    workloads = {w: t for w, t in history.workloads.items() if now < t + cooldowns.workload}
    return replace(history, last_round=last, workloads=workloads)


def record(history: EvictionHistory, workload: str, at: float, cooldowns: Cooldowns) -> EvictionHistory:
    """An eviction the Eviction API accepted at `at`: the node's round and the workload's cool-down start."""
    h = expire(history, cooldowns, at)
    last = at if h.last_round is None else max(h.last_round, at)
    workloads = dict(h.workloads)
    if cooldowns.workload > 0:
        workloads[workload] = max(at, workloads.get(workload, at))
    return EvictionHistory(last_round=last if cooldowns.node > 0 else None, workloads=workloads)
