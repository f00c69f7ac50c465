"""The daemon runs network QoS beside its cycle: offline pods' processes from the knob sensor, events on
the Node, metrics on /metrics, and the restore paths (uninstall, a restore request, `tidemark-agent restore`).

Fake kubelet tree and fake clock (tests/unit/agent/daemon_helpers.py); the NIC is this machine's loopback
(a link dump needs no privilege), the fake offline process has no namespace, so nothing is shaped: what
is checked here is the wiring; shaping itself is tested for real in tests/integration/agent/test_netqos.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from agent.act.tc_writer import JOURNAL
from agent.daemon.netqos import NetworkQosCollector
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.daemon_helpers import make_harness, pod_obj

CONFIG = "networkQoS: {enabled: true, interface: lo, nicSpeed: 1G}\n"


def _harness(tree: KubeletCgroupTree, tmp_path: Path, config: str = CONFIG):  # type: ignore[no-untyped-def]
    cid = f"containerd://{'b' * 64}"
    tree.add_pod("off-1", "BestEffort", {"c": cid})
    tree.add_process("off-1", 7001)
    pods = [pod_obj("off-1", "crunch", qos="BE", containers={"c": cid})]
    return make_harness(tree, tmp_path, pods=pods, config_text=config)


def test_network_tick_sees_offline_pods_and_reports_metrics(kubelet_cgroup_tree, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    h = _harness(kubelet_cgroup_tree("v1"), tmp_path)
    h.tick(2)
    assert [(p.key, p.pid) for p in h.agent.network.pod_nets()] == [("default/crunch", 7001)]  # the knob sensor's
    plan = h.agent.network.tick()
    assert plan.enabled and plan.nic == "lo"
    assert [(u.key, u.reason) for u in plan.unshaped] == [("default/crunch", "NoVeth")]
    registry = CollectorRegistry()
    registry.register(NetworkQosCollector(h.agent.network.qos))
    text = generate_latest(registry).decode()
    assert "tidemark_agent_network_qos_enabled 1.0" in text
    assert 'tidemark_agent_network_unshaped_offline_pods{reason="NoVeth"} 1.0' in text
    h.agent.shutdown(restore=True)


def test_uninstall_and_restore_remove_journaled_shaping(kubelet_cgroup_tree, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    h = _harness(kubelet_cgroup_tree("v1"), tmp_path)
    journal = tmp_path / "state" / JOURNAL
    # a veth that went away with its pod: restore drops its entry (and would delete its IFB)
    h.agent.network.qos.writer.journal.links.clear()
    journal.write_text(json.dumps({"version": 1, "links": {"tq-gone0": {"index": 99999, "ifb": "tmq99999"}}}))
    h.agent.network.qos.writer.journal.load()
    h.agent.shutdown(restore=True)
    assert json.loads(journal.read_text())["links"] == {}


def test_a_restore_request_pauses_network_qos(kubelet_cgroup_tree, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    h = _harness(kubelet_cgroup_tree("v1"), tmp_path)
    assert h.state is not None
    h.state.request_restore()
    h.tick()
    assert h.agent.qos.paused
    assert not h.agent.network.tick().enabled
    h.agent.shutdown()
