"""NodeReports (tidemark/nodereport.py): the agent writes its report, the webhook's controller applies it to the Node.

On an in-memory API (merge patches, resourceVersions, 404/409 as the server answers); the same path against the
real kube-apiserver with the real webhook is tests/integration/scheduler/test_agent_rights_api.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from agent.act.report_writer import ReportWriter
from scheduler_ext.controller.nodereport import NodeReportController
from tidemark.kube.client import ApiStatusError, KubeError
from tidemark.nodereport import TAINT, ReportSpec, node_changes, spec_problems, with_taint

EVICTING = "volcano.sh/offline-job-evicting"
USAGE = "tidemark.io/node-usage"
NODE = "/api/v1/nodes/n1"
REPORT = "/apis/colocation.tidemark.io/v1alpha1/nodereports/n1"
REPORTS = "/apis/colocation.tidemark.io/v1alpha1/nodereports"


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


class FakeApi:
    """Objects by path; GET, POST (to a collection), merge PATCH with a resourceVersion precondition."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv = 10
        self.calls: list[tuple[str, str]] = []
        self.refuse: dict[str, ApiStatusError] = {}

    def put(self, path: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.objects[path] = obj

    def request_json(self, _api: Any, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        if path in self.refuse and method != "GET":
            raise self.refuse[path]
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            if target in self.objects:
                raise ApiStatusError(409, "exists")
            self.put(target, copy.deepcopy(body))
            return copy.deepcopy(self.objects[target])
        base = path.removesuffix("/status")
        if base not in self.objects:
            raise ApiStatusError(404, f"{base} not found")
        if method == "GET":
            return copy.deepcopy(self.objects[base])
        assert method == "PATCH"
        want_rv = (body.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != self.objects[base]["metadata"]["resourceVersion"]:
            raise ApiStatusError(409, "conflict")
        merged = _merge(self.objects[base], body)
        if merged != self.objects[base]:
            self.put(base, merged)
        return copy.deepcopy(self.objects[base])


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    import tidemark.kube.client as client

    fake = FakeApi()
    monkeypatch.setattr(client, "request_json", fake.request_json)
    fake.put(NODE, {"metadata": {"name": "n1", "labels": {"x": "y"}, "annotations": {"keep": "me"}},
                    "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
                    "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}})  # fmt: skip
    yield fake


def _writer(api: FakeApi, controller: NodeReportController | None, **kw: Any) -> ReportWriter:
    """A writer whose waits run the controller once (as its watch would)."""

    def sleep(_: float) -> None:
        if controller is not None and REPORT in api.objects:
            controller.apply("n1", api.objects[REPORT])

    return ReportWriter(object(), "n1", sleep=sleep, **kw)


def test_the_agents_writes_reach_the_node_only_through_the_controller(api: FakeApi) -> None:
    controller = NodeReportController(object())
    writer = _writer(api, controller)
    node = writer.write(ReportSpec({"volcano.sh/oversubscription-cpu": "1500", EVICTING: "true"}, {}, True))
    assert node is not None and node["metadata"]["annotations"] == {
        "keep": "me", "volcano.sh/oversubscription-cpu": "1500", EVICTING: "true"}
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}, dict(TAINT)]
    node = writer.write(ReportSpec(resources={"kubernetes.io/batch-cpu": "1300"}))
    assert node["status"]["capacity"] == {"cpu": "4", "kubernetes.io/batch-cpu": "1300"}
    assert node["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "1300"
    node = writer.write(ReportSpec({EVICTING: None}, {}, False))
    assert node is not None and EVICTING not in node["metadata"]["annotations"]
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    # the agent never wrote the Node: every write of its own went to the report
    agent_writes = [c for c in api.calls if c[0] != "GET"]
    assert agent_writes and all(path.startswith(REPORTS) for _, path in agent_writes[:1])
    assert api.objects[REPORT]["spec"]["evictingTaint"] is False


def test_a_publication_is_one_report_write_and_one_node_write(api: FakeApi) -> None:
    """Annotations and batch-* together (every capacity publication): the agent writes its report once and the
    controller its Node once (the status subresource carries the annotations), where each wrote twice before:
    the fleet's write budget per agent (docs/scale.md)."""
    controller = NodeReportController(object())
    writer = _writer(api, controller)
    writer.write(ReportSpec({"volcano.sh/oversubscription-cpu": "0"}))  # the report exists
    api.calls.clear()
    node = writer.write(ReportSpec({"volcano.sh/oversubscription-cpu": "1500"}, {"kubernetes.io/batch-cpu": "1300"}))
    assert node["metadata"]["annotations"]["volcano.sh/oversubscription-cpu"] == "1500"
    assert node["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "1300"
    writes = [c for c in api.calls if c[0] != "GET"]
    assert [p for _, p in writes if p.startswith(REPORTS)] == [REPORT]
    assert [p for _, p in writes if not p.startswith(REPORTS)] == [NODE + "/status"]


def test_an_unapplied_report_is_a_failed_write(api: FakeApi) -> None:
    """No controller (the webhook's pods down): the write fails after apply_timeout; the worker backs off."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    writer = ReportWriter(object(), "n1", apply_timeout=3.0, sleep=sleep, monotonic=lambda: now[0])
    with pytest.raises(KubeError, match=r"not applied to the Node after 3 s.*volcano\.sh/oversubscription-cpu"):
        writer.write(ReportSpec({"volcano.sh/oversubscription-cpu": "7"}))
    api.refuse[REPORT] = ApiStatusError(500, "failed calling webhook")  # the webhook down: Fail
    with pytest.raises(ApiStatusError):
        writer.write(ReportSpec({"volcano.sh/oversubscription-cpu": "8"}))


def test_the_controller_pins_the_taint_and_writes_nothing_else(api: FakeApi) -> None:
    api.objects[NODE]["spec"]["taints"].append({"key": EVICTING, "value": "x", "effect": "NoExecute"})
    controller = NodeReportController(object())
    spec = {"annotations": {EVICTING: "true"}, "evictingTaint": True}
    assert controller.apply("n1", {"spec": spec}) == "applied"
    node = api.objects[NODE]
    assert [t for t in node["spec"]["taints"] if t["key"] == EVICTING] == [dict(TAINT)]
    assert node["metadata"]["labels"] == {"x": "y"} and node["metadata"]["annotations"]["keep"] == "me"
    assert controller.apply("n1", {"spec": spec}) == "current"
    # a report nobody should have let through (written while no webhook was registered) changes nothing
    before = copy.deepcopy(node)
    for bad in ({"annotations": {USAGE: "x" * 5000}}, {"annotations": {"evil.io/x": "1"}},
                {"evictingTaint": "NoExecute"}, {"resources": {"cpu": "400"}}):
        assert controller.apply("n1", {"spec": bad}) == "invalid"
    assert api.objects[NODE] == before
    assert controller.apply("ghost", {"spec": spec}) == "no-node"


def test_node_changes_is_the_shared_definition_of_applied() -> None:
    node = {"metadata": {"annotations": {EVICTING: "true", USAGE: "{}"}},
            "status": {"capacity": {"kubernetes.io/batch-cpu": "5"}, "allocatable": {}}}
    ch = node_changes({"annotations": {EVICTING: "true"}, "resources": {"kubernetes.io/batch-cpu": "5"}}, node)
    assert ch.annotations == {USAGE: None}  # absent from the report: removed from the Node
    assert ch.status == {"status": {"allocatable": {"kubernetes.io/batch-cpu": "5"}}}
    assert ch.taint is None  # no opinion on the taint
    assert node_changes({"evictingTaint": False}, node).taint is None  # no taint to remove
    assert node_changes({"evictingTaint": False}, {"spec": {"taints": [dict(TAINT)]}}).taint is False
    assert with_taint([dict(TAINT), dict(TAINT)], True) == [dict(TAINT)]  # exactly one
    assert with_taint([], False) is None


def test_spec_problems_caps_every_value() -> None:
    ok = {"annotations": {USAGE: json.dumps({"cpu": 1.5, "memory": 2, "window": "60s",
                                             "time": "2026-01-01T00:00:00Z"})},
          "resources": {"kubernetes.io/batch-memory": "2Gi"}, "evictingTaint": True}
    assert spec_problems(ok) == [] and spec_problems(None) == [] and spec_problems({}) == []
    assert spec_problems([1]) == ["spec must be an object"]
    assert "at most 32" in spec_problems({"resources": {"kubernetes.io/batch-cpu": "1" * 40}})[0]
