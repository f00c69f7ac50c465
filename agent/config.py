"""The agent's configuration: typed, frozen, documented next to each field, validated all at once.

Each field carries its documentation (unit, default, why) in `metadata["doc"]`; `FIELDS` is the one
table mapping YAML keys (`capacity.ratio.cpu`) to fields and their parsers. `load_config` never
raises: every malformed value falls back to its documented default and yields a `Problem` naming its
path (`capacity.ratio.cpu: must be in (0, 1]`); unknown keys are warnings. The daemon
(`agent.daemon.reload`) hot-reloads through the same function and keeps the previous config on
errors; `plan` refuses a config with errors (exit 2).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, Literal

from agent.config_ioqos import IoQosConfig, TierIoConfig
from agent.config_memqos import MemoryQosConfig, TierMemoryConfig
from agent.config_overrides import OVERRIDES_KEY, Override, parse_override
from agent.config_profile import DAY, ProfileConfig, duration_between
from agent.config_sampler import SAMPLER_FIELDS, SamplerConfig
from agent.config_tier import TIER_FIELDS, EvictionCpuConfig, TierConfig
from agent.config_values import (  # the parsers of the YAML table, and the Bandwidth value
    Bandwidth,
    Parser,
    _bandwidth,
    _bits_per_second,
    _boolean,
    _choice,
    _count_per_second,
    _cpu_quantity,
    _device_list,
    _duration,
    _fraction,
    _integer,
    _interface_name,
    _memory_quantity,
    _optional_seconds,
    _show,
)
from agent.config_values import Problem as Problem  # re-exported: part of the config API
from agent.config_values import parse_bandwidth as parse_bandwidth
from agent.config_values import parse_duration as parse_duration
from tidemark.apis import Resource

CapacityPolicy = Literal["window", "profile"]


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    period: float = field(default=10.0, metadata=_doc("Seconds between capacity computations (default 10)."))
    policy: CapacityPolicy = field(
        default="profile",
        metadata=_doc(
            "How U_non in B is estimated: `profile` (default: the larger of the window and the node's usage "
            "profile for the hours ahead less the watermark's headroom, `capacity.profile.*`; the profile is read "
            "once it holds a day of samples, so a new node publishes what `window` does meanwhile; the trace "
            "replay's choice, docs/capacity-prediction.md) or `window` (the sampler window's mean or p95 alone, "
            "`sampler.smoothing`)."
        ),
    )
    ratio_cpu: float = field(
        default=0.70,
        metadata=_doc(
            "Fraction of allocatable CPU the node may be driven to (default 0.70 = the default high watermark "
            "80 minus 10 points, so offline pods filling B keep the node below eviction). In (0, 1]."
        ),
    )
    ratio_memory: float = field(
        default=0.50,
        metadata=_doc(
            "Fraction of allocatable memory the node may be driven to (default 0.50 = 60 minus 10). In (0, 1]."
        ),
    )
    reserve_cpu: int = field(
        default=0,
        metadata=_doc("Milli-cores kept out of B (default 0: system usage is already in U_non). A CPU quantity."),
    )
    reserve_memory: int = field(default=0, metadata=_doc("Bytes kept out of B (default 0). A memory quantity."))
    publish_threshold: float = field(
        default=0.10,
        metadata=_doc("Publish when a value moved by more than this fraction of the published one (default 0.10)."),
    )
    publish_floor: float = field(default=0.05, metadata=_doc(
        "A move must also exceed this fraction of the node's allocatable to be published (default 0.05): a small "
        "B moving 100m -> 111m is not a write. A value withdrawn to 0 is always published. In [0, 1]."))  # fmt: skip
    min_interval: float = field(default=60.0, metadata=_doc(
        "Seconds after a publication before an increase is published (default 60, the resync: an increase "
        "rides the next resync, so steady state is one publication a minute); missing values, decreases past "
        "the threshold and floor, and withdrawals to 0 are published at once."))  # fmt: skip
    urgent_decrease: float = field(
        default=0.3,
        metadata=_doc(
            "A decrease by more than this fraction of the published value is published at once; a shallower one "
            "waits `min_interval` like an increase (default 0.3: a spiky node's small B writes twice a minute, not "
            "three times and more; the tier's ceiling and memory guard follow the node every second meanwhile, and "
            "a starving tier's node-usage is published at once whatever this says). 0: every decrease at once."
        ),
    )
    envelope: float = field(default=0.0, metadata=_doc(
        "Seconds of capacity ticks whose lowest computed value a publication that is not urgent (the resync, an "
        "increase, a shallow decrease) writes (default 0: the newest value; 60 quiets a spiky node, which then "
        "publishes its trough, but capacity comes back a minute later after a dip). Urgent moves write the newest "
        "value; a 0 is never taken from the past."))  # fmt: skip
    resync: float = field(
        default=60.0, metadata=_doc("Seconds after which the values are published even if unchanged (default 60).")
    )
    stale_periods: int = field(
        default=3,
        metadata=_doc(
            "Publish 0 when the newest sample is older than this many sampler periods (the calm period while the "
            "node is calm; default 3)."
        ),
    )
    extended_resources: bool = field(
        default=True,
        metadata=_doc("Publish `kubernetes.io/batch-cpu`/`batch-memory` in the Node status (default true)."),
    )
    annotations: bool = field(
        default=True,
        metadata=_doc("Publish `volcano.sh/oversubscription-cpu`/`-memory` annotations (default true)."),
    )

    def ratio(self, resource: Resource) -> float:
        return self.ratio_cpu if resource == "cpu" else self.ratio_memory

    def reserve(self, resource: Resource) -> int:
        return self.reserve_cpu if resource == "cpu" else self.reserve_memory


@dataclass(frozen=True, slots=True)
class EvictionConfig:
    consecutive: int = field(
        default=3,
        metadata=_doc(
            "N: consecutive samples over a high watermark before the node becomes evicting, and at or under "
            "every low watermark before it clears; also consecutive admission-guard cycles (default 3)."
        ),
    )
    period: float = field(default=1.0, metadata=_doc("Seconds between watermark checks (default 1)."))
    grace_period: int | None = field(
        default=None,
        metadata=_doc(
            "Seconds of grace given to evicted pods; null (default) = the pod's own terminationGracePeriodSeconds."
        ),
    )
    max_per_cycle: int = field(
        default=0, metadata=_doc("At most this many evictions per decision (default 0 = as many as needed).")
    )
    terminating_slack: float = field(
        default=10.0,
        metadata=_doc(
            "Seconds beyond its grace period that a terminating pod still counts as released (default 10), so "
            "nothing is evicted twice for the same pressure."
        ),
    )
    taint: bool = field(
        default=False,
        metadata=_doc(
            "Also add a NoSchedule taint `volcano.sh/offline-job-evicting` while evicting (default false: a custom "
            "taint also blocks DaemonSet rollouts and online pods)."
        ),
    )
    admission_hold: float = field(
        default=600.0,
        metadata=_doc("Seconds over which the admission guard takes the largest published X (default 600)."),
    )
    refused_retry: float = field(
        default=10.0,
        metadata=_doc(
            "Seconds a pod whose eviction was refused (HTTP 429: a PodDisruptionBudget) is passed over as a victim "
            "before it is tried again (default 10); the next pod in victim order goes instead."
        ),
    )
    cooldown_node: float = field(
        default=30.0,
        metadata=_doc(
            "Seconds between two eviction rounds on this node (default 30; 0 = off): a round is the victims of one "
            "decision, and the freed usage shows in the samples before more pods go. Evictions that bring memory "
            "back under its high watermark do not wait (an OOM kill is worse than an eviction)."
        ),
    )
    cooldown_workload: float = field(
        default=300.0,
        metadata=_doc(
            "Seconds a workload (the pod's controller owner; a pod without one is its own) waits after losing a "
            "pod before it loses another (default 5m, Koordinator's per-workload limiter; 0 = off). Under memory "
            "pressure the next victim of another workload goes instead."
        ),
    )


@dataclass(frozen=True, slots=True)
class QosConfig:
    enabled: bool = field(
        default=True,
        metadata=_doc(
            "Apply the offline QoS knobs at all (default true). false puts back every value the agent wrote "
            "(where kubelet did not change it since); the node labels still decide publishing and eviction."
        ),
    )
    reconcile: float = field(default=10.0, metadata=_doc("Seconds between QoS reconciles (default 10)."))
    min_offline_quota: int = field(
        default=20,
        metadata=_doc(
            "Milli-cores: the least share of the offline tier's CPU ceiling each of its groups (the BestEffort root, "
            "an offline pod outside it) gets where the ceiling allows it (default 20m), so it still makes progress "
            "and can exit."
        ),
    )
    oom_score_adj: int = field(
        default=1000, metadata=_doc("oom_score_adj for offline pods' processes (default 1000: OOM-killed first).")
    )
    cpu_burst: bool = field(
        default=False,
        metadata=_doc(
            "Give online pods with a CPU limit a CFS burst (`cpu.cfs_burst_us` / `cpu.max.burst`); off by default."
        ),
    )
    cpu_burst_percent: int = field(
        default=100, metadata=_doc("Burst as a percent of the pod's quota, 1..100 (the kernel caps burst at quota).")
    )
    vendor_knobs: bool = field(
        default=True,
        metadata=_doc(
            "Write openEuler's `cpu.qos_level`/`memory.qos_level` (-1 for offline pods) where the files exist."
        ),
    )


@dataclass(frozen=True, slots=True)
class NetworkQosConfig:
    enabled: bool = field(
        default=False,
        metadata=_doc(
            "Shape offline pods' traffic with HTB on their host-side veths (default false). false removes every "
            "qdisc and IFB the agent made."
        ),
    )
    interface: str = field(
        default="",
        metadata=_doc("The node NIC whose traffic is measured (default empty: the interface of the default route)."),
    )
    nic_speed: int = field(
        default=0,
        metadata=_doc(
            "The NIC's speed in bits/s for percent settings (default 0: read from the link, e.g. "
            "/sys/class/net/<nic>/speed); set it where the link reports none (virtual NICs)."
        ),
    )
    offline_limit: Bandwidth = field(
        default=Bandwidth(percent=40.0),
        metadata=_doc(
            "Ceiling of all offline pods together, per direction, while online traffic is calm: bits/s "
            "(`500M`, `1Gbit`) or a percent of the NIC (`40%`, the default, as Volcano's offlineHighBandwidthPercent)."
        ),
    )
    offline_min: Bandwidth = field(
        default=Bandwidth(percent=10.0),
        metadata=_doc(
            "Ceiling of all offline pods together while online traffic is past the high watermark (default 10%, "
            "as Volcano's offlineLowBandwidthPercent). Must not exceed offlineLimit."
        ),
    )
    online_high: Bandwidth = field(
        default=Bandwidth(percent=80.0),
        metadata=_doc(
            "Online traffic (NIC minus offline veths) at or past this for N consecutive samples lowers the ceiling "
            "to offlineMin (default 80%, as Volcano's onlineBandwidthWatermarkPercent)."
        ),
    )
    online_low: Bandwidth = field(
        default=Bandwidth(percent=50.0),
        metadata=_doc(
            "Online traffic at or under this for N consecutive samples restores offlineLimit (default 50%). Must be "
            "below onlineHighWatermark."
        ),
    )
    consecutive: int = field(
        default=3, metadata=_doc("N: consecutive samples past a watermark before the ceiling moves (default 3).")
    )
    period: float = field(default=1.0, metadata=_doc("Seconds between network samples and decisions (default 1)."))


@dataclass(frozen=True, slots=True)
class PressureConfig:
    enabled: bool = field(
        default=True,
        metadata=_doc(
            "The pressure path (default true): besides the sampler, wait in poll() on PSI triggers and, on cgroup "
            "v1, memcg `memory.pressure_level` eventfds; a trigger samples and decides at once."
        ),
    )
    stall: float = field(
        default=0.15,
        metadata=_doc("PSI trigger stall time within `window` (`some <stall_us> <window_us>`; default 150ms)."),
    )
    window: float = field(
        default=1.0,
        metadata=_doc("PSI trigger window, 0.5 to 10 s as the kernel accepts (default 1s); must exceed `stall`."),
    )
    memory_level: str = field(
        default="low",
        metadata=_doc(
            "cgroup v1 `memory.pressure_level` level that wakes the agent: low (any reclaim, the default), medium "
            "or critical."
        ),
    )
    fast_period: float = field(
        default=0.25,
        metadata=_doc(
            "Seconds between samples (each followed by a decision) while pressure lasts (default 250ms), so the "
            "watermark rule's N consecutive samples span N x 250ms instead of N sampler periods."
        ),
    )
    margin: float = field(
        default=10.0,
        metadata=_doc(
            "Samples go fast only while a triggered resource's usage is within this many percent points of "
            "allocatable under its high watermark, or past it (default 10): far under the watermark a trigger "
            "cannot lead to an eviction, and fast samples would only cost CPU. The first sample of a trigger is "
            "taken regardless."
        ),
    )
    hold: float = field(
        default=2.0,
        metadata=_doc(
            "Pressure lasts this long after the last trigger (default 2s: a PSI trigger fires at most once per "
            "window while the stall goes on)."
        ),
    )

    def trigger(self) -> str:
        """The PSI trigger line written to a pressure file."""
        return f"some {round(self.stall * 1e6)} {round(self.window * 1e6)}"


@dataclass(frozen=True, slots=True)
class AgentConfig:
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    eviction: EvictionConfig = field(default_factory=EvictionConfig)
    qos: QosConfig = field(default_factory=QosConfig)
    network_qos: NetworkQosConfig = field(default_factory=NetworkQosConfig)
    pressure: PressureConfig = field(default_factory=PressureConfig)
    memory_qos: MemoryQosConfig = field(default_factory=MemoryQosConfig)
    io_qos: IoQosConfig = field(default_factory=IoQosConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    tier: TierConfig = field(default_factory=TierConfig)
    eviction_cpu: EvictionCpuConfig = field(default_factory=EvictionCpuConfig)
    tier_memory: TierMemoryConfig = field(default_factory=TierMemoryConfig)
    tier_io: TierIoConfig = field(default_factory=TierIoConfig)


DEFAULT_CONFIG: Final = AgentConfig()


@dataclass(frozen=True, slots=True)
class ConfigField:
    """One row of the YAML table: key, the (section, attribute) it sets, and its parser."""

    key: str
    section: str
    attr: str
    parse: Parser


FIELDS: Final[tuple[ConfigField, ...]] = (
    *(ConfigField(*row) for row in SAMPLER_FIELDS),
    ConfigField("capacity.period", "capacity", "period", _duration()),
    ConfigField("capacity.policy", "capacity", "policy", _choice("window", "profile")),
    ConfigField("capacity.ratio.cpu", "capacity", "ratio_cpu", _fraction(0.0, 1.0, True)),
    ConfigField("capacity.ratio.memory", "capacity", "ratio_memory", _fraction(0.0, 1.0, True)),
    ConfigField("capacity.reserve.cpu", "capacity", "reserve_cpu", _cpu_quantity(0)),
    ConfigField("capacity.reserve.memory", "capacity", "reserve_memory", _memory_quantity),
    ConfigField("capacity.publish.threshold", "capacity", "publish_threshold", _fraction(0.0, 1.0, False)),
    ConfigField("capacity.publish.floor", "capacity", "publish_floor", _fraction(0.0, 1.0, False)),
    ConfigField("capacity.publish.min_interval", "capacity", "min_interval", _duration(0.0, False)),
    ConfigField("capacity.publish.urgent_decrease", "capacity", "urgent_decrease", _fraction(0.0, 1.0, False)),
    ConfigField("capacity.publish.envelope", "capacity", "envelope", _duration(0.0, False)),
    ConfigField("capacity.publish.resync", "capacity", "resync", _duration()),
    ConfigField("capacity.publish.stale_periods", "capacity", "stale_periods", _integer(1)),
    ConfigField("capacity.publish.extended_resources", "capacity", "extended_resources", _boolean),
    ConfigField("capacity.publish.annotations", "capacity", "annotations", _boolean),
    ConfigField("capacity.profile.percentile.cpu", "profile", "percentile_cpu", _fraction(0.0, 1.0, True)),
    ConfigField("capacity.profile.percentile.memory", "profile", "percentile_memory", _fraction(0.0, 1.0, True)),
    ConfigField("capacity.profile.margin", "profile", "margin", _fraction(1.0, 3.0, False)),
    ConfigField("capacity.profile.half_life.cpu", "profile", "half_life_cpu", duration_between(60.0, 30 * DAY)),
    ConfigField("capacity.profile.half_life.memory", "profile", "half_life_memory", duration_between(60.0, 30 * DAY)),
    ConfigField("capacity.profile.horizon", "profile", "horizon", duration_between(0.0, DAY)),
    ConfigField("capacity.profile.cold_start", "profile", "cold_start", duration_between(0.0, 7 * DAY)),
    ConfigField("capacity.profile.checkpoint", "profile", "checkpoint", duration_between(10.0, DAY)),
    ConfigField("eviction.consecutive", "eviction", "consecutive", _integer(1, 1000)),
    ConfigField("eviction.period", "eviction", "period", _duration()),
    ConfigField("eviction.grace_period", "eviction", "grace_period", _optional_seconds),
    ConfigField("eviction.max_per_cycle", "eviction", "max_per_cycle", _integer(0)),
    ConfigField("eviction.terminating_slack", "eviction", "terminating_slack", _duration(0.0, exclusive=False)),
    ConfigField("eviction.taint", "eviction", "taint", _boolean),
    ConfigField("eviction.admission_hold", "eviction", "admission_hold", _duration(0.0, exclusive=False)),
    ConfigField("eviction.refused_retry", "eviction", "refused_retry", _duration(0.0, exclusive=False)),
    ConfigField("eviction.cooldown.node", "eviction", "cooldown_node", _duration(0.0, exclusive=False)),
    ConfigField("eviction.cooldown.workload", "eviction", "cooldown_workload", _duration(0.0, exclusive=False)),
    ConfigField("qos.enabled", "qos", "enabled", _boolean),
    ConfigField("qos.reconcile", "qos", "reconcile", _duration()),
    ConfigField("qos.min_offline_quota", "qos", "min_offline_quota", _cpu_quantity(1)),
    ConfigField("qos.oom_score_adj", "qos", "oom_score_adj", _integer(-1000, 1000)),
    ConfigField("qos.cpu_burst.enabled", "qos", "cpu_burst", _boolean),
    ConfigField("qos.cpu_burst.percent", "qos", "cpu_burst_percent", _integer(1, 100)),
    ConfigField("qos.vendor_knobs", "qos", "vendor_knobs", _boolean),
    ConfigField("networkQoS.enabled", "network_qos", "enabled", _boolean),
    ConfigField("networkQoS.interface", "network_qos", "interface", _interface_name),
    ConfigField("networkQoS.nicSpeed", "network_qos", "nic_speed", _bits_per_second),
    ConfigField("networkQoS.offlineLimit", "network_qos", "offline_limit", _bandwidth),
    ConfigField("networkQoS.offlineMin", "network_qos", "offline_min", _bandwidth),
    ConfigField("networkQoS.onlineHighWatermark", "network_qos", "online_high", _bandwidth),
    ConfigField("networkQoS.onlineLowWatermark", "network_qos", "online_low", _bandwidth),
    ConfigField("networkQoS.consecutive", "network_qos", "consecutive", _integer(1, 1000)),
    ConfigField("networkQoS.period", "network_qos", "period", _duration()),
    ConfigField("pressure.enabled", "pressure", "enabled", _boolean),
    ConfigField("pressure.stall", "pressure", "stall", _duration(0.001, exclusive=False)),
    ConfigField("pressure.window", "pressure", "window", _duration(0.5, exclusive=False)),
    ConfigField("pressure.memory_level", "pressure", "memory_level", _choice("low", "medium", "critical")),
    ConfigField("pressure.fast_period", "pressure", "fast_period", _duration(0.01, exclusive=False)),
    ConfigField("pressure.margin", "pressure", "margin", _fraction(0.0, 100.0, False)),
    ConfigField("pressure.hold", "pressure", "hold", _duration()),
    ConfigField("memoryQoS.enabled", "memory_qos", "enabled", _boolean),
    ConfigField("memoryQoS.minRatio", "memory_qos", "min_ratio", _fraction(0.0, 1.0, False)),
    ConfigField("memoryQoS.lowRatio", "memory_qos", "low_ratio", _fraction(0.0, 1.0, False)),
    ConfigField("memoryQoS.minReserve", "memory_qos", "min_reserve", _memory_quantity),
    ConfigField("memoryQoS.highRatio", "memory_qos", "high_ratio", _fraction(0.0, 1.0, True)),
    ConfigField("memoryQoS.pressureHighRatio", "memory_qos", "pressure_high_ratio", _fraction(0.0, 1.0, True)),
    ConfigField("memoryQoS.pressureMargin", "memory_qos", "pressure_margin", _fraction(0.0, 100.0, False)),
    ConfigField("memoryQoS.pressurePSI", "memory_qos", "pressure_psi", _fraction(0.0, 100.0, False)),
    ConfigField("memoryQoS.releaseMargin", "memory_qos", "release_margin", _fraction(0.0, 100.0, False)),
    ConfigField("memoryQoS.releaseSamples", "memory_qos", "release_samples", _integer(1, 1000)),
    ConfigField("io_qos.enabled", "io_qos", "enabled", _boolean),
    ConfigField("io_qos.devices", "io_qos", "devices", _device_list),
    ConfigField("io_qos.offline_read_bps", "io_qos", "offline_read_bps", _count_per_second("bytes", "100Mi")),
    ConfigField("io_qos.offline_write_bps", "io_qos", "offline_write_bps", _count_per_second("bytes", "50Mi")),
    ConfigField("io_qos.offline_read_iops", "io_qos", "offline_read_iops", _count_per_second("I/Os", "2000")),
    ConfigField("io_qos.offline_write_iops", "io_qos", "offline_write_iops", _count_per_second("I/Os", "1k")),
    ConfigField("io_qos.offline_weight", "io_qos", "offline_weight", _integer(1, 10000)),
    *(ConfigField(*row) for row in TIER_FIELDS),
    ConfigField("tier.memory.enabled", "tier_memory", "enabled", _boolean),
    ConfigField("tier.memory.margin", "tier_memory", "margin", _memory_quantity),
    ConfigField("tier.memory.reclaimWait", "tier_memory", "reclaim_wait", _fraction(0.0, 1.0, False)),
    ConfigField("tier.memory.reclaimStep", "tier_memory", "reclaim_step", _memory_quantity),
    ConfigField("tier.io.enabled", "tier_io", "enabled", _boolean),
    ConfigField("tier.io.onlineWaitTarget", "tier_io", "online_wait_target", _fraction(0.0, 1.0, True)),
    ConfigField("tier.io.minBps", "tier_io", "min_bps", _count_per_second("bytes", "4Mi")),
    ConfigField("tier.io.maxBps", "tier_io", "max_bps", _count_per_second("bytes", "200Mi")),
    ConfigField("tier.io.raiseStep", "tier_io", "raise_step", _count_per_second("bytes", "8Mi")),
    ConfigField("tier.io.decrease", "tier_io", "decrease", _fraction(0.0, 1.0, True)),
)
_BY_KEY: Final = {f.key: f for f in FIELDS}
_PREFIXES: Final = frozenset(".".join(f.key.split(".")[:i]) for f in FIELDS for i in range(1, f.key.count(".") + 1))


def field_doc(cf: ConfigField) -> str:
    """The documentation of a table row's field."""
    section = getattr(DEFAULT_CONFIG, cf.section)
    for f in fields(section):
        if f.name == cf.attr:
            return str(f.metadata.get("doc", ""))
    return ""


