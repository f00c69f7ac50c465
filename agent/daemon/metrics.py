"""Prometheus metrics of the agent: one collector over the latest status, into an injected registry.

House style 10: the loops never touch metric objects; they publish a frozen `Status` (the last plan's
figures) and bump plain counters in `Stats`; `AgentCollector.collect()` turns both into metric families
at scrape time. Names follow the Prometheus guide: `tidemark_agent_` prefix, base units (bytes,
seconds; CPU as cores = CPU-seconds per second; fractions as ratios 0..1), `_total` counters, no pod
UID labels (labels are bounded sets: resource, class, reason, result, loop, action, file).
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.decide.ops import IoStatus, Plan
from agent.decide.pressure import worst_online
from agent.model import NodeView, PodView, Sample
from tidemark.apis import RESOURCES
from tidemark.buildinfo import register_build_info

PREFIX: Final = "tidemark_agent_"
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
DURATION_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    """A thread-safe histogram of observations (cumulative buckets rendered at scrape time)."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self._counts = [0] * (len(self.buckets) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[tuple[str, float]], float]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        out: list[tuple[str, float]] = []
        running = 0
        for bound, c in zip(self.buckets, counts):
            running += c
            out.append((repr(float(bound)), float(running)))
        running += counts[-1]
        out.append(("+Inf", float(running)))
        return out, total

    @property
    def count(self) -> int:
        with self._lock:
            return sum(self._counts)


