"""What a stolen agent credential can do, with the webhook up and with it stopped, on the real kube-apiserver 1.20
(hardening round 2, items 3, 5 and 7; docs/security.md, "The agent's writes").

Everything is as shipped: the agent's and the webhook's ClusterRoles from daemonset/ bound to ServiceAccounts of
their own, the webhook configurations from `scheduler_ext.webhook.server.configurations` with their failure
policies, the webhook (and its NodeReport controller) running with the webhook ServiceAccount's token. The agent
is a ServiceAccount token bound to a real pod on node A (TokenRequest with boundObjectRef, as the DaemonSet's
projected token), or a client certificate `tidemark:agent:<node A>` in the group `tidemark:agents` signed by the
API server's client CA (the systemd install). The webhook is "stopped" by closing its port: the API server then
gets connection refused, as from a crashed or unreachable webhook.

The shared API server runs the session's other tests: the namespaced hooks carry a namespaceSelector for this
test's namespace and the Queue hooks an objectSelector; the NodeReport hook has none (no other test writes
NodeReports), as shipped. `pytest -s` prints the measured table.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.test_webhook_api import certs  # noqa: F401  (a fixture)

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[3]
MERGE = "application/merge-patch+json"
API_VERSION = "colocation.tidemark.io/v1alpha1"
REPORTS = f"/apis/{API_VERSION}/nodereports"
EVICTING = "volcano.sh/offline-job-evicting"
ANN_X = "volcano.sh/oversubscription-cpu"


def _shipped_role(name: str) -> list[dict[str, Any]]:
    for path in sorted((REPO / "daemonset").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ClusterRole" and doc["metadata"]["name"] == name:
                return list(doc["rules"])
    raise AssertionError(f"no ClusterRole {name} under daemonset/")


def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _client(host: str, *, token: str | None = None, cert: tuple[str, str] | None = None) -> Any:
    from kubernetes import client

    from tidemark.kube.client import new_api_client

    cfg = client.Configuration()
    cfg.host = host
    cfg.verify_ssl = False
    if token:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    if cert:
        cfg.cert_file, cfg.key_file = cert
    return new_api_client(configuration=cfg, user_agent="tidemark-rights-test")


def _status(api: Any, method: str, path: str, body: Any = None, content_type: str | None = None) -> int:
    """The HTTP status of one request (2xx as the code, refusals as theirs)."""
    from tidemark.kube.client import ApiStatusError, request

    try:
        return request(api, method, path, body=body, content_type=content_type, timeout=(5.0, 20.0)).status
    except ApiStatusError as e:
        return e.status


class Rights:
    """Nodes A and B, the agent's pod on A, offline pods on A and B; the webhook (and controller) to start and stop."""

    def __init__(self, kube: KubeNamespace, certs_dir: Path) -> None:
        self.kube = kube
        self.certs = certs_dir
        self.ns = kube.name
        self.node_a = kube.unique("node-a")
        self.node_b = kube.unique("node-b")
        self.host = kube.api.configuration.host
        self.server: Any = None
        self.controller: Any = None
        self.webhook_api: Any = None
        self.agent: Any = None
        self.pods = 0

    # --- setup -------------------------------------------------------------------------------------

    def create(self) -> None:
        from kubernetes import client

        core, ns = self.kube.core, self.ns
        core.patch_namespace(ns, {"metadata": {"labels": {"tidemark-rights-test": ns}}})
        for name in (self.node_a, self.node_b):
            core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name),
                                           status=client.V1NodeStatus(capacity={"cpu": "4"}, allocatable={"cpu": "4"})))
            self.kube.defer(lambda name=name: core.delete_node(name))
        self.agent = _client(self.host, token=self._sa_token("tidemark-agent", "tidemark-agent", bound_to=self.node_a))
        self.webhook_api = _client(self.host, token=self._sa_token("tidemark-webhook", "tidemark-webhook"))

    def _sa_token(self, sa: str, role: str, bound_to: str | None = None) -> str:
        """A ServiceAccount of this namespace with a copy of the shipped ClusterRole `role`; its token, bound to a
        pod on node `bound_to` when given."""
        from kubernetes import client

        core, ns = self.kube.core, self.ns
        rbac = client.RbacAuthorizationV1Api(self.kube.api)
        core.create_namespaced_service_account(ns, {"metadata": {"name": sa}})
        copy = self.kube.unique(role)
        rbac.create_cluster_role({"metadata": {"name": copy}, "rules": _shipped_role(role)})
        self.kube.defer(lambda: rbac.delete_cluster_role(copy))
        rbac.create_cluster_role_binding({
            "metadata": {"name": copy},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": copy},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        })
        self.kube.defer(lambda: rbac.delete_cluster_role_binding(copy))
        spec: dict[str, Any] = {"expirationSeconds": 3600}
        if bound_to:
            pod = self.pod(f"{sa}-pod", bound_to, sa=sa)
            spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name,
                                      "uid": pod.metadata.uid}
        return str(core.create_namespaced_service_account_token(sa, ns, {"spec": spec}).status.token)

    def agent_certificate(self) -> Any:
        """The systemd agent's identity: a certificate `tidemark:agent:<node A>` in `tidemark:agents`, signed by
        the API server's client CA (a cluster's CSR signer does the same), and the group bound to the agent role."""
        from kubernetes import client

        env = self.kube.server.env
        if "CLIENT_CA_KEY" not in env:
            pytest.skip("this kube-apiserver has no client CA (hack/kube-apiserver.sh predates it)")
        d = self.certs
        subj = f"/O=tidemark:agents/CN=tidemark:agent:{self.node_a}"
        subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                        "-keyout", "agent.key", "-out", "agent.csr", "-subj", subj], cwd=d, check=True,
                       capture_output=True, timeout=60)  # fmt: skip
        (d / "client.cnf").write_text("extendedKeyUsage=clientAuth\n")
        subprocess.run(["openssl", "x509", "-req", "-in", "agent.csr", "-CA", env["CLIENT_CA_FILE"], "-CAkey",
                        env["CLIENT_CA_KEY"], "-CAcreateserial", "-CAserial", str(d / "client-ca.srl"), "-days", "1",
                        "-extfile", "client.cnf", "-out", "agent.crt"], cwd=d, check=True, capture_output=True,
                       timeout=60)  # fmt: skip
        rbac = client.RbacAuthorizationV1Api(self.kube.api)
        copy = self.kube.unique("tidemark-agent-group")
        rbac.create_cluster_role({"metadata": {"name": copy}, "rules": _shipped_role("tidemark-agent")})
        self.kube.defer(lambda: rbac.delete_cluster_role(copy))
        rbac.create_cluster_role_binding({
            "metadata": {"name": copy},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": copy},
            "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "tidemark:agents"}],
        })
        self.kube.defer(lambda: rbac.delete_cluster_role_binding(copy))
        return _client(self.host, cert=(str(d / "agent.crt"), str(d / "agent.key")))

    def pod(self, name: str, node: str, sa: str | None = None, qos: str = "BE") -> Any:
        return self.kube.core.create_namespaced_pod(self.ns, {
            "metadata": {"name": name, "annotations": {"volcano.sh/qos-level": qos}},
            "spec": {"nodeName": node, "serviceAccountName": sa, "containers": [{"name": "c", "image": "x"}]},
        })

    def victim(self, node: str) -> str:
        self.pods += 1
        name = f"victim-{self.pods}"
        self.pod(name, node)
        return name

    # --- the webhook ---------------------------------------------------------------------------------

    def start_webhook(self) -> None:
        from scheduler_ext.webhook.admission import Settings
        from scheduler_ext.webhook.server import ApiLookups, WebhookServer, configurations, tls_context

        settings = Settings(agent_users=frozenset({f"system:serviceaccount:{self.ns}:tidemark-agent"}))
        tls = tls_context(str(self.certs / "tls.crt"), str(self.certs / "tls.key"))
        self.server = WebhookServer("127.0.0.1:0", tls, ApiLookups(self.webhook_api), settings).start()
        try:
            from scheduler_ext.controller.nodereport import NodeReportController
        except ImportError:  # the code before the NodeReport split: no controller
            self.controller = None
        else:
            self.controller = NodeReportController(self.webhook_api, resync=3600).start()
        self._register(configurations)

    def stop_webhook(self) -> None:
        if self.controller is not None:
            self.controller.stop()
        self.server.stop()

    def _register(self, configurations: Any) -> None:
        from kubernetes import client

        selector = {"matchLabels": {"tidemark-rights-test": self.ns}}
        ca = base64.b64encode((self.certs / "ca.crt").read_bytes()).decode()
        mutating, validating = configurations({"url": f"https://127.0.0.1:{self.server.port}", "caBundle": ca},
                                              object_selector=selector, namespace_selector=selector)  # fmt: skip
        for hook in validating["webhooks"]:
            if "nodereports" in hook["name"] or "nodes" in hook["name"]:
                hook.pop("objectSelector", None)  # as shipped: every NodeReport and every Node is judged
        name = f"tidemark-rights-{self.ns}"
        mutating["metadata"]["name"] = validating["metadata"]["name"] = name
        adm = client.AdmissionregistrationV1Api(self.kube.api)
        adm.create_mutating_webhook_configuration(mutating)
        self.kube.defer(lambda: adm.delete_mutating_webhook_configuration(name))
        adm.create_validating_webhook_configuration(validating)
        self.kube.defer(lambda: adm.delete_validating_webhook_configuration(name))

        def judged() -> bool:  # the validating configuration reaches the admission chain asynchronously
            return _write_report(self.agent, self.node_b, {"evictingTaint": False}) == 403

        _until(judged, "the webhook configuration to take effect")

    # --- what a stolen credential can do ------------------------------------------------------------------

    def measure(self, cred: Any, own: str, other: str) -> dict[str, int]:
        x = {"metadata": {"annotations": {ANN_X: "9"}}}
        batch = {"status": {"capacity": {"kubernetes.io/batch-cpu": "9"}}}
        taint = {"spec": {"taints": [{"key": EVICTING, "effect": "NoExecute"}]}}
        big = {"metadata": {"annotations": {"tidemark.io/node-usage": "x" * 200_000}}}
        nodes = "/api/v1/nodes"
        return {
            "patch another Node's annotations": _status(cred, "PATCH", f"{nodes}/{other}", x, MERGE),
            "patch another Node's status (batch-cpu)": _status(cred, "PATCH", f"{nodes}/{other}/status", batch, MERGE),
            "NoExecute evicting taint on its own Node": _status(cred, "PATCH", f"{nodes}/{own}", taint, MERGE),
            "200 KB usage annotation on its own Node": _status(cred, "PATCH", f"{nodes}/{own}", big, MERGE),
            "write another node's NodeReport": _write_report(cred, other, {"evictingTaint": True}),
            "write its own NodeReport": _write_report(cred, own, {"annotations": {ANN_X: "5"}}),
            "evict a pod on another node": _evict(cred, self.ns, self.victim(other)),
            "evict a pod on its own node": _evict(cred, self.ns, self.victim(own)),
        }

    def components(self) -> dict[str, int]:
        """What the cluster's own components write (as the admin, whose rights RBAC never narrows)."""
        admin, b = self.kube.api, self.node_b
        pod = self.pod(f"web-{secrets.token_hex(3)}", b, qos="LC").metadata.name
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                            "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}}  # fmt: skip
        unreachable = {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}}
        running = {"status": {"phase": "Running"}}
        node, pod_status = f"/api/v1/nodes/{b}", f"/api/v1/namespaces/{self.ns}/pods/{pod}/status"
        return {
            "kubelet: Node status (Ready condition)": _status(admin, "PATCH", f"{node}/status", ready, MERGE),
            "node controller: NoExecute unreachable taint": _status(admin, "PATCH", node, unreachable, MERGE),
            "kubelet: pod status": _status(admin, "PATCH", pod_status, running, MERGE),
            "kubectl drain: an eviction": _evict(admin, self.ns, self.victim(b)),
        }


