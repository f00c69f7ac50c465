"""Eviction cool-downs (agent/decide/cooldown.py): the pure rule, the victim search under memory pressure, `decide`,
`plan`'s output and the configuration. Before the cool-downs nothing was ever held back."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agent.config import AgentConfig, EvictionConfig, load_config_text
from agent.config_tier import EvictionCpuConfig
from agent.decide import decide
from agent.decide.cooldown import NODE, WORKLOAD, Cooldowns, Round, expire, record, select, workload_of
from agent.decide.eviction import Victim, watermark_victims
from agent.decide.plan import initial_state
from agent.model import Amounts, EvictionHistory, PodView, Snapshot
from agent.render import plan_json, render_table
from agent.sense.snapshot import controller_owner, pod_view
from tidemark.apis import PodUID, Watermarks

from .helpers import GiB, node, pod, sample

NOW = 1_700_000_000.0
CD = Cooldowns(node=30.0, workload=300.0)
NONE = EvictionHistory()


def owned(uid: str, owner: str | None, ns: str = "default", **kw: object) -> PodView:
    return replace(pod(uid, level=-1, qos="BestEffort", ns=ns, **kw), owner=owner)  # type: ignore[arg-type]


def cpu(p: PodView) -> Victim:
    return Victim(p, "CPUHighWatermark", "")


def names(victims: list[Victim]) -> list[str]:
    return [v.pod.uid for v in victims]


# --- the workload ---------------------------------------------------------------------------------------


def test_the_workload_is_the_controller_owner_in_its_namespace_or_the_pod_itself() -> None:
    assert workload_of(owned("a", "ReplicaSet/web-5d9")) == "default/ReplicaSet/web-5d9"
    assert workload_of(owned("b", None, ns="batch")) == "batch/Pod/b"
    md = {
        "ownerReferences": [
            {"kind": "Node", "name": "n1"},  # not the controller
            {"kind": "Job", "name": "train", "controller": False},
            {"kind": "ReplicaSet", "name": "web-5d9", "controller": True, "uid": "u"},
        ]
    }
    assert controller_owner(md) == "ReplicaSet/web-5d9"
    assert controller_owner({"ownerReferences": [{"kind": "Job", "name": "x"}]}) is None
    assert controller_owner({"ownerReferences": "junk"}) is None
    assert controller_owner({"ownerReferences": [{"controller": True, "kind": "Job"}]}) is None  # no name
    obj = {"metadata": {"name": "p", "namespace": "ml", "uid": "u1", **md}, "spec": {}, "status": {}}
    view, _ = pod_view(obj, NOW)
    assert workload_of(view) == "ml/ReplicaSet/web-5d9"


# --- the pure rule --------------------------------------------------------------------------------------


def test_a_workload_loses_at_most_one_pod_per_round() -> None:
    a, b, c = owned("a", "ReplicaSet/x"), owned("b", "ReplicaSet/x"), owned("c", "ReplicaSet/y")
    going, held = select([cpu(a), cpu(b), cpu(c)], NONE, CD, NOW)
    assert names(going) == ["a", "c"]
    assert [(h.uid, h.cooldown, h.until) for h in held] == [("b", WORKLOAD, NOW + 300)]
    assert held[0].why.startswith("cooldown: workload default/ReplicaSet/x until 2023-11-14T22:18:20Z")
    assert held[0].reason == "CPUHighWatermark" and held[0].key == "default/b"


def test_pods_without_a_controller_and_same_names_in_other_namespaces_are_other_workloads() -> None:
    victims = [cpu(owned("a", None)), cpu(owned("b", None)), cpu(owned("c", "Job/x", ns="n1")),
               cpu(owned("d", "Job/x", ns="n2"))]  # fmt: skip
    going, held = select(victims, NONE, CD, NOW)
    assert names(going) == ["a", "b", "c", "d"] and held == ()


def test_the_node_rests_between_rounds() -> None:
    history = EvictionHistory(last_round=NOW - 10)
    a, b = owned("a", "ReplicaSet/x"), owned("b", "ReplicaSet/y")
    going, held = select([cpu(a), cpu(b)], history, CD, NOW)
    assert going == []
    assert [(h.uid, h.cooldown, h.until) for h in held] == [("a", NODE, NOW + 20), ("b", NODE, NOW + 20)]
    assert held[0].why == "cooldown: node until 2023-11-14T22:13:40Z (20 s)"
    # the cool-down is over at last round + 30 s
    going, held = select([cpu(a), cpu(b)], history, CD, NOW + 20)
    assert names(going) == ["a", "b"] and held == ()


def test_a_workload_waits_its_cool_down_after_an_eviction() -> None:
    history = EvictionHistory(last_round=NOW - 100, workloads={"default/ReplicaSet/x": NOW - 100})
    a, c = owned("a", "ReplicaSet/x"), owned("c", "ReplicaSet/y")
    going, held = select([cpu(a), cpu(c)], history, CD, NOW)
    assert names(going) == ["c"]
    assert [(h.uid, h.cooldown, h.until) for h in held] == [("a", WORKLOAD, NOW + 200)]
    going, held = select([cpu(a)], history, CD, NOW + 200)
    assert names(going) == ["a"] and held == ()


def test_memory_bypasses_the_node_cool_down_but_not_the_workload_one() -> None:
    history = EvictionHistory(last_round=NOW - 1, workloads={"default/ReplicaSet/x": NOW - 1})
    a, b, c = owned("a", "ReplicaSet/x"), owned("b", "ReplicaSet/y"), owned("c", "ReplicaSet/y")
    mem = [Victim(p, "MemoryHighWatermark", "") for p in (a, b, c)]
    going, held = select(mem, history, CD, NOW, memory=True)
    assert names(going) == ["b"]
    assert [(h.uid, h.cooldown) for h in held] == [("a", WORKLOAD), ("c", WORKLOAD)]
    going, held = select(mem, history, CD, NOW, memory=False)
    assert going == [] and {h.cooldown for h in held} == {NODE}


def test_zero_turns_each_rule_off() -> None:
    history = EvictionHistory(last_round=NOW - 1, workloads={"default/ReplicaSet/x": NOW - 1})
    a, b = owned("a", "ReplicaSet/x"), owned("b", "ReplicaSet/x")
    going, held = select([cpu(a), cpu(b)], history, Cooldowns(0, 0), NOW)
    assert names(going) == ["a", "b"] and held == ()
    going, held = select([cpu(a), cpu(b)], history, Cooldowns(node=0, workload=300), NOW)
    assert going == [] and {h.cooldown for h in held} == {WORKLOAD}
    going, held = select([cpu(a), cpu(b)], EvictionHistory(last_round=NOW - 1), Cooldowns(node=30, workload=0), NOW)
    assert going == [] and {h.cooldown for h in held} == {NODE}


def test_a_pod_is_held_once_and_dropped_from_held_when_a_later_search_takes_it() -> None:
    r = Round(EvictionHistory(last_round=NOW - 1), CD, NOW)
    a = owned("a", "ReplicaSet/x")
    assert not r.admit(a, "CPUHighWatermark") and not r.admit(a, "AdmissionOverflow")
    assert len(r.held) == 1
    assert r.admit(a, "MemoryHighWatermark", memory=True)  # memory bypasses the node rule
    assert r.held_except([a]) == ()


def test_a_victim_deferred_by_max_per_cycle_holds_no_other_pod_of_its_workload() -> None:
    r = Round(NONE, CD, NOW)
    c, a, b = owned("c", "ReplicaSet/y"), owned("a", "ReplicaSet/x"), owned("b", "ReplicaSet/x")
    assert r.admit(c, "CPUHighWatermark") and r.admit(a, "CPUHighWatermark") and not r.admit(b, "CPUHighWatermark")
    assert [h.workload for h in r.held] == ["default/ReplicaSet/x"]
    r.defer([a])  # eviction.max_per_cycle 1: only c goes, ReplicaSet x loses nothing this round
    assert r.held == [] and r.admit(b, "CPUHighWatermark")
    # a workload cooling from the history stays held
    r = Round(EvictionHistory(workloads={"default/ReplicaSet/x": NOW - 1}), CD, NOW)
    assert not r.admit(b, "CPUHighWatermark")
    r.defer([c])
    assert [h.uid for h in r.held] == ["b"]


def test_the_history_is_bounded_and_starts_only_from_issued_evictions() -> None:
    h = record(NONE, "default/ReplicaSet/x", NOW, CD)
    assert h == EvictionHistory(last_round=NOW, workloads={"default/ReplicaSet/x": NOW})
    h = record(h, "default/Pod/solo", NOW + 100, CD)
    assert h.last_round == NOW + 100 and set(h.workloads) == {"default/ReplicaSet/x", "default/Pod/solo"}
    assert expire(h, CD, NOW + 300) == EvictionHistory(None, {"default/Pod/solo": NOW + 100})
    assert expire(h, CD, NOW + 400) == EvictionHistory()
    assert record(NONE, "default/Pod/solo", NOW, Cooldowns(0, 0)) == EvictionHistory()


# --- the victim search ----------------------------------------------------------------------------------

A = Amounts(10_000, 10 * GiB)
MARKS = Watermarks((80, 30), (60, 30))


def _search(pods: list[PodView], pressured: tuple[str, ...], history: EvictionHistory) -> tuple[list[str], Round]:
    use = {PodUID("a"): Amounts(1500, 2 * GiB), PodUID("b"): Amounts(1000, GiB), PodUID("c"): Amounts(900, GiB)}
    kube = Amounts(9000, 7 * GiB)  # 90 % CPU, 70 % memory: each needs one pod's worth
    r = Round(history, CD, NOW)
    found, _ = watermark_victims(
        pods, use, kube, A, MARKS, pressured, "usage", Amounts(), NOW, 10.0, (), r  # type: ignore[arg-type]
    )
    return [v.pod.uid for v in found], r


def test_under_memory_pressure_the_next_victim_of_another_workload_goes_instead() -> None:
    pods = [owned("a", "ReplicaSet/x"), owned("b", "ReplicaSet/x"), owned("c", "ReplicaSet/y")]
    history = EvictionHistory(last_round=NOW - 5, workloads={"default/ReplicaSet/x": NOW - 60})
    found, r = _search(pods, ("memory",), history)
    # a and b (workload x) held; c (another workload) goes, whatever the node cool-down says
    assert found == ["c"] and [(h.uid, h.cooldown) for h in r.held] == [("a", WORKLOAD), ("b", WORKLOAD)]


def test_for_cpu_a_held_victim_is_not_replaced() -> None:
    pods = [owned("a", "ReplicaSet/x"), owned("b", "ReplicaSet/x"), owned("c", "ReplicaSet/y")]
    found, r = _search(pods, ("cpu",), EvictionHistory(workloads={"default/ReplicaSet/x": NOW - 60}))
    assert found == [] and [h.uid for h in r.held] == ["a"]
    found, r = _search(pods, ("cpu",), EvictionHistory(last_round=NOW - 5))
    assert found == [] and [(h.uid, h.cooldown) for h in r.held] == [("a", NODE)]
    found, r = _search(pods, ("cpu",), NONE)
    assert found == ["a"] and r.held == []


# --- decide and plan --------------------------------------------------------------------------------------

CFG = AgentConfig(eviction_cpu=EvictionCpuConfig(measure="node"))


def _snapshot(history: EvictionHistory, mem: float = 2 * GiB) -> Snapshot:
    pods = (
        pod("web", cpu=2000, mem=4 * GiB, created=1),
        owned("job-a", "Job/train", created=2),
        owned("job-b", "Job/train", created=3),
        owned("job-c", "Job/etl", created=4),
    )
    per_pod = {"web": (1000, GiB), "job-a": (1500, mem / 2), "job-b": (900, mem / 4), "job-c": (200, mem / 4)}
    samples = tuple(
        sample(NOW - 2 + i, 3600, GiB + mem, node_cpu=3800, node_mem=GiB + mem, pods=per_pod) for i in range(3)
    )
    return Snapshot(node(), pods, samples, new_samples=3, state=initial_state(False), evicted=history)


def test_decide_holds_back_within_the_node_cool_down_and_plan_shows_why() -> None:
    # 90 % CPU: job-a alone brings it under 80 %; the node evicted 10 s ago
    p = decide(_snapshot(EvictionHistory(last_round=NOW - 10)), CFG, NOW)
    assert p.evicting and p.evictions == ()
    assert [(h.key, h.reason, h.cooldown) for h in p.held] == [("default/job-a", "CPUHighWatermark", NODE)]
    assert any(e.startswith("hold default/job-a (CPUHighWatermark): cooldown: node until") for e in p.explanations)
    doc = json.loads(json.dumps(plan_json(p)))
    assert doc["held"] == [{"pod": "default/job-a", "reason": "CPUHighWatermark", "cooldown": "node_cooldown",
                            "until": NOW + 20, "why": p.held[0].why}]  # fmt: skip
    table = render_table(p)
    assert "Held back (eviction cool-downs)" in table and "default/job-a  CPUHighWatermark: cooldown: node" in table
    # without history: job-a goes, its workload is named on the eviction for the daemon's history
    p = decide(_snapshot(NONE), CFG, NOW)
    assert [(e.key, e.workload) for e in p.evictions] == [("default/job-a", "default/Job/train")] and p.held == ()
    assert plan_json(p)["held"] == [] and "Held back" not in render_table(p)


def test_decide_under_memory_pressure_ignores_the_node_cool_down_and_replaces_a_held_workload() -> None:
    # memory 7 GiB of 16 GiB kubepods + usage past 60 %: 10 GiB -> job-a (5 GiB) would do, but Job/train is cooling
    history = EvictionHistory(last_round=NOW - 1, workloads={"default/Job/train": NOW - 1})
    p = decide(_snapshot(history, mem=10 * GiB), CFG, NOW)
    reasons = {e.key: e.reason for e in p.evictions}
    assert "default/job-c" in reasons and "default/job-a" not in reasons and "default/job-b" not in reasons
    assert {h.key: h.cooldown for h in p.held} == {"default/job-a": WORKLOAD, "default/job-b": WORKLOAD}


def test_the_satisfaction_measure_and_the_admission_guard_pass_the_cool_downs_too() -> None:
    # online pods alone past the CPU high watermark (the default satisfaction measure): every offline pod is needed
    pods = (pod("web", cpu=3000, mem=4 * GiB, created=1), owned("job-a", "Job/train", created=2),
            owned("job-b", "Job/train", created=3))  # fmt: skip
    per_pod = {"web": (3400, GiB), "job-a": (300, GiB), "job-b": (200, GiB)}
    busy = tuple(sample(NOW - 2 + i, 3900, 3 * GiB, node_cpu=3950, node_mem=3 * GiB, pods=per_pod) for i in range(3))

    def online(history: EvictionHistory) -> tuple[list[str], dict[str, tuple[str, str]]]:
        snap = Snapshot(node(), pods, busy, new_samples=3, state=initial_state(True), evicted=history)
        p = decide(snap, AgentConfig(), NOW)
        return [e.key for e in p.evictions], {h.key: (h.reason, h.cooldown) for h in p.held}

    assert online(NONE) == (["default/job-a"], {"default/job-b": ("OnlineCPUHighWatermark", WORKLOAD)})
    assert online(EvictionHistory(last_round=NOW - 5)) == (
        [], {"default/job-a": ("OnlineCPUHighWatermark", NODE), "default/job-b": ("OnlineCPUHighWatermark", NODE)}
    )
    # the admission guard (plain requests past allocatable + X_hold for N cycles): its victim waits as well
    plain = (pod("web", cpu=3500, created=1), owned("plain-1", None, cpu=400, created=2),
             owned("plain-2", None, cpu=400, created=3))  # fmt: skip
    quiet = tuple(sample(NOW - 2 + i, 1000, GiB, node_cpu=2800, node_mem=2 * GiB) for i in range(3))
    n = node(published_x={"cpu": 200, "memory": 0})

    def admission(history: EvictionHistory) -> tuple[list[str], list[str]]:
        p = decide(Snapshot(n, plain, quiet, new_samples=3, evicted=history), CFG, NOW)
        return [e.key for e in p.evictions], [f"{h.key} {h.reason} {h.cooldown}" for h in p.held]

    assert admission(NONE) == (["default/plain-2"], [])
    assert admission(EvictionHistory(last_round=NOW - 5)) == ([], ["default/plain-2 AdmissionOverflow node_cooldown"])


# --- configuration ----------------------------------------------------------------------------------------


def test_the_cool_downs_are_configurable_and_a_bad_value_takes_the_default() -> None:
    assert (EvictionConfig().cooldown_node, EvictionConfig().cooldown_workload) == (30.0, 300.0)
    config, problems = load_config_text("eviction:\n  cooldown: {node: 0, workload: 10m}\n")
    assert problems == () and (config.eviction.cooldown_node, config.eviction.cooldown_workload) == (0.0, 600.0)
    config, problems = load_config_text("eviction:\n  cooldown: {node: -5s, workload: soon}\n")
    assert (config.eviction.cooldown_node, config.eviction.cooldown_workload) == (30.0, 300.0)
    said = {p.path: p.message for p in problems}
    assert set(said) == {"eviction.cooldown.node", "eviction.cooldown.workload"}
    assert said["eviction.cooldown.workload"].endswith("using the default 300.0")


@pytest.mark.parametrize("key", ["eviction.cooldown.node", "eviction.cooldown.workload"])
def test_each_cool_down_is_documented(key: str) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    assert f"`{key}`" in (root / "docs" / "agent.md").read_text()
    assert "cooldown:" in (root / "daemonset" / "agent" / "configmap.yaml").read_text()
