"""daemonset/overlays/without-webhook, rendered by the kubectl 1.20.2 the project builds: no webhook, the agents
patch their Nodes themselves (`--node-writes=direct`) with the Node rights the base's role does not grant
(docs/security.md, "Running without the webhook")."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures.kubeapi import project_kubectl

REPO = Path(__file__).resolve().parents[2]


def _render(overlay: str) -> list[dict[str, Any]]:
    kubectl = project_kubectl()
    r = subprocess.run([kubectl, "kustomize", str(REPO / "daemonset" / "overlays" / overlay)], capture_output=True,
                       text=True, timeout=300, check=True)  # fmt: skip
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def test_without_webhook_the_agents_write_their_nodes_directly() -> None:
    docs = _render("without-webhook")
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for gone in (("Deployment", "tidemark-webhook"), ("Service", "tidemark-webhook"),
                 ("ValidatingWebhookConfiguration", "tidemark-admission"),
                 ("MutatingWebhookConfiguration", "tidemark-admission")):
        assert gone not in names, gone
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--node-writes=direct"
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tidemark-agent-node-writes"]
    # and the evictions the agent makes itself without the NodeReport controller (the base's role has none)
    assert {(r["resources"][0], tuple(r["verbs"])) for r in role["rules"]} == {("nodes", ("patch",)),
                                                                               ("nodes/status", ("patch",)),
                                                                               ("pods/eviction", ("create",))}
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"
                  and d["metadata"]["name"] == "tidemark-agent-node-writes"]  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tidemark-agent", "namespace": "tidemark-system"}]