def _write_report(api: Any, node: str, spec: dict[str, Any]) -> int:
    """Create the node's NodeReport, or patch it when it exists (the agent's writer does the same)."""
    code = _status(api, "PATCH", f"{REPORTS}/{node}", {"spec": spec}, MERGE)
    if code != 404:
        return code
    body = {"apiVersion": API_VERSION, "kind": "NodeReport", "metadata": {"name": node}, "spec": spec}
    return _status(api, "POST", REPORTS, body)


def _eviction(name: str, ns: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns},
            "deleteOptions": {"gracePeriodSeconds": 0}}


def _evict(api: Any, ns: str, name: str) -> int:
    return _status(api, "POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", _eviction(name, ns))


def _table(title: str, up: dict[str, int], down: dict[str, int]) -> str:
    rows = [f"{title:48} {'webhook up':>10} {'stopped':>8}"]
    rows += [f"{k:48} {up.get(k, 0):>10} {down.get(k, 0):>8}" for k in {**up, **down}]
    return "\n".join(rows)


@pytest.fixture
def rights(kube: KubeNamespace, certs: Path) -> Iterator[Rights]:  # noqa: F811
    r = Rights(kube, certs)
    r.create()
    try:
        yield r
    finally:
        if r.server is not None:
            r.stop_webhook()


