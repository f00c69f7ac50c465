"""The agent's evictions through its NodeReport, on the real kube-apiserver 1.20 with the rights as shipped (issue 33,
"evictions that do not wait for the webhook").

The agent is the ServiceAccount token bound to a pod on node A with the shipped agent role (no eviction right); it
asks with its real `ReportEvictor`. The controller runs with the webhook ServiceAccount's token and the shipped
webhook role, as in test_agent_rights_api.py (its `Rights` fixture). A lone API server has no disruption
controller, so a running pod a PodDisruptionBudget covers is always refused (429): the Refused path.
Before this change the controller evicted nothing (the asks were refused by the webhook as unknown fields).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.scheduler.test_agent_rights_api import (  # noqa: F401  (rights: a fixture)
    MERGE,
    REPORTS,
    Rights,
    _status,
    _until,
    rights,
)
from tests.integration.scheduler.test_webhook_api import certs  # noqa: F401  (a fixture)

pytestmark = pytest.mark.kube


def _op(pod: Any, reason: str = "CPUHighWatermark") -> Any:
    from agent.decide.ops import EvictPod

    md = pod.metadata
    return EvictPod(md.uid, md.namespace, md.name, reason, detail=f"cpu 95% over 90%: {md.name}")  # type: ignore[arg-type]


def _terminating(r: Rights, name: str) -> bool:
    return r.kube.core.read_namespaced_pod(name, r.ns).metadata.deletion_timestamp is not None


def _report(r: Rights) -> Any:
    from tidemark.kube.client import request_json

    return request_json(r.kube.api, "GET", f"{REPORTS}/{r.node_a}")


def _events(r: Rights, pod: str) -> list[Any]:
    return [e for e in r.kube.core.list_namespaced_event(r.ns).items if e.involved_object.name == pod]


def test_the_controller_evicts_what_the_agent_asks_and_reports_each_outcome_back(rights: Rights) -> None:  # noqa: F811
    """An offline pod on the agent's node is evicted; one a PodDisruptionBudget covers is Refused with the budget's
    message; an online pod on its node and an offline pod on another node are Denied, and none of them is touched."""
    from agent.act.report_evictor import ReportEvictor
    from tidemark.kube.client import request_json
    from tidemark.kube.resources import PDBS_V1BETA1

    r = rights
    offline = r.pod("offline", r.node_a)
    protected = r.kube.core.create_namespaced_pod(r.ns, {
        "metadata": {"name": "protected", "labels": {"app": "db"}, "annotations": {"volcano.sh/qos-level": "BE"}},
        "spec": {"nodeName": r.node_a, "containers": [{"name": "c", "image": "x"}]}})  # fmt: skip
    pdb = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "db", "namespace": r.ns},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}  # fmt: skip
    request_json(r.kube.api, "POST", PDBS_V1BETA1.collection_path(r.ns), body=pdb)
    # a Pending pod is evicted past any budget (1.20's canIgnorePDB): it runs, as kubelet would report
    r.kube.core.patch_namespaced_pod_status("protected", r.ns, {"status": {"phase": "Running"}})
    online = r.pod("online", r.node_a, qos="LC")
    elsewhere = r.pod("elsewhere", r.node_b)
    r.start_webhook()

    evictor = ReportEvictor(r.agent, r.node_a, answer_timeout=20.0)
    results = evictor.evict_many([_op(offline), _op(protected), _op(online), _op(elsewhere)])
    assert [x.outcome for x in results] == ["evicted", "blocked", "blocked", "blocked"], results
    assert results[1].status == 429 and "disruption budget" in results[1].message
    assert results[2].status == 403 and "not offline" in results[2].message
    assert results[3].status == 403 and f"on node {r.node_b}" in results[3].message
    assert _terminating(r, "offline")
    assert not any(_terminating(r, n) for n in ("protected", "online", "elsewhere"))
    status = _report(r)["status"]["evictions"]
    assert [o["outcome"] for o in status] == ["Evicted", "Refused", "Denied", "Denied"]
    # Events are recorded asynchronously (each recorder's own thread): wait for them, then read them
    _until(lambda: [e for e in _events(r, "offline") if e.reason == "CPUHighWatermark"], "the eviction's event")
    _until(lambda: _events(r, "online"), "the denial's event")
    (evicted,) = [e for e in _events(r, "offline") if e.reason == "CPUHighWatermark"]
    assert f"on behalf of node {r.node_a}" in evicted.message
    assert (evicted.source.component, evicted.source.host) == ("tidemark-agent", r.node_a)  # the agent's Event
    assert [e.reason for e in _events(r, "online")] == ["EvictionDenied"]

    # the same pod asked again later is a new ask, answered again; the outcomes follow the asks
    (again,) = evictor.evict_many([_op(protected)])
    assert again.outcome == "blocked" and again.status == 429
    assert [o["outcome"] for o in _report(r)["status"]["evictions"]] == ["Refused"]


def test_the_agent_cannot_write_the_answers_and_two_controllers_evict_once(rights: Rights) -> None:  # noqa: F811
    """The status is the controller's (the agent's role has no nodereports/status); with two webhook replicas each
    running a controller, an ask is claimed by one and evicted once."""
    from agent.act.report_evictor import ReportEvictor
    from scheduler_ext.controller.nodereport import NodeReportController

    r = rights
    victim = r.pod("victim", r.node_a)
    r.start_webhook()
    second = NodeReportController(r.webhook_api, resync=3600).start()
    try:
        (result,) = ReportEvictor(r.agent, r.node_a, answer_timeout=20.0).evict_many([_op(victim)])
    finally:
        second.stop()
    assert result.outcome == "evicted"
    evicted = [c.evictions.counts.get("Evicted", 0) for c in (r.controller, second)]
    assert sorted(evicted) == [0, 1], evicted
    # the event is recorded asynchronously (the recorder's own thread): wait for it, then there is exactly one
    _until(lambda: [e for e in _events(r, "victim") if e.reason == "CPUHighWatermark"], "the eviction's event")
    assert len([e for e in _events(r, "victim") if e.reason == "CPUHighWatermark"]) == 1
    forged = {"status": {"evictions": [{"uid": "x", "askedAt": "t", "outcome": "Evicted"}]}}
    assert _status(r.agent, "PATCH", f"{REPORTS}/{r.node_a}/status", forged, MERGE) == 403
    # through the main resource the status is dropped (the status subresource)
    _status(r.agent, "PATCH", f"{REPORTS}/{r.node_a}", forged, MERGE)
    _until(lambda: all(o["uid"] != "x" for o in _report(r)["status"]["evictions"]), "the report as stored")


def test_an_ask_that_would_break_a_gang_takes_it_whole_or_is_denied(rights: Rights) -> None:  # noqa: F811
    """Gangs are one unit (issue 34, item 3; scheduler_ext/controller/gangs.py), with the shipped webhook role: a
    member of a gang running at minMember 3 takes the whole gang, on both nodes, and the PodGroup says why; a member
    of a gang with one online member is Denied and nothing is touched; a member of a gang with one to spare goes
    alone. Before, each ask evicted its pod alone and left the gang below minMember."""
    from agent.act.report_evictor import ReportEvictor
    from tidemark.apis import ANN_GROUP_NAME
    from tidemark.kube.client import request_json
    from tidemark.kube.resources import PODGROUPS

    r = rights

    def member(name: str, node: str, group: str, qos: str = "BE") -> Any:
        p = r.kube.core.create_namespaced_pod(r.ns, {
            "metadata": {"name": name, "annotations": {"volcano.sh/qos-level": qos, ANN_GROUP_NAME: group}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}})  # fmt: skip
        r.kube.core.patch_namespaced_pod_status(name, r.ns, {"status": {"phase": "Running"}})
        return p

    for group, minimum in (("whole", 3), ("mixed", 2), ("spare", 2)):
        request_json(r.kube.api, "POST", PODGROUPS.collection_path(r.ns), body={
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": group, "namespace": r.ns}, "spec": {"minMember": minimum}})  # fmt: skip
    whole = [member("w0", r.node_a, "whole"), member("w1", r.node_a, "whole"), member("w2", r.node_b, "whole")]
    mixed = [member("m0", r.node_a, "mixed"), member("m1", r.node_b, "mixed", qos="LC")]
    spare = [member(f"s{i}", r.node_a, "spare") for i in range(3)]
    r.start_webhook()
    evictor = ReportEvictor(r.agent, r.node_a, answer_timeout=20.0)
    (taken,) = evictor.evict_many([_op(whole[0])])
    assert taken.outcome == "evicted" and "took the whole gang (3 running" in taken.message, taken
    assert all(_terminating(r, p.metadata.name) for p in whole)  # w2 on node B too
    pg = request_json(r.kube.api, "GET", PODGROUPS.object_path("whole", r.ns))
    (cond,) = [c for c in pg["status"]["conditions"] if c["type"] == "Evicted"]
    assert cond["reason"] == "GangEvicted" and cond["status"] == "True" and "minMember 3" in cond["message"]
    _until(lambda: [e for e in _events(r, "whole") if e.reason == "GangEvicted"], "the PodGroup's Event")
    (denied,) = evictor.evict_many([_op(mixed[0])])
    assert denied.outcome == "blocked" and "is not offline" in denied.message, denied
    assert not any(_terminating(r, p.metadata.name) for p in mixed)
    (alone,) = evictor.evict_many([_op(spare[0])])
    assert alone.outcome == "evicted" and "gang" not in alone.message
    assert [_terminating(r, p.metadata.name) for p in spare] == [True, False, False]
