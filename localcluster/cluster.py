"""What every local cluster shares, whatever its node: the control plane on this machine, the project image,
the user's side (label the Node, `kubectl apply -k` an overlay of daemonset/, the webhook's certificates), the
lock and state record a killed run is torn down from, and the node-access methods the scenario and the tests
use. `localcluster.realnode.RealNode` runs its kubelet on this machine (cgroup v1, cgroupfs);
`localcluster.v2node.V2Node` in a VM (cgroup v2, systemd).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Self

from localcluster.files import parse_env_file
from localcluster.host import IMAGE_SCRIPT, KUBE_SCRIPT, REPO, Unsupported, alive, run, wait_until
from localcluster.view import Measure

NODE_MANIFEST: Final = REPO / "examples" / "local-node.yaml"
SERVICE_IP: Final = "10.96.0.1"  # the first address of the apiserver's --service-cluster-ip-range
API_PORT: Final = 443
WORKLOAD_IMAGE: Final = "localhost/tidemark/workload:1"
LOCAL_IMAGE: Final = "localhost/tidemark/tidemark"
#: the demo's control files on the node (a hostPath its online pod watches: localcluster/realscenario.py)
CTL_DIR: Final = Path("/run/tidemark-scenario")


def local_agent_config() -> str:
    """examples/local-agent-config.yaml (short periods) with `capacity.ratio.cpu: 1.0`: B = A * ratio - U_non
    counts the whole machine's non-offline usage, and on a shared machine other work keeps B at 0 otherwise."""
    import yaml

    conf = yaml.safe_load((REPO / "examples" / "local-agent-config.yaml").read_text()) or {}
    conf.setdefault("capacity", {}).setdefault("ratio", {})["cpu"] = 1.0
    return str(yaml.safe_dump(conf, sort_keys=False))



def image_refs() -> tuple[str, str]:
    """The project image's reference as containerd imports it (`docker.io/...`) and as the local overlays name it."""
    ref = run(["bash", str(IMAGE_SCRIPT), "ref"]).stdout.strip()
    version = ref.rsplit(":", 1)[1]
    full = ref if ref.count("/") >= 2 or "." in ref.split("/")[0] else f"docker.io/{ref}"
    return full, f"{LOCAL_IMAGE}:{version}"


