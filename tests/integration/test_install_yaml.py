"""install.yaml is the kustomize base rendered into one file, by the kubectl 1.20.2 the project builds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def test_install_yaml_is_the_rendered_base() -> None:
    r = subprocess.run([str(REPO / "hack" / "render-install.sh"), "-"], capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        reason = f"cannot render the base with the project's kubectl: {r.stderr.strip()[-400:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    assert (REPO / "install.yaml").read_text() == r.stdout, "install.yaml is stale: run hack/render-install.sh"
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(r.stdout) if d)
    assert {"Namespace", "CustomResourceDefinition", "DaemonSet", "Deployment"} <= set(kinds)
    namespaced = [d for d in yaml.safe_load_all(r.stdout) if d and "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"tidemark-system"}


def test_the_small_overlay_is_the_base_with_one_scheduler_and_one_webhook() -> None:
    """daemonset/overlays/small, rendered by the project's kubectl: the base with the scheduler's standby and the
    second webhook gone (docs/install.md, "What Tidemark's pods request"), nothing else changed."""
    built = subprocess.run([str(REPO / "hack" / "kube-apiserver.sh"), "build-kubectl"], capture_output=True, text=True,
                           timeout=1200)  # fmt: skip
    if built.returncode != 0:
        reason = f"no kubectl: {built.stderr.strip()[-400:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    kubectl = built.stdout.strip().splitlines()[-1]
    r = subprocess.run([kubectl, "kustomize", str(REPO / "daemonset" / "overlays" / "small")], capture_output=True,
                       text=True, timeout=300, check=True)  # fmt: skip
    small = [d for d in yaml.safe_load_all(r.stdout) if d]
    base = [d for d in yaml.safe_load_all((REPO / "install.yaml").read_text()) if d]
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in small if d["kind"] == "Deployment"}
    assert replicas == {"tidemark-scheduler": 1, "tidemark-webhook": 1}
    for d in small:
        if d["kind"] == "Deployment":
            d["spec"]["replicas"] = 2
    assert small == base
