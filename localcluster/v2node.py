"""A production-shaped node in a VM: systemd as PID 1, cgroup v2 only, containerd with `SystemdCgroup = true`,
kubelet 1.20.2 with `--cgroup-driver=systemd`, registered to the control plane on this machine.

Every current distribution and kubeadm's default run kubelet like this; the host's real node
(localcluster/realnode.py) is cgroup v1 with cgroupfs. Same interface (`LocalCluster`), so the scenario
(localcluster/realscenario.py) and the tests run on either.

Up (about 2-4 minutes under QEMU's TCG once everything is built and cached):
1. one v2 node per machine: an exclusive lock (`/run/tidemark-v2node.lock`), then what a killed run left
   (its state file) is torn down first; it does not conflict with the host's real node (own lock, own ports,
   nothing on the host's network);
2. QEMU, Debian's kernel and mmdebstrap (`hack/v2node.sh install`), the kube binaries and the project image
   as for the real node, and the node's root filesystem (`hack/v2node.sh rootfs`: Debian bookworm with
   systemd, containerd, runc, CNI plugins, qemu-guest-agent, python3; cached by content hash);
3. the control plane ON THE HOST (etcd + kube-apiserver on 127.0.0.1 at a free port, RBAC and
   ServiceAccount tokens, kube-controller-manager, kube-scheduler): the measured recipe, and under TCG
   (about ten times slower) an apiserver in the guest would spend its two vCPUs; a TAP link joins this
   machine (198.18.255.253, where the API server listens) and the node (198.18.255.254), and this machine
   routes the node's pod subnet (198.19.255.0/24) through it, so the API server reaches the pods (the
   admission webhook) and kubelet as on a real cluster; the pods reach the API server at the `kubernetes`
   Service address 10.96.0.1:443, DNAT'ed by the node to the host's end (no kube-proxy);
4. the run's files in a share (9p, read-only in the guest at /mnt/tidemark): containerd's configuration
   (CRI: `SystemdCgroup = true`, the local sandbox image, overlayfs, bridge CNI), kubelet's
   (`cgroupDriver: systemd` in /var/lib/kubelet/config.yaml, as kubeadm writes it, and the flag), its
   kubeconfig and binary, the images, and the scripts the guest's `tidemark-bootstrap.service` and
   `tidemark-images.service` run before containerd and kubelet start;
5. QEMU (TCG, 2 vCPUs, 4 GiB, the root image with `-snapshot`: nothing written to the cached image)
   boots; commands reach the guest through its guest agent (localcluster/guest.py);
6. Node Ready, then the user's side as on the real node: the Node labelled and annotated, `kubectl
   apply -k daemonset/overlays/local-v2` (the cgroup-v2-systemd overlay with the local image): the agent
   as its DaemonSet's pod, the scheduler as its Deployment.

Down: the controllers stop, QEMU quits (the guest and everything in it go with it), the TAP device is
deleted (its address and route with it), etcd and the API server stop, the share's copies are removed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

from localcluster import byhand
from localcluster.cluster import (
    CTL_DIR,
    SERVICE_IP,
    WORKLOAD_IMAGE,
    LocalCluster,
    cni_conflist,
    image_refs,
    local_agent_config,
)
from localcluster.guest import Done, GuestAgent, GuestError
from localcluster.host import (
    KUBE_SCRIPT,
    REPO,
    Unsupported,
    alive,
    cmdline,
    ensure_kube_binaries,
    kill_pid,
    run,
    wait_until,
)
from localcluster.view import Measure, SampledMeasure

V2_SCRIPT: Final = REPO / "hack" / "v2node.sh"
NODE_NAME: Final = "tidemark-v2node"
LOCK_PATH: Final = Path("/run/tidemark-v2node.lock")
STATE_PATH: Final = Path("/run/tidemark-v2node.json")
SHARE_IN_GUEST: Final = "/mnt/tidemark"
OUT_IN_GUEST: Final = "/mnt/tidemark-out"  # writable: the run directory's out/
# The TAP link between this machine and the node (the benchmark range, RFC 2544; hack/v2node.sh configures the
# node's end): the API server listens on the host's end, and the host routes the node's pod subnet through it,
# so the API server reaches the pods (the admission webhook) and kubelet, as on a real cluster.
TAP: Final = "tmv2tap0"
HOST_IP: Final = "198.18.255.253"
NODE_IP: Final = "198.18.255.254"
POD_SUBNET: Final = "198.19.255.0/24"
GATEWAY: Final = "198.19.255.1"
BRIDGE: Final = "tmbr0"
CGROUP: Final = "/sys/fs/cgroup"
VM_CPUS: Final = 2
VM_MEMORY: Final = "4G"

CONTAINERD_CONFIG: Final = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
"""

