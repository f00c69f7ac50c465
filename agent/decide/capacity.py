"""The capacity model (docs/design.md, "Capacity model"): B, X, what is published and when.

Per resource r, with A = allocatable, R_on = requests of online pods, U_non = smoothed usage of
everything that is not an offline pod, ratio and reserve from the config:

    B = max(0, A * ratio - U_non - reserve)                    the offline budget, shared by both modes
    published batch allocatable = max(0, B - Rp)                Rp = plain requests of offline pods
    X = max(0, B - Rb - max(0, A - R_on))                       Rb = batch-* requests of pods on the node

Published values are 0 where the node lacks the oversubscription label, r is not in
`volcano.sh/oversubscription-types`, the node is evicting, or the newest sample is stale; a published batch-*
value is never under Rb (`capacity_view`): kubelet re-admits every running pod against the Node's allocatable
when it restarts, and rejects (kills) the batch pods that no longer fit (kubernetes/kubernetes#68002). At Rb the
room for a new batch pod is 0 as at 0, so placement is the same; "withdrawn" and "opened" are about the room
(`room`). They are written on capacity ticks (`cadence`, every `capacity.period`) when `publication` says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from agent.config import CapacityConfig
from agent.decide.ops import CapacityView, UsageView
from agent.model import BATCH_KEY, X_KEY, Amounts, NodeView, PodView
from tidemark.apis import (
    ANN_NODE_USAGE,
    NODE_USAGE_FUTURE_SECONDS,
    RESOURCES,
    Resource,
    json_annotation,
    offline_starving,
)


@dataclass(frozen=True, slots=True)
class Terms:
    """Every input and output of the formula for one resource (for explanations and tests)."""

    resource: Resource
    allocatable: int
    ratio: float
    u_non: int
    reserve: int
    r_on: int
    rb: int
    rp: int
    B: int
    batch_allocatable: int
    X: int

    def describe(self) -> str:
        def q(v: float) -> str:
            return f"{v:.0f}m" if self.resource == "cpu" else f"{v / 2**20:.0f}Mi"

        return (
            f"{self.resource}: B = max(0, A {q(self.allocatable)} * {self.ratio:g} - U_non {q(self.u_non)} - reserve "
            f"{q(self.reserve)}) = {q(self.B)}; batch allocatable = max(0, B - Rp {q(self.rp)}) = "
            f"{q(self.batch_allocatable)}; X = max(0, B - Rb {q(self.rb)} - max(0, A - R_on {q(self.r_on)})) = "
            f"{q(self.X)}"
        )


def request_totals(pods: Sequence[PodView]) -> tuple[Amounts, Amounts, Amounts]:
    """(R_on, Rb, Rp): plain requests of online pods, batch-* requests of all pods, plain requests of offline pods."""
    r_on = rb = rp = Amounts()
    for p in pods:
        rb = rb + p.batch_requests
        if p.offline:
            rp = rp + p.requests
        else:
            r_on = r_on + p.requests
    return r_on, rb, rp


def compute_terms(
    node: NodeView, pods: Sequence[PodView], u_non: Amounts, cfg: CapacityConfig
) -> dict[Resource, Terms]:
    """The formula for both resources (computed whatever the labels; publishing decides what is shown)."""
    r_on, rb, rp = request_totals(pods)
    out: dict[Resource, Terms] = {}
    for r in RESOURCES:
        a = int(node.allocatable.get(r))
        u = round(u_non.get(r))
        reserve = cfg.reserve(r)
        b = max(0, math.floor(a * cfg.ratio(r) - u - reserve))
        ron, rbr, rpr = int(r_on.get(r)), int(rb.get(r)), int(rp.get(r))
        out[r] = Terms(
            resource=r,
            allocatable=a,
            ratio=cfg.ratio(r),
            u_non=u,
            reserve=reserve,
            r_on=ron,
            rb=rbr,
            rp=rpr,
            B=b,
            batch_allocatable=max(0, b - rpr),
            X=max(0, b - rbr - max(0, a - ron)),
        )
    return out


def zero_reasons(node: NodeView, resource: Resource, evicting: bool, stale: bool) -> list[str]:
    """Why the published value of `resource` is 0 (empty = the computed value is published)."""
    reasons = []
    if not node.oversubscription:
        reasons.append("the node lacks the volcano.sh/oversubscription label")
    if resource not in node.types:
        reasons.append(f"{resource} is not in volcano.sh/oversubscription-types")
    if evicting:
        reasons.append("the node is evicting")
    if stale:
        reasons.append("the newest sample is stale")
    return reasons


def _q(resource: Resource, v: float) -> str:
    return f"{v:.0f}m" if resource == "cpu" else f"{v / 2**20:.0f}Mi"


def zero_causes(node: NodeView, terms: Mapping[Resource, Terms], evicting: bool, stale: bool) -> tuple[str, ...]:
    """Why each resource's published batch value is 0, in words a user reads in the CapacityWithdrawn Event:
    a state (label, types, evicting, stale) or the formula (online usage leaves no budget, offline requests
    fill it)."""
    out: list[str] = []
    for r in RESOURCES:
        t = terms[r]
        reasons = zero_reasons(node, r, evicting, stale)
        if not reasons and t.batch_allocatable == 0:
            if t.B == 0:
                reasons = [
                    f"no budget: A {_q(r, t.allocatable)} x {t.ratio:g} - U_non {_q(r, t.u_non)} (online and system "
                    f"usage) - reserve {_q(r, t.reserve)} <= 0"
                ]
            else:
                reasons = [f"offline pods' plain requests {_q(r, t.rp)} fill B {_q(r, t.B)}"]
        if reasons:
            out.append(f"{r}: {'; '.join(reasons)}")
    return tuple(out)


def capacity_view(node: NodeView, terms: Mapping[Resource, Terms], evicting: bool, stale: bool) -> CapacityView:
    def pick(r: Resource, value: int) -> float:
        return 0.0 if zero_reasons(node, r, evicting, stale) else float(value)

    def bound(r: Resource) -> int:
        # at most the node's allocatable: the NodeReport gate refuses a batch value over the Node's capacity
        return min(terms[r].rb, max(0, terms[r].allocatable))

    def batch(r: Resource) -> float:
        return max(float(bound(r)), pick(r, terms[r].batch_allocatable))

    return CapacityView(
        zero_causes=zero_causes(node, terms, evicting, stale),
        B=Amounts(terms["cpu"].B, terms["memory"].B),
        X=Amounts(terms["cpu"].X, terms["memory"].X),
        batch_allocatable=Amounts(terms["cpu"].batch_allocatable, terms["memory"].batch_allocatable),
        batch_bound=Amounts(bound("cpu"), bound("memory")),
        published_batch=Amounts(batch("cpu"), batch("memory")),
        published_x=Amounts(pick("cpu", terms["cpu"].X), pick("memory", terms["memory"].X)),
    )


def room(published: int | None, bound: float) -> bool:
    """A published batch-* value leaves room for a new batch pod (more than the bound pods' requests, Rb)."""
    return published is not None and published > bound


def cadence(due: float | None, period: float, now: float) -> tuple[bool, float]:
    """(whether this cycle is a capacity tick, when the next one is due), drift-free every `period` seconds.

    `due` None: a tick at once. A due time more than a period ahead (a shorter period configured, or the
    wall clock stepped back) is pulled in to `now + period`.
    """
    if due is None or now >= due:
        nxt = due + period if due is not None else now + period
        return True, nxt if nxt > now else now + period
    return False, min(due, now + period)


def moved(old: int | None, new: int, threshold: float, floor: float = 0.0) -> bool:
    """Whether a published value should be rewritten: absent, withdrawn (a non-zero value going to 0), or moved
    by more than max(`threshold` x itself, `floor`); `floor` is an absolute amount (the node's share,
    `capacity.publish.floor` x allocatable), so a small B moving by 10 m is not a write."""
    if old is None:
        return True
    if new == old:
        return False
    if new == 0:
        return True
    return abs(new - old) > max(threshold * old, floor)


#: how a published value moves: "missing", "withdrawn" (to 0) and "decrease" (by more than
#: `capacity.publish.urgent_decrease` of it) are written at once, they protect the node; "opened" (from 0 past the
#: floor) too, it ends a state the CapacityWithdrawn Event announced; "trim" (a shallower decrease) and "increase"
#: wait for `capacity.publish.min_interval`
MoveKind = Literal["missing", "withdrawn", "decrease", "trim", "opened", "increase"]
#: the kinds written at once
URGENT: frozenset[str] = frozenset({"missing", "withdrawn", "decrease", "opened"})
#: One exception, in `_labelled`: X (the `volcano.sh/oversubscription-*` annotations) withdrawn from a value within
#: the floor is a "trim". X = B - Rb - max(0, A - R_on) hovers around 0 on a node whose batch pods fill its room: a
#: resync wrote 1-49m and the next tick's 0 was an urgent second write, minute after minute (a 50-node fleet,
#: 2026-12-02: 20 of the agents' 24 withdrawals). batch-* keeps the strict rule: its withdrawal is what stops new
#: offline pods on a node that starts evicting.


def publish_floors(cfg: CapacityConfig, allocatable: Amounts) -> Amounts:
    """Per resource, the absolute move a published value needs (`capacity.publish.floor` x allocatable); X within it
    of 0 neither withdraws urgently (`_labelled`) nor opens or closes (the CapacityPublished Event)."""
    return Amounts(*(cfg.publish_floor * max(0.0, allocatable.get(r)) for r in RESOURCES))


def move_kind(old: int | None, new: int, threshold: float, floor: float, urgent: float = 0.0) -> MoveKind | None:
    """What kind of move `old` -> `new` is under the publication rule (None: not a move worth a write); a decrease
    by at most `urgent` x `old` is a "trim"."""
    if not moved(old, new, threshold, floor):
        return None
    if old is None:
        return "missing"
    if new == 0:
        return "withdrawn"
    if old == 0:
        return "opened"
    if new > old:
        return "increase"
    return "decrease" if old - new > urgent * old else "trim"


def publish_due(kinds: Sequence[MoveKind | None], since: float | None, cfg: CapacityConfig) -> bool:
    """Whether the moves of one cycle are written now, `since` seconds after the last publication (None: no
    record). Urgent moves at once; an increase or a trim only `min_interval` (default: the resync, 60 s) after the
    last write, so a steady node publishes once a minute, 2 writes (issue 34 item 5), and a node whose spiky online
    pods move B by a little every few seconds too."""
    if any(k in URGENT for k in kinds):
        return True
    if since is None or since >= cfg.resync:
        return True
    return any(k in ("increase", "trim") for k in kinds) and since >= cfg.min_interval


#: (time, published batch, published X) of the capacity ticks within `capacity.publish.envelope`
PubHistory = tuple[tuple[float, Amounts, Amounts], ...]


def remember(history: PubHistory, cap: CapacityView, now: float, window: float) -> PubHistory:
    """`history` with this capacity tick's computed values, pruned to the last `window` seconds (empty when 0)."""
    if window <= 0:
        return ()
    return (*(h for h in history if now - h[0] < window), (now, cap.published_batch, cap.published_x))


def low_envelope(history: PubHistory, cap: CapacityView) -> CapacityView:
    """`cap` with each published value lowered to the least non-zero one of the recent ticks (`history`): what a
    publication that is not urgent writes, so a spiky node offers its trough and the next spike is no fall to
    write at once (issue 34 item 5: the fleet's loudest agent wrote at each resync and again one tick later). A
    value at 0 now stays 0 (a withdrawal is urgent anyway); a past 0 is skipped (it would withdraw at a resync what
    the node has again); batch-* never goes under the bound pods' requests."""
    def low(now: float, past: list[float], floor: float) -> float:
        if now <= 0:
            return now
        return max(floor, min([now, *(v for v in past if v > 0)]))

    b = [low(cap.published_batch.get(r), [h[1].get(r) for h in history], cap.batch_bound.get(r)) for r in RESOURCES]
    x = [low(cap.published_x.get(r), [h[2].get(r) for h in history], 0.0) for r in RESOURCES]
    return replace(cap, published_batch=Amounts(*b), published_x=Amounts(*x))


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class OfflineDoc:
    """node-usage's `offline`: the allowance the agent judges starvation by, percent of allocatable CPU, and its
    `eviction.cpu.satisfaction` (starved at or under it, as a fraction of the offline pods' CPU requests)."""

    allowance_pct: float
    satisfaction: float

    def starving(self, alloc: float, requests: float) -> bool:
        return offline_starving(self.allowance_pct * alloc / 100.0, requests, self.satisfaction)


def node_usage_json(usage: UsageView, now: float, offline: OfflineDoc | None = None) -> str:
    """`tidemark.io/node-usage`: smoothed kubepods usage in percent of allocatable, window and time; with
    the newest sample (`latest`) and the window's `p95` where known, which the scheduler's usage plugin
    filters and scores by, the online pods' part (`online`, the rescheduling plugin's "hot"), and the offline
    tier's allowance and the agent's satisfaction (`offline`: `allowance`, what the node leaves the tier now,
    agent.decide.tier `TierCpu.allowance`, in percent of allocatable CPU, and `satisfaction`: the rescheduling plugin
    moves offline pods off a node whose allowance is at or under it times their requests, the measure the agent
    evicts by for CPUStarvation, before it does); optional keys: older readers ignore them."""
    doc: dict[str, object] = {
        "cpu": round(usage.percent.cpu, 2),
        "memory": round(usage.percent.memory, 2),
        "window": f"{max(1, math.floor(usage.window_seconds + 0.5))}s",
        "time": rfc3339(now),
    }
    for key, amounts in (("latest", usage.newest_percent), ("p95", usage.p95_percent)):
        if amounts is not None:
            doc[key] = {"cpu": round(amounts.cpu, 2), "memory": round(amounts.memory, 2)}
    # the online pods' share of it (the window's mean): the scheduler's rescheduling plugin judges a node hot on CPU
    # by it, not by offline pods soaking idle CPU, and the usage plugin filters by the usage without the offline part;
    # a kubepods total not read yet counts all of it as online (0 would say "all offline": no node ever too busy)
    k = usage.kubepods
    doc["online"] = {
        "cpu": round(usage.percent.cpu * usage.online.cpu / k.cpu if k.cpu > 0 else usage.percent.cpu, 2),
        "memory": round(usage.percent.memory * usage.online.memory / k.memory if k.memory > 0
                        else usage.percent.memory, 2),
    }
    if offline is not None:
        doc["offline"] = {"allowance": round(max(0.0, offline.allowance_pct), 2), "satisfaction": offline.satisfaction}
    return json.dumps(doc)


@dataclass(frozen=True, slots=True)
class Publication:
    """What to write this cycle: annotation changes (None = delete), status extended resources, and why."""

    annotations: Mapping[str, str | None]
    status: Mapping[str, str]
    reasons: tuple[str, ...]
    #: moves found but held back this cycle (an increase within `min_interval` of the last publication)
    held: tuple[str, ...] = ()
    #: the offline tier turned starved or stopped being (`starving_flip`): written at once, not on the next tick
    starving_flip: bool = False
    #: the values written are `low_envelope`'s (a publication that is not urgent), not the newest
    enveloped: bool = False


def starving_flip(node: NodeView, offline: OfflineDoc | None, requests: float) -> str | None:
    """Why node-usage is due because the offline tier turned starved, or stopped being, by `offline`'s measure
    against what its pods request now (`requests`, milli) since the published document (the rescheduling plugin
    moves offline pods off a starving node; B may not move then: at 0 once the online load passes its target), else
    None."""
    alloc = node.allocatable.cpu
    if offline is None or alloc <= 0:
        return None
    doc = json_annotation(node.annotations.get(ANN_NODE_USAGE))
    old = doc.get("offline") if doc is not None else None
    old_pct = old.get("allowance") if isinstance(old, Mapping) else None
    was = (isinstance(old_pct, int | float) and not isinstance(old_pct, bool)
           and OfflineDoc(old_pct, offline.satisfaction).starving(alloc, requests))
    starving = offline.starving(alloc, requests)
    if was == starving:
        return None
    return (f"the offline tier's allowance {offline.allowance_pct * alloc / 100.0:.0f}m is "
            f"{'at or under' if starving else 'back over'} {offline.satisfaction:.0%} of the {requests:.0f}m its pods "
            "request")


def publication(
    node: NodeView, cap: CapacityView, usage: UsageView, cfg: CapacityConfig, now: float, stale: bool,
    offline: OfflineDoc | None = None, offline_requests: float = 0.0, low: CapacityView | None = None,
) -> Publication:
    """Publish thresholds as a pure function of the values on the Node (the last published) and `now`.

    Labelled nodes (`_labelled`): every key is written when one is missing, withdrawn (to 0) or decreased past
    the threshold and the floor (at once: these protect the node), increased past them (once `min_interval`
    passed since the last publication, the `time` in tidemark.io/node-usage), or the resync period passed.
    Nodes without the oversubscription label publish X 0 and batch-* at the bound pods' requests (0 when none) once
    where another non-zero value is left, then nothing. `low` (`low_envelope`): what a publication with no urgent
    move writes instead of `cap`'s newest values.
    """
    ann: dict[str, str | None] = {}
    status: dict[str, str] = {}
    reasons: list[str] = []
    held: tuple[str, ...] = ()
    usage_due = False
    enveloped = False
    if node.oversubscription:
        ann, status, reasons, held, enveloped = _labelled(node, cap, cfg, now, low)
        usage_due = bool(reasons)
    else:
        for r in RESOURCES:
            old_x, old_b = node.published_x.get(r), node.published_batch.get(r)
            if cfg.annotations and old_x not in (None, 0):
                ann[X_KEY[r]] = "0"
                reasons.append(
                    f"{X_KEY[r]} is {old_x} but the node lacks the oversubscription label: publishing 0 once"
                )
            bound = int(cap.batch_bound.get(r))
            if cfg.extended_resources and old_b not in (None, 0, bound):
                status[BATCH_KEY[r]] = str(bound)
                reasons.append(
                    f"{BATCH_KEY[r]} is {old_b} but the node lacks the oversubscription label: publishing "
                    + (f"{bound}, the batch pods' requests (kubelet re-admits them on a restart)" if bound else "0")
                )
        if node.colocation:
            if ANN_NODE_USAGE not in node.annotations:
                reasons.append(f"{ANN_NODE_USAGE} is missing")
                usage_due = True
            elif node.last_publish is not None and node.last_publish - now > NODE_USAGE_FUTURE_SECONDS:
                # never "fresh for ever": a time ahead of this clock (beyond skew) is stale, and replaced
                reasons.append(
                    f"{ANN_NODE_USAGE} is {node.last_publish - now:.0f} s in the future (beyond "
                    f"{NODE_USAGE_FUTURE_SECONDS:g} s of clock skew): treated as stale"
                )
                usage_due = True
            elif node.last_publish is None or now - node.last_publish >= cfg.resync:
                reasons.append(f"{ANN_NODE_USAGE} is older than {cfg.resync:g} s")
                usage_due = True
            usage_due = usage_due or bool(ann)
    flip = starving_flip(node, offline, offline_requests) if node.colocation or node.oversubscription else None
    if flip is not None:
        reasons.append(flip)
        usage_due = True
    if usage_due and not stale and usage.samples:
        ann[ANN_NODE_USAGE] = node_usage_json(usage, now, offline)
    return Publication(ann, status, tuple(reasons), held, flip is not None and ANN_NODE_USAGE in ann, enveloped)


def _labelled(
    node: NodeView, cap: CapacityView, cfg: CapacityConfig, now: float, low: CapacityView | None = None
) -> tuple[dict[str, str | None], dict[str, str], list[str], tuple[str, ...], bool]:
    """`publication` for a node with the oversubscription label: (annotations, status, reasons, held, whether the
    values written are `low`'s)."""
    want_ann, want_status = _wanted(cap, cfg)
    current: dict[str, tuple[int | None, Resource]] = {}
    for r in RESOURCES:
        current[X_KEY[r]] = (node.published_x.get(r), r)
        current[BATCH_KEY[r]] = (node.published_batch.get(r), r)
    found: list[str] = []
    kinds: list[MoveKind | None] = []
    floors = publish_floors(cfg, node.allocatable)
    for key, value in {**want_ann, **want_status}.items():
        old, r = current[key]
        floor = floors.get(r)
        kind = move_kind(old, value, cfg.publish_threshold, floor, cfg.urgent_decrease)
        hovering = kind == "withdrawn" and key in want_ann and old is not None and old <= floor
        if hovering:
            kind = "trim"  # X within the floor of 0 going to 0: a move of that size is not urgent (see URGENT)
        kinds.append(kind)
        if kind == "missing":
            found.append(f"{key} is missing or invalid on the Node")
        elif hovering:
            found.append(f"{key} withdrawn: {old} -> 0 (within {cfg.publish_floor:.0%} of allocatable of 0: not "
                         "urgent)")
        elif kind == "withdrawn":
            found.append(f"{key} withdrawn: {old} -> 0")
        elif kind == "opened":
            found.append(f"{key} opened: 0 -> {value}")
        elif kind == "trim":
            found.append(
                f"{key} decreased from {old} to {value} (more than {cfg.publish_threshold:.0%} of it and "
                f"{cfg.publish_floor:.0%} of allocatable, at most {cfg.urgent_decrease:.0%} of it: not urgent)"
            )
        elif kind is not None:
            found.append(
                f"{key} {kind}d from {old} to {value} (more than {cfg.publish_threshold:.0%} of it and "
                f"{cfg.publish_floor:.0%} of allocatable)"
            )
    since = None if node.last_publish is None else now - node.last_publish
    if since is None:
        found.append("no record of an earlier publication (tidemark.io/node-usage absent)")
    elif since >= cfg.resync:
        found.append(f"{since:.0f} s since the last publication (resync every {cfg.resync:g} s)")
    if not found:
        return {}, {}, [], (), False
    if not publish_due(kinds, since, cfg):
        wait = cfg.min_interval - (since or 0.0)
        return {}, {}, [], (*found, f"an increase or a shallow decrease waits {wait:.0f} s more (min_interval "
                                    f"{cfg.min_interval:g} s)"), False
    enveloped = low is not None and not any(k in URGENT for k in kinds)
    if enveloped and low is not None:
        low_ann, low_status = _wanted(low, cfg)
        newest = {**want_ann, **want_status}
        lowered = [f"{k} {v} (newest {newest[k]})" for k, v in {**low_ann, **low_status}.items() if v != newest[k]]
        if lowered:
            found.append(f"the lowest of the last {cfg.envelope:g} s written: {', '.join(lowered)}")
        want_ann, want_status = low_ann, low_status
    return ({k: str(v) for k, v in want_ann.items()}, {k: str(v) for k, v in want_status.items()}, found, (),
            enveloped)


def _wanted(cap: CapacityView, cfg: CapacityConfig) -> tuple[dict[str, int], dict[str, int]]:
    """The annotation and status values `cap` publishes (the keys `capacity.publish` turns on)."""
    ann = {X_KEY[r]: int(cap.published_x.get(r)) for r in RESOURCES} if cfg.annotations else {}
    status = {BATCH_KEY[r]: int(cap.published_batch.get(r)) for r in RESOURCES} if cfg.extended_resources else {}
    return ann, status
