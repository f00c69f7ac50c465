"""The admission rules (scheduler_ext.webhook.admission) as pure functions over AdmissionReview requests.

The same rules run behind the real API server in tests/integration/scheduler/test_webhook_api.py.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from scheduler_ext.webhook import admission as adm
from scheduler_ext.webhook.server import configurations

AGENT = "system:serviceaccount:tidemark-system:tidemark-agent"
SETTINGS = adm.Settings()


class FakeLookups:
    """In-memory lookups (the rules' only outside knowledge; the API-backed one is tested live)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], tuple[str, str]] = {
            ("tidemark-system", "agent-a"): ("uid-a", "node-a"),
            ("batch", "job-a"): ("uid-j1", "node-a"),
            ("batch", "job-b"): ("uid-j2", "node-b"),
        }
        self.queues: dict[str, dict[str, Any]] = {
            "default": {"spec": {"weight": 1}, "status": {"state": "Open"}},
            "closed": {"spec": {"weight": 1}, "status": {"state": "Closed"}},
            "a": {"spec": {"weight": 1, "parent": "b"}},
            "b": {"spec": {"weight": 1, "parent": "root"}},
        }
        self.stored: dict[str, Mapping[str, Any]] = {}

    def pod_node(self, namespace: str, name: str, uid: str | None) -> str | None:
        got = self.pods.get((namespace, name))
        if got is None or (uid is not None and got[0] != uid):
            return None
        return got[1]

    def queue(self, name: str) -> Mapping[str, Any] | None:
        return self.queues.get(name)

    def current(self, path: str) -> Mapping[str, Any] | None:
        return self.stored.get(path)


def node(name: str, **ann: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": dict(ann),
                     "resourceVersion": "5", "managedFields": []},
        "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}},
    }


def agent_user(pod: str = "agent-a", uid: str = "uid-a") -> dict[str, Any]:
    return {"username": AGENT, "extra": {adm.POD_NAME_EXTRA: [pod], adm.POD_UID_EXTRA: [uid]}}


def check(request: dict[str, Any]) -> adm.Verdict:
    return adm.validate(request, FakeLookups(), SETTINGS)


# --- the agent's NodeReport (it writes no Node) ----------------------------------------------------------


def report(name: str, spec: dict[str, Any] | None = None, user: dict[str, Any] | None = None,
           operation: str = "UPDATE") -> dict[str, Any]:
    obj = {"apiVersion": "colocation.tidemark.io/v1alpha1", "kind": "NodeReport", "metadata": {"name": name},
           "spec": spec if spec is not None else {"annotations": {"volcano.sh/oversubscription-cpu": "1500"}}}
    return {"uid": "1", "operation": operation,
            "resource": {"group": "colocation.tidemark.io", "version": "v1alpha1", "resource": "nodereports"},
            "name": name, "object": obj if operation != "DELETE" else None, "oldObject": obj,
            "userInfo": user or agent_user()}


def node_user(node_name: str, groups: list[str] | None = None) -> dict[str, Any]:
    """A systemd agent's client certificate: user tidemark:agent:<node> in the group tidemark:agents."""
    return {"username": f"tidemark:agent:{node_name}", "groups": groups or ["tidemark:agents", "system:authenticated"]}


def test_agent_writes_its_own_nodes_report() -> None:
    spec = {"annotations": {"volcano.sh/oversubscription-cpu": "1500", "volcano.sh/offline-job-evicting": "true",
                            "tidemark.io/node-usage": json.dumps({"cpu": 12.5, "memory": 40})},
            "resources": {"kubernetes.io/batch-cpu": "1300", "kubernetes.io/batch-memory": "2Gi"},
            "evictingTaint": True}
    for op in ("CREATE", "UPDATE"):
        assert check(report("node-a", spec, operation=op)).allowed
    assert check(report("node-b", spec, node_user("node-b"))).allowed


