"""The frozen operations a plan is made of, and the plan itself. Executors (`agent.act`) apply them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from agent.model import ZERO, AgentState, Amounts
from tidemark.apis import NodeName, PodUID
from tidemark.nodereport import ReportSpec

EvictionReason = Literal[
    "CPUHighWatermark", "MemoryHighWatermark", "AdmissionOverflow", "CPUStarvation", "OnlineCPUHighWatermark"
]


@dataclass(frozen=True, slots=True)
class SetCgroupValue:
    """Write `value` (the exact string) to `<path>/<file>`; `current` is what sensing found there."""

    path: str
    file: str
    value: str
    current: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SetProcessValue:
    """Write `value` to `/proc/<pid>/<file>` (oom_score_adj)."""

    pid: int
    file: str
    value: str
    current: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class EvictPod:
    """Evict a pod through the Eviction API; `grace_seconds` None = the pod's own."""

    uid: PodUID
    namespace: str
    name: str
    reason: EvictionReason
    grace_seconds: int | None = None
    detail: str = ""
    #: the pod's workload ("<namespace>/<kind>/<name>", agent.decide.cooldown): its cool-down starts when the
    #: Eviction API says yes
    workload: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class HeldEviction:
    """A victim a cool-down holds back this decision (agent.decide.cooldown): `why` says which and until when."""

    uid: PodUID
    namespace: str
    name: str
    reason: EvictionReason
    #: "node_cooldown" | "workload_cooldown" (the metric's label)
    cooldown: str
    #: wall time the cool-down ends
    until: float
    why: str
    #: the pod's workload ("<namespace>/<kind>/<name>")
    workload: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class UsageView:
    """Smoothed usage over the window: kubepods (pods only, the watermarks' measure), the machine, classes."""

    kubepods: Amounts = ZERO
    percent: Amounts = ZERO
    node: Amounts = ZERO
    online: Amounts = ZERO
    offline: Amounts = ZERO
    #: U_non: the machine's usage minus offline pods' usage
    non_offline: Amounts = ZERO
    pods: Mapping[PodUID, Amounts] = field(default_factory=dict)
    samples: int = 0
    #: samples with a reading of the machine's usage (/proc): without one U_non is unknown
    node_samples: int = 0
    window_seconds: float = 0.0
    newest: float | None = None
    #: the newest sample's kubepods usage in percent of allocatable: what the watermarks compare (the
    #: smoothed `percent` lags it by up to the window); None without a readable kubepods
    newest_percent: Amounts | None = None
    #: the window's p95 of kubepods usage in percent of allocatable (published beside the mean in
    #: tidemark.io/node-usage for the scheduler's usage plugin); None without a readable kubepods
    p95_percent: Amounts | None = None


@dataclass(frozen=True, slots=True)
class CapacityView:
    """B and X as computed, and what the agent publishes (0 where the label/types/evicting/staleness say so; batch-*
    never under `batch_bound`)."""

    B: Amounts = ZERO
    X: Amounts = ZERO
    batch_allocatable: Amounts = ZERO
    #: Rb, the batch-* requests of the pods bound to the node and not finished: the published batch-* never goes
    #: under it, or a kubelet restart would reject running batch pods (docs/agent.md, "Capacity: B and X")
    batch_bound: Amounts = ZERO
    published_batch: Amounts = ZERO
    published_x: Amounts = ZERO
    #: `capacity.policy` and the U_non it estimated, which B subtracts (agent.decide.profile)
    policy: str = "window"
    u_non: Amounts = ZERO
    #: why a published batch-* value is 0, per resource in words (the CapacityWithdrawn Event's cause)
    zero_causes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IoStatus:
    """What the metrics show of I/O QoS after a decision (agent.decide.ioqos)."""

    enabled: bool = False
    #: (MAJ:MIN, name, weight model) of each disk limited
    devices: tuple[tuple[str, str, str], ...] = ()
    #: offline pods whose pod cgroup has the limit files (their I/O is held by the plan's values)
    limited_pods: int = 0


@dataclass(frozen=True, slots=True)
class TierView:
    """The offline tier's CPU ceiling as decided (agent.decide.tier), for `plan` and the metrics."""

    ceiling: float
    bound: float
    rule: str
    reason: str
    #: the worst online pod's CPU wait fraction (None: not sensed)
    online_wait: float | None = None
    #: that wait while the tier is idle, which the target is on top of (`agent.decide.tier.baseline_for`)
    online_wait_base: float | None = None
    #: the pod whose wait it is (namespace/name) and how it was read (`cpu.pressure` or `schedstat`)
    online_wait_pod: str | None = None
    online_wait_source: str | None = None
    #: the worst online pod's run delay per run slice, milliseconds (None: not sensed)
    online_delay_ms: float | None = None
    #: the signal `online_wait_base` is of (`tier.cpu.onlineWaitSignal`: `slice`, ms; `share`, a fraction)
    online_wait_base_signal: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    node: NodeName
    labels: Mapping[str, str]
    usage: UsageView
    capacity: CapacityView
    evicting: bool
    #: what this decision wants on the Node, as its NodeReport says it (tidemark/nodereport.py); None: nothing
    report: ReportSpec | None = None
    evictions: tuple[EvictPod, ...] = ()
    #: victims the eviction cool-downs hold back (agent.decide.cooldown)
    held: tuple[HeldEviction, ...] = ()
    cgroup_writes: tuple[SetCgroupValue, ...] = ()
    process_writes: tuple[SetProcessValue, ...] = ()
    explanations: tuple[str, ...] = ()
    #: the state the next decision starts from (`Snapshot.state`)
    next_state: AgentState = field(default_factory=AgentState)
    #: this decision was a capacity tick (its capacity keys, if any, are due publications)
    capacity_tick: bool = False
    #: I/O QoS as decided (the metrics' gauges)
    io: IoStatus = field(default_factory=IoStatus)
    tier: TierView | None = None
    #: the memory guard's limit over the offline tier's groups, bytes (None: no guard this decision)
    tier_memory_limit: int | None = None
    #: the memory guard's headroom: free memory above the kernel's low watermark and the margin (None: no guard)
    tier_memory_headroom: int | None = None
    #: the online pods' I/O wait fraction of the newest tier reading, and the I/O controller's per-pod limit
    online_io_wait: float | None = None
    offline_io_bps: int | None = None
    #: why, in words: the memory guard's limits, the I/O controller's rule ("" where they did not decide)
    tier_memory_reason: str = ""
    offline_io_reason: str = ""
