"""A fleet of hollow nodes, each with its own Tidemark agent, against one API server (docs/scale.md).

What runs, every part a real process except the load model:
- etcd + kube-apiserver 1.20 (hack/kube-apiserver.sh start, with an audit log: every request's user, verb and
  resource, which is how each client's API traffic is counted) and kube-controller-manager (Deployments, node
  lifecycle, garbage collection);
- N hollow nodes: kubemark `--morph=kubelet` (a real kubelet, a fake container runtime, 1 core and 3.75 GiB as
  kubemark's fake cAdvisor reports), labelled `volcano.sh/oversubscription=true` and `volcano.sh/colocation=true`
  (eviction past the watermarks applies), each its own user `system:node:<node>` and its own /tmp;
- the shipped scheduler (`tidemark-scheduler run` with the Deployment's args and the ConfigMap's conf) and the
  NodeReport controller (`tidemark-scheduler webhook`, which applies each agent's NodeReport to its Node);
- one `tidemark-agent run` per hollow node with the shipped defaults, as a systemd agent authenticates
  (user `tidemark:agent:<node>`, group `tidemark:agents`, the shipped ClusterRole), sensing its node's synthetic
  host (localcluster/fleet_host.py) through `--cgroup-root`/`--proc-root`;
- the load model (a thread here; localcluster/fleet_load.py): a watch of every pod keeps each node's host in
  step with its pods and burns their CPU by their `fleet.tidemark.dev/load` label.
"""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3

from localcluster.files import parse_env_file
from localcluster.fleet_host import SyntheticHost
from localcluster.fleet_load import LoadModel
from tidemark.kube.client import KubeError, new_api_client, request_json
from tidemark.kube.reflector import Reflector
from tidemark.kube.resources import PODS

REPO = Path(__file__).resolve().parents[1]
KUBE_SCRIPT = REPO / "hack" / "kube-apiserver.sh"
BIN = Path(sys.executable).parent
#: what kubemark's fake cAdvisor reports (pkg/kubelet/cadvisor/testing/cadvisor_fake.go)
HOLLOW_CPU, HOLLOW_MEMORY = 1, 4026531840
#: seconds between two agents' starts, at least
AGENT_START_GAP_S = 0.3
#: agents starting at once, at most: an agent counts as started when its /readyz answers (a Python start is about a
#: CPU-second, and on 2 cores at 75 and 100 nodes a start paced by the clock alone drove the load average to 42-167
#: and the API server's lists past their timeouts; paced by readiness, the start takes what the machine has)
AGENT_STARTS_IN_FLIGHT = 2
#: seconds an agent may take to become ready before the next start goes ahead anyway (it is then waited for as a
#: publisher, like every agent, by `_tidemark`)
AGENT_READY_TIMEOUT_S = 60.0
#: how often the load model advances the counters: a kernel counter moves continuously, these in steps, so a 1-s
#: agent sample whose read falls across a step holds one step more or less: +-100 % at 1 Hz, +-50 % at 2 Hz (a CI
#: fleet run: a surge node's online usage read at half for one sample every 15-20 s), +-20 % at 5 Hz. 5 Hz costs
#: 0.3 ms per host per step here (10 pods): 3 % of a core at 20 nodes, 15 % at 100
TICK = 0.2
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the test API server's own certificate
MANIFESTS = [
    "daemonset/base/namespace.yaml",
    "daemonset/crds",
    "daemonset/scheduler/priorityclasses.yaml",
    "daemonset/agent/rbac.yaml",
]


def node_name(i: int) -> str:
    return f"hollow-{i:04d}"


def agent_user(node: str) -> str:
    return f"tidemark:agent:{node}"


def kubelet_user(node: str) -> str:
    return f"system:node:{node}"


