"""An idle agent's cost on a hollow node: CPU (% of one core) and RSS of one `tidemark-agent run` (issue 34).

Setup, as on one node of the fleet (localcluster/fleet.py, docs/scale.md): a real kube-apiserver + etcd
(hack/kube-apiserver.sh, RBAC, the manifests the fleet applies: namespace, CRDs, priority classes, the agent's
ClusterRole), per arm one Node labelled `volcano.sh/oversubscription=true` and `volcano.sh/colocation=true` with a
hollow node's 1 core and 3.75 GiB, and 10 pods bound to it as bench_fleet spreads them (7 online `web` pods of
50m labelled idle/busy/spiky, 3 offline pods of 100 batch-cpu in a PodGroup), their status Running with a
container ID as a kubelet reports it. Each node's host is a SyntheticHost (localcluster/fleet_host.py) fed by the
fleet's own load model (LoadModel.on_pod / tick every 0.5 s). The agent runs exactly as `Fleet._tidemark` starts
it: the shipped defaults, user `tidemark:agent:<node>` in group `tidemark:agents`, a kubeconfig with the server's
CA, `--log-format=json`, its host through `--cgroup-root`/`--proc-root`.

Arms: `--arm NAME=TREE` runs the agent from the source tree TREE (PYTHONPATH and cwd; e.g. a `git worktree` of
the commit before a change), each arm on its own node, all arms at the same time, so that they share the
machine's load; `--arm-env NAME:VAR=VALUE` adds to one arm's environment. Default: one arm, this checkout.

Measured after `--settle` seconds: per round of `--window` seconds, the agent's utime + stime from
/proc/<pid>/stat over wall time (fraction of one core), and VmRSS at the round's end. Printed as JSON: per arm the
rounds, their median and [min, max].

Run: python benchmarks/bench_agent_idle.py [--arm new=. --arm old=/tmp/before] [--settle 60] [--window 120]
     [--rounds 3]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from localcluster.files import parse_env_file  # noqa: E402
from localcluster.fleet import (  # noqa: E402
    HOLLOW_CPU,
    HOLLOW_MEMORY,
    TICK,
    cpu_seconds,
    rss_bytes,
    self_signed_cert,
)
from localcluster.fleet_host import SyntheticHost  # noqa: E402
from localcluster.fleet_load import LOAD_LABEL, LoadModel  # noqa: E402

SCRIPT = REPO / "hack" / "kube-apiserver.sh"
NS = "fleet"
MANIFESTS = [
    "daemonset/base/namespace.yaml",
    "daemonset/crds",
    "daemonset/scheduler/priorityclasses.yaml",
    "daemonset/agent/rbac.yaml",
]
AGENT_MAIN = "import sys; from agent.cli import main; sys.exit(main())"  # what the tidemark-agent script runs
#: `--profile`: the same, with one cProfile per thread (cProfile alone sees the main thread only), each thread's
#: stats written to $BENCH_PROFILE.<thread> at exit (start-up included: read per-call counts over the run)
PROFILE_MAIN = """
import cProfile, os, sys, threading
profs = []
_run = threading.Thread.run
def run(self):
    p = cProfile.Profile(); profs.append((self.name, p)); p.enable()
    try:
        _run(self)
    finally:
        p.disable()
threading.Thread.run = run
main_prof = cProfile.Profile(); profs.append(("main", main_prof))
from agent.cli import main
main_prof.enable()
try:
    rc = main()
finally:
    main_prof.disable()
    for i, (name, p) in enumerate(profs):
        p.dump_stats(f"{os.environ['BENCH_PROFILE']}.{i}-{name}")