def test_agent_may_not_write_another_nodes_report_or_delete_one() -> None:
    v = check(report("node-b"))
    assert not v.allowed and v.code == 403 and "node node-a may not write the NodeReport of node 'node-b'" in v.message
    assert not check(report("node-a", user=node_user("node-b"))).allowed
    v = check(report("node-a", operation="DELETE"))
    assert not v.allowed and "may not delete" in v.message
    assert not check(report("node-a", user={"username": AGENT})).allowed  # a token bound to no pod
    v = check(report("node-a", user=agent_user(uid="someone-else")))
    assert not v.allowed and "not found" in v.message


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"annotations": {"other.io/x": "1"}}, "may publish only"),
        ({"annotations": {"tidemark.io/node-usage": "{" + "1" * 2000 + "}"}}, "characters long (at most 1024)"),
        ({"annotations": {"tidemark.io/node-usage": "[1]"}}, "not a JSON object"),
        ({"annotations": {"volcano.sh/oversubscription-cpu": "1e400"}}, "not a non-negative integer"),
        ({"annotations": {"volcano.sh/offline-job-evicting": "maybe"}}, "not a boolean"),
        ({"resources": {"cpu": "400"}}, "may publish only"),
        ({"resources": {"kubernetes.io/batch-cpu": "-1"}}, "is negative"),
        ({"evictingTaint": "NoExecute"}, "must be a boolean"),
        ({"taints": [{"key": "volcano.sh/offline-job-evicting", "effect": "NoExecute"}]}, "not a field"),
    ],
)
def test_a_report_the_controller_would_not_apply_is_refused_whoever_writes_it(spec: dict[str, Any], why: str) -> None:
    for user in (agent_user(), {"username": "admin", "groups": ["system:masters"]}):
        v = check(report("node-a", spec, user))
        assert not v.allowed and v.code == 400 and why in v.message, v.message


def test_node_bound_identity_needs_the_agent_group() -> None:
    """`tidemark:agent:<node>` outside the group is no agent: RBAC decides (it binds the group only)."""
    assert check(report("node-a", user=node_user("node-b", groups=["system:authenticated"]))).allowed
    assert not check(report("node-a", user=node_user("node-b"))).allowed
    v = check(report("x", user={"username": "tidemark:agent:Not_A_Node", "groups": ["tidemark:agents"]}))
    assert not v.allowed and "does not name a node" in v.message


def test_other_users_are_left_to_rbac() -> None:
    assert check(report("node-b", user={"username": "admin"})).allowed
    assert check(report("node-b", user={"username": "admin"}, operation="DELETE")).allowed
    # no rule looks at Nodes any more (agents hold no Node rights): every Node write passes
    node_write = {"uid": "1", "operation": "UPDATE", "resource": {"group": "", "version": "v1", "resource": "nodes"},
                  "name": "node-b", "object": node("node-b"), "oldObject": node("node-b"), "userInfo": agent_user()}
    assert check(node_write).allowed


def test_the_agent_hooks_fail_closed_and_no_hook_matches_nodes() -> None:
    from scheduler_ext.webhook.server import configurations as configs

    mutating, validating = configs({"url": "https://x"})
    hooks = {h["name"]: h for cfg in (mutating, validating) for h in cfg["webhooks"]}
    for name, hook in hooks.items():
        resources = {r for rule in hook["rules"] for r in rule["resources"]}
        assert not resources & {"nodes", "nodes/status", "*"}, name
        agent_only = resources <= {"nodereports"}
        # ColocationProfiles fail closed too: only cluster admins write them, and they change pods
        fail_closed = agent_only or resources == {"colocationprofiles"}
        assert hook["failurePolicy"] == ("Fail" if fail_closed else "Ignore"), name
        # no hook judges evictions: agents hold no eviction right (they ask in their NodeReport), so no eviction in
        # the cluster waits for the webhook (issue 33)
        assert "pods/eviction" not in resources, name
    assert "nodereports.validate.tidemark.io" in hooks


# --- eviction asks ---------------------------------------------------------------------------------


def test_an_agents_eviction_asks_are_bounded_and_on_its_own_report() -> None:
    asks = [{"uid": f"u{i}", "namespace": "batch", "name": "job-a", "reason": "CPUHighWatermark", "message": "",
             "askedAt": "2026-11-29T10:00:00Z"} for i in range(33)]  # fmt: skip
    assert check(report("node-a", spec={"evictions": asks[:2]})).allowed
    v = check(report("node-a", spec={"evictions": asks}))
    assert not v.allowed and "at most 32" in v.message
    assert not check(report("node-b", spec={"evictions": asks[:1]})).allowed  # another node's report


# --- qos-level class flips ------------------------------------------------------------------------------


