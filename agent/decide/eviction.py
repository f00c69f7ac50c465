"""Which offline pods to evict for a high watermark: the shortest prefix of the victim order that works.

Candidates: offline pods only, never in kube-system, never mirror/static pods, never DaemonSet-owned
or system-critical pods (their controller or kubelet puts them straight back), not already
terminating. Order: lowest qos-level first, then lower priority, then larger usage of the pressured
resource(s) (as a fraction of allocatable, summed when both are pressured), then youngest, then UID.
Terminating pods count as released (their usage is already leaving) until their deletionTimestamp
plus the slack (grace period + 10 s from the eviction), so nothing is evicted twice for one pressure.
A resource is satisfied when kubepods usage minus released usage is under its high watermark, or
(oversubscription-only nodes) when the remaining requests fit allocatable.

Under the satisfaction measure (`eviction.cpu.measure`, `agent.decide.watermarks.starved`) CPU victims have their
own reasons: `CPUStarvation` (`starvation_victims`: victims go until the tier's ceiling exceeds
`eviction.cpu.satisfaction` of what the remaining offline pods request, Koordinator's cpu_evict.go releases
requests the same way) and `OnlineCPUHighWatermark` (online usage alone past the high watermark: the node measure's
victims, since evicting offline pods is what frees CPU for the online ones).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from agent.decide.cooldown import Round
from agent.decide.ops import EvictionReason
from agent.decide.watermarks import Mode
from agent.model import ZERO, Amounts, PodView
from tidemark.apis import PodUID, Resource, Watermarks

REASON: dict[Resource, EvictionReason] = {"cpu": "CPUHighWatermark", "memory": "MemoryHighWatermark"}


@dataclass(frozen=True, slots=True)
class Victim:
    pod: PodView
    reason: EvictionReason
    detail: str


def evictable(pod: PodView, skip: Collection[PodUID] = ()) -> bool:
    """Offline, not exempt (kube-system, mirror/static, DaemonSet-owned, system-critical), not already
    terminating, not in `skip`."""
    return (
        pod.offline
        and not pod.kube_system
        and not pod.mirror
        and pod.exempt is None
        and not pod.terminating
        and pod.uid not in skip
    )


def counts_as_released(pod: PodView, now: float, slack: float) -> bool:
    return pod.deletion is not None and now <= pod.deletion + slack


def victim_order(
    pods: Sequence[PodView],
    usage: Mapping[PodUID, Amounts],
    pressured: Sequence[Resource],
    allocatable: Amounts,
    skip: Collection[PodUID] = (),
) -> list[PodView]:
    """Evictable pods in victim order (see the module docstring); the order is total."""

    def weight(p: PodView) -> float:
        u = usage.get(p.uid, ZERO)
        return sum(u.get(r) / allocatable.get(r) for r in pressured if allocatable.get(r) > 0)

    return sorted(
        (p for p in pods if evictable(p, skip)),
        key=lambda p: (p.qos_level, p.priority, -weight(p), -p.created, p.uid),
    )


def _fmt(resource: Resource, value: float) -> str:
    return f"{value:.0f}m" if resource == "cpu" else f"{value / 2**20:.0f}Mi"


def watermark_victims(
    pods: Sequence[PodView],
    usage: Mapping[PodUID, Amounts],
    kubepods: Amounts,
    allocatable: Amounts,
    marks: Watermarks,
    pressured: Sequence[Resource],
    mode: Mode,
    requests: Amounts,
    now: float,
    slack: float,
    skip: Collection[PodUID] = (),
    cooldown: Round | None = None,
) -> tuple[list[Victim], list[str]]:
    """The shortest prefix of the victim order whose released usage brings every pressured resource back.

    `kubepods` and `usage` are the recent usage (the samples that made the decision); `requests` are
    the requests of non-terminating pods (plain + batch), used on oversubscription-only nodes.
    `cooldown`: a victim it holds back keeps its place in the prefix (counted as released), except while memory
    is past its high watermark: then the search goes on to the next pod (agent.decide.cooldown).
    """
    notes: list[str] = []
    if not pressured:
        return [], notes
    released = Amounts()
    for p in pods:
        if counts_as_released(p, now, slack):
            released = released + usage.get(p.uid, ZERO)
            notes.append(f"{p.key} is terminating: its usage counts as released")
    released_requests = Amounts()

    def limit(r: Resource) -> float:
        return marks.high(r) * allocatable.get(r) / 100.0

    def satisfied(r: Resource) -> bool:
        if kubepods.get(r) - released.get(r) < limit(r):
            return True
        return mode == "usage_and_requests" and requests.get(r) - released_requests.get(r) <= allocatable.get(r)

    victims: list[Victim] = []
    for pod in victim_order(pods, usage, pressured, allocatable, skip):
        needed = [r for r in pressured if not satisfied(r)]
        if not needed:
            break
        r = needed[0]
        u = usage.get(pod.uid, ZERO)
        detail = (
            f"{r} usage {_fmt(r, kubepods.get(r) - released.get(r))} >= high watermark {marks.high(r)} % "
            f"({_fmt(r, limit(r))}); {pod.key} (qos-level {pod.qos_level}, priority {pod.priority}) uses "
            f"{_fmt(r, u.get(r))}"
        )
        memory = "memory" in needed
        if cooldown is not None and not cooldown.admit(pod, REASON[r], memory):
            if not memory:  # held, not replaced: its place in the prefix stays
                released = released + u
                released_requests = released_requests + pod.all_requests()
            continue
        victims.append(Victim(pod, REASON[r], detail))
        released = released + u
        released_requests = released_requests + pod.all_requests()
    unmet = [r for r in pressured if not satisfied(r)]
    if unmet:
        held = " the cool-downs hold back some pods (agent.decide.cooldown) and" if cooldown and cooldown.held else ""
        notes.append(
            f"evicting every evictable offline pod does not bring {', '.join(unmet)} under the high watermark:"
            f"{held} the rest is online or system usage"
        )
    return victims, notes


def starvation_victims(
    pods: Sequence[PodView],
    usage: Mapping[PodUID, Amounts],
    ceiling: float,
    satisfaction: float,
    allocatable: Amounts,
    now: float,
    slack: float,
    skip: Collection[PodUID] = (),
) -> list[Victim]:
    """The shortest prefix of the victim order (by CPU) after which the offline tier's ceiling exceeds
    `satisfaction` of the CPU the remaining offline pods request (plain + batch-cpu; terminating pods within their
    slack already count as gone)."""
    requested = sum(p.all_requests().cpu for p in pods if p.offline and not counts_as_released(p, now, slack))
    victims: list[Victim] = []
    for pod in victim_order(pods, usage, ("cpu",), allocatable, skip):
        if requested <= 0 or ceiling / requested > satisfaction:
            break
        detail = (
            f"the offline tier is starved: its ceiling {ceiling:.0f}m is {ceiling / requested:.0%} of the "
            f"{requested:.0f}m offline pods request (<= {satisfaction:.0%}); {pod.key} (qos-level {pod.qos_level}, "
            f"priority {pod.priority}) requests {pod.all_requests().cpu:.0f}m"
        )
        victims.append(Victim(pod, "CPUStarvation", detail))
        requested -= pod.all_requests().cpu
    return victims
