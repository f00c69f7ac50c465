"""The agent's Node writes as its NodeReport (tidemark.nodereport): the agent never writes the Node itself.

`ReportWriter` has `NodeWriter`'s interface (`write`, `get`), so the API worker is the same in both modes
(`--node-writes report`, the default, or `direct`):

- `write(spec)`: the decision's `ReportSpec` is the JSON merge patch of the report's spec as it is (null
  deletes an annotation); annotations and resources of one publication are one write;
- the report is created on the first write (404), named after the node;
- then the writer reads its Node until the controller in the webhook's pods has applied the whole report
  (`tidemark.nodereport.node_changes` is empty: the same definition the controller writes by) and returns
  that Node, as `NodeWriter` returns the Node as written. So "the Node is marked evicting before the first
  eviction" still holds. A report the webhook refuses, or one not applied within `apply_timeout` (the
  webhook's pods down), raises `KubeError`: the worker backs off, retries, and evicts nothing meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent.act.node_writer import MERGE_PATCH
from tidemark.nodereport import ReportSpec, node_changes, report_object

log = logging.getLogger(__name__)


class ReportWriter:
    """Writes node `node_name`'s NodeReport and waits for its Node to carry it (see the module docstring)."""

    def __init__(
        self,
        api_client: Any,
        node_name: str,
        *,
        timeout: tuple[float, float] = (5.0, 15.0),
        apply_timeout: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        from tidemark.kube.resources import NODEREPORTS, NODES

        self.api = api_client
        self.node_name = node_name
        self.timeout = timeout
        self.apply_timeout = apply_timeout
        self._sleep = sleep
        self._mono = monotonic
        self._node_path = NODES.object_path(node_name)
        self._report_path = NODEREPORTS.object_path(node_name)
        self._collection = NODEREPORTS.collection_path()

    def get(self) -> dict[str, Any]:
        from tidemark.kube.client import request_json

        return request_json(self.api, "GET", self._node_path, timeout=self.timeout)

    def write(self, spec: ReportSpec) -> dict[str, Any]:
        patch = spec.patch()
        return self._write(patch) if patch else self.get()

    def _write(self, spec: dict[str, Any]) -> dict[str, Any]:
        from tidemark.kube.client import ApiStatusError, request_json

        patch = {"spec": spec}
        try:
            report = request_json(
                self.api, "PATCH", self._report_path, body=patch, content_type=MERGE_PATCH, timeout=self.timeout
            )
        except ApiStatusError as e:
            if e.status != 404:
                raise
            try:
                report = request_json(
                    self.api, "POST", self._collection, body=report_object(self.node_name, spec), timeout=self.timeout
                )
            except ApiStatusError as e2:
                if e2.status != 409:  # created meanwhile (another write of ours): patch it
                    raise
                report = request_json(
                    self.api, "PATCH", self._report_path, body=patch, content_type=MERGE_PATCH, timeout=self.timeout
                )
        return self._applied(report.get("spec") or {})

    def _applied(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The Node once it carries `spec`; KubeError after `apply_timeout` seconds."""
        from tidemark.kube.client import KubeError

        deadline = self._mono() + self.apply_timeout
        delay = 0.05
        while True:
            node = self.get()
            left = node_changes(spec, node)
            if left.empty():
                return node
            if self._mono() >= deadline:
                parts = (left.status.get("status") or {}).values()
                resources = sorted({r for part in parts for r in part})
                missing = [*left.annotations, *resources, *(["the evicting taint"] if left.taint is not None else [])]
                raise KubeError(
                    f"node {self.node_name}: its NodeReport is not applied to the Node after {self.apply_timeout:g} s "
                    f"(still missing: {', '.join(missing)}); is the tidemark-webhook Deployment running?"
                )
            self._sleep(delay)
            delay = min(delay * 2, 1.0)
