"""daemonset/webhook/webhook-certs.sh against the real kube-apiserver 1.20 with the project's kubectl: a re-install
keeps the certificate the webhook's pods already serve.

Before: every run made a new CA and replaced the Secret, so after an uninstall that kept the Secret (the colocation
benchmark's, a user's `kubectl delete deployment ...`) the pods started by `kubectl apply` served the old
certificate to a caBundle of the new CA: `x509: certificate signed by unknown authority` on every NodeReport write,
and the agents published nothing (the benchmark waited 120 s for batch-cpu, 2026-11-29)."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeAPIServer, KubeNamespace, project_kubectl

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "daemonset" / "webhook" / "webhook-certs.sh"

pytestmark = pytest.mark.kube


def test_a_rerun_keeps_a_valid_certificate_and_a_rotation_restarts_the_webhook(
    kube_apiserver: KubeAPIServer, kube: KubeNamespace
) -> None:
    from kubernetes import client

    kubectl = project_kubectl()
    env = {**os.environ, "KUBECONFIG": kube_apiserver.env["KUBECONFIG"],
           "PATH": f"{Path(kubectl).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}  # fmt: skip
    ns = kube.name
    adm = client.AdmissionregistrationV1Api(kube.api)
    hook = {"sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore",
            "clientConfig": {"service": {"name": "tidemark-webhook", "namespace": ns, "path": "/x"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"never": "matches"}}}  # fmt: skip
    adm.create_mutating_webhook_configuration({"metadata": {"name": "tidemark-admission"},
                                               "webhooks": [{**hook, "name": "m.tidemark.io"}]})  # fmt: skip
    kube.defer(lambda: adm.delete_mutating_webhook_configuration("tidemark-admission"))
    adm.create_validating_webhook_configuration({"metadata": {"name": "tidemark-admission"},
                                                 "webhooks": [{**hook, "name": "v.tidemark.io"}]})  # fmt: skip
    kube.defer(lambda: adm.delete_validating_webhook_configuration("tidemark-admission"))

    def run(*args: str) -> str:
        done = subprocess.run(["bash", str(SCRIPT), "--namespace", ns, *args], env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr

    def state() -> tuple[dict[str, Any], list[str]]:
        data = kube.core.read_namespaced_secret("tidemark-webhook-tls", ns).data
        bundles = [w.client_config.ca_bundle for c in (adm.read_mutating_webhook_configuration("tidemark-admission"),
                                                        adm.read_validating_webhook_configuration("tidemark-admission"))
                   for w in c.webhooks]  # fmt: skip
        return data, bundles

    run()  # the first install: a new CA, the Secret with ca.crt, both caBundles
    first, bundles = state()
    assert set(first) == {"tls.crt", "tls.key", "ca.crt"} and bundles == [first["ca.crt"]] * 2
    said = run()  # a re-install: kept, the caBundle is its CA again
    again, bundles = state()
    assert again == first and bundles == [first["ca.crt"]] * 2 and "kept the Secret" in said
    # the webhook's Deployment exists: a rotation replaces the Secret and restarts its pods
    apps = client.AppsV1Api(kube.api)
    labels = {"app": "w"}
    apps.create_namespaced_deployment(ns, {
        "metadata": {"name": "tidemark-webhook"},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})  # fmt: skip
    said = run("--rotate")
    rotated, bundles = state()
    assert rotated["ca.crt"] != first["ca.crt"] and bundles == [rotated["ca.crt"]] * 2
    assert "restart" in said
    template = apps.read_namespaced_deployment("tidemark-webhook", ns).spec.template.metadata
    stamp = (template.annotations or {}).get("kubectl.kubernetes.io/restartedAt", "")
    # what `rollout restart` writes, to the nanosecond: kubectl's whole-second stamp made a second restart within
    # the same second an empty patch that kubectl refused, and the script failed (a CI run: the rotation above and
    # the replacement below fell in one second)
    assert "." in stamp, stamp
    # an old Secret without ca.crt (made by the script before this change) is replaced, not kept
    kube.core.patch_namespaced_secret("tidemark-webhook-tls", ns, [{"op": "remove", "path": "/data/ca.crt"}])
    said = run()
    replaced, _ = state()
    assert "kept" not in said and replaced["ca.crt"] != rotated["ca.crt"] and "restart" in said
    again_at = apps.read_namespaced_deployment("tidemark-webhook", ns).spec.template.metadata.annotations
    assert again_at["kubectl.kubernetes.io/restartedAt"] != stamp
    assert base64.b64decode(replaced["tls.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