def _refused(code: int) -> bool:
    return code >= 400


def test_a_stolen_agent_token_cannot_reach_other_nodes_with_the_webhook_up_or_stopped(rights: Rights) -> None:
    """Before (the agent patched Nodes itself, every hook failurePolicy Ignore): with the webhook stopped the token
    patched other Nodes (200) and evicted pods elsewhere (201); on its own Node it could add a NoExecute evicting
    taint and a 200 KB annotation even with the webhook up. Now: the token has no Node right and no eviction right
    at all (403 either way); its only write, its NodeReport (its eviction asks in it), is judged by a hook that
    fails closed (500 when stopped), and the cluster's own components, a drain's evictions included (issue 33:
    before, 500 with the webhook stopped), do not depend on the webhook."""
    a, b = rights.node_a, rights.node_b
    rights.start_webhook()
    up = rights.measure(rights.agent, a, b)
    components_up = rights.components()
    rights.stop_webhook()
    down = rights.measure(rights.agent, a, b)
    components_down = rights.components()
    print("\n" + _table("stolen DaemonSet agent token (pod on node A)", up, down))
    print(_table("the cluster's own components", components_up, components_down))

    for what in ("patch another Node's annotations", "patch another Node's status (batch-cpu)",
                 "NoExecute evicting taint on its own Node", "200 KB usage annotation on its own Node"):
        assert up[what] == 403 and down[what] == 403, what  # RBAC: no Node write at all
    assert up["write another node's NodeReport"] == 403 and _refused(down["write another node's NodeReport"])
    # no eviction right at all (issue 33): the agent asks in its NodeReport, the controller evicts
    for what in ("evict a pod on another node", "evict a pod on its own node"):
        assert up[what] == 403 and down[what] == 403, what
    # its own node's report is written while the webhook is up, and refused (fails closed) while it is not
    assert up["write its own NodeReport"] in (200, 201) and _refused(down["write its own NodeReport"])
    for what, code in {**components_up, **components_down}.items():
        if what != "kubectl drain: an eviction":
            assert code == 200, (what, code)
    # no hook judges evictions: a drain goes through with the webhook stopped (before: 500, it waited)
    assert components_up["kubectl drain: an eviction"] == 201 and components_down["kubectl drain: an eviction"] == 201


