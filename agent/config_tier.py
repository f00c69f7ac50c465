"""The `tier` section (the offline tier's CPU ceiling) and `eviction.cpu` (what a CPU eviction measures) of the
agent's configuration (docs/agent.md, "The offline tier"; docs/design.md, "QoS enforcement").

Kept beside `agent.config` (which builds `AgentConfig` from these and maps the YAML keys through `TIER_FIELDS`)
so that module stays small. Defaults are provisional: the colocation benchmark (issue 32) chooses the final ones.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agent.config_values import Parser, _boolean, _choice, _duration, _fraction

CpuMeasure = Literal["satisfaction", "node"]
CpuCut = Literal["halve", "proportional"]
WaitSignal = Literal["slice", "share"]


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True, slots=True)
class TierConfig:
    enabled: bool = field(
        default=True,
        metadata=_doc(
            "Hold every offline pod under one CPU ceiling recomputed every `tier.period` (default true). false: no "
            "tier quota at all (an offline pod is then capped only by its own batch-cpu limit); values the agent "
            "wrote go back."
        ),
    )
    period: float = field(
        default=1.0,
        metadata=_doc("Seconds between tier decisions (default 1: the online pods get their CPU back within it)."),
    )
    suppress_ratio: float = field(
        default=0.9,
        metadata=_doc(
            "The ceiling's bound = allocatable CPU x this - online pods' usage - system usage, in (0, 1] (default "
            "0.9: a tenth of the node stays free for the online pods' next burst; Koordinator's cpu_suppress "
            "threshold is 0.65, with no feedback). 1.0 leaves no static margin (the online-wait feedback still "
            "cuts) and did more offline work in the colocation benchmark; it also raises the allowance a starved "
            "tier is judged by, so fewer starvation moves and evictions."
        ),
    )
    online_wait_target: float = field(
        default=0.10,
        metadata=_doc(
            "With the share signal: the online pods' CPU wait fraction the feedback keeps them under, over what "
            "they wait while the tier is idle (their baseline), in [0, 1] (default 0.10, from the colocation "
            "benchmark: 0.05 did 17-18 points less offline work at no p99 difference): while the worst online pod "
            "waits more than target + baseline, the ceiling is cut every period (`tier.cpu.cut`); at or under it, "
            "it rises."
        ),
    )
    online_wait_signal: WaitSignal = field(
        default="slice",
        metadata=_doc(
            "What the feedback reads of the worst online pod (default slice). slice: its tasks' run delay per run "
            "slice (`/proc/<tid>/schedstat`: delay / slices, v1 and v2), against `tier.cpu.onlineDelayTarget`; it "
            "tracks how long each wake-up waits, what a request's latency is made of, and does not grow with the "
            "pod's own load. share: the fraction of the time it waited (v2 `cpu.pressure` some; v1 the summed run "
            "delay over the wall time), against `tier.cpu.onlineWaitTarget`; it rose past 0.10 beside BestEffort "
            "pods' full work while nginx's p99 did not move (docs/benchmarks-colocation.md, eighth run)."
        ),
    )
    online_delay_target: float = field(
        default=0.5,
        metadata=_doc(
            "With the slice signal: the run delay per run slice, in milliseconds, the feedback keeps the worst "
            "online pod under, over its baseline (its delay while the tier is idle), >= 0 (default 0.5: nginx "
            "waited 0.05-0.07 ms per slice alone and 0.12-0.16 ms beside BestEffort pods at an unchanged p99, "
            "docs/benchmarks-colocation.md, eighth run; a CPU hog of the same weight makes it wait milliseconds)."
        ),
    )
    subtract_system: bool = field(
        default=False,
        metadata=_doc(
            "Whether the bound subtracts the system usage (processes outside kubepods) as Koordinator's does "
            "(default false). The offline tier runs at the kernel's lowest weight (`cpu.idle`, kubelet's "
            "`cpu.shares=2` on the BestEffort root), so the host's processes already take the CPU before it; "
            "subtracting their usage as well held back most of the work the tier did not do in the colocation "
            "benchmark's ninth run (0.73 and 0.62 of BestEffort's at a ratio of 1.0). true: the node's total use "
            "stays under allocatable x `tier.cpu.suppressRatio`."
        ),
    )
    cut: CpuCut = field(
        default="halve",
        metadata=_doc(
            "How far one period over the online-wait target cuts the ceiling (default halve). halve: to half, "
            "whatever the excess (multiplicative decrease, as TCP). proportional: by target / wait (target + "
            "baseline over the worst online pod's wait), never below half, so a wait just over the target trims "
            "the ceiling and one twice the target or more halves it (no difference in offline work or p99 in 7 "
            "paired rounds of the colocation benchmark)."
        ),
    )
    raise_step: float = field(
        default=0.1,
        metadata=_doc(
            "The ceiling rises at most this fraction of allocatable CPU per period, in (0, 1] (default 0.1, "
            "Koordinator's beMaxIncreaseCPUPercent); cuts are immediate."
        ),
    )
    min_cores: float = field(
        default=0.1,
        metadata=_doc(
            "The ceiling's floor in cores, >= 0 (default 0.1): offline work is never frozen outright, since a pod "
            "holding a lock, or asked to exit, must still progress."
        ),
    )


@dataclass(frozen=True, slots=True)
class EvictionCpuConfig:
    measure: CpuMeasure = field(
        default="satisfaction",
        metadata=_doc(
            "What the CPU high watermark measures (default satisfaction). satisfaction: offline pods are evicted "
            "for CPU only when the tier is starved (its usage >= `eviction.cpu.starvedUsage` of the ceiling and "
            "the ceiling / offline CPU requests <= `eviction.cpu.satisfaction`, Koordinator's cpu_evict.go) or "
            "when online usage alone passes the high watermark; offline pods soaking idle CPU never count. node: "
            "Volcano's rule, kubepods usage (offline included) against the high watermark."
        ),
    )
    starved_usage: float = field(
        default=0.9,
        metadata=_doc(
            "The tier is starved only while its usage is at least this fraction of the ceiling, in (0, 1] (default "
            "0.9: an offline tier that does not use its ceiling lacks work, not CPU)."
        ),
    )
    satisfaction: float = field(
        default=0.6,
        metadata=_doc(
            "...and the ceiling is at most this fraction of the offline pods' CPU requests (plain + batch-cpu), in "
            "(0, 1] (default 0.6, Koordinator's CPUEvictBESatisfactionLowerPercent). Victims go until the ceiling "
            "exceeds this fraction of what remains requested."
        ),
    )
    window: float = field(
        default=30.0,
        metadata=_doc(
            "Seconds of samples whose mean offline usage judges starvation, 0 to judge each sample alone (default "
            "30s; Koordinator's cpuEvictTimeWindowSeconds): a pod's start-up burst, or a kubelet restart's, is not "
            "a starved tier. Until the samples cover 90 % of it the tier is not starved; at most `sampler.window`."
        ),
    )
    rebalance_grace: float = field(
        default=40.0,
        metadata=_doc(
            "Seconds a starved tier waits before its CPUStarvation evictions, 0 to evict at once (default 40s: the "
            "scheduler's rescheduling plugin, every 30 s, moves offline pods off a node whose published "
            "`offline.allowance` is under `eviction.cpu.satisfaction` of their requests; a move restarts the pod "
            "on a node with room, an eviction only frees this one). Only starvation waits: the online pods are "
            "protected by the ceiling meanwhile, and OnlineCPUHighWatermark evictions never wait."
        ),
    )


#: (YAML key, AgentConfig section, attribute, parser) of each row; `agent.config` adds them to its table
TIER_FIELDS: tuple[tuple[str, str, str, Parser], ...] = (
    ("tier.enabled", "tier", "enabled", _boolean),
    ("tier.period", "tier", "period", _duration(0.05, exclusive=False)),
    ("tier.cpu.suppressRatio", "tier", "suppress_ratio", _fraction(0.0, 1.0, True)),
    ("tier.cpu.onlineWaitTarget", "tier", "online_wait_target", _fraction(0.0, 1.0, False)),
    ("tier.cpu.onlineWaitSignal", "tier", "online_wait_signal", _choice("slice", "share")),
    ("tier.cpu.onlineDelayTarget", "tier", "online_delay_target", _fraction(0.0, 1e6, False)),
    ("tier.cpu.subtractSystem", "tier", "subtract_system", _boolean),
    ("tier.cpu.cut", "tier", "cut", _choice("halve", "proportional")),
    ("tier.cpu.raiseStep", "tier", "raise_step", _fraction(0.0, 1.0, True)),
    ("tier.cpu.minCores", "tier", "min_cores", _fraction(0.0, 1e6, False)),
    ("eviction.cpu.measure", "eviction_cpu", "measure", _choice("satisfaction", "node")),
    ("eviction.cpu.starvedUsage", "eviction_cpu", "starved_usage", _fraction(0.0, 1.0, True)),
    ("eviction.cpu.satisfaction", "eviction_cpu", "satisfaction", _fraction(0.0, 1.0, True)),
    ("eviction.cpu.window", "eviction_cpu", "window", _duration(0.0, exclusive=False)),
    ("eviction.cpu.rebalanceGrace", "eviction_cpu", "rebalance_grace", _duration(0.0, exclusive=False)),
)
