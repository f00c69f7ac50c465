"""The API side of one decision: the plan's Node patches and evictions as an `ApiJob` for the worker.

Nothing is pruned or added here: the plan already says what is due (capacity keys only on capacity
ticks or with an evicting change, see `agent.decide.plan`). This module only packs the plan's patches
and evictions, with the Node events that belong to them (`agent.daemon.wording`), for `ApiWorker`,
which writes them on its own thread (the Node patch before the first eviction). A job the worker has
not started yet is merged with the next one (`merge`: annotation keys newest wins, the newest
decision's evictions), so during an outage the writes coalesce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.daemon import wording
from agent.decide.ops import EvictPod, Plan
from agent.model import X_KEY, AgentState, NodeView
from tidemark.apis import ANN_OFFLINE_JOB_EVICTING, RESOURCES


@dataclass(frozen=True, slots=True)
class ApiJob:
    """The API writes of one decision (see the module docstring)."""

    node_patch: Mapping[str, Any] | None = None
    status_patch: Mapping[str, Any] | None = None
    evictions: tuple[EvictPod, ...] = ()
    #: the Node already carries the evicting annotation (as last seen by the main loop)
    node_marked: bool = False
    #: wall time of the sample (or event) that triggered the job, for the reaction-latency metric
    trigger: float | None = None
    #: Node events to write once the node patch landed
    node_events: tuple[wording.NodeEvent, ...] = ()
    #: the node object to attach events to (kind, name, uid)
    node_ref: Mapping[str, Any] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.node_patch or self.status_patch or self.evictions)


def _merge_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if not old:
        return new
    if not new:
        return old
    out: dict[str, Any] = {}
    for key in ("metadata", "status"):
        a, b = old.get(key) or {}, new.get(key) or {}
        if a or b:
            merged: dict[str, Any] = {}
            for sub in set(a) | set(b):
                x, y = a.get(sub), b.get(sub)
                merged[sub] = {**x, **y} if isinstance(x, Mapping) and isinstance(y, Mapping) else (y or x)
            out[key] = merged
    spec = new.get("spec") if "spec" in new else old.get("spec")
    if spec is not None:
        out["spec"] = spec
    return out


def merge(old: ApiJob, new: ApiJob) -> ApiJob:
    """A job not started yet, superseded: patches merged (newest key wins), the newest evictions."""
    triggers = [t for t in (old.trigger, new.trigger) if t is not None]
    events = tuple(dict.fromkeys((*old.node_events, *new.node_events)))
    return replace(
        new,
        node_patch=_merge_patch(old.node_patch, new.node_patch),
        status_patch=_merge_patch(old.status_patch, new.status_patch),
        trigger=min(triggers) if triggers else None,
        node_events=events,
    )


def marks_evicting(body: Mapping[str, Any] | None) -> bool | None:
    """True/False when the patch sets/removes the evicting annotation, None when it leaves it."""
    if not body:
        return None
    ann = (body.get("metadata") or {}).get("annotations") or {}
    if ANN_OFFLINE_JOB_EVICTING not in ann:
        return None
    return ann[ANN_OFFLINE_JOB_EVICTING] is not None


def capacity_opened_or_closed(plan: Plan, node: NodeView) -> bool:
    """A published value appears, or goes from 0 to some or from some to 0: worth a CapacityPublished event.

    Not every move: on a fleet every agent republishes as online load drifts, and an Event per publication was
    the agent's most frequent write (docs/scale.md) and used up the recorder's per-object budget, silencing
    the rare Events that matter. The amounts are in the NodeReport, the Node and the metrics."""
    def state(old: int | None, new: int) -> bool:
        return old is None or (old == 0) != (new == 0)

    return any(
        state(node.published_x.get(r), int(plan.capacity.published_x.get(r)))
        or state(node.published_batch.get(r), int(plan.capacity.published_batch.get(r)))
        for r in RESOURCES
    )


def node_events(plan: Plan, previous: AgentState, node: NodeView, consecutive: int) -> tuple[wording.NodeEvent, ...]:
    """The Node events of a decision: the evicting state flipping, offline capacity opening or closing."""
    events: list[wording.NodeEvent] = []
    was_evicting = previous.watermarks.evicting
    if plan.evicting and not was_evicting:
        events.append(wording.evicting_started(plan, node, consecutive))
    elif was_evicting and not plan.evicting:
        events.append(wording.evicting_cleared(plan, consecutive))
    annotations = (plan.node_patch.body.get("metadata") or {}).get("annotations") or {} if plan.node_patch else {}
    publishes = plan.node_status_patch is not None or any(k in annotations for k in X_KEY.values())
    if plan.capacity_tick and publishes and capacity_opened_or_closed(plan, node):
        events.append(wording.capacity_published(plan))
    return tuple(events)


def api_job(
    plan: Plan,
    previous: AgentState,
    node: NodeView,
    node_ref: Mapping[str, Any],
    *,
    consecutive: int,
    trigger: float,
) -> ApiJob:
    """The plan's API writes as they are; `previous` is the state the decision started from."""
    return ApiJob(
        node_patch=dict(plan.node_patch.body) if plan.node_patch else None,
        status_patch=dict(plan.node_status_patch.body) if plan.node_status_patch else None,
        evictions=plan.evictions,
        node_marked=node.evicting_annotation,
        trigger=trigger,
        node_events=node_events(plan, previous, node, consecutive),
        node_ref=node_ref,
    )
