"""`tidemark-scheduler webhook` behind the real kube-apiserver 1.20 (issue #13, "Rights").

The webhook runs in-process on a loopback port with a certificate made here by openssl (a CA and a
server certificate for 127.0.0.1); its Mutating/ValidatingWebhookConfigurations are the ones the
manifests ship (`scheduler_ext.webhook.server.configurations`) with `failurePolicy: Fail`, so a
webhook that is not reached fails the test instead of letting everything through. The API server
is shared by the session's tests, so the hooks carry selectors for this test's objects only.

The agent is a real ServiceAccount token bound to a real pod (TokenRequest with boundObjectRef): the
API server itself puts `authentication.kubernetes.io/pod-name`/`pod-uid` into the request's user,
exactly as for the DaemonSet's projected token. Its rights are the shipped agent ClusterRole. What that
token can do with the webhook up and stopped (it writes no Node; its NodeReports and evictions are judged
by hooks that fail closed) is measured in test_agent_rights_api.py, which reuses this module's `certs`.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.kubeapi import VOLCANO_GROUP, VOLCANO_VERSION, KubeNamespace

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[3]
AGENT_ROLE = "tidemark-agent"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """ca.crt, tls.crt (SAN IP:127.0.0.1, serverAuth) and tls.key in a fresh directory."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=tidemark-test-ca",
             cwd=tmp_path)
    _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1", cwd=tmp_path)
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
             "tls.crt", "-days", "1", "-extfile", "ext.cnf", cwd=tmp_path)
    return tmp_path


def _shipped_agent_rules() -> list[dict[str, Any]]:
    """The rules of the agent's ClusterRole in daemonset/ (wherever the manifests put it)."""
    for path in sorted((REPO / "daemonset").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ClusterRole" and doc["metadata"]["name"] == AGENT_ROLE:
                return list(doc["rules"])
    raise AssertionError("no ClusterRole tidemark-agent under daemonset/")


def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Env:
    """The objects of one test: nodes A and B, the agent's pod on A, pods on A and B."""

    def __init__(self, kube: KubeNamespace, label: str) -> None:
        self.kube = kube
        self.label = label
        self.node_a = kube.unique("node-a")
        self.node_b = kube.unique("node-b")
        self.agent_client: Any = None
        self.register: Callable[[], None] = lambda: None


@pytest.fixture
def env(kube: KubeNamespace, certs: Path) -> Iterator[Env]:
    from kubernetes import client

    from scheduler_ext.webhook.admission import Settings
    from scheduler_ext.webhook.server import ApiLookups, WebhookServer, configurations, tls_context

    label = f"w{secrets.token_hex(4)}"
    e = Env(kube, label)
    core, ns = kube.core, kube.name
    core.patch_namespace(ns, {"metadata": {"labels": {"tidemark-webhook-test": label}}})
    for name in (e.node_a, e.node_b):
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"tidemark-webhook-test": label}),
                                       status=client.V1NodeStatus(capacity={"cpu": "4"}, allocatable={"cpu": "4"})))
        kube.defer(lambda name=name: core.delete_node(name))

    # the agent: a ServiceAccount with the shipped ClusterRole, a pod on node A, a token bound to that pod
    rbac = client.RbacAuthorizationV1Api(kube.api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "tidemark-agent"}})
    role = kube.unique("tidemark-agent")
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": _shipped_agent_rules()})
    kube.defer(lambda: rbac.delete_cluster_role(role))
    rbac.create_cluster_role_binding({
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "tidemark-agent", "namespace": ns}],
    })
    kube.defer(lambda: rbac.delete_cluster_role_binding(role))

    def pod(name: str, node: str, qos: str | None = None, sa: str | None = None) -> Any:
        ann = {"volcano.sh/qos-level": qos} if qos else {}
        return core.create_namespaced_pod(ns, {
            "metadata": {"name": name, "annotations": ann},
            "spec": {"nodeName": node, "serviceAccountName": sa, "containers": [{"name": "c", "image": "x"}]},
        })

    agent_pod = pod("agent", e.node_a, sa="tidemark-agent")
    pod("victim-a", e.node_a, qos="BE")
    pod("victim-b", e.node_b, qos="BE")
    pod("web-a", e.node_a, qos="LC")
    token = core.create_namespaced_service_account_token("tidemark-agent", ns, {
        "spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "agent", "uid": agent_pod.metadata.uid},
                 "expirationSeconds": 3600},
    }).status.token
    cfg = client.Configuration()
    cfg.host = kube.api.configuration.host
    cfg.verify_ssl = False
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    e.agent_client = client.ApiClient(cfg)

    # the webhook, and its configurations pointing at it
    server = WebhookServer(
        "127.0.0.1:0",
        tls_context(str(certs / "tls.crt"), str(certs / "tls.key")),
        ApiLookups(kube.api),
        Settings(agent_users=frozenset({f"system:serviceaccount:{ns}:tidemark-agent"})),
    ).start()
    e.register = lambda: _register(kube, server.port, certs, label, configurations)
    try:
        yield e
    finally:
        e.agent_client.close()
        server.stop()


