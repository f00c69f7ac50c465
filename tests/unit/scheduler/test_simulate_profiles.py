"""`tidemark-scheduler simulate` applies the cluster file's ColocationProfiles to its pods, as the webhook would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scheduler_ext.cli import main

from .helpers import node, pod
from .test_cli import CONF

PROFILE = {"apiVersion": "colocation.tidemark.io/v1alpha1", "kind": "ColocationProfile",
           "metadata": {"name": "spark"},
           "spec": {"namespaceSelector": {"matchLabels": {"team": "spark"}}, "qosLevel": "BE",
                    "schedulerName": "volcano", "batchResources": True}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1", "labels": {"team": "spark"}}}


def _files(tmp_path: Path, *extra: dict[str, object]) -> tuple[str, str]:
    conf = tmp_path / "conf.yaml"
    conf.write_text(CONF)
    objs = [node("n1", cpu="4", resources={"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"}),
            pod("exec", scheduler="default-scheduler", cpu="1500m", memory="1Gi"), *extra]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(objs))
    return str(conf), str(cluster)


def test_the_profile_turns_a_plain_pod_into_a_batch_pod_of_ours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf, cluster = _files(tmp_path)
    assert main(["simulate", "--conf", conf, "--cluster", cluster]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["binds"] == {} and "profiles" not in plain  # default-scheduler's pod: not ours

    conf, cluster = _files(tmp_path, NAMESPACE, PROFILE)
    assert main(["simulate", "--conf", conf, "--cluster", cluster]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["binds"] == {"ns1/exec": "n1"} and doc["profiles"] == {"ns1/exec": "spark"}
    assert "colocation profile: pod ns1/exec: colocation profile spark applied" in err
    assert "not used by the scheduler" not in err

    assert main(["simulate", "--conf", conf, "--cluster", cluster, "-o", "table"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("colocation profile: pod ns1/exec: colocation profile spark applied\n")


def test_batch_requests_that_do_not_fit_stay_pending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = dict(pod("big", scheduler="default-scheduler", cpu="3", memory="1Gi"))
    conf, cluster = _files(tmp_path, NAMESPACE, PROFILE, big)
    assert main(["simulate", "--conf", conf, "--cluster", cluster]) == 0
    doc = json.loads(capsys.readouterr().out)
    # 1500 + 3000 milli-cores of batch-cpu on a node offering 2000: one fits, and it is the 1500m one
    assert doc["binds"] == {"ns1/exec": "n1"} and doc["profiles"] == {"ns1/big": "spark", "ns1/exec": "spark"}