@dataclass
class Stats:
    """Counters and histograms the loops bump (plain ints under a lock; read at scrape time)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    evictions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (reason, result)
    #: victims a cool-down held back, once per decision (agent.decide.cooldown): node_cooldown | workload_cooldown
    evictions_held: Counter[str] = field(default_factory=Counter)
    #: calm sampling ended (agent.decide.calm), by the condition that failed
    calm_ends: Counter[str] = field(default_factory=Counter)
    cgroup_writes: Counter[str] = field(default_factory=Counter)  # file
    cgroup_failures: Counter[str] = field(default_factory=Counter)  # file
    cgroup_restores: Counter[str] = field(default_factory=Counter)  # file
    process_writes: Counter[str] = field(default_factory=Counter)  # result: ok | failed | restored
    api_writes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, result)
    config_reloads: Counter[str] = field(default_factory=Counter)  # result
    samples: int = 0
    sample_failures: int = 0
    decisions: int = 0
    decision_failures: int = 0  # cycles that raised (the next cycle retries)
    qos_resenses: int = 0  # pods read again because a pod event found them waiting for their cgroups
    loop_durations: dict[str, Histogram] = field(default_factory=dict)
    reaction: dict[str, Histogram] = field(default_factory=dict)
    pressure_triggers: Counter[tuple[str, str]] = field(default_factory=Counter)  # (resource, source kind)
    #: CFS throttling summed over the pods of each class from the deltas of their cpu.stat (a pod that goes
    #: away keeps what it added): class -> [periods, throttled periods, throttled seconds]
    throttling: dict[str, list[float]] = field(default_factory=dict)
    #: block I/O of the offline pods on the managed disks, from the deltas of their io.stat /
    #: blkio.throttle.io_service_bytes_recursive between QoS reconciles: (disk name, read|write) -> bytes
    io_bytes: Counter[tuple[str, str]] = field(default_factory=Counter)

    def throttled(self, cls: str, periods: int, throttled: int, seconds: float) -> None:
        with self.lock:
            t = self.throttling.setdefault(cls, [0.0, 0.0, 0.0])
            t[0] += periods
            t[1] += throttled
            t[2] += seconds

    def count(self, counter: Counter[str], key: str, n: int = 1) -> None:
        with self.lock:
            counter[key] += n

    def count2(self, counter: Counter[tuple[str, str]], key: tuple[str, str], n: int = 1) -> None:
        with self.lock:
            counter[key] += n

    def loop(self, name: str, seconds: float) -> None:
        h = self.loop_durations.get(name)
        if h is None:
            h = self.loop_durations.setdefault(name, Histogram(DURATION_BUCKETS))
        h.observe(seconds)

    def react(self, action: str, seconds: float) -> None:
        h = self.reaction.get(action)
        if h is None:
            h = self.reaction.setdefault(action, Histogram(LATENCY_BUCKETS))
        h.observe(max(0.0, seconds))


@dataclass(frozen=True, slots=True)
class Status:
    """The figures of the last decision (what the gauges show)."""

    node: str = ""
    allocatable_cpu: float = 0.0
    allocatable_memory: float = 0.0
    #: class -> (cpu milli, memory bytes); classes: kubepods, online, offline, node, non_offline
    usage: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    usage_ratio: tuple[float, float] = (0.0, 0.0)
    watermarks: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    budget: tuple[float, float] = (0.0, 0.0)
    batch_published: tuple[float, float] = (0.0, 0.0)
    oversubscription_published: tuple[float, float] = (0.0, 0.0)
    oversubscription_computed: tuple[float, float] = (0.0, 0.0)
    evicting: bool = False
    pods: Mapping[str, int] = field(default_factory=dict)
    journal_entries: int = 0
    qos_paused: bool = False
    #: (scope, resource) -> PSI `some avg10` as a ratio; scopes: node, kubepods, online_pods_max
    pressure: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: I/O QoS as the last decision left it (agent.decide.ioqos)
    io: IoStatus = field(default_factory=IoStatus)
    #: the memory guard's limit (bytes), the online I/O wait and the I/O controller's per-pod limit (None: unknown /
    #: no limit): agent.decide.memguard, agent.decide.iopressure
    tier_memory_limit: int | None = None
    online_io_wait: float | None = None
    offline_io_bps: int | None = None
    #: the offline tier's CPU ceiling (milli) and the worst online pod's CPU wait (agent.decide.tier; None: none)
    tier_cpu_ceiling: float | None = None
    online_cpu_wait: float | None = None
    online_cpu_wait_base: float | None = None
    #: the pod whose wait `online_cpu_wait` is, and the source it was read from
    online_cpu_wait_pod: tuple[str, str] | None = None
    #: its run delay per run slice (ms), and the signal the baseline is of (`slice`: ms; `share`: a fraction)
    online_cpu_delay_ms: float | None = None
    online_cpu_wait_base_signal: str | None = None
    #: seconds between samples in force (agent.decide.calm: `sampler.calmPeriod` while the node is calm)
    sample_period: float = 0.0


def pressure_figures(last: Sample | None) -> dict[tuple[str, str], float]:
    """The PSI gauges of the newest sample (ratios 0..1)."""
    if last is None:
        return {}
    out: dict[tuple[str, str], float] = {}
    for scope, values in (
        ("node", last.node_pressure),
        ("kubepods", last.pressure),
        ("online_pods_max", worst_online(last)),
    ):
        for r, v in values.items():
            out[(scope, r)] = v / 100.0
    return out


def status_of(
    node_name: str,
    node: NodeView,
    plan: Plan,
    pods: Sequence[PodView],
    journal_entries: int,
    qos_paused: bool,
    last: Sample | None = None,
) -> Status:
    """The gauges' figures after a decision (`last`: the newest sample, for the PSI gauges)."""
    u = plan.usage
    offline = sum(1 for p in pods if p.offline)
    return Status(
        node=node_name,
        allocatable_cpu=node.allocatable.cpu,
        allocatable_memory=node.allocatable.memory,
        usage={
            "kubepods": (u.kubepods.cpu, u.kubepods.memory),
            "online": (u.online.cpu, u.online.memory),
            "offline": (u.offline.cpu, u.offline.memory),
            "node": (u.node.cpu, u.node.memory),
            "non_offline": (u.non_offline.cpu, u.non_offline.memory),
        },
        usage_ratio=(u.percent.cpu / 100.0, u.percent.memory / 100.0),
        watermarks={r: (node.watermarks.high(r), node.watermarks.low(r)) for r in RESOURCES},
        budget=(plan.capacity.B.cpu, plan.capacity.B.memory),
        batch_published=(plan.capacity.published_batch.cpu, plan.capacity.published_batch.memory),
        oversubscription_published=(plan.capacity.published_x.cpu, plan.capacity.published_x.memory),
        oversubscription_computed=(plan.capacity.X.cpu, plan.capacity.X.memory),
        evicting=plan.evicting,
        pods={"online": len(pods) - offline, "offline": offline},
        journal_entries=journal_entries,
        qos_paused=qos_paused,
        pressure=pressure_figures(last),
        io=plan.io,
        tier_memory_limit=plan.tier_memory_limit,
        online_io_wait=plan.online_io_wait,
        offline_io_bps=plan.offline_io_bps,
        tier_cpu_ceiling=plan.tier.ceiling if plan.tier is not None else None,
        online_cpu_wait=plan.tier.online_wait if plan.tier is not None else None,
        online_cpu_wait_base=plan.tier.online_wait_base if plan.tier is not None else None,
        online_cpu_wait_pod=(plan.tier.online_wait_pod, plan.tier.online_wait_source or "")
        if plan.tier is not None and plan.tier.online_wait_pod else None,
        online_cpu_delay_ms=plan.tier.online_delay_ms if plan.tier is not None else None,
        online_cpu_wait_base_signal=plan.tier.online_wait_base_signal if plan.tier is not None else None,
    )


