"""Frozen snapshots the decision modules read: plain numbers only (milli-cores, bytes, epoch seconds).

Sensing (`agent.sense.snapshot`, `agent.sense.sampler`) fills these from the cluster file/API and the cgroup and
proc trees; Kubernetes quantities are parsed there, never here. Nothing in this module does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from tidemark.apis import (
    ANN_OVERSUBSCRIPTION_CPU,
    ANN_OVERSUBSCRIPTION_MEMORY,
    RES_BATCH_CPU,
    RES_BATCH_MEMORY,
    NodeName,
    PodUID,
    QosClass,
    Resource,
    Watermarks,
)

KnobVersion = Literal["v1", "v2"]
#: the largest amount the agent accepts (Kubernetes quantities are int64); larger ones are malformed input
MAX_AMOUNT = 2**63 - 1
_EMPTY: Mapping[str, str] = MappingProxyType({})
#: where each resource's published amounts live on the Node: X (an annotation) and B (an extended resource);
#: sensing reads them back (`agent.sense.snapshot`), capacity publishes them (`agent.decide.capacity`)
X_KEY: Mapping[Resource, str] = MappingProxyType(
    {"cpu": ANN_OVERSUBSCRIPTION_CPU, "memory": ANN_OVERSUBSCRIPTION_MEMORY}
)
BATCH_KEY: Mapping[Resource, str] = MappingProxyType({"cpu": RES_BATCH_CPU, "memory": RES_BATCH_MEMORY})


@dataclass(frozen=True, slots=True)
class Amounts:
    """A cpu (milli-cores) and memory (bytes) pair."""

    cpu: float = 0.0
    memory: float = 0.0

    def get(self, resource: Resource) -> float:
        return self.cpu if resource == "cpu" else self.memory

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Amounts) -> Amounts:
        return Amounts(self.cpu - other.cpu, self.memory - other.memory)

    def floor0(self) -> Amounts:
        return Amounts(max(0.0, self.cpu), max(0.0, self.memory))

    @staticmethod
    def of(values: Mapping[Resource, float]) -> Amounts:
        return Amounts(values.get("cpu", 0.0), values.get("memory", 0.0))


ZERO = Amounts()


@dataclass(frozen=True, slots=True)
class CgroupDirs:
    """One cgroup's directory per controller (all equal on v2) and which files version applies.

    `blkio` is empty where v1 has no blkio hierarchy under the cgroup root (I/O QoS has nowhere to write)."""

    cpu: str
    cpuacct: str
    memory: str
    version: KnobVersion
    blkio: str = ""

    def child(self, name: str) -> CgroupDirs:
        return CgroupDirs(
            f"{self.cpu}/{name}",
            f"{self.cpuacct}/{name}",
            f"{self.memory}/{name}",
            self.version,
            f"{self.blkio}/{name}" if self.blkio else "",
        )

    def distinct(self) -> tuple[str, ...]:
        """Each directory once (v2, or a combined cpu,cpuacct mount, repeat themselves)."""
        seen: list[str] = []
        for d in (self.cpu, self.cpuacct, self.memory, self.blkio):
            if d and d not in seen:
                seen.append(d)
        return tuple(seen)


@dataclass(frozen=True, slots=True)
class ContainerView:
    """A container of a pod: its runtime id (`containerd://<id>`, None before it started) and batch-* amounts."""

    name: str
    container_id: str | None
    batch_cpu_request: int = 0
    batch_cpu_limit: int | None = None
    batch_memory_limit: int | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    """What the decisions need of a pod (already parsed: qos-level, QoS class, requests in plain units)."""

    uid: PodUID
    namespace: str
    name: str
    qos_level: int
    qos_class: QosClass
    priority: int = 0
    created: float = 0.0
    #: deletionTimestamp (epoch seconds): the time the pod's grace period ends; None while not terminating
    deletion: float | None = None
    grace_seconds: float = 30.0
    requests: Amounts = ZERO
    batch_requests: Amounts = ZERO
    #: sum of plain CPU limits (milli) when every container has one, else None
    cpu_limit: int | None = None
    containers: tuple[ContainerView, ...] = ()
    mirror: bool = False
    #: why the agent must never evict this pod (tidemark.apis.eviction_exemption), None when it may
    exempt: str | None = None
    #: Volcano's per-pod CPU burst (tidemark.apis.parse_quota_burst): None off, 0 each container's quota,
    #: else microseconds
    quota_burst: int | None = None
    #: the controller owner (the ownerReference with controller=true) as "Kind/name"; None: none
    owner: str | None = None
    #: one of Tidemark's own pods (label `app.kubernetes.io/part-of: tidemark`: the agent, the scheduler, the
    #: webhook): online, but never the pod whose CPU wait the offline tier's feedback protects
    component: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def offline(self) -> bool:
        return -7 <= self.qos_level <= -1

    @property
    def terminating(self) -> bool:
        return self.deletion is not None

    @property
    def kube_system(self) -> bool:
        return self.namespace == "kube-system"

    @property
    def uses_batch(self) -> bool:
        return self.batch_requests != ZERO or any(
            c.batch_cpu_request or c.batch_cpu_limit is not None or c.batch_memory_limit is not None
            for c in self.containers
        )

    def all_requests(self) -> Amounts:
        """Plain plus batch-* requests: what counts as "requests on the node" for the label table."""
        return self.requests + self.batch_requests


@dataclass(frozen=True, slots=True)
class NodeView:
    """The Node as the decisions see it: labels turned into switches, annotations parsed."""

    name: NodeName
    allocatable: Amounts
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    colocation: bool = False
    oversubscription: bool = False
    watermarks: Watermarks = field(default_factory=lambda: Watermarks((80, 30), (60, 30)))
    types: tuple[Resource, ...] = ("cpu", "memory")
    #: the agent-written values as found on the Node (None when the key is absent)
    published_x: Mapping[Resource, int | None] = field(default_factory=dict)
    published_batch: Mapping[Resource, int | None] = field(default_factory=dict)
    evicting_annotation: bool = False
    taints: tuple[Mapping[str, object], ...] = ()
    #: `time` of the tidemark.io/node-usage annotation: when the agent last published
    last_publish: float | None = None
    warnings: tuple[str, ...] = ()

    @property
    def evicting_taint(self) -> bool:
        return any(t.get("key") == "volcano.sh/offline-job-evicting" for t in self.taints)


@dataclass(frozen=True, slots=True)
class Sample:
    """Usage over one sampler interval (K samples need K+1 reads). None where nothing could be read."""

    time: float
    elapsed: float
    node: Amounts | None
    kubepods: Amounts | None
    pods: Mapping[PodUID, Amounts] = field(default_factory=dict)
    #: PSI `some avg10` of the kubepods cgroup (percent) where the kernel exposes it
    pressure: Mapping[Resource, float] = field(default_factory=dict)
    #: PSI `some avg10` of the node (/proc/pressure/*, percent) where the kernel exposes it
    node_pressure: Mapping[Resource, float] = field(default_factory=dict)
    #: PSI `some avg10` of each online pod's cgroup (percent; cgroup v2)
    pod_pressure: Mapping[PodUID, Mapping[Resource, float]] = field(default_factory=dict)
    #: the resources whose pressure trigger fired since the previous sample (the pressure path)
    triggered: tuple[Resource, ...] = ()


@dataclass(frozen=True, slots=True)
class PodCgroups:
    """A pod's directories: the pod level and each started container (by container name)."""

    pod: CgroupDirs
    containers: Mapping[str, CgroupDirs] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BlockDevice:
    """A whole disk I/O QoS limits offline pods on (sensed: `agent.sense.blockdev`)."""

    #: `MAJ:MIN` as the kernel prints it
    number: str
    #: its name in /sys/block (`vda`, `nvme0n1`)
    name: str
    #: why it is managed, in words (`backs /var/lib/kubelet`, `configured`)
    why: str
    #: what makes a proportional weight act on it: `bfq` (its scheduler), `iocost` (v2 io.cost.qos enable=1),
    #: or "" (none: weights have no effect there)
    weight_model: str = ""