def pod_update(old_level: str | None, new_level: str | None, node_name: str = "node-a") -> dict[str, Any]:
    def pod(level: str | None) -> dict[str, Any]:
        ann = {"volcano.sh/qos-level": level} if level is not None else {}
        return {"metadata": {"name": "p", "annotations": ann}, "spec": {"nodeName": node_name}}

    return {"uid": "3", "operation": "UPDATE", "resource": {"group": "", "version": "v1", "resource": "pods"},
            "object": pod(new_level), "oldObject": pod(old_level), "userInfo": {"username": "tenant"}}


@pytest.mark.parametrize(("old", "new"), [("LC", "BE"), (None, "-1"), ("BE", "LS"), ("-3", "0"), ("-1", "garbage")])
def test_bound_pod_class_cannot_flip(old: str | None, new: str | None) -> None:
    v = check(pod_update(old, new))
    assert not v.allowed and "qos-level" in v.message


@pytest.mark.parametrize(("old", "new"), [("LC", "LS"), ("BE", "-7"), (None, "2"), ("-1", "-1")])
def test_bound_pod_class_may_change_within_its_side(old: str | None, new: str | None) -> None:
    assert check(pod_update(old, new)).allowed


def test_a_pending_pod_class_cannot_flip_either() -> None:
    """Issue 33 item 3: a profile's offline class undone before the bind kept its batch resources."""
    assert not check(pod_update("BE", "LC", node_name="")).allowed
    assert not check(pod_update("LC", "BE", node_name="")).allowed
    assert check(pod_update("BE", "-2", node_name="")).allowed


def test_the_status_subresource_is_judged_as_the_pod() -> None:
    """pods/status can change a pod's annotations too (hardening round 2, item 4): the same class lock."""
    flip = {**pod_update("LC", "BE"), "subResource": "status"}
    v = check(flip)
    assert not v.allowed and v.code == 403 and "cannot move from online to offline" in v.message
    assert check({**pod_update("LC", "LS"), "subResource": "status"}).allowed
    _, validating = configurations({"url": "https://x"})
    hook = next(h for h in validating["webhooks"] if h["name"] == "pods.validate.tidemark.io")
    assert hook["rules"][0]["resources"] == ["pods", "pods/status"] and hook["failurePolicy"] == "Ignore"


# --- Queues and PodGroups ---------------------------------------------------------------------------


def test_queue_defaults_as_volcano() -> None:
    assert adm.mutate_queue({"metadata": {"name": "q"}}) == [
        {"op": "add", "path": "/spec", "value": {}},
        {"op": "add", "path": "/spec/weight", "value": 1},
        {"op": "add", "path": "/spec/reclaimable", "value": True},
        {"op": "add", "path": "/status", "value": {"state": "Open"}},
    ]
    assert adm.mutate_queue({"spec": {"weight": 3, "reclaimable": False}, "status": {"state": "Closed"}}) == []
    assert adm.mutate_queue({"spec": {"weight": 0, "reclaimable": True}, "status": {}})[0]["value"] == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"weight": 0}, "spec.weight=0"),
        ({"weight": "heavy"}, "spec.weight='heavy'"),
        ({"weight": 1, "capability": {"cpu": "1e400"}}, "spec.capability.cpu='1e400' is out of range"),
        ({"weight": 1, "deserved": {"memory": "-1"}}, "spec.deserved.memory='-1' is negative"),
        ({"weight": 1, "guarantee": {"resource": {"cpu": "lots"}}}, "spec.guarantee.resource.cpu"),
        ({"weight": 1, "parent": "a"}, "cycle"),
    ],
)
def test_queue_validation(spec: dict[str, Any], message: str) -> None:
    lookups = FakeLookups()
    lookups.queues["b"]["spec"]["parent"] = "q"  # q -> a -> b -> q
    v = adm.validate_queue({"metadata": {"name": "q"}, "spec": spec}, lookups)
    assert not v.allowed and message in v.message