def default_value(cf: ConfigField) -> object:
    return getattr(getattr(DEFAULT_CONFIG, cf.section), cf.attr)


def _walk(data: Mapping[Any, Any], prefix: str, problems: list[Problem], at: str = "") -> Iterator[tuple[str, object]]:
    """(key, raw value) of every known leaf; `at` prefixes problem paths (`overrides[0].config.`)."""
    for raw_key, value in data.items():
        key = f"{prefix}.{raw_key}" if prefix else str(raw_key)
        if key in _BY_KEY:
            yield key, value
        elif key in _PREFIXES:
            if isinstance(value, Mapping):
                yield from _walk(value, key, problems, at)
            elif value is not None:
                problems.append(Problem(at + key, f"must be a mapping, got {value!r}; using the defaults"))
        elif not prefix and key == OVERRIDES_KEY:
            continue  # handled by parse_document
        else:
            problems.append(Problem(at + key, "unknown key; ignored", "warning"))


def _values(data: Mapping[Any, Any], problems: list[Problem], at: str = "") -> dict[str, Any]:
    """The valid leaves of one configuration mapping, parsed: YAML key -> value (bad leaves are left out)."""
    values: dict[str, Any] = {}
    for key, raw in _walk(data, "", problems, at):
        cf = _BY_KEY[key]
        value, error = cf.parse(raw)
        if error is not None:
            problems.append(Problem(at + key, f"{error}; using the default {default_value(cf)!r}"))
            continue
        values[key] = value
    return values


