"""A real one-node Kubernetes on this machine: the shipped image and manifests on a real kubelet.

Up (about 30-60 s once everything is built and cached):
1. one cluster per machine: an exclusive lock (`/run/tidemark-realnode.lock`), then the stale
   leftovers of a killed run (its state file) are torn down first;
2. the host sysctls kubelet changes are saved (`vm.overcommit_memory`, `kernel.panic`,
   `kernel.panic_on_oops`), and the host paths kubelet and containerd use that do not exist yet
   are remembered, so teardown removes exactly what this run created;
3. a bridge `tmbr0` with 10.244.99.1/24 (the pods' gateway) and 10.96.0.1/32 (the `kubernetes`
   Service IP): pods reach the API server at the address their in-cluster config names, with no
   kube-proxy and no NAT rule;
4. etcd + kube-apiserver (`hack/kube-apiserver.sh start`, RBAC, ServiceAccount admission, bound
   to 10.96.0.1:443), kube-controller-manager (DaemonSets, Deployments, ServiceAccount tokens) and
   kube-scheduler for the pods without `schedulerName: volcano`, all 1.20.2 from Debian's source;
5. containerd (Debian's) with its own config, root, state and socket (`restrict_oom_score_adj`,
   runc with cgroupfs, CNI from /usr/lib/cni with a conf dir of its own: bridge + host-local);
6. the project image (`hack/image.sh build`) and the small workload image (busybox-static; also
   the pod sandbox image) imported into containerd's k8s.io namespace;
7. kubelet (cgroupfs driver, the node's real capacity, its own root and cert dirs) registered
   with the admin token; the Node is Ready once CNI is up;
8. the Node labelled and annotated as a user would (examples/local-node.yaml), then
   `kubectl apply -k` of the local overlay (kubectl 1.20.2 built from the same tree): the agent
   as its DaemonSet's pod, the scheduler as its Deployment, under the shipped RBAC. With
   `agent_config`, a copy of daemonset/ in the run directory is applied instead, its agent
   ConfigMap carrying that agent.yaml (the user's edit before applying; `local_agent_config()` is
   the one the tests and the scenario use).

Down: the controllers stop first (nothing recreates pods), every pod is deleted (grace 0) and
kubelet kills its containers; kubelet, containerd and any shim left stop by pid; mounts under the
run directory, kubelet's and containerd's dirs and the CNI network namespaces are unmounted;
kubepods cgroups are removed leaf-first; the bridge is deleted; the sysctls are restored; the host
paths this run created are removed; etcd and the API server stop last.

Every fact behind these steps is in docs/testing.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Self

from localcluster.files import parse_env_file
from localcluster.view import Measure

REPO: Final = Path(__file__).resolve().parents[1]
KUBE_SCRIPT: Final = REPO / "hack" / "kube-apiserver.sh"
IMAGE_SCRIPT: Final = REPO / "hack" / "image.sh"
OVERLAY: Final = REPO / "daemonset" / "overlays" / "local"
NODE_MANIFEST: Final = REPO / "examples" / "local-node.yaml"
LOCK_PATH: Final = Path("/run/tidemark-realnode.lock")
STATE_PATH: Final = Path("/run/tidemark-realnode.json")
BRIDGE: Final = "tmbr0"
POD_SUBNET: Final = "10.244.99.0/24"
GATEWAY: Final = "10.244.99.1"
SERVICE_IP: Final = "10.96.0.1"  # the first address of the apiserver's --service-cluster-ip-range
API_PORT: Final = 443
WORKLOAD_IMAGE: Final = "localhost/tidemark/workload:1"
LOCAL_IMAGE: Final = "localhost/tidemark/tidemark"
SYSCTLS: Final = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
# Host paths kubelet/containerd/CRI use whatever their flags say: removed afterwards if this run made them.
FIXED_HOST_PATHS: Final = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/run/containerd",
    "/var/lib/tidemark",
    "/etc/cni",
    "/opt/cni",
    "/var/lib/cni",
)
CGROUP_BASE: Final = Path("/sys/fs/cgroup")
#: the demo's control files on the node (a hostPath its online pod watches: localcluster/realscenario.py)
CTL_DIR: Final = Path("/run/tidemark-scenario")
EXIT_UNSUPPORTED: Final = 3


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Unsupported(Exception):
    """This machine cannot run the real node (the reason is the message)."""


def cache_bin() -> Path:
    root = os.environ.get("TIDEMARK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tidemark"
    )
    return Path(root) / "kube-1.20.2" / "bin"


def _run(argv: list[str], timeout: float = 120, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-2000:]}")
    return done


def wait_until(cond: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> float:
    """Polls `cond`; returns the seconds it took; TimeoutError naming `what`."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return time.monotonic() - t0


