"""`-o yaml` beside json and table on both commands: the same document, in YAML."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from agent.cli import main as agent_main
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.test_cli import setup

REPO = Path(__file__).resolve().parents[2]
SCHEDULER = str(Path(sys.executable).with_name("tidemark-scheduler"))


def test_simulate_yaml_is_the_json_document() -> None:
    conf, cluster = REPO / "examples/volcano-scheduler.conf", REPO / "examples/cluster.yaml"
    args = ["simulate", "--conf", str(conf), "--cluster", str(cluster)]
    docs = {}
    for fmt in ("json", "yaml"):
        r = subprocess.run([SCHEDULER, *args, "-o", fmt], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        docs[fmt] = json.loads(r.stdout) if fmt == "json" else yaml.safe_load(r.stdout)
    for doc in docs.values():
        doc["stats"].pop("session_seconds")
    assert docs["yaml"] == docs["json"] and docs["json"]["binds"]


def test_plan_yaml_is_the_json_document(
    kubelet_cgroup_tree: Callable[..., KubeletCgroupTree], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = {}
    for fmt in ("json", "yaml"):
        tree = kubelet_cgroup_tree("v2", "cgroupfs")
        (tmp_path / fmt).mkdir()
        cluster, clock = setup(tree, tmp_path / fmt)
        argv = ["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "-o", fmt]
        rc = agent_main(argv, clock=clock)
        out = capsys.readouterr().out
        assert rc == 0
        doc = json.loads(out) if fmt == "json" else yaml.safe_load(out)
        docs[fmt] = json.loads(json.dumps(doc).replace(str(tree.base), "<host>"))  # each run has its own tree
    assert docs["yaml"] == docs["json"] and docs["json"]["node"] == "n1"