def _register(kube: KubeNamespace, port: int, certs: Path, label: str, configurations: Any) -> None:
    from kubernetes import client

    selector = {"matchLabels": {"tidemark-webhook-test": label}}
    mutating, validating = configurations(
        {"url": f"https://127.0.0.1:{port}", "caBundle": base64.b64encode((certs / "ca.crt").read_bytes()).decode()},
        failure_policy="Fail",
        object_selector=selector,
        namespace_selector=selector,
    )
    name = f"tidemark-test-{label}"
    mutating["metadata"]["name"] = validating["metadata"]["name"] = name
    adm = client.AdmissionregistrationV1Api(kube.api)
    adm.create_mutating_webhook_configuration(mutating)
    kube.defer(lambda: adm.delete_mutating_webhook_configuration(name))
    adm.create_validating_webhook_configuration(validating)
    kube.defer(lambda: adm.delete_validating_webhook_configuration(name))
    custom = kube.custom

    def queue_defaulted() -> bool:  # the configurations reach the API server's admission chain asynchronously
        qname = f"probe-{secrets.token_hex(3)}"
        q = custom.create_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", {
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}", "kind": "Queue",
            "metadata": {"name": qname, "labels": {"tidemark-webhook-test": label}}, "spec": {}})
        custom.delete_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", qname)
        return bool(q.get("spec", {}).get("weight") == 1)

    _until(queue_defaulted, "the webhook configurations to take effect")
    time.sleep(1.0)  # the validating configuration is loaded by its own informer: let it catch up too


def test_queue_without_weight_gets_1_and_bad_objects_are_refused(env: Env) -> None:
    from kubernetes import client

    env.register()
    custom, ns, label = env.kube.custom, env.kube.name, env.label
    qname = env.kube.unique("q")
    q = custom.create_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}", "kind": "Queue",
        "metadata": {"name": qname, "labels": {"tidemark-webhook-test": label}}, "spec": {"capability": {"cpu": "8"}}})
    env.kube.defer(lambda: custom.delete_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", qname))
    assert q["spec"]["weight"] == 1 and q["spec"]["reclaimable"] is True

    bad_queue = {"apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}", "kind": "Queue",
                 "metadata": {"name": env.kube.unique("evil"), "labels": {"tidemark-webhook-test": label}},
                 "spec": {"weight": 1, "capability": {"cpu": "1e400"}}}
    with pytest.raises(client.ApiException) as refused:
        custom.create_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", bad_queue)
    assert "out of range" in str(refused.value.body)

    def podgroup(name: str, spec: dict[str, Any]) -> Any:
        return custom.create_namespaced_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, ns, "podgroups", {
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}", "kind": "PodGroup", "metadata": {"name": name},
            "spec": spec})

    assert podgroup("pg", {"minMember": 2, "queue": qname})["spec"]["queue"] == qname
    # the queue defaults to "default": created, or refused because that queue is absent (other tests of the
    # session may have made it: the scheduler creates it)
    try:
        assert podgroup("pg-default", {"minMember": 1})["spec"]["queue"] == "default"
    except client.ApiException as refused_default:
        assert "queue 'default' does not exist" in str(refused_default.body)
    with pytest.raises(client.ApiException) as refused:
        podgroup("pg-negative", {"minMember": -3, "queue": qname})
    assert "spec.minMember=-3" in str(refused.value.body)
    with pytest.raises(client.ApiException) as refused:
        podgroup("pg-bad", {"minMember": 1, "queue": qname, "minResources": {"cpu": "1e400"}})
    assert "out of range" in str(refused.value.body)


def test_bound_pod_cannot_flip_class(env: Env) -> None:
    from kubernetes import client

    env.register()
    core, ns = env.kube.core, env.kube.name
    with pytest.raises(client.ApiException) as refused:
        core.patch_namespaced_pod("web-a", ns, {"metadata": {"annotations": {"volcano.sh/qos-level": "BE"}}})
    assert refused.value.status == 403 and "cannot move from online to offline" in str(refused.value.body)
    core.patch_namespaced_pod("web-a", ns, {"metadata": {"annotations": {"volcano.sh/qos-level": "LS"}}})  # same side


def test_bound_pod_cannot_flip_class_through_its_status(env: Env) -> None:
    """The status subresource can rewrite a pod's annotations as well (hardening round 2, item 4); the scheduler
    holds pods/status patch cluster-wide. Judged as the pod itself."""
    from kubernetes import client

    env.register()
    core, ns = env.kube.core, env.kube.name
    flip = {"metadata": {"annotations": {"volcano.sh/qos-level": "BE"}}}
    with pytest.raises(client.ApiException) as refused:
        core.patch_namespaced_pod_status("web-a", ns, flip)
    assert refused.value.status == 403 and "cannot move from online to offline" in str(refused.value.body)
    assert core.read_namespaced_pod("web-a", ns).metadata.annotations["volcano.sh/qos-level"] == "LC"
    core.patch_namespaced_pod_status("web-a", ns, {"metadata": {"annotations": {"volcano.sh/qos-level": "LS"}}})
