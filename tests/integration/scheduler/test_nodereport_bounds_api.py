"""NodeReport values on the real kube-apiserver 1.20 (issue 33, items 15, 4 and 10), with the rights as shipped.

The agent is the ServiceAccount token bound to a pod on node A and the webhook (and its controller) run with the
webhook ServiceAccount's token, as in test_agent_rights_api.py (its `Rights` fixture). Node A has 4 cpus.
- item 15: values every reader refused (`²`, `١٢٣`, a 32-digit X, batch-memory beyond 8 TiB) passed the gate;
  now the CRD schema or the webhook refuses them.
- item 4: X of 9e12 cores on its own node passed; now the webhook refuses it naming the bound (the node's
  capacity), and a report no webhook judged is applied lowered to the bound, with a Warning Event.
- item 10: a Node registered again under the same name got the dead Node's batch-cpu from its report; now the
  report is owned by its Node (uid), and the controller deletes a dead Node's report and takes its values off.
Each test failed on the code before the fix (docs/security.md, "Hardening round 3").
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.scheduler.test_agent_rights_api import (  # noqa: F401  (rights: a fixture)
    ANN_X,
    API_VERSION,
    MERGE,
    REPORTS,
    Rights,
    _until,
    rights,
)
from tests.integration.scheduler.test_webhook_api import certs  # noqa: F401  (a fixture)

pytestmark = pytest.mark.kube

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"


def _write(api: Any, node: str, spec: dict[str, Any]) -> tuple[int, str]:
    """Create or patch the node's NodeReport: (HTTP status, the refusal's message)."""
    from tidemark.kube.client import ApiStatusError, request

    try:
        return request(api, "PATCH", f"{REPORTS}/{node}", body={"spec": spec}, content_type=MERGE).status, ""
    except ApiStatusError as e:
        if e.status != 404:
            return e.status, str(e)
    body = {"apiVersion": API_VERSION, "kind": "NodeReport", "metadata": {"name": node}, "spec": spec}
    try:
        return request(api, "POST", REPORTS, body=body).status, ""
    except ApiStatusError as e:
        return e.status, str(e)


def _controller(api: Any) -> Any:
    try:
        from scheduler_ext.controller.nodereport import NodeReportController
    except ImportError:  # the code before the move
        from scheduler_ext.webhook.nodereports import NodeReportController  # type: ignore[no-redef]
    return NodeReportController(api, resync=3600)


def _report(r: Rights, name: str) -> Any:
    from tidemark.kube.client import request_json

    return request_json(r.kube.api, "GET", f"{REPORTS}/{name}")


def _node(r: Rights, name: str) -> Any:
    from tidemark.kube.client import request_json

    return request_json(r.kube.api, "GET", f"/api/v1/nodes/{name}")


def test_item15_values_every_reader_refuses_do_not_pass_the_gate(rights: Rights) -> None:  # noqa: F811
    """Before: each of these was accepted (201/200) and then read as 0 by the agent and the scheduler."""
    rights.start_webhook()
    cases = {
        "X superscript two": {"annotations": {ANN_X: "\u00b2"}},
        "X arabic-indic 123": {"annotations": {ANN_X: "\u0661\u0662\u0663"}},
        "X of 32 digits": {"annotations": {ANN_X: "9" * 32}},
        "batch-memory 9Ti": {"resources": {BATCH_MEMORY: "9Ti"}},
    }
    got = {what: _write(rights.agent, rights.node_a, spec)[0] for what, spec in cases.items()}
    print("\nitem 15:", got)
    assert all(code in (400, 422) for code in got.values()), got
    assert _write(rights.agent, rights.node_a, {"annotations": {ANN_X: "123"}})[0] in (200, 201)


def test_item4_the_webhook_refuses_beyond_the_node_naming_the_bound(rights: Rights) -> None:  # noqa: F811
    """Before: X of 9e12 cores (9e15 milli-cores) on its own 4-cpu node was accepted."""
    rights.start_webhook()
    code, message = _write(rights.agent, rights.node_a, {"annotations": {ANN_X: "9000000000000000"},
                                                         "resources": {BATCH_CPU: "9000000000000"}})  # fmt: skip
    print("\nitem 4:", code, message)
    assert code == 400
    assert "at most 4000" in message and "capacity cpu" in message
    assert _write(rights.agent, rights.node_a, {"annotations": {ANN_X: "4000"}, "resources": {BATCH_CPU: "4000"}})[
        0
    ] in (200, 201)


def test_item4_the_controller_lowers_a_report_no_webhook_judged(rights: Rights) -> None:  # noqa: F811
    """No webhook registered (a report written while it was not): the controller applies the node's bound."""
    node = rights.node_a
    assert _write(rights.kube.api, node, {"annotations": {ANN_X: "9000000000000000"},
                                          "resources": {BATCH_CPU: "9000000000000"}})[0] == 201  # fmt: skip
    controller = _controller(rights.webhook_api)
    controller.apply(node, _report(rights, node))
    n = _node(rights, node)
    print("\nitem 4, controller:", n["metadata"].get("annotations"), n["status"].get("allocatable"))
    assert n["metadata"]["annotations"][ANN_X] == "4000"
    assert n["status"]["allocatable"][BATCH_CPU] in ("4000", "4k")
    assert n["status"]["capacity"][BATCH_CPU] in ("4000", "4k")
    events = rights.kube.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    assert any(e.reason == "NodeReportClamped" and "at most 4000" in e.message for e in events), events


