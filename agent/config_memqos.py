"""The `memoryQoS` section of the agent's configuration (docs/design.md, "Memory QoS").

Kept beside `agent.config` (which builds `AgentConfig` from it and maps the YAML keys) so that module
stays small. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True, slots=True)
class MemoryQosConfig:
    enabled: bool = field(
        default=True,
        metadata=_doc(
            "Memory QoS (default true, where the files exist): online pods' `memory.min`/`memory.low` (v2, with "
            "their ancestors), offline pods' `memory.high` (v2) / `memory.soft_limit_in_bytes` (v1). false puts "
            "back every memory value the agent wrote (where nobody changed it since)."
        ),
    )
    min_ratio: float = field(
        default=0.0,
        metadata=_doc(
            "cgroup v2: online pods' `memory.min` = memory request x this, in [0, 1] (default 0: no hard "
            "protection). The sum over the node is capped at allocatable minus `memoryQoS.minReserve`."
        ),
    )
    low_ratio: float = field(
        default=1.0,
        metadata=_doc(
            "cgroup v2: online pods' `memory.low` = memory request x this, in [0, 1] (default 1.0): reclaim "
            "takes unprotected (offline) memory first."
        ),
    )
    min_reserve: int = field(
        default=0,
        metadata=_doc(
            "Bytes of allocatable memory never covered by `memory.min` (default 0): the sum of online pods' "
            "`memory.min` is scaled down to fit allocatable minus this. A memory quantity."
        ),
    )
    high_ratio: float = field(
        default=0.9,
        metadata=_doc(
            "Offline pods' `memory.high` (v2) / `memory.soft_limit_in_bytes` (v1) at all times = the pod's memory "
            "limit (else allocatable x `capacity.ratio.memory`) x this, in (0, 1] (default 0.9): throttled and "
            "reclaimed before their hard limit OOM-kills them."
        ),
    )
    pressure_high_ratio: float = field(
        default=1.0,
        metadata=_doc(
            "Under memory pressure offline pods' `memory.high` / soft limit = their working set x this, in (0, 1] "
            "(default 1.0: no growth, their inactive page cache reclaimed; below 1 squeezes them further at each "
            "decision while the pressure lasts), never below 1 MiB."
        ),
    )
    pressure_margin: float = field(
        default=5.0,
        metadata=_doc(
            "Memory pressure starts when kubepods memory reaches the node's memory high watermark minus this many "
            "percent points of allocatable (default 5: offline memory is squeezed BEFORE the watermark evicts), "
            "in [0, 100]."
        ),
    )
    pressure_psi: float = field(
        default=10.0,
        metadata=_doc(
            "...or when kubepods' memory PSI `some avg10` reaches this percent (default 10), in [0, 100]; 0 turns "
            "the PSI rule off."
        ),
    )
    release_margin: float = field(
        default=5.0,
        metadata=_doc(
            "Hysteresis: pressure ends after `memoryQoS.releaseSamples` consecutive samples with usage at least this "
            "many points under the pressure threshold and PSI under `memoryQoS.pressurePSI` (default 5), in [0, 100]."
        ),
    )
    release_samples: int = field(
        default=3,
        metadata=_doc("Consecutive calm samples before offline `memory.high` goes back up (default 3), 1..1000."),
    )


@dataclass(frozen=True, slots=True)
class TierMemoryConfig:
    """`tier.memory.*`: the offline tier's memory guard and proactive reclaim (agent.decide.memguard).

    Kept here until `agent.config_tier` holds the tier's keys (issue 32's shared design); the YAML keys are
    `tier.memory.*` either way."""

    enabled: bool = field(
        default=True,
        metadata=_doc(
            "The memory guard (default true): every `tier.period` the offline tier's limit (v1 "
            "`memory.limit_in_bytes`, v2 `memory.high` of the BestEffort root and of offline pods outside it) = "
            "what offline uses + (MemFree - the kernel's low watermark - `tier.memory.margin`), so offline growth "
            "never takes free memory under the point where online allocations enter direct reclaim. false puts "
            "back the values the agent wrote."
        ),
    )
    margin: int = field(
        default=256 * 2**20,
        metadata=_doc(
            "Bytes of free memory kept above the kernel's low watermark that offline growth may not take "
            "(default 256Mi), a memory quantity: kswapd wakes at the low watermark and online allocations enter "
            "direct reclaim at the min watermark, so the margin is what an online burst can allocate within one "
            "`tier.period` without reclaim."
        ),
    )
    reclaim_wait: float = field(
        default=0.01,
        metadata=_doc(
            "Proactive reclaim starts when the online pods' memory wait (the fraction of the last period some "
            "online task stalled on memory: PSI `memory.pressure` `some total`; v1 /proc/pressure/memory) reaches "
            "this (default 0.01), in [0, 1]; 0 turns proactive reclaim off."
        ),
    )
    reclaim_step: int = field(
        default=64 * 2**20,
        metadata=_doc(
            "Bytes of offline page cache reclaimed per `tier.period` while the online memory wait lasts (default "
            "64Mi), a memory quantity: v2 writes it to the tier groups' `memory.reclaim`, v1 lowers the tier "
            "limit by it; never more than the groups' page cache (what reclaim can take without an OOM kill)."
        ),
    )