@dataclass(frozen=True, slots=True)
class NetPod:
    """One pod as network sensing found it. Rates in bits/s (None: no rate yet, e.g. first sample).

    `veth` is the pod's host-side interface; `rx_bps`/`tx_bps` are that veth's own counters (its rx is
    the pod's upload, its tx the pod's download).
    """

    uid: str
    key: str  # namespace/name
    offline: bool
    host_network: bool = False
    veth: str | None = None
    veth_index: int | None = None
    rx_bps: float | None = None
    tx_bps: float | None = None


@dataclass(frozen=True, slots=True)
class NetSnapshot:
    """The node NIC and the pods at `time`, what network QoS decides on (`agent.decide.netqos`). NIC rates in
    bits/s (rx = download, tx = upload)."""

    time: float
    nic: str
    nic_speed_bps: int | None
    nic_rx_bps: float | None
    nic_tx_bps: float | None
    pods: tuple[NetPod, ...] = ()


@dataclass(frozen=True, slots=True)
class CgroupState:
    """Current knob values, read just before deciding, so the plan lists only real changes.

    `files[dir][file]` holds the stripped content of every knob file that exists (absent = the kernel
    or hierarchy has no such file); `pids[uid]` the processes in the pod's subtree and `oom_score_adj`
    their current values; `ancestors` the QoS-level directories (their files are in `files` too).
    """

    version: KnobVersion
    pods: Mapping[PodUID, PodCgroups] = field(default_factory=dict)
    files: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pids: Mapping[PodUID, tuple[int, ...]] = field(default_factory=dict)
    oom_score_adj: Mapping[int, str] = field(default_factory=dict)
    #: kubelet's QoS-level directories whose knobs are read too (memory QoS writes its protection sums there):
    #: `kubepods`, `burstable` (agent.decide.memqos)
    ancestors: Mapping[str, CgroupDirs] = field(default_factory=dict)
    #: the disks I/O QoS limits offline pods on, and what sensing could not resolve (in words)
    devices: tuple[BlockDevice, ...] = ()
    device_notes: tuple[str, ...] = ()

    def value(self, directory: str, name: str) -> str | None:
        return self.files.get(directory, _EMPTY).get(name)

    def has(self, directory: str, name: str) -> bool:
        return name in self.files.get(directory, _EMPTY)


