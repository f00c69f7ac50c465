"""The admission guard (docs/design.md, "Admission guard"): catch overflow from admissions, not usage drift.

On nodes with the oversubscription label, per resource in oversubscription-types, with X_hold = the
largest X published in the last `admission_hold` seconds: when the plain (cpu/memory) requests of the
non-terminating pods exceed A + X_hold for N consecutive cycles (`<=` is fine), evict plain offline
pods, newest first, until it holds. When the online pods alone exceed A + X_hold the overflow is
reported and never acted on (evicting offline pods could not fix it).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from agent.decide.eviction import Victim, evictable
from agent.model import AdmissionState, Amounts, PodView
from tidemark.apis import RESOURCES, PodUID, Resource


def x_hold(
    history: Sequence[tuple[float, int, int]], on_node: Amounts, published_now: Amounts, now: float, hold: float
) -> Amounts:
    """The largest X published within `hold` seconds: the history, the Node's current values, this cycle's."""
    cpu = max([on_node.cpu, published_now.cpu] + [c for t, c, _ in history if now - t <= hold])
    memory = max([on_node.memory, published_now.memory] + [m for t, _, m in history if now - t <= hold])
    return Amounts(cpu, memory)


def plain_requests(pods: Sequence[PodView]) -> tuple[Amounts, Amounts]:
    """(all, online-only) plain requests of non-terminating pods."""
    total = online = Amounts()
    for p in pods:
        if p.terminating:
            continue
        total = total + p.requests
        if not p.offline:
            online = online + p.requests
    return total, online


def overflowing(
    total: Amounts, allocatable: Amounts, hold: Amounts, types: Collection[Resource]
) -> tuple[Resource, ...]:
    return tuple(r for r in RESOURCES if r in types and total.get(r) > allocatable.get(r) + hold.get(r))


def step(state: AdmissionState, over: Collection[Resource]) -> AdmissionState:
    return AdmissionState(
        state.overflow_cpu + 1 if "cpu" in over else 0,
        state.overflow_memory + 1 if "memory" in over else 0,
    )


def victims(
    pods: Sequence[PodView],
    state: AdmissionState,
    n: int,
    allocatable: Amounts,
    hold: Amounts,
    types: Collection[Resource],
    already: Collection[PodUID] = (),
    skip: Collection[PodUID] = (),
) -> tuple[list[Victim], list[str]]:
    """Plain offline pods, newest first, until plain requests fit A + X_hold for every overflowing resource."""
    notes: list[str] = []
    total, online = plain_requests(pods)
    released = Amounts()
    for p in pods:
        if p.uid in already and not p.terminating:
            released = released + p.requests
    chosen: list[Victim] = []
    taken = set(already)
    for r in RESOURCES:
        if r not in types or state.overflow(r) < n:
            continue
        cap = allocatable.get(r) + hold.get(r)
        if online.get(r) > cap:
            notes.append(
                f"{r}: online pods alone request {online.get(r):.0f} > allocatable + X_hold {cap:.0f}; "
                "online-only overflow is reported, never acted on"
            )
            continue
        order = sorted(
            (p for p in pods if evictable(p, skip) and p.requests.get(r) > 0 and p.uid not in taken),
            key=lambda p: (-p.created, p.uid),
        )
        for pod in order:
            if total.get(r) - released.get(r) <= cap:
                break
            detail = (
                f"{r}: plain requests {total.get(r) - released.get(r):.0f} > allocatable {allocatable.get(r):.0f} + "
                f"X_hold {hold.get(r):.0f} for {state.overflow(r)} cycles; {pod.key} is the newest plain offline pod"
            )
            chosen.append(Victim(pod, "AdmissionOverflow", detail))
            taken.add(pod.uid)
            released = released + pod.requests
    return chosen, notes