#: the lowest port `free_ports` hands out
PORTS_FROM = 10000
#: the ports this process has handed out: a port is given once (the processes that bind them start later)
_GIVEN: set[int] = set()


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The first port of the kernel's ephemeral range (32768 when unreadable)."""
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n: int, low: int | None = None) -> list[int]:
    """`n` ports free now and below the kernel's ephemeral range: a port taken from inside it (a bind to port 0,
    closed, bound again later) can go to an outgoing connection meanwhile; with 20 hollow kubelets and agents
    connecting to the API server, a CI run's agent hollow-0013 exited on "Address already in use". The scan starts
    at a place set by the process id, so two harnesses at once rarely try the same ports; a port is handed out once
    per process (the calls come before the processes that bind them start)."""
    top = ephemeral_low() if low is None else low
    span = max(1, top - PORTS_FROM)
    first = PORTS_FROM + (os.getpid() * 97) % span
    ports: list[int] = []
    for k in range(span):
        port = PORTS_FROM + (first - PORTS_FROM + k) % span
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == n:
            _GIVEN.update(ports)
            return ports
    raise RuntimeError(f"fewer than {n} free ports between {PORTS_FROM} and {top}")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_signed_cert(key: Path, cert: Path) -> None:
    """A 2-day EC key and self-signed certificate for 127.0.0.1 (the NodeReport controller's serving pair)."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def agent_ready(port: int) -> bool:
    """The agent at 127.0.0.1:`port` answers /readyz with 200 (its API answered; it is through its start)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return s.recv(64).startswith((b"HTTP/1.0 200", b"HTTP/1.1 200"))
    except OSError:
        return False


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass
class Proc:
    role: str
    node: str
    popen: subprocess.Popen[bytes]
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None


