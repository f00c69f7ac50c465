"""The pressure path's rules (docs/design.md, "Pressure path"), pure: when pressure lasts, how fast to sample, what
a trigger means for the decision, and the PSI figures in words.

A trigger (a PSI `some <stall> <window>` trigger or a v1 memcg `memory.pressure_level` event) is not an
eviction by itself. It makes the agent sample and decide at once, and then every `pressure.fast_period`
while pressure lasts (`pressure.hold` after the last trigger) and a triggered resource's usage is near its
high watermark (`worth_hurrying`, `pressure.margin`). Each of those samples is a sample of the
watermark rule, so "sustained" keeps its meaning -- usage at or past the high watermark for N
consecutive samples -- but N samples span N x `fast_period` (0.75 s by default) instead of N sampler
periods (3 s); for CPU under the satisfaction measure, only the sampler's own periods count (`counted`).
A fast sample counts only for the resources whose own trigger fired within `hold` (`counted`): CPU
contention does not hurry a memory eviction. A memory trigger also starts memory QoS's
pressure (`agent.decide.memqos`, through the sample's `triggered`), so the offline memory knobs tighten at
the first triggered sample, before any eviction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from agent.config import PressureConfig
from agent.model import Amounts, PodView, Sample
from tidemark.apis import RESOURCES, PodUID, Resource, Watermarks


def active(last_trigger: float | None, now: float, cfg: PressureConfig) -> bool:
    """Pressure lasts `hold` seconds after the last trigger (monotonic times)."""
    return cfg.enabled and last_trigger is not None and now - last_trigger < cfg.hold


def worth_hurrying(
    last: Sample | None, resources: Iterable[Resource], allocatable: Amounts, marks: Watermarks, cfg: PressureConfig
) -> bool:
    """Whether fast samples can change anything: a triggered resource's kubepods usage is at or past its high
    watermark minus `margin` points (unknown usage counts as near)."""
    if last is None or last.kubepods is None:
        return True
    for r in resources:
        a = allocatable.get(r)
        if a <= 0 or 100.0 * last.kubepods.get(r) / a >= marks.high(r) - cfg.margin:
            return True
    return False


def sample_period(normal: float, pressure_active: bool, cfg: PressureConfig) -> float:
    """Seconds to the next sample: `fast_period` while pressure lasts (never slower than the normal period)."""
    return min(normal, cfg.fast_period) if pressure_active else normal


def memory_pressure(samples: Sequence[Sample], now: float, cfg: PressureConfig) -> bool:
    """Whether memory pressure lasts: a memory trigger came with a sample of the last `hold` seconds (wall
    times). (The offline memory knobs follow memory QoS's own hysteresis, which a trigger starts.)"""
    if not cfg.enabled:
        return False
    for s in reversed(samples):
        if s.time < now - cfg.hold:
            return False
        if "memory" in s.triggered:
            return True
    return False


def counted(sample: Sample, window: Sequence[Sample], period: float, cfg: PressureConfig,
            cpu_fast: bool = True) -> tuple[Resource, ...]:  # fmt: skip
    """The resources whose watermark count `sample` adds to: all for a sample of the sampler's own period,
    and for the first sample of each sampler period (wall time in whole periods), so the other resources
    keep counting at the normal rate; for another faster one (the pressure path's), only the resources with
    a trigger in the `hold` seconds up to it. So memory usage past its watermark is confirmed fast under
    memory pressure, neither faster nor slower because the node's CPU is contended. `cpu_fast` False (the
    satisfaction measure with the offline tier's ceiling): a fast sample never counts for CPU, whose
    eviction then needs N sampler periods: the ceiling already cuts the tier within the fast sample, and an
    online spike of a second or two is no reason to kill offline work (before, 3 fast samples, 0.75 s, did)."""
    if sample.elapsed >= 0.9 * period:
        return RESOURCES
    seen: set[Resource] = set()
    previous: Sample | None = None
    for s in reversed(window):
        if s.time >= sample.time:
            continue
        if previous is None:
            previous = s
        if s.time < sample.time - cfg.hold:
            break
        seen.update(s.triggered)
    seen.update(sample.triggered)
    if previous is None or int(previous.time // period) != int(sample.time // period):
        return RESOURCES
    return tuple(r for r in RESOURCES if r in seen and (cpu_fast or r != "cpu"))


def triggered(samples: Sequence[Sample]) -> tuple[Resource, ...]:
    """The resources triggered in any of `samples`, in RESOURCES order."""
    seen = {r for s in samples for r in s.triggered}
    return tuple(r for r in RESOURCES if r in seen)


def _fmt(values: Mapping[Resource, float]) -> str:
    return ", ".join(f"{r} {values[r]:.1f} %" for r in RESOURCES if r in values)


def notes(last: Sample | None, new: Sequence[Sample], pods: Sequence[PodView], cfg: PressureConfig) -> list[str]:
    """The PSI figures of the node, kubepods and online pods, and the triggers the decision saw, in words."""
    out: list[str] = []
    if last is None:
        return out
    if last.node_pressure:
        out.append(f"node pressure (PSI some avg10, /proc/pressure): {_fmt(last.node_pressure)}")
    if last.pressure:
        out.append(f"kubepods pressure (PSI some avg10): {_fmt(last.pressure)}")
    if last.pod_pressure:
        names: dict[PodUID, str] = {p.uid: p.key for p in pods}
        worst = sorted(
            last.pod_pressure.items(), key=lambda kv: (-max(kv[1].values(), default=0.0), names.get(kv[0], kv[0]))
        )
        shown = [f"{names.get(uid, uid)} {_fmt(v)}" for uid, v in worst[:5] if v]
        if shown:
            more = f" (+{len(worst) - 5} more)" if len(worst) > 5 else ""
            out.append(f"online pods' pressure (PSI some avg10, highest first): {'; '.join(shown)}{more}")
    fired = triggered(new)
    if fired and cfg.enabled:
        out.append(
            f"pressure trigger ({', '.join(fired)}): sampled and decided at once; samples every "
            f"{cfg.fast_period:g} s while it lasts ({cfg.hold:g} s after the last trigger), each counted by the "
            "watermark rule"
        )
    return out


def worst_online(last: Sample | None) -> dict[Resource, float]:
    """The highest PSI `some avg10` among online pods, per resource (a metric without per-pod labels)."""
    out: dict[Resource, float] = {}
    if last is None:
        return out
    for values in last.pod_pressure.values():
        for r, v in values.items():
            out[r] = max(out.get(r, 0.0), v)
    return out
