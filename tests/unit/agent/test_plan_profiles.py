"""`tidemark-agent plan --cluster` applies the file's ColocationProfiles to its pods, as the webhook would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cgroups import KubeletCgroupTree

from .test_cli import CLUSTER, run, setup

Tree = type[KubeletCgroupTree]

PROFILE = """\
---
apiVersion: v1
kind: Namespace
metadata: {name: batch, labels: {team: data}}
---
apiVersion: colocation.tidemark.io/v1alpha1
kind: ColocationProfile
metadata: {name: data-offline}
spec:
  namespaceSelector: {matchLabels: {team: data}}
  qosLevel: BE
  batchResources: true
"""


def test_a_profile_makes_a_plain_pod_offline_in_the_plan(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = kubelet_cgroup_tree("v2", "cgroupfs")
    cluster, clock = setup(tree, tmp_path)
    # the batch pod without its qos-level: only the profile makes it offline
    plain = CLUSTER.format(annotations="{}").replace("annotations: {volcano.sh/qos-level: BE},", "")
    assert "qos-level" not in plain
    Path(cluster).write_text(plain + PROFILE)
    rc, out, err = run(["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "-o", "json"],
                       clock, capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert any(e == "pod batch/crunch: colocation profile data-offline applied" for e in doc["explanations"]), doc
    cpu = [w for w in doc["cgroup_writes"] if w["file"].startswith("cpu.") and w["file"] != "cpu.max"]
    assert cpu == [{"path": tree.pods["off-1"].dirs.cpu, "file": "cpu.idle", "value": "1"}]

    # without the profile the same pod is online: no cpu.idle
    Path(cluster).write_text(plain)
    rc, out, err = run(["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "-o", "json"],
                       clock, capsys)
    assert rc == 0, err
    assert not [w for w in json.loads(out)["cgroup_writes"] if w["file"] == "cpu.idle"]