def test_podgroup_defaults_and_validation() -> None:
    assert adm.mutate_podgroup({"spec": {"minMember": 1}}) == [{"op": "add", "path": "/spec/queue", "value": "default"}]
    lookups = FakeLookups()
    ok = {"spec": {"minMember": 2, "queue": "default", "minResources": {"cpu": "2"}}}
    assert adm.validate_podgroup(ok, "CREATE", lookups).allowed
    for spec, message in [
        ({"minMember": -3}, "spec.minMember=-3"),
        ({"minMember": 1, "minResources": {"cpu": "1e400"}}, "out of range"),
        ({"minMember": 1, "queue": "ghost"}, "'ghost' does not exist"),
        ({"minMember": 1, "queue": "closed"}, "'closed' is not Open"),
    ]:
        v = adm.validate_podgroup({"spec": spec}, "CREATE", lookups)
        assert not v.allowed and message in v.message, spec


def test_review_response_wire_format() -> None:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u1", "operation": "CREATE", "object": {"metadata": {"name": "q"}},
                          "resource": {"group": "scheduling.volcano.sh", "resource": "queues"}}}
    reply = adm.review_response(review, adm.mutate)
    assert reply["apiVersion"] == "admission.k8s.io/v1" and reply["response"]["uid"] == "u1"
    patch = json.loads(base64.b64decode(reply["response"]["patch"]))
    assert {"op": "add", "path": "/spec/weight", "value": 1} in patch
    denied = adm.review_response({"request": {"uid": "u2"}}, lambda _: adm.deny("no", 403))
    assert denied["response"] == {"uid": "u2", "allowed": False,
                                  "status": {"code": 403, "message": "no", "reason": "Forbidden"}}
    assert not adm.review_response({}, adm.mutate)["response"]["allowed"]

    def boom(_: Any) -> adm.Verdict:
        raise RuntimeError("bug")

    assert "RuntimeError: bug" in adm.review_response({"request": {"uid": "u3"}}, boom)["response"]["status"]["message"]


def test_old_object_equal_to_object_is_read_back_from_the_api() -> None:
    """Some API servers hand webhooks the patched object as oldObject: the stored one is read instead."""
    lookups = FakeLookups()
    flip = pod_update("LC", "BE")
    flip["oldObject"] = flip["object"]
    flip["namespace"], flip["name"] = "shop", "p"
    lookups.stored["/api/v1/namespaces/shop/pods/p"] = pod_update("LC", "LC")["oldObject"]
    assert not adm.validate(flip, lookups, SETTINGS).allowed


# --- the HTTPS server and the command line ---------------------------------------------------------


def test_webhook_over_tls_answers_reviews_and_health(tmp_path: Any) -> None:
    """The real server on loopback with an openssl-made certificate (the API-backed lookups are tested live)."""
    import shutil
    import ssl
    import subprocess
    import urllib.request

    from scheduler_ext.webhook.server import WebhookServer, tls_context

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(tmp_path / "k"), "-out", str(tmp_path / "c"), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    server = WebhookServer("127.0.0.1:0", tls_context(str(tmp_path / "c"), str(tmp_path / "k")), FakeLookups()).start()
    client = ssl.create_default_context(cafile=str(tmp_path / "c"))
    base = f"https://127.0.0.1:{server.port}"
    try:
        with urllib.request.urlopen(base + "/healthz", context=client, timeout=30) as resp:
            assert resp.status == 200
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u1", "operation": "CREATE", "object": {"metadata": {"name": "q"}},
                              "resource": {"group": "scheduling.volcano.sh", "resource": "queues"}}}
        req = urllib.request.Request(base + "/mutate", data=json.dumps(review).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=client, timeout=30) as resp:
            reply = json.loads(resp.read())
        assert reply["response"]["uid"] == "u1" and reply["response"]["allowed"]
        patch = json.loads(base64.b64decode(reply["response"]["patch"]))
        assert {"op": "add", "path": "/spec/weight", "value": 1} in patch
        bad = urllib.request.Request(base + "/validate", data=b"[[[", headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, context=client, timeout=30)
        assert refused.value.code == 400
    finally:
        server.stop()


def test_webhook_command_refuses_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from scheduler_ext.cli import main

    assert main(["webhook", "--tls-cert-file", "/nonexistent.crt", "--tls-private-key-file", "/nonexistent.key"]) == 2
    assert "TLS certificate /nonexistent.crt" in capsys.readouterr().err
    assert main(["webhook", "--tls-cert-file", "c", "--tls-private-key-file", "k", "--agent-service-account", "x"]) == 2
    assert "expected NAMESPACE:NAME" in capsys.readouterr().err