def cni_conflist(bridge: str, subnet: str, gateway: str) -> dict[str, Any]:
    """The node's CNI network: a bridge with host-local addresses, the bridge the pods' gateway, no masquerade
    (pods reach the API server at the Service address directly; the host routes the v2 node's pod subnet)."""
    return {
        "cniVersion": "0.4.0",
        "name": "tidemark",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet, "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


@dataclass
class LocalCluster:
    """What every local cluster shares, whatever its node: the control plane on this machine (etcd +
    kube-apiserver, kube-controller-manager, kube-scheduler, all 1.20.2 from Debian's source), the project
    image, the user's side (label the Node, `kubectl apply -k` an overlay of daemonset/, the webhook's
    certificates) and the clients. `RealNode` runs its kubelet on this machine (cgroup v1, cgroupfs);
    `localcluster.v2node.V2Node` in a VM (cgroup v2, systemd). The scenario and the tests talk to either
    through the node-access methods at the end (`pod_cgroup`, `read_files`, `ctl`, `running_tasks`, `probe`)."""

    run_dir: Path
    node_name: str = field(default_factory=lambda: socket.gethostname().lower().split(".")[0] or "local")
    log: Callable[[str], None] = field(default=lambda s: None, repr=False)
    bins: dict[str, str] = field(default_factory=dict)
    api_env: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    agent_config: str | None = None  # agent.yaml for the agent's ConfigMap (a user's edit before applying)
    _lock_fd: int | None = field(default=None, repr=False)
    _state: dict[str, Any] = field(default_factory=dict, repr=False)

    #: the machine-wide lock and state record of this kind of cluster (a killed run is torn down from it)
    LOCK: ClassVar[Path]
    STATE: ClassVar[Path]
    #: the overlay of daemonset/ that is applied (daemonset/overlays/<name>)
    OVERLAY_NAME: ClassVar[str]
    #: what the node is, in the `make run` header
    DESCRIPTION: ClassVar[str]
    #: the node's cgroup version and kubelet's cgroup driver
    CGROUP_VERSION: ClassVar[str]
    CGROUP_DRIVER: ClassVar[str]
    #: how much longer the scenario waits on this node, and the bound its CPU-back figure must meet (None:
    #: reported, not asserted: under QEMU's TCG code runs about ten times slower)
    SLOWDOWN: ClassVar[float] = 1.0
    REACTION_BOUND_S: ClassVar[float | None] = 1.0
    #: the demo's CPU watermarks (high, low) where examples/local-node.yaml's do not fit the node; None: those
    DEMO_CPU_WATERMARKS: ClassVar[tuple[int, int] | None] = None

    # --- paths ---------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "api" / "kubeconfig"

    def kubeconfig_for(self, user: str) -> Path:
        return self.run_dir / "api" / "kubeconfigs" / f"{user}.kubeconfig"

    @property
    def api_url(self) -> str:
        return self.api_env.get("KUBE_API_URL", f"https://{SERVICE_IP}:{API_PORT}")

    # --- lock and state --------------------------------------------------------------------------
    def _take_lock(self, wait: float) -> None:
        fd = os.open(self.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise Unsupported(
                        f"another real-node cluster is running on this machine ({self.LOCK} is locked)"
                    ) from None
                time.sleep(1)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None

    def _save_state(self) -> None:
        self._state.update(run_dir=str(self.run_dir), pids=self.pids)
        tmp = self.STATE.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state, indent=1))
        tmp.replace(self.STATE)

    # --- helpers -----------------------------------------------------------------------------------
    def kubectl(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run([self.bins["kubectl"], f"--kubeconfig={self.kubeconfig}", *args], timeout=timeout, check=check)

    def _start(self, name: str, argv: list[str]) -> int:
        logf = open(self.run_dir / f"{name}.log", "ab")  # noqa: SIM115 (the child owns it)
        try:
            p = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            logf.close()
        self.pids[name] = p.pid
        self._save_state()
        return p.pid

    def _check_alive(self, name: str) -> None:
        pid = self.pids.get(name)
        if pid is None or not alive(pid):
            tail = "\n".join((self.run_dir / f"{name}.log").read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"{name} exited (log {self.run_dir / f'{name}.log'}):\n{tail}")

    def _check_node(self) -> None:
        """Raises when the node itself is gone (kubelet here; the VM for the v2 node): waits stop at once."""
        self._check_alive("kubelet")

    def api_get(self, path: str) -> Any:
        out = self.kubectl("get", "--raw", path, timeout=30)
        return json.loads(out.stdout)

    # --- up: the shared steps ----------------------------------------------------------------------
    def up(self, lock_wait: float = 0.0) -> Self:
        reason = self.host_reason()
        if reason:
            raise Unsupported(reason)
        self._take_lock(lock_wait)
        try:
            if self.STATE.exists():
                self.log("tearing down what a killed real-node run left behind")
                stale = json.loads(self.STATE.read_text() or "{}")
                self._teardown(stale)
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def host_reason(self) -> str:
        """'' when this machine can run this kind of node, else the reason."""
        raise NotImplementedError

    def _up(self) -> None:
        raise NotImplementedError

    def build_images(self) -> None:
        """The project image and the workload image (cached by content hash; a first build takes minutes)."""
        t0 = time.monotonic()
        self.images["tidemark"] = run(["bash", str(IMAGE_SCRIPT), "build"], timeout=3600).stdout.strip()
        self.images["workload"] = run(["bash", str(IMAGE_SCRIPT), "workload"], timeout=300).stdout.strip()
        self.timings["image"] = time.monotonic() - t0

    def start_control_plane(self, bind_address: str, port: int | None) -> None:
        """etcd + kube-apiserver (RBAC, ServiceAccount admission) at `bind_address`:`port` (None: a free one),
        then kube-controller-manager and kube-scheduler."""
        t0 = time.monotonic()
        api_dir = self.run_dir / "api"
        argv = ["bash", str(KUBE_SCRIPT), "start", str(api_dir), "--authz", "RBAC", "--bind-address", bind_address]
        if port is not None:
            argv += ["--secure-port", str(port)]
        run([*argv, "--service-accounts", "--watch-pid", str(os.getpid())], timeout=180)
        self.api_env = parse_env_file(api_dir / "env")
        self._state["api_dir"] = str(api_dir)
        self._save_state()
        self.timings["apiserver"] = time.monotonic() - t0
        self.log(f"etcd + kube-apiserver ready at {self.api_url} ({self.timings['apiserver']:.1f} s)")

        ca = self.api_env["CA_FILE"]
        sa_key = str(api_dir / "sa.key")
        # CertificateSigningRequests for kubernetes.io/kube-apiserver-client are signed with the API server's client
        # CA once approved (a systemd agent's certificate, docs/security.md "Agents outside Kubernetes")
        signing = (
            [f"--cluster-signing-cert-file={self.api_env['CLIENT_CA_FILE']}",
             f"--cluster-signing-key-file={self.api_env['CLIENT_CA_KEY']}"]
            if "CLIENT_CA_FILE" in self.api_env and "CLIENT_CA_KEY" in self.api_env
            else []
        )
        self._start(
            "kube-controller-manager",
            [
                self.bins["kube-controller-manager"],
                f"--kubeconfig={self.kubeconfig}",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca}",
                *signing,
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route,-ttl",
                "--node-monitor-grace-period=40s",
                "--concurrent-deployment-syncs=2",
                "-v=1",
            ],
        )
        self._start(
            "kube-scheduler",
            [
                self.bins["kube-scheduler"],
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "-v=1",
            ],
        )

    def install_tidemark(self, timeout: float = 240) -> None:
        """The user's side: label and annotate the node, then apply the manifests and wait for the pods."""
        self.prepare_node()
        t0 = time.monotonic()
        self.kubectl("apply", "-k", str(self.stage_manifests()), timeout=180)
        self.webhook_certs()
        self.wait_tidemark(timeout)
        self.timings["tidemark_ready"] = time.monotonic() - t0

    def webhook_certs(self) -> None:
        """The admission webhook's Secret and caBundle, made as docs/install.md says (without it the webhook
        pod waits for its Secret forever; failurePolicy Ignore keeps the cluster working either way)."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
               "PATH": f"{Path(self.bins['kubectl']).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        script = REPO / "daemonset" / "webhook" / "webhook-certs.sh"
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{script.name} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
        self.log("webhook: certificates made (daemonset/webhook/webhook-certs.sh)")

    def stage_manifests(self) -> Path:
        """The overlay to apply: daemonset/overlays/<OVERLAY_NAME> in place; with `agent_config`, a copy of
        daemonset/ in the run directory whose agent ConfigMap carries that agent.yaml (the user's edit before
        applying)."""
        if self.agent_config is None:
            return REPO / "daemonset" / "overlays" / self.OVERLAY_NAME
        import yaml

        top = self.run_dir / "daemonset"
        shutil.rmtree(top, ignore_errors=True)
        shutil.copytree(REPO / "daemonset", top, ignore=shutil.ignore_patterns("*.md", "monitoring", "network-qos"))
        cm_path = top / "agent" / "configmap.yaml"
        docs = [d for d in yaml.safe_load_all(cm_path.read_text()) if d]
        for d in docs:
            if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "tidemark-agent-config":
                d["data"] = {"agent.yaml": self.agent_config}
        cm_path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return top / "overlays" / self.OVERLAY_NAME

    def _node(self) -> dict[str, Any] | None:
        done = self.kubectl("get", "node", self.node_name, "-o", "json", check=False, timeout=30)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def _node_ready(self) -> bool:
        node = self._node()
        if node is None:
            return False
        conds = node.get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def prepare_node(self) -> None:
        import yaml

        doc = next(d for d in yaml.safe_load_all(NODE_MANIFEST.read_text()) if d and d.get("kind") == "Node")
        labels = [f"{k}={v}" for k, v in (doc["metadata"].get("labels") or {}).items()]
        notes = [f"{k}={v}" for k, v in (doc["metadata"].get("annotations") or {}).items()]
        if labels:
            self.kubectl("label", "node", self.node_name, "--overwrite", *labels)
        if self.DEMO_CPU_WATERMARKS is not None:
            high, low = self.DEMO_CPU_WATERMARKS
            notes = [n for n in notes if not n.startswith("volcano.sh/evicting-cpu-")]
            notes += [f"volcano.sh/evicting-cpu-high-watermark={high}", f"volcano.sh/evicting-cpu-low-watermark={low}"]
        if notes:
            self.kubectl("annotate", "node", self.node_name, "--overwrite", *notes)

    def pods(self, namespace: str = "", selector: str = "") -> list[dict[str, Any]]:
        args = ["get", "pods", "-o", "json"]
        args += ["-n", namespace] if namespace else ["-A"]
        if selector:
            args += ["-l", selector]
        items: list[dict[str, Any]] = json.loads(self.kubectl(*args, timeout=30).stdout).get("items", [])
        return items

    @staticmethod
    def pod_ready(pod: dict[str, Any]) -> bool:
        conds = pod.get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def wait_tidemark(self, timeout: float = 240) -> None:
        def ready() -> bool:
            self._check_node()
            agents = self.pods("tidemark-system", "app.kubernetes.io/name=tidemark-agent")
            scheds = self.pods("tidemark-system", "app.kubernetes.io/name=tidemark-scheduler")
            # Settled, not only Ready: after a rollout the replaced agent pod stays listed (and Ready) while it
            # terminates, and a caller that lists the agents now must see the one that keeps running.
            settled = not any(p["metadata"].get("deletionTimestamp") for p in agents)
            return (settled and len(agents) == 1 and all(map(self.pod_ready, agents))
                    and any(map(self.pod_ready, scheds)))

        try:
            wait_until(ready, timeout, "the agent DaemonSet pod (one, not terminating) and a scheduler pod Ready",
                       poll=1.0)
        except TimeoutError as e:
            states = self.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
            raise TimeoutError(f"{e}\n{states}") from None

    # --- the node's own files and processes (the scenario and the tests) ---------------------------
    def pod_cgroup(self, pod: dict[str, Any], controller: str = "cpu") -> str:
        """The pod's cgroup directory on the node, for `controller` (v1; v2 has one directory)."""
        raise NotImplementedError

    def container_cgroup(self, pod: dict[str, Any], controller: str = "cpu", index: int = 0) -> str:
        raise NotImplementedError

    def read_files(self, paths: list[str]) -> dict[str, str | None]:
        """The stripped contents of files on the node (None: unreadable or absent)."""
        raise NotImplementedError

    def ctl(self, name: str, present: bool) -> str:
        """Creates (or removes) the control file `name` in CTL_DIR on the node (a hostPath the demo's online
        pod watches); returns its path. `present=False` of the last one also removes the directory."""
        raise NotImplementedError

    def running_tasks(self) -> set[str]:
        """The ids of the containers running on the node (containerd's k8s.io tasks)."""
        raise NotImplementedError

    def probe(self, name: str, **kwargs: Any) -> dict[str, Any]:
        """A measurement of localcluster/probe.py run on the node."""
        raise NotImplementedError

    def measure(self) -> Measure:
        """What the live view reads the node's cgroup counters with (this machine's own files here)."""
        return Measure()

    # --- down ------------------------------------------------------------------------------------
    def _teardown(self, state: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def down(self) -> list[str]:
        """Tears everything down; returns what could not be cleaned (empty = clean)."""
        problems: list[str] = []
        if self._state:
            self._state["pids"] = self.pids
            problems = self._teardown(self._state)
        self.STATE.unlink(missing_ok=True)
        self._release_lock()
        return problems
