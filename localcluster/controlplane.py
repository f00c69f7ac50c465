"""The local control plane: etcd + kube-apiserver 1.20.2 (built from Debian's source), bootstrapped for Tidemark.

Starting, stopping and building live in one place, `hack/kube-apiserver.sh` (shared with the test
fixture); this module drives it and then applies what a cluster running Tidemark has: the Volcano
CRDs (`daemonset/crds/`), the PriorityClasses, the scheduler conf ConfigMap, and the shipped RBAC
(`daemonset/agent/rbac.yaml`, `daemonset/scheduler/rbac.yaml`).

Authorization is RBAC with one static bearer token per component (`tidemark-agent`,
`tidemark-scheduler`, `tidemark-podrunner`; `admin` for the scenario): each program runs with only
the rights its shipped ClusterRole grants, so a live run also proves those roles are sufficient,
as production would. (AlwaysAllow would hide a missing rule until the first real cluster.) The
shipped bindings name ServiceAccounts; a lone apiserver has no token controller, so the same
ClusterRoles are also bound to the token users of the same name.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from localcluster import manifests
from localcluster.files import parse_env_file, parse_token_file
from tidemark.kube.client import new_api_client

REPO: Final = Path(__file__).resolve().parents[1]
SCRIPT: Final = REPO / "hack" / "kube-apiserver.sh"
CRD_DIR: Final = REPO / "daemonset" / "crds"
PODRUNNER_USER: Final = "tidemark-podrunner"
EXIT_CANNOT_BUILD: Final = 3

PODRUNNER_ROLE: Final[dict[str, Any]] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "tidemark-local-podrunner"},
    "rules": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "create", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ],
}


def cluster_role_binding(name: str, role: str, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def role_binding(name: str, namespace: str, role: str, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def _script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False)


def binaries_status() -> tuple[bool, str]:
    """(found, reason): whether `hack/kube-apiserver.sh env` finds kube-apiserver and etcd."""
    if not SCRIPT.is_file():
        return False, f"{SCRIPT} is missing (run from a Tidemark checkout)"
    found = _script("env", timeout=30)
    return found.returncode == 0, found.stderr.strip().replace("\n", "; ")


def can_build() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None and shutil.which("dpkg-query") is not None


def build(out: TextIO) -> tuple[int, str]:
    """Build kube-apiserver once (about 5 minutes), streaming the script's progress lines to `out`."""
    tail: list[str] = []
    with subprocess.Popen(
        ["bash", str(SCRIPT), "build"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail = [*tail[-14:], line]
            out.write(f"   {line}\n")
            out.flush()
        rc = proc.wait()
    return rc, "\n".join(tail)


KUBECONFIG: Final = """apiVersion: v1
kind: Config
clusters:
- name: tidemark-local
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    token: {token}
contexts:
- name: {user}@tidemark-local
  context:
    cluster: tidemark-local
    user: {user}
current-context: {user}@tidemark-local
"""


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver (from `hack/kube-apiserver.sh start`)."""

    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return self.env["KUBE_API_URL"]

    @property
    def startup_seconds(self) -> float:
        return float(self.env.get("STARTUP_SECONDS") or 0)

    def kubeconfig(self, user: str = "admin") -> Path:
        """A kubeconfig for `user` (its static token) that verifies the server's certificate.

        The script's kubeconfigs skip TLS verification (a fresh self-signed certificate per start);
        the server's own CA is in the certificate file it wrote, so these verify it, as production does.
        """
        path = self.data_dir / "kubeconfigs-verified" / f"{user}.kubeconfig"
        if not path.exists():
            token = parse_token_file(Path(self.env["TOKEN_FILE"]))[user]
            path.parent.mkdir(mode=0o700, exist_ok=True)
            text = KUBECONFIG.format(server=self.api_url, ca=self.env["CA_FILE"], user=user, token=token)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        return path

    def client(self, user: str = "admin") -> Any:
        return new_api_client(str(self.kubeconfig(user)), user_agent=f"tidemark-localcluster/{user}")

    def pids(self) -> list[int]:
        return [int(self.env[k]) for k in ("KUBE_APISERVER_PID", "ETCD_PID") if self.env.get(k)]

    def stop(self) -> str:
        """Stop etcd and the apiserver (the script signals only its own pids); '' or the error text."""
        if not (self.data_dir / "env").exists():
            return ""
        done = _script("stop", str(self.data_dir), timeout=60)
        return "" if done.returncode == 0 else done.stderr.strip()


def start(
    data_dir: Path, watch_pid: int | None = None, extra_users: tuple[str, ...] = (PODRUNNER_USER,)
) -> ControlPlane:
    """Start etcd + kube-apiserver (RBAC, static tokens) on loopback; the watchdog follows `watch_pid`."""
    args = ["start", str(data_dir), "--authz", "RBAC"]
    for user in extra_users:
        args += ["--user", user]
    if watch_pid:
        args += ["--watch-pid", str(watch_pid)]
    started = _script(*args, timeout=180)
    if started.returncode != 0:
        raise RuntimeError(f"hack/kube-apiserver.sh start exited {started.returncode}: {started.stderr.strip()}")
    return ControlPlane(data_dir, parse_env_file(data_dir / "env"))


def bootstrap(cp: ControlPlane, scheduler_conf: Path, progress: Callable[[str], None] = lambda s: None) -> list[str]:
    """CRDs (waited until served), PriorityClasses, scheduler conf ConfigMap, RBAC for every component."""
    api = cp.client("admin")
    applied: list[str] = []
    try:
        for ns in ("kube-system", "tidemark-system"):
            manifests.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        crds = [
            d for p in sorted(CRD_DIR.glob("*.yaml")) for d in manifests.load_yaml(p)
            if d.get("kind") == "CustomResourceDefinition"  # not the directory's kustomization.yaml
        ]
        applied += manifests.apply_all(api, crds)
        for crd in crds:
            spec = crd["spec"]
            name: str = crd["metadata"]["name"]
            version: str = next(v["name"] for v in spec["versions"] if v.get("served", True))
            ready = functools.partial(manifests.crd_ready, api, name, spec["group"], version, spec["names"]["plural"])
            manifests.wait_for(ready, 30, f"CRD {name} to be served")
        progress(f"CRDs: {', '.join(c['metadata']['name'] for c in crds)}")
        sched_dir = REPO / "daemonset" / "scheduler"
        applied += manifests.apply_all(api, manifests.load_yaml(sched_dir / "priorityclasses.yaml"))
        conf_text = scheduler_conf.read_text()
        cm_path = sched_dir / "configmap.yaml"
        cms = manifests.load_yaml(cm_path) if cm_path.exists() else []
        for cm in cms:  # the ConfigMap carries exactly the conf the scheduler process reads
            if cm.get("kind") == "ConfigMap":
                cm["data"] = {"volcano-scheduler.conf": conf_text}
        applied += manifests.apply_all(api, cms)
        rbac = [
            *manifests.load_yaml(REPO / "daemonset" / "agent" / "rbac.yaml"),
            *manifests.load_yaml(sched_dir / "rbac.yaml"),
        ]
        applied += manifests.apply_all(api, rbac)
        applied += manifests.apply_all(
            api,
            [
                PODRUNNER_ROLE,
                cluster_role_binding("tidemark-agent-user", "tidemark-agent", "tidemark-agent"),
                cluster_role_binding("tidemark-scheduler-user", "tidemark-scheduler", "tidemark-scheduler"),
                role_binding(
                    "tidemark-scheduler-leader-election-user",
                    "tidemark-system",
                    "tidemark-scheduler-leader-election",
                    "tidemark-scheduler",
                ),
                cluster_role_binding("tidemark-local-podrunner", "tidemark-local-podrunner", PODRUNNER_USER),
            ],
        )
        progress(
            "RBAC: shipped ClusterRoles bound to the component tokens (tidemark-agent, tidemark-scheduler), "
            "pod runner role"
        )
    finally:
        api.close()
    return applied