class AgentCollector(Collector):
    """Renders `Status` and `Stats` of a live agent (any object with `cycle.status`, `stats`, `info()`)."""

    def __init__(self, agent: AgentLike) -> None:
        self.agent = agent

    def describe(self) -> list[Metric]:
        return []  # collected lazily: the registry must not call collect() at registration

    def collect(self) -> Iterator[Metric]:
        st: Status = self.agent.cycle.status
        stats: Stats = self.agent.stats
        yield from _usage_families(st)
        yield from _state_families(st)
        yield from _io_gauges(st.io)
        yield from _tier_memory_io_gauges(st)
        yield from _tier_cpu_gauges(st)
        counts = _Counts.of(stats)
        yield from _action_counters(counts)
        yield from _loop_counters(counts)
        yield from _info_families(self.agent.info())
        yield from _histograms(stats)


@dataclass(frozen=True, slots=True)
class _Counts:
    """The counters of `Stats`, copied under its lock once per scrape so every family shows the same moment."""

    evictions: Mapping[tuple[str, str], int]
    held: Mapping[str, int]
    calm_ends: Mapping[str, int]
    writes: Mapping[str, int]
    failures: Mapping[str, int]
    restores: Mapping[str, int]
    procs: Mapping[str, int]
    api: Mapping[tuple[str, str], int]
    reloads: Mapping[str, int]
    samples: int
    sample_failures: int
    decisions: int
    decision_failures: int
    resenses: int
    triggers: Mapping[tuple[str, str], int]
    throttling: Mapping[str, tuple[float, ...]]
    io_bytes: Mapping[tuple[str, str], int]

    @classmethod
    def of(cls, stats: Stats) -> _Counts:
        """Copy the counters (the loops keep bumping them while the scrape renders)."""
        with stats.lock:
            return cls(
                evictions=dict(stats.evictions),
                held=dict(stats.evictions_held),
                calm_ends=dict(stats.calm_ends),
                writes=dict(stats.cgroup_writes),
                failures=dict(stats.cgroup_failures),
                restores=dict(stats.cgroup_restores),
                procs=dict(stats.process_writes),
                api=dict(stats.api_writes),
                reloads=dict(stats.config_reloads),
                samples=stats.samples,
                sample_failures=stats.sample_failures,
                decisions=stats.decisions,
                decision_failures=stats.decision_failures,
                resenses=stats.qos_resenses,
                triggers=dict(stats.pressure_triggers),
                throttling={k: tuple(v) for k, v in stats.throttling.items()},
                io_bytes=dict(stats.io_bytes),
            )


def _usage_families(st: Status) -> Iterator[Metric]:
    """Usage, allocatable, B and X: the figures the capacity model and the watermarks compare."""
    cpu = GaugeMetricFamily(PREFIX + "usage_cpu_cores", "Smoothed CPU usage (cores) by class", labels=["class"])
    mem = GaugeMetricFamily(PREFIX + "usage_memory_bytes", "Smoothed memory working set by class", labels=["class"])
    for cls, (c, m) in sorted(st.usage.items()):
        cpu.add_metric([cls], c / 1000.0)
        mem.add_metric([cls], m)
    yield cpu
    yield mem
    ratio = GaugeMetricFamily(
        PREFIX + "usage_ratio", "Pods' (kubepods) usage as a fraction of allocatable", labels=["resource"]
    )
    ratio.add_metric(["cpu"], st.usage_ratio[0])
    ratio.add_metric(["memory"], st.usage_ratio[1])
    yield ratio
    for name, doc, pair in (
        ("node_allocatable", "Node allocatable", (st.allocatable_cpu, st.allocatable_memory)),
        ("offline_budget", "B: the offline budget, as computed", st.budget),
        ("batch_published", "kubernetes.io/batch-* published in the Node status", st.batch_published),
        ("oversubscription_published", "X: volcano.sh/oversubscription-* published", st.oversubscription_published),
        (
            "oversubscription_computed",
            "X as computed (0 is published while evicting)",
            st.oversubscription_computed,
        ),
    ):
        yield GaugeMetricFamily(f"{PREFIX}{name}_cpu_cores", f"{doc} (CPU, cores)", value=pair[0] / 1000.0)
        yield GaugeMetricFamily(f"{PREFIX}{name}_memory_bytes", f"{doc} (memory, bytes)", value=pair[1])


