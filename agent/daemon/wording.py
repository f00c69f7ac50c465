"""Every Kubernetes Event the agent writes: its type, reason and message, in one place.

The daemon's rooms (`agent.daemon.agent`, `.apijobs`, `.apiworker`, `.clusterview`, `.qosapply`,
`.reload`) decide WHEN an event goes out; this module says WHAT it says. Functions return a
`NodeEvent` (type, reason, message) whatever object it is attached to (the Node or a Pod).
Messages carry the figures that made the decision; those that can grow (lists, errors) are cut at
1024 characters as the API server would refuse longer ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.decide.ops import EvictPod, Plan
from agent.model import Amounts, NodeView, PodView
from tidemark.apis import RESOURCES

LIMIT = 1024


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """One event to write: `type` Normal|Warning, `reason` CamelCase, `message` in words."""

    type: str
    reason: str
    message: str


def _fmt(resource: str, value: float) -> str:
    return f"{value:.0f}m" if resource == "cpu" else f"{value / 2**20:.0f}Mi"


def pod_ref(p: PodView) -> dict[str, object]:
    return pod_ref_of(p.namespace, p.name, p.uid)


def pod_ref_of(namespace: str, name: str, uid: str) -> dict[str, object]:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": namespace, "uid": uid}}


# --- the Node: evicting, capacity ---------------------------------------------------------------------


def _watermark_percent(plan: Plan) -> Amounts:
    """The usage the watermarks compared: the newest sample's, not the window's smoothed mean (which lags:
    a node clearing at 5 % after a spike still had a mean of 39 %)."""
    return plan.usage.newest_percent or plan.usage.percent


def evicting_started(plan: Plan, node: NodeView, consecutive: int) -> NodeEvent:
    over = [r for r in RESOURCES if plan.next_state.watermarks.over(r) >= consecutive]
    pct = _watermark_percent(plan)
    figures = (
        ", ".join(f"{r} {pct.get(r):.1f} % (high {node.watermarks.high(r)} %)" for r in over)
        or "usage past a high watermark"
    )
    return NodeEvent(
        "Warning",
        "EvictingStarted",
        f"{figures} for {consecutive} consecutive samples: the node is evicting "
        f"offline pods ({len(plan.evictions)} now); B = X = 0 until every resource is at or under its low "
        "watermark",
    )


def evicting_cleared(plan: Plan, consecutive: int) -> NodeEvent:
    pct = _watermark_percent(plan)
    return NodeEvent(
        "Normal",
        "EvictingCleared",
        "every resource at or under its low watermark for "
        f"{consecutive} consecutive samples: the node takes offline work again "
        f"(cpu {pct.cpu:.1f} %, memory {pct.memory:.1f} %)",
    )


def capacity_published(plan: Plan) -> NodeEvent:
    c = plan.capacity
    return NodeEvent(
        "Normal",
        "CapacityPublished",
        f"batch-cpu {_fmt('cpu', c.published_batch.cpu)}, batch-memory "
        f"{_fmt('memory', c.published_batch.memory)}; oversubscription cpu "
        f"{_fmt('cpu', c.published_x.cpu)}, memory {_fmt('memory', c.published_x.memory)} "
        f"(B cpu {_fmt('cpu', c.B.cpu)}, memory "
        f"{_fmt('memory', c.B.memory)}; U_non cpu {_fmt('cpu', plan.usage.non_offline.cpu)})",
    )


def capacity_withdrawn(plan: Plan) -> NodeEvent:
    """Offline capacity left no room for a new batch pod: the cause, per resource (`CapacityView.zero_causes`), so a
    user whose pods wait on `Insufficient kubernetes.io/batch-cpu` reads why. A value held at the bound pods'
    requests says so: it is there for kubelet's re-admission of those pods, not for new ones."""
    c = plan.capacity

    def shown(r: str, value: float, bound: float) -> str:
        return _fmt(r, value) + (" (= the bound batch pods' requests)" if bound and value <= bound else "")

    causes = "; ".join(c.zero_causes) or "no cause recorded"
    return NodeEvent(
        "Warning",
        "CapacityWithdrawn",
        f"batch-cpu {shown('cpu', c.published_batch.cpu, c.batch_bound.cpu)}, batch-memory "
        f"{shown('memory', c.published_batch.memory, c.batch_bound.memory)}: {causes}"[:LIMIT],
    )


