"""docs/install.md's `uninstall-node` block against the real API server: after an uninstall the Nodes keep
`kubernetes.io/batch-cpu` / `batch-memory` in capacity and allocatable (kubelet copies capacity to allocatable and
never drops an extended resource it did not advertise; the NodeReport controller is gone with the install), and
the annotations Tidemark published. The block, run as written with the project's kubectl 1.20.2, removes them from
every Node and leaves everything else (other resources, other annotations, the user's labels) as it was.
The same block runs on the real node after the `uninstall` step (test_install.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace, project_kubectl
from tests.integration.install.doc import step

pytestmark = pytest.mark.kube

BATCH = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")
PUBLISHED = ("volcano.sh/oversubscription-cpu", "volcano.sh/oversubscription-memory",
             "volcano.sh/offline-job-evicting", "tidemark.io/node-usage")  # fmt: skip


def _kubectl_dir() -> str:
    return str(Path(project_kubectl()).parent)


def _node(kube: KubeNamespace, batch: bool) -> str:
    from kubernetes import client  # type: ignore[import-untyped,unused-ignore]

    name = kube.unique("uninstalled")
    annotations = {"user.example/keep": "yes", **({k: "1" for k in PUBLISHED} if batch else {})}
    kube.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=name, labels={"volcano.sh/colocation": "true"}, annotations=annotations)))  # fmt: skip
    kube.defer(lambda: kube.core.delete_node(name))
    batch_resources = {BATCH[0]: "0", BATCH[1]: "1073741824"} if batch else {}
    resources = {"cpu": "2", "memory": "4Gi", "pods": "110", **batch_resources}
    kube.core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})
    return name


def _status(kube: KubeNamespace, name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, str], dict[str, str]]:
    n = kube.core.read_node(name)
    status, md = n.status, n.metadata
    return dict(status.capacity or {}), dict(status.allocatable or {}), md.annotations or {}, md.labels or {}


def test_the_uninstall_node_block_takes_tidemarks_resources_off_every_node(kube: KubeNamespace) -> None:
    path = _kubectl_dir()
    with_batch, without = _node(kube, batch=True), _node(kube, batch=False)
    cap, alloc, _, _ = _status(kube, with_batch)
    assert set(BATCH) <= set(cap) and set(BATCH) <= set(alloc), "the fixture node must carry batch-* first"
    env = {**os.environ, "PATH": f"{path}:{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(kube.server.kubeconfig_path("admin"))}  # fmt: skip
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", step("uninstall-node")], env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, f"uninstall-node exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    for name in (with_batch, without):
        cap, alloc, ann, labels = _status(kube, name)
        assert not set(BATCH) & (set(cap) | set(alloc)), (name, cap, alloc)
        assert {k: cap[k] for k in ("cpu", "memory", "pods")} == {"cpu": "2", "memory": "4Gi", "pods": "110"}, cap
        assert alloc.keys() >= {"cpu", "memory", "pods"}, alloc
        assert not set(PUBLISHED) & set(ann), ann
        assert ann.get("user.example/keep") == "yes" and labels.get("volcano.sh/colocation") == "true"


def test_a_failed_patch_stops_the_block_at_once_naming_the_node_and_leaves_no_proxy(
    kube: KubeNamespace, tmp_path: Path
) -> None:
    """The CI run of 2026-11-30 hung here for 120 s: a failed `curl` ended the block under `set -e` with the
    `kubectl proxy` it started still running and holding the caller's stderr open (and the block had read the
    port from a fixed file a previous run left behind). The block now runs the proxy in a subshell that stops
    it on any exit, reads the port from its own temp file, and says which node it could not patch."""
    with_batch = _node(kube, batch=True)
    fake = tmp_path / "curl"
    fake.write_text("#!/bin/sh\nprintf 000\nexit 7\n")  # curl -w on a refused connection
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{_kubectl_dir()}:{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(kube.server.kubeconfig_path("admin"))}  # fmt: skip
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", step("uninstall-node")], env=env, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode != 0, r.stdout
    assert "batch-* left on it" in r.stderr and "HTTP 000" in r.stderr, r.stderr
    proxies = subprocess.run(["pgrep", "-f", "kubectl proxy --port=0"], capture_output=True, text=True).stdout
    assert not proxies.strip(), f"the block left kubectl proxy running: {proxies}"
    cap, _, ann, _ = _status(kube, with_batch)
    assert set(BATCH) <= set(cap) and set(PUBLISHED) <= set(ann), "a failed block must stop before the annotations"