@dataclass(frozen=True, slots=True)
class WatermarkState:
    """Hysteresis carried between samples: consecutive samples over high (per resource) and at/under low."""

    evicting: bool = False
    over_cpu: int = 0
    over_memory: int = 0
    clear: int = 0

    def over(self, resource: Resource) -> int:
        return self.over_cpu if resource == "cpu" else self.over_memory


@dataclass(frozen=True, slots=True)
class AdmissionState:
    """Consecutive cycles whose plain requests exceeded A + X_hold, per resource."""

    overflow_cpu: int = 0
    overflow_memory: int = 0

    def overflow(self, resource: Resource) -> int:
        return self.overflow_cpu if resource == "cpu" else self.overflow_memory


@dataclass(frozen=True, slots=True)
class MemoryPressureState:
    """Memory QoS hysteresis (agent.decide.memqos): offline memory tightened, and calm samples since."""

    tightened: bool = False
    calm: int = 0


@dataclass(frozen=True, slots=True)
class Histogram:
    """A decaying histogram of one quantity (agent.decide.profile does the math): bucket index -> weight.

    A sample at time t weighs 2^((t - reference) / half-life) (Koordinator's pkg/util/histogram, VPA's): only
    relative weights matter, so `reference` moves forward now and then and every weight is rescaled. Buckets
    whose weight falls under the epsilon are dropped, which bounds the size."""

    buckets: Mapping[int, float] = field(default_factory=dict)
    total: float = 0.0
    #: epoch seconds the weights are relative to
    reference: float = 0.0


EMPTY_HISTOGRAM = Histogram()


@dataclass(frozen=True, slots=True)
class PodProfile:
    """One pod's usage profile: CPU (milli-cores) and memory working set (bytes), one sample per fold."""

    cpu: Histogram = EMPTY_HISTOGRAM
    memory: Histogram = EMPTY_HISTOGRAM
    #: epoch seconds of its first and last folded sample
    first: float = 0.0
    last: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """The node's profile of U_non (its usage minus offline pods'), per hour of the day (UTC): 24 slots each."""

    cpu: tuple[Histogram, ...] = ()
    memory: tuple[Histogram, ...] = ()
    first: float = 0.0
    last: float = 0.0
    #: seconds of samples folded in (the profile is read once it holds a day: agent.decide.profile)
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ProfileState:
    """The usage profiles carried between decisions (folded every minute, checkpointed to the state dir)."""

    pods: Mapping[PodUID, PodProfile] = field(default_factory=dict)
    node: NodeProfile = field(default_factory=NodeProfile)
    #: the newest sample time folded in (None: nothing yet)
    folded: float | None = None
    #: the half-lives the weights were made with (a new one rescales them once)
    half_life_cpu: float = 0.0
    half_life_memory: float = 0.0


@dataclass(frozen=True, slots=True)
class OnlineWait:
    """The online pods' CPU wait (`agent.sense.onlinewait`): the worst online pod's (by the signal in force) fraction
    of the time waiting and run delay per run slice, which pod, how read."""

    #: the fraction of the time it waited (None: not read, v2 without PSI)
    ratio: float | None
    pod: str
    #: `cpu.pressure` (v2) or `schedstat` (v1, and the slice delay on v2)
    source: str
    #: its tasks' run delay per run slice, milliseconds (None: not read, or too few slices to tell)
    delay_ms: float | None = None


@dataclass(frozen=True, slots=True)
class WaitBaseline:
    """The online pods' CPU wait while the offline tier is idle (`agent.decide.tier.baseline_for`), and when it was
    last measured (wall seconds), of which signal (`tier.cpu.onlineWaitSignal`: ms per slice or a fraction)."""

    value: float
    at: float
    signal: str = "share"


