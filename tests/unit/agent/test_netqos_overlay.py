"""daemonset/overlays/network-qos: the base plus exactly what network QoS needs (host network, NET_ADMIN,
SYS_ADMIN, SYS_PTRACE), rendered with the machine's kubectl (kustomize) where it exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
OVERLAY = REPO / "daemonset" / "overlays" / "network-qos"


def _agent(docs: list[Any]) -> Any:
    (ds,) = [d for d in docs if d and d.get("kind") == "DaemonSet" and d["metadata"]["name"] == "tidemark-agent"]
    return ds


def _render(path: Path) -> list[Any]:
    if not shutil.which("kubectl"):
        pytest.skip("kubectl (kustomize) is missing")
    out = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, check=True).stdout
    return list(yaml.safe_load_all(out))


def test_overlay_adds_only_what_network_qos_needs() -> None:
    base = _agent(_render(REPO / "daemonset" / "base"))
    net = _agent(_render(OVERLAY))
    spec, base_spec = net["spec"]["template"]["spec"], base["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "hostNetwork" not in base_spec
    caps = spec["containers"][0]["securityContext"]["capabilities"]
    base_caps = base_spec["containers"][0]["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"]
    assert set(caps["add"]) == set(base_caps["add"]) | {"NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"}
    assert spec["containers"][0]["securityContext"]["privileged"] is False
    # everything else is the base
    for key in ("volumes", "hostPID", "serviceAccountName", "tolerations"):
        assert spec[key] == base_spec[key]