def _state_families(st: Status) -> Iterator[Metric]:
    """Watermarks, the evicting flag, pods, the journal and PSI: the node's state after the last decision."""
    wm = GaugeMetricFamily(
        PREFIX + "watermark_ratio", "Eviction watermarks as fractions of allocatable", labels=["resource", "level"]
    )
    for r, (high, low) in sorted(st.watermarks.items()):
        wm.add_metric([r, "high"], high / 100.0)
        wm.add_metric([r, "low"], low / 100.0)
    yield wm
    yield GaugeMetricFamily(PREFIX + "evicting", "1 while the node is evicting offline pods", value=float(st.evicting))
    pods = GaugeMetricFamily(PREFIX + "pods", "Pods on the node by class", labels=["class"])
    for cls, n in sorted(st.pods.items()):
        pods.add_metric([cls], n)
    yield pods
    yield GaugeMetricFamily(
        PREFIX + "journal_entries",
        "Knob and process values the agent changed and can restore",
        value=st.journal_entries,
    )
    yield GaugeMetricFamily(
        PREFIX + "sample_period_seconds",
        "Seconds between usage samples in force: sampler.period, or sampler.calmPeriod while the node is calm",
        value=st.sample_period,
    )
    yield GaugeMetricFamily(
        PREFIX + "qos_paused", "1 after a restore request: knobs are no longer applied", value=float(st.qos_paused)
    )
    psi = GaugeMetricFamily(
        PREFIX + "pressure_some_ratio",
        "PSI some avg10 (share of the last 10 s some task stalled) of the node, the kubepods group and the "
        "most pressured online pod",
        labels=["scope", "resource"],
    )
    for (scope, r), v in sorted(st.pressure.items()):
        psi.add_metric([scope, r], v)
    yield psi


def _action_counters(c: _Counts) -> Iterator[Metric]:
    """What the agent did: evictions, knob and process writes, API writes, reloads, pressure triggers."""
    ev = CounterMetricFamily(PREFIX + "evictions", "Eviction calls by reason and result", labels=["reason", "result"])
    for (reason, result), n in sorted(c.evictions.items()):
        ev.add_metric([reason, result], n)
    yield ev
    for name, doc, label, data in (
        ("evictions_held", "Victims an eviction cool-down held back, once per decision, by cool-down "
         "(node_cooldown, workload_cooldown)", "reason", c.held),
        ("calm_ends", "Calm sampling ended (sampler.calmPeriod back to sampler.period), by the condition that "
         "failed", "cause", c.calm_ends),
        ("cgroup_writes", "cgroup knob writes that landed, by file", "file", c.writes),
        ("cgroup_write_failures", "cgroup knob writes that failed (EINVAL, EBUSY, ...), by file", "file", c.failures),
        ("cgroup_restores", "original knob values put back, by file", "file", c.restores),
    ):  # fmt: skip
        family = CounterMetricFamily(PREFIX + name, doc, labels=[label])
        for key, n in sorted(data.items()):
            family.add_metric([key], n)
        yield family
    pw = CounterMetricFamily(PREFIX + "process_writes", "oom_score_adj writes by result", labels=["result"])
    for key, n in sorted(c.procs.items()):
        pw.add_metric([key], n)
    yield pw
    aw = CounterMetricFamily(PREFIX + "api_writes", "Node writes by kind and result", labels=["kind", "result"])
    for (kind, result), n in sorted(c.api.items()):
        aw.add_metric([kind, result], n)
    yield aw
    cr = CounterMetricFamily(PREFIX + "config_reloads", "Configuration (re)loads by result", labels=["result"])
    for key, n in sorted(c.reloads.items()):
        cr.add_metric([key], n)
    yield cr
    trig = CounterMetricFamily(
        PREFIX + "pressure_triggers",
        "Pressure notifications that woke the agent (PSI triggers, v1 memory.pressure_level events)",
        labels=["resource", "source"],
    )
    for (r, kind), n in sorted(c.triggers.items()):
        trig.add_metric([r, kind], n)
    yield trig
    io = CounterMetricFamily(
        PREFIX + "io_offline_bytes",
        "Bytes offline pods read and wrote on the disks I/O QoS manages, by disk and direction",
        labels=["device", "direction"],
    )
    for (device, direction), n in sorted(c.io_bytes.items()):
        io.add_metric([device, direction], n)
    yield io


