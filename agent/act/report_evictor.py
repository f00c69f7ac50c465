"""The agent's evictions as asks in its NodeReport (`--node-writes report`, the default): the agent holds no eviction
right; the NodeReport controller evicts (tidemark/evictionasks.py, scheduler_ext/controller/evictions.py).

`ReportEvictor.evict_many(ops)` writes one decision's victims as `spec.evictions` at once (an ask is urgent: no
publication interval applies to it), then watches its report until the controller has answered every ask
(`status.evictions`) and returns the answers as `EvictResult`s, the same values `KubeEvictor` returns: Evicted ->
evicted, Refused (429, a PodDisruptionBudget) -> blocked (the next victim is chosen at once), NotFound -> gone,
Denied -> blocked (the controller would not evict it: not offline, not on this node), Failed -> error. Asks not
answered within `answer_timeout` (no controller running) come back as transport errors: the worker backs off and
asks again.

Why a watch only while waiting: asks are rare (an eviction round), and a watch per agent held open for them
would be the API server's cost on every node all the time; one opened at the ask and closed at the last answer
sees each answer as it is written (reading the report every 20-250 ms instead added about 70 ms per round on
the test API server). Where the watch fails (an older role without `watch`), the agent reads the report.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from agent.act.evictor import EvictResult
from agent.act.node_writer import MERGE_PATCH
from agent.decide.ops import EvictPod
from tidemark.evictionasks import DENIED, EVICTED, EVICTING, MAX_ASKS, NOT_FOUND, REFUSED, Ask, outcomes_of
from tidemark.nodereport import report_object

log = logging.getLogger(__name__)


def _asked_at() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def result_of(outcome: dict[str, Any]) -> EvictResult:
    """The controller's answer as the worker's result (see the module docstring)."""
    what, message = str(outcome.get("outcome")), str(outcome.get("message") or "")
    if what == EVICTED:
        return EvictResult("evicted", message, recorded=True)
    if what == REFUSED:
        return EvictResult("blocked", message, 429)
    if what == NOT_FOUND:
        return EvictResult("gone", message)
    if what == DENIED:
        return EvictResult("blocked", f"denied by the NodeReport controller: {message}", 403)
    return EvictResult("error", message or f"the controller answered {what}")


class ReportEvictor:
    """Asks node `node_name`'s controller to evict, through the node's NodeReport (see the module docstring)."""

    def __init__(
        self,
        api_client: Any,
        node_name: str,
        *,
        timeout: tuple[float, float] = (5.0, 15.0),
        answer_timeout: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        asked_at: Callable[[], str] = _asked_at,
    ) -> None:
        from tidemark.kube.resources import NODEREPORTS

        self.api = api_client
        self.node_name = node_name
        self.timeout = timeout
        self.answer_timeout = answer_timeout
        self._sleep = sleep
        self._mono = monotonic
        self._asked_at = asked_at
        self._path = NODEREPORTS.object_path(node_name)
        self._collection = NODEREPORTS.collection_path()

    def evict(self, op: EvictPod) -> EvictResult:
        return self.evict_many([op])[0]

    def evict_many(self, ops: Sequence[EvictPod]) -> list[EvictResult]:
        """One result per op, in order (the first MAX_ASKS asked; any beyond wait for the next decision)."""
        from tidemark.kube.client import KubeError

        at = self._asked_at()
        asks = [Ask(op.uid, op.namespace, op.name, op.reason, op.detail, at, op.grace_seconds) for op in ops[:MAX_ASKS]]
        try:
            rv = self._ask([a.to_json() for a in asks])
            answers = self._answers(asks, rv)
        except KubeError as e:
            return [EvictResult("error", f"asking the NodeReport controller: {e}", transport=True) for _ in ops]
        late = EvictResult("error", f"the NodeReport controller did not answer within {self.answer_timeout:g} s; is "
                                    "the tidemark-webhook Deployment running?", transport=True)  # fmt: skip
        out = [result_of(answers[a.key]) if a.key in answers else late for a in asks]
        return out + [EvictResult("error", f"more than {MAX_ASKS} victims in one decision", transport=True)
                      for _ in ops[MAX_ASKS:]]  # fmt: skip

    def _ask(self, asks: list[dict[str, Any]]) -> str:
        """Write the asks; the report's resourceVersion after the write (where the answers' watch starts)."""
        from tidemark.kube.client import ApiStatusError, request_json

        patch = {"spec": {"evictions": asks}}
        try:
            report = request_json(self.api, "PATCH", self._path, body=patch, content_type=MERGE_PATCH,
                                  timeout=self.timeout)  # fmt: skip
        except ApiStatusError as e:
            if e.status != 404:
                raise
            report = request_json(self.api, "POST", self._collection, body=report_object(self.node_name, patch["spec"]),
                                  timeout=self.timeout)  # fmt: skip
        return str((report.get("metadata") or {}).get("resourceVersion") or "")

    def _answers(self, asks: list[Ask], rv: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The controller's final outcomes of `asks`, by (uid, askedAt); those it has by `answer_timeout`: watched
        from `rv` (each answer seen as it is written), read every 20-250 ms where the watch fails."""
        from tidemark.kube.client import KubeError

        keys = {a.key for a in asks}
        deadline = self._mono() + self.answer_timeout
        if rv:
            try:
                got = self._watched(keys, rv, deadline)
                if len(got) == len(keys):
                    return got
            except KubeError as e:
                log.debug("watching NodeReport %s for the answers failed (%s); reading it instead", self.node_name, e)
        return self._polled(keys, deadline)

    def _watched(self, keys: set[tuple[str, str]], rv: str, deadline: float) -> dict[tuple[str, str], dict[str, Any]]:
        from tidemark.kube.reflector import ApiListerWatcher
        from tidemark.kube.resources import NODEREPORTS

        got: dict[tuple[str, str], dict[str, Any]] = {}
        lw = ApiListerWatcher(self.api, NODEREPORTS, field_selector=f"metadata.name={self.node_name}",
                              request_timeout=self.timeout)  # fmt: skip
        stream = lw.watch(rv, max(1, math.ceil(deadline - self._mono())))
        try:
            for event in stream:
                obj = event.get("object")
                got.update(_final(obj.get("status") if isinstance(obj, dict) else None, keys))
                if len(got) == len(keys) or self._mono() >= deadline:
                    break
        finally:
            stream.close()
        return got

    def _polled(self, keys: set[tuple[str, str]], deadline: float) -> dict[tuple[str, str], dict[str, Any]]:
        from tidemark.kube.client import request_json

        delay = 0.02
        while True:
            got = _final(request_json(self.api, "GET", self._path, timeout=self.timeout).get("status"), keys)
            if len(got) == len(keys) or self._mono() >= deadline:
                return got
            self._sleep(delay)
            delay = min(delay * 1.5, 0.25)


def _final(status: object, keys: set[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The answers among `keys` in a report's status (a claim, Evicting, is none yet)."""
    return {k: o for o in outcomes_of(status)
            if (k := (str(o.get("uid")), str(o.get("askedAt")))) in keys and o.get("outcome") != EVICTING}  # fmt: skip
