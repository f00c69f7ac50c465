"""The drift check: a knob the agent wrote, rewritten behind its back, is written again with the next sample.

systemd does that to every unit's cgroup files on `systemctl daemon-reload`: on the production-shaped node
(kubelet's systemd driver, cgroup v2: the realnode_v2 lane) a pod slice's `cpu.idle` and `cpu.max`
went back to systemd's values and stayed so until the agent's next QoS reconcile (10 s by default). Here on
a fake v2 systemd tree (what is faked: tests/unit/agent/daemon_helpers.py) with a 120 s reconcile, so that
only the drift check can put them back within a few samples.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.daemon.qosapply import DRIFT_READS
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.daemon_helpers import Harness, make_harness, pod_obj

Tree = Callable[..., KubeletCgroupTree]
LONG_RECONCILE = "qos:\n  reconcile: 120s\n"


def cid(uid: str) -> str:
    return f"containerd://{uid.replace('-', '')[:12]:0<64}"


def harness(kubelet_cgroup_tree: Tree, tmp_path: Path, offline: int = 1) -> Harness:
    tree = kubelet_cgroup_tree("v2", "systemd")
    pods = []
    for i in range(offline):
        uid = f"u-crunch-{i}"
        tree.add_pod(uid, "Burstable", {"c": cid(uid)}, cpu_request_milli=500)
        pods.append(pod_obj(uid, f"crunch-{i}", qos="-1", qos_class="Burstable", requests={"cpu": "500m"}))
    return make_harness(tree, tmp_path, pods=pods, config_text=LONG_RECONCILE)


def knob(h: Harness, uid: str, file: str) -> str:
    return h.tree.read(h.tree.pods[uid].dirs, file)


def daemon_reload(h: Harness, uid: str) -> None:
    """What systemd writes into a pod slice on daemon-reload (kubelet set no quota and no idle)."""
    d = h.tree.pods[uid].dirs
    h.tree.write(d, "cpu.idle", "0")
    h.tree.write(d, "cpu.max", "max 100000")


def test_knobs_rewritten_behind_the_agents_back_are_written_again_with_the_next_sample(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    h = harness(kubelet_cgroup_tree, tmp_path)
    h.tick(2)
    assert knob(h, "u-crunch-0", "cpu.idle") == "1"
    wanted_max = knob(h, "u-crunch-0", "cpu.max")
    assert wanted_max != "max 100000"
    daemon_reload(h, "u-crunch-0")
    h.tick(1)
    assert knob(h, "u-crunch-0", "cpu.idle") == "1"
    assert knob(h, "u-crunch-0", "cpu.max") == wanted_max
    # the journal still holds kubelet's values as the originals: an uninstall puts those back
    journal = h.state.journal if h.state is not None else None
    assert journal is not None
    originals = {(e.file, e.original) for e in journal.knobs.values() if e.pod == "u-crunch-0"}
    assert ("cpu.idle", "0") in originals and ("cpu.max", "max 100000") in originals


def test_a_calm_node_checks_for_drift_every_second_not_every_calm_sample(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    """A calm node samples every `sampler.calmPeriod` (agent.decide.calm), but its probe checks the knobs each
    second: the 2026-12-02 CI run's kubelet restart on the v2 node waited for calm samples."""
    h = harness(kubelet_cgroup_tree, tmp_path, offline=6)
    h.tick(12)
    assert h.agent.cycle.calm.calm, h.agent.cycle.calm.reason
    assert h.state is not None and len(h.state.journal.knobs) > DRIFT_READS
    last = "u-crunch-5"
    wanted = knob(h, last, "cpu.idle")
    daemon_reload(h, last)
    rounds = -(-len(h.state.journal.knobs) // DRIFT_READS)
    h.tick(rounds + 1)  # under the calm period times the rounds
    assert knob(h, last, "cpu.idle") == wanted == "1"


def test_the_check_reads_a_few_files_per_sample_in_turn(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    """With more journaled files than one check reads, a rewrite is still found within a few samples."""
    h = harness(kubelet_cgroup_tree, tmp_path, offline=6)
    h.tick(2)
    assert h.state is not None and len(h.state.journal.knobs) > DRIFT_READS
    last = "u-crunch-5"
    daemon_reload(h, last)
    rounds = -(-len(h.state.journal.knobs) // DRIFT_READS)
    h.tick(rounds + 1)
    assert knob(h, last, "cpu.idle") == "1"


def test_a_value_someone_keeps_rewriting_backs_off_to_the_reconcile(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = harness(kubelet_cgroup_tree, tmp_path)
    h.tick(2)
    reads = []
    for _ in range(60):
        daemon_reload(h, "u-crunch-0")
        h.tick(1)
        reads.append(knob(h, "u-crunch-0", "cpu.idle") == "1")
    # at first every rewrite is undone at once; then the checks wait 2, 4, 8... seconds (at most the reconcile)
    assert reads[0]
    assert 5 <= sum(reads) <= 15, reads
