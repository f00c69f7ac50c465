"""The agent live on a node: real kube-apiserver (RBAC, the agent's own ClusterRole), real cgroups, real processes.

See conftest.py for how the test plays kubelet. Periods are short (200 ms samples, N = 3) so the suite
stays fast; every wait polls with a deadline.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.cgroups import MiB
from tests.integration.agent_live.conftest import FAST_CONFIG, LiveNode, contended_share, read_knob, wait_for
from tidemark.apis import ANN_NODE_USAGE, ANN_OFFLINE_JOB_EVICTING

pytestmark = [
    pytest.mark.kube,
    pytest.mark.cgroup,
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),
]


def test_publishes_capacity_and_isolates_offline_pods(live: LiveNode) -> None:
    """Annotations and batch-* status on the Node; offline knobs; the online loop keeps >= 90 % of a shared CPU."""
    live.create_node()
    online = live.add_pod("web", requests={"cpu": "500m", "memory": "64Mi"}, cpu=0)
    offline = live.add_pod("etl", qos="BE", requests={"cpu": "500m"}, cpu=0)  # Burstable: competes above pod level
    besteffort = live.add_pod("crunch", qos="-1", busy=False, cpu=1)
    assert online.process is not None and offline.process is not None
    before, _ = contended_share(online.process, offline.process, 1.0)
    assert before < 0.7, f"no contention to begin with ({before:.2f})"
    running = live.start_agent()

    def published() -> bool:
        node = live.node()
        ann = node["metadata"].get("annotations") or {}
        alloc = node["status"]["allocatable"]
        return (
            "volcano.sh/oversubscription-cpu" in ann
            and ANN_NODE_USAGE in ann
            and "kubernetes.io/batch-cpu" in alloc
            and "kubernetes.io/batch-memory" in node["status"]["capacity"]
        )

    wait_for(published, "the oversubscription annotations and batch-* extended resources")
    ann = live.annotations()
    assert int(ann["volcano.sh/oversubscription-cpu"]) >= 0 and int(ann["volcano.sh/oversubscription-memory"]) >= 0

    def busy_usage() -> dict[str, Any] | None:
        usage: dict[str, Any] = json.loads(live.annotations()[ANN_NODE_USAGE])
        return usage if usage["cpu"] > 20 else None

    # the first publication may rest on one 200 ms sample taken while the shared machine was busy elsewhere;
    # the window (4 s) and the resync (5 s) bring the busy pods' usage onto the Node
    usage = wait_for(busy_usage, "the published node usage to show the busy pods (cpu > 20 %)")
    assert usage["window"].endswith("s")

    etl = live.tree.pods[offline.uid].dirs
    wait_for(lambda: read_knob(etl.cpu, "cpu.idle") == "1", "cpu.idle=1 on the offline Burstable pod")
    wait_for(lambda: read_knob(etl.cpu, "cpu.cfs_quota_us") != "-1", "CFS quota suppression on it")
    crunch = live.tree.pods[besteffort.uid].dirs
    wait_for(lambda: read_knob(crunch.cpu, "cpu.idle") == "1", "cpu.idle=1 on the offline BestEffort pod")
    web = live.tree.pods[online.uid].dirs
    assert read_knob(web.cpu, "cpu.idle") == "0" and read_knob(web.cpu, "cpu.cfs_quota_us") == "-1"
    with open(f"/proc/{offline.process.pid}/oom_score_adj") as f:  # type: ignore[union-attr]
        assert f.read().strip() == "1000"
    after, absolute = contended_share(online.process, offline.process, 1.5)
    assert after >= 0.9, (
        f"the online loop got {after:.2f} of the shared CPU (before {before:.2f}; {absolute:.2f} of wall)"
    )

    reasons = {e["reason"] for e in wait_for(lambda: live.events("QosApplied"), "QosApplied events")}
    assert reasons == {"QosApplied"}
    assert running.agent.healthy()[0] and running.agent.ready()[0]
    assert running.agent.stats.evictions == {}


def test_evicts_exactly_the_offline_pods_needed_never_online(live: LiveNode) -> None:
    """Past the memory high watermark the node is marked evicting BEFORE the first eviction; only the offline
    pod needed goes; under every low watermark the node is unmarked.

    Memory, not CPU: the memory each process touched is exact, while CPU on this shared machine is not
    (other sessions' loads take their part of the pinned CPUs).
    """
    live.create_node(memory="1Gi", annotations={"volcano.sh/evicting-memory-low-watermark": "20"})
    foreign = {"key": "example.com/maintenance", "value": "soon", "effect": "PreferNoSchedule"}
    live.patch_node({"spec": {"taints": [foreign]}})
    web = live.add_pod("web", requests={"memory": "256Mi"}, busy=False, memory_bytes=300 * MiB)  # ~30 %: online
    live.add_pod("crunch", qos="BE", busy=False, memory_bytes=400 * MiB)  # offline, ~40 %: enough to go under 60
    live.add_pod("idle", qos="BE", busy=False)  # offline, small: evicting it too would not be needed
    marks: list[str] = []
    running = live.start_agent(FAST_CONFIG.replace("refused_retry: 30s", "refused_retry: 30s, taint: true"))

    def evicted() -> bool:
        node = live.node()
        if (node["metadata"].get("annotations") or {}).get(ANN_OFFLINE_JOB_EVICTING) == "true":
            marks.append(node["metadata"]["resourceVersion"])
        return live.terminating("crunch")

    wait_for(evicted, "the offline pod using the most memory to be evicted")
    crunch = live.pod("crunch")
    assert crunch is not None and crunch["metadata"]["deletionGracePeriodSeconds"] == 30  # the pod's own grace
    annotated = live.annotations()
    assert annotated.get(ANN_OFFLINE_JOB_EVICTING) == "true"
    wait_for(lambda: live.annotations()["volcano.sh/oversubscription-memory"] == "0", "X = 0 while evicting")
    wait_for(lambda: live.node()["status"]["allocatable"].get("kubernetes.io/batch-memory") == "0", "B = 0")
    # the Node was marked first: its evicting resourceVersion precedes the pod's deletion
    first_mark = min(int(rv) for rv in marks) if marks else int(live.node()["metadata"]["resourceVersion"])
    assert first_mark < int(crunch["metadata"]["resourceVersion"])
    taints = live.node()["spec"].get("taints") or []
    assert foreign in taints and any(t["key"] == ANN_OFFLINE_JOB_EVICTING for t in taints)  # added, none clobbered
    live.kubelet()  # kubelet stops the evicted pod: ~30 %, between low (20) and high (60): the node stays evicting
    live.cycles(running, decisions=8)
    assert not live.terminating("idle") and not live.terminating("web")
    assert live.annotations().get(ANN_OFFLINE_JOB_EVICTING) == "true"
    live.stop_process("web")  # the online pod's memory is freed: under every low watermark
    wait_for(lambda: ANN_OFFLINE_JOB_EVICTING not in live.annotations(), "the evicting annotation to be removed")
    wait_for(lambda: live.node()["spec"].get("taints") == [foreign], "our taint removed, the other one kept")
    assert not live.terminating("idle") and not live.terminating("web")
    assert dict(running.agent.stats.evictions) == {("MemoryHighWatermark", "evicted"): 1}
    evicted_events = live.events("MemoryHighWatermark")
    assert [e["involvedObject"]["name"] for e in evicted_events] == ["crunch"]
    assert "memory usage" in evicted_events[0]["message"] and "high watermark 60 %" in evicted_events[0]["message"]
    assert live.events("EvictingStarted")
    wait_for(lambda: live.events("EvictingCleared"), "an EvictingCleared event")
    del web


def test_an_online_pod_is_never_evicted(live: LiveNode) -> None:
    """Online usage alone past the high watermark: every offline pod goes, the online pod stays."""
    live.create_node(memory="1Gi")
    live.add_pod("web", requests={"memory": "512Mi"}, busy=False, memory_bytes=700 * MiB)  # online: ~70 %
    live.add_pod("batch", qos="-3", busy=False)
    live.add_pod("batch2", qos="BE", busy=False)
    running = live.start_agent()
    wait_for(
        lambda: live.terminating("batch") and live.terminating("batch2"),
        "every offline pod to be evicted",
        every=live.kubelet,
    )
    live.cycles(running, decisions=5)
    assert not live.terminating("web")
    assert dict(running.agent.stats.evictions) == {("MemoryHighWatermark", "evicted"): 2}
    plan = running.agent.last_plan
    assert plan is not None and plan.evicting and not plan.evictions
    assert any("online or system usage" in e for e in plan.explanations)


def test_a_pdb_refusal_moves_on_to_the_next_victim(live: LiveNode) -> None:
    """The first victim is covered by a PodDisruptionBudget (429 on a lone apiserver): the next one goes."""
    from tidemark.kube.client import request_json
    from tidemark.kube.resources import PDBS_V1BETA1

    live.create_node(memory="1Gi")
    live.add_pod("other", qos="BE", busy=False, memory_bytes=300 * MiB)
    live.add_pod("protected", qos="BE", busy=False, memory_bytes=400 * MiB, labels={"app": "db"})  # first in line
    pdb = {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": live.kube.name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    request_json(live.admin, "POST", PDBS_V1BETA1.collection_path(live.kube.name), body=pdb)
    running = live.start_agent()
    wait_for(lambda: live.terminating("other"), "the next victim to be evicted")
    assert not live.terminating("protected")
    stats = dict(running.agent.stats.evictions)
    assert stats.get(("MemoryHighWatermark", "blocked"), 0) >= 1 and stats[("MemoryHighWatermark", "evicted")] == 1
    blocked = wait_for(lambda: live.events("EvictionBlocked"), "an EvictionBlocked event")
    assert blocked[0]["involvedObject"]["name"] == "protected" and "disruption budget" in blocked[0]["message"]


def test_feature_off_restores_and_a_bad_config_changes_nothing(live: LiveNode) -> None:
    live.create_node()
    pod = live.add_pod("etl", qos="BE", requests={"cpu": "250m"}, busy=False)
    dirs = live.tree.pods[pod.uid].dirs
    original_quota = read_knob(dirs.cpu, "cpu.cfs_quota_us")
    running = live.start_agent()
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1", "the offline knobs")
    wait_for(lambda: read_knob(dirs.cpu, "cpu.cfs_quota_us") != original_quota, "the quota")
    generation = running.agent.config_generation

    live.write_config(FAST_CONFIG + "capacity: {ratio: {cpu: 7}}\n")  # invalid: the whole file is rejected
    wait_for(lambda: live.events("ConfigRejected"), "a ConfigRejected event")
    assert running.agent.config_generation == generation and not running.agent.config_source.ok
    assert read_knob(dirs.cpu, "cpu.idle") == "1"
    assert "capacity.ratio.cpu" in live.events("ConfigRejected")[0]["message"]

    live.write_config(FAST_CONFIG.replace("qos: {reconcile: 1s}", "qos: {reconcile: 1s, enabled: false}"))
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "0", "cpu.idle back to 0")
    wait_for(lambda: read_knob(dirs.cpu, "cpu.cfs_quota_us") == original_quota, "the quota back")
    with open(f"/proc/{pod.process.pid}/oom_score_adj") as f:  # type: ignore[union-attr]
        assert f.read().strip() != "1000"
    assert running.agent.config_generation > generation and running.agent.config_source.ok
    assert len(running.state.journal) == 0
    wait_for(lambda: live.events("QosRestored"), "a QosRestored event")

    live.write_config(FAST_CONFIG)  # back on, then the labels go: restored again
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1", "the knobs again")
    live.patch_node({"metadata": {"labels": {"volcano.sh/colocation": None, "volcano.sh/oversubscription": None}}})
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "0", "cpu.idle back to 0 without the labels")
    wait_for(lambda: len(running.state.journal) == 0, "an empty journal")