def test_item10_a_node_registered_again_does_not_get_the_dead_nodes_values(rights: Rights) -> None:  # noqa: F811
    """Before: the report outlived its Node and its batch-cpu and X were applied to the new Node of that name."""
    from kubernetes import client

    core, node = rights.kube.core, rights.node_b
    assert _write(rights.kube.api, node, {"annotations": {ANN_X: "2000"}, "resources": {BATCH_CPU: "3000"}})[0] == 201
    controller = _controller(rights.webhook_api)
    controller.apply(node, _report(rights, node))
    first = _node(rights, node)
    assert first["status"]["allocatable"][BATCH_CPU] in ("3000", "3k")
    owners = _report(rights, node)["metadata"].get("ownerReferences") or []

    core.delete_node(node)  # the lone test API server has no garbage collector: the report stays
    _until(lambda: _status_of(rights, f"/api/v1/nodes/{node}") == 404, "the Node to be deleted")
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node),
                                   status=client.V1NodeStatus(capacity={"cpu": "4"}, allocatable={"cpu": "4"})))
    outcome = controller.apply(node, _report(rights, node))
    again = _node(rights, node)
    print("\nitem 10:", outcome, again["metadata"].get("annotations"), again["status"].get("allocatable"))
    assert BATCH_CPU not in (again["status"].get("allocatable") or {})
    assert ANN_X not in (again["metadata"].get("annotations") or {})
    assert _status_of(rights, f"{REPORTS}/{node}") == 404  # the dead Node's report is deleted
    # it was owned by the dead Node (a real cluster's garbage collector deletes it with the Node)
    assert [(o["kind"], o["uid"]) for o in owners] == [("Node", first["metadata"]["uid"])]
    # the agent of the new Node publishes again: a new report, owned by the new Node
    assert _write(rights.kube.api, node, {"resources": {BATCH_CPU: "1000"}})[0] == 201
    controller.apply(node, _report(rights, node))
    assert _node(rights, node)["status"]["allocatable"][BATCH_CPU] in ("1000", "1k")
    owners = _report(rights, node)["metadata"].get("ownerReferences") or []
    assert [o["uid"] for o in owners] == [again["metadata"]["uid"]]


def _status_of(r: Rights, path: str) -> int:
    from tests.integration.scheduler.test_agent_rights_api import _status

    return _status(r.kube.api, "GET", path)
