"""What a session of `run` reports: its metrics (Volcano's names and the `tidemark_` set) and the
timing of every plugin's session hooks (volcano_plugin_scheduling_latency_microseconds)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from scheduler_ext.framework.interface import Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.metrics import SchedulerMetrics
from scheduler_ext.model.plan import Plan
from scheduler_ext.plugins.rescheduling import session_report


def _time_hooks(plugin: Plugin, name: str, observe: Callable[[str, str, float], None]) -> None:
    """Time the plugin's OnSessionOpen/OnSessionClose through instance attributes (skipped if slotted)."""
    for attr, label in (("on_session_open", "OnSessionOpen"), ("on_session_close", "OnSessionClose")):
        hook = getattr(plugin, attr)

        def timed(ssn: Any, _hook: Callable[[Any], None] = hook, _label: str = label) -> None:
            t0 = time.perf_counter()
            try:
                _hook(ssn)
            finally:
                observe(name, _label, time.perf_counter() - t0)

        try:
            setattr(plugin, attr, timed)
        except AttributeError:
            return


def timed_plugins(
    plugins: Mapping[str, PluginSpec], observe: Callable[[str, str, float], None]
) -> dict[str, PluginSpec]:
    """The registry with every plugin's session hooks timed."""
    out: dict[str, PluginSpec] = {}
    for name, spec in plugins.items():

        def build(arguments: Any, _spec: PluginSpec = spec) -> Plugin:
            plugin = _spec.build(arguments)
            _time_hooks(plugin, _spec.name, observe)
            return plugin

        out[name] = dataclasses.replace(spec, build=build)
    return out


def record_session(m: SchedulerMetrics, ssn: Session, plan: Plan, stats: Any, took: float, now: float) -> None:
    """The metrics of one session (`took` seconds; `now` epoch seconds at its start)."""
    m.sessions.labels("ok").inc()
    m.session_seconds.observe(took)
    m.e2e_latency.observe(took * 1000.0)
    m.snapshot_seconds.observe(stats.seconds)
    m.snapshot_parsed.inc(stats.parsed)
    m.snapshot_pods.set(stats.pods)
    m.snapshot_nodes.set(stats.nodes)
    m.pending_tasks.set(plan.pending_tasks)
    if plan.unschedulable_tasks:
        m.schedule_attempts.labels("unschedulable").inc(plan.unschedulable_tasks)
    m.set_unschedulable(dict(plan.unschedulable_jobs), implicit=plan.unschedulable_implicit)
    if plan.evictions:
        m.preemption_victims.set(len(plan.evictions))
        m.exact.inc_preemption_attempts()
    rebalance = session_report(ssn)  # None in sessions between two rebalancing runs
    if rebalance is not None:
        moved = rebalance.moved_by_resource(str(e.task.uid) for e in ssn.evictions)
        m.record_rebalance(moved, rebalance.held, len(rebalance.hot), len(rebalance.cool))
    seen: set[str] = set()
    for b in ssn.binds:
        job = ssn.jobs.get(b.task.job)
        if job is None or job.uid in seen:
            continue
        seen.add(job.uid)
        took_ms = max(0.0, (now - job.creation) * 1000.0)
        if job.pod_group.implicit:
            # an implicit group is named after its pod's UID: no per-job series (house style 10)
            m.e2e_job_latency.observe(took_ms)
        else:
            m.set_job_duration(job.name, str(job.queue), job.namespace, took_ms)
    m.forget_jobs(str(j) for j in ssn.jobs if not ssn.jobs[j].pod_group.implicit)