def invalid_annotation(warning: str) -> NodeEvent:
    return NodeEvent("Warning", "InvalidAnnotation", warning[:LIMIT])


def foreign_writer(manager: str, keys: Iterable[str]) -> NodeEvent:
    return NodeEvent(
        "Warning",
        "ForeignWriter",
        f"{manager} also writes {', '.join(keys)} on this node: two agents overwrite each other's capacity; "
        f"run one agent per node (remove {manager} or tidemark-agent, see docs/migration.md)"[:LIMIT],
    )


# --- evictions (written by the API worker) ------------------------------------------------------------


def evicted(ev: EvictPod) -> NodeEvent:
    return NodeEvent("Warning", ev.reason, f"evicted by tidemark-agent: {ev.detail}"[:LIMIT])


def eviction_blocked(ev: EvictPod, message: str) -> NodeEvent:
    return NodeEvent("Warning", "EvictionBlocked", f"eviction for {ev.reason} refused: {message}"[:LIMIT])


def eviction_failed(ev: EvictPod, message: str) -> NodeEvent:
    return NodeEvent("Warning", "EvictionFailed", f"eviction for {ev.reason} failed: {message}")


def evicted_offline_pods(done: list[str]) -> NodeEvent:
    return NodeEvent("Warning", "EvictedOfflinePods", f"evicted {len(done)} offline pod(s): {', '.join(done)}")


# --- pods as parsed ------------------------------------------------------------------------------------


def pod_notice(reason: str, message: str) -> NodeEvent:
    """A pod's annotation problem found by the pod cache (reason and words from `PodCache`)."""
    return NodeEvent("Warning", reason, message[:LIMIT])


# --- QoS knobs -----------------------------------------------------------------------------------------


def qos_applied(view: PodView, changes: Iterable[str]) -> NodeEvent:
    return NodeEvent(
        "Normal",
        "QosApplied",
        f"{'offline' if view.offline else 'online'} (qos-level {view.qos_level}): "
        f"{', '.join(sorted(set(changes)))}"[:LIMIT],
    )


def cgroup_write_failed(file: str, value: str, path: str, error: str) -> NodeEvent:
    return NodeEvent(
        "Warning", "CgroupWriteFailed", f"writing {file or 'oom_score_adj'}={value} in {path} failed: {error}"
    )


def journal_unwritable(error: str) -> NodeEvent:
    return NodeEvent("Warning", "JournalUnwritable", error)


def restored_unwanted(count: int, files: Iterable[str]) -> NodeEvent:
    return NodeEvent(
        "Normal", "QosRestored", f"restored {count} original value(s) no longer wanted ({', '.join(sorted(files))})"
    )


def restore_requested(applied: int, released: int) -> NodeEvent:
    return NodeEvent(
        "Normal",
        "QosRestored",
        f"restore requested: put back {applied} original value(s) ({released} no longer "
        "ours); knobs are not applied again until the agent restarts",
    )


# --- configuration -------------------------------------------------------------------------------------


def config_warnings(described: str) -> NodeEvent:
    return NodeEvent("Warning", "ConfigWarnings", described[:LIMIT])


def config_rejected(path: str | None, rejection: str | None) -> NodeEvent:
    return NodeEvent(
        "Warning",
        "ConfigRejected",
        f"configuration {path} rejected, the last good one stays: {rejection}"[:LIMIT],
    )


def config_applied(generation: int, why: str) -> NodeEvent:
    return NodeEvent("Normal", "ConfigApplied", f"configuration generation {generation} ({why})")
