"""Shared by the real-apiserver tests of tidemark.kube: a Tidemark client for the test namespace and polling."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tidemark.kube.client import ApiStatusError, RateLimitedApiClient, new_api_client, request_json
from tidemark.kube.resources import NODES, PODS

TIMEOUT = 10.0


def wait_for(condition: Callable[[], object], what: str, timeout: float = TIMEOUT) -> None:
    """Poll `condition` every 20 ms; fail naming `what` after `timeout` seconds (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)


def admin_api(kube: KubeNamespace, **kwargs: Any) -> RateLimitedApiClient:
    """What the programs build: a client from a kubeconfig file (admin's token, TLS unverified)."""
    return new_api_client(str(kube.server.kubeconfig_path("admin")), **kwargs)


def token_api(kube: KubeNamespace, user: str = "admin", **kwargs: Any) -> RateLimitedApiClient:
    """A client from a Configuration built by hand (bearer token), whose `host` a test may change.

    Tests point it at a closed port to cut it off from the server. (A kubeconfig-loaded
    configuration cannot be used for that: its refresh hook puts the kubeconfig's host back
    before every request.)
    """
    from kubernetes import client as k8s_client

    cfg = k8s_client.Configuration(host=kube.server.api_url)
    cfg.api_key = {"authorization": kube.server.token(user)}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    cfg.verify_ssl = False
    return new_api_client(configuration=cfg, **kwargs)


def closed_port() -> int:
    """A local port nobody listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def create_pod(api: Any, namespace: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}], "terminationGracePeriodSeconds": 30},
    }
    return request_json(api, "POST", PODS.collection_path(namespace), body=body)


def create_node(api: Any, kube: KubeNamespace, prefix: str, labels: dict[str, str] | None = None) -> str:
    name = kube.unique(prefix)
    request_json(api, "POST", NODES.collection_path(), body={"metadata": {"name": name, "labels": labels or {}}})
    kube.defer(lambda: delete(api, NODES.object_path(name)))
    return name


def delete(api: Any, path: str) -> None:
    """DELETE, already-gone is fine (cleanups run after tests that may have deleted it)."""
    try:
        request_json(api, "DELETE", path, query={"gracePeriodSeconds": 0})
    except ApiStatusError as exc:
        if exc.status != 404:
            raise


def set_running_ready(api: Any, namespace: str, name: str) -> None:
    """What a kubelet would report: Running and Ready (a lone apiserver has no kubelet)."""
    status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    request_json(
        api,
        "PATCH",
        PODS.object_path(name, namespace, "status"),
        body=status,
        content_type="application/merge-patch+json",
    )
