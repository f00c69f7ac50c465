"""Writes to the agent's own Node directly (`--node-writes direct`): what a decision's `ReportSpec` asks.

The Node is read, `tidemark.nodereport.node_changes` names what it lacks of the intent (the same definition
the NodeReport controller writes by, so both modes put the same keys on the Node), and only that is written:

- annotations: a JSON merge patch of `metadata.annotations` (null deletes a key; other keys are kept);
- the taint `volcano.sh/offline-job-evicting:NoSchedule`: merge patch replaces a whole list, so the
  taint list is rebuilt from the Node as read and sent with its `metadata.resourceVersion` (the server
  refuses a stale one with 409): a taint someone else added meanwhile is never clobbered; on 409 the
  Node is read again and the change retried;
- `kubernetes.io/batch-cpu`/`batch-memory`: a merge patch of the `status` subresource, in capacity and
  allocatable (how Kubernetes documents advertising extended resources).

`write` returns the Node as the server has it after the writes (the daemon's freshest view), and raises
`tidemark.kube.client.KubeError` on failure (the caller backs off and retries).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from tidemark.nodereport import ReportSpec, node_changes, with_taint

log = logging.getLogger(__name__)

MERGE_PATCH: Final = "application/merge-patch+json"
TAINT_RETRIES: Final = 5


class NodeWriter:
    """Patches one Node (see the module docstring)."""

    def __init__(self, api_client: Any, node_name: str, *, timeout: tuple[float, float] = (5.0, 15.0)) -> None:
        from tidemark.kube.resources import NODES

        self.api = api_client
        self.node_name = node_name
        self.timeout = timeout
        self._path = NODES.object_path(node_name)
        self._status_path = NODES.object_path(node_name, subresource="status")

    def _request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        from tidemark.kube.client import request_json

        if body is None:
            return request_json(self.api, method, path, timeout=self.timeout)
        return request_json(self.api, method, path, body=body, content_type=MERGE_PATCH, timeout=self.timeout)

    def get(self) -> dict[str, Any]:
        return self._request("GET", self._path)

    def write(self, spec: ReportSpec) -> dict[str, Any]:
        """Put `spec` on the Node: the annotations, then the batch-* status, then the taint, each only if it differs."""
        node = self.get()
        changes = node_changes(spec.patch(), node)
        if changes.annotations:
            node = self._request("PATCH", self._path, {"metadata": {"annotations": changes.annotations}})
        if changes.status:
            node = self._request("PATCH", self._status_path, changes.status)
        if changes.taint is not None:
            node = self.set_taint(changes.taint, node) or node
        return node

    def set_taint(self, want: bool, node: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Add or remove our taint without touching the others (resourceVersion-guarded, retried on 409)."""
        from tidemark.kube.client import ApiStatusError

        current: Mapping[str, Any] = node if node is not None else self.get()
        for _ in range(TAINT_RETRIES):
            spec = current.get("spec") or {}
            taints = spec.get("taints") or []
            new = with_taint(list(taints) if isinstance(taints, list) else [], want)
            if new is None:
                return dict(current)
            rv = (current.get("metadata") or {}).get("resourceVersion")
            patch: dict[str, Any] = {"spec": {"taints": new or None}}
            if rv:
                patch["metadata"] = {"resourceVersion": rv}
            try:
                return self._request("PATCH", self._path, patch)
            except ApiStatusError as e:
                if e.status != 409:
                    raise
                log.debug("taint patch of %s conflicted; reading the Node again", self.node_name)
                current = self.get()
        raise ApiStatusError(409, f"the taint of node {self.node_name} kept changing; giving up this round")
