"""Evict a pod through the Eviction API and bind a pod through `pods/binding`, returning results, never raising.

Why results instead of exceptions: the callers are executors applying a plan of many operations;
a PDB refusal (429) or a pod that is already gone is an expected outcome to count, log and
event, not a failure to unwind. Only the kind of outcome decides what the caller does next.

Eviction version: 1.20 takes Eviction only as policy/v1beta1 (client 37's V1Eviction gets 400);
>= 1.22 takes policy/v1. `tidemark.kube.resources.eviction_api_version` discovers which, once per client.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from tidemark.kube.client import JSON, ApiStatusError, KubeError, request
from tidemark.kube.resources import PODS, eviction_api_version

log = logging.getLogger(__name__)


class EvictionOutcome(enum.StrEnum):
    EVICTED = "Evicted"
    #: 429: a PodDisruptionBudget (or server throttling) refused it; retry later
    BLOCKED = "Blocked"
    #: 404 (or the UID precondition failed): the pod we meant is already gone
    NOT_FOUND = "NotFound"
    ERROR = "Error"


@dataclass(frozen=True, slots=True)
class EvictionResult:
    outcome: EvictionOutcome
    message: str = ""
    status: int | None = None
    #: seconds from a Retry-After header (429), if any
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        """The pod is (being) removed: evicted now or already gone."""
        return self.outcome in (EvictionOutcome.EVICTED, EvictionOutcome.NOT_FOUND)


class BindOutcome(enum.StrEnum):
    BOUND = "Bound"
    #: 409: already bound (possibly elsewhere) or the UID no longer matches
    CONFLICT = "Conflict"
    NOT_FOUND = "NotFound"
    ERROR = "Error"


@dataclass(frozen=True, slots=True)
class BindResult:
    outcome: BindOutcome
    message: str = ""
    status: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is BindOutcome.BOUND


def eviction_body(
    api_version: str, namespace: str, name: str, grace_period_seconds: int | None = None, uid: str | None = None
) -> JSON:
    """The Eviction object for `api_version` (policy/v1 or policy/v1beta1; the shape is the same)."""
    body: JSON = {"apiVersion": api_version, "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    delete_options: JSON = {}
    if grace_period_seconds is not None:
        delete_options["gracePeriodSeconds"] = int(grace_period_seconds)
    if uid:
        # Never evict a namesake: a StatefulSet pod recreated under the same name has a new UID.
        delete_options["preconditions"] = {"uid": uid}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


def _retry_after(exc: ApiStatusError) -> float | None:
    raw = exc.headers.get("Retry-After") or exc.headers.get("retry-after")
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def _status_causes(exc: ApiStatusError) -> str:
    details = exc.body.get("details") if exc.body else None
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return ""
    texts = [str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("message")]
    return "; ".join(texts)


def evict_pod(
    api_client: Any,
    namespace: str,
    name: str,
    *,
    grace_period_seconds: int | None = None,
    uid: str | None = None,
    api_version: str | None = None,
) -> EvictionResult:
    """Ask the API server to evict a pod (PDBs are honoured); never raises.

    `grace_period_seconds` None keeps the pod's own; `uid` makes the eviction apply to that
    incarnation only (a mismatch counts as NotFound: the pod we meant is gone). Beware: a 1.20
    server retries a failed UID precondition as a conflict for 10 s before answering 409.
    """
    try:
        version = api_version or eviction_api_version(api_client)
    except KubeError as exc:
        return EvictionResult(EvictionOutcome.ERROR, f"cannot discover the Eviction API version: {exc}")
    body = eviction_body(version, namespace, name, grace_period_seconds, uid)
    path = PODS.object_path(name, namespace, "eviction")
    try:
        reply = request(api_client, "POST", path, body=body)
    except ApiStatusError as exc:
        if exc.status == 429:
            causes = _status_causes(exc)
            message = f"{exc.message} ({causes})" if causes else exc.message
            return EvictionResult(EvictionOutcome.BLOCKED, message, 429, _retry_after(exc))
        if exc.status == 404:
            return EvictionResult(EvictionOutcome.NOT_FOUND, exc.message, 404)
        if exc.status == 409 and uid and "uid" in exc.message.lower():
            return EvictionResult(EvictionOutcome.NOT_FOUND, exc.message, 409)
        return EvictionResult(EvictionOutcome.ERROR, exc.message, exc.status)
    except KubeError as exc:
        return EvictionResult(EvictionOutcome.ERROR, str(exc))
    except Exception as exc:  # a client bug must not escape into a control loop
        log.exception("evicting %s/%s", namespace, name)
        return EvictionResult(EvictionOutcome.ERROR, f"{type(exc).__name__}: {exc}")
    return EvictionResult(EvictionOutcome.EVICTED, "", reply.status)


def binding_body(namespace: str, name: str, uid: str | None, node: str) -> JSON:
    metadata: JSON = {"name": name, "namespace": namespace}
    if uid:
        # A precondition where the server checks it (newer releases answer 409 on a mismatch);
        # 1.20 ignores it (measured), so a namesake can be bound there.
        metadata["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def bind(api_client: Any, namespace: str, name: str, uid: str | None, node: str) -> BindResult:
    """Bind a pod to a node through the `pods/binding` subresource; never raises."""
    path = PODS.object_path(name, namespace, "binding")
    try:
        reply = request(api_client, "POST", path, body=binding_body(namespace, name, uid, node))
    except ApiStatusError as exc:
        if exc.status == 404:
            return BindResult(BindOutcome.NOT_FOUND, exc.message, 404)
        if exc.status == 409:
            return BindResult(BindOutcome.CONFLICT, exc.message, 409)
        return BindResult(BindOutcome.ERROR, exc.message, exc.status)
    except KubeError as exc:
        return BindResult(BindOutcome.ERROR, str(exc))
    except Exception as exc:  # a client bug must not escape into the scheduling loop
        log.exception("binding %s/%s to %s", namespace, name, node)
        return BindResult(BindOutcome.ERROR, f"{type(exc).__name__}: {exc}")
    return BindResult(BindOutcome.BOUND, "", reply.status)


class Evictor:
    """Eviction bound to one client, with the version discovered on first use."""

    def __init__(self, api_client: Any, *, api_version: str | None = None) -> None:
        self.api_client = api_client
        self._api_version = api_version

    def evict(
        self, namespace: str, name: str, *, grace_period_seconds: int | None = None, uid: str | None = None
    ) -> EvictionResult:
        if self._api_version is None:
            try:
                self._api_version = eviction_api_version(self.api_client)
            except KubeError as exc:
                return EvictionResult(EvictionOutcome.ERROR, f"cannot discover the Eviction API version: {exc}")
        return evict_pod(
            self.api_client,
            namespace,
            name,
            grace_period_seconds=grace_period_seconds,
            uid=uid,
            api_version=self._api_version,
        )
