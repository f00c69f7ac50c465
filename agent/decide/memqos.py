"""Memory QoS (docs/design.md, "Memory QoS"): online memory protected, offline memory capped before any eviction.

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
working set x `pressureHighRatio`; otherwise `limit_or_budget x highRatio`. `decide` builds one observation
per new sample (its kubepods memory percent, `Sample.pressure["memory"]`) and folds it through
`pressure_step` before it plans the knobs; the pressure path samples and decides as soon as a trigger wakes
it, and marks that observation `triggered` (from the sample's trigger mark), so a trigger tightens
`memory.high` in the same decision, before the watermark rule can evict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from agent.config_memqos import MemoryQosConfig
from agent.knobs import limit_value
from agent.model import CgroupDirs, CgroupState, MemoryPressureState, PodCgroups, PodView
from tidemark.apis import PodUID

__all__ = [
    "MemoryInputs",
    "MemoryPressure",
    "MemoryPressureState",
    "MemoryWant",
    "calm",
    "plan_memory",
    "pressure_reason",
    "pressure_step",
    "threshold",
]


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


# --- the knobs ------------------------------------------------------------------------------------------------

PAGE: Final = 4096
#: the least offline `memory.high` / soft limit (a page-aligned MiB): the group still makes progress and can exit
MIN_HIGH: Final = 256 * PAGE
#: `CgroupState.ancestors` keys: kubelet's QoS-level directories
KUBEPODS: Final = "kubepods"
BURSTABLE: Final = "burstable"


@dataclass(frozen=True, slots=True)
class MemoryInputs:
    """What the memory knobs depend on besides the pods and the cgroup state."""

    allocatable_memory: float
    ratio_memory: float
    #: the pressure hysteresis after this decision's samples
    state: MemoryPressureState
    #: each pod's newest working set (bytes)
    working_set: Mapping[PodUID, float]
    #: why the node is under memory pressure now (None: calm, or only not released yet)
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryWant:
    """`value` wanted in `file` of `dirs`' memory directory (kept only where the file exists and differs)."""

    dirs: CgroupDirs
    file: str
    value: str
    reason: str


def _page(value: float) -> int:
    return max(0, int(value)) // PAGE * PAGE


def pod_limit(pod: PodView, cgs: PodCgroups, cg: CgroupState) -> tuple[float | None, str]:
    """The pod's memory limit and where it comes from: its batch-memory limits (all containers), else the
    limit kubelet set on its pod cgroup (`memory.max` / `memory.limit_in_bytes`); None when unlimited."""
    limits = [c.batch_memory_limit for c in pod.containers]
    if pod.containers and all(v for v in limits):
        return float(sum(v for v in limits if v)), "the sum of its batch-memory limits"
    file = "memory.max" if cgs.pod.version == "v2" else "memory.limit_in_bytes"
    value = limit_value(cg.value(cgs.pod.memory, file))
    if value != math.inf and value > 0:
        return value, f"its {file}"
    return None, ""


def offline_value(
    pod: PodView, cgs: PodCgroups, cg: CgroupState, inputs: MemoryInputs, cfg: MemoryQosConfig
) -> tuple[int, str]:
    """An offline pod's `memory.high` (v2) / `memory.soft_limit_in_bytes` (v1), and why, in words."""
    limit, source = pod_limit(pod, cgs, cg)
    if limit is None:
        limit = inputs.allocatable_memory * inputs.ratio_memory
        source = (
            f"allocatable {inputs.allocatable_memory / 2**20:.0f}Mi x capacity.ratio.memory {inputs.ratio_memory:g}"
        )
    value = max(MIN_HIGH, _page(limit * cfg.high_ratio))
    why = f"{limit / 2**20:.0f}Mi ({source}) x memoryQoS.highRatio {cfg.high_ratio:g}"
    if inputs.state.tightened:
        ws = inputs.working_set.get(pod.uid)
        if ws is not None:
            tight = max(MIN_HIGH, _page(ws * cfg.pressure_high_ratio))
            if tight < value:
                return tight, (
                    f"memory pressure: working set {ws / 2**20:.0f}Mi x memoryQoS.pressureHighRatio "
                    f"{cfg.pressure_high_ratio:g} (else {why})"
                )
    return value, why


