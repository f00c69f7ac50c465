"""Issue 33 item 9: `plan` and `simulate` predict what the webhook does with a pod that carries the profile mark.

Before: a pod carrying `tidemark.io/colocation-profile` (any tenant can set it at creation) was skipped, while
the webhook applies the profiles anyway: simulate predicted an online pod the cluster makes offline. Now the
profiles are applied to it; a pod the webhook already mutated comes out unchanged and unreported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler_ext.cli import main
from tests.unit.scheduler.helpers import node, pod
from tests.unit.scheduler.test_cli import CONF
from tidemark.apis import parse_qos_level
from tidemark.profiles import ANN_PROFILE, apply_profiles, apply_to_objects

PROFILE = {"apiVersion": "colocation.tidemark.io/v1alpha1", "kind": "ColocationProfile",
           "metadata": {"name": "spark"},
           "spec": {"namespaceSelector": {"matchLabels": {"team": "spark"}}, "qosLevel": "BE",
                    "schedulerName": "volcano", "batchResources": True}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1", "labels": {"team": "spark"}}}


def _forged() -> dict[str, Any]:
    return pod("exec", scheduler="default-scheduler", cpu="1500m", memory="1Gi", annotations={ANN_PROFILE: "none"})


def test_a_pod_carrying_a_forged_mark_gets_the_profiles_as_from_the_webhook() -> None:
    webhook = apply_profiles(_forged(), "ns1", {"team": "spark"}, [PROFILE])
    out, lines = apply_to_objects([NAMESPACE, PROFILE, _forged()])
    predicted = next(o for o in out if o.get("kind") == "Pod")
    assert predicted == webhook.pod
    assert parse_qos_level(predicted["metadata"]["annotations"]).offline
    assert lines == ["pod ns1/exec: colocation profile spark applied"]


def test_a_pod_the_webhook_already_mutated_is_left_as_it_is_and_not_reported() -> None:
    mutated = apply_profiles(_forged(), "ns1", {"team": "spark"}, [PROFILE]).pod
    out, lines = apply_to_objects([NAMESPACE, PROFILE, mutated])
    assert next(o for o in out if o.get("kind") == "Pod") == mutated and lines == []


def test_simulate_binds_the_forged_pod_as_a_batch_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text(CONF)
    cluster = tmp_path / "cluster.yaml"
    objs = [node("n1", cpu="4", resources={"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"}),
            NAMESPACE, PROFILE, _forged()]
    cluster.write_text(yaml.safe_dump_all(objs))
    assert main(["simulate", "--conf", str(conf), "--cluster", str(cluster)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["binds"] == {"ns1/exec": "n1"} and doc["profiles"] == {"ns1/exec": "spark"}