def _build(values: Mapping[str, Any], problems: list[Problem]) -> AgentConfig:
    sections: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        cf = _BY_KEY[key]
        sections.setdefault(cf.section, {})[cf.attr] = value
    config = replace(
        DEFAULT_CONFIG, **{name: replace(getattr(DEFAULT_CONFIG, name), **attrs) for name, attrs in sections.items()}
    )
    if config.sampler.window < config.sampler.period:
        problems.append(
            Problem("sampler.window", f"must be >= sampler.period ({config.sampler.period:g} s); using the period")
        )
        config = replace(config, sampler=replace(config.sampler, window=config.sampler.period))
    if config.eviction_cpu.window > config.sampler.window:
        # the decision sees only the sampler's window of samples: a longer one would never be covered (never starved);
        # the default follows a shorter sampler window without a word, a configured value is named
        if config.eviction_cpu.window != DEFAULT_CONFIG.eviction_cpu.window:
            problems.append(
                Problem(
                    "eviction.cpu.window",
                    f"must be <= sampler.window ({config.sampler.window:g} s); using sampler.window",
                )
            )
        config = replace(config, eviction_cpu=replace(config.eviction_cpu, window=config.sampler.window))
    return _check_pressure(_check_network_qos(config, problems), problems)


def _check_pressure(config: AgentConfig, problems: list[Problem]) -> AgentConfig:
    """The PSI trigger the kernel accepts: window 0.5..10 s, stall below the window; else the defaults."""
    p = config.pressure
    if p.window > 10.0 or p.stall >= p.window:
        problems.append(
            Problem(
                "pressure",
                f"stall {p.stall:g} s / window {p.window:g} s: the window must be 0.5..10 s and the stall below it; "
                f"using the defaults {DEFAULT_CONFIG.pressure.stall:g} s / {DEFAULT_CONFIG.pressure.window:g} s",
            )
        )
        config = replace(
            config,
            pressure=replace(p, stall=DEFAULT_CONFIG.pressure.stall, window=DEFAULT_CONFIG.pressure.window),
        )
    return config


