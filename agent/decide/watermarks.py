"""Watermark hysteresis: a pure function (state, sample, config) -> state.

usage% = kubepods usage / allocatable. What each node label turns on (docs/design.md, "What each node label turns on"):

- none: no eviction (the state resets to not evicting);
- colocation only, or both labels: a resource is *over* when usage% >= its high watermark;
- oversubscription only: over when usage% >= high **and** the requests of the pods on the node
  (batch-* counted as cpu/memory) exceed 100 % of allocatable for that resource.

What CPU measures (`eviction.cpu.measure`): `node` is Volcano's rule above (kubepods usage, offline pods included);
`satisfaction` (the default) gives the watermark the ONLINE pods' usage as CPU usage% (offline pods soaking idle CPU
never count) and counts CPU over also while the offline tier is starved (`starved`, Koordinator's cpu_evict.go).
Memory always keeps the node measure.

The node becomes evicting after N consecutive samples with a resource over (per resource), and clears
after N consecutive samples with every resource at or under its low watermark. Samples the pressure path
takes faster than the sampler period count for a resource only while that resource's own pressure lasts
(`agent.decide.pressure.counted`).
"""

from __future__ import annotations

from typing import Literal

from agent.model import Amounts, WatermarkState
from tidemark.apis import RESOURCES, Resource, Watermarks

Mode = Literal["off", "usage", "usage_and_requests"]


def mode_for(colocation: bool, oversubscription: bool) -> Mode:
    if oversubscription and not colocation:
        return "usage_and_requests"
    if colocation or oversubscription:
        return "usage"
    return "off"


def starved(
    offline_used: float, ceiling: float, offline_requests: float, starved_usage: float, satisfaction: float
) -> bool:
    """The offline tier is starved for CPU: it uses at least `starved_usage` of its ceiling AND the ceiling is at most
    `satisfaction` of what the offline pods request (Koordinator, pkg/koordlet/qosmanager/plugins/cpuevict/
    cpu_evict.go: `isBECPUUsageHighEnough` and `calculateResourceMilliToReleaseBySatisfaction`'s lower percent). A
    tier that does not use its ceiling lacks work, not CPU; one that requests nothing was promised nothing."""
    if offline_requests <= 0 or ceiling <= 0:
        return False
    return offline_used >= starved_usage * ceiling and ceiling / offline_requests <= satisfaction


def over_resources(
    pct: Amounts, requests: Amounts, allocatable: Amounts, marks: Watermarks, mode: Mode, cpu_starved: bool = False
) -> tuple[Resource, ...]:
    """The resources past their high watermark in this sample (with the request condition where it applies); CPU
    also while the offline tier is starved (`cpu_starved`, the satisfaction measure)."""
    if mode == "off":
        return ()
    out: list[Resource] = []
    for r in RESOURCES:
        if r == "cpu" and cpu_starved:
            out.append(r)
            continue
        if pct.get(r) < marks.high(r):
            continue
        if mode == "usage_and_requests" and not requests.get(r) > allocatable.get(r):
            continue
        out.append(r)
    return tuple(out)


def all_under_low(pct: Amounts, marks: Watermarks) -> bool:
    return all(pct.get(r) <= marks.low(r) for r in RESOURCES)


def step(
    state: WatermarkState,
    pct: Amounts,
    requests: Amounts,
    allocatable: Amounts,
    marks: Watermarks,
    mode: Mode,
    n: int,
    counts: tuple[Resource, ...] = RESOURCES,
    cpu_starved: bool = False,
) -> WatermarkState:
    """Fold one sample into the hysteresis state. A resource not in `counts` (a sample the pressure path
    took faster than the sampler period while that resource had no pressure trigger) does not add to its
    consecutive count; it still resets it when under the high watermark. `cpu_starved`: the satisfaction
    measure's starvation (`starved`) counts as CPU over, and a starved sample never clears."""
    if mode == "off":
        return WatermarkState()
    over = over_resources(pct, requests, allocatable, marks, mode, cpu_starved)

    def count(r: Resource, before: int) -> int:
        if r not in over:
            return 0
        return before + 1 if r in counts else before

    over_cpu = count("cpu", state.over_cpu)
    over_memory = count("memory", state.over_memory)
    clear = state.clear + 1 if all_under_low(pct, marks) and not cpu_starved else 0
    evicting = state.evicting
    if not evicting and max(over_cpu, over_memory) >= n:
        evicting = True
    elif evicting and clear >= n:
        evicting = False
    return WatermarkState(evicting, over_cpu, over_memory, clear)