def protection(
    pods: Sequence[PodView], allocatable: float, cfg: MemoryQosConfig
) -> tuple[dict[PodUID, tuple[int, int]], list[str]]:
    """Online pods' (memory.min, memory.low) from their memory requests; the sum of memory.min scaled down to fit
    allocatable minus `memoryQoS.minReserve`."""
    notes: list[str] = []
    online = [p for p in pods if not p.offline]
    mins = {p.uid: p.requests.memory * cfg.min_ratio for p in online}
    cap = max(0.0, allocatable - cfg.min_reserve)
    total = sum(mins.values())
    scale = 1.0
    if total > cap:
        scale = cap / total if total > 0 else 0.0
        notes.append(
            f"online pods' memory.min would sum to {total / 2**20:.0f}Mi, over allocatable - memoryQoS.minReserve "
            f"{cap / 2**20:.0f}Mi: each scaled by {scale:.3f}"
        )
    out = {p.uid: (_page(mins[p.uid] * scale), _page(p.requests.memory * cfg.low_ratio)) for p in online}
    return out, notes


def plan_memory(
    pods: Sequence[PodView], cg: CgroupState, inputs: MemoryInputs, cfg: MemoryQosConfig
) -> tuple[tuple[MemoryWant, ...], tuple[str, ...]]:
    """Every memory QoS value wanted (module docstring), with the sentences that explain them.

    cgroup v2: online pods' `memory.min`/`memory.low` on the pod and each of its containers (a child with
    no protection of its own gets none of its parent's unless cgroup2 is mounted with memory_recursiveprot),
    and on the QoS-level ancestors the sum of their children's (protection is bounded by the parent's);
    offline pods' `memory.high`. cgroup v1: offline pods' `memory.soft_limit_in_bytes` (the same value);
    online pods get nothing (v1 has no hierarchical protection).
    """
    wants: list[MemoryWant] = []
    notes: list[str] = []
    if inputs.state.tightened:
        notes.append(
            "memory QoS: memory pressure ("
            + (inputs.reason or f"not calm for {cfg.release_samples} samples yet")
            + "): offline memory.high / soft limits lowered toward their working sets, before any eviction"
        )
    v2 = cg.version == "v2"
    prot, pnotes = protection(pods, inputs.allocatable_memory, cfg) if v2 else ({}, [])
    notes.extend(pnotes)
    sums: dict[str, list[int]] = {KUBEPODS: [0, 0], BURSTABLE: [0, 0]}
    for pod in sorted(pods, key=lambda p: p.uid):
        cgs = cg.pods.get(pod.uid)
        if pod.offline:
            if cgs is None:
                continue
            value, why = offline_value(pod, cgs, cg, inputs, cfg)
            file = "memory.high" if v2 else "memory.soft_limit_in_bytes"
            wants.append(MemoryWant(cgs.pod, file, str(value), f"{pod.key} is offline: {file} = {why}"))
            continue
        if not v2:
            continue
        pmin, plow = prot[pod.uid]
        levels = [KUBEPODS] + ([BURSTABLE] if pod.qos_class == "Burstable" else [])
        for level in levels:
            sums[level][0] += pmin
            sums[level][1] += plow
        if cgs is None:
            continue
        request = pod.requests.memory / 2**20
        for d in (cgs.pod, *cgs.containers.values()):
            where = "" if d is cgs.pod else " (on each container too: protection is not inherited)"
            wants.append(
                MemoryWant(
                    d,
                    "memory.min",
                    str(pmin),
                    f"{pod.key} is online: request {request:.0f}Mi x memoryQoS.minRatio {cfg.min_ratio:g}{where}",
                )
            )
            wants.append(
                MemoryWant(
                    d,
                    "memory.low",
                    str(plow),
                    f"{pod.key} is online: request {request:.0f}Mi x memoryQoS.lowRatio {cfg.low_ratio:g}{where}",
                )
            )
    if v2:
        for level in (KUBEPODS, BURSTABLE):
            anc = cg.ancestors.get(level)
            if anc is None:
                continue
            for file, total in (("memory.min", sums[level][0]), ("memory.low", sums[level][1])):
                wants.append(
                    MemoryWant(
                        anc,
                        file,
                        str(total),
                        f"{level}: the sum of its online pods' {file} (v2 protection is bounded by the parent's)",
                    )
                )
    return tuple(wants), tuple(notes)
