"""The "tier" duty in the daemon (fake kubelet tree, in-memory cluster, fake clock): the offline tier's CPU ceiling
goes on the BestEffort root through the executor every tier period, follows an online spike down at once and back
up a step a period, is journaled and goes back when `tier.enabled` turns false; under the satisfaction measure an
offline pod soaking idle CPU is not evicted; the metrics show the ceiling."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from agent.daemon.metrics import AgentCollector
from tests.unit.agent.daemon_helpers import Harness
from tests.unit.agent.test_daemon import Tree, scenario


def root_quota(h: Harness) -> int:
    return int(h.tree.read(h.tree.layout.qos("BestEffort"), "cpu.cfs_quota_us"))


def started(tree: Tree, tmp_path: Path) -> Harness:
    """The daemon scenario (tests/unit/agent/test_daemon.py) with the shipped defaults: the satisfaction measure."""
    return scenario(tree, tmp_path, config_text="tier: {enabled: true}\n")


def tier_quota(h: Harness) -> int:
    """The tier's quota in force: the BestEffort root's plus the offline Burstable pod's (u-etl, outside the root)."""
    return root_quota(h) + int(h.tree.read(h.tree.pods["u-etl"].dirs, "cpu.cfs_quota_us"))


def ceiling(h: Harness) -> float:
    plan = h.agent.cycle.last_plan
    assert plan is not None and plan.tier is not None
    return plan.tier.ceiling


def test_the_ceiling_follows_an_online_spike_through_the_executor(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = started(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 0.5, "u-crunch": 2.0}
    h.tick(8)
    # 4 cores x 0.9 - online 500m - system 0 = 3100m, shared by kubepods/besteffort and the offline Burstable pod
    assert ceiling(h) == 3100 and abs(tier_quota(h) - 310_000) <= 2
    journal = (tmp_path / "state" / "journal.json").read_text()
    assert "besteffort" in journal and "cpu.cfs_quota_us" in journal
    h.cores = {"u-web": 3.0, "u-crunch": 0.5}  # an online spike
    h.tick(1)
    assert ceiling(h) == 600 and abs(tier_quota(h) - 60_000) <= 2  # 3600 - 3000: down at once
    # the spike ends: up 400m (0.1 x 4 cores) a period while the offline pod wants more than it gets (the fake host
    # does not enforce the quota: its 2 cores are a hungry pod's demand)
    h.cores = {"u-web": 0.5, "u-crunch": 2.0}
    ups = []
    for _ in range(4):
        h.tick(1)
        ups.append(ceiling(h))
    assert ups == [1000, 1400, 1800, 2200] and abs(tier_quota(h) - 220_000) <= 2
    plan = h.agent.cycle.last_plan
    assert plan is not None and plan.tier is not None and plan.tier.rule == "raise"
    assert not h.evictor.calls
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(h.agent))
    text = generate_latest(registry).decode()
    assert "tidemark_agent_tier_cpu_ceiling_cores 2.2" in text
    h.cores = {"u-web": 0.5, "u-crunch": 0.5}  # it no longer uses half of it: the raises wait (RFC 7661)
    h.tick(2)
    assert ceiling(h) == 2200 and h.agent.cycle.last_plan.tier.rule == "unused"  # type: ignore[union-attr]


def test_soaking_idle_cpu_is_not_evicted_and_tier_off_puts_the_root_back(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    h = started(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 0.2, "u-crunch": 3.3}  # 87.5 % of the node, the online pod 5 %
    h.tick(6)
    assert not h.evictor.calls and h.agent.cycle.last_plan is not None and not h.agent.cycle.last_plan.evicting
    assert root_quota(h) > 0
    (tmp_path / "agent.yaml").write_text("tier: {enabled: false}\n")
    h.tick(15)  # the config poll, then a full reconcile: the root's quota is no longer wanted
    assert root_quota(h) == -1


def test_the_worst_online_pod_is_named_in_the_metrics() -> None:
    """`online_cpu_wait_pod_info{pod, source}` names the pod whose wait is the signal (which pod holds the tier
    back: an operator's first question when the ceiling stays cut); absent with no wait read."""
    from agent.daemon.metrics import Status, _tier_cpu_gauges

    def text(st: Status) -> list[str]:
        return [f"{m.name}{s.labels} {s.value}" for m in _tier_cpu_gauges(st) for s in m.samples]

    st = Status(tier_cpu_ceiling=1200.0, online_cpu_wait=0.12, online_cpu_wait_pod=("shop/web-0", "schedstat"))
    got = text(st)
    assert "tidemark_agent_online_cpu_wait_pod_info{'pod': 'shop/web-0', 'source': 'schedstat'} 1.0" in got, got
    assert not [g for g in text(Status(tier_cpu_ceiling=1200.0)) if "pod_info" in g]