def host_is_supported() -> str:
    """'' when this machine can run a real node, else the reason."""
    if sys.platform != "linux":
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (kubelet, containerd, cgroups, a bridge)"
    if not (CGROUP_BASE / "cpu").is_dir() or not (CGROUP_BASE / "memory").is_dir():
        return "needs the cgroup v1 cpu and memory hierarchies under /sys/fs/cgroup (kubelet 1.20 with cgroupfs)"
    if shutil.which("apt-get") is None and not all(shutil.which(b) for b in ("containerd", "runc")):
        return "needs containerd and runc (Debian: apt-get install containerd runc containernetworking-plugins)"
    return ""


RUNTIME_PACKAGES: Final = ("containerd", "runc", "containernetworking-plugins", "busybox-static")


def ensure_runtime(log: Callable[[str], None]) -> None:
    """containerd, runc, CNI plugins and busybox-static from Debian (idempotent; root)."""
    missing = []
    for p in RUNTIME_PACKAGES:
        st = _run(["dpkg-query", "-W", "-f=${db:Status-Status}", p], check=False).stdout
        if st != "installed":
            missing.append(p)
    if not missing:
        return
    log(f"apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    opts = ["-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600"]
    # policy-rc.d: the package's own containerd service must not start; ours has its own config.
    rc_path = Path("/usr/sbin/policy-rc.d")
    made_rc = not rc_path.exists()
    if made_rc:
        rc_path.write_text("#!/bin/sh\nexit 101\n")
        rc_path.chmod(0o755)
    try:
        if _run(["apt-get", "install", *opts, *missing], timeout=900, check=False, env=env).returncode != 0:
            _run(["apt-get", "update", "-qq", "-o", "DPkg::Lock::Timeout=600"], timeout=900, check=False)
            _run(["apt-get", "install", *opts, *missing], timeout=900, env=env)
    finally:
        if made_rc:
            rc_path.unlink(missing_ok=True)


def ensure_kube_binaries(log: Callable[[str], None]) -> dict[str, str]:
    """kube-apiserver, kubelet, kubectl, kube-controller-manager, kube-scheduler (built once, cached)."""
    targets = {
        "kube-apiserver": "build",
        "kubelet": "build-kubelet",
        "kubectl": "build-kubectl",
        "kube-controller-manager": "build-controller-manager",
        "kube-scheduler": "build-scheduler",
    }
    out: dict[str, str] = {}
    for name, sub in targets.items():
        path = cache_bin() / name
        if not path.is_file():
            log(f"building {name} from Debian's kubernetes source (once per machine; hack/kube-apiserver.sh {sub})")
            t0 = time.monotonic()
            _run(["bash", str(KUBE_SCRIPT), sub], timeout=3600)
            log(f"  {name} built in {time.monotonic() - t0:.0f} s")
        out[name] = str(path)
    return out


def local_agent_config() -> str:
    """examples/local-agent-config.yaml (short periods) with `capacity.ratio.cpu: 1.0`: B = A * ratio - U_non
    counts the whole machine's non-offline usage, and on a shared machine other work keeps B at 0 otherwise."""
    import yaml

    conf = yaml.safe_load((REPO / "examples" / "local-agent-config.yaml").read_text()) or {}
    conf.setdefault("capacity", {}).setdefault("ratio", {})["cpu"] = 1.0
    return str(yaml.safe_dump(conf, sort_keys=False))


def _read_sysctl(name: str) -> str:
    return Path("/proc/sys", name).read_text().strip()


def _write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        Path("/proc/sys", name).write_text(value)


def _mounts_under(prefixes: list[str]) -> list[str]:
    """Mount points under any of `prefixes`, deepest first (from /proc/self/mountinfo)."""
    found: list[str] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split()
        if len(parts) < 5:
            continue
        mp = parts[4].replace("\\040", " ")
        if any(mp == p or mp.startswith(p.rstrip("/") + "/") for p in prefixes):
            found.append(mp)
    return sorted(set(found), key=lambda m: (-m.count("/"), m))


def _cgroup_rmdir_tree(root: Path) -> None:
    """rmdir `root` and its children leaf-first (a group with processes stays; reported by the caller)."""
    if not root.is_dir():
        return
    for d, _dirs, _files in sorted(os.walk(root), key=lambda t: -t[0].count("/")):
        with contextlib.suppress(OSError):
            os.rmdir(d)


def _cgroup_pids(root: Path) -> list[int]:
    pids: list[int] = []
    if not root.is_dir():
        return pids
    for d, _dirs, files in os.walk(root):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError, ValueError):
                pids += [int(x) for x in Path(d, "cgroup.procs").read_text().split()]
    return pids


