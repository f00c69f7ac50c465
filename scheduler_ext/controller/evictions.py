"""The NodeReport controller's evictions: each agent's asks (`spec.evictions`), evicted through the Eviction API with
the controller's ServiceAccount, answered in the report's status (tidemark/evictionasks.py).

Why here: the agent holds no eviction right, so no admission hook has to judge every eviction in the cluster to
keep agents to their own nodes (with failurePolicy Fail, `kubectl drain` waited while no webhook pod answered:
docs/security.md). The controller evicts only what `tidemark.evictionasks.judge` allows: a pod bound to the
report's node, offline by its qos-level, none the agent must never evict. PodDisruptionBudgets are the API
server's: a 429 is answered Refused with its message, and the agent picks its next victim at once.

Two replicas never evict the same ask: an ask is first claimed (outcome Evicting) by a status write guarded by
the report's resourceVersion, and only the replica whose claim landed evicts it. Every outcome write is guarded
the same way and re-read on a conflict; outcomes of asks no longer in the spec are pruned.

Gangs are one unit (scheduler_ext/controller/gangs.py): an ask whose eviction would leave a running gang below its
PodGroup's minMember takes the whole gang (the asked pod first; the others only once it is evicted; the PodGroup's
condition Evicted=True, reason GangEvicted, and an Event say why), or is Denied when a member may not be evicted for
an agent, and the agent takes its next victim.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from scheduler_ext.controller.gangs import (
    GANG_EVICTED,
    PG_COND_EVICTED,
    GangVerdict,
    gang_message,
    gang_verdict,
    group_of,
    min_member,
)
from tidemark.evictionasks import (
    DENIED,
    EVICTED,
    EVICTING,
    FAILED,
    NOT_FOUND,
    REFUSED,
    Ask,
    asks_of,
    judge,
    merged,
    outcome,
    outcomes_of,
    pending,
)
from tidemark.kube.client import MERGE_PATCH

log = logging.getLogger(__name__)

WRITE_RETRIES: Final = 5
#: the pod's eviction Event is the agent's, as when the agent evicted itself (its wording, its component, its node as
#: the host: `kubectl describe pod` and `make run`'s view show who decided), written by the controller that evicted
EVENT_SOURCE: Final = "tidemark-agent"
#: a refusal is the controller's own
DENIAL_SOURCE: Final = "tidemark-nodereport-controller"

Outcomes = list[dict[str, Any]]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class EvictionAsks:
    """Answers the asks of one report per `answer` call (the NodeReport controller calls it after the Node step)."""

    def __init__(self, api_client: Any, *, timeout: tuple[float, float] = (5.0, 15.0),
                 clock: Callable[[], str] = _now) -> None:  # fmt: skip
        from tidemark.kube.eviction import Evictor

        self.api = api_client
        self.timeout = timeout
        self._clock = clock
        self._evictor = Evictor(api_client)
        #: outcomes by kind, for tests and logs
        self.counts: dict[str, int] = {}

    def answer(self, name: str, report: Mapping[str, Any]) -> int:
        """Evict what report `name` asks for and is not answered yet; the number of asks answered now. Each write
        starts from the report as last known (the watch's copy, then the reply of the previous write) and re-reads
        it only on a conflict: the agent waits for these answers."""
        asks = asks_of(report.get("spec") or {})
        old = outcomes_of(report.get("status"))
        todo = pending(asks, old)
        if not todo:
            if len(merged(asks, old, [])) != len(old):
                self._write(name, report, lambda _asks, _old: [])  # prune the outcomes of asks gone
            return 0
        keys = {a.key for a in todo}
        claimed: list[Ask] = []

        def claim(asks: list[Ask], old: Outcomes) -> Outcomes:
            claimed[:] = [a for a in pending(asks, old) if a.key in keys]
            return [outcome(a, EVICTING, "", self._clock()) for a in claimed]

        written = self._write(name, report, claim)
        if written is None or not claimed:
            return 0
        done = [(ask, *self._evict(name, ask)) for ask in claimed]
        self._write(name, written, lambda _asks, _old: [o for _, o, _ in done])
        for ask, _, event in done:  # after the answers: the agent does not wait for the Events
            if event is not None:
                self._event(ask, name, *event)
        return len(done)

    # --- status writes, resourceVersion-guarded ----------------------------------------------------------

    def _write(self, name: str, report: Mapping[str, Any],
               new: Callable[[list[Ask], Outcomes], Outcomes]) -> Mapping[str, Any] | None:  # fmt: skip
        """Merge `new(asks, outcomes)` of `report` into its status (pruned to its asks), written guarded by its
        resourceVersion; on a conflict re-read and retried. The report as written (or as read, when nothing changed);
        None when it is gone or the write failed."""
        from tidemark.kube.client import ApiStatusError, KubeError, request_json
        from tidemark.kube.resources import NODEREPORTS

        for _ in range(WRITE_RETRIES):
            try:
                asks, old = asks_of(report.get("spec") or {}), outcomes_of(report.get("status"))
                fresh = new(asks, old)
                out = merged(asks, old, fresh)
                if not fresh and len(out) == len(old):
                    return report
                rv = (report.get("metadata") or {}).get("resourceVersion")
                body = {"metadata": {"resourceVersion": rv}, "status": {"evictions": out}}
                return request_json(self.api, "PATCH", NODEREPORTS.object_path(name, subresource="status"), body=body,
                                    content_type=MERGE_PATCH, timeout=self.timeout)  # fmt: skip
            except ApiStatusError as e:
                if e.status != 409:
                    if e.status != 404:
                        log.warning("NodeReport %s: writing its eviction outcomes failed: %s", name, e)
                    return None
            except KubeError as e:
                log.warning("NodeReport %s: writing its eviction outcomes failed: %s", name, e)
                return None
            try:
                report = request_json(self.api, "GET", NODEREPORTS.object_path(name), timeout=self.timeout)
            except KubeError as e:
                log.warning("NodeReport %s: re-reading it failed: %s", name, e)
                return None
        log.warning("NodeReport %s kept changing; its eviction outcomes are written at the next change", name)
        return None

    # --- one ask ------------------------------------------------------------------------------------------

    def _evict(self, node: str, ask: Ask) -> tuple[dict[str, Any], tuple[str, str, str] | None]:
        """The ask's outcome, and the Event to write about the pod (type, reason, message) if any."""
        what, message = self._outcome(node, ask)
        self.counts[what] = self.counts.get(what, 0) + 1
        pod = f"{ask.namespace}/{ask.name}"
        event: tuple[str, str, str] | None = None
        if what == EVICTED:
            log.info("evicted %s for the agent of node %s (%s): %s", pod, node, ask.reason, ask.message)
            event = ("Warning", ask.reason, f"evicted by tidemark-agent on behalf of node {node}: {ask.message}")
        elif what == DENIED:
            log.warning("NodeReport %s: eviction of %s denied: %s", node, pod, message)
            event = ("Warning", "EvictionDenied", f"not evicted for the agent of node {node}: {message}")
        else:
            log.info("NodeReport %s: eviction of %s %s: %s", node, pod, what, message)
        return outcome(ask, what, message, self._clock()), event

    def _outcome(self, node: str, ask: Ask) -> tuple[str, str]:
        from tidemark.kube.client import ApiStatusError, KubeError, request_json
        from tidemark.kube.eviction import EvictionOutcome
        from tidemark.kube.resources import PODS

        try:
            pod = request_json(self.api, "GET", PODS.object_path(ask.name, ask.namespace), timeout=self.timeout)
        except ApiStatusError as e:
            if e.status == 404:
                pod = None
            else:
                return FAILED, f"reading the pod: {e}"
        except KubeError as e:
            return FAILED, f"reading the pod: {e}"
        if (verdict := judge(ask, pod, node)) is not None:
            return verdict
        assert pod is not None  # judge() answers NotFound for a missing pod
        gang, podgroup = self._gang(pod)
        if not gang.members:
            return DENIED, gang.why
        r = self._evictor.evict(ask.namespace, ask.name, grace_period_seconds=ask.grace_seconds, uid=ask.uid)
        kind = {EvictionOutcome.EVICTED: EVICTED, EvictionOutcome.BLOCKED: REFUSED,
                EvictionOutcome.NOT_FOUND: NOT_FOUND}.get(r.outcome, FAILED)  # fmt: skip
        message = r.message or (f"HTTP {r.status}" if r.status else "")
        if kind == EVICTED and gang.gang:
            message = self._evict_gang(node, ask, gang, podgroup)
        return kind, message

    # --- gangs (scheduler_ext/controller/gangs.py) ----------------------------------------------------------

    def _gang(self, pod: Mapping[str, Any]) -> tuple[GangVerdict, Mapping[str, Any] | None]:
        """What evicting `pod` takes, and its PodGroup. A PodGroup or pod list that cannot be read leaves the pod
        alone, as before the rule (logged): the agent's eviction protects its node."""
        from tidemark.kube.client import ApiStatusError, KubeError, request_json
        from tidemark.kube.resources import PODGROUPS, PODS

        group = group_of(pod)
        if not group:
            return GangVerdict((pod,)), None
        ns = (pod.get("metadata") or {}).get("namespace") or ""
        try:
            podgroup = request_json(self.api, "GET", PODGROUPS.object_path(group, ns), timeout=self.timeout)
        except ApiStatusError as e:
            if e.status != 404:
                log.warning("PodGroup %s/%s: not read (%s); its member is evicted alone", ns, group, e)
            return GangVerdict((pod,)), None
        except KubeError as e:
            log.warning("PodGroup %s/%s: not read (%s); its member is evicted alone", ns, group, e)
            return GangVerdict((pod,)), None
        if min_member(podgroup) <= 1:
            return GangVerdict((pod,)), podgroup
        try:
            listed = request_json(self.api, "GET", PODS.collection_path(ns), timeout=self.timeout)
        except KubeError as e:
            log.warning("PodGroup %s/%s: its pods not listed (%s); the member is evicted alone", ns, group, e)
            return GangVerdict((pod,)), podgroup
        return gang_verdict(pod, podgroup, listed.get("items") or []), podgroup

    def _evict_gang(self, node: str, ask: Ask, gang: GangVerdict, podgroup: Mapping[str, Any] | None) -> str:
        """The asked pod is evicted: the rest of its gang follows; the PodGroup's condition and Event. The message
        of the ask's outcome."""
        from tidemark.kube.eviction import EvictionOutcome

        asked = f"{ask.namespace}/{ask.name}"
        said = gang_message(gang, asked)
        missed = []
        for member in gang.members[1:]:
            md = member.get("metadata") or {}
            name, uid = str(md.get("name", "")), str(md.get("uid", ""))
            r = self._evictor.evict(ask.namespace, name, grace_period_seconds=ask.grace_seconds, uid=uid)
            if r.outcome not in (EvictionOutcome.EVICTED, EvictionOutcome.NOT_FOUND):
                missed.append(f"{name} ({r.outcome}: {r.message or r.status})")
                continue
            self.counts[GANG_EVICTED] = self.counts.get(GANG_EVICTED, 0) + 1
            self._post_event({"kind": "Pod", "apiVersion": "v1", "name": name, "uid": uid}, ask.namespace,
                             "Warning", ask.reason, f"evicted by tidemark-agent with its gang on behalf of node "
                             f"{node}: {said}", {"component": EVENT_SOURCE, "host": node})  # fmt: skip
        if missed:
            said += f"; not evicted: {', '.join(missed)}"
        log.info("%s", said)
        self._gang_condition(ask.namespace, gang.gang, podgroup, said)
        return said

    def _gang_condition(self, ns: str, group: str, podgroup: Mapping[str, Any] | None, message: str) -> None:
        """PodGroup condition Evicted=True, reason GangEvicted (the one the scheduler's preempt and reclaim set), and
        a Warning Event on the PodGroup."""
        from tidemark.kube.client import KubeError, request_json
        from tidemark.kube.resources import PODGROUPS

        now = _now()
        old = [c for c in ((podgroup or {}).get("status") or {}).get("conditions") or []
               if isinstance(c, Mapping) and c.get("type") != PG_COND_EVICTED]  # fmt: skip
        cond = {"type": PG_COND_EVICTED, "status": "True", "reason": GANG_EVICTED, "message": message[:1024],
                "lastTransitionTime": now, "transitionID": f"tidemark-agent-{now}"}  # fmt: skip
        try:
            request_json(self.api, "PATCH", PODGROUPS.object_path(group, ns, subresource="status"),
                         body={"status": {"conditions": [*old, cond]}}, content_type=MERGE_PATCH,
                         timeout=self.timeout)  # fmt: skip
        except KubeError as e:
            log.warning("PodGroup %s/%s: its GangEvicted condition not written: %s", ns, group, e)
        uid = str(((podgroup or {}).get("metadata") or {}).get("uid", ""))
        self._post_event({"kind": "PodGroup", "apiVersion": "scheduling.volcano.sh/v1beta1", "name": group, "uid": uid},
                         ns, "Warning", GANG_EVICTED, message, {"component": DENIAL_SOURCE})  # fmt: skip

    def _event(self, ask: Ask, node: str, type_: str, reason: str, message: str) -> None:
        source = {"component": DENIAL_SOURCE} if reason == "EvictionDenied" else {"component": EVENT_SOURCE,
                                                                                  "host": node}  # fmt: skip
        self._post_event({"apiVersion": "v1", "kind": "Pod", "name": ask.name, "uid": ask.uid}, ask.namespace, type_,
                         reason, message, source)  # fmt: skip

    def _post_event(self, involved: dict[str, str], ns: str, type_: str, reason: str, message: str,
                    source: dict[str, str]) -> None:  # fmt: skip
        from tidemark.kube.client import KubeError, request_json

        now = _now()
        event = {
            "metadata": {"generateName": f"{involved['name'][:200]}.", "namespace": ns},
            "involvedObject": {**involved, "namespace": ns},
            "reason": reason, "type": type_, "message": message[:1024], "count": 1, "source": source,
            "firstTimestamp": now, "lastTimestamp": now,
        }  # fmt: skip
        try:
            request_json(self.api, "POST", f"/api/v1/namespaces/{ns}/events", body=event, timeout=self.timeout)
        except KubeError as e:
            log.warning("the Event about %s %s/%s could not be written: %s", involved["kind"], ns, involved["name"], e)
