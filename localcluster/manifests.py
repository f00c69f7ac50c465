"""Create-or-replace of manifest objects over the raw JSON API (a tiny `kubectl apply` for the local cluster)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from tidemark.kube.client import ApiStatusError, request, request_json
from tidemark.kube.resources import ResourceKind

JSON = dict[str, Any]

KINDS: Final[Mapping[str, ResourceKind]] = {
    "Namespace": ResourceKind("", "v1", "namespaces", "Namespace", namespaced=False),
    "Node": ResourceKind("", "v1", "nodes", "Node", namespaced=False),
    "Pod": ResourceKind("", "v1", "pods", "Pod"),
    "ConfigMap": ResourceKind("", "v1", "configmaps", "ConfigMap"),
    "ServiceAccount": ResourceKind("", "v1", "serviceaccounts", "ServiceAccount"),
    "CustomResourceDefinition": ResourceKind(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
    ),
    "PriorityClass": ResourceKind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    "ClusterRole": ResourceKind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    "ClusterRoleBinding": ResourceKind(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
    ),
    "Role": ResourceKind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": ResourceKind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "PodGroup": ResourceKind("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"),
    "Queue": ResourceKind("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False),
}


def load_yaml(path: Path) -> list[JSON]:
    """The mapping documents of a (multi-document) YAML file."""
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def kind_of(obj: Mapping[str, Any]) -> ResourceKind:
    kind = str(obj.get("kind") or "")
    if kind not in KINDS:
        raise ValueError(f"cannot apply kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    return KINDS[kind]


def apply(api: Any, obj: Mapping[str, Any]) -> JSON:
    """Create `obj`; if it exists, replace it (PUT with the current resourceVersion). Returns the stored object."""
    kind = kind_of(obj)
    md = obj.get("metadata") or {}
    ns = str(md.get("namespace") or "default") if kind.namespaced else None
    body = dict(obj)
    body.setdefault("apiVersion", kind.api_version)
    try:
        return request_json(api, "POST", kind.collection_path(ns), body=body)
    except ApiStatusError as exc:
        if exc.status != 409:
            raise
    current = request_json(api, "GET", kind.object_path(str(md["name"]), ns))
    body["metadata"] = {**md, "resourceVersion": (current.get("metadata") or {}).get("resourceVersion")}
    return request_json(api, "PUT", kind.object_path(str(md["name"]), ns), body=body)


def apply_all(api: Any, objs: Iterable[Mapping[str, Any]], skip_kinds: Iterable[str] = ()) -> list[str]:
    """Apply every object whose kind is not skipped; returns `Kind/name` of each."""
    skip = set(skip_kinds)
    done: list[str] = []
    for obj in objs:
        if obj.get("kind") in skip:
            continue
        apply(api, obj)
        done.append(f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}")
    return done


def wait_for(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    """Poll until true; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)


def crd_ready(api: Any, name: str, group: str, version: str, plural: str) -> bool:
    """Established, and its resource served (a list answers)."""
    crd = request_json(api, "GET", KINDS["CustomResourceDefinition"].object_path(name))
    conditions = (crd.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
        return False
    try:
        request(api, "GET", f"/apis/{group}/{version}/{plural}", query={"limit": 1})
    except ApiStatusError as exc:
        if exc.status == 404:
            return False
        raise
    return True
