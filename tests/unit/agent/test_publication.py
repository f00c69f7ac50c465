"""The publication rule (issue 34 item 5): a small B on a spiky node is quiet, decreases that protect the node
are not delayed; and a withdrawal to 0 names its cause (issue 32 item 6)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from agent.config import CapacityConfig
from agent.daemon.apijobs import node_events
from agent.decide.capacity import PubHistory, capacity_view, compute_terms, low_envelope, moved, publication, remember
from agent.decide.ops import CapacityView, Plan, UsageView
from agent.model import AgentState, Amounts, NodeView
from tidemark.apis import NodeName
from tidemark.nodereport import ReportSpec

from .helpers import GiB, node, pod

CFG = CapacityConfig()
#: the rule with `capacity.publish.envelope` on (off by default)
ENV = replace(CFG, envelope=60.0)
USAGE = UsageView(percent=Amounts(60.0, 20.0), samples=60, window_seconds=60.0)
START = 1_700_000_000.0


class FakeNode:
    """The Node as the agent's writes leave it: each publication's values and its `time` (a fake clock)."""

    def __init__(self, cpu: float = 4000, mem: float = 16 * GiB) -> None:
        self.cpu, self.mem = cpu, mem
        self.batch: dict[str, int | None] = {"cpu": None, "memory": None}
        self.x: dict[str, int | None] = {"cpu": None, "memory": None}
        self.last: float | None = None
        self.writes: list[float] = []
        self.history: PubHistory = ()

    def view(self) -> NodeView:
        return node(cpu=self.cpu, mem=self.mem, published_batch=self.batch, published_x=self.x, last_publish=self.last,
                    annotations={"tidemark.io/node-usage": "{}"} if self.last is not None else None)  # fmt: skip

    def step(self, cap: CapacityView, now: float, cfg: CapacityConfig = CFG, envelope: bool = False) -> bool:
        """One capacity tick; with `envelope` the daemon's low envelope (agent.decide.plan) as well."""
        low = low_envelope(self.history, cap) if envelope and cfg.envelope > 0 else None
        pub = publication(self.view(), cap, USAGE, cfg, now, stale=False, low=low)
        if envelope:
            self.history = remember(self.history, cap, now, cfg.envelope)
        if not (pub.annotations or pub.status):
            return False
        for key, value in pub.status.items():
            self.batch["cpu" if key.endswith("cpu") else "memory"] = int(value)
        for key, ann in pub.annotations.items():
            if key.startswith("volcano.sh/oversubscription-") and ann is not None:
                self.x["cpu" if key.endswith("cpu") else "memory"] = int(ann)
        self.last = now
        self.writes.append(now)
        return True


def _cap(batch_cpu: float, batch_mem: float = 4 * GiB) -> CapacityView:
    return CapacityView(published_batch=Amounts(batch_cpu, batch_mem), published_x=Amounts(0, 0))


def _max_writes_per_minute(publications: list[float], since: float) -> int:
    """The most API writes in any 60 s starting at a publication from `since` on (steady state): each publication
    is 2 writes, the NodeReport and the Node (docs/scale.md)."""
    steady = [w for w in publications if w >= since]
    return max((2 * sum(1 for v in steady if w <= v < w + 60) for w in steady), default=0)


def _old_rule_publications(values: list[int]) -> list[float]:
    """The same values through the rule before (a 10 % move of the published value, or the 60 s resync)."""
    out: list[float] = []
    prev: int | None = None
    for i, b in enumerate(values):
        now = START + 10 * i
        if prev is None or moved(prev, b, CFG.publish_threshold) or now - out[-1] >= CFG.resync:
            out.append(now)
            prev = b
    return out


