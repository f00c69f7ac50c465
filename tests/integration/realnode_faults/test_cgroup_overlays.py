"""The agent's cgroup mounts per layout: the base and each cgroup-* overlay, rendered by the project's
kubectl 1.20.2, mount exactly the subtrees docs/security.md names, and the agent's discovery maps each
mount set (as mountinfo shows it inside the agent's container) back to a hierarchy whose kubepods
directory is inside a mount."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cgroups.layout import KubeLayout
from agent.cgroups.mounts import detect_hierarchy

REPO = Path(__file__).resolve().parents[3]
ROOT = "/host/sys/fs/cgroup"
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "blkio")
# overlay -> (driver, {mountPath: host path}, read-only mount paths)
EXPECTED: dict[str, tuple[str, dict[str, str], set[str]]] = {
    "base": (
        "cgroupfs",
        {f"{ROOT}/{c}/kubepods": f"/sys/fs/cgroup/{c}/kubepods" for c in V1_CONTROLLERS},
        {f"{ROOT}/cpuacct/kubepods"},
    ),
    "overlays/cgroup-v1-systemd": (
        "systemd",
        {f"{ROOT}/{c}/kubepods.slice": f"/sys/fs/cgroup/{c}/kubepods.slice" for c in V1_CONTROLLERS},
        {f"{ROOT}/cpuacct/kubepods.slice"},
    ),
    "overlays/cgroup-v2-systemd": ("systemd", {f"{ROOT}/kubepods.slice": "/sys/fs/cgroup/kubepods.slice"}, set()),
    "overlays/cgroup-whole-tree": ("cgroupfs", {ROOT: "/sys/fs/cgroup"}, set()),
}


def render(kustomization: str) -> list[dict[str, Any]]:
    kubectl = subprocess.run(
        ["bash", str(REPO / "hack" / "kube-apiserver.sh"), "build-kubectl"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if kubectl.returncode != 0:
        reason = f"no kubectl 1.20.2 here: {kubectl.stderr.strip()[-400:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    out = subprocess.run(
        [kubectl.stdout.strip().splitlines()[-1], "kustomize", str(REPO / "daemonset" / kustomization)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def agent_mounts(docs: list[dict[str, Any]]) -> tuple[dict[str, str], set[str]]:
    ds = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "tidemark-agent")
    spec = ds["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = spec["containers"][0]["volumeMounts"]
    cg = {m["mountPath"]: host[m["name"]] for m in mounts if host.get(m["name"], "").startswith("/sys/fs/cgroup")}
    ro = {m["mountPath"] for m in mounts if m.get("readOnly") and m["mountPath"] in cg}
    return cg, ro


@pytest.mark.parametrize("kustomization", sorted(EXPECTED))
def test_agent_mounts_per_layout(kustomization: str) -> None:
    driver, want, want_ro = EXPECTED[kustomization]
    cg, ro = agent_mounts(render(kustomization))
    assert cg == want
    assert ro == want_ro
    # mountinfo as the agent sees it: a v1 subtree per controller, or one v2 subtree / the whole tree.
    lines = []
    for i, (mount_path, host_path) in enumerate(sorted(cg.items())):
        rel = host_path[len("/sys/fs/cgroup") :]
        if "v2" in kustomization or kustomization.endswith("whole-tree"):
            lines.append(f"{900 + i} 800 0:26 {rel or '/'} {mount_path} rw - cgroup2 cgroup2 rw")
        else:
            controller, _, sub = rel.strip("/").partition("/")
            lines.append(f"{900 + i} 800 0:{30 + i} /{sub} {mount_path} rw - cgroup cgroup rw,{controller}")
    h = detect_hierarchy(ROOT, "\n".join(lines) + "\n")
    if h.version == "v1":
        assert h.dir_for("blkio") == f"{ROOT}/blkio", "no blkio: the v1 agent would have no I/O knobs"
    kubepods = KubeLayout(h, driver).kubepods()  # type: ignore[arg-type]
    for d in kubepods.distinct():
        assert any(d == m or d.startswith(m + "/") for m in cg), f"{d} is outside every mount {sorted(cg)}"
