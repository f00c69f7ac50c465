"""The NodeReport controller: applies each agent's report to its Node (tidemark.nodereport).

It runs in the webhook's pods (`scheduler_ext/webhook/server.py` starts it) because they already hold the
rights it needs and are the ones that judge the reports; it is a controller, not an admission webhook.

Agents hold no Node rights; this controller does (nodes get/patch, nodes/status patch), and writes only what
`tidemark.nodereport.node_changes` names: the four annotations an agent owns, `kubernetes.io/batch-*` in
capacity and allocatable, and the one pinned NoSchedule taint. A report's spec is checked again here
(`spec_problems`: the webhook refused it already, unless it was written while no webhook was registered), so
nothing outside those keys and caps reaches a Node whoever wrote the report.

It also answers the agents' eviction asks (`spec.evictions`): `scheduler_ext.controller.evictions` evicts the
offline pods of the report's node through the Eviction API and records each outcome in the report's status.

When: on every report change (a watch), and every `resync` seconds for all reports (a Node someone else
changed, a Node registered again). Every replica of the webhook runs one: their writes are the same merge
patches (idempotent), and the taint is patched with the Node's resourceVersion, re-read on a conflict.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from scheduler_ext.controller.evictions import EvictionAsks
from tidemark.apis import ANN_NODE_USAGE, short_repr
from tidemark.kube.client import MERGE_PATCH
from tidemark.nodereport import (
    bound_problems,
    clamped,
    node_changes,
    owner_reference,
    report_is_owned,
    report_is_stale,
    spec_problems,
    with_taint,
    withdrawal,
)

log = logging.getLogger(__name__)

TAINT_RETRIES: Final = 5
#: the field manager of every write: the agent's name, so that the Node's managedFields show the keys as the
#: agent's (its ForeignWriter check, agent/decide/coexistence.py, names any other writer of them)
FIELD_MANAGER: Final = "tidemark-agent/nodereport-controller"
#: where the controller's Events about Nodes go (Node Events live in `default`, as kubelet's do)
EVENT_NAMESPACE: Final = "default"


class NodeReportController:
    """Watches NodeReports and applies them; `apply(name)` is the one step, also called directly by tests."""

    def __init__(
        self,
        api_client: Any,
        *,
        resync: float = 300.0,
        timeout: tuple[float, float] = (5.0, 15.0),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        from tidemark.kube.reflector import Reflector
        from tidemark.kube.resources import NODEREPORTS

        self.api = api_client
        self.resync = resync
        self.timeout = timeout
        self._mono = monotonic
        self._cond = threading.Condition()
        self._queue: dict[str, None] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reflector = Reflector.for_resource(api_client, NODEREPORTS, on_change=self._changed)
        self.evictions = EvictionAsks(api_client, timeout=timeout)
        #: outcomes by kind, for tests and logs
        self.counts: dict[str, int] = {}

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> NodeReportController:
        self.reflector.start()
        self._thread = threading.Thread(target=self._run, name="nodereport-controller", daemon=True)
        self._thread.start()
        log.info("NodeReport controller started (resync every %g s)", self.resync)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self.reflector.stop()
        if self._thread is not None:
            self._thread.join(5)

    def _changed(self, _event: str, _old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        if new is None:
            return  # a deleted report leaves its Node as it is
        name = (new.get("metadata") or {}).get("name")
        if isinstance(name, str) and name:
            with self._cond:
                self._queue[name] = None
                self._cond.notify_all()

    def _run(self) -> None:
        next_resync = self._mono() + self.resync
        while not self._stop.is_set():
            with self._cond:
                if not self._queue:
                    self._cond.wait(max(0.0, min(1.0, next_resync - self._mono())))
                names = list(self._queue)
                self._queue.clear()
            if self._mono() >= next_resync:
                names += [n for n in self._names() if n not in names]
                next_resync = self._mono() + self.resync
            for name in names:
                if self._stop.is_set():
                    return
                self.apply(name)

    def _names(self) -> list[str]:
        return [str((o.get("metadata") or {}).get("name")) for o in self.reflector.store.list()]

    # --- one report -------------------------------------------------------------------------------

    def apply(self, name: str, report: Mapping[str, Any] | None = None) -> str:
        """Make Node `name` carry its report; the outcome: applied, current, invalid, stale (a dead Node's report,
        deleted), gone, no-node or error."""
        outcome = self._apply(name, report)
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        return outcome

    def _apply(self, name: str, report: Mapping[str, Any] | None) -> str:
        """The Node step, then the report's eviction asks (`scheduler_ext.controller.evictions`): a report with an
        invalid spec or of a dead Node asks for nothing."""
        if report is None:
            report = self.reflector.store.get_object(name)
        if report is None:
            return "gone"
        outcome = self._apply_node(name, report)
        if outcome not in ("invalid", "stale") and ((report.get("spec") or {}).get("evictions")
                                                   or (report.get("status") or {}).get("evictions")):
            try:
                self.evictions.answer(name, report)
            except Exception:  # the controller's thread must survive anything
                log.exception("NodeReport %s: answering its eviction asks", name)
        return outcome

    def _apply_node(self, name: str, report: Mapping[str, Any]) -> str:
        from tidemark.kube.client import ApiStatusError, KubeError
        from tidemark.kube.resources import NODES

        spec = report.get("spec") or {}
        problems = spec_problems(spec)
        if problems:
            log.warning("NodeReport %s is not applied: %s", short_repr(name, 80), "; ".join(problems[:3]))
            return "invalid"
        try:
            node = self._request("GET", NODES.object_path(name))
            if report_is_stale(report, node):
                self._retire(name, report, node)
                return "stale"
            if not report_is_owned(report, node):
                self._adopt(name, node)
            if bound := bound_problems(spec, node):
                self._warn_clamped(name, node, bound)
                spec = clamped(spec, node)
            changes = node_changes(spec, node)
            if changes.empty():
                return "current"
            if changes.status:
                # one write for both: the Node's status subresource takes metadata too (its strategy resets only
                # the spec); a server that dropped them gets the annotations' own patch below
                body = {**changes.status, **({"metadata": {"annotations": changes.annotations}}
                                             if changes.annotations else {})}
                node = self._request("PATCH", NODES.object_path(name, subresource="status"), body)
                if changes.annotations and not node_changes({"annotations": spec.get("annotations") or {}},
                                                            node).empty():
                    self._request("PATCH", NODES.object_path(name), {"metadata": {"annotations": changes.annotations}})
            elif changes.annotations:
                self._request("PATCH", NODES.object_path(name), {"metadata": {"annotations": changes.annotations}})
            if changes.taint is not None:
                self._set_taint(name, changes.taint)
        except ApiStatusError as e:
            if e.status == 404:
                return "no-node"
            log.warning("NodeReport %s: applying it to its Node failed: %s", name, e)
            return "error"
        except KubeError as e:
            log.warning("NodeReport %s: applying it to its Node failed: %s", name, e)
            return "error"
        # the usage annotation changes with every publication: a line per node a minute is DEBUG, the rest INFO
        routine = set(changes.annotations) <= {ANN_NODE_USAGE} and not changes.status and changes.taint is None
        log.log(logging.DEBUG if routine else logging.INFO, "NodeReport %s applied to its Node (%s)", name,
                _describe(changes.annotations, changes.status, changes.taint))  # fmt: skip
        return "applied"

    # --- the report's Node (issue 33, items 4 and 10) ------------------------------------------------------

    def _retire(self, name: str, report: Mapping[str, Any], node: Mapping[str, Any]) -> None:
        """A report of an earlier Node of this name (the API server of a real cluster's garbage collector would
        have deleted it; this one may have none): delete it (only that object: its uid as precondition) and take
        what the Node carries of its values off the Node, whose agent publishes again."""
        from tidemark.kube.client import ApiStatusError, request_json
        from tidemark.kube.resources import NODEREPORTS, NODES

        uid = (report.get("metadata") or {}).get("uid")
        log.warning("NodeReport %s belongs to an earlier Node of that name (owner uid %s, the Node's %s): deleted, "
                    "its values taken off the Node", name, _owner_uid(report), (node.get("metadata") or {}).get("uid"))
        try:
            request_json(self.api, "DELETE", NODEREPORTS.object_path(name), timeout=self.timeout,
                         body={"preconditions": {"uid": uid}} if uid else None)  # fmt: skip
        except ApiStatusError as e:
            if e.status not in (404, 409):
                raise
        gone = withdrawal(node)
        if gone.status or gone.annotations:
            ann = {"metadata": {"annotations": gone.annotations}} if gone.annotations else {}
            self._request("PATCH", NODES.object_path(name, subresource="status"), {**gone.status, **ann})
            if gone.annotations:
                self._request("PATCH", NODES.object_path(name), ann)
        if gone.taint is not None:
            self._set_taint(name, False)

    def _adopt(self, name: str, node: Mapping[str, Any]) -> None:
        """The report's owner: its Node by uid (garbage-collected with it; a Node registered again is not it)."""
        from tidemark.kube.client import KubeError
        from tidemark.kube.resources import NODEREPORTS

        try:
            owner = {"metadata": {"ownerReferences": [owner_reference(node)]}}
            self._request("PATCH", NODEREPORTS.object_path(name), owner)
        except KubeError as e:  # applied anyway; the owner is set at the next change or resync
            log.warning("NodeReport %s: setting its owner (Node uid %s) failed: %s", name,
                        (node.get("metadata") or {}).get("uid"), e)  # fmt: skip

    def _warn_clamped(self, name: str, node: Mapping[str, Any], problems: list[str]) -> None:
        """A report beyond what its Node has reached the controller (no webhook judged it): applied lowered to the
        bound, with a log line and a Warning Event on the Node naming the values and the bound."""
        from tidemark.kube.client import KubeError, request_json

        message = "values lowered to the node's bound: " + "; ".join(problems)
        log.warning("NodeReport %s: %s", name, message)
        md = node.get("metadata") or {}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        event = {
            "metadata": {"generateName": f"{name}.nodereport-", "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": md.get("uid")},
            "reason": "NodeReportClamped", "type": "Warning", "message": message[:1024], "count": 1,
            "source": {"component": "tidemark-nodereport-controller"}, "firstTimestamp": now, "lastTimestamp": now,
        }
        try:
            request_json(self.api, "POST", f"/api/v1/namespaces/{EVENT_NAMESPACE}/events", body=event,
                         timeout=self.timeout)  # fmt: skip
        except KubeError as e:
            log.warning("NodeReport %s: the Event could not be written: %s", name, e)

    def _request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        from tidemark.kube.client import request_json

        if body is None:
            return request_json(self.api, method, path, timeout=self.timeout)
        return request_json(self.api, method, path, body=body, content_type=MERGE_PATCH, timeout=self.timeout,
                            query={"fieldManager": FIELD_MANAGER})  # fmt: skip

    def _set_taint(self, name: str, want: bool) -> None:
        """Exactly the pinned taint (or none with its key), beside the Node's other taints; resourceVersion-guarded."""
        from tidemark.kube.client import ApiStatusError
        from tidemark.kube.resources import NODES

        path = NODES.object_path(name)
        for _ in range(TAINT_RETRIES):
            node = self._request("GET", path)
            taints = (node.get("spec") or {}).get("taints") or []
            new = with_taint(list(taints) if isinstance(taints, list) else [], want)
            if new is None:
                return
            rv = (node.get("metadata") or {}).get("resourceVersion")
            patch = {"spec": {"taints": new or None}, "metadata": {"resourceVersion": rv}}
            try:
                self._request("PATCH", path, patch)
                return
            except ApiStatusError as e:
                if e.status != 409:
                    raise
        raise ApiStatusError(409, f"the taints of node {name} kept changing; retried {TAINT_RETRIES} times")


def _owner_uid(report: Mapping[str, Any]) -> str:
    refs = (report.get("metadata") or {}).get("ownerReferences")
    uids = [str(r.get("uid")) for r in refs if isinstance(r, Mapping)] if isinstance(refs, list) else []
    return ",".join(uids) or "none"


def _describe(annotations: Mapping[str, Any], status: Mapping[str, Any], taint: bool | None) -> str:
    parts = [f"{k}={'removed' if v is None else short_repr(v, 40)}" for k, v in annotations.items()]
    for part, rl in (status.get("status") or {}).items():
        parts += [f"{part}.{k}={v}" for k, v in rl.items()]
    if taint is not None:
        parts.append("evicting taint " + ("added" if taint else "removed"))
    return ", ".join(parts)
