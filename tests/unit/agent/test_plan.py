"""`decide` end to end on snapshots: the label table, evicting, publishing, the admission guard."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import AgentConfig, EvictionConfig
from agent.config_tier import EvictionCpuConfig
from agent.decide import Plan, decide
from agent.decide.plan import initial_state
from agent.model import AgentState, Sample, Snapshot, WatermarkState
from agent.render import plan_json
from tidemark.nodereport import ReportSpec

from .helpers import GiB, node, pod, sample

NOW = 1_700_000_000.0
#: these tests hold Volcano's node measure (offline usage counts against the CPU watermark); the satisfaction measure,
#: the default, is tested in tests/unit/agent/test_tier.py
CFG = AgentConfig(eviction_cpu=EvictionCpuConfig(measure="node"))
PODS = (
    pod("web", cpu=2000, mem=4 * GiB, created=1),
    pod("job-a", level=-1, qos="BestEffort", created=2),
    pod("job-b", level=-2, qos="BestEffort", created=3),
    pod("sys", level=-1, qos="BestEffort", ns="kube-system"),
)


def busy_samples(kube_cpu: float, n: int = 3, node_cpu: float | None = None) -> tuple[Sample, ...]:
    return tuple(
        sample(
            NOW - n + 1 + i,
            kube_cpu,
            2 * GiB,
            node_cpu=node_cpu or kube_cpu + 200,
            node_mem=3 * GiB,
            pods={"web": (kube_cpu - 1500, GiB), "job-a": (1000, GiB // 2), "job-b": (500, GiB // 2)},
        )
        for i in range(n)
    )


def snap(
    n: object = None,
    samples: tuple[Sample, ...] | None = None,
    pods: tuple = PODS,
    state: AgentState | None = None,
    new: int | None = None,
) -> Snapshot:
    nv = n if n is not None else node()
    ss = samples if samples is not None else busy_samples(3600)
    return Snapshot(nv, pods, ss, new_samples=len(ss) if new is None else new, state=state or AgentState())  # type: ignore[arg-type]


def test_no_label_does_nothing() -> None:
    p = decide(snap(node(colocation=False, oversubscription=False)), CFG, NOW)
    assert not p.evicting and p.evictions == () and p.report is None
    assert p.cgroup_writes == () and p.capacity.published_x.cpu == 0
    marked = node(colocation=False, oversubscription=False, evicting=True)
    p = decide(snap(marked, state=initial_state(True)), CFG, NOW)
    assert p.report == ReportSpec({"volcano.sh/offline-job-evicting": None})


def test_colocation_only_evicts_but_publishes_no_capacity() -> None:
    p = decide(snap(node(oversubscription=False)), CFG, NOW)  # 3600m of 4000m = 90 % >= 80 %
    assert p.evicting
    ann = annotations_of(p)
    assert ann["volcano.sh/offline-job-evicting"] == "true"
    assert "volcano.sh/oversubscription-cpu" not in ann and p.report is not None and not p.report.resources
    # 90 % -> under 80 % needs > 400m released: job-b (qos-level -2) goes first, 500m is enough
    assert [(e.key, e.reason) for e in p.evictions] == [("default/job-b", "CPUHighWatermark")]


def test_both_labels_publish_zero_while_evicting() -> None:
    p = decide(snap(node()), CFG, NOW)
    assert p.evicting and p.capacity.published_x.cpu == 0 and p.capacity.published_batch.cpu == 0
    assert p.capacity.B.cpu == 4000 * 0.7 - (3800 - 1500)  # computed still shown: U_non = node - offline
    assert p.report is not None and p.report.resources["kubernetes.io/batch-cpu"] == "0"


def test_oversubscription_only_needs_requests_over_allocatable() -> None:
    p = decide(snap(node(colocation=False)), CFG, NOW)
    assert not p.evicting and p.evictions == ()
    heavy = (*PODS, pod("greedy", level=-1, cpu=1500, created=4), pod("batch", level=-1, qos="BestEffort", bcpu=1000))
    samples = busy_samples(3600)
    p = decide(snap(node(colocation=False), samples=samples, pods=heavy), CFG, NOW)
    # requests 2000 + 1500 + 1000 (batch counts as cpu) = 4500 > 4000
    assert p.evicting
    assert p.evictions and all(e.reason == "CPUHighWatermark" for e in p.evictions)


def test_under_the_watermark_publishes_capacity() -> None:
    samples = busy_samples(2500)
    p = decide(snap(node(), samples=samples), CFG, NOW)
    assert not p.evicting and p.evictions == ()
    # U_non = (2700 - 1500) = 1200; B = 2800 - 1200 = 1600; Rp = 0 -> batch 1600; X = 1600 - 0 - (4000 - 2000) = 0
    assert p.capacity.published_batch.cpu == 1600 and p.capacity.published_x.cpu == 0
    ann = annotations_of(p)
    assert ann["volcano.sh/oversubscription-cpu"] == "0" and "tidemark.io/node-usage" in ann
    assert "volcano.sh/offline-job-evicting" not in ann
    assert p.next_state.x_history == ((NOW, 0, p.capacity.published_x.memory),)
    # CFG's node measure has no starvation: no `offline` in node-usage; the satisfaction measure (the default) adds the
    # tier's allowance (the one it evicts by) and its eviction.cpu.satisfaction: the rescheduling plugin's "starving"
    assert "offline" not in json.loads(str(ann["tidemark.io/node-usage"]))
    sat = decide(snap(node(), samples=samples), replace(CFG, eviction_cpu=EvictionCpuConfig()), NOW)
    doc = json.loads(str(annotations_of(sat)["tidemark.io/node-usage"]))
    assert sat.tier is not None and sat.tier.bound > 100
    assert doc["offline"] == {"allowance": round(100 * sat.tier.bound / 4000, 2), "satisfaction": 0.6}


def test_stale_samples_publish_zero() -> None:
    samples = tuple(replace(s, time=s.time - 10) for s in busy_samples(2500))
    p = decide(snap(node(), samples=samples), CFG, NOW)
    assert p.capacity.published_batch.cpu == 0 and p.capacity.B.cpu > 0
    assert any("stale" in e for e in p.explanations)


def test_stays_evicting_between_low_and_high_then_clears() -> None:
    marked = node(evicting=True)
    mid = busy_samples(2500)  # 62.5 %: between 30 and 80
    p = decide(snap(marked, samples=mid, state=initial_state(True)), CFG, NOW)
    assert p.evicting and p.evictions == () and p.report is not None
    assert "volcano.sh/offline-job-evicting" not in p.report.annotations
    assert any("stays closed to offline work" in e for e in p.explanations)
    low = tuple(sample(NOW - 2 + i, 800, GiB, node_cpu=900, node_mem=2 * GiB) for i in range(3))
    p = decide(snap(marked, samples=low, state=initial_state(True)), CFG, NOW)
    assert not p.evicting
    assert p.report is not None and p.report.annotations["volcano.sh/offline-job-evicting"] is None


def test_fewer_new_samples_than_n_do_not_trigger() -> None:
    p = decide(snap(node(), new=2), CFG, NOW)
    assert not p.evicting and p.next_state.watermarks.over_cpu == 2
    p2 = decide(replace(snap(node(), new=1), state=p.next_state), CFG, NOW)
    assert p2.evicting


def test_taint_option() -> None:
    cfg = replace(CFG, eviction=EvictionConfig(taint=True))
    p = decide(snap(node(taints=({"key": "other", "effect": "NoExecute"},))), cfg, NOW)
    assert p.report is not None and p.report.evicting_taint is True  # the controller keeps the other taints
    tainted = node(taints=({"key": "volcano.sh/offline-job-evicting", "effect": "NoSchedule"},))
    low = tuple(sample(NOW - 2 + i, 800, GiB, node_cpu=900, node_mem=2 * GiB) for i in range(3))
    p = decide(snap(tainted, samples=low, state=AgentState(WatermarkState(evicting=True))), cfg, NOW)
    assert p.report is not None and p.report.evicting_taint is False


def test_max_per_cycle() -> None:
    cfg = replace(CFG, eviction=EvictionConfig(max_per_cycle=1))
    samples = busy_samples(3990)
    p = decide(snap(node(oversubscription=False), samples=samples), cfg, NOW)
    assert len(p.evictions) == 1 and any("deferred" in e for e in p.explanations)


def test_admission_guard_in_decide() -> None:
    pods = (
        pod("web", cpu=3500, created=1),
        pod("plain-1", level=-1, cpu=400, created=2),
        pod("plain-2", level=-1, cpu=400, created=3),
    )
    # the machine is busy outside the pods: U_non = 2800m -> B = 0 -> X = 0 this cycle
    quiet = tuple(sample(NOW - 2 + i, 1000, GiB, node_cpu=2800, node_mem=2 * GiB) for i in range(3))
    n = node(published_x={"cpu": 200, "memory": 0})  # X_hold = 200 (on the Node): 4300 > 4200
    p = decide(snap(n, samples=quiet, pods=pods, new=2), CFG, NOW)
    assert p.evictions == () and p.next_state.admission.overflow_cpu == 2
    p = decide(snap(n, samples=quiet, pods=pods, new=3), CFG, NOW)
    assert [(e.key, e.reason) for e in p.evictions] == [("default/plain-2", "AdmissionOverflow")]
    # colocation-only nodes have no admission guard
    p = decide(snap(node(oversubscription=False), samples=quiet, pods=pods), CFG, NOW)
    assert p.evictions == ()


def test_plan_json_shape() -> None:
    doc = plan_json(decide(snap(node()), CFG, NOW))
    assert list(doc) == [
        "node",
        "labels",
        "usage",
        "capacity",
        "oversubscription",
        "node_report",
        "evicting",
        "evictions",
        "held",
        "cgroup_writes",
        "process_writes",
        "tier",
        "explanations",
    ]
    assert list(doc["usage"]) == ["cpu", "memory", "cpu_percent", "memory_percent", "online", "offline"]
    assert list(doc["capacity"]) == ["batch", "batch_bound", "computed", "policy", "u_non"]
    assert list(doc["capacity"]["computed"]) == ["B", "X"] and doc["capacity"]["policy"] == "profile"
    assert doc["usage"]["cpu"] == 3600 and doc["usage"]["cpu_percent"] == 90.0
    assert doc["evictions"][0] == {"pod": "default/job-b", "reason": "CPUHighWatermark"}


pod_specs = st.lists(
    st.tuples(
        st.integers(-7, 7),
        st.sampled_from(["default", "kube-system"]),
        st.booleans(),
        st.floats(0, 3000),
        st.floats(0, 4 * GiB),
        st.integers(0, 3000),
        st.booleans(),
    ),
    max_size=10,
)


@settings(max_examples=150, deadline=None)
@given(
    pod_specs,
    st.lists(st.tuples(st.floats(0, 8000), st.floats(0, 32 * GiB)), min_size=1, max_size=6),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_property_evictions_never_name_an_online_pod(
    specs: list[tuple[int, str, bool, float, float, int, bool]],
    usage: list[tuple[float, float]],
    colocation: bool,
    oversub: bool,
    evicting: bool,
) -> None:
    pods = tuple(
        pod(
            f"p{i}",
            level=lv,
            ns=ns,
            mirror=mirror,
            cpu=req,
            created=float(i),
            qos="BestEffort" if besteffort else "Burstable",
        )
        for i, (lv, ns, mirror, _c, _m, req, besteffort) in enumerate(specs)
    )
    samples = tuple(
        sample(
            NOW - len(usage) + 1 + j,
            c,
            m,
            node_cpu=c + 100,
            node_mem=m,
            pods={f"p{i}": (s[3], s[4]) for i, s in enumerate(specs)},
        )
        for j, (c, m) in enumerate(usage)
    )
    n = node(colocation=colocation, oversubscription=oversub, evicting=evicting, published_x={"cpu": 0, "memory": 0})
    p = decide(Snapshot(n, pods, samples, len(samples), None, initial_state(evicting)), CFG, NOW)
    by_uid = {x.uid: x for x in pods}
    keys = [e.uid for e in p.evictions]
    assert len(keys) == len(set(keys))
    for e in p.evictions:
        victim = by_uid[e.uid]
        assert victim.offline and not victim.kube_system and not victim.mirror
    if not colocation and not oversub:
        assert p.evictions == () and not p.evicting
    assert p.capacity.published_x.cpu >= 0 and p.capacity.B.cpu >= 0
    plan_json(p)


def test_pressure_is_reported_where_present() -> None:
    samples = tuple(replace(s, pressure={"cpu": 12.5, "memory": 0.0}) for s in busy_samples(1000))
    p = decide(snap(node(), samples=samples), CFG, NOW)
    assert "kubepods pressure (PSI some avg10): cpu 12.5 %, memory 0.0 %" in p.explanations


# --- the state carried from one decision to the next, through decide() alone (a fake clock: `now`) ------

X_CPU, USAGE, EVICTING = "volcano.sh/oversubscription-cpu", "tidemark.io/node-usage", "volcano.sh/offline-job-evicting"


def window_at(t: float, kube_cpu: float, n: int = 3) -> tuple[Sample, ...]:
    """`n` one-second samples ending at `t`, the pods as in `busy_samples`."""
    return tuple(replace(s, time=t - n + 1 + i) for i, s in enumerate(busy_samples(kube_cpu, n)))


def annotations_of(p: Plan) -> dict[str, object]:
    return dict(p.report.annotations) if p.report is not None else {}


def test_capacity_is_written_on_ticks_only_and_the_x_history_follows() -> None:
    state, n, ticks = AgentState(), node(), []  # nothing on the Node yet: every tick wants to write
    for i in range(21):
        t = NOW + i
        p = decide(snap(n, samples=window_at(t, 2500), state=state, new=1), CFG, t)
        state = p.next_state
        if p.capacity_tick:
            ticks.append(i)
            assert {X_CPU, USAGE} <= set(annotations_of(p)) and p.report is not None and p.report.resources
        else:
            assert p.report is None
            assert any("not a capacity tick" in e for e in p.explanations)
    assert ticks == [0, 10, 20]  # capacity.period 10 s, from the first decision on
    assert [h[0] for h in state.x_history] == [NOW, NOW + 10, NOW + 20]
    assert state.capacity_due == NOW + 30


def test_the_x_history_keeps_the_admission_hold_only() -> None:
    cfg = replace(CFG, eviction=EvictionConfig(admission_hold=25.0))
    state = AgentState()
    for i in range(40):
        p = decide(snap(node(), samples=window_at(NOW + i, 2500), state=state, new=1), cfg, NOW + i)
        state = p.next_state
    assert [h[0] for h in state.x_history] == [NOW + 20, NOW + 30]  # NOW + 10 is 29 s old at NOW + 39


def test_an_evicting_change_between_ticks_publishes_zero_at_once() -> None:
    state = replace(AgentState(), capacity_due=NOW + 5)
    p = decide(snap(node(), state=state), CFG, NOW)  # 90 % for 3 new samples: evicting
    assert p.evicting and not p.capacity_tick
    ann = annotations_of(p)
    assert ann[EVICTING] == "true" and ann[X_CPU] == "0" and USAGE in ann
    assert p.report is not None and p.report.resources["kubernetes.io/batch-cpu"] == "0"
    assert p.next_state.capacity_due == NOW + 5  # the cadence is not moved by it
    assert p.next_state.x_history == ((NOW, 0, 0),)  # a publication of X = 0 is remembered


def test_a_tick_further_than_a_period_ahead_is_pulled_in() -> None:
    state = replace(AgentState(), capacity_due=NOW + 100)  # e.g. capacity.period was 100 s before a reload
    p = decide(snap(node(), samples=window_at(NOW, 2500), state=state), CFG, NOW)
    assert not p.capacity_tick and p.report is None and p.next_state.capacity_due == NOW + 10
    p = decide(snap(node(), samples=window_at(NOW + 10, 2500), state=p.next_state, new=1), CFG, NOW + 10)
    assert p.capacity_tick and X_CPU in annotations_of(p)


def test_publish_threshold_and_resync_on_ticks() -> None:
    first = decide(snap(node(), samples=window_at(NOW, 2500)), CFG, NOW)
    c = first.capacity
    published = {
        "published_x": {"cpu": int(c.published_x.cpu), "memory": int(c.published_x.memory)},
        "published_batch": {"cpu": int(c.published_batch.cpu), "memory": int(c.published_batch.memory)},
    }
    current = node(last_publish=NOW, annotations={USAGE: "{}"}, **published)  # type: ignore[arg-type]
    state, written = first.next_state, []
    for i in range(1, 61):
        p = decide(snap(current, samples=window_at(NOW + i, 2500), state=state, new=1), CFG, NOW + i)
        state = p.next_state
        if p.report is not None:
            written.append(i)
        elif p.capacity_tick:
            assert any("published values are current" in e for e in p.explanations)
    assert written == [60]  # current values wait for the 60 s resync, on the tick that reaches it
    moved = replace(current, published_batch={"cpu": int(c.published_batch.cpu * 1.2), "memory": None})
    p = decide(snap(moved, samples=window_at(NOW + 9, 2500), state=first.next_state, new=1), CFG, NOW + 9)
    assert p.report is None  # moved, but not a tick
    p = decide(snap(moved, samples=window_at(NOW + 10, 2500), state=first.next_state, new=1), CFG, NOW + 10)
    assert p.capacity_tick and p.report is not None and p.report.resources and X_CPU in annotations_of(p)


def test_the_hysteresis_counts_are_carried_sample_by_sample() -> None:
    state, n = AgentState(), node(oversubscription=False)
    seen = []
    for i, cpu in enumerate([3600, 3600, 3600, 2500, 1000, 1000, 1000]):  # 90 % x3, 62.5 %, 25 % x3
        p = decide(snap(n, samples=window_at(NOW + i, cpu), state=state, new=1), CFG, NOW + i)
        state = p.next_state
        w = state.watermarks
        seen.append((w.evicting, w.over_cpu, w.clear))
    assert seen == [
        (False, 1, 0),
        (False, 2, 0),
        (True, 3, 0),
        (True, 0, 0),
        (True, 0, 1),
        (True, 0, 2),
        (False, 0, 3),
    ]


def test_a_resync_writes_the_least_of_the_last_minute() -> None:
    """`capacity.publish.envelope`: a busier tick in the last minute (a shallow fall, held back) is what the next
    publication that is not urgent writes, not the calm value of the resync's own tick; the decision's capacity
    (metrics, Events) says the value written; with the envelope at 0 the resync writes the newest value."""
    def run(cfg: AgentConfig) -> tuple[Plan, list[float]]:
        first = decide(snap(node(), samples=window_at(NOW, 2500)), cfg, NOW)
        c = first.capacity
        current = node(last_publish=NOW, annotations={USAGE: "{}"},  # type: ignore[arg-type]
                       published_x={"cpu": int(c.published_x.cpu), "memory": int(c.published_x.memory)},
                       published_batch={"cpu": int(c.published_batch.cpu), "memory": int(c.published_batch.memory)})
        state, bs, p = first.next_state, [c.published_batch.cpu], first
        for i in range(1, 61):
            kube = 2700 if i == 30 else 2500  # one busier tick: B a little lower, not urgent
            p = decide(snap(current, samples=window_at(NOW + i, kube), state=state, new=1), cfg, NOW + i)
            state = p.next_state
            if i < 60:
                assert p.report is None, (i, p.explanations)
            if p.capacity_tick:
                bs.append(p.capacity.published_batch.cpu)
        return p, bs

    assert CFG.capacity.envelope == 0.0  # off by default (docs/agent.md: capacity comes back later after a dip)
    p, bs = run(replace(CFG, capacity=replace(CFG.capacity, envelope=60.0)))
    assert p.report is not None
    written = p.report.resources["kubernetes.io/batch-cpu"]
    assert float(written) == min(bs) == bs[-1] < bs[0], (bs, written)  # the decision's capacity is what it wrote
    assert any("the lowest of the last 60 s written" in e for e in p.explanations), p.explanations
    p, bs = run(CFG)
    assert p.report is not None and float(p.report.resources["kubernetes.io/batch-cpu"]) == bs[-1] > min(bs)
