"""daemonset/agent/ and systemd/: the shapes the docs promise (RBAC sufficiency is proven live in agent_live/)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from agent.cli import build_parser
from agent.config import DEFAULT_CONFIG, load_config_text

REPO = Path(__file__).resolve().parents[3]
AGENT = REPO / "daemonset" / "agent"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_daemonset() -> None:
    (ds,) = _docs(AGENT / "daemonset.yaml")
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert spec["hostPID"] is True and spec["priorityClassName"] == "tidemark-critical"
    assert spec["serviceAccountName"] == "tidemark-agent" and ds["metadata"]["namespace"] == "tidemark-system"
    assert {"key": "volcano.sh/offline-job-evicting", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    args = build_parser().parse_args([*c["command"][1:], *c["args"]])
    assert args.command == "run" and args.cgroup_root == "/host/sys/fs/cgroup" and args.state_dir == "/var/lib/tidemark"
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE", "SYS_RESOURCE"]}
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    # issue #13: only the kubepods subtrees, each at its own path below --cgroup-root; cpuacct read-only
    for ctrl in ("cpu", "cpuacct", "memory", "blkio"):  # blkio: the I/O QoS knobs
        assert volumes[f"cgroup-{ctrl}"]["hostPath"]["path"] == f"/sys/fs/cgroup/{ctrl}/kubepods"
        assert mounts[f"cgroup-{ctrl}"]["mountPath"] == f"/host/sys/fs/cgroup/{ctrl}/kubepods"
        assert bool(mounts[f"cgroup-{ctrl}"].get("readOnly")) == (ctrl == "cpuacct")
    assert not [v for v in volumes.values() if v.get("hostPath", {}).get("path") == "/sys/fs/cgroup"]
    assert "subPath" not in mounts["config"], "a subPath mount never sees ConfigMap updates"
    assert volumes["config"]["configMap"]["name"] == "tidemark-agent-config"
    assert {e["name"] for e in c["env"]} >= {"NODE_NAME", "POD_NAME", "POD_NAMESPACE"}


def test_configmap_is_the_example_and_the_defaults() -> None:
    (cm,) = _docs(AGENT / "configmap.yaml")
    assert cm["metadata"]["name"] == "tidemark-agent-config"
    text = cm["data"]["agent.yaml"]
    assert text == (REPO / "examples" / "agent-config.yaml").read_text()
    assert load_config_text(text) == (DEFAULT_CONFIG, ())


def test_rbac_is_least_privilege() -> None:
    docs = {d["kind"]: d for d in _docs(AGENT / "rbac.yaml")}
    rules = {
        (g, r): sorted(rule["verbs"])
        for rule in docs["ClusterRole"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    # no Node write at all (hardening round 2, item 3): the agent writes its NodeReport, the webhook's controller
    # applies it; no eviction right (issue 33): the controller evicts what the report asks for and answers in its
    # status, which the agent reads (get); the DaemonSet read is by name
    assert rules == {
        ("", "nodes"): ["get", "list", "watch"],
        ("colocation.tidemark.io", "nodereports"): ["create", "get", "patch", "watch"],
        ("", "pods"): ["get", "list", "watch"],
        ("", "events"): ["create", "patch"],
        ("apps", "daemonsets"): ["get"],
    }
    (named,) = [r for r in docs["ClusterRole"]["rules"] if "daemonsets" in r["resources"]]
    assert named["resourceNames"] == ["tidemark-agent"]
    binding = docs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tidemark-agent", "namespace": "tidemark-system"},
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "tidemark:agents"},
    ]


def test_systemd_unit_and_env() -> None:
    unit = (REPO / "systemd" / "tidemark-agent.service").read_text()
    settings = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#"))
    assert settings["Type"] == "notify" and int(settings["WatchdogSec"]) > 0
    assert settings["ExecStart"].split()[1:3] == ["run", "$TIDEMARK_AGENT_ARGS"]
    assert settings["CapabilityBoundingSet"] == "CAP_DAC_OVERRIDE CAP_SYS_RESOURCE"
    # issue #13: hardened, yet the cgroup knobs stay writable (ReadWritePaths= below ProtectKernelTunables=)
    assert "ProtectControlGroups" not in settings
    hardening = ["ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs"]
    hardening += ["NoNewPrivileges", "PrivateDevices"]
    for key in hardening:
        assert settings[key] == "yes", key
    assert settings["ReadWritePaths"] == "/sys/fs/cgroup" and settings["ProtectSystem"] == "strict"
    assert "@system-service" in unit and settings["RestrictNamespaces"] == "net"
    env = dict(
        line.split("=", 1)
        for line in (REPO / "systemd" / "tidemark-agent.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    args = build_parser().parse_args(["run", *shlex.split(shlex.split(env["TIDEMARK_AGENT_ARGS"])[0])])
    assert args.state_dir == "/var/lib/tidemark" and args.log_format == "json"


def test_docs_have_the_capability_table() -> None:
    text = (REPO / "docs" / "agent.md").read_text()
    for cap in ("DAC_OVERRIDE", "SYS_RESOURCE", "hostPID"):
        assert f"`{cap}`" in text
