"""Eviction/binding bodies and the mapping of every server answer to an explicit result; discovery rules.

The server is replaced by functions standing in for `request`; the real answers (201, 429 from a
PDB, 404, 409) are produced by a real apiserver in tests/integration/kube/test_eviction_api.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.kube import eviction as evm
from tidemark.kube import resources
from tidemark.kube.client import ApiStatusError, Response, TransportError
from tidemark.kube.eviction import (
    BindOutcome,
    EvictionOutcome,
    Evictor,
    bind,
    binding_body,
    evict_pod,
    eviction_body,
)


def test_bodies() -> None:
    assert eviction_body("policy/v1beta1", "ns", "p") == {
        "apiVersion": "policy/v1beta1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "ns"},
    }
    assert eviction_body("policy/v1", "ns", "p", 0, "u")["deleteOptions"] == {
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": "u"},
    }
    assert binding_body("ns", "p", "u", "n1") == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }


def _raising(exc: Exception) -> Any:
    def fake(*args: Any, **kwargs: Any) -> Response:
        raise exc

    return fake


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (ApiStatusError(429, "Cannot evict pod as it would violate the pod's disruption budget."), "Blocked"),
        (ApiStatusError(404, 'pods "p" not found'), "NotFound"),
        (
            ApiStatusError(
                409,
                'Operation cannot be fulfilled on Pod "b": the UID in the precondition (u) does not match the UID '
                "in record (6bc9). The object might have been deleted and then recreated",
            ),
            "NotFound",
        ),  # the exact text of a 1.20 server
        (ApiStatusError(409, "Operation cannot be fulfilled: the object has been modified"), "Error"),
        (ApiStatusError(500, "There are multiple pod disruption budgets"), "Error"),
        (ApiStatusError(403, "forbidden"), "Error"),
        (TransportError("connection refused"), "Error"),
        (ValueError("client bug"), "Error"),
    ],
)
def test_every_eviction_answer_is_a_result_never_an_exception(
    monkeypatch: pytest.MonkeyPatch, exc: Exception, outcome: str
) -> None:
    monkeypatch.setattr(evm, "request", _raising(exc))
    result = evict_pod(object(), "ns", "p", uid="u", api_version="policy/v1")
    assert result.outcome == EvictionOutcome(outcome)
    assert result.ok == (outcome == "NotFound")


def test_a_429_carries_the_pdb_cause_and_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 1 healthy pods"}]}}
    exc = ApiStatusError(429, "Cannot evict pod", body, {"Retry-After": "10"})
    monkeypatch.setattr(evm, "request", _raising(exc))
    r = evict_pod(object(), "ns", "p", api_version="policy/v1")
    assert (r.outcome, r.message, r.retry_after, r.status) == (
        EvictionOutcome.BLOCKED,
        "Cannot evict pod (needs 1 healthy pods)",
        10.0,
        429,
    )


def test_successful_eviction_posts_to_the_subresource(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, Any]] = []

    def ok(api: Any, method: str, path: str, **kw: Any) -> Response:
        calls.append((method, path, kw["body"]))
        return Response(201, {"kind": "Status", "status": "Success"}, {})

    monkeypatch.setattr(evm, "request", ok)
    assert (
        evict_pod(object(), "ns", "p", grace_period_seconds=5, api_version="policy/v1").outcome
        is EvictionOutcome.EVICTED
    )
    assert calls[0][:2] == ("POST", "/api/v1/namespaces/ns/pods/p/eviction")
    assert calls[0][2]["deleteOptions"] == {"gracePeriodSeconds": 5}
    assert bind(object(), "ns", "p", "u", "n1").outcome is BindOutcome.BOUND
    assert calls[1][:2] == ("POST", "/api/v1/namespaces/ns/pods/p/binding")


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (ApiStatusError(409, 'pod p is already assigned to node "n0"'), "Conflict"),
        (ApiStatusError(404, "not found"), "NotFound"),
        (ApiStatusError(500, "etcd"), "Error"),
        (TransportError("reset"), "Error"),
        (KeyError("bug"), "Error"),
    ],
)
def test_every_bind_answer_is_a_result(monkeypatch: pytest.MonkeyPatch, exc: Exception, outcome: str) -> None:
    monkeypatch.setattr(evm, "request", _raising(exc))
    assert bind(object(), "ns", "p", None, "n1").outcome == BindOutcome(outcome)


class _Api:
    """Hashable, weak-referenceable stand-in for an ApiClient (discovery caches per client)."""


def test_eviction_version_comes_from_the_core_resource_list_then_policy_group(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: dict[str, Any] = {
        "/api/v1": {"resources": [{"name": "pods/eviction", "group": "policy", "version": "v1beta1"}]},
        "/apis/policy": {"versions": [{"version": "v1"}, {"version": "v1beta1"}]},
    }
    asked: list[str] = []

    def fake(api: Any, method: str, path: str, **kw: Any) -> Any:
        asked.append(path)
        return answers[path]

    monkeypatch.setattr(resources, "request_json", fake)
    api = _Api()
    # 1.21's shape: policy/v1 is served (PDBs) but Eviction is still v1beta1.
    assert resources.eviction_api_version(api) == "policy/v1beta1"
    assert resources.eviction_api_version(api) == "policy/v1beta1" and asked == ["/api/v1"]  # cached
    assert resources.pdb_kind(api) == resources.PDBS_V1
    answers["/api/v1"] = {"resources": [{"name": "pods/eviction"}]}  # old servers: no group/version
    other = _Api()
    assert resources.eviction_api_version(other) == "policy/v1"
    answers["/apis/policy"] = {"versions": [{"version": "v1beta1"}]}
    resources.forget_discovery(other)
    assert resources.eviction_api_version(other) == "policy/v1beta1"
    assert resources.pdb_kind(other) == resources.PDBS_V1BETA1


def test_evictor_reports_discovery_failure_as_a_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "request_json", _raising(TransportError("down")))
    monkeypatch.setattr(evm, "eviction_api_version", resources.eviction_api_version)
    r = Evictor(_Api()).evict("ns", "p")
    assert r.outcome is EvictionOutcome.ERROR and "discover" in r.message


def test_resource_paths() -> None:
    assert resources.PODS.collection_path() == "/api/v1/pods"
    assert resources.PODS.collection_path("ns") == "/api/v1/namespaces/ns/pods"
    assert resources.NODES.object_path("n1", "ignored") == "/api/v1/nodes/n1"
    assert resources.PODGROUPS.object_path("pg", "ns", "status") == (
        "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/pg/status"
    )
    assert resources.QUEUES.collection_path("ns") == "/apis/scheduling.volcano.sh/v1beta1/queues"
    assert resources.LEASES.api_version == "coordination.k8s.io/v1" and str(resources.PODS) == "pods.v1"