def kubepods_roots() -> list[Path]:
    """Every `kubepods` group kubelet (cgroupfs, cgroupRoot /) makes: one per v1 controller mount."""
    roots = []
    with contextlib.suppress(OSError):
        for entry in sorted(CGROUP_BASE.iterdir()):
            if entry.is_dir() and not entry.is_symlink() and (entry / "kubepods").is_dir():
                roots.append(entry / "kubepods")
    return roots


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _kill_pid(pid: int, marker: str, grace: float = 10.0) -> None:
    """TERM, then KILL after `grace`, only while the command line still names `marker`."""
    if not alive(pid) or marker not in _cmdline(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CONTAINERD_CONFIG: Final = """version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
"""

KUBELET_CONFIG: Final = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failSwapOn: false
makeIPTablesUtilChains: false
evictionHard: {{}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
address: 127.0.0.1
port: {port}
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
readOnlyPort: 0
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
resolvConf: /etc/resolv.conf
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
"""

CNI_CONFLIST: Final = {
    "cniVersion": "0.4.0",
    "name": "tidemark",
    "plugins": [
        {
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "ipMasq": False,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
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
    LOCK: ClassVar[Path] = LOCK_PATH
    STATE: ClassVar[Path] = STATE_PATH
    #: the overlay of daemonset/ that is applied (daemonset/overlays/<name>)
    OVERLAY_NAME: ClassVar[str] = "local"
    #: what the node is, in the `make run` header
    DESCRIPTION: ClassVar[str] = "cgroup v1, cgroupfs driver"
    #: the node's cgroup version and kubelet's cgroup driver
    CGROUP_VERSION: ClassVar[str] = "v1"
    CGROUP_DRIVER: ClassVar[str] = "cgroupfs"
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
        return _run([self.bins["kubectl"], f"--kubeconfig={self.kubeconfig}", *args], timeout=timeout, check=check)

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
        return host_is_supported()

    def _up(self) -> None:
        raise NotImplementedError

    def build_images(self) -> None:
        """The project image and the workload image (cached by content hash; a first build takes minutes)."""
        t0 = time.monotonic()
        self.images["tidemark"] = _run(["bash", str(IMAGE_SCRIPT), "build"], timeout=3600).stdout.strip()
        self.images["workload"] = _run(["bash", str(IMAGE_SCRIPT), "workload"], timeout=300).stdout.strip()
        self.timings["image"] = time.monotonic() - t0

    def start_control_plane(self, bind_address: str, port: int | None) -> None:
        """etcd + kube-apiserver (RBAC, ServiceAccount admission) at `bind_address`:`port` (None: a free one),
        then kube-controller-manager and kube-scheduler."""
        t0 = time.monotonic()
        api_dir = self.run_dir / "api"
        argv = ["bash", str(KUBE_SCRIPT), "start", str(api_dir), "--authz", "RBAC", "--bind-address", bind_address]
        if port is not None:
            argv += ["--secure-port", str(port)]
        _run([*argv, "--service-accounts", "--watch-pid", str(os.getpid())], timeout=180)
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


@dataclass
class RealNode(LocalCluster):
    """The running one-node cluster on this machine: paths, pids and clients; `down()` undoes everything `up()` did."""

    # --- paths ---------------------------------------------------------------------------------
    @property
    def sock(self) -> Path:
        return self.run_dir / "containerd" / "containerd.sock"

    def ctr(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(["ctr", "-a", str(self.sock), "-n", "k8s.io", *args], timeout=timeout, check=check)

    # --- up --------------------------------------------------------------------------------------
    def _up(self) -> None:
        t_all = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = self.run_dir.resolve()
        ensure_runtime(self.log)
        self.bins = ensure_kube_binaries(self.log)
        self._state = {
            "sysctls": {k: _read_sysctl(k) for k in SYSCTLS},
            "created_paths": [p for p in FIXED_HOST_PATHS if not os.path.exists(p)],
            "netns_before": sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else None,
            "bridge": BRIDGE,
        }
        self._save_state()

        # Images first (cached by content hash; a first build takes minutes).
        self.build_images()

        t0 = time.monotonic()
        if _run(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
            _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "replace", f"{GATEWAY}/24", "dev", BRIDGE])
        _run(["ip", "addr", "replace", f"{SERVICE_IP}/32", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])
        self.start_control_plane(SERVICE_IP, API_PORT)
        self.timings["apiserver"] = time.monotonic() - t0

        # containerd with everything of its own.
        t0 = time.monotonic()
        cdir = self.run_dir / "containerd"
        cni_conf = self.run_dir / "cni"
        for d in (cdir / "root", cdir / "state", cni_conf):
            d.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-tidemark.conflist").write_text(json.dumps(CNI_CONFLIST, indent=1))
        (cdir / "config.toml").write_text(
            CONTAINERD_CONFIG.format(
                root=cdir / "root",
                state=cdir / "state",
                sock=self.sock,
                sandbox=WORKLOAD_IMAGE,
                cni_conf=cni_conf,
                runc=self._runc_wrapper(),
            )
        )
        self._start("containerd", ["containerd", "--config", str(cdir / "config.toml")])
        wait_until(lambda: self.sock.exists() or not alive(self.pids["containerd"]), 30, "containerd's socket")
        self._check_alive("containerd")
        wait_until(lambda: self.ctr("version", check=False).returncode == 0, 30, "containerd to answer")
        self.ctr("images", "import", self.images["workload"], timeout=120)
        self.ctr("images", "import", self.images["tidemark"], timeout=300)
        ref = _run(["bash", str(IMAGE_SCRIPT), "ref"]).stdout.strip()
        version = ref.rsplit(":", 1)[1]
        full = ref if ref.count("/") >= 2 or "." in ref.split("/")[0] else f"docker.io/{ref}"
        self.ctr("images", "tag", "--force", full, f"{LOCAL_IMAGE}:{version}")
        self.timings["containerd"] = time.monotonic() - t0

        # kubelet.
        t0 = time.monotonic()
        kdir = self.run_dir / "kubelet"
        (kdir / "root").mkdir(parents=True, exist_ok=True)
        (kdir / "certs").mkdir(parents=True, exist_ok=True)
        (kdir / "config.yaml").write_text(KUBELET_CONFIG.format(port=_free_port(), healthz=_free_port()))
        self._start(
            "kubelet",
            [
                self.bins["kubelet"],
                f"--kubeconfig={self.kubeconfig}",
                f"--config={kdir / 'config.yaml'}",
                "--container-runtime=remote",
                f"--container-runtime-endpoint=unix://{self.sock}",
                f"--root-dir={kdir / 'root'}",
                f"--cert-dir={kdir / 'certs'}",
                f"--hostname-override={self.node_name}",
                "--runtime-request-timeout=5m",
                "-v=1",
            ],
        )

        def node_ready_or_kubelet_dead() -> bool:
            self._check_alive("kubelet")
            return self._node_ready()

        wait_until(node_ready_or_kubelet_dead, 120, "the Node Ready")
        self.timings["node_ready"] = time.monotonic() - t0
        self.log(f"kubelet: Node {self.node_name} Ready ({self.timings['node_ready']:.1f} s)")

        # The user's side: label and annotate the node, then apply the manifests.
        self.install_tidemark()
        self.timings["up"] = time.monotonic() - t_all
        self.log(f"Tidemark running on the real node ({self.timings['tidemark_ready']:.1f} s after kubectl apply)")

    def _runc_wrapper(self) -> Path:
        """localcluster/runc_wrapper.py as an executable in the run dir (containerd execs it as runc)."""
        dst = self.run_dir / "runc"
        dst.write_text(
            (Path(__file__).parent / "runc_wrapper.py")
            .read_text()
            .replace("#!/usr/bin/python3", f"#!{sys.executable}", 1)
        )
        dst.chmod(0o755)
        return dst

    # --- the node's own files and processes --------------------------------------------------------
    def pod_cgroup(self, pod: dict[str, Any], controller: str = "cpu") -> str:
        qos = {"BestEffort": "besteffort", "Burstable": "burstable"}.get(pod["status"].get("qosClass", ""))
        base = CGROUP_BASE / controller / "kubepods"
        return str((base / qos if qos else base) / f"pod{pod['metadata']['uid']}")

    def container_cgroup(self, pod: dict[str, Any], controller: str = "cpu", index: int = 0) -> str:
        cid = pod["status"]["containerStatuses"][index]["containerID"].split("://", 1)[1]
        return os.path.join(self.pod_cgroup(pod, controller), cid)

    def read_files(self, paths: list[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for p in paths:
            try:
                out[p] = Path(p).read_text().strip()
            except OSError:
                out[p] = None
        return out

    def ctl(self, name: str, present: bool) -> str:
        path = CTL_DIR / name
        if present:
            CTL_DIR.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                CTL_DIR.rmdir()
        return str(path)

    def running_tasks(self) -> set[str]:
        return set(self.ctr("tasks", "ls", "-q").stdout.split())

    def probe(self, name: str, **kwargs: Any) -> dict[str, Any]:
        from localcluster import probe

        result: dict[str, Any] = probe.PROBES[name](**kwargs)
        return result

    # --- down ------------------------------------------------------------------------------------
    def _teardown(self, state: dict[str, Any]) -> list[str]:
        return teardown_state(state, self.log, kubectl=self.bins.get("kubectl"))


def teardown_state(state: dict[str, Any], log: Callable[[str], None], kubectl: str | None = None) -> list[str]:
    """Undo a real-node run from its state record (also the record a killed run left behind)."""
    problems: list[str] = []
    run_dir = state.get("run_dir", "")
    pids: dict[str, int] = state.get("pids") or {}
    api_dir = state.get("api_dir")
    kubeconfig = os.path.join(api_dir, "kubeconfig") if api_dir else ""
    kubectl = kubectl or str(cache_bin() / "kubectl")

    # 1. Nothing recreates pods; every pod deleted at once; kubelet kills the containers.
    for name in ("kube-controller-manager", "kube-scheduler"):
        if name in pids:
            _kill_pid(pids[name], run_dir)
    kubelet_up = "kubelet" in pids and alive(pids["kubelet"])
    if kubelet_up and kubeconfig and os.path.exists(kubeconfig) and os.path.exists(kubectl):
        base = [kubectl, f"--kubeconfig={kubeconfig}"]
        _run(
            [*base, "delete", "pods", "-A", "--all", "--grace-period=0", "--force", "--wait=false"],
            timeout=60,
            check=False,
        )
        sock = os.path.join(run_dir, "containerd", "containerd.sock")

        def no_containers() -> bool:
            out = _run(["ctr", "-a", sock, "-n", "k8s.io", "tasks", "ls", "-q"], check=False, timeout=20).stdout
            return not out.strip()

        with contextlib.suppress(TimeoutError):
            wait_until(no_containers, 40, "kubelet to stop every container", poll=0.5)
    # 2. kubelet, then containerd, then any shim of ours (they outlive containerd).
    for name in ("kubelet", "containerd"):
        if name in pids:
            _kill_pid(pids[name], run_dir, grace=15)
    for pid in _all_pids():
        cmd = _cmdline(pid)
        if "containerd-shim" in cmd and run_dir and run_dir in cmd:
            _kill_pid(pid, run_dir, grace=5)
    # Processes still in kubepods (containers whose shim died): by pid.
    for root in kubepods_roots():
        for pid in _cgroup_pids(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # 3. Mounts: under the run dir, kubelet's fixed dirs, the CNI network namespaces this run made.
    prefixes = [p for p in (run_dir, "/var/lib/kubelet", "/run/containerd") if p]
    before = state.get("netns_before")
    if os.path.isdir("/run/netns"):
        for ns in os.listdir("/run/netns"):
            if ns.startswith("cni-") and (before is None or ns not in before):
                prefixes.append(f"/run/netns/{ns}")
    for mp in _mounts_under(prefixes):
        if (
            _run(["umount", mp], check=False).returncode != 0
            and _run(["umount", "-l", mp], check=False).returncode != 0
        ):
            problems.append(f"mount {mp}")
    for p in prefixes:
        if p.startswith("/run/netns/"):
            with contextlib.suppress(OSError):
                os.unlink(p)
    # 4. cgroups leaf-first.
    for _ in range(20):
        roots = kubepods_roots()
        for root in roots:
            _cgroup_rmdir_tree(root)
        if not kubepods_roots():
            break
        time.sleep(0.25)
    problems += [f"cgroup {r}" for r in kubepods_roots()]
    # 5. The bridge (and the veths left on it go with their namespaces).
    bridge = state.get("bridge")
    if bridge and _run(["ip", "link", "show", bridge], check=False).returncode == 0:
        _run(["ip", "link", "delete", bridge], check=False)
        if _run(["ip", "link", "show", bridge], check=False).returncode == 0:
            problems.append(f"bridge {bridge}")
    # 6. Sysctls back.
    for k, v in (state.get("sysctls") or {}).items():
        _write_sysctl(k, v)
        if _read_sysctl(k) != v:
            problems.append(f"sysctl {k}")
    # 7. Host paths this run created.
    for p in state.get("created_paths") or []:
        if os.path.exists(p) and not _mounts_under([p]):
            shutil.rmtree(p, ignore_errors=True)
    # 8. The control plane last.
    if api_dir and os.path.exists(os.path.join(api_dir, "env")):
        _run(["bash", str(KUBE_SCRIPT), "stop", api_dir], timeout=90, check=False)
    left = [f"{n} pid {p}" for n, p in pids.items() if alive(p) and run_dir in _cmdline(p)]
    problems += left
    if problems:
        log(f"teardown left: {', '.join(problems)}")
    return problems


@contextlib.contextmanager
def running(run_dir: Path, log: Callable[[str], None] = lambda s: None, lock_wait: float = 0.0) -> Iterator[RealNode]:
    node = RealNode(run_dir=run_dir, log=log)
    node.up(lock_wait=lock_wait)
    try:
        yield node
    finally:
        node.down()


def main(argv: list[str] | None = None) -> int:
    """`python -m localcluster.realnode up|down|check DIR`: the cluster by hand (debugging)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("up", "down", "check", "scenario"):
        print("usage: python -m localcluster.realnode up DIR | scenario DIR | down | check", file=sys.stderr)
        return 2

    def say(s: str) -> None:
        print(f"realnode: {s}", file=sys.stderr, flush=True)

    if args[0] == "check":
        reason = host_is_supported()
        print(reason or "ok")
        return EXIT_UNSUPPORTED if reason else 0
    if args[0] == "down":
        if not STATE_PATH.exists():
            return 0
        problems = teardown_state(json.loads(STATE_PATH.read_text() or "{}"), say)
        STATE_PATH.unlink(missing_ok=True)
        return 1 if problems else 0

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)  # a background job starts with SIGINT ignored
    node = RealNode(
        run_dir=Path(args[1] if len(args) > 1 else "/tmp/tidemark-realnode"), log=say, agent_config=local_agent_config()
    )
    try:
        node.up()
    except Unsupported as e:
        say(str(e))
        return EXIT_UNSUPPORTED
    say(f"up: {json.dumps({k: round(v, 1) for k, v in node.timings.items()})}")
    if args[0] == "scenario":
        from localcluster import realscenario

        try:
            fig = realscenario.run(node, say)
        except KeyboardInterrupt:
            fig = None
        finally:
            t0 = time.monotonic()
            problems = node.down()
            say(f"down in {time.monotonic() - t0:.1f} s{'; left: ' + ', '.join(problems) if problems else ', clean'}")
        if fig is None:
            return 1
        print(fig.table(), flush=True)
        return 0 if fig.passed and not problems else 1
    say(f"KUBECONFIG={node.kubeconfig}; press Ctrl-C to tear down")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        t0 = time.monotonic()
        problems = node.down()
        say(f"down in {time.monotonic() - t0:.1f} s{'; left: ' + ', '.join(problems) if problems else ', clean'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
