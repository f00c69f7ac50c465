"""Memory QoS through the daemon (fake kubelet tree, in-memory cluster, fake clock): written, journaled, and put
back when `memoryQoS.enabled` turns off, on the pods and on the QoS-level ancestors alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tests.unit.agent.daemon_helpers import Harness, make_harness, pod_obj

Tree = Callable[..., KubeletCgroupTree]
BUDGET_HIGH = str(int(16 * GiB * 0.5 * 0.9) // 4096 * 4096)  # allocatable 16Gi x capacity.ratio.memory x highRatio


def cid(uid: str) -> str:
    return f"containerd://{uid.replace('-', '')[:12]:0<64}"


def scenario(kubelet_cgroup_tree: Tree, tmp_path: Path, version: str) -> Harness:
    tree = kubelet_cgroup_tree(version)
    tree.add_pod("u-web", "Burstable", {"c": cid("u-web")}, cpu_request_milli=1000)
    tree.add_pod("u-crunch", "BestEffort", {"c": cid("u-crunch")})
    pods = [
        pod_obj("u-web", "web", qos_class="Burstable", requests={"cpu": "1", "memory": "1Gi"}),
        pod_obj("u-crunch", "crunch", qos="BE", created="2024-01-01T00:00:05Z"),
    ]
    return make_harness(tree, tmp_path, pods=pods, config_text="memoryQoS: {enabled: true, minRatio: 0.5}\n")


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_memory_qos_is_written_then_restored_when_turned_off(
    kubelet_cgroup_tree: Tree, tmp_path: Path, version: str
) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path, version)
    t = h.tree
    web, crunch = t.pods["u-web"], t.pods["u-crunch"]
    burstable = t.layout.qos("Burstable")
    h.tick(2)
    if version == "v2":
        assert t.read(crunch.dirs, "memory.high") == BUDGET_HIGH
        for d in (web.dirs, web.containers["c"], burstable, t.kubepods):
            assert (t.read(d, "memory.low"), t.read(d, "memory.min")) == (str(GiB), str(GiB // 2)), d
    else:
        assert t.read(crunch.dirs, "memory.soft_limit_in_bytes") == BUDGET_HIGH
        assert t.read(web.dirs, "memory.soft_limit_in_bytes") == "9223372036854771712"  # v1: nothing for online
    assert h.state is not None and any(e.file.startswith("memory.") for e in h.state.journal.knobs.values())
    (tmp_path / "agent.yaml").write_text("memoryQoS: {enabled: false}\n")
    h.tick(3)
    assert h.agent.keeper.generation == 2
    if version == "v2":
        assert t.read(crunch.dirs, "memory.high") == "max"
        for d in (web.dirs, web.containers["c"], burstable, t.kubepods):
            assert (t.read(d, "memory.low"), t.read(d, "memory.min")) == ("0", "0"), d
    else:
        assert t.read(crunch.dirs, "memory.soft_limit_in_bytes") == "9223372036854771712"
    assert not any(e.file.startswith("memory.") for e in h.state.journal.knobs.values())
    assert t.read(crunch.dirs, "cpu.idle") == "1"  # the CPU knobs stay
