"""The install's security properties (issue #13, "Narrow rights"), read from daemonset/ itself.

Every pod runs with seccomp RuntimeDefault; the scheduler's Lease rights name its Lease; the webhook
configurations are the ones the code builds (failurePolicy Ignore, no caBundle to clobber); the
certificate script makes a chain Python's ssl accepts for the Service's names.
"""

from __future__ import annotations

import contextlib
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler_ext.run.options import LEASE_NAME
from scheduler_ext.webhook.server import DEFAULT_AGENT_SERVICE_ACCOUNT, configurations

REPO = Path(__file__).resolve().parents[2]
DAEMONSET = REPO / "daemonset"


def _docs(*parts: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(DAEMONSET.joinpath(*parts).read_text()) if isinstance(d, dict)]


def _base_objects() -> list[dict[str, Any]]:
    """The base as kubectl renders it when kubectl is here, else every manifest the base lists."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", str(DAEMONSET)], capture_output=True, text=True, check=True,
                             timeout=120).stdout
        return [d for d in yaml.safe_load_all(out) if isinstance(d, dict)]
    objs: list[dict[str, Any]] = []
    for sub in ("crds", "scheduler", "agent", "webhook"):
        for name in yaml.safe_load((DAEMONSET / sub / "kustomization.yaml").read_text())["resources"]:
            objs += _docs(sub, name)
    return objs


def test_every_pod_runs_with_seccomp_runtime_default() -> None:
    workloads = [o for o in _base_objects() if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]
    assert {o["metadata"]["name"] for o in workloads} >= {"tidemark-agent", "tidemark-scheduler", "tidemark-webhook"}
    for o in workloads:
        spec = o["spec"]["template"]["spec"]
        pod_level = (spec.get("securityContext") or {}).get("seccompProfile", {}).get("type")
        for c in spec["containers"] + spec.get("initContainers", []):
            own = (c.get("securityContext") or {}).get("seccompProfile", {}).get("type")
            assert (own or pod_level) == "RuntimeDefault", f"{o['kind']} {o['metadata']['name']} {c['name']}"


def test_lease_rights_name_the_schedulers_lease() -> None:
    (role,) = [d for d in _docs("scheduler", "rbac.yaml") if d["kind"] == "Role"]
    for rule in role["rules"]:
        if "leases" not in rule["resources"]:
            continue
        if set(rule["verbs"]) - {"create"}:
            assert rule.get("resourceNames") == [LEASE_NAME], rule
    verbs = {v for r in role["rules"] for v in r["verbs"]}
    assert verbs == {"create", "get", "update"}


def test_webhook_configurations_are_the_codes() -> None:
    shipped = _docs("webhook", "webhooks.yaml")
    built = configurations({"service": {"name": "tidemark-webhook", "namespace": "tidemark-system", "port": 443}})
    assert shipped == list(built)
    for cfg in shipped:
        for hook in cfg["webhooks"]:
            # the agent hook fails closed (NodeReports), and so does the ColocationProfile check (only admins write
            # profiles); nothing else depends on the webhook (pods are created unchanged without it)
            agent = hook["name"] in ("nodereports.validate.tidemark.io", "colocationprofiles.validate.tidemark.io")
            assert hook["failurePolicy"] == ("Fail" if agent else "Ignore") and "caBundle" not in hook["clientConfig"]
            # no hook judges evictions (issue 33): `kubectl drain` never waits for the webhook
            assert not any("pods/eviction" in rule["resources"] for rule in hook["rules"]), hook["name"]


def test_webhook_knows_the_agents_service_account() -> None:
    (sa,) = [d for d in _docs("agent", "rbac.yaml") if d["kind"] == "ServiceAccount"]
    (dep,) = _docs("webhook", "deployment.yaml")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    expected = f"{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    assert f"--agent-service-account={expected}" in args and expected == DEFAULT_AGENT_SERVICE_ACCOUNT


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_webhook_certs_script_makes_a_chain_for_the_service(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    subprocess.run(["bash", str(DAEMONSET / "webhook" / "webhook-certs.sh"), "--output", str(out), "--no-kubectl",
                    "--namespace", "ns1"], check=True, capture_output=True, timeout=120)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(out / "tls.crt", out / "tls.key")
    client = ssl.create_default_context(cafile=str(out / "ca.crt"))
    a, b = ssl.MemoryBIO(), ssl.MemoryBIO()
    c, s = ssl.MemoryBIO(), ssl.MemoryBIO()
    cli = client.wrap_bio(a, b, server_hostname="tidemark-webhook.ns1.svc")
    srv = server.wrap_bio(c, s, server_side=True)
    for _ in range(10):  # pump the handshake between the two in-memory ends
        for end in (cli, srv):
            with contextlib.suppress(ssl.SSLWantReadError):
                end.do_handshake()
        c.write(b.read())
        a.write(s.read())
    assert cli.getpeercert()["subjectAltName"][2] == ("DNS", "tidemark-webhook.ns1.svc")
    assert oct((out / "ca.key").stat().st_mode & 0o777) == "0o600"
