"""The API side of one decision: the plan's NodeReport intent and evictions as an `ApiJob` for the worker.

Nothing is pruned or added here: the plan already says what is due (capacity keys only on capacity
ticks or with an evicting change, see `agent.decide.plan`). This module only packs the plan's report
intent (`tidemark.nodereport.ReportSpec`, as decided) and evictions, with the Node events that belong to
them (`agent.daemon.wording`), for `ApiWorker`, which writes them on its own thread (the report before
the first eviction). A job the worker has not started yet is merged with the next one (`merge`: each
key's newest value wins, the newest decision's evictions), so during an outage the writes coalesce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.daemon import wording
from agent.decide.capacity import room
from agent.decide.ops import EvictPod, Plan
from agent.model import X_KEY, ZERO, AgentState, Amounts, NodeView
from tidemark.apis import RESOURCES
from tidemark.nodereport import ReportSpec


@dataclass(frozen=True, slots=True)
class ApiJob:
    """The API writes of one decision (see the module docstring)."""

    #: what the decision wants on its Node (None: nothing to write)
    report: ReportSpec | None = None
    evictions: tuple[EvictPod, ...] = ()
    #: the Node already carries the evicting annotation (as last seen by the main loop)
    node_marked: bool = False
    #: wall time of the sample (or event) that triggered the job, for the reaction-latency metric
    trigger: float | None = None
    #: Node events to write once the report is written
    node_events: tuple[wording.NodeEvent, ...] = ()
    #: the node object to attach events to (kind, name, uid)
    node_ref: Mapping[str, Any] = field(default_factory=dict)

    def empty(self) -> bool:
        return (self.report is None or self.report.empty()) and not self.evictions


def merge(old: ApiJob, new: ApiJob) -> ApiJob:
    """A job not started yet, superseded: each key's newest value wins, the newest evictions."""
    triggers = [t for t in (old.trigger, new.trigger) if t is not None]
    events = tuple(dict.fromkeys((*old.node_events, *new.node_events)))
    report = new.report if old.report is None else old.report.merged(new.report) if new.report else old.report
    return replace(new, report=report, trigger=min(triggers) if triggers else None, node_events=events)


def capacity_opened_or_closed(plan: Plan, node: NodeView, x_floor: Amounts = ZERO) -> bool:
    """A published value appears, or goes from 0 to some or from some to 0: worth a CapacityPublished event. X opens
    and closes past `x_floor` (`capacity.publish.floor` of allocatable): X hovers around 0 on a node whose batch pods
    fill its room, and an Event at each resync that wrote 13m or 0 was the last steady write over 2 a minute of a
    50-node fleet's busiest agents (2026-12-02).

    Not every move: on a fleet every agent republishes as online load drifts, and an Event per publication was
    the agent's most frequent write (docs/scale.md) and used up the recorder's per-object budget, silencing
    the rare Events that matter. The amounts are in the NodeReport, the Node and the metrics."""
    def state(old: int | None, new: int, bound: float = 0.0) -> bool:
        return old is None or room(old, bound) != room(new, bound)

    c = plan.capacity
    return any(
        state(node.published_x.get(r), int(c.published_x.get(r)), x_floor.get(r))
        or state(node.published_batch.get(r), int(c.published_batch.get(r)), c.batch_bound.get(r))
        for r in RESOURCES
    )


def node_events(
    plan: Plan, previous: AgentState, node: NodeView, consecutive: int, x_floor: Amounts = ZERO
) -> tuple[wording.NodeEvent, ...]:
    """The Node events of a decision: the evicting state flipping, offline capacity opening or closing (X past
    `x_floor`)."""
    events: list[wording.NodeEvent] = []
    was_evicting = previous.watermarks.evicting
    if plan.evicting and not was_evicting:
        events.append(wording.evicting_started(plan, node, consecutive))
    elif was_evicting and not plan.evicting:
        events.append(wording.evicting_cleared(plan, consecutive))
    report = plan.report or ReportSpec()
    publishes = bool(report.resources) or any(k in report.annotations for k in X_KEY.values())
    if publishes and capacity_withdrawn(plan, node):
        events.append(wording.capacity_withdrawn(plan))
    elif plan.capacity_tick and publishes and capacity_opened_or_closed(plan, node, x_floor):
        events.append(wording.capacity_published(plan))
    return tuple(events)


def capacity_withdrawn(plan: Plan, node: NodeView) -> bool:
    """A published batch-* value stops leaving room for a new batch pod (to 0, or down to the bound pods' requests,
    `capacity.room`): a CapacityWithdrawn event names the cause (issue 32 item 6)."""
    c = plan.capacity
    return any(
        room(node.published_batch.get(r), c.batch_bound.get(r))
        and not room(int(c.published_batch.get(r)), c.batch_bound.get(r))
        for r in RESOURCES
    )


def api_job(
    plan: Plan,
    previous: AgentState,
    node: NodeView,
    node_ref: Mapping[str, Any],
    *,
    consecutive: int,
    trigger: float,
    x_floor: Amounts = ZERO,
) -> ApiJob:
    """The plan's API writes as they are; `previous` is the state the decision started from; `x_floor`: where X
    counts as open for the CapacityPublished Event (`capacity_opened_or_closed`)."""
    return ApiJob(
        report=plan.report,
        evictions=plan.evictions,
        node_marked=node.evicting_annotation,
        trigger=trigger,
        node_events=node_events(plan, previous, node, consecutive, x_floor),
        node_ref=node_ref,
    )