@pytest.mark.parametrize(
    ("cpu", "values"),
    [
        (4000, [80, 100, 120, 140, 160, 180]),  # B near 100m on 4 cores, online pods spiky around 2.7 cores
        (1000, [375, 390, 400, 410, 425]),  # a hollow node of the fleet (1 core), B near 400m within 5 % of it
    ],
)
def test_spiky_small_b_writes_at_most_twice_a_minute(cpu: float, values: list[int]) -> None:
    """B wanders among `values` every capacity tick (10 s) for 10 minutes on a fake clock. The relative rule
    alone wrote more than twice a minute (100m -> 111m is 11 %); now only the resync writes."""
    rng = random.Random(7)
    trace = [rng.choice(values) for _ in range(61)]
    n = FakeNode(cpu=cpu)
    for i, b in enumerate(trace):
        n.step(_cap(b), START + 10 * i)
    assert _max_writes_per_minute(n.writes, START + 60) <= 2
    assert _max_writes_per_minute(_old_rule_publications(trace), START + 60) > 2


def test_shallow_decreases_of_a_spiky_node_wait_for_the_interval() -> None:
    """A hollow node of the fleet (1 core: the floor is 50m) whose spiky online pods swing B between 300m and 400m
    every 20 s: each fall passes the threshold and the floor. By default every fall is written at once (3 writes a
    minute and more; the fleet's worst agent wrote 2.91); with `capacity.publish.urgent_decrease` 0.3 a fall by at
    most 30 % waits the interval with the increases, 2 writes a minute. A fall past 30 % is still written in its
    own tick."""
    trace = [300 if (i // 2) % 2 else 400 for i in range(61)]
    old, new = FakeNode(cpu=1000), FakeNode(cpu=1000)
    quiet = CFG
    assert CFG.urgent_decrease == 0.30  # the default
    loud = replace(CFG, urgent_decrease=0.0)  # every decrease at once
    for i, b in enumerate(trace):
        old.step(_cap(b), START + 10 * i, loud)
        new.step(_cap(b), START + 10 * i, quiet)
    assert _max_writes_per_minute(old.writes, START + 60) > 2
    assert _max_writes_per_minute(new.writes, START + 60) <= 2
    n = FakeNode(cpu=1000)
    assert n.step(_cap(800), START, quiet)
    assert n.step(_cap(480), START + 1, quiet) and n.batch["cpu"] == 480  # a 40 % fall: at once
    pub = publication(n.view(), _cap(380), USAGE, quiet, START + 2, stale=False)  # 21 %, 100m: waits
    assert not pub.status and any("not urgent" in h for h in pub.held), pub.held
    assert n.step(_cap(380), START + 61, quiet)


def test_rising_and_falling_b_decreases_at_once_increases_after_the_interval() -> None:
    """B alternating 1000m / 2000m on a 4-core node every tick: every decrease is written in its own tick (it
    protects the node), every increase `min_interval` (60 s) or more after the write before it."""
    n = FakeNode()
    n.step(_cap(2000), START)
    for i in range(1, 61):
        before, last = n.batch["cpu"], n.last
        value = 1000 if i % 2 else 2000
        wrote = n.step(_cap(value), START + 10 * i)
        assert before is not None and last is not None
        if value < before:
            assert wrote
        elif value > before:
            assert wrote == (START + 10 * i - last >= CFG.min_interval)


def test_decrease_past_the_floor_is_immediate_and_an_increase_waits() -> None:
    n = FakeNode()
    assert n.step(_cap(2000), START)
    assert n.step(_cap(1000), START + 5)  # a decrease past max(10 %, 5 % of 4000m = 200m): at once
    assert n.batch["cpu"] == 1000
    pub = publication(n.view(), _cap(2000), USAGE, CFG, START + 15, stale=False)
    assert not pub.status and any("waits" in h for h in pub.held) and any("increased" in h for h in pub.held)
    assert not n.step(_cap(2000), START + 55)
    assert n.step(_cap(2000), START + 65)  # 60 s after the last write
    assert not n.step(_cap(1850), START + 70)  # 150m < the 200m floor: not a write
    assert n.step(_cap(150), START + 71)


def test_withdrawal_to_zero_is_immediate_even_below_the_floor() -> None:
    from agent.decide.capacity import move_kind

    n = FakeNode()
    n.step(_cap(150), START)
    assert n.step(_cap(0), START + 1)
    assert n.batch["cpu"] == 0
    assert move_kind(150, 0, 0.10, 200.0) == "withdrawn"
    assert move_kind(0, 150, 0.10, 200.0) is None  # reopening below the floor waits for more
    assert move_kind(0, 250, 0.10, 200.0) == "opened"
    assert move_kind(100, 350, 0.10, 200.0) == "increase"
    assert n.step(_cap(250), START + 2)  # reopening past the floor ends the withdrawal at once
    assert move_kind(None, 0, 0.10, 200.0) == "missing"


def _cap_x(x_cpu: float, batch_cpu: float = 1000) -> CapacityView:
    return CapacityView(published_batch=Amounts(batch_cpu, 4 * GiB), published_x=Amounts(x_cpu, 0))


def test_x_hovering_within_the_floor_of_zero_rides_the_resync_and_batch_still_withdraws_at_once() -> None:
    """X (volcano.sh/oversubscription-cpu) at 1-49m on a 1-core node whose batch pods fill its room: the resync wrote
    it and the next tick's 0 was a second, urgent write every minute (the 50-node fleet of 2026-12-02). Within the
    floor (5 % of allocatable: 200m here) its withdrawal waits like a shallow decrease; past it, it is at once."""
    n = FakeNode()  # 4 cores: the floor is 200m
    assert n.step(_cap_x(150), START)
    assert not n.step(_cap_x(0), START + 10)  # 150m -> 0, within the floor: held
    pub = publication(n.view(), _cap_x(0), USAGE, CFG, START + 10, stale=False)
    assert any("withdrawn: 150 -> 0 (within 5% of allocatable of 0: not urgent)" in h for h in pub.held), pub.held
    assert n.x["cpu"] == 150
    assert n.step(_cap_x(0), START + 60) and n.x["cpu"] == 0  # the resync writes it
    assert n.step(_cap_x(150), START + 120) and n.x["cpu"] == 150  # the next resync: hovering again
    assert not n.step(_cap_x(0), START + 130)  # once a minute, not twice
    m = FakeNode()
    assert m.step(_cap_x(250), START)
    assert m.step(_cap_x(0), START + 10) and m.x["cpu"] == 0  # past the floor: at once
    b = FakeNode()
    assert b.step(_cap_x(0, batch_cpu=150), START)
    assert b.step(_cap_x(0, batch_cpu=0), START + 10) and b.batch["cpu"] == 0  # batch-* within the floor: at once


def test_floor_and_interval_zero_are_the_old_rule() -> None:
    cfg = CapacityConfig(publish_floor=0.0, min_interval=0.0)
    n = FakeNode()
    n.step(_cap(100), START, cfg)
    assert n.step(_cap(111), START + 10, cfg)  # 11 %: a write, as before


def _plan(cap: CapacityView, evicting: bool = False) -> Plan:
    status = {"kubernetes.io/batch-cpu": str(int(cap.published_batch.cpu))}
    return Plan(NodeName("n1"), {}, UsageView(), cap, evicting, report=ReportSpec({}, status), capacity_tick=True)


def test_withdrawal_names_its_cause_in_a_capacity_withdrawn_event() -> None:
    was = node(published_batch={"cpu": 900, "memory": GiB}, published_x={"cpu": 0, "memory": 0})
    terms = compute_terms(was, [], Amounts(1000, 2 * GiB), CFG)
    evicting = capacity_view(was, terms, evicting=True, stale=False)
    (event,) = node_events(_plan(evicting, evicting=True), AgentState(), was, 3)[-1:]
    assert event.reason == "CapacityWithdrawn" and event.type == "Warning"
    assert "cpu: the node is evicting" in event.message
    busy = capacity_view(was, compute_terms(was, [], Amounts(3000, 2 * GiB), CFG), evicting=False, stale=False)
    (event,) = node_events(_plan(busy), AgentState(), was, 3)
    assert event.reason == "CapacityWithdrawn" and "no budget" in event.message and "U_non 3000m" in event.message
    opened = replace(busy, published_batch=Amounts(500, GiB), zero_causes=())
    (event,) = node_events(_plan(opened), AgentState(), node(published_batch={"cpu": 0, "memory": GiB}), 3)
    assert event.reason == "CapacityPublished"


def test_x_hovering_within_the_floor_opens_and_closes_nothing() -> None:
    """X written 13m at one resync and 0 at the next made a CapacityPublished Event a minute on a 50-node fleet's
    busiest agents (2026-12-02): X opens and closes past the floor it is published by."""
    floor = Amounts(200, GiB)  # 5 % of 4 cores; memory's is not in play here
    status = {"kubernetes.io/batch-cpu": "900"}

    def plan(x_cpu: float) -> Plan:
        cap = CapacityView(published_batch=Amounts(900, GiB), published_x=Amounts(x_cpu, 0))
        report = ReportSpec({"volcano.sh/oversubscription-cpu": str(int(x_cpu))}, status)
        return Plan(NodeName("n1"), {}, UsageView(), cap, False, report=report, capacity_tick=True)

    def was(x_cpu: float) -> NodeView:
        return node(published_batch={"cpu": 900, "memory": GiB}, published_x={"cpu": x_cpu, "memory": 0})

    assert node_events(plan(13), AgentState(), was(0), 3, floor) == ()
    assert node_events(plan(0), AgentState(), was(13), 3, floor) == ()
    (event,) = node_events(plan(250), AgentState(), was(0), 3, floor)  # past the floor: it opened
    assert event.reason == "CapacityPublished"
    (event,) = node_events(plan(13), AgentState(), was(0), 3)  # without a floor, as before
    assert event.reason == "CapacityPublished"


def test_batch_capacity_never_goes_under_the_bound_batch_pods_requests() -> None:
    """kubelet re-admits every running pod against the Node's allocatable when it restarts and rejects the batch
    pods that no longer fit (kubernetes/kubernetes#68002): a B that fell under Rb publishes Rb, which leaves no room
    for a new batch pod (as 0 did) and keeps the running ones admissible. Withdrawn is about the room."""
    bound = [pod("b", level=-1, qos="BestEffort", bcpu=300, bmem=GiB)]
    was = node(published_batch={"cpu": 900, "memory": 2 * GiB}, published_x={"cpu": 0, "memory": 0})
    busy = capacity_view(was, compute_terms(was, bound, Amounts(3000, 2 * GiB), CFG), evicting=False, stale=False)
    assert busy.B.cpu == 0 and busy.batch_allocatable.cpu == 0
    assert busy.published_batch.cpu == 300 and busy.batch_bound == Amounts(300, GiB)
    (event,) = node_events(_plan(busy), AgentState(), was, 3)
    assert event.reason == "CapacityWithdrawn" and "300m (= the bound batch pods' requests)" in event.message
    assert "no budget" in event.message
    evicting = capacity_view(was, compute_terms(was, bound, Amounts(1000, 2 * GiB), CFG), evicting=True, stale=False)
    assert evicting.published_batch.cpu == 300  # evicting, stale, unlabelled: the same floor
    # an unlabelled node publishes the floor once, not 0, while batch pods still run on it
    off = node(oversubscription=False, published_batch={"cpu": 900, "memory": GiB}, published_x={"cpu": 0})
    cap = capacity_view(off, compute_terms(off, bound, Amounts(1000, 2 * GiB), CFG), evicting=False, stale=False)
    pub = publication(off, cap, UsageView(), CFG, START, stale=False)
    assert pub.status == {"kubernetes.io/batch-cpu": "300"}  # memory already at the floor: nothing to write
    assert any("kubelet re-admits them" in r for r in pub.reasons)
    gone = node(oversubscription=False, published_batch={"cpu": 300, "memory": GiB}, published_x={"cpu": 0})
    cap = capacity_view(gone, compute_terms(gone, [], Amounts(1000, 2 * GiB), CFG), evicting=False, stale=False)
    assert publication(gone, cap, UsageView(), CFG, START, stale=False).status == {
        "kubernetes.io/batch-cpu": "0", "kubernetes.io/batch-memory": "0"}  # the pods finished: 0 once


def test_plan_says_an_increase_waits_and_publishes_it_on_the_resync() -> None:
    """Through `decide`: B rose past the bound 20 s after a publication, so the tick explains the wait."""
    from agent.decide import decide
    from tests.unit.agent.test_plan import CFG as PLAN_CFG
    from tests.unit.agent.test_plan import NOW as T
    from tests.unit.agent.test_plan import snap, window_at

    first = decide(snap(node(), samples=window_at(T, 2500)), PLAN_CFG, T)
    c = first.capacity
    low = {"cpu": int(c.published_batch.cpu) - 500, "memory": int(c.published_batch.memory)}
    x = {"cpu": int(c.published_x.cpu), "memory": int(c.published_x.memory)}
    current = node(last_publish=T, annotations={"tidemark.io/node-usage": "{}"}, published_batch=low, published_x=x)
    p = decide(snap(current, samples=window_at(T + 20, 2500), state=first.next_state, new=1), PLAN_CFG, T + 20)
    assert p.capacity_tick and p.report is None
    assert any("publishing waits" in e and "increased" in e for e in p.explanations)
    later = replace(first.next_state, capacity_due=T + 60)
    p = decide(snap(current, samples=window_at(T + 60, 2500), state=later, new=1), PLAN_CFG, T + 60)
    assert p.report is not None and p.report.resources["kubernetes.io/batch-cpu"] == str(int(c.published_batch.cpu))


def test_a_spiky_node_publishes_its_trough_once_a_minute() -> None:
    """The fleet's loudest agent (hollow-0003, docs/scale.md): B 400m on a 1-core node, 200m for one tick in four
    (a spike of the online pods), a fall past `urgent_decrease`. Writing the newest value at each resync, a resync
    in a calm phase is followed by an urgent fall at the next spike: 2 publications a minute (4 writes). With the
    low envelope a publication that is not urgent writes the trough of the last minute, so the spikes are no falls:
    1 a minute (2 writes), the goal."""
    trace = [200 if i % 4 == 3 else 400 for i in range(62)]
    newest, low = FakeNode(cpu=1000), FakeNode(cpu=1000)
    for i, b in enumerate(trace):
        newest.step(_cap(b), START + 10 * i)
        low.step(_cap(b), START + 10 * i, ENV, envelope=True)
    assert _max_writes_per_minute(newest.writes, START + 120) > 2
    assert _max_writes_per_minute(low.writes, START + 120) <= 2
    assert low.batch["cpu"] == 200  # the trough, not a calm phase's 400m


def test_the_envelope_never_delays_what_protects_the_node() -> None:
    """An urgent fall, a withdrawal and the first publication write the newest value in their own tick; a past 0
    is not taken at a resync (it would withdraw what the node has again); batch-* stays at least the bound pods'
    requests; 0, the default, turns the envelope off."""
    n = FakeNode(cpu=1000)
    assert n.step(_cap(800), START, ENV, envelope=True) and n.batch["cpu"] == 800  # first: the newest
    assert n.step(_cap(400), START + 10, ENV, envelope=True) and n.batch["cpu"] == 400  # a 50 % fall: at once
    assert n.step(_cap(0), START + 20, ENV, envelope=True) and n.batch["cpu"] == 0  # withdrawn: at once
    assert n.step(_cap(600), START + 30, ENV, envelope=True) and n.batch["cpu"] == 600  # opened: the newest, at once
    assert n.step(_cap(700), START + 90, ENV, envelope=True) and n.batch["cpu"] == 400  # resync: the least non-zero
    history: PubHistory = ((START, Amounts(100, GiB), Amounts(0, 0)),)
    bound = CapacityView(published_batch=Amounts(500, 2 * GiB), published_x=Amounts(50, 0),
                         batch_bound=Amounts(300, 0))  # fmt: skip
    got = low_envelope(history, bound)
    assert got.published_batch == Amounts(300, GiB) and got.published_x == Amounts(50, 0)
    assert remember(history, bound, START + 1, 0.0) == ()
    assert len(remember(history, bound, START + 61, 60.0)) == 1  # the old tick pruned, this one kept
    on, off = FakeNode(cpu=1000), FakeNode(cpu=1000)
    for i, b in enumerate([800, 700, 800, 700, 800, 700, 800]):  # 700m is a shallow fall: it waits
        on.step(_cap(b), START + 10 * i, ENV, envelope=True)
        off.step(_cap(b), START + 10 * i, CFG, envelope=True)  # the default: off
    assert off.writes[-1] == on.writes[-1] == START + 60  # the resync
    assert off.batch["cpu"] == 800 and on.batch["cpu"] == 700  # the newest, or the least of the last minute
