"""Helpers for the scheduler's real-apiserver tests: RBAC from the shipped manifest, objects, polling.

The scheduler under test authenticates as the token user `tidemark-scheduler`, bound to exactly the
rules of daemonset/scheduler/rbac.yaml (ClusterRole; the leader-election Role in the lock namespace).
Each test schedules under its own scheduler name and labels its nodes, and its pods select them,
so tests never see each other's pods or nodes on the shared API server.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from scheduler_ext.run import RunOptions, Scheduler
from tests.fixtures.kubeapi import KubeNamespace
from tidemark.kube.client import ApiStatusError, new_api_client, request_json
from tidemark.kube.resources import NODES, PODGROUPS, PODS, QUEUES

REPO = Path(__file__).resolve().parents[3]
RBAC = REPO / "daemonset" / "scheduler" / "rbac.yaml"
USER = "tidemark-scheduler"
TIMEOUT = 45.0  # generous: a loaded 2-core machine; a passing wait returns at once
TEST_LABEL = "tidemark-test"

CONF = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def wait_for(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT, interval: float = 0.05) -> Any:
    """Poll until `condition()` is truthy and return it; fail naming `what` after `timeout` s (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- RBAC ---------------------------------------------------------------------------------------------


def _put(api: Any, collection: str, name: str, body: dict[str, Any]) -> None:
    try:
        request_json(api, "POST", collection, body=body)
    except ApiStatusError as exc:
        if exc.status != 409:
            raise
        current = request_json(api, "GET", f"{collection}/{name}")
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        request_json(api, "PUT", f"{collection}/{name}", body=body)


def manifest_rules() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ClusterRole rules, leader-election Role rules) of daemonset/scheduler/rbac.yaml."""
    cluster: list[dict[str, Any]] = []
    role: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc and doc.get("kind") == "ClusterRole":
            cluster = doc["rules"]
        elif doc and doc.get("kind") == "Role":
            role = doc["rules"]
    assert cluster and role, "rbac.yaml has a ClusterRole and a Role"
    return cluster, role


def apply_rbac(admin: Any, lock_namespaces: list[str], user: str = USER) -> None:
    """Bind `user` to exactly the manifest's rules: the ClusterRole, and the Role in each lock namespace."""
    cluster_rules, role_rules = manifest_rules()
    base = "/apis/rbac.authorization.k8s.io/v1"
    _put(admin, f"{base}/clusterroles", "tidemark-scheduler", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "tidemark-scheduler"}, "rules": cluster_rules,
    })
    subject = [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    _put(admin, f"{base}/clusterrolebindings", "tidemark-scheduler-test", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "tidemark-scheduler-test"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tidemark-scheduler"},
        "subjects": subject,
    })
    for ns in lock_namespaces:
        _put(admin, f"{base}/namespaces/{ns}/roles", "tidemark-scheduler-leader-election", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "tidemark-scheduler-leader-election", "namespace": ns}, "rules": role_rules,
        })
        _put(admin, f"{base}/namespaces/{ns}/rolebindings", "tidemark-scheduler-leader-election", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "tidemark-scheduler-leader-election", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "tidemark-scheduler-leader-election"},
            "subjects": subject,
        })


# --- objects ------------------------------------------------------------------------------------------


def admin_api(kube: KubeNamespace) -> Any:
    return new_api_client(str(kube.server.kubeconfig_path("admin")))


