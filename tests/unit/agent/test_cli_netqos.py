"""`tidemark-agent plan` with networkQoS on: the network decisions in the explanations (fake clock, fake trees).

The NIC and veth counters are this machine's real ones (a netlink link dump needs no privilege); the
fake tree's offline process does not exist, so its pod is reported without a veth.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.test_cli import run, setup

Tree = Callable[..., KubeletCgroupTree]


def test_plan_explains_network_qos(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = kubelet_cgroup_tree("v1", "cgroupfs")
    cluster, clock = setup(tree, tmp_path)
    config = tmp_path / "agent.yaml"
    config.write_text("networkQoS: {enabled: true, interface: lo, nicSpeed: 1G}\n")
    argv = ["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "-o", "json", "--config", str(config)]
    start = clock.monotonic()
    rc, out, err = run(argv, clock, capsys)
    assert rc == 0, err
    doc = json.loads(out)
    text = "\n".join(doc["explanations"])
    assert "batch/crunch: offline pod whose host-side veth was not found" in text
    assert "network QoS: shaped (download / upload) none" in text
    assert set(doc) == {
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
    }  # the keys of docs/design.md, "Plan output" only: the network plan is in the explanations
    assert clock.monotonic() - start >= 6  # 3 cgroup samples + 3 network samples, on the fake clock


def test_plan_without_network_qos_says_nothing_of_it(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = kubelet_cgroup_tree("v1", "cgroupfs")
    cluster, clock = setup(tree, tmp_path)
    rc, out, _ = run(["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "-o", "json"], clock, capsys)
    assert rc == 0 and not any("network QoS" in e for e in json.loads(out)["explanations"])
