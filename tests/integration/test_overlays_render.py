"""Every overlay of daemonset/ renders with the kubectl 1.20.2 the project builds, and the cgroup-* overlays mount
what they say. The cgroup-* overlays patch the agent's volumes by index and test the names first, so that a base
that moves fails the build rather than mounting the wrong tree: adding the projected token volume first in the
base broke all three (`testing value /spec/template/spec/volumes/2/name failed`), found by the v2 node's lane
(the realnode_v2 lane) applying overlays/cgroup-v2-systemd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_overlay_without_webhook import _render as render_overlay

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = sorted(p.name for p in (REPO / "daemonset" / "overlays").iterdir() if (p / "kustomization.yaml").exists())


def _agent(overlay: str) -> dict[str, Any]:
    docs = render_overlay(overlay)
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"] or [{}]
    return ds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders(overlay: str) -> None:
    ds = _agent(overlay)
    if overlay == "monitoring" and not ds:
        return  # the monitoring bundle carries no DaemonSet of its own
    spec = ds["spec"]["template"]["spec"]
    assert "kube-api-access" in {v["name"] for v in spec["volumes"]}  # the pod-bound token stays mounted


@pytest.mark.parametrize(
    ("overlay", "mounts"),
    [
        ("cgroup-v1-systemd",
         {f"/host/sys/fs/cgroup/{c}/kubepods.slice" for c in ("cpu", "cpuacct", "memory", "blkio")}),
        ("cgroup-v2-systemd", {"/host/sys/fs/cgroup/kubepods.slice"}),
        ("local-v2", {"/host/sys/fs/cgroup/kubepods.slice"}),
        ("cgroup-whole-tree", {"/host/sys/fs/cgroup"}),
    ],
)
def test_the_cgroup_overlays_mount_their_tree(overlay: str, mounts: set[str]) -> None:
    ds = _agent(overlay)
    got = {m["mountPath"] for m in ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
           if m["mountPath"].startswith("/host/sys/fs/cgroup")}
    assert got == mounts