def _same_unit_order(a: Bandwidth, b: Bandwidth) -> bool | None:
    """a <= b when both are in the same unit; None when one is a percent and the other bits/s."""
    if a.bits is not None and b.bits is not None:
        return a.bits <= b.bits
    if a.percent is not None and b.percent is not None:
        return a.percent <= b.percent
    return None


def _check_network_qos(config: AgentConfig, problems: list[Problem]) -> AgentConfig:
    """offlineMin <= offlineLimit and low < high where comparable now (mixed units are checked per decision)."""
    net = config.network_qos
    default = NetworkQosConfig()
    if _same_unit_order(net.offline_min, net.offline_limit) is False:
        problems.append(
            Problem(
                "networkQoS.offlineMin",
                f"must not exceed networkQoS.offlineLimit ({net.offline_limit}); using the limit",
            )
        )
        net = replace(net, offline_min=net.offline_limit)
    if _same_unit_order(net.online_high, net.online_low) is True:
        problems.append(
            Problem(
                "networkQoS.onlineLowWatermark",
                f"must be below networkQoS.onlineHighWatermark ({net.online_high}); using the defaults "
                f"{default.online_high}/{default.online_low} for both",
            )
        )
        net = replace(net, online_high=default.online_high, online_low=default.online_low)
    return replace(config, network_qos=net) if net is not config.network_qos else config


