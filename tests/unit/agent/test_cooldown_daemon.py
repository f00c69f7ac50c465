"""Eviction cool-downs through the daemon (the Cycle, its eviction history, the metric) on a fake clock: two rounds
within 30 s evict once, and a second pod of the same ReplicaSet waits 5 minutes after the first (recording fakes of
the API writers: tests/unit/agent/daemon_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from agent.act.evictor import EvictResult
from agent.daemon.metrics import AgentCollector
from agent.decide.cooldown import NODE, WORKLOAD
from tests.fixtures.cgroups import KubeletCgroupTree

from .daemon_helpers import JSON, Harness, make_harness, pod_obj

Tree = Callable[..., KubeletCgroupTree]
NODE_MEASURE = "eviction: {cpu: {measure: node}}\n"


def cid(uid: str) -> str:
    return f"containerd://{uid.replace('-', '')[:12]:0<64}"


def _owned(obj: JSON, kind: str, name: str) -> JSON:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}
    ]
    return obj


def _harness(kubelet_cgroup_tree: Tree, tmp_path: Path, config_text: str = NODE_MEASURE) -> Harness:
    """4 cores: `web` online; `rs-a`, `rs-b` of ReplicaSet batch-7f; `solo` without a controller."""
    tree = kubelet_cgroup_tree("v2", "systemd")
    tree.add_pod("u-web", "Burstable", {"c": cid("u-web")}, cpu_request_milli=1000)
    for uid in ("u-rs-a", "u-rs-b", "u-solo"):
        tree.add_pod(uid, "BestEffort", {"c": cid(uid)})
    pods = [
        pod_obj("u-web", "web", qos_class="Burstable", requests={"cpu": "1"}),
        _owned(pod_obj("u-rs-a", "rs-a", qos="BE"), "ReplicaSet", "batch-7f"),
        _owned(pod_obj("u-rs-b", "rs-b", qos="BE"), "ReplicaSet", "batch-7f"),
        pod_obj("u-solo", "solo", qos="BE"),
    ]
    return make_harness(tree, tmp_path, pods=pods, config_text=config_text)


def _evicted(h: Harness) -> list[str]:
    return [c.name for c in h.evictor.calls]


def _held(h: Harness) -> dict[str, str]:
    plan = h.agent.cycle.last_plan
    assert plan is not None
    return {x.name: x.cooldown for x in plan.held}


def test_rounds_within_the_node_cool_down_evict_once_and_a_workload_waits_five_minutes(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    h = _harness(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 1.0, "u-rs-a": 1.5, "u-rs-b": 0.5, "u-solo": 0.5}  # 87.5 %: rs-a alone is enough
    h.tick(3)
    assert _evicted(h) == ["rs-a"]
    assert h.evictor.calls[0].workload == "default/ReplicaSet/batch-7f"
    first = h.clock.wall()
    # rs-a has stopped; the pressure is back at once: solo (another workload) is next, but the node rests 30 s
    h.cores = {"u-web": 1.0, "u-rs-b": 1.0, "u-solo": 1.6}
    h.tick(28)
    assert h.clock.wall() - first == 28
    assert _evicted(h) == ["rs-a"], "a second round within 30 s"
    assert _held(h) == {"solo": NODE}
    assert h.agent.stats.evictions_held[NODE] >= 20, "counted once per decision that holds a victim back"
    h.tick(3)  # 30 s after the first round: solo goes
    assert _evicted(h) == ["rs-a", "solo"]
    # solo has stopped; rs-b (the ReplicaSet that lost rs-a) is the victim now: held 5 minutes after rs-a
    h.cores = {"u-web": 1.0, "u-rs-b": 2.6}
    h.tick(60)
    assert _evicted(h) == ["rs-a", "solo"]
    assert _held(h) == {"rs-b": WORKLOAD}
    plan = h.agent.cycle.last_plan
    assert plan is not None and "cooldown: workload default/ReplicaSet/batch-7f until" in plan.held[0].why
    assert h.agent.stats.evictions_held[WORKLOAD] > 0
    while h.clock.wall() - first < 300 - 10:
        h.tick(10, seconds=1.0)
    assert _evicted(h) == ["rs-a", "solo"], "the workload's cool-down runs 5 minutes"
    h.tick(15)
    assert _evicted(h) == ["rs-a", "solo", "rs-b"]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(h.agent))
    text = generate_latest(registry).decode()
    for reason in ("node_cooldown", "workload_cooldown"):
        assert f'tidemark_agent_evictions_held_total{{reason="{reason}"}}' in text


def test_a_refused_eviction_starts_no_cool_down(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = _harness(kubelet_cgroup_tree, tmp_path)
    h.evictor.outcomes["u-rs-a"] = EvictResult("blocked", "Cannot evict pod as it would violate the budget.", 429)
    h.cores = {"u-web": 1.0, "u-rs-a": 1.5, "u-rs-b": 0.5, "u-solo": 0.5}
    h.tick(3)
    h.agent.step()  # the refusal wakes the loop: the next victim at once, neither the node nor the ReplicaSet cools
    assert _evicted(h) == ["rs-a", "rs-b"]
    h.agent.step()  # rs-b's result comes back
    assert h.agent.cycle.view.evicted.workloads.keys() == {"default/ReplicaSet/batch-7f"}
    assert h.agent.cycle.last_plan is not None and h.agent.cycle.last_plan.held == ()


def test_zero_turns_the_cool_downs_off(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    off = "eviction: {cpu: {measure: node}, cooldown: {node: 0, workload: 0}}\n"
    h = _harness(kubelet_cgroup_tree, tmp_path, off)
    h.cores = {"u-web": 1.0, "u-rs-a": 1.5, "u-rs-b": 0.5, "u-solo": 0.5}
    h.tick(3)
    h.cores = {"u-web": 1.0, "u-rs-b": 2.6}
    h.tick(3)
    assert _evicted(h) == ["rs-a", "rs-b"]
    assert not h.agent.stats.evictions_held