# kubeadm's layout: the config in /var/lib/kubelet/config.yaml (the agent's `--cgroup-driver auto` reads it
# when no kubepods cgroup exists yet). kubelet's own periods stay at their defaults: under TCG kubelet alone
# keeps most of a vCPU busy while pods start.
KUBELET_CONFIG: Final = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cgroupsPerQOS: true
failSwapOn: false
makeIPTablesUtilChains: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
resolvConf: /etc/resolv.conf
serializeImagePulls: false
"""

KUBELET_ARGS: Final = (
    "--kubeconfig=/etc/kubernetes/kubelet.kubeconfig --config=/var/lib/kubelet/config.yaml "
    "--cgroup-driver=systemd --container-runtime=remote "
    "--container-runtime-endpoint=unix:///run/containerd/containerd.sock "
    f"--hostname-override={NODE_NAME} --node-ip={NODE_IP} --runtime-request-timeout=5m -v=1"
)

CNI_CONFLIST: Final = cni_conflist(BRIDGE, POD_SUBNET, GATEWAY)  # the host routes the pod subnet to the node

BOOTSTRAP: Final = """#!/bin/sh
# tidemark-bootstrap.service (before containerd and kubelet): this run's configuration (localcluster/v2node.py).
set -eu
S={share}
. $S/node.env
install -D -m 0644 $S/etc/containerd.toml /etc/containerd/config.toml
install -D -m 0644 $S/etc/cni.conflist /etc/cni/net.d/10-tidemark.conflist
install -D -m 0644 $S/etc/kubelet.yaml /var/lib/kubelet/config.yaml
install -D -m 0600 $S/etc/kubelet.kubeconfig /etc/kubernetes/kubelet.kubeconfig
install -D -m 0644 $S/etc/kubelet.env /etc/default/kubelet
install -D -m 0755 $S/bin/kubelet /usr/local/bin/kubelet
# containerd's root: the images, imported on the host (hack/v2node.sh images), on the second disk
mkdir -p /var/lib/containerd
mount -o noatime /dev/vdb /var/lib/containerd
# the run's writable share (the live view's samples)
mkdir -p {out}
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 tidemark-out {out}
# Pods reach the API server at the kubernetes Service address (no kube-proxy): the host's end of the TAP link.
iptables -t nat -A PREROUTING -d {service_ip}/32 -p tcp --dport 443 -j DNAT --to-destination {host}:$API_PORT
iptables -t nat -A OUTPUT -d {service_ip}/32 -p tcp --dport 443 -j DNAT --to-destination {host}:$API_PORT
"""

IMAGES: Final = """#!/bin/sh
# tidemark-images.service (after containerd, before kubelet): the images are there (imported on the host into
# containerd's root on the second disk, hack/v2node.sh images; under TCG an import here takes minutes).
set -eu
S={share}
. $S/node.env
ctr -n k8s.io images ls -q | grep -qx "$IMAGE_LOCAL"
ctr -n k8s.io images ls -q | grep -qx "$IMAGE_WORKLOAD"
"""

READ_FILES: Final = (
    'for p; do if c=$(base64 -w0 -- "$p" 2>/dev/null); then printf "%s\\t+%s\\n" "$p" "$c"; '
    'else printf "%s\\t-\\n" "$p"; fi; done'
)


def _env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def host_is_supported() -> str:
    """'' when this machine can run the v2 node, else the reason."""
    if sys.platform != "linux":
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (QEMU's network and share are fine unprivileged, but the root filesystem is built as root)"
    if not os.path.exists("/dev/net/tun") or shutil.which("ip") is None:
        return "needs /dev/net/tun and iproute2 (the TAP link between this machine and the node)"
    done = subprocess.run(["bash", str(V2_SCRIPT), "env"], capture_output=True, text=True, check=False)
    if done.returncode != 0 and shutil.which("apt-get") is None:
        return "needs " + done.stderr.strip().replace("\n", "; ")
    return ""


def systemd_escape(uid: str) -> str:
    """A pod UID as kubelet's systemd driver writes it in a slice name (`-` -> `_`)."""
    return uid.replace("-", "_")