# --- per-node overrides ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConfigDocument:
    """A parsed configuration file: the base values and the per-node overrides, in file order."""

    base: Mapping[str, Any] = field(default_factory=dict)
    overrides: tuple[Override, ...] = ()

    def resolve(
        self, labels: Mapping[str, str] | None = None
    ) -> tuple[AgentConfig, tuple[Problem, ...], tuple[str, ...]]:
        """The configuration of a node with `labels`: base values, then every matching override in order.

        Returns (config, problems of the combination, names of the overrides applied). Without labels
        (None) no override applies.
        """
        values = dict(self.base)
        applied: list[str] = []
        if labels is not None:
            for o in self.overrides:
                if o.selector.matches(labels):
                    values.update(o.values)
                    applied.append(o.name)
        problems: list[Problem] = []
        config = _build(values, problems)
        return config, tuple(problems), tuple(applied)


def parse_document(data: object) -> tuple[ConfigDocument, tuple[Problem, ...]]:
    """A configuration document: base values and overrides, every problem with its path. Never raises."""
    problems: list[Problem] = []
    if data is None:
        return ConfigDocument(), ()
    if not isinstance(data, Mapping):
        return ConfigDocument(), (Problem("", f"the configuration must be a mapping, got {type(data).__name__}"),)
    base = _values(data, problems)
    overrides: list[Override] = []
    raw_overrides = data.get(OVERRIDES_KEY)
    if raw_overrides is not None:
        if not isinstance(raw_overrides, list):
            problems.append(Problem(OVERRIDES_KEY, f"must be a list, got {_show(raw_overrides)}; ignored"))
        else:
            for i, raw in enumerate(raw_overrides):
                o = parse_override(i, raw, problems, _values)
                if o is not None:
                    overrides.append(o)
    return ConfigDocument(base, tuple(overrides)), tuple(problems)