def _io_gauges(io: IoStatus) -> Iterator[Metric]:
    """I/O QoS as the last decision left it: on or off, the disks it limits, the offline pods it holds."""
    yield GaugeMetricFamily(PREFIX + "io_qos_enabled", "1 while io_qos.enabled is in force", value=float(io.enabled))
    yield GaugeMetricFamily(
        PREFIX + "io_limited_pods",
        "Offline pods whose block I/O the plan limits (their pod cgroup has the limit files)",
        value=io.limited_pods,
    )
    devices = GaugeMetricFamily(
        PREFIX + "io_devices",
        "Disks I/O QoS limits offline pods on (1 each); weight = bfq, iocost or none (the weight has no effect)",
        labels=["device", "number", "weight"],
    )
    for number, name, model in io.devices:
        devices.add_metric([name, number, model or "none"], 1.0)
    yield devices


def _tier_memory_io_gauges(st: Status) -> Iterator[Metric]:
    """The memory guard's limit and the I/O controller (agent.decide.memguard, agent.decide.iopressure)."""
    if st.tier_memory_limit is not None:
        yield GaugeMetricFamily(
            PREFIX + "tier_memory_limit_bytes",
            "The memory guard's limit on the offline tier (the BestEffort root): offline used + free memory above "
            "the kernel's low watermark + tier.memory.margin",
            value=float(st.tier_memory_limit),
        )
    if st.online_io_wait is not None:
        yield GaugeMetricFamily(
            PREFIX + "online_io_wait_ratio",
            "The worst online pod's I/O wait over the last tier period (PSI some; v1 its tasks' block I/O delay with "
            "kernel.task_delayacct=1, else the node's PSI, or disk busy)",
            value=st.online_io_wait,
        )
    yield GaugeMetricFamily(
        PREFIX + "offline_io_limit_bytes_per_second",
        "The I/O controller's read and write limit per offline pod per disk (0: no limit)",
        value=float(st.offline_io_bps or 0),
    )


def _tier_cpu_gauges(st: Status) -> Iterator[Metric]:
    """The offline tier's CPU ceiling and the online CPU wait it follows (agent.decide.tier)."""
    if st.tier_cpu_ceiling is not None:
        yield GaugeMetricFamily(
            PREFIX + "tier_cpu_ceiling_cores",
            "The offline tier's CPU ceiling: allocatable x tier.cpu.suppressRatio - online usage (- system usage "
            "with tier.cpu.subtractSystem), raised a step a period, halved while the online pods wait, never under "
            "tier.cpu.minCores",
            value=st.tier_cpu_ceiling / 1000.0,
        )
    if st.online_cpu_wait is not None:
        yield GaugeMetricFamily(
            PREFIX + "online_cpu_wait_ratio",
            "The worst online pod's CPU wait over the last tier period (v2 cpu.pressure some; v1 its tasks' "
            "schedstat run delay over the wall time)",
            value=st.online_cpu_wait,
        )
    if st.online_cpu_wait_pod is not None:
        info = GaugeMetricFamily(
            PREFIX + "online_cpu_wait_pod_info",
            "1 for the online pod whose CPU wait is the feedback's signal (the worst by tier.cpu.onlineWaitSignal), "
            "and how it was read",
            labels=["pod", "source"],
        )
        info.add_metric(list(st.online_cpu_wait_pod), 1.0)
        yield info
    if st.online_cpu_delay_ms is not None:
        yield GaugeMetricFamily(
            PREFIX + "online_cpu_delay_per_slice_seconds",
            "The worst online pod's run delay per run slice over the last tier period (its tasks' schedstat: delay "
            "/ slices)",
            value=st.online_cpu_delay_ms / 1000.0,
        )
    if st.online_cpu_wait_base is not None and st.online_cpu_wait_base_signal == "slice":
        yield GaugeMetricFamily(
            PREFIX + "online_cpu_delay_baseline_seconds",
            "The worst online pod's run delay per slice while the offline tier is idle: tier.cpu.onlineDelayTarget "
            "is on top of it",
            value=st.online_cpu_wait_base / 1000.0,
        )
    elif st.online_cpu_wait_base is not None:
        yield GaugeMetricFamily(
            PREFIX + "online_cpu_wait_baseline_ratio",
            "The worst online pod's CPU wait while the offline tier is idle: tier.cpu.onlineWaitTarget is on top of it",
            value=st.online_cpu_wait_base,
        )