def create_node(
    api: Any,
    kube: KubeNamespace,
    prefix: str = "node",
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> str:
    """A Ready node labelled for this test (a lone apiserver keeps the status it is created with)."""
    name = kube.unique(prefix)
    res = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {TEST_LABEL: kube.name, **(labels or {})},
                     "annotations": annotations or {}},
        "status": {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    request_json(api, "POST", NODES.collection_path(), body=body)
    kube.defer(lambda: delete(api, NODES.object_path(name)))
    return name


def pod_body(
    kube: KubeNamespace,
    name: str,
    scheduler: str,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    group: str | None = None,
    queue: str | None = None,
    priority_class: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if group:
        ann["scheduling.k8s.io/group-name"] = group
    if queue:
        ann["scheduling.volcano.sh/queue-name"] = queue
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "nodeSelector": {TEST_LABEL: kube.name},
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "c", "image": "registry.invalid/none",
                        "resources": {"requests": requests if requests is not None else
                                      {"cpu": cpu, "memory": memory}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": kube.name, "annotations": ann, "labels": labels or {}},
            "spec": spec}


def create_pod(api: Any, kube: KubeNamespace, name: str, scheduler: str, **kwargs: Any) -> dict[str, Any]:
    return request_json(api, "POST", PODS.collection_path(kube.name), body=pod_body(kube, name, scheduler, **kwargs))


def create_podgroup(api: Any, kube: KubeNamespace, name: str, min_member: int, queue: str = "default",
                    **spec: Any) -> dict[str, Any]:
    body = {"apiVersion": PODGROUPS.api_version, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": kube.name},
            "spec": {"minMember": min_member, "queue": queue, **spec}}
    return request_json(api, "POST", PODGROUPS.collection_path(kube.name), body=body)


def create_queue(api: Any, kube: KubeNamespace, prefix: str, **spec: Any) -> str:
    name = kube.unique(prefix)
    body = {"apiVersion": QUEUES.api_version, "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 1, "reclaimable": True, **spec}}
    request_json(api, "POST", QUEUES.collection_path(), body=body)
    kube.defer(lambda: delete(api, QUEUES.object_path(name)))
    return name


def create_priority_class(api: Any, kube: KubeNamespace, prefix: str, value: int) -> str:
    name = kube.unique(prefix)
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    request_json(api, "POST", path, body={"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                          "metadata": {"name": name}, "value": value})
    kube.defer(lambda: delete(api, f"{path}/{name}"))
    return name


def delete(api: Any, path: str) -> None:
    try:
        request_json(api, "DELETE", path, query={"gracePeriodSeconds": 0})
    except ApiStatusError as exc:
        if exc.status != 404:
            raise


def pods(api: Any, namespace: str) -> dict[str, dict[str, Any]]:
    items = request_json(api, "GET", PODS.collection_path(namespace))["items"]
    return {p["metadata"]["name"]: p for p in items}


def node_of(api: Any, namespace: str) -> dict[str, str]:
    """pod name -> node name ('' when unbound)."""
    return {n: p["spec"].get("nodeName") or "" for n, p in pods(api, namespace).items()}


def events(api: Any, namespace: str, reason: str | None = None) -> list[dict[str, Any]]:
    items = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if reason is None or e.get("reason") == reason]


def set_phase(api: Any, namespace: str, name: str, phase: str) -> None:
    """Play kubelet: report the pod's phase."""
    request_json(api, "PATCH", PODS.object_path(name, namespace, "status"), body={"status": {"phase": phase}},
                 content_type="application/merge-patch+json")


# --- the scheduler under test ------------------------------------------------------------------------


def scheduler_name(kube: KubeNamespace) -> str:
    return f"volcano-{kube.name}"


@contextlib.contextmanager
def running_scheduler(
    kube: KubeNamespace,
    *,
    conf: str = CONF,
    tmp_path: Path,
    period: float = 0.2,
    user: str = USER,
    **options: Any,
) -> Iterator[Scheduler]:
    """An in-process Scheduler as `user` (RBAC: the manifest's rules), serving on a free local port."""
    conf_path = tmp_path / "volcano-scheduler.conf"
    if not conf_path.exists():
        conf_path.write_text(conf)
    opts = RunOptions(
        scheduler_conf=str(conf_path),
        scheduler_name=options.pop("scheduler_name", scheduler_name(kube)),
        schedule_period=period,
        listen_address="127.0.0.1:0",
        lock_namespace=kube.name,
        **options,
    )
    api = new_api_client(str(kube.server.kubeconfig_path(user)), pool_size=64)
    sched = Scheduler(opts, api_client=api, registry=CollectorRegistry()).start()
    try:
        yield sched
    finally:
        sched.stop()
        api.close()


def metric(sched: Scheduler, name: str, labels: dict[str, str] | None = None) -> float:
    """A sample's value from the scheduler's registry (0 when absent)."""
    value = sched.registry.get_sample_value(name, labels or {})
    return float(value) if value is not None else 0.0


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """GET /metrics (text format) -> sample name -> {sorted labels: value}."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def http_status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)[:4000]