def load_config(data: object, labels: Mapping[str, str] | None = None) -> tuple[AgentConfig, tuple[Problem, ...]]:
    """Config from parsed YAML; bad values keep their documented default and add a Problem. Never raises.

    With `labels` (a node's), the matching `overrides` apply on top of the base values.
    """
    doc, problems = parse_document(data)
    config, more, _applied = doc.resolve(labels)
    return config, problems + more


def parse_text(text: str) -> tuple[object, tuple[Problem, ...]]:
    """YAML text -> data; a syntax error, a key given twice or aliases beyond the budget is one Problem (and None)."""
    from tidemark.yamlsafe import YamlError, load

    try:
        return load(text), ()
    except YamlError as e:
        return None, (Problem("", f"not valid YAML{e.where}: {e.message}"),)


def read_text(path: str) -> tuple[str | None, tuple[Problem, ...]]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), ()
    except OSError as e:
        return None, (Problem("", f"cannot read {path}: {e.strerror or e}"),)
    except UnicodeDecodeError:
        return None, (Problem("", f"{path} is not UTF-8 text"),)


def load_config_text(text: str, labels: Mapping[str, str] | None = None) -> tuple[AgentConfig, tuple[Problem, ...]]:
    """Config from YAML text; a YAML syntax error is one Problem (and the defaults)."""
    data, problems = parse_text(text)
    if problems:
        return DEFAULT_CONFIG, problems
    return load_config(data, labels)


def load_config_file(path: str, labels: Mapping[str, str] | None = None) -> tuple[AgentConfig, tuple[Problem, ...]]:
    text, problems = read_text(path)
    if text is None:
        return DEFAULT_CONFIG, problems
    return load_config_text(text, labels)


def errors(problems: tuple[Problem, ...]) -> tuple[Problem, ...]:
    return tuple(p for p in problems if p.severity == "error")
