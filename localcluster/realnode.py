"""A real one-node Kubernetes on this machine: the shipped image and manifests on a real kubelet.

Up (about 30-60 s once everything is built and cached):
1. one cluster per machine: an exclusive lock (`/run/tidemark-realnode.lock`), then the stale
   leftovers of a killed run (its state file) are torn down first;
2. the host sysctls kubelet changes are saved (`vm.overcommit_memory`, `kernel.panic`,
   `kernel.panic_on_oops`), and the host paths kubelet and containerd use that do not exist yet
   are remembered, so teardown removes exactly what this run created;
3. a bridge `tmbr0` with 10.244.99.1/24 (the pods' gateway) and 10.96.0.1/32 (the `kubernetes`
   Service IP), its MAC pinned (`pin_bridge_address`: a deleted pod no longer cuts the host off the
   others); pods reach the API server at the address their in-cluster config names, with no
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
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

from localcluster import byhand
from localcluster.cluster import (
    API_PORT,
    CTL_DIR,
    SERVICE_IP,
    WORKLOAD_IMAGE,
    LocalCluster,
    cni_conflist,
    image_refs,
    local_agent_config,
)
from localcluster.host import (
    KUBE_SCRIPT,
    REPO,
    alive,
    all_pids,
    cache_bin,
    cgroup_pids,
    cgroup_rmdir_tree,
    cmdline,
    ensure_kube_binaries,
    free_port,
    kill_pid,
    mounts_under,
    pin_bridge_address,
    read_sysctl,
    run,
    wait_until,
    write_sysctl,
)
from localcluster.host import Unsupported as Unsupported  # what `up()` raises, for the callers that import it here

#: bench_colocation.py (being rewritten by another change) imports `_run` from here: drop with that import
_run = run

OVERLAY: Final = REPO / "daemonset" / "overlays" / "local"
LOCK_PATH: Final = Path("/run/tidemark-realnode.lock")
STATE_PATH: Final = Path("/run/tidemark-realnode.json")
BRIDGE: Final = "tmbr0"
POD_SUBNET: Final = "10.244.99.0/24"
GATEWAY: Final = "10.244.99.1"
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
EXIT_UNSUPPORTED: Final = byhand.EXIT_UNSUPPORTED


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
        st = run(["dpkg-query", "-W", "-f=${db:Status-Status}", p], check=False).stdout
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
        if run(["apt-get", "install", *opts, *missing], timeout=900, check=False, env=env).returncode != 0:
            run(["apt-get", "update", "-qq", "-o", "DPkg::Lock::Timeout=600"], timeout=900, check=False)
            run(["apt-get", "install", *opts, *missing], timeout=900, env=env)
    finally:
        if made_rc:
            rc_path.unlink(missing_ok=True)




def kubepods_roots() -> list[Path]:
    """Every `kubepods` group kubelet (cgroupfs, cgroupRoot /) makes: one per v1 controller mount."""
    roots = []
    with contextlib.suppress(OSError):
        for entry in sorted(CGROUP_BASE.iterdir()):
            if entry.is_dir() and not entry.is_symlink() and (entry / "kubepods").is_dir():
                roots.append(entry / "kubepods")
    return roots




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

CNI_CONFLIST: Final = cni_conflist(BRIDGE, POD_SUBNET, GATEWAY)


@dataclass
class RealNode(LocalCluster):
    """The running one-node cluster on this machine: paths, pids and clients; `down()` undoes everything `up()` did."""

    LOCK: ClassVar[Path] = LOCK_PATH
    STATE: ClassVar[Path] = STATE_PATH
    OVERLAY_NAME: ClassVar[str] = "local"
    DESCRIPTION: ClassVar[str] = "cgroup v1, cgroupfs driver"
    CGROUP_VERSION: ClassVar[str] = "v1"
    CGROUP_DRIVER: ClassVar[str] = "cgroupfs"

    def host_reason(self) -> str:
        return host_is_supported()

    # --- paths ---------------------------------------------------------------------------------
    @property
    def sock(self) -> Path:
        return self.run_dir / "containerd" / "containerd.sock"

    def ctr(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(["ctr", "-a", str(self.sock), "-n", "k8s.io", *args], timeout=timeout, check=check)

    # --- up --------------------------------------------------------------------------------------
    def _up(self) -> None:
        t_all = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = self.run_dir.resolve()
        ensure_runtime(self.log)
        self.bins = ensure_kube_binaries(self.log)
        self._state = {
            "sysctls": {k: read_sysctl(k) for k in SYSCTLS},
            "created_paths": [p for p in FIXED_HOST_PATHS if not os.path.exists(p)],
            "netns_before": sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else None,
            "bridge": BRIDGE,
        }
        self._save_state()

        # Images first (cached by content hash; a first build takes minutes).
        self.build_images()

        t0 = time.monotonic()
        if run(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
            run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        pin_bridge_address(BRIDGE)
        run(["ip", "addr", "replace", f"{GATEWAY}/24", "dev", BRIDGE])
        run(["ip", "addr", "replace", f"{SERVICE_IP}/32", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
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
        self.ctr("images", "tag", "--force", *image_refs())
        self.timings["containerd"] = time.monotonic() - t0

        # kubelet.
        t0 = time.monotonic()
        kdir = self.run_dir / "kubelet"
        (kdir / "root").mkdir(parents=True, exist_ok=True)
        (kdir / "certs").mkdir(parents=True, exist_ok=True)
        (kdir / "config.yaml").write_text(KUBELET_CONFIG.format(port=free_port(), healthz=free_port()))
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
            kill_pid(pids[name], run_dir)
    kubelet_up = "kubelet" in pids and alive(pids["kubelet"])
    if kubelet_up and kubeconfig and os.path.exists(kubeconfig) and os.path.exists(kubectl):
        base = [kubectl, f"--kubeconfig={kubeconfig}"]
        run(
            [*base, "delete", "pods", "-A", "--all", "--grace-period=0", "--force", "--wait=false"],
            timeout=60,
            check=False,
        )
        sock = os.path.join(run_dir, "containerd", "containerd.sock")

        def no_containers() -> bool:
            out = run(["ctr", "-a", sock, "-n", "k8s.io", "tasks", "ls", "-q"], check=False, timeout=20).stdout
            return not out.strip()

        with contextlib.suppress(TimeoutError):
            wait_until(no_containers, 40, "kubelet to stop every container", poll=0.5)
    # 2. kubelet, then containerd, then any shim of ours (they outlive containerd).
    for name in ("kubelet", "containerd"):
        if name in pids:
            kill_pid(pids[name], run_dir, grace=15)
    for pid in all_pids():
        cmd = cmdline(pid)
        if "containerd-shim" in cmd and run_dir and run_dir in cmd:
            kill_pid(pid, run_dir, grace=5)
    # Processes still in kubepods (containers whose shim died): by pid.
    for root in kubepods_roots():
        for pid in cgroup_pids(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # 3. Mounts: under the run dir, kubelet's fixed dirs, the CNI network namespaces this run made.
    prefixes = [p for p in (run_dir, "/var/lib/kubelet", "/run/containerd") if p]
    before = state.get("netns_before")
    if os.path.isdir("/run/netns"):
        for ns in os.listdir("/run/netns"):
            if ns.startswith("cni-") and (before is None or ns not in before):
                prefixes.append(f"/run/netns/{ns}")
    for mp in mounts_under(prefixes):
        if (
            run(["umount", mp], check=False).returncode != 0
            and run(["umount", "-l", mp], check=False).returncode != 0
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
            cgroup_rmdir_tree(root)
        if not kubepods_roots():
            break
        time.sleep(0.25)
    problems += [f"cgroup {r}" for r in kubepods_roots()]
    # 5. The bridge (and the veths left on it go with their namespaces).
    bridge = state.get("bridge")
    if bridge and run(["ip", "link", "show", bridge], check=False).returncode == 0:
        run(["ip", "link", "delete", bridge], check=False)
        if run(["ip", "link", "show", bridge], check=False).returncode == 0:
            problems.append(f"bridge {bridge}")
    # 6. Sysctls back.
    for k, v in (state.get("sysctls") or {}).items():
        write_sysctl(k, v)
        if read_sysctl(k) != v:
            problems.append(f"sysctl {k}")
    # 7. Host paths this run created.
    for p in state.get("created_paths") or []:
        if os.path.exists(p) and not mounts_under([p]):
            shutil.rmtree(p, ignore_errors=True)
    # 8. The control plane last.
    if api_dir and os.path.exists(os.path.join(api_dir, "env")):
        run(["bash", str(KUBE_SCRIPT), "stop", api_dir], timeout=90, check=False)
    left = [f"{n} pid {p}" for n, p in pids.items() if alive(p) and run_dir in cmdline(p)]
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
    """`python -m localcluster.realnode up|scenario|down|check DIR`: the cluster by hand (localcluster/byhand.py)."""
    kind = byhand.Kind(
        prog="realnode",
        make=lambda run_dir, log: RealNode(run_dir=run_dir, log=log, agent_config=local_agent_config()),
        default_dir="/tmp/tidemark-realnode",
        state=STATE_PATH,
        teardown=teardown_state,
        check=host_is_supported,
    )
    return byhand.main(kind, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
