"""The live agent's decisions against a real kube-apiserver (RBAC, the agent's own ClusterRole) and real cgroups.

See conftest.py for how these tests stand in for kubelet and why they stay on the API server: what a
kubelet does (admit, run in its cgroup tree, kill evicted containers) is asserted on the real node
(tests/integration/localcluster/test_realnode.py), which also covers the publication of B and X, the
offline knobs in kubelet's tree and online keeping >= 90 % of a contended CPU. Periods are short
(200 ms samples, N = 3) so the suite stays fast; every wait polls with a deadline.
"""

from __future__ import annotations

import os

import pytest

from tests.fixtures.cgroups import MiB
from tests.integration.agent_live.conftest import FAST_CONFIG, LiveNode, read_knob, wait_for
from tidemark.apis import ANN_OFFLINE_JOB_EVICTING

pytestmark = [
    pytest.mark.kube,
    pytest.mark.cgroup,
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),
]


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
    plan = running.agent.cycle.last_plan
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
    # the agent counts an eviction when the Eviction call returns, which can be after the pod shows terminating here
    # (the CI run of 2026-11-30 read the counter in between: KeyError)
    wait_for(lambda: dict(running.agent.stats.evictions).get(("MemoryHighWatermark", "evicted")), "its count")
    stats = dict(running.agent.stats.evictions)
    assert stats.get(("MemoryHighWatermark", "blocked"), 0) >= 1 and stats[("MemoryHighWatermark", "evicted")] == 1
    blocked = wait_for(lambda: live.events("EvictionBlocked"), "an EvictionBlocked event")
    assert blocked[0]["involvedObject"]["name"] == "protected" and "disruption budget" in blocked[0]["message"]


def test_feature_off_restores_and_a_bad_config_changes_nothing(live: LiveNode) -> None:
    live.create_node()
    pod = live.add_pod("etl", qos="BE", requests={"cpu": "250m"}, busy=False)
    dirs = live.tree.pods[pod.uid].dirs
    original_quota = read_knob(dirs.cpu, "cpu.cfs_quota_us")
    oom = f"/proc/{pod.process.pid}/oom_score_adj"  # type: ignore[union-attr]
    original_oom = read_knob(*os.path.split(oom))
    running = live.start_agent()
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1", "the offline knobs")
    wait_for(lambda: read_knob(dirs.cpu, "cpu.cfs_quota_us") != original_quota, "the quota")
    wait_for(lambda: read_knob(*os.path.split(oom)) == "1000", "the offline process's oom_score_adj")
    assert original_oom != "1000"
    generation = running.agent.keeper.generation

    # invalid (a ratio above 1): the whole file is rejected, naming the field
    live.write_config(FAST_CONFIG.replace("capacity: {period: 600ms,", "capacity: {ratio: {cpu: 7}, period: 600ms,"))
    wait_for(lambda: live.events("ConfigRejected"), "a ConfigRejected event")
    assert running.agent.keeper.generation == generation and not running.agent.config_source.ok
    assert read_knob(dirs.cpu, "cpu.idle") == "1"
    assert "capacity.ratio.cpu" in live.events("ConfigRejected")[0]["message"]
    # a key given twice (the loader refuses it before any field is checked): rejected too, naming the key
    live.write_config(FAST_CONFIG + "capacity: {ratio: {cpu: 0.5}}\n")
    wait_for(
        lambda: any("duplicate key 'capacity'" in e["message"] for e in live.events("ConfigRejected")),
        "a ConfigRejected event naming the duplicate key",
    )
    assert running.agent.keeper.generation == generation and not running.agent.config_source.ok
    assert read_knob(dirs.cpu, "cpu.idle") == "1"

    live.write_config(FAST_CONFIG.replace("qos: {reconcile: 1s}", "qos: {reconcile: 1s, enabled: false}"))
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "0", "cpu.idle back to 0")
    wait_for(lambda: read_knob(dirs.cpu, "cpu.cfs_quota_us") == original_quota, "the quota back")
    # processes are restored after the cgroup files: awaited, not read in between
    wait_for(lambda: read_knob(*os.path.split(oom)) == original_oom, f"oom_score_adj back to {original_oom}")
    assert running.agent.keeper.generation > generation and running.agent.config_source.ok
    assert len(running.state.journal) == 0
    wait_for(lambda: live.events("QosRestored"), "a QosRestored event")

    live.write_config(FAST_CONFIG)  # back on, then the labels go: restored again
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1", "the knobs again")
    live.patch_node({"metadata": {"labels": {"volcano.sh/colocation": None, "volcano.sh/oversubscription": None}}})
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "0", "cpu.idle back to 0 without the labels")
    wait_for(lambda: len(running.state.journal) == 0, "an empty journal")