sys.exit(rc)
"""


def online_pod(node: str, i: int, load: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{node}-web-{i}",
            "namespace": NS,
            "labels": {"app": f"web-{i}", LOAD_LABEL: load},
            "annotations": {"volcano.sh/qos-level": "2"},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "volcano",
            "priorityClassName": "volcano-production",
            "containers": [
                {
                    "name": "web",
                    "image": "registry.invalid/web",
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                }
            ],
        },
    }


def offline_pod(node: str, i: int, group: str) -> dict[str, Any]:
    batch = {"kubernetes.io/batch-cpu": "100", "kubernetes.io/batch-memory": "128Mi"}
    return {
        "metadata": {
            "name": f"{node}-job-{i}",
            "namespace": NS,
            "annotations": {"volcano.sh/qos-level": "-1", "scheduling.k8s.io/group-name": group},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "volcano",
            "priorityClassName": "volcano-free",
            "containers": [
                {"name": "w", "image": "registry.invalid/batch", "resources": {"requests": batch, "limits": batch}}
            ],
        },
    }


def running_status(pod: dict[str, Any], cid: str) -> dict[str, Any]:
    """The status a hollow kubelet reports for a started pod."""
    name = pod["spec"]["containers"][0]["name"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "status": {
            "phase": "Running",
            "startTime": now,
            "podIP": "10.0.0.1",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": name,
                    "containerID": cid,
                    "image": "x",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": now}},
                }
            ],
        }
    }


class Bench:
    def __init__(self, arms: dict[str, Path], work: Path, profile: Path | None = None) -> None:
        self.arms, self.work, self.profile = arms, work, profile
        #: arm -> extra environment of its agent (`--arm-env`)
        self.arm_env: dict[str, dict[str, str]] = {}
        self.api_dir = work / "api"
        self.hosts: dict[str, SyntheticHost] = {}
        self.load = LoadModel(self.hosts)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.procs_other: list[subprocess.Popen[bytes]] = []
        #: the hosts in memory, the state dirs (journal fsync'd) on disk, as the fleet has them
        shm = Path("/dev/shm")
        self.hosts_dir = Path(
            tempfile.mkdtemp(prefix="tidemark-idle-hosts-", dir=shm if os.access(shm, os.W_OK) else work)
        )
        self.stop = threading.Event()
        self.env: dict[str, str] = {}

    def start_api(self) -> None:
        users: list[str] = []
        for arm in self.arms:
            users += ["--user", f"tidemark:agent:{self.node(arm)}=tidemark:agents"]
        users += ["--user", "tidemark-webhook=system:masters"]
        subprocess.run(
            [
                "bash",
                str(SCRIPT),
                "start",
                str(self.api_dir),
                "--authz",
                "RBAC",
                "--watch-pid",
                str(os.getpid()),
                *users,
            ],
            check=True,
            timeout=300,
            capture_output=True,
        )
        self.env = parse_env_file(self.api_dir / "env")
        kubectl = Path(self.env["KUBE_APISERVER_BIN"]).parent / "kubectl"
        if not kubectl.exists():
            subprocess.run(["bash", str(SCRIPT), "build-kubectl"], check=True, timeout=3600, capture_output=True)
        for m in MANIFESTS:
            how = "-k" if (REPO / m).is_dir() else "-f"
            subprocess.run(
                [str(kubectl), "--kubeconfig", self.env["KUBECONFIG"], "apply", how, str(REPO / m)],
                check=True,
                timeout=120,
                capture_output=True,
            )

    @staticmethod
    def node(arm: str) -> str:
        return f"idle-{arm}"

    def kubeconfig(self, user: str) -> str:
        """The user's kubeconfig with the server's CA, as Fleet._kubeconfig writes it."""
        src = Path(self.env["KUBECONFIG_DIR"]) / f"{user}.kubeconfig"
        dst = self.work / (user.replace(":", "_") + ".kubeconfig")
        ca = base64.b64encode(Path(self.env["CA_FILE"]).read_bytes()).decode()
        dst.write_text(src.read_text().replace("insecure-skip-tls-verify: true", f"certificate-authority-data: {ca}"))
        return str(dst)

    def populate(self) -> None:
        from tidemark.kube.client import new_api_client, request_json

        api = new_api_client(self.env["KUBECONFIG"], qps=100, burst=100, user_agent="bench-agent-idle")
        request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
        for q in ("default", "batch"):
            request_json(
                api,
                "POST",
                "/apis/scheduling.volcano.sh/v1beta1/queues",
                body={
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": q},
                    "spec": {"weight": 1, "reclaimable": True},
                },
            )
        for arm in self.arms:
            node = self.node(arm)
            body = {
                "metadata": {
                    "name": node,
                    "labels": {
                        "volcano.sh/oversubscription": "true",
                        "volcano.sh/colocation": "true",
                        "kubernetes.io/hostname": node,
                    },
                },
                "status": {
                    "capacity": {"cpu": str(HOLLOW_CPU), "memory": str(HOLLOW_MEMORY), "pods": "110"},
                    "allocatable": {"cpu": str(HOLLOW_CPU), "memory": str(HOLLOW_MEMORY), "pods": "110"},
                },
            }
            request_json(api, "POST", "/api/v1/nodes", body=body)
            self.hosts[node] = SyntheticHost(str(self.hosts_dir / node), HOLLOW_CPU, HOLLOW_MEMORY, HOLLOW_CPU * 1000)
            group = f"{node}-job"
            request_json(
                api,
                "POST",
                f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups",
                body={
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "PodGroup",
                    "metadata": {"name": group, "namespace": NS},
                    "spec": {"minMember": 3, "queue": "batch"},
                },
            )
            pods = [online_pod(node, i, ("idle", "busy", "spiky")[i % 3]) for i in range(7)]
            pods += [offline_pod(node, i, group) for i in range(3)]
            for k, pod in enumerate(pods):
                request_json(api, "POST", f"/api/v1/namespaces/{NS}/pods", body=pod)
                cid = f"containerd://{len(self.hosts):02d}{k:062x}"
                running = request_json(
                    api,
                    "PATCH",
                    f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}/status",
                    body=running_status(pod, cid),
                    content_type="application/merge-patch+json",
                )
                self.load.on_pod("MODIFIED", None, running)
        api.close()

    def start_controller(self) -> None:
        """The NodeReport controller (`tidemark-scheduler webhook`), which applies each agent's report to its Node
        (without it the agent retries its write every few seconds), as Fleet._tidemark starts it."""
        key, cert = self.work / "webhook.key", self.work / "webhook.crt"
        self_signed_cert(key, cert)
        argv = [
            str(Path(sys.executable).parent / "tidemark-scheduler"),
            "webhook",
            f"--kubeconfig={self.kubeconfig('tidemark-webhook')}",
            "--listen-address=127.0.0.1:0",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
        ]
        with open(self.work / "webhook.log", "wb") as logf:
            self.procs_other.append(
                subprocess.Popen(
                    argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
                )
            )

    def start_agents(self) -> None:
        for arm, tree in self.arms.items():
            node = self.node(arm)
            state = self.work / "state" / node
            state.mkdir(parents=True)
            env = {**os.environ, "PYTHONPATH": str(tree), **self.arm_env.get(arm, {})}
            if self.profile is not None:
                env["BENCH_PROFILE"] = str(self.profile / arm)
            argv = [
                sys.executable,
                "-c",
                AGENT_MAIN if self.profile is None else PROFILE_MAIN,
                "run",
                f"--node-name={node}",
                f"--kubeconfig={self.kubeconfig(f'tidemark:agent:{node}')}",
                *self.hosts[node].cli_args(),
                f"--state-dir={state}",
                "--listen-address=127.0.0.1:0",
                "--log-format=json",
            ]
            with open(self.work / f"agent-{arm}.log", "wb") as logf:
                self.procs[arm] = subprocess.Popen(
                    argv,
                    cwd=tree,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )

    def tick(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(TICK):
            now = time.monotonic()
            self.load.tick(now - last, now)
            last = now

    def measure(self, settle: float, window: float, rounds: int) -> dict[str, Any]:
        time.sleep(settle)
        #: CPU-seconds from the start through the settling (the start-up's cost)
        startup = {a: round(cpu_seconds(p.pid) or 0.0, 2) for a, p in self.procs.items()}
        samples: dict[str, dict[str, list[float]]] = {a: {"cpu_pct": [], "rss_mib": []} for a in self.arms}
        for _ in range(rounds):
            start = {a: (cpu_seconds(p.pid), time.monotonic()) for a, p in self.procs.items()}
            time.sleep(window)
            for arm, p in self.procs.items():
                c0, t0 = start[arm]
                c1, t1, rss = cpu_seconds(p.pid), time.monotonic(), rss_bytes(p.pid)
                if c0 is None or c1 is None or rss is None or p.poll() is not None:
                    raise RuntimeError(f"agent {arm} exited (log: {self.work / f'agent-{arm}.log'})")
                samples[arm]["cpu_pct"].append(round(100 * (c1 - c0) / (t1 - t0), 3))
                samples[arm]["rss_mib"].append(round(rss / 2**20, 1))
        return {
            arm: {
                k: {"median": round(statistics.median(v), 3), "interval": [min(v), max(v)], "rounds": v}
                for k, v in s.items()
            }
            | {"tree": str(self.arms[arm]), "settle_cpu_s": startup[arm]}
            for arm, s in samples.items()
        }

    def close(self) -> None:
        self.stop.set()
        procs = [*self.procs.values(), *self.procs_other]
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        if self.env or self.api_dir.exists():  # a start that failed half-way may have left a server up
            subprocess.run(["bash", str(SCRIPT), "stop", str(self.api_dir)], timeout=60, capture_output=True)
        shutil.rmtree(self.hosts_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--arm", action="append", default=[], metavar="NAME=TREE", help="an agent from source tree TREE")
    ap.add_argument(
        "--arm-env",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE",
        help="an environment variable of arm NAME's agent (e.g. old:MALLOC_ARENA_MAX=2)",
    )
    ap.add_argument("--settle", type=float, default=60.0)
    ap.add_argument("--window", type=float, default=120.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", type=Path, metavar="DIR", help="cProfile every agent thread into DIR/ARM.*")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (the agents' logs)")
    args = ap.parse_args()
    arms = {name: Path(tree).resolve() for name, tree in (a.split("=", 1) for a in args.arm)} or {"head": REPO}
    if subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True).returncode != 0:
        print("bench_agent_idle: no kube-apiserver binaries (hack/kube-apiserver.sh env); skipped", file=sys.stderr)
        return 0
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-idle-"))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    bench = Bench(arms, work, args.profile.resolve() if args.profile else None)
    for item in args.arm_env:
        name, _, assignment = item.partition(":")
        var, _, value = assignment.partition("=")
        bench.arm_env.setdefault(name, {})[var] = value
    # SIGTERM (a CI timeout, `kill`) runs the cleanup too: the agents run in process groups of their own, which
    # the API server's --watch-pid does not reach
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        bench.start_api()
        bench.populate()
        ticker = threading.Thread(target=bench.tick, name="load", daemon=True)
        ticker.start()
        bench.start_controller()
        bench.start_agents()
        figures = bench.measure(args.settle, args.window, args.rounds)
    finally:
        bench.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"settle_s": args.settle, "window_s": args.window, "arms": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
