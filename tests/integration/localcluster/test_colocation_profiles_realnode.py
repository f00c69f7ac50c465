"""A ColocationProfile on the real node: a plain Deployment in a selected namespace runs offline.

(tests/fixtures/realnode.py: the `real_node`/`real_ns` fixtures.)

The Deployment is what a user has before Tidemark: `cpu`/`memory` requests, the default scheduler, no
qos-level. The profile (namespace selected by a label) is applied by the shipped webhook's Pod hook when the
ReplicaSet controller creates the pod; the shipped scheduler binds it against `kubernetes.io/batch-*`, kubelet
runs it, and the agent gives its pod cgroup the offline knobs: `cpu.idle=1` where the kernel has it (>= 5.15),
else the minimal `cpu.shares=2` (docs/agent.md, "QoS knobs (aware of kubelet's tree)").
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from localcluster.realnode import WORKLOAD_IMAGE, RealNode
from tests.fixtures.realnode import RealNamespace, pod_cgroup
from tidemark.apis import quantity_to_int
from tidemark.profiles import ANN_PROFILE, GROUP, PLURAL, VERSION

pytestmark = pytest.mark.slow

BATCH_CPU = "kubernetes.io/batch-cpu"


def _read(path: Path) -> str:
    return path.read_text().strip()


def _profile(ns: RealNamespace, name: str, team: str) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ColocationProfile", "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {"tidemark.io/test-team": team}},
                     "selector": {"matchLabels": {"app": "etl"}},
                     "qosLevel": "BE", "schedulerName": "volcano", "batchResources": True}}
    ns.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    ns.cleanups.append(lambda: ns.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name))


def _deployment(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "etl"}},
                 "template": {"metadata": {"labels": {"app": "etl"}},
                              "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                                  "name": "main", "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never",
                                  "command": ["sh", "-c", "sleep 3600"],
                                  "resources": {"requests": {"cpu": "20m", "memory": "32Mi"},
                                                "limits": {"cpu": "40m", "memory": "64Mi"}}}]}}},
    }


def _wait_profile_served(ns: RealNamespace, profile: str) -> None:
    """Until the webhook's cache has the profile: a probe pod comes back mutated (then deleted)."""
    def mutated() -> bool:
        probe = ns.pod(f"probe-{secrets.token_hex(3)}", scheduler=None, node_name="no-such-node")
        probe["metadata"]["labels"] = {"app": "etl"}
        created = ns.create(probe)
        ns.core.delete_namespaced_pod(created.metadata.name, ns.name, grace_period_seconds=0)
        return bool((created.metadata.annotations or {}).get(ANN_PROFILE) == profile)

    ns.wait(mutated, 60, f"the webhook to apply ColocationProfile {profile}")


def test_a_plain_deployment_in_a_selected_namespace_runs_offline(real_node: RealNode, real_ns: RealNamespace) -> None:
    from kubernetes import client

    team = f"t{secrets.token_hex(3)}"
    profile = f"etl-offline-{team}"
    real_ns.core.patch_namespace(real_ns.name, {"metadata": {"labels": {"tidemark.io/test-team": team}}})
    _profile(real_ns, profile, team)
    _wait_profile_served(real_ns, profile)

    def batch_published() -> bool:
        alloc = real_ns.core.read_node(real_node.node_name).status.allocatable or {}
        return (quantity_to_int(alloc.get(BATCH_CPU, "0")) or 0) >= 40

    real_ns.wait(batch_published, 90, f"{BATCH_CPU} >= 40 published")
    apps = client.AppsV1Api(real_ns.api)
    apps.create_namespaced_deployment(real_ns.name, _deployment("etl"))
    real_ns.cleanups.append(lambda: apps.delete_namespaced_deployment("etl", real_ns.name))

    def running() -> Any:
        pods = [p for p in real_ns.core.list_namespaced_pod(real_ns.name, label_selector="app=etl").items
                if p.status.phase == "Running" and p.metadata.owner_references]
        return pods[0] if pods else None

    real_ns.wait(lambda: running() is not None, 180, "the Deployment's pod Running")
    pod = running()
    assert pod.metadata.annotations[ANN_PROFILE] == profile
    assert pod.metadata.annotations["volcano.sh/qos-level"] == "BE"
    assert pod.spec.scheduler_name == "volcano" and pod.spec.node_name == real_node.node_name
    requests = pod.spec.containers[0].resources.requests
    assert "cpu" not in requests and quantity_to_int(requests[BATCH_CPU]) == 20
    assert pod.status.qos_class == "BestEffort"  # no cpu/memory left: kubelet's BestEffort tree

    cg = pod_cgroup(pod, "cpu")
    idle = cg / "cpu.idle"

    def offline_knobs() -> bool:
        return _read(idle) == "1" if idle.exists() else _read(cg / "cpu.shares") == "2"

    real_ns.wait(offline_knobs, 60, f"the agent's offline knobs on {cg}")
