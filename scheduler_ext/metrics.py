"""The scheduler's Prometheus metrics: Volcano's exposed names (drop-in dashboards) plus `tidemark_` ones.

Everything goes into an injected CollectorRegistry (house style 10), so two schedulers in one
process (tests) or a test's own registry never collide with the global one.

Volcano's names are kept exactly (docs/design.md, "Metrics"; the buckets are Volcano 1.x's). Two of
them are counters whose names do not end in `_total` (`volcano_total_preemption_attempts`,
`volcano_job_retry_counts`): prometheus_client would rename them (`..._total`), and both
exposition formats insist on that suffix for the `counter` type, so a small collector emits them
with the exact name and the `untyped`/`unknown` type, which every Prometheus parser accepts and
which `rate()`/`increase()` work on unchanged.

Series labelled by job (`job_id`, `job_name`) are removed when the job leaves the cluster, so they
do not pile up (Volcano deletes them on job deletion too). Nothing is labelled by pod.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from scheduler_ext.plugins.rebalance import HELD_REASONS, RESOURCES
from tidemark.buildinfo import register_build_info

log = logging.getLogger(__name__)


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """prometheus.ExponentialBuckets (Go)."""
    return tuple(start * factor**i for i in range(count))


#: Volcano 1.x: ExponentialBuckets(5, 2, 10) for latencies, (32, 2, 10) for the job latency
LATENCY_BUCKETS: Final = exponential_buckets(5, 2, 10)
JOB_LATENCY_BUCKETS: Final = exponential_buckets(32, 2, 10)
#: the label values of tidemark_scheduler_rebalance_*: the resources that make a node hot and the reasons a
#: candidate is held back, declared with the plugin (fixed sets: every series is exported from the start)
REBALANCE_RESOURCES: Final = RESOURCES
REBALANCE_HELD_REASONS: Final = HELD_REASONS
SECONDS_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: every Volcano name the scheduler exposes (docs/design.md, "Metrics")
VOLCANO_METRIC_NAMES: Final = (
    "volcano_e2e_scheduling_latency_milliseconds",
    "volcano_e2e_job_scheduling_latency_milliseconds",
    "volcano_e2e_job_scheduling_duration",
    "volcano_plugin_scheduling_latency_microseconds",
    "volcano_action_scheduling_latency_microseconds",
    "volcano_task_scheduling_latency_milliseconds",
    "volcano_schedule_attempts_total",
    "volcano_pod_preemption_victims",
    "volcano_total_preemption_attempts",
    "volcano_unschedule_task_count",
    "volcano_unschedule_job_count",
    "volcano_job_retry_counts",
)


class _ExactNameCounters(Collector):
    """Counters exposed under names without `_total` (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.preemption_attempts = 0.0
        self.job_retries: dict[str, float] = {}

    def inc_preemption_attempts(self, n: float = 1.0) -> None:
        with self._lock:
            self.preemption_attempts += n

    def inc_job_retry(self, job_id: str) -> None:
        with self._lock:
            self.job_retries[job_id] = self.job_retries.get(job_id, 0.0) + 1.0

    def forget_jobs(self, keep: Iterable[str]) -> None:
        keep_set = set(keep)
        with self._lock:
            for job_id in [j for j in self.job_retries if j not in keep_set]:
                del self.job_retries[job_id]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            attempts = self.preemption_attempts
            retries = dict(self.job_retries)
        m = Metric("volcano_total_preemption_attempts", "Total preemption attempts in the cluster till now", "unknown")
        m.add_sample("volcano_total_preemption_attempts", {}, attempts)
        yield m
        r = Metric("volcano_job_retry_counts", "Number of retry counts for one job", "unknown")
        for job_id, value in sorted(retries.items()):
            r.add_sample("volcano_job_retry_counts", {"job_id": job_id}, value)
        yield r


class SchedulerMetrics:
    """All the scheduler's series, registered into `registry` (a fresh one when None)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        register_build_info(reg, "scheduler")
        self._register_volcano(reg)
        self._register_tidemark(reg)
        self._job_lock = threading.Lock()
        self._job_series: dict[str, tuple[str, str, str]] = {}
        self._unsched_series: set[str] = set()

    def _register_volcano(self, reg: CollectorRegistry) -> None:
        """Volcano's names, exactly (drop-in dashboards; see the module docstring)."""
        self.e2e_latency = Histogram(
            "volcano_e2e_scheduling_latency_milliseconds",
            "E2e scheduling latency in milliseconds (scheduling algorithm + binding)",
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.e2e_job_latency = Histogram(
            "volcano_e2e_job_scheduling_latency_milliseconds",
            "E2e job scheduling latency in milliseconds",
            buckets=JOB_LATENCY_BUCKETS,
            registry=reg,
        )
        self.e2e_job_duration = Gauge(
            "volcano_e2e_job_scheduling_duration",
            "E2E job scheduling duration",
            ["job_name", "queue", "job_namespace"],
            registry=reg,
        )
        self.plugin_latency = Histogram(
            "volcano_plugin_scheduling_latency_microseconds",
            "Plugin scheduling latency in microseconds",
            ["plugin", "OnSession"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.action_latency = Histogram(
            "volcano_action_scheduling_latency_microseconds",
            "Action scheduling latency in microseconds",
            ["action"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.task_latency = Histogram(
            "volcano_task_scheduling_latency_milliseconds",
            "Task scheduling latency in milliseconds (task create to task bound to a node)",
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.schedule_attempts = Counter(
            "volcano_schedule_attempts_total",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be "
            "scheduled, while 'error' means an internal scheduler problem.",
            ["result"],
            registry=reg,
        )
        self.preemption_victims = Gauge(
            "volcano_pod_preemption_victims", "Number of selected preemption victims", registry=reg
        )
        self.unschedule_task_count = Gauge(
            "volcano_unschedule_task_count", "Number of tasks could not be scheduled", ["job_id"], registry=reg
        )
        self.unschedule_job_count = Gauge(
            "volcano_unschedule_job_count", "Number of jobs could not be scheduled", registry=reg
        )
        self.exact = _ExactNameCounters()
        reg.register(self.exact)

    def _register_tidemark(self, reg: CollectorRegistry) -> None:
        """The `tidemark_` series: what Volcano does not expose (sessions, snapshots, API writes, the lease)."""
        self.sessions = Counter(
            "tidemark_scheduler_sessions", "Scheduling sessions run, by result (ok, error)", ["result"], registry=reg
        )
        self.session_seconds = Histogram(
            "tidemark_scheduler_session_duration_seconds",
            "One session: snapshot, actions, close and planning (side effects run afterwards)",
            buckets=SECONDS_BUCKETS,
            registry=reg,
        )
        self.snapshot_seconds = Histogram(
            "tidemark_scheduler_snapshot_build_seconds",
            "Building a session's ClusterInfo from the watch caches",
            buckets=SECONDS_BUCKETS,
            registry=reg,
        )
        self.snapshot_parsed = Counter(
            "tidemark_scheduler_snapshot_pods_parsed",
            "Pods parsed into tasks while building snapshots (the others were reused from the parse cache)",
            registry=reg,
        )
        self.snapshot_pods = Gauge(
            "tidemark_scheduler_snapshot_pods", "Pods in the last snapshot (ours and bound ones)", registry=reg
        )
        self.snapshot_nodes = Gauge(
            "tidemark_scheduler_snapshot_nodes", "Ready nodes in the last snapshot", registry=reg
        )
        self.pending_tasks = Gauge(
            "tidemark_scheduler_pending_tasks", "Our pods still pending after the last session", registry=reg
        )
        self.binds = Counter(
            "tidemark_scheduler_binds",
            "Bind calls by result (bound, conflict, not_found, error, fenced)",
            ["result"],
            registry=reg,
        )
        self.evictions = Counter(
            "tidemark_scheduler_evictions",
            "Eviction calls by result (evicted, blocked = refused with 429 by a PodDisruptionBudget, not_found, "
            "error, fenced)",
            ["result"],
            registry=reg,
        )
        self.status_writes = Counter(
            "tidemark_scheduler_status_writes",
            "Status writes by kind (podgroup, queue, pod) and result (ok, error, "
            "conflict: the object moved on since the session read it)",
            ["kind", "result"],
            registry=reg,
        )
        self.leader = Gauge(
            "tidemark_scheduler_leader", "1 while this replica holds the lease (always 1 without --leader-elect)",
            registry=reg,
        )
        self.conf_generation = Gauge(
            "tidemark_scheduler_conf_generation", "Scheduler confs loaded so far (1 after the start)", registry=reg
        )
        self.conf_reload_errors = Counter(
            "tidemark_scheduler_conf_reload_errors", "Changed confs that failed to load (the old conf was kept)",
            registry=reg,
        )
        self.api_last_contact = Gauge(
            "tidemark_scheduler_api_last_contact_seconds",
            "Seconds since the API server last answered (watches, probes, writes)",
            registry=reg,
        )
        self._register_rebalance(reg)

    def _register_rebalance(self, reg: CollectorRegistry) -> None:
        """The `rescheduling` plugin's runs (moves before evictions; scheduler_ext/plugins/rescheduling.py)."""
        self.rebalance_moves = Counter(
            "tidemark_scheduler_rebalance_moves",
            "Offline pods the rescheduling plugin evicted to move them off a hot node, by the resource that made "
            "the node hot (cpu, memory); the Eviction call's result is in tidemark_scheduler_evictions_total",
            ["resource"],
            registry=reg,
        )
        self.rebalance_skipped = Counter(
            "tidemark_scheduler_rebalance_skipped",
            "Rebalancing candidates held back, by reason (" + ", ".join(REBALANCE_HELD_REASONS) + ")",
            ["reason"],
            registry=reg,
        )
        self.rebalance_hot_nodes = Gauge(
            "tidemark_scheduler_rebalance_hot_nodes", "Hot nodes in the last rebalancing run", registry=reg
        )
        self.rebalance_cool_nodes = Gauge(
            "tidemark_scheduler_rebalance_cool_nodes", "Cool nodes in the last rebalancing run", registry=reg
        )
        for resource in REBALANCE_RESOURCES:
            self.rebalance_moves.labels(resource)
        for reason in REBALANCE_HELD_REASONS:
            self.rebalance_skipped.labels(reason)

    def record_rebalance(self, moved: Mapping[str, int], held: Mapping[str, int], hot: int, cool: int) -> None:
        """One rebalancing run: its evicted moves by resource, its held-back candidates by reason, its node counts.
        A value outside the fixed label sets is dropped with a warning (the series stay a fixed set)."""
        for label, counts, known, counter in (("resource", moved, REBALANCE_RESOURCES, self.rebalance_moves),
                                              ("reason", held, REBALANCE_HELD_REASONS, self.rebalance_skipped)):
            for value, n in counts.items():
                if value not in known:
                    log.warning("metrics: rebalance %s=%r is not one of %s; not counted", label, value, known)
                elif n > 0:
                    counter.labels(value).inc(n)
        self.rebalance_hot_nodes.set(hot)
        self.rebalance_cool_nodes.set(cool)

    # --- job-labelled series ---------------------------------------------------------------------
    def set_job_duration(self, job_name: str, queue: str, namespace: str, milliseconds: float) -> None:
        with self._job_lock:
            self._job_series[f"{namespace}/{job_name}"] = (job_name, queue, namespace)
        self.e2e_job_duration.labels(job_name, queue, namespace).set(milliseconds)
        self.e2e_job_latency.observe(milliseconds)

    def set_unschedulable(self, per_job: dict[str, int], implicit: int = 0) -> None:
        """`volcano_unschedule_task_count` per job and the job count; retries +1 per listed job.

        `implicit`: unschedulable jobs without a PodGroup object; counted, but without per-job series
        (their names carry a pod UID).
        """
        with self._job_lock:
            for job_id in self._unsched_series - set(per_job):
                self.unschedule_task_count.remove(job_id)
            self._unsched_series = set(per_job)
        for job_id, n in per_job.items():
            self.unschedule_task_count.labels(job_id).set(n)
            self.exact.inc_job_retry(job_id)
        self.unschedule_job_count.set(len(per_job) + implicit)

    def forget_jobs(self, present: Iterable[str]) -> None:
        """Drop job-labelled series of jobs (`ns/name`) that no longer exist."""
        keep = set(present)
        with self._job_lock:
            for key in [k for k in self._job_series if k not in keep]:
                self.e2e_job_duration.remove(*self._job_series.pop(key))
        self.exact.forget_jobs(k.rsplit("/", 1)[-1] for k in keep)
