"""Eviction and binding against a real kube-apiserver 1.20 (Eviction served only as policy/v1beta1).

A lone apiserver has no disruption controller, so a PDB's status is never computed and the
eviction of a Running+Ready pod it covers is always refused with 429; 1.20 ignores PDBs for
Pending pods, so the test reports the pod Running and Ready first, as a kubelet would.
"""

from __future__ import annotations

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.kube.helpers import admin_api, create_node, create_pod, set_running_ready, wait_for
from tidemark.kube.client import ApiStatusError, request_json
from tidemark.kube.eviction import BindOutcome, EvictionOutcome, Evictor, bind, evict_pod
from tidemark.kube.resources import PDBS_V1BETA1, PODS, eviction_api_version, pdb_kind

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _gone(api: object, namespace: str, name: str) -> bool:
    try:
        request_json(api, "GET", PODS.object_path(name, namespace))
    except ApiStatusError as exc:
        return exc.status == 404
    return False


def test_discovers_the_versions_a_1_20_server_serves(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    assert eviction_api_version(api) == "policy/v1beta1"
    assert pdb_kind(api) == PDBS_V1BETA1


def test_evicts_a_pod_without_a_pdb_and_reports_a_missing_one(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    create_pod(api, kube.name, "victim")
    result = Evictor(api).evict(kube.name, "victim", grace_period_seconds=0)
    assert (result.outcome, result.status, result.ok) == (EvictionOutcome.EVICTED, 201, True)
    wait_for(lambda: _gone(api, kube.name, "victim"), "the evicted pod to be deleted")
    again = evict_pod(api, kube.name, "victim")
    assert (again.outcome, again.status) == (EvictionOutcome.NOT_FOUND, 404)


def test_a_bound_pod_evicted_with_a_grace_period_is_terminating(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    node = create_node(api, kube, "n")
    pod = create_pod(api, kube.name, "graceful")
    assert bind(api, kube.name, "graceful", pod["metadata"]["uid"], node).ok
    assert evict_pod(api, kube.name, "graceful", grace_period_seconds=30).outcome is EvictionOutcome.EVICTED
    live = request_json(api, "GET", PODS.object_path("graceful", kube.name))
    assert live["metadata"].get("deletionTimestamp") and live["metadata"]["deletionGracePeriodSeconds"] == 30


def test_a_pdb_blocks_eviction_with_429(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    create_pod(api, kube.name, "protected", {"app": "db"})
    set_running_ready(api, kube.name, "protected")
    pdb = {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": kube.name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    request_json(api, "POST", PDBS_V1BETA1.collection_path(kube.name), body=pdb)
    result = evict_pod(api, kube.name, "protected", grace_period_seconds=0)
    assert (result.outcome, result.status, result.ok) == (EvictionOutcome.BLOCKED, 429, False)
    assert "disruption budget" in result.message
    assert not _gone(api, kube.name, "protected")


def test_the_uid_precondition_is_accepted(kube: KubeNamespace) -> None:
    """With the right UID the eviction goes through.

    The wrong-UID case is not run here on purpose: 1.20's eviction handler retries a failed
    precondition as a conflict for 10 s (20 x 500 ms) before answering 409 "the UID in the
    precondition ... does not match"; that answer's mapping is pinned in the unit tests.
    """
    api = admin_api(kube)
    pod = create_pod(api, kube.name, "same-name")
    assert evict_pod(api, kube.name, "same-name", grace_period_seconds=0, uid=pod["metadata"]["uid"]).ok
    wait_for(lambda: _gone(api, kube.name, "same-name"), "the pod to be deleted")


def test_bind_then_conflict_then_not_found(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    node = create_node(api, kube, "n")
    pod = create_pod(api, kube.name, "p")
    result = bind(api, kube.name, "p", pod["metadata"]["uid"], node)
    assert (result.outcome, result.status) == (BindOutcome.BOUND, 201)
    assert request_json(api, "GET", PODS.object_path("p", kube.name))["spec"]["nodeName"] == node
    again = bind(api, kube.name, "p", pod["metadata"]["uid"], node)
    assert again.outcome is BindOutcome.CONFLICT and "already assigned" in again.message
    assert bind(api, kube.name, "ghost", None, node).outcome is BindOutcome.NOT_FOUND
