"""tidemark-scheduler simulate: the JSON document, the table, exit codes on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scheduler_ext.cli import main

from .helpers import node, pod, podgroup, queue

CONF = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    conf = tmp_path / "conf.yaml"
    conf.write_text(CONF)
    objs = [
        queue("q1"),
        node("n1", cpu="3"),
        podgroup("pg", min_member=2, phase="Pending", minResources={"cpu": "2"}),
        pod("pg-w-0", group="pg"),
        pod("pg-w-1", group="pg"),
        pod("lonely", group=None, cpu="4", annotations={"scheduling.volcano.sh/queue-name": "q1"}),
    ]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(objs))
    return conf, cluster


def test_simulate_json_shape(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    conf, cluster = files
    rc = main(["simulate", "--conf", str(conf), "--cluster", str(cluster), "--now", "2024-01-01T00:00:00Z"])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)
    assert set(doc) == {"binds", "evictions", "pipelined", "podgroups", "stats"}
    assert doc["binds"] == {"ns1/pg-w-0": "n1", "ns1/pg-w-1": "n1"}
    assert doc["evictions"] == [] and doc["pipelined"] == {}
    assert doc["podgroups"]["ns1/pg"] == "Inqueue"
    assert doc["stats"]["cycles"] == 1 and doc["stats"]["session_seconds"] >= 0


def test_simulate_two_cycles_runs_bound_pods(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    conf, cluster = files
    assert main(["simulate", "--scheduler-conf", str(conf), "--cluster", str(cluster), "--cycles", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["podgroups"]["ns1/pg"] == "Running"  # bound pods became Running between cycles
    assert doc["stats"]["cycles"] == 2


def test_simulate_table_explains_pending(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    conf, cluster = files
    assert main(["simulate", "--conf", str(conf), "--cluster", str(cluster), "-o", "table"]) == 0
    out = capsys.readouterr().out
    assert "ns1/pg-w-0" in out and "bound to n1" in out
    assert "ns1/lonely" in out and "pending:" in out


def test_bad_conf_exit_2(tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, cluster = files
    bad = tmp_path / "bad.yaml"
    bad.write_text("actions: allocate, nope\ntiers: []\n")
    assert main(["simulate", "--conf", str(bad), "--cluster", str(cluster)]) == 2
    err = capsys.readouterr().err
    assert "actions[1]" in err and "Traceback" not in err


def test_bad_objects_exit_2(tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    conf, _ = files
    for text in ("kind: Node\nmetadata: {}\n", "{{{ not yaml", "- 1\n- 2\n"):
        cluster = tmp_path / "c.yaml"
        cluster.write_text(text)
        assert main(["simulate", "--conf", str(conf), "--cluster", str(cluster)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in err[0]
    assert main(["simulate", "--conf", str(conf), "--cluster", str(tmp_path / "missing.yaml")]) == 2


def test_usage_errors_and_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 2
    # `run` is implemented (scheduler_ext/run/); a bad flag is a usage error before any API call
    assert main(["run", "--schedule-period=1"]) == 2
    assert "--schedule-period" in capsys.readouterr().err