class Fleet:
    """`start()` brings N hollow nodes with agents up; `stop()` ends every process. Use as a context manager."""

    def __init__(self, nodes: int, run_dir: Path, log: Callable[[str], None] = print, seed: int = 1) -> None:
        self.n, self.run_dir, self.log, self.seed = nodes, run_dir, log, seed
        self.nodes = [node_name(i) for i in range(nodes)]
        self.procs: list[Proc] = []
        self.hollow_restarts = 0  # `_restart_hollow_nodes`
        self.api_dir = run_dir / "api"
        self.audit_log = run_dir / "audit.log"
        self.env: dict[str, str] = {}
        self.hosts: dict[str, SyntheticHost] = {}
        self.load = LoadModel(self.hosts, seed)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.api: Any = None
        self.pod_reflector: Reflector | None = None
        self.timings: dict[str, float] = {}
        self.scheduler_metrics = ""

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # --- bring up -----------------------------------------------------------------------------------
    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self._control_plane()
        self.timings["control_plane_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        self._hollow_nodes()
        self.timings["nodes_ready_s"] = time.monotonic() - t1
        t2 = time.monotonic()
        self._tidemark()
        self.timings["tidemark_s"] = time.monotonic() - t2

    def _bin(self, name: str) -> str:
        path = Path(self.env["KUBE_APISERVER_BIN"]).parent / name
        if not path.exists():
            what = {
                "kubemark": "build-kubemark",
                "kubectl": "build-kubectl",
                "kube-controller-manager": "build-controller-manager",
            }[name]
            self.log(f"building {name} (hack/kube-apiserver.sh {what}, once per machine)")
            subprocess.run(["bash", str(KUBE_SCRIPT), what], check=True, timeout=3600, stdout=subprocess.DEVNULL)
        return str(path)

    def _spawn(self, role: str, node: str, argv: list[str], env: dict[str, str] | None = None,
               mode: str = "wb") -> Proc:  # fmt: skip
        logf = open(self.run_dir / "logs" / f"{role}-{node or 'cluster'}.log", mode)  # noqa: SIM115 (the child's)
        popen = subprocess.Popen(
            argv,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        logf.close()
        proc = Proc(role, node, popen, argv, env)
        self.procs.append(proc)
        return proc

    def _restart_hollow_nodes(self) -> None:
        """A dead hollow kubelet starts again (as a kubemark cluster's ReplicaSet would): kubemark 1.20's fake runtime
        can die of "concurrent map writes" (`FakeOS.Create`, pkg/kubelet/container/testing/os.go); counted, logged."""
        for p in [q for q in self.procs if q.role == "kubemark" and q.popen.poll() is not None]:
            if self._stop.is_set():
                break
            self.log(f"hollow node {p.node} exited {p.popen.returncode}: started again (log kubemark-{p.node}.log)")
            self._spawn(p.role, p.node, p.argv, p.env, mode="ab")
            self.procs = [q for q in self.procs if q is not p]
            self.hollow_restarts += 1

    def _control_plane(self) -> None:
        (self.run_dir / "logs").mkdir(exist_ok=True)
        users: list[str] = []
        for node in self.nodes:
            users += [
                "--user",
                f"{agent_user(node)}=tidemark:agents",
                "--user",
                f"{kubelet_user(node)}=system:nodes,system:masters",
            ]
        users += [
            "--user",
            "tidemark-controller-manager=system:masters",
            "--user",
            "fleet-workload=system:masters",
            "--user",
            "tidemark-webhook=system:masters",
            "--user",
            "tidemark-scheduler-fleet=system:masters",
        ]
        subprocess.run(
            [
                "bash",
                str(KUBE_SCRIPT),
                "start",
                str(self.api_dir),
                "--authz",
                "RBAC",
                "--service-accounts",
                "--audit-log",
                str(self.audit_log),
                "--watch-pid",
                str(os.getpid()),
                *users,
            ],
            check=True,
            timeout=300,
            capture_output=True,
        )
        self.env = parse_env_file(self.api_dir / "env")
        self.kubeconfigs = Path(self.env["KUBECONFIG_DIR"])
        kubectl = self._bin("kubectl")
        for m in MANIFESTS:
            how = "-k" if (REPO / m).is_dir() else "-f"
            subprocess.run(
                [kubectl, "--kubeconfig", self.env["KUBECONFIG"], "apply", how, str(REPO / m)],
                check=True,
                timeout=120,
                capture_output=True,
            )
        self.api = new_api_client(
            self._kubeconfig("fleet-workload"), qps=1000, burst=1000, pool_size=16, user_agent="fleet-workload"
        )
        for q in ("default", "batch"):
            self._create(
                "/apis/scheduling.volcano.sh/v1beta1/queues",
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": q},
                    "spec": {"weight": 1, "reclaimable": True},
                },
            )
        self._spawn(
            "kube-controller-manager",
            "",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={self._kubeconfig('tidemark-controller-manager')}",
                f"--service-account-private-key-file={self.api_dir / 'sa.key'}",
                f"--root-ca-file={self.env['CA_FILE']}",
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route,-ttl",
                # a large cluster's settings: the defaults (20 qps) make the ReplicaSet controller the bottleneck
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--concurrent-deployment-syncs=10",
                "--concurrent-replicaset-syncs=10",
                "-v=1",
            ],
        )

    def _kubeconfig(self, user: str) -> str:
        """The user's kubeconfig, under a name without ':' (a KUBECONFIG-style path list splits on it)."""
        src = self.kubeconfigs / f"{user}.kubeconfig"
        dst = self.run_dir / "kubeconfigs" / (user.replace(":", "_") + ".kubeconfig")
        if not dst.exists():  # the server's CA, as a node's kubeconfig has (not insecure-skip-tls-verify)
            dst.parent.mkdir(exist_ok=True)
            ca = base64.b64encode(Path(self.env["CA_FILE"]).read_bytes()).decode()
            dst.write_text(
                src.read_text().replace("insecure-skip-tls-verify: true", f"certificate-authority-data: {ca}")
            )
        return str(dst)

    def _create(self, path: str, body: dict[str, Any]) -> None:
        try:
            request_json(self.api, "POST", path, body=body)
        except KubeError as exc:
            if "already exists" not in str(exc):
                raise

    def _hollow_nodes(self) -> None:
        kubemark = self._bin("kubemark")
        ports = free_ports(2 * self.n)
        for i, node in enumerate(self.nodes):
            # every hollow kubelet serves its fake runtime at the fixed /tmp/kubelet_remote.sock
            # (pkg/kubelet/cri/remote/fake/endpoint.go): each gets a private /tmp, as each gets its own pod in a
            # kubemark cluster; its kubeconfig is read from there
            kubeconfig = Path(self._kubeconfig(kubelet_user(node)))
            self._spawn(
                "kubemark",
                node,
                [
                    "unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                    'mount -t tmpfs -o size=64m tmpfs /tmp && printf %s "$KUBECONFIG_TEXT" >/tmp/kubeconfig '
                    '&& exec "$@"',
                    "hollow-node", kubemark, "--morph=kubelet",
                    f"--name={node}",
                    "--kubeconfig=/tmp/kubeconfig",
                    f"--kubelet-port={ports[2 * i]}",
                    f"--kubelet-read-only-port={ports[2 * i + 1]}",
                    "--node-labels=volcano.sh/oversubscription=true,volcano.sh/colocation=true",
                    "--v=0",
                ],
                env={"KUBECONFIG_TEXT": kubeconfig.read_text()},
            )
        self._wait(lambda: self._ready_nodes() >= self.n, f"{self.n} hollow nodes Ready", 60 + 2 * self.n)
        self.log(f"{self.n} hollow nodes Ready")

    def _ready_nodes(self) -> int:
        nodes = request_json(self.api, "GET", "/api/v1/nodes")["items"]
        return sum(
            1
            for n in nodes
            for c in n["status"].get("conditions") or []
            if c["type"] == "Ready" and c["status"] == "True"
        )

    def _tidemark(self) -> None:
        import yaml

        work = self.run_dir / "tidemark"
        work.mkdir(exist_ok=True)
        key, cert = work / "webhook.key", work / "webhook.crt"
        self_signed_cert(key, cert)
        port, sched_port = free_ports(2)
        self._spawn(
            "webhook",
            "",
            [
                str(BIN / "tidemark-scheduler"),
                "webhook",
                f"--kubeconfig={self._kubeconfig('tidemark-webhook')}",
                f"--listen-address=127.0.0.1:{port}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
            ],
        )
        dep = yaml.safe_load((REPO / "daemonset/scheduler/deployment.yaml").read_text())
        container = dep["spec"]["template"]["spec"]["containers"][0]
        conf = yaml.safe_load((REPO / "daemonset/scheduler/configmap.yaml").read_text())["data"][
            "volcano-scheduler.conf"
        ]
        #: the conf the scheduler re-reads every schedule period (bench_fleet's load-step arms rewrite it)
        self.scheduler_conf = work / "volcano-scheduler.conf"
        self.scheduler_conf.write_text(conf)
        #: where the scheduler serves /metrics (bench_fleet samples the rescheduling plugin's gauges in a load step)
        self.scheduler_metrics = f"http://127.0.0.1:{sched_port}/metrics"
        args = [
            str(BIN / "tidemark-scheduler"),
            *container["command"][1:],
            f"--kubeconfig={self._kubeconfig('tidemark-scheduler-fleet')}",
        ]
        for a in container["args"]:
            if a.startswith("--scheduler-conf="):
                a = f"--scheduler-conf={work / 'volcano-scheduler.conf'}"
            elif a.startswith("--listen-address="):
                a = f"--listen-address=127.0.0.1:{sched_port}"
            args.append(a)
        self._spawn("scheduler", "", args)
        t_agents = time.monotonic()
        hosts_root = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else self.run_dir
        self.hosts_dir = Path(hosts_root) / f"tidemark-fleet-{os.getpid()}"
        agent_ports = free_ports(self.n)
        starting: list[tuple[int, float]] = []  # (port, started at) of agents not yet ready
        for i, node in enumerate(self.nodes):
            starting = self._await_starts(starting, AGENT_STARTS_IN_FLIGHT - 1)
            host = SyntheticHost(str(self.hosts_dir / node), HOLLOW_CPU, HOLLOW_MEMORY, HOLLOW_CPU * 1000)
            self.hosts[node] = host
            state = work / "state" / node
            state.mkdir(parents=True, exist_ok=True)
            self._spawn(
                "agent",
                node,
                [
                    str(BIN / "tidemark-agent"),
                    "run",
                    f"--node-name={node}",
                    f"--kubeconfig={self._kubeconfig(agent_user(node))}",
                    *host.cli_args(),
                    f"--state-dir={state}",
                    f"--listen-address=127.0.0.1:{agent_ports[i]}",
                    "--log-format=json",
                ],
            )
            # a DaemonSet starts each agent on its own node's CPU; here they share this machine's, and a
            # Python start is about a CPU-second: paced by readiness, so that a large fleet's start is not a storm
            starting.append((agent_ports[i], time.monotonic()))
            time.sleep(AGENT_START_GAP_S)
        self._await_starts(starting, 0)
        self.timings["agents_started_s"] = round(time.monotonic() - t_agents, 1)
        self.pod_reflector = Reflector.for_resource(self.api, PODS, on_change=self.load.on_pod, timeout_seconds=300)
        self.pod_reflector.start()
        ticker = threading.Thread(target=self._tick, name="fleet-load", daemon=True)
        ticker.start()
        self._threads.append(ticker)
        self._wait(lambda: self.published_nodes() >= self.n, "every agent's batch-cpu on its Node", 120 + self.n)
        self.log(f"{self.n} agents publishing")

    def _await_starts(self, starting: list[tuple[int, float]], at_most: int) -> list[tuple[int, float]]:
        """The agents of `starting` not yet ready, once at most `at_most` are left (or the rest are past
        AGENT_READY_TIMEOUT_S: a slow one does not hold the fleet's start, `_tidemark` waits for its publication)."""
        while True:
            now = time.monotonic()
            starting = [(p, t) for p, t in starting if now - t < AGENT_READY_TIMEOUT_S and not agent_ready(p)]
            if len(starting) <= at_most:
                return starting
            time.sleep(0.2)

    def _tick(self) -> None:
        last = checked = time.monotonic()
        while not self._stop.wait(TICK):
            now = time.monotonic()
            self.load.tick(now - last, now)
            last = now
            if now - checked >= 1.0:
                checked = now
                self._restart_hollow_nodes()

    def published_nodes(self) -> int:
        nodes = request_json(self.api, "GET", "/api/v1/nodes")["items"]
        return sum(1 for n in nodes if "kubernetes.io/batch-cpu" in (n["status"].get("allocatable") or {}))

    def _wait(self, cond: Callable[[], bool], what: str, timeout: float) -> None:
        """Polls `cond` (an API error is a "not yet": a loaded API server may time out) until `timeout`."""
        deadline = time.monotonic() + timeout

        def holds() -> bool:
            try:
                return cond()
            except KubeError:
                return False

        while not holds():
            dead = [p for p in self.procs if p.popen.poll() is not None
                    and not (p.role == "kubemark" and self._threads)]  # the ticker restarts those  # fmt: skip
            if dead:
                p = dead[0]
                raise RuntimeError(
                    f"{p.role} {p.node} exited {p.popen.returncode} while waiting for {what} "
                    f"(log: {self.run_dir / 'logs'})"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.5)

    # --- observe ------------------------------------------------------------------------------------
    def pids(self, role: str) -> dict[str, int]:
        return {p.node: p.popen.pid for p in self.procs if p.role == role and p.popen.poll() is None}

    def control_plane_pids(self) -> dict[str, int]:
        return {"kube-apiserver": int(self.env["KUBE_APISERVER_PID"]), "etcd": int(self.env["ETCD_PID"])}

    # --- tear down ----------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        if self.pod_reflector is not None:
            self.pod_reflector.stop()
        for p in self.procs:
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.procs:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait(5)
        if self.env:
            subprocess.run(
                ["bash", str(KUBE_SCRIPT), "stop", str(self.api_dir)], timeout=60, capture_output=True, check=False
            )
        if getattr(self, "hosts_dir", None) is not None:
            shutil.rmtree(self.hosts_dir, ignore_errors=True)


def read_audit(path: Path, since: float = 0.0, until: float = math.inf) -> list[dict[str, Any]]:
    """Audit events (one per request; a watch when it starts) with their wall-clock time in [since, until)."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            verb, stage = ev.get("verb"), ev.get("stage")
            if (verb == "watch") != (stage == "ResponseStarted"):
                continue
            ts = ev.get("stageTimestamp") or ev.get("requestReceivedTimestamp") or ""
            t = _rfc3339(ts)
            if since <= t < until:
                ev["_t"] = t
                out.append(ev)
    return out


def _rfc3339(ts: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