def _loop_counters(c: _Counts) -> Iterator[Metric]:
    """CFS throttling by class and the loops' activity: samples, decisions, re-senses, failures."""
    periods = CounterMetricFamily(
        PREFIX + "cpu_cfs_periods", "CFS enforcement periods of pods with a CPU quota, by class", labels=["class"]
    )
    throttled = CounterMetricFamily(
        PREFIX + "cpu_cfs_throttled_periods", "CFS periods in which pods were throttled, by class", labels=["class"]
    )
    throttled_s = CounterMetricFamily(
        PREFIX + "cpu_cfs_throttled_seconds", "Time pods were throttled by CFS quota, by class", labels=["class"]
    )
    for cls, (p, t, sec) in sorted(c.throttling.items()):
        periods.add_metric([cls], p)
        throttled.add_metric([cls], t)
        throttled_s.add_metric([cls], sec)
    yield periods
    yield throttled
    yield throttled_s
    yield CounterMetricFamily(PREFIX + "samples", "Usage samples taken", value=c.samples)
    yield CounterMetricFamily(PREFIX + "sample_failures", "Samples without a kubepods reading", value=c.sample_failures)
    yield CounterMetricFamily(PREFIX + "decisions", "Decisions (decide calls)", value=c.decisions)
    yield CounterMetricFamily(
        PREFIX + "qos_resenses",
        "Pods read again because a pod event found them waiting for their cgroups",
        value=c.resenses,
    )
    yield CounterMetricFamily(
        PREFIX + "decision_failures",
        "Agent cycles that failed with an error (the next cycle retries)",
        value=c.decision_failures,
    )


def _info_families(info: Mapping[str, float]) -> Iterator[Metric]:
    """The configuration generation, API freshness and readiness the daemon reports through `info()`."""
    yield GaugeMetricFamily(
        PREFIX + "config_generation",
        "Generation of the configuration in use (+1 per accepted change)",
        value=info.get("config_generation", 0),
    )
    yield GaugeMetricFamily(
        PREFIX + "config_last_reload_successful",
        "1 if the last configuration (re)load was accepted",
        value=info.get("config_ok", 1),
    )
    yield GaugeMetricFamily(
        PREFIX + "api_last_contact_age_seconds",
        "Seconds since the API server last answered (-1: never)",
        value=info.get("api_age", -1.0),
    )
    yield GaugeMetricFamily(PREFIX + "ready", "1 when /readyz passes", value=info.get("ready", 0))


def _histograms(stats: Stats) -> Iterator[Metric]:
    """Loop durations and reaction latencies (each histogram snapshots itself under its own lock)."""
    loops = HistogramMetricFamily(PREFIX + "loop_duration_seconds", "Duration of each loop's run", labels=["loop"])
    for name, h in sorted(stats.loop_durations.items()):
        buckets, total = h.snapshot()
        loops.add_metric([name], buckets, total)
    yield loops
    react = HistogramMetricFamily(
        PREFIX + "reaction_latency_seconds",
        "From the sample (or pod event) that triggered an action to the action applied",
        labels=["action"],
    )
    for name, h in sorted(stats.reaction.items()):
        buckets, total = h.snapshot()
        react.add_metric([name], buckets, total)
    yield react


class _HasStatus(Protocol):
    @property
    def status(self) -> Status: ...


class AgentLike(Protocol):
    """What the collector reads (the daemon's Agent: the gauges' `Status` is the cycle's)."""

    @property
    def cycle(self) -> _HasStatus: ...

    stats: Stats

    def info(self) -> dict[str, float]: ...


def agent_registry(agent: AgentLike) -> CollectorRegistry:
    """The registry `/metrics` serves: the agent's collector and the build info."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(agent))
    register_build_info(registry, "agent")
    return registry
