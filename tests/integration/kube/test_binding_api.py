"""tidemark.kube.binding.AsyncBinder against a real kube-apiserver 1.20: outcomes, many binds in
flight on few connections, fencing, stop, a kubeconfig-loaded and a hand-built configuration."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client as k8s_client

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.kube.helpers import admin_api, create_node, create_pod, token_api, wait_for
from tidemark.kube.binding import AsyncBinder, unsupported
from tidemark.kube.client import request_json
from tidemark.kube.eviction import BindOutcome, BindResult
from tidemark.kube.resources import PODS

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


class Results:
    def __init__(self) -> None:
        self.items: list[BindResult | None] = []
        self._lock = threading.Lock()

    def __call__(self, result: BindResult | None) -> None:
        with self._lock:
            self.items.append(result)

    def count(self) -> int:
        with self._lock:
            return len(self.items)


def _bind_one(binder: AsyncBinder, namespace: str, name: str, uid: str | None, node: str) -> BindResult | None:
    out = Results()
    binder.submit(namespace, name, uid, node, fence=lambda: True, done=out)
    wait_for(lambda: out.count() == 1, f"the bind of {name}")
    return out.items[0]


def test_outcomes_match_bind(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    node = create_node(api, kube, "n")
    pod = create_pod(api, kube.name, "p")
    binder = AsyncBinder(api.configuration, connections=4, limiter=api.limiter)
    try:
        first = _bind_one(binder, kube.name, "p", pod["metadata"]["uid"], node)
        assert first is not None and (first.outcome, first.status) == (BindOutcome.BOUND, 201)
        assert request_json(api, "GET", PODS.object_path("p", kube.name))["spec"]["nodeName"] == node
        again = _bind_one(binder, kube.name, "p", pod["metadata"]["uid"], node)
        assert again is not None and again.outcome is BindOutcome.CONFLICT and "already assigned" in again.message
        ghost = _bind_one(binder, kube.name, "ghost", None, node)
        assert ghost is not None and (ghost.outcome, ghost.status) == (BindOutcome.NOT_FOUND, 404)
    finally:
        binder.stop()


def test_many_binds_in_flight_on_few_connections(kube: KubeNamespace) -> None:
    api = token_api(kube)  # a hand-built configuration (api_key "authorization" with a prefix)
    nodes = [create_node(api, kube, f"n{i}") for i in range(3)]
    names = [f"p{i:03d}" for i in range(60)]
    for name in names:
        create_pod(api, kube.name, name)
    binder = AsyncBinder(api.configuration, connections=8)
    out = Results()
    try:
        for i, name in enumerate(names):
            binder.submit(kube.name, name, None, nodes[i % 3], fence=lambda: True, done=out)
        wait_for(lambda: out.count() == len(names), "60 binds")
    finally:
        binder.stop()
    assert all(r is not None and r.outcome is BindOutcome.BOUND for r in out.items)
    pods = request_json(api, "GET", PODS.collection_path(kube.name))["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes[i % 3] for i in range(60))


def test_a_fenced_bind_is_not_sent_and_a_stopped_binder_sends_nothing(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    node = create_node(api, kube, "n")
    create_pod(api, kube.name, "fenced")
    binder = AsyncBinder(api.configuration, connections=2)
    out = Results()
    binder.submit(kube.name, "fenced", None, node, fence=lambda: False, done=out)
    wait_for(lambda: out.count() == 1, "the fenced bind's callback")
    binder.stop()
    binder.submit(kube.name, "fenced", None, node, fence=lambda: True, done=out)
    assert out.items == [None, None]
    assert not request_json(api, "GET", PODS.object_path("fenced", kube.name))["spec"].get("nodeName")


def test_no_answer_is_an_error_without_status(kube: KubeNamespace) -> None:
    from tests.integration.kube.helpers import closed_port

    cfg: Any = k8s_client.Configuration(host=f"https://127.0.0.1:{closed_port()}")
    cfg.verify_ssl = False
    binder = AsyncBinder(cfg, connections=1)
    try:
        result = _bind_one(binder, kube.name, "p", None, "n")
    finally:
        binder.stop()
    assert result is not None and result.outcome is BindOutcome.ERROR and result.status is None


def test_configurations_it_cannot_serve_are_named() -> None:
    cfg: Any = k8s_client.Configuration(host="https://127.0.0.1:6443")
    assert unsupported(cfg) is None
    cfg.proxy = "http://proxy.invalid:3128"
    assert unsupported(cfg) == "a proxy is configured"
    assert unsupported(None) == "no client configuration"
