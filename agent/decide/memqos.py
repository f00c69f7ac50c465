"""Memory QoS (DESIGN.md, agent item 5): online memory protected, offline memory capped before any eviction.

Pure: `decide` (agent.decide.plan) calls it; no I/O, no kubernetes.

The pressure rule (this module's interface with the pressure path, agent item 6)
-------------------------------------------------------------------------------
`MemoryPressure` is one observation: kubepods memory as percent of allocatable (the watermarks' measure),
the node's memory high watermark, kubepods' memory PSI `some avg10`, and whether a PSI trigger / v1
`memory.pressure_level` event fired since the last observation. `pressure_step(state, obs, cfg)` folds
one observation into `MemoryPressureState` (carried between decisions in `AgentState.memory`):

- pressure starts at once (no consecutive count: squeezing offline memory is cheap and undone later)
  when usage >= high watermark - `pressureMargin`, or PSI >= `pressurePSI` (when > 0), or a trigger fired;
- it ends after `releaseSamples` consecutive calm observations: usage < threshold - `releaseMargin` and
  PSI < `pressurePSI` and no trigger.

While `state.tightened`, offline pods' `memory.high` (v2) / `memory.soft_limit_in_bytes` (v1) is their
working set x `pressureHighRatio`; otherwise `limit_or_budget x highRatio`. The pressure path calls
`decide` with a sample (or `triggered=True` in the observation) as soon as a trigger wakes it;
`decide` folds every new sample through `pressure_step`, so a trigger tightens `memory.high` in the same
decision, before the watermark rule can evict.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config_memqos import MemoryQosConfig
from agent.model import MemoryPressureState

__all__ = ["MemoryPressure", "MemoryPressureState", "calm", "pressure_reason", "pressure_step", "threshold"]


@dataclass(frozen=True, slots=True)
class MemoryPressure:
    """One observation of the node's memory pressure."""

    #: kubepods memory (working set) as percent of allocatable; None when unknown
    usage_percent: float | None
    #: the node's memory high watermark (percent of allocatable)
    high_watermark: float
    #: kubepods' memory PSI `some avg10` (percent); None where the kernel has none
    psi_some: float | None = None
    #: a PSI trigger or a v1 `memory.pressure_level` event fired since the previous observation
    triggered: bool = False


def threshold(obs: MemoryPressure, cfg: MemoryQosConfig) -> float:
    """Usage percent at which pressure starts: the memory high watermark minus `pressureMargin`."""
    return max(0.0, obs.high_watermark - cfg.pressure_margin)


def pressure_reason(obs: MemoryPressure, cfg: MemoryQosConfig) -> str | None:
    """Why this observation is memory pressure, in words; None when it is not."""
    limit = threshold(obs, cfg)
    if obs.triggered:
        return "a memory pressure trigger fired"
    if obs.usage_percent is not None and obs.usage_percent >= limit:
        return (
            f"kubepods memory {obs.usage_percent:.1f} % >= {limit:g} % (the high watermark {obs.high_watermark:g} % "
            f"- memoryQoS.pressureMargin {cfg.pressure_margin:g})"
        )
    if cfg.pressure_psi > 0 and obs.psi_some is not None and obs.psi_some >= cfg.pressure_psi:
        return f"kubepods memory PSI some avg10 {obs.psi_some:.1f} % >= memoryQoS.pressurePSI {cfg.pressure_psi:g} %"
    return None


def calm(obs: MemoryPressure, cfg: MemoryQosConfig) -> bool:
    """Whether this observation counts toward releasing: under threshold - releaseMargin, PSI low, no trigger."""
    if obs.triggered or obs.usage_percent is None:
        return False
    if obs.usage_percent >= threshold(obs, cfg) - cfg.release_margin:
        return False
    return not (cfg.pressure_psi > 0 and obs.psi_some is not None and obs.psi_some >= cfg.pressure_psi)


def pressure_step(state: MemoryPressureState, obs: MemoryPressure, cfg: MemoryQosConfig) -> MemoryPressureState:
    """Fold one observation into the hysteresis (module docstring)."""
    if pressure_reason(obs, cfg) is not None:
        return MemoryPressureState(tightened=True, calm=0)
    if not state.tightened:
        return state
    if not calm(obs, cfg):
        return MemoryPressureState(tightened=True, calm=0)
    count = state.calm + 1
    if count >= cfg.release_samples:
        return MemoryPressureState()
    return MemoryPressureState(tightened=True, calm=count)