@dataclass
class V2Node(LocalCluster):
    """The running v2 node (QEMU) and its control plane on this machine; `down()` undoes everything `up()` did."""

    node_name: str = NODE_NAME
    guest: GuestAgent | None = field(default=None, repr=False)

    LOCK: ClassVar[Path] = LOCK_PATH
    STATE: ClassVar[Path] = STATE_PATH
    OVERLAY_NAME: ClassVar[str] = "local-v2"
    DESCRIPTION: ClassVar[str] = "cgroup v2, systemd driver"
    CGROUP_VERSION: ClassVar[str] = "v2"
    CGROUP_DRIVER: ClassVar[str] = "systemd"
    SLOWDOWN: ClassVar[float] = 4.0
    REACTION_BOUND_S: ClassVar[float | None] = None
    #: Under TCG Tidemark's own pods (agent, scheduler, webhook: in kubepods, on the node's 2 vCPUs) use 13-45 % of
    #: the node at rest (measured in `TIDEMARK_NODE=v2 make run`, 2026-11-28): with the demo's 30 / 15 % the node
    #: flipped between evicting and open before any offline job started. 60 / 40 keeps the idle node and the two
    #: 0.1-core jobs under the high one and an online spike to a full core (50 %) over it.
    DEMO_CPU_WATERMARKS: ClassVar[tuple[int, int] | None] = (60, 40)

    # --- paths ---------------------------------------------------------------------------------------
    @property
    def share(self) -> Path:
        return self.run_dir / "share"

    @property
    def out(self) -> Path:
        return self.run_dir / "out"

    @property
    def qga_sock(self) -> Path:
        return self.run_dir / "qga.sock"

    @property
    def qmp_sock(self) -> Path:
        return self.run_dir / "qmp.sock"

    def host_reason(self) -> str:
        return host_is_supported()

    # --- up ------------------------------------------------------------------------------------------
    def _up(self) -> None:
        t_all = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = self.run_dir.resolve()
        self._state = {"kind": "v2", "share": str(self.share)}
        self._save_state()

        t0 = time.monotonic()
        env = self._tools()
        self.bins = ensure_kube_binaries(self.log)
        self.build_images()
        rootfs = run(["bash", str(V2_SCRIPT), "rootfs"], timeout=1800).stdout.strip()
        full, local = image_refs()
        disk = run(
            ["bash", str(V2_SCRIPT), "images", self.images["tidemark"], self.images["workload"], full, local],
            timeout=900,
        ).stdout.strip()
        self.timings["prepare"] = time.monotonic() - t0

        self._state["tap"] = TAP
        self._save_state()
        _tap_up()
        self.start_control_plane(HOST_IP, None)
        self._write_share()

        t0 = time.monotonic()
        self._start_vm(env, rootfs, disk)
        self.guest = GuestAgent(self.qga_sock)

        def guest_up() -> bool:
            self._check_node()
            return self.guest is not None and self.guest.ping(5)

        wait_until(guest_up, 900, "the VM to boot (its guest agent to answer)", poll=1.0)
        self.timings["boot"] = time.monotonic() - t0
        self.log(f"VM: systemd up, guest agent answering ({self.timings['boot']:.1f} s after QEMU started)")

        def ready() -> bool:
            self._check_node()
            return self._node_ready()

        try:
            wait_until(ready, 900, "the Node Ready", poll=2.0)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.diagnose()}") from None
        self.timings["node_ready"] = time.monotonic() - t0
        self.log(f"kubelet (systemd driver): Node {self.node_name} Ready ({self.timings['node_ready']:.1f} s "
                 "after QEMU started)")

        try:
            self.install_tidemark(timeout=900)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.diagnose()}") from None
        self.timings["up"] = time.monotonic() - t_all
        self.log(f"Tidemark running on the v2 node ({self.timings['tidemark_ready']:.1f} s after kubectl apply)")

    def _tools(self) -> dict[str, str]:
        done = run(["bash", str(V2_SCRIPT), "env"], check=False)
        if done.returncode != 0:
            self.log("installing QEMU, Debian's kernel and mmdebstrap (hack/v2node.sh install, once per machine)")
            inst = run(["bash", str(V2_SCRIPT), "install"], timeout=1800, check=False)
            if inst.returncode != 0:
                raise Unsupported(inst.stderr.strip().splitlines()[-1] if inst.stderr.strip() else "install failed")
            done = run(["bash", str(V2_SCRIPT), "env"])
        return _env_lines(done.stdout)

    def _write_share(self) -> None:
        s = self.share
        shutil.rmtree(s, ignore_errors=True)
        for d in ("etc", "bin"):
            (s / d).mkdir(parents=True)
        _, local = image_refs()
        port = self.api_url.rsplit(":", 1)[1]
        (s / "node.env").write_text(f"API_PORT={port}\nIMAGE_LOCAL={local}\nIMAGE_WORKLOAD={WORKLOAD_IMAGE}\n")
        fmt = {"share": SHARE_IN_GUEST, "service_ip": SERVICE_IP, "host": HOST_IP, "out": OUT_IN_GUEST}
        (s / "bootstrap.sh").write_text(BOOTSTRAP.format(**fmt))
        (s / "images.sh").write_text(IMAGES.format(**fmt))
        (s / "etc" / "containerd.toml").write_text(CONTAINERD_CONFIG.format(sandbox=WORKLOAD_IMAGE))
        (s / "etc" / "cni.conflist").write_text(json.dumps(CNI_CONFLIST, indent=1))
        (s / "etc" / "kubelet.yaml").write_text(KUBELET_CONFIG)
        (s / "etc" / "kubelet.env").write_text(f'KUBELET_ARGS="{KUBELET_ARGS}"\n')
        (s / "etc" / "kubelet.kubeconfig").write_text(self.guest_kubeconfig("admin"))
        _link(Path(self.bins["kubelet"]), s / "bin" / "kubelet")
        shutil.copy(REPO / "localcluster" / "probe.py", s / "probe.py")

    def guest_kubeconfig(self, user: str) -> str:
        """A kubeconfig for `user` (a token user of hack/kube-apiserver.sh) as the guest reaches the API server."""
        token = self.api_env[f"{user.upper().replace('-', '_')}_TOKEN"]
        server = self.api_url
        return (
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: tidemark\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n"
            f"users:\n- name: {user}\n  user:\n    token: {token}\n"
            f"contexts:\n- name: {user}\n  context:\n    cluster: tidemark\n    user: {user}\n"
            f"current-context: {user}\n"
        )

    def _start_vm(self, env: dict[str, str], rootfs: str, disk: str) -> None:
        for p in (self.qga_sock, self.qmp_sock):
            p.unlink(missing_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)
        argv = [
            env["QEMU"],
            "-name", f"tidemark-v2node,process=tidemark-v2node {self.run_dir}",
            "-accel", "tcg,thread=multi",
            "-cpu", "max",
            "-smp", str(VM_CPUS),
            "-m", VM_MEMORY,
            "-kernel", env["KERNEL"],
            "-initrd", env["INITRD"],
            "-append", env["APPEND"],
            "-drive", f"file={rootfs},if=virtio,format=raw,snapshot=on,cache=unsafe",
            "-drive", f"file={disk},if=virtio,format=raw,snapshot=on,cache=unsafe",
            "-netdev", f"tap,id=n0,ifname={TAP},script=no,downscript=no",
            "-device", "virtio-net-pci,netdev=n0",
            "-virtfs", f"local,path={self.share},mount_tag=tidemark,security_model=none,readonly=on",
            "-virtfs", f"local,path={self.out},mount_tag=tidemark-out,security_model=none",
            "-chardev", f"socket,id=qga0,path={self.qga_sock},server=on,wait=off",
            "-device", "virtio-serial-pci",
            "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
            "-qmp", f"unix:{self.qmp_sock},server=on,wait=off",
            "-display", "none",
            "-serial", f"file:{self.run_dir / 'serial.log'}",
            "-no-reboot",
        ]
        self._start("qemu", argv)

    def _check_node(self) -> None:
        pid = self.pids.get("qemu")
        if pid is None or not alive(pid):
            raise RuntimeError(f"the VM exited (console: {self.run_dir / 'serial.log'}):\n{self._serial_tail()}")

    def _serial_tail(self, n: int = 30) -> str:
        try:
            lines = (self.run_dir / "serial.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def diagnose(self) -> str:
        """What the guest says about its units and kubelet (for a failure message)."""
        if self.guest is None:
            return self._serial_tail()
        with contextlib.suppress(GuestError, TimeoutError):
            return self.sh(
                "systemctl --failed --no-legend; journalctl -u kubelet -u containerd -u tidemark-bootstrap "
                "-u tidemark-images --no-pager -n 40 -o cat",
                timeout=60,
                check=False,
            ).out
        return self._serial_tail()

    # --- the guest -----------------------------------------------------------------------------------
    def sh(self, script: str, timeout: float = 120.0, check: bool = True) -> Done:
        """`sh -c script` on the node (as root)."""
        assert self.guest is not None, "the VM is not up"
        return self.guest.sh(script, timeout=timeout, check=check)

    def run(self, argv: list[str], timeout: float = 120.0, stdin: str | None = None) -> Done:
        assert self.guest is not None, "the VM is not up"
        return self.guest.run(argv, timeout=timeout, stdin=stdin)

    def pod_cgroup(self, pod: dict[str, Any], controller: str = "cpu") -> str:
        qos = {"BestEffort": "besteffort", "Burstable": "burstable"}.get(pod["status"].get("qosClass", ""))
        uid = systemd_escape(pod["metadata"]["uid"])
        if qos is None:
            return f"{CGROUP}/kubepods.slice/kubepods-pod{uid}.slice"
        return f"{CGROUP}/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice"

    def container_cgroup(self, pod: dict[str, Any], controller: str = "cpu", index: int = 0) -> str:
        cid = pod["status"]["containerStatuses"][index]["containerID"].split("://", 1)[1]
        return f"{self.pod_cgroup(pod)}/cri-containerd-{cid}.scope"

    def read_files(self, paths: list[str]) -> dict[str, str | None]:
        done = self.run(["/bin/sh", "-c", READ_FILES, "sh", *paths], timeout=60)
        out: dict[str, str | None] = dict.fromkeys(paths)
        for line in done.out.splitlines():
            path, _, value = line.partition("\t")
            if value.startswith("+"):
                out[path] = base64.b64decode(value[1:]).decode(errors="replace").strip()
        return out

    def ctl(self, name: str, present: bool) -> str:
        path = f"{CTL_DIR}/{name}"
        if present:
            self.sh(f"mkdir -p {CTL_DIR} && touch {path}")
        else:
            self.sh(f"rm -f {path}; rmdir {CTL_DIR} 2>/dev/null; true")
        return path

    def running_tasks(self) -> set[str]:
        return set(self.sh("ctr -n k8s.io tasks ls -q", timeout=60).out.split())

    def ctr(self, *args: str, timeout: float = 120, check: bool = True) -> Done:
        return self.guest_ctr(*args, timeout=timeout, check=check)

    def guest_ctr(self, *args: str, timeout: float = 120, check: bool = True) -> Done:
        done = self.run(["ctr", "-n", "k8s.io", *args], timeout=timeout)
        if check and not done.ok:
            raise GuestError(f"ctr {' '.join(args)} exited {done.rc}: {done.err.strip()[-1000:]}")
        return done

    def probe(self, name: str, **kwargs: Any) -> dict[str, Any]:
        timeout = float(kwargs.get("timeout", 10.0)) + 60.0
        done = self.run(["python3", f"{SHARE_IN_GUEST}/probe.py", name, json.dumps(kwargs)], timeout=timeout)
        if not done.ok:
            raise GuestError(f"probe {name} exited {done.rc}: {done.err.strip()[-1000:]}")
        result: dict[str, Any] = json.loads(done.out.strip().splitlines()[-1])
        return result

    def measure(self) -> Measure:
        """The live view's counters, from a sampler in the guest (a transient unit running probe.py's `sampler`
        into the writable share) that the view reads on this side."""
        path = self.out / "measure.json"
        args = json.dumps({"out": f"{OUT_IN_GUEST}/measure.json"})
        self.sh(f"systemctl stop tidemark-measure 2>/dev/null; systemd-run --unit=tidemark-measure --collect "
                f"python3 {SHARE_IN_GUEST}/probe.py sampler '{args}'")
        return SampledMeasure(path)

    def systemctl(self, *args: str, timeout: float = 180.0, check: bool = True) -> Done:
        return self.sh("systemctl " + " ".join(args), timeout=timeout, check=check)

    # --- down ----------------------------------------------------------------------------------------
    def _teardown(self, state: dict[str, Any]) -> list[str]:
        if self.guest is not None:
            self.guest.close()
        return teardown_state(state, self.log)


def _tap_up() -> None:
    """This machine's end of the TAP link, and the route to the node's pods through it."""
    if run(["ip", "link", "show", TAP], check=False).returncode != 0:
        run(["ip", "tuntap", "add", "dev", TAP, "mode", "tap"])
    run(["ip", "addr", "replace", f"{HOST_IP}/30", "dev", TAP])
    run(["ip", "link", "set", TAP, "up"])
    run(["ip", "route", "replace", POD_SUBNET, "via", NODE_IP, "dev", TAP, "onlink"])


def _link(src: Path, dst: Path) -> None:
    """A hard link where the file system allows it (the share holds the kubelet binary, the images), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _qmp_quit(sock: str, timeout: float = 5.0) -> bool:
    """Asks QEMU to quit through its QMP socket (the guest's disk is a throwaway snapshot: no clean shutdown needed)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(sock)
            f = s.makefile("rw")
            f.readline()
            f.write(json.dumps({"execute": "qmp_capabilities"}) + "\n")
            f.flush()
            f.readline()
            f.write(json.dumps({"execute": "quit"}) + "\n")
            f.flush()
            f.readline()
        return True
    except (OSError, ValueError):
        return False


def teardown_state(state: dict[str, Any], log: Callable[[str], None]) -> list[str]:
    """Undo a v2-node run from its state record (also the record a killed run left behind)."""
    problems: list[str] = []
    run_dir = state.get("run_dir", "")
    pids: dict[str, int] = state.get("pids") or {}
    api_dir = state.get("api_dir")
    for name in ("kube-controller-manager", "kube-scheduler"):
        if name in pids:
            kill_pid(pids[name], run_dir)
    qemu = pids.get("qemu")
    if qemu is not None and alive(qemu) and run_dir and run_dir in cmdline(qemu):
        _qmp_quit(os.path.join(run_dir, "qmp.sock"))
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: not alive(qemu), 15, "QEMU to quit", poll=0.1)
        kill_pid(qemu, run_dir, grace=10)
    if api_dir and os.path.exists(os.path.join(api_dir, "env")):
        run(["bash", str(KUBE_SCRIPT), "stop", api_dir], timeout=90, check=False)
    share = state.get("share")
    if share and os.path.isdir(share):
        shutil.rmtree(share, ignore_errors=True)
    tap = state.get("tap")
    if tap and run(["ip", "link", "show", tap], check=False).returncode == 0:
        run(["ip", "link", "delete", tap], check=False)  # its address and the route go with it
        if run(["ip", "link", "show", tap], check=False).returncode == 0:
            problems.append(f"tap {tap}")
    for p in ("qga.sock", "qmp.sock"):
        if run_dir:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(run_dir, p))
    problems += [f"{n} pid {p}" for n, p in pids.items() if alive(p) and run_dir and run_dir in cmdline(p)]
    if problems:
        log(f"teardown left: {', '.join(problems)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """`python -m localcluster.v2node up|scenario|down DIR`: the v2 node by hand (localcluster/byhand.py)."""
    kind = byhand.Kind(
        prog="v2node",
        make=lambda run_dir, log: V2Node(run_dir=run_dir, log=log, agent_config=local_agent_config()),
        default_dir="/tmp/tidemark-v2node",
        state=STATE_PATH,
        teardown=teardown_state,
    )
    return byhand.main(kind, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