def test_the_agents_report_reaches_its_node_through_the_controller(rights: Rights) -> None:
    """The agent's real writer: its report is applied to its own Node by the webhook's controller (whose token
    has the shipped webhook role); a report the webhook refuses, or none applied, is a failed write."""
    from agent.act.report_writer import ReportWriter
    from agent.decide.coexistence import foreign_writers
    from tidemark.kube.client import KubeError
    from tidemark.nodereport import ReportSpec

    rights.start_webhook()
    writer = ReportWriter(rights.agent, rights.node_a, apply_timeout=20.0)
    node = writer.write(ReportSpec({"volcano.sh/oversubscription-cpu": "1500", EVICTING: "true"}, {}, True))
    assert node is not None and node["metadata"]["annotations"][EVICTING] == "true"
    assert node["spec"]["taints"] == [{"key": EVICTING, "value": "true", "effect": "NoSchedule"}]
    node = writer.write(ReportSpec(resources={"kubernetes.io/batch-cpu": "1300"}))
    assert node["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "1300"
    # the controller writes on the agent's behalf: the agent's ForeignWriter check must not name it
    assert foreign_writers(node) == {}, node["metadata"]["managedFields"]
    with pytest.raises(KubeError, match="at most 1024"):
        writer.write(ReportSpec({"tidemark.io/node-usage": "{" + " " * 2000 + "}"}))
    rights.stop_webhook()
    with pytest.raises(KubeError):
        ReportWriter(rights.agent, rights.node_a, apply_timeout=3.0).write(
            ReportSpec({"volcano.sh/oversubscription-cpu": "7"}))


def test_a_systemd_agents_certificate_is_scoped_to_its_node(rights: Rights) -> None:
    """Item 5: an agent outside Kubernetes authenticates as `tidemark:agent:<node>` (group `tidemark:agents`);
    the webhook reads its node from the name, so it is judged exactly as the DaemonSet's pod-bound token."""
    cert = rights.agent_certificate()
    rights.start_webhook()
    up = rights.measure(cert, rights.node_a, rights.node_b)
    rights.stop_webhook()
    down = rights.measure(cert, rights.node_a, rights.node_b)
    print("\n" + _table("stolen systemd agent certificate (node A)", up, down))
    assert up["write its own NodeReport"] in (200, 201) and up["evict a pod on its own node"] == 403
    assert up["write another node's NodeReport"] == 403 and up["evict a pod on another node"] == 403
    assert up["patch another Node's annotations"] == 403
    assert all(_refused(code) for code in down.values()), down


@pytest.mark.skipif(not os.environ.get("TIDEMARK_MEASURE_BEFORE"), reason="prints the table only")
def test_print_only(rights: Rights) -> None:  # pragma: no cover - a measuring aid, see docs/security.md
    rights.start_webhook()
    up = rights.measure(rights.agent, rights.node_a, rights.node_b)
    rights.stop_webhook()
    down = rights.measure(rights.agent, rights.node_a, rights.node_b)
    print("\n" + _table("stolen DaemonSet agent token (pod on node A)", up, down))
