"""simulate: run K scheduling cycles over a cluster file and report the decisions (no side effects).

Between cycles the decisions are applied to the objects as the cluster would: bound pods get their
node and become Running, evicted pods are deleted, PodGroup phases are written back. The result is
a frozen plan; `to_json` gives the document of docs/design.md, "Simulate", `to_table` a human explanation.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from scheduler_ext.api.types import PENDING, PIPELINED
from scheduler_ext.framework.conf import SchedulerConf, cluster_warnings
from scheduler_ext.framework.cycle import run_session, why_pending
from scheduler_ext.framework.interface import Action, ActionSpec, PluginSpec
from scheduler_ext.framework.session import Session, SessionOptions
from scheduler_ext.model.plan import merge_conditions
from scheduler_ext.model.snapshot import build_cluster
from scheduler_ext.plugins.rebalance import Move
from scheduler_ext.plugins.rescheduling import Report, session_report
from tidemark.apis import parse_quantity
from tidemark.profiles import ANN_PROFILE, KIND, apply_to_objects

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodOutcome:
    """What happened to one of our pods that was pending: its node, or why it is still pending."""

    pod: str
    node: str = ""
    pipelined: bool = False
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RebalanceView:
    """The `rescheduling` plugin's state after the cycles: the last run's hot and cool nodes, held-back candidates,
    workloads in their cool-down (seconds left) and relieved nodes, and the moves of every run (with their reason)."""

    last: Report
    moves: tuple[Move, ...]

    def to_json(self) -> dict[str, Any]:
        r = self.last
        return {
            "hot": list(r.hot),
            "cool": list(r.cool),
            "moves": [{"pod": m.name, "from": m.source, "to": m.destination, "resource": m.resource,
                       "reason": m.reason} for m in self.moves],
            "held": dict(sorted(r.held.items())),
            "cooling": {w: round(left) for w, left in sorted(r.cooling.items())},
            "relieved": {n: round(ago) for n, ago in sorted(r.relieved.items())},
        }

    def lines(self) -> list[str]:
        r = self.last
        out = [f"rebalance: hot nodes: {', '.join(r.hot) or 'none'}; cool nodes: {', '.join(r.cool) or 'none'}"]
        out += [f"  moved {m.name} from {m.source} (room on {m.destination}): {m.reason}" for m in self.moves]
        if r.held:
            out.append("  held back: " + ", ".join(f"{k} {n}" for k, n in sorted(r.held.items())))
        out += [f"  cool-down: workload {w} not moved again for {left:.0f}s" for w, left in sorted(r.cooling.items())]
        out += [f"  node {n}: a pod moved off it {ago:.0f}s ago; not looked at until its usage shows the move"
                for n, ago in sorted(r.relieved.items())]
        return out


@dataclass(frozen=True, slots=True)
class SimulationResult:
    binds: Mapping[str, str]
    evictions: tuple[str, ...]
    eviction_reasons: Mapping[str, str]
    pipelined: Mapping[str, str]
    podgroups: Mapping[str, str]
    session_seconds: float
    cycles: int
    outcomes: tuple[PodOutcome, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    #: the file's pods a ColocationProfile changed: "ns/pod" -> the profiles (docs/colocation-profiles.md)
    profiled: Mapping[str, str] = field(default_factory=dict)
    #: one line per pod changed by a profile, or per profile problem
    profile_lines: tuple[str, ...] = ()
    #: the rescheduling plugin's state (None: it did not run)
    rebalance: RebalanceView | None = None

    def to_json(self) -> dict[str, Any]:
        extra = {"profiles": dict(self.profiled)} if self.profiled else {}
        if self.rebalance is not None:
            extra["rebalance"] = self.rebalance.to_json()
        return extra | {
            "binds": dict(self.binds),
            "evictions": list(self.evictions),
            "pipelined": dict(self.pipelined),
            "podgroups": dict(self.podgroups),
            "stats": {"session_seconds": round(self.session_seconds, 6), "cycles": self.cycles},
        }

    def to_table(self) -> str:
        lines = [*(f"colocation profile: {line}" for line in self.profile_lines), ""] if self.profile_lines else []
        lines.append(f"{'POD':<40} {'RESULT'}")
        for o in self.outcomes:
            if o.node and not o.pipelined:
                res = f"bound to {o.node}"
            elif o.pipelined:
                res = f"pipelined on {o.node} (waits for resources being released)"
            else:
                res = f"pending: {o.reason}"
            lines.append(f"{o.pod:<40} {res}")
        if self.evictions:
            lines.append("")
            lines.append(f"{'EVICTED POD':<40} {'REASON'}")
            for pod in self.evictions:
                lines.append(f"{pod:<40} {self.eviction_reasons.get(pod, '')}")
        if self.rebalance is not None:
            lines.append("")
            lines.extend(self.rebalance.lines())
        if self.podgroups:
            lines.append("")
            lines.append(f"{'PODGROUP':<40} {'PHASE'}")
            for pg, phase in sorted(self.podgroups.items()):
                lines.append(f"{pg:<40} {phase}")
        lines.append("")
        lines.append(f"{len(self.binds)} bound, {len(self.evictions)} evicted, {len(self.pipelined)} pipelined "
                     f"in {self.cycles} cycle(s), {self.session_seconds:.3f}s of session time")
        return "\n".join(lines)


def _apply(
    objects: list[dict[str, Any]], ssn: Session, implicit_phases: dict[str, str], now: float
) -> list[dict[str, Any]]:
    """Write the cycle's decisions back into the objects for the next cycle.

    PodGroups get their phase and the session's conditions, merged by type as `run` writes them
    (scheduler_ext.model.plan.merge_conditions: an unchanged condition keeps its lastTransitionTime),
    so state kept in conditions (the privilege action's) carries over as it does on a live cluster.
    """
    now_iso = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = {str(j.uid): j.pod_group.conditions for j in ssn.jobs.values() if j.pod_group.conditions}
    bound: dict[str, str] = {b.task.uid: b.node for b in ssn.binds}
    evicted: set[str] = {e.task.uid for e in ssn.evictions}
    phases: dict[str, str] = {j.uid: j.pod_group.phase for j in ssn.jobs.values()}
    for j in ssn.jobs.values():
        if j.pod_group.implicit:
            implicit_phases[j.uid] = j.pod_group.phase
    out: list[dict[str, Any]] = []
    for obj in objects:
        kind = obj.get("kind")
        md = obj.get("metadata") or {}
        if kind == "Pod":
            uid = str(md.get("uid") or f"{md.get('namespace') or 'default'}/{md.get('name')}")
            if uid in evicted:
                continue
            if uid in bound:
                obj.setdefault("spec", {})["nodeName"] = bound[uid]
                obj.setdefault("status", {})["phase"] = "Running"
            elif (obj.get("status") or {}).get("phase") == "Pending" and (obj.get("spec") or {}).get("nodeName"):
                obj["status"]["phase"] = "Running"
        elif kind == "PodGroup":
            key = f"{md.get('namespace') or 'default'}/{md.get('name')}"
            if key in phases:
                obj.setdefault("status", {})["phase"] = phases[key]
            if key in conditions:
                status = obj.setdefault("status", {})
                status["conditions"] = merge_conditions(
                    list(status.get("conditions") or []), conditions[key], now_iso
                )
        out.append(obj)
    return out


def _profiled(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """("ns/pod", profiles) of every pod carrying the colocation-profile annotation."""
    out = []
    for o in objects:
        md = o.get("metadata")
        if not isinstance(md, Mapping):
            continue
        ann = md.get("annotations")
        if o.get("kind") == "Pod" and isinstance(ann, Mapping) and ANN_PROFILE in ann:
            out.append((f"{md.get('namespace') or 'default'}/{md.get('name')}", str(ann[ANN_PROFILE])))
    return out


def simulate(
    objects: list[dict[str, Any]],
    conf: SchedulerConf,
    actions: Mapping[str, ActionSpec],
    plugins: Mapping[str, PluginSpec],
    *,
    cycles: int = 1,
    now: float,
    scheduler_name: str = "volcano",
    options: SessionOptions | None = None,
) -> SimulationResult:
    """Run the conf's actions for `cycles` sessions over `objects`."""
    # warm up lazily imported parsers so import time does not count as session time
    parse_quantity("1")
    # The objects are long-lived and the session allocates many small objects: without this the
    # cyclic GC re-traverses the whole object graph again and again (a third of session time at
    # 10000 pods). Memory is released when the caller drops the result.
    if any(isinstance(o, Mapping) and o.get("kind") == KIND for o in objects):
        objects, profile_lines = apply_to_objects(objects)
        # profiles and the namespaces they read are the webhook's, not the scheduler's
        objects = [o for o in objects if o.get("kind") not in (KIND, "Namespace")]
    else:
        profile_lines = []
    profiled = dict(_profiled(objects)) if profile_lines else {}
    gc.freeze()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        result = _simulate(objects, conf, actions, plugins, cycles=cycles, now=now,
                           scheduler_name=scheduler_name, options=options)
        return replace(result, profiled=profiled, profile_lines=tuple(profile_lines)) if profile_lines else result
    finally:
        if gc_was_enabled:
            gc.enable()
        gc.unfreeze()


def _simulate(
    objects: list[dict[str, Any]],
    conf: SchedulerConf,
    actions: Mapping[str, ActionSpec],
    plugins: Mapping[str, PluginSpec],
    *,
    cycles: int,
    now: float,
    scheduler_name: str,
    options: SessionOptions | None,
) -> SimulationResult:
    action_objs: list[Action] = [actions[name].build() for name in conf.actions]
    for a in action_objs:
        a.initialize()
    binds: dict[str, str] = {}
    evictions: list[str] = []
    eviction_reasons: dict[str, str] = {}
    pipelined: dict[str, str] = {}
    podgroups: dict[str, str] = {}
    outcomes: dict[str, PodOutcome] = {}
    warnings: list[str] = []
    implicit_phases: dict[str, str] = {}
    rebalance: RebalanceView | None = None
    elapsed = 0.0
    for cycle in range(cycles):
        t0 = time.perf_counter()
        cluster = build_cluster(objects, now=now, scheduler_name=scheduler_name)
        if cycle == 0:
            warnings.extend(cluster.warnings)
            warnings.extend(cluster_warnings(conf, (o for o in objects if o.get("kind") == "Node")))
        pending_at_start = [
            (t.uid, t.key, t.job) for j in cluster.jobs.values() for t in j.tasks_in(PENDING).values()
        ]
        ssn = run_session(
            cluster, conf, plugins, action_objs, options=options, implicit_phases=implicit_phases,
            log_prefix=f"cycle {cycle + 1}: ",
        )
        elapsed += time.perf_counter() - t0
        for b in ssn.binds:
            binds[b.task.key] = b.node
        for e in ssn.evictions:
            evictions.append(e.task.key)
            eviction_reasons[e.task.key] = e.reason
        pipelined = {}
        for j in ssn.jobs.values():
            for t in j.tasks_in(PIPELINED).values():
                pipelined[t.key] = t.node_name
        podgroups = {j.uid: j.pod_group.phase for j in ssn.jobs.values()}
        report = session_report(ssn)
        if report is not None:
            rebalance = RebalanceView(report, (rebalance.moves if rebalance else ()) + report.moves)
        bound_now = {b.task.uid: b.node for b in ssn.binds}
        for uid, key, jid in pending_at_start:
            if uid in bound_now:
                outcomes[key] = PodOutcome(key, bound_now[uid])
            elif key in pipelined:
                outcomes[key] = PodOutcome(key, pipelined[key], pipelined=True)
            else:
                outcomes[key] = PodOutcome(key, reason=why_pending(ssn, uid, jid))
        t1 = time.perf_counter()
        if cycle + 1 < cycles:
            objects = _apply(objects, ssn, implicit_phases, now)
        elapsed += time.perf_counter() - t1
        log.info("cycle %d: %d binds, %d evictions", cycle + 1, len(ssn.binds), len(ssn.evictions))
    for a in action_objs:
        a.uninitialize()
    return SimulationResult(
        binds=binds,
        evictions=tuple(evictions),
        eviction_reasons=eviction_reasons,
        pipelined=pipelined,
        podgroups=podgroups,
        session_seconds=elapsed,
        cycles=cycles,
        outcomes=tuple(sorted(outcomes.values(), key=lambda o: o.pod)),
        warnings=tuple(warnings),
        rebalance=rebalance,
    )
