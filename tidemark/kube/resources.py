"""Resource kinds both programs read, their REST paths, and the discovery of versions that differ by server.

Paths are built here, once, because the raw JSON layer (tidemark.kube.client.request) does not go
through the official client's generated methods. Discovery answers the two questions whose answer
depends on the server's age: which `policy` version serves PodDisruptionBudgets (v1 from 1.21,
v1beta1 before) and which version the Eviction subresource takes (policy/v1 from 1.22).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from tidemark.kube.client import ApiStatusError, KubeError, request_json


class InvalidNameError(KubeError, ValueError):
    """A name that cannot be a path segment of the API (empty, `.`, `..`, or holding `/` or `%`)."""


def segment(name: str, what: str = "name") -> str:
    """`name` as one quoted path segment; InvalidNameError for what Kubernetes' ValidatePathSegmentName refuses.

    Quoting alone is not enough: `quote("..")` is `..`, and urllib3 removes dot segments from the path
    it sends (`/queues/../../api/v1/...` reaches another resource). No object can have such a name,
    so asking for one is refused before any request.
    """
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "%" in name:
        raise InvalidNameError(f"{what} {name!r} cannot be part of an API path")
    return quote(name, safe="")


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """One REST resource: `group` is '' for the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def _prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        """The list/watch path; all namespaces when `namespace` is None."""
        if self.namespaced and namespace:
            return f"{self._prefix}/namespaces/{segment(namespace, 'namespace')}/{self.plural}"
        return f"{self._prefix}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None, subresource: str | None = None) -> str:
        """The path of one object; every segment quoted, InvalidNameError for `.`, `..`, `/`, `%` or empty
        (a namespaced kind's namespace included: there is no object path across namespaces)."""
        if self.namespaced:
            base = f"{self._prefix}/namespaces/{segment(namespace or '', 'namespace')}/{self.plural}"
        else:
            base = f"{self._prefix}/{self.plural}"
        path = f"{base}/{segment(name, self.kind + ' name')}"
        return f"{path}/{segment(subresource, 'subresource')}" if subresource is not None else path

    def __str__(self) -> str:
        return f"{self.plural}.{self.version}.{self.group}" if self.group else f"{self.plural}.{self.version}"


NODES: Final = ResourceKind("", "v1", "nodes", "Node", namespaced=False)
PODS: Final = ResourceKind("", "v1", "pods", "Pod")
EVENTS: Final = ResourceKind("", "v1", "events", "Event")
NAMESPACES: Final = ResourceKind("", "v1", "namespaces", "Namespace", namespaced=False)
PODGROUPS: Final = ResourceKind("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
QUEUES: Final = ResourceKind("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False)
PRIORITY_CLASSES: Final = ResourceKind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
LEASES: Final = ResourceKind("coordination.k8s.io", "v1", "leases", "Lease")
DAEMONSETS: Final = ResourceKind("apps", "v1", "daemonsets", "DaemonSet")
PDBS_V1: Final = ResourceKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
PDBS_V1BETA1: Final = ResourceKind("policy", "v1beta1", "poddisruptionbudgets", "PodDisruptionBudget")
#: what an agent wants on its Node, applied by the webhook's controller (tidemark/nodereport.py)
NODEREPORTS: Final = ResourceKind("colocation.tidemark.io", "v1alpha1", "nodereports", "NodeReport", namespaced=False)
#: which pods get which offline settings at creation, read by the webhook (tidemark/profiles.py)
COLOCATIONPROFILES: Final = ResourceKind(
    "colocation.tidemark.io", "v1alpha1", "colocationprofiles", "ColocationProfile", namespaced=False
)


# --- discovery -------------------------------------------------------------------------------

_cache_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _cached(api_client: Any, key: str) -> Any:
    with _cache_lock:
        return _cache.get(api_client, {}).get(key)


def _store(api_client: Any, key: str, value: Any) -> None:
    with _cache_lock:
        _cache.setdefault(api_client, {})[key] = value


def forget_discovery(api_client: Any) -> None:
    """Drop cached answers (e.g. after the server was upgraded)."""
    with _cache_lock:
        _cache.pop(api_client, None)


def served_versions(api_client: Any, group: str) -> list[str]:
    """The versions `/apis/<group>` lists ([] when the group is not served)."""
    try:
        body = request_json(api_client, "GET", f"/apis/{segment(group, 'group')}")
    except ApiStatusError as exc:
        if exc.status == 404:
            return []
        raise
    versions = body.get("versions") or []
    return [str(v.get("version")) for v in versions if isinstance(v, dict) and v.get("version")]


def pdb_kind(api_client: Any) -> ResourceKind:
    """policy/v1 PodDisruptionBudgets when served, else v1beta1 (1.20 and older). Cached per client."""
    found = _cached(api_client, "pdb")
    if isinstance(found, ResourceKind):
        return found
    kind = PDBS_V1 if "v1" in served_versions(api_client, "policy") else PDBS_V1BETA1
    _store(api_client, "pdb", kind)
    return kind


def eviction_api_version(api_client: Any) -> str:
    """The apiVersion an Eviction body must carry: `policy/v1` or `policy/v1beta1`. Cached per client.

    Asked first as kubectl drain does: `/api/v1` lists the `pods/eviction` subresource with the
    group and version of its kind. That is exact where `/apis/policy` alone is not: 1.21 serves
    policy/v1 (PDBs) but still takes Evictions only as v1beta1. Falls back to `/apis/policy`
    (v1 if listed, else v1beta1) when the subresource entry carries no version.
    """
    found = _cached(api_client, "eviction")
    if isinstance(found, str):
        return found
    version = ""
    body = request_json(api_client, "GET", "/api/v1")
    for res in body.get("resources") or []:
        if isinstance(res, dict) and res.get("name") == "pods/eviction" and res.get("group") and res.get("version"):
            version = f"{res['group']}/{res['version']}"
            break
    if not version:
        version = "policy/v1" if "v1" in served_versions(api_client, "policy") else "policy/v1beta1"
    _store(api_client, "eviction", version)
    return version