@dataclass(frozen=True, slots=True)
class NodeMemory:
    """/proc/meminfo and /proc/zoneinfo, in bytes (`agent.sense.meminfo`; the memory guard's input)."""

    free: int
    available: int
    #: the sum of every zone's low watermark x the page size
    low_watermark: int


@dataclass(frozen=True, slots=True)
class TierSense:
    """What the "tier" duty reads for the memory guard and the I/O controller (`agent.sense.meminfo`,
    `agent.sense.iowait`), at wall time `time`."""

    time: float
    memory: NodeMemory | None = None
    #: memory directory -> (bytes charged, page cache, current limit or None) of the tier's groups
    groups: Mapping[str, tuple[int, int, int | None]] = field(default_factory=dict)
    #: the online pods' memory / I/O wait fractions over the last period, and how each was read
    memory_wait: float | None = None
    memory_wait_source: str = ""
    io_wait: float | None = None
    io_wait_source: str = ""
    #: the fastest offline pod's bytes per second on a managed disk
    offline_peak: float | None = None


@dataclass(frozen=True, slots=True)
class EvictionHistory:
    """The evictions the daemon issued (the Eviction API said yes), for the cool-downs (agent.decide.cooldown)."""

    #: wall time of the newest eviction issued on this node; None: none remembered
    last_round: float | None = None
    #: workload ("<namespace>/<kind>/<name>") -> wall time of its newest eviction
    workloads: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AgentState:
    """Everything carried from one decision to the next: `decide` takes it in the snapshot and returns the
    next one in `Plan.next_state`; the daemon only stores it (`plan` starts from the Node)."""

    watermarks: WatermarkState = field(default_factory=WatermarkState)
    admission: AdmissionState = field(default_factory=AdmissionState)
    #: (time, X cpu, X memory) for each publication, pruned to the admission hold window
    x_history: tuple[tuple[float, int, int], ...] = ()
    #: wall time from which the next capacity tick (`capacity.period`) is due; None = due at once
    capacity_due: float | None = None
    #: (time, published batch, published X) as computed on each capacity tick within `capacity.publish.envelope`
    #: (agent.decide.capacity `low_envelope`)
    pub_history: tuple[tuple[float, Amounts, Amounts], ...] = ()
    #: memory QoS: offline memory.high tightened under memory pressure (agent.decide.memqos)
    memory: MemoryPressureState = field(default_factory=MemoryPressureState)
    #: usage profiles (agent.decide.profile), loaded from the state dir at start
    profile: ProfileState = field(default_factory=ProfileState)
    #: the offline tier's last CPU ceiling, milli-cores (agent.decide.tier); None before the first
    tier_cpu: float | None = None
    #: when that ceiling last took a step (wall seconds; it rises at most once per `tier.period`)
    tier_at: float | None = None
    #: the online pods' CPU wait while the tier is idle, which the wait target is on top of (agent.decide.tier)
    tier_wait_base: WaitBaseline | None = None
    #: the I/O controller's limit, bytes per second per offline pod per disk (agent.decide.iopressure; None: none)
    tier_io_bps: int | None = None
    #: wall time from which the offline tier has been starved while evicting (CPUStarvation waits
    #: `eviction.cpu.rebalanceGrace` from it for the scheduler to move pods); None: not starved
    starved_since: float | None = None
    #: the `TierSense.time` the I/O controller last folded (one step per tier reading)
    tier_io_at: float | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The input of `decide`: the node, its pods, the sample window, current knobs and carried state."""

    node: NodeView
    pods: tuple[PodView, ...]
    #: samples in the smoothing window, oldest first
    samples: tuple[Sample, ...]
    #: how many of the newest samples the watermark/admission hysteresis has not seen yet
    new_samples: int = 1
    cgroups: CgroupState | None = None
    state: AgentState = field(default_factory=AgentState)
    notes: tuple[str, ...] = ()
    #: pods not to pick as victims this cycle (the daemon: an eviction a PodDisruptionBudget refused
    #: recently), so the victim order moves on to the next pod
    unevictable: frozenset[PodUID] = frozenset()
    #: the online pods' CPU wait at the newest sample (None: not sensed)
    online_wait: OnlineWait | None = None
    #: the memory guard's and I/O controller's readings of the newest tier period (None: not sensed)
    tier_sense: TierSense | None = None
    #: the evictions issued recently (the daemon's; `plan` has none): the cool-downs' input
    evicted: EvictionHistory = field(default_factory=EvictionHistory)
    #: seconds between samples in force (the daemon's calm period, `agent.decide.calm`; 0: `sampler.period`):
    #: the newest sample is stale after `capacity.publish.stale_periods` of it
    sample_period: float = 0.0
