"""End-to-end binds per second against a real kube-apiserver 1.20: tidemark-scheduler vs kube-scheduler 1.20.2
vs a bind-only client (the ceiling).

    python benchmarks/bench_e2e_binds.py [--nodes 100] [--pods 2000] [--rounds 2] [--json OUT] [--plot PNG]

What is measured (docs/benchmarks-e2e.md): a private kube-apiserver + etcd (hack/kube-apiserver.sh
start) with N Ready nodes (32 cpu, 128Gi, 110 pods); for each contender and round, P pending pods
(100m cpu, 128Mi) are created in a fresh namespace BEFORE the contender starts, then it is started as
a process and a watch in this process records when each pod's spec.nodeName is set.
Throughput = pods / (last bind - first bind), the definition the kube-scheduler figure (570-890
pods/s) used; "start to last bind" (process start, cache sync, scheduling, binding) is reported too.
Contenders, each round in alternating order:
- tidemark: `tidemark-scheduler run` exactly as the shipped Deployment runs it
  (daemonset/scheduler/deployment.yaml's command and args, the ConfigMap's conf, leader election on;
  only --kubeconfig added and the listener on a free loopback port); `tidemark@DIR` runs the same
  with the code of another source tree (a `git archive` of an older commit) for A/B rounds;
- kube-scheduler 1.20.2 from the same Debian source tree (`hack/kube-apiserver.sh build-scheduler`),
  default profile, `--kube-api-qps=1000 --kube-api-burst=1000`, leader election off;
- bind-only clients, no scheduling at all, each its own process: `bind-py:C`, Tidemark's own
  asynchronous binder (tidemark.kube.binding, C connections, the client `run` builds) fed every bind
  at once, i.e. the scheduler minus scheduling; and benchmarks/bindonly (Go standard library, built
  with Debian's golang-go; list, bodies and TLS connections made before the first bind) over HTTP/2
  (`bind-go:C` one multiplexed connection as client-go, `bind-go:CxK` K connections) or HTTP/1.1
  keep-alive (`bind-go-h1:C`, C connections). The ceiling of a round is the fastest of them in that
  round. Without Go, `bind-only:C` (Python threads) stands in for the Go clients.
Per round it also records the CPU milliseconds per bind of the contender, the API server and etcd
in the window first bind .. last bind (/proc/<pid>/stat), and the load average.
The second part measures the scheduler's snapshot cost per session at several sizes in-process
(no API server): the first session parses every pod, later ones reuse the parse cache.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import urllib3  # noqa: E402

from tidemark.kube.client import ApiStatusError, KubeError, new_api_client, request, request_json  # noqa: E402
from tidemark.kube.reflector import Reflector  # noqa: E402
from tidemark.kube.resources import NODES, PODS  # noqa: E402

SCRIPT = REPO / "hack" / "kube-apiserver.sh"
CLI = Path(sys.executable).with_name("tidemark-scheduler")
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)


def sh(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False)


def wait(cond: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def env_of(data_dir: Path) -> dict[str, str]:
    out = {}
    for line in (data_dir / "env").read_text().splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def register_crds(api: Any) -> None:
    import yaml

    for path in sorted((REPO / "daemonset" / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                request_json(api, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=doc)

    def served() -> bool:
        try:
            request_json(api, "GET", "/apis/scheduling.volcano.sh/v1beta1/queues")
            request_json(api, "GET", "/apis/scheduling.volcano.sh/v1beta1/podgroups")
            return True
        except KubeError:
            return False

    wait(served, "the CRDs served", 60)


def create_nodes(api: Any, n: int) -> None:
    res = {"cpu": "32", "memory": "128Gi", "pods": "110"}

    def one(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"bench-node-{i:04d}", "labels": {"kubernetes.io/hostname": f"bench-node-{i:04d}"}},
            "status": {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]},
        }
        request_json(api, "POST", NODES.collection_path(), body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


def create_pods(api: Any, namespace: str, n: int, scheduler: str) -> None:
    def one(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{i:05d}", "namespace": namespace},
            "spec": {
                "schedulerName": scheduler,
                "containers": [{"name": "c", "image": "registry.invalid/pause",
                                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
            },
        }
        for attempt in range(5):
            try:
                request_json(api, "POST", PODS.collection_path(namespace), body=body)
                return
            except KubeError:
                if attempt == 4:
                    raise
                time.sleep(0.2)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


class BindClock:
    """A watch of the namespace: monotonic time at which each pod's nodeName was first seen set, and
    the CPU time of the processes in `pids` (the contender, the API server, etcd) when the first and
    the last of `expect` binds were seen: CPU spent in the window first bind .. last bind."""

    def __init__(self, api: Any, namespace: str, expect: int = 0) -> None:
        self.bound: dict[str, float] = {}
        self.expect = expect
        self.pids: dict[str, int] = {}
        self.cpu_first: dict[str, float | None] = {}
        self.cpu_last: dict[str, float | None] = {}
        self._lock = threading.Lock()
        self.reflector = Reflector.for_resource(api, PODS, namespace=namespace, on_change=self._on, timeout_seconds=300)

    def _on(self, _etype: str, _old: Any, new: Any) -> None:
        if new is not None and (new.get("spec") or {}).get("nodeName"):
            name = new["metadata"]["name"]
            with self._lock:
                if name in self.bound:
                    return
                self.bound[name] = time.monotonic()
                n = len(self.bound)
            if n == 1:
                self.cpu_first = {k: cpu_seconds(pid) for k, pid in self.pids.items()}
            if n == self.expect:
                self.cpu_last = {k: cpu_seconds(pid) for k, pid in self.pids.items()}

    def count(self) -> int:
        with self._lock:
            return len(self.bound)

    def window_cpu_ms_per_bind(self) -> dict[str, float]:
        """CPU milliseconds per bind of each watched process in the window (first to last bind)."""
        out = {}
        for k in self.pids:
            a, b = self.cpu_first.get(k), self.cpu_last.get(k)
            if a is not None and b is not None and self.expect:
                out[k] = round((b - a) * 1000 / self.expect, 3)
        return out


def bind_only(kubeconfig: str, namespace: str, nodes: int, concurrency: int) -> None:
    """A Python fallback when there is no Go: no scheduling at all, only the binding POSTs,
    round-robin over the nodes, from `concurrency` threads on one pooled official client. Run in its
    own process (`--bind-only`), as the schedulers are."""
    api = new_api_client(kubeconfig, qps=0, burst=1, pool_size=concurrency)
    try:
        names = sorted(p["metadata"]["name"] for p in
                       request_json(api, "GET", PODS.collection_path(namespace))["items"])

        def one(k: int) -> None:
            name = names[k]
            body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": f"bench-node-{k % nodes:04d}"}}
            request(api, "POST", PODS.object_path(name, namespace, "binding"), body=body)

        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(len(names))))
    finally:
        api.close()


def bind_py(kubeconfig: str, namespace: str, nodes: int, connections: int) -> int:
    """`bind-py:C`: Tidemark's own binder (tidemark.kube.binding.AsyncBinder, C connections) with
    no scheduling: the client `run` builds (scheduler_api_client: QPS/burst 2000/2000 and the
    throttled credential refresh), one list of the namespace's pods, then every bind submitted at
    once, round-robin over the nodes, as a session that placed them all would submit them. The
    scheduler minus scheduling, so a lower bound on what a bind-only client can do by construction.
    Prints one JSON line like the Go client's: binds, errors, seconds (first submit to last
    answer), the process's CPU seconds in the bind phase."""
    from scheduler_ext.run.client import scheduler_api_client, throttle_refresh_hook
    from scheduler_ext.run.options import RunOptions
    from tidemark.kube.binding import AsyncBinder
    from tidemark.kube.eviction import BindOutcome, BindResult

    options = RunOptions(kubeconfig=kubeconfig)
    api = scheduler_api_client(options)
    throttle_refresh_hook(api)
    try:
        pods = sorted((p["metadata"]["name"], p["metadata"].get("uid")) for p in
                       request_json(api, "GET", PODS.collection_path(namespace))["items"])
        binder = AsyncBinder(api.configuration, connections=connections, limiter=api.limiter,
                             user_agent=str(api.user_agent))
        left = [len(pods)]
        errors: list[str] = []
        lock = threading.Lock()
        finished = threading.Event()

        def done(result: BindResult | None) -> None:
            with lock:
                if result is None or result.outcome is not BindOutcome.BOUND:
                    errors.append(str(result))
                left[0] -= 1
                if left[0] == 0:
                    finished.set()

        cpu0, t0 = time.process_time(), time.monotonic()
        for k, (name, uid) in enumerate(pods):
            binder.submit(namespace, name, uid, f"bench-node-{k % nodes:04d}", fence=lambda: True, done=done)
        finished.wait(600)
        seconds, cpu = time.monotonic() - t0, time.process_time() - cpu0
        binder.stop()
        print(json.dumps({"binds": len(pods), "errors": len(errors), "seconds": seconds, "cpu_seconds": cpu,
                          "connections": connections, "first_errors": errors[:5]}), flush=True)
        return 2 if errors else 0
    finally:
        api.close()


BINDONLY_SRC = REPO / "benchmarks" / "bindonly"
DEPLOYMENT = REPO / "daemonset" / "scheduler" / "deployment.yaml"
CONFIGMAP = REPO / "daemonset" / "scheduler" / "configmap.yaml"


def build_bindonly(cache: Path) -> str | None:
    """The Go ceiling client (benchmarks/bindonly, standard library only), built with Debian's
    golang-go into `cache`, named by a hash of its source (so checkouts of different versions
    sharing the cache do not run each other's build); None (the Python client is used) when there is
    no Go toolchain."""
    go = shutil.which("go")
    if go is None:
        return None
    src = sorted(f for f in BINDONLY_SRC.glob("*") if f.is_file())
    digest = hashlib.sha256(b"".join(f.name.encode() + b"\0" + f.read_bytes() for f in src)).hexdigest()[:12]
    out = cache / f"bindonly-{digest}"
    if out.exists():
        return str(out)
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0",
           "GOCACHE": str(cache / "go-build"), "GO111MODULE": "on"}
    tmp = cache / f".bindonly-{digest}.{os.getpid()}"
    done = subprocess.run([go, "build", "-o", str(tmp), "."], cwd=BINDONLY_SRC, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode != 0:
        print(f"building benchmarks/bindonly failed, using the Python ceiling client: {done.stderr.strip()}")
        return None
    tmp.replace(out)
    return str(out)


def shipped_tidemark_args(kubeconfig: str, workdir: Path, checkout: str = "") -> list[str]:
    """`tidemark-scheduler run` exactly as the shipped Deployment runs it (daemonset/scheduler:
    its command, args and ConfigMap conf), with only what a process outside a pod needs changed:
    --kubeconfig added, the conf path pointing at a copy of the ConfigMap's conf, the metrics
    listener on a free loopback port. `checkout`: run the code of another source tree (e.g. a
    `git archive` of an older commit, contender `tidemark@DIR`) with this venv's libraries."""
    import yaml

    dep = yaml.safe_load(DEPLOYMENT.read_text())
    container = dep["spec"]["template"]["spec"]["containers"][0]
    conf = yaml.safe_load(CONFIGMAP.read_text())["data"]["volcano-scheduler.conf"]
    conf_path = workdir / "volcano-scheduler.conf"
    conf_path.write_text(conf)
    cli = [str(CLI)] if not checkout else [
        sys.executable, "-c", f"import sys; sys.path.insert(0, {checkout!r}); sys.argv[0] = 'tidemark-scheduler'; "
        "from scheduler_ext.cli import main; sys.exit(main())"]
    args = [*cli, *container["command"][1:], f"--kubeconfig={kubeconfig}"]
    for a in container["args"]:
        if a.startswith("--scheduler-conf="):
            a = f"--scheduler-conf={conf_path}"
        elif a.startswith("--listen-address="):
            a = "--listen-address=127.0.0.1:0"
        args.append(a)
    return args


def ceiling_args(which: str, env: dict[str, str], namespace: str, nodes: int) -> list[str]:
    """bind-py:C (Tidemark's binder, C connections), bind-go:C (Go, HTTP/2, one connection),
    bind-go:CxK (Go, HTTP/2, C in flight over K connections), bind-go-h1:C (Go, HTTP/1.1
    keep-alive, C connections), bind-only:C (Python threads). Go flags may follow a `+` (for
    experiments: `bind-go:64+-warm=false`)."""
    name, *extra = which.split("+")
    kind, _, conc = name.partition(":")
    conc, _, conns = conc.partition("x")
    c = int(conc or 64)
    if kind == "bind-py":
        return [sys.executable, str(Path(__file__).resolve()), "--bind-py",
                f"{env['KUBECONFIG']},{namespace},{nodes},{c}"]
    if kind == "bind-only" or not env.get("BINDONLY"):
        return [sys.executable, str(Path(__file__).resolve()), "--bind-only",
                f"{env['KUBECONFIG']},{namespace},{nodes},{c}"]
    args = [env["BINDONLY"], f"-server={env['KUBE_API_URL']}", f"-token={env['ADMIN_TOKEN']}",
            f"-namespace={namespace}", f"-nodes={nodes}", "-node-prefix=bench-node-", f"-concurrency={c}"]
    if conns:
        args.append(f"-conns={int(conns)}")
    args += extra
    return [*args, "-http1"] if kind == "bind-go-h1" else args


def is_ceiling(which: str) -> bool:
    return which.startswith("bind-")


def run_round(
    api: Any, env: dict[str, str], which: str, nodes: int, pods: int, rnd: int | str, workdir: Path
) -> dict[str, Any]:
    slug = re.sub(r"[^a-z0-9]+", "-", which.lower()).strip("-")[:40]
    namespace = f"bench-{slug}-{rnd}"
    request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    tidemark, _, checkout = which.partition("@")
    scheduler = "volcano" if tidemark == "tidemark" else "nobody" if is_ceiling(which) else "default-scheduler"
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    create_pods(api, namespace, pods, scheduler)
    created_s = time.monotonic() - t0
    clock = BindClock(api, namespace, expect=pods)
    clock.reflector.start()
    clock.reflector.wait_for_sync(60)
    kubeconfig = env["KUBECONFIG"]
    log_path = workdir / f"{slug}-{rnd}.log"
    log = open(log_path, "wb")  # noqa: SIM115
    if tidemark == "tidemark":
        args = shipped_tidemark_args(kubeconfig, workdir, checkout)
    elif is_ceiling(which):
        args = ceiling_args(which, env, namespace, nodes)
    else:
        args = [env["KUBE_SCHEDULER"], f"--kubeconfig={kubeconfig}", "--leader-elect=false",
                "--kube-api-qps=1000", "--kube-api-burst=1000", "--port=0", "--secure-port=0"]
    started = time.monotonic()
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    clock.pids = {"contender": proc.pid, "apiserver": int(env.get("KUBE_APISERVER_PID") or 0),
                  "etcd": int(env.get("ETCD_PID") or 0)}
    try:
        wait(lambda: clock.count() >= pods or proc.poll() is not None, f"{which}: {pods} binds", 600)
        if proc.poll() == 0 and is_ceiling(which):  # done binding: the watch catches up
            wait(lambda: clock.count() >= pods, f"{which}: {pods} binds seen", 120)
        elif proc.poll() is not None:
            raise RuntimeError(f"{which} exited {proc.returncode}; log: {log_path}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
        clock.reflector.stop()
    result = _result(which, rnd, nodes, pods, created_s, started, clock, api, namespace)
    result["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["window_cpu_ms_per_bind"] = clock.window_cpu_ms_per_bind()
    if is_ceiling(which):  # the client's own report: its first POST to its last answer, its CPU
        lines = log_path.read_text(errors="replace").strip().splitlines()
        try:
            own = json.loads(lines[-1]) if lines else {}
        except ValueError:
            own = {}
        if "seconds" in own:
            result["client_seconds"] = round(own["seconds"], 3)
        if "cpu_seconds" in own:  # (the window's sample misses a client that exited before the watch saw it all)
            result["client_cpu_ms_per_bind"] = round(own["cpu_seconds"] * 1000 / pods, 3)
    return result


def _result(which: str, rnd: int | str, nodes: int, pods: int, created_s: float, started: float, clock: BindClock,
            api: Any, namespace: str) -> dict[str, Any]:
    times = sorted(clock.bound.values())
    first, last = times[0], times[-1]
    result = {
        "scheduler": which,
        "round": rnd,
        "nodes": nodes,
        "pods": pods,
        "create_seconds": round(created_s, 2),
        "first_to_last_seconds": round(last - first, 3),
        "pods_per_second": round(pods / max(last - first, 1e-9), 1),
        "start_to_last_seconds": round(last - started, 3),
        "start_to_first_seconds": round(first - started, 3),
    }
    request(api, "DELETE", PODS.collection_path(namespace), query={"gracePeriodSeconds": 0})
    wait(lambda: not request_json(api, "GET", PODS.collection_path(namespace), query={"limit": 1}).get("items"),
         "pods deleted", 120)
    return result


def e2e(args: argparse.Namespace) -> list[dict[str, Any]]:
    found = sh("env")
    tools = dict(line.split("=", 1) for line in found.stdout.splitlines() if "=" in line)
    if "KUBE_APISERVER" not in tools or "ETCD" not in tools:
        print(f"end-to-end part skipped: {found.stderr.strip()} (run: hack/kube-apiserver.sh build)")
        return []
    workdir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    data_dir = workdir / "apiserver"
    started = sh("start", str(data_dir), "--authz", "RBAC", "--watch-pid", str(os.getpid()), timeout=180)
    if started.returncode != 0:
        raise SystemExit(f"kube-apiserver start failed: {started.stderr}")
    results: list[dict[str, Any]] = []
    try:
        env = env_of(data_dir)
        env["KUBE_SCHEDULER"] = tools.get("KUBE_SCHEDULER", "")
        env["BINDONLY"] = build_bindonly(Path(tools.get("TIDEMARK_CACHE", workdir)) / "bindonly") or ""
        if args.pin:  # the API server + etcd on some CPUs, this process and every contender on the others
            server_cpus, _, client_cpus = args.pin.partition(":")
            for pid in (env["KUBE_APISERVER_PID"], env["ETCD_PID"]):
                subprocess.run(["taskset", "-a", "-p", "-c", server_cpus, pid], check=True, capture_output=True)
            os.sched_setaffinity(0, {int(c) for c in client_cpus.split(",")})  # inherited by the contenders
            print(f"pinned: API server and etcd on CPUs {server_cpus}, benchmark and contenders on {client_cpus}")
        api = new_api_client(env["KUBECONFIG"], qps=0, burst=1, pool_size=32)
        register_crds(api)
        create_nodes(api, args.nodes)
        # the shipped Deployment elects a leader in its own namespace
        request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": "tidemark-system"}})
        which = [w for w in args.schedulers.split(",") if w != "kube-scheduler" or env["KUBE_SCHEDULER"]]
        if not env["KUBE_SCHEDULER"]:
            print("kube-scheduler not built (hack/kube-apiserver.sh build-scheduler): measuring tidemark only")
        if not env["BINDONLY"]:  # no Go: the Python bind-only client stands in, named as what it is
            print("no Go toolchain: the ceiling is the Python bind-only client (bind-only:16), a weaker one")
            which = list(dict.fromkeys("bind-only:16" if w.startswith("bind-go") else w for w in which))
        if "ceiling" in which:  # the sweep: each candidate once, the fastest is the ceiling of the rounds
            sweep = []
            for i, cand in enumerate(args.sweep.split(",")):
                r = run_round(api, env, cand, args.nodes, args.pods, f"sweep{i}", workdir)
                r["sweep"] = True
                print(json.dumps(r), flush=True)
                results.append(r)
                sweep.append(r)
            best = max(sweep, key=lambda r: r["pods_per_second"])["scheduler"]
            print(f"ceiling: {best} (fastest in the sweep)")
            which = [best if w == "ceiling" else w for w in which]
        for rnd in range(args.rounds):
            for w in (which if rnd % 2 == 0 else list(reversed(which))):
                r = run_round(api, env, w, args.nodes, args.pods, rnd, workdir)
                print(json.dumps(r), flush=True)
                results.append(r)
    finally:
        sh("stop", str(data_dir), timeout=60)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"logs kept in {workdir}")
    return results


# --- snapshot cost (in-process, no API server) ----------------------------------------------------------


def snapshot_cost(sizes: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """LiveCache.snapshot at N nodes / P pods: first (everything parsed), steady (nothing changed), 1% changed."""
    from scheduler_ext.cache.live import LiveCache
    from scheduler_ext.model.snapshot import build_cluster

    out = []
    for n_nodes, n_pods in sizes:
        cache = LiveCache(None, scheduler_name="volcano")
        cache.watch.pdb_discovered.set()
        nodes = []
        for i in range(n_nodes):
            res = {"cpu": "32", "memory": "128Gi", "pods": "110"}
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i:05d}", "resourceVersion": "1"},
                    "status": {"capacity": res, "allocatable": res}}
            cache.reflectors["nodes"].store.put(node)
            nodes.append(node)
        pods = []
        for i in range(n_pods):
            bound = i % 2 == 0
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"p-{i}", "namespace": "ns", "uid": f"uid-{i}", "resourceVersion": "1",
                                "creationTimestamp": "2026-01-01T00:00:00Z"},
                   "spec": {"schedulerName": "volcano", "nodeName": f"n{i % n_nodes:05d}" if bound else "",
                            "containers": [{"name": "c",
                                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
                   "status": {"phase": "Running" if bound else "Pending"}}
            cache.watch.on_pod("ADDED", None, pod)
            pods.append(pod)
        now = time.time()
        gc.collect()
        gc.freeze()  # as `run` does once the caches are synced; sessions run with the cyclic GC off
        gc.disable()
        first = cache.snapshot(now).stats
        steady = [cache.snapshot(now).stats.seconds for _ in range(5)]
        changed = max(1, n_pods // 100)
        for k in range(changed):  # 1 %: kubelet-like status updates (the parse is reused)
            p = pods[k]
            new = {**p, "metadata": {**p["metadata"], "resourceVersion": "2"},
                   "status": {**p["status"], "conditions": [{"type": "Ready", "status": "True"}]}}
            cache.watch.on_pod("MODIFIED", p, new)
            pods[k] = new
        status_pct = cache.snapshot(now).stats
        for k in range(changed):  # 1 %: a changed request (parsed again)
            p = pods[k]
            c = {**p["spec"]["containers"][0], "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}}}
            new = {**p, "metadata": {**p["metadata"], "resourceVersion": "3"}, "spec": {**p["spec"], "containers": [c]}}
            cache.watch.on_pod("MODIFIED", p, new)
            pods[k] = new
        one_pct = cache.snapshot(now).stats
        scratch = []
        for _ in range(3):
            t = time.perf_counter()
            build_cluster([*nodes, *pods], now=now, scheduler_name="volcano")
            scratch.append(time.perf_counter() - t)
        full = statistics.median(scratch)
        gc.enable()
        gc.unfreeze()
        out.append({
            "nodes": n_nodes, "pods": n_pods,
            "first_seconds": round(first.seconds, 4), "first_parsed": first.parsed,
            "steady_seconds_median": round(statistics.median(steady), 4),
            "one_percent_status_seconds": round(status_pct.seconds, 4), "one_percent_status_reused": status_pct.rebased,
            "one_percent_spec_seconds": round(one_pct.seconds, 4), "one_percent_spec_parsed": one_pct.parsed,
            "build_cluster_from_scratch_seconds": round(full, 4),
        })
        print(json.dumps(out[-1]), flush=True)
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians (min, max) per contender over the rounds (sweep excluded), the ratios of the medians,
    and the per-round ratios (each round runs every contender once, alternating the order)."""
    rounds = [r for r in rows if not r.get("sweep")]
    by: dict[str, list[float]] = {}
    per_round: dict[Any, dict[str, float]] = {}
    for r in rounds:
        by.setdefault(r["scheduler"], []).append(r["pods_per_second"])
        per_round.setdefault(r["round"], {})[r["scheduler"]] = r["pods_per_second"]
    out: dict[str, Any] = {"pods_per_second": {
        k: {"median": round(statistics.median(v), 1), "min": min(v), "max": max(v), "rounds": v}
        for k, v in by.items()}}
    cpu: dict[str, dict[str, list[float]]] = {}
    for r in rounds:
        for proc, ms in (r.get("window_cpu_ms_per_bind") or {}).items():
            cpu.setdefault(r["scheduler"], {}).setdefault(proc, []).append(ms)
        if "client_cpu_ms_per_bind" in r:
            cpu.setdefault(r["scheduler"], {}).setdefault("client_own", []).append(r["client_cpu_ms_per_bind"])
    if cpu:  # medians over the rounds, CPU ms per bind in the window first .. last bind
        out["window_cpu_ms_per_bind_median"] = {k: {p: round(statistics.median(v), 3) for p, v in d.items()}
                                                for k, d in cpu.items()}
    loads = [x for r in rounds for x in r.get("load_average_1m", [])]
    if loads:
        out["load_average_1m"] = {"min": min(loads), "median": round(statistics.median(loads), 2), "max": max(loads)}
    # the ceiling of a round: the fastest bind-only client of that round (its best concurrency/protocol)
    clients = [k for k in by if is_ceiling(k)]
    for v in per_round.values():
        seen = [v[k] for k in clients if k in v]
        if seen:
            v["ceiling"] = max(seen)
    if clients:
        best = [v["ceiling"] for v in per_round.values() if "ceiling" in v]
        by["ceiling"] = best
        out["pods_per_second"]["ceiling"] = {"median": round(statistics.median(best), 1), "min": min(best),
                                             "max": max(best), "rounds": best,
                                             "what": "per round, the fastest of " + ", ".join(clients)}
    pairs = [("tidemark", "kube-scheduler")] + ([("tidemark", "ceiling"), ("kube-scheduler", "ceiling")]
                                                 if clients else [])
    for a, b in pairs:
        if a in by and b in by:
            key = f"{a} / {b}"
            out[key] = {
                "of_medians": round(statistics.median(by[a]) / statistics.median(by[b]), 3),
                "per_round": [round(v[a] / v[b], 3) for v in per_round.values() if a in v and b in v],
            }
    return out


def plot(rows: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    """Per-round pods/s of each contender (points) and its median (bar): the e2e/ceiling comparison."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (pip install -e '.[bench]'): no plot")
        return
    stats = summary["pods_per_second"]
    names = sorted(stats, key=lambda k: stats[k]["median"])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.barh(range(len(names)), [stats[k]["median"] for k in names], color="#9ecae1", label="median")
    for i, k in enumerate(names):
        ax.plot(stats[k]["rounds"], [i] * len(stats[k]["rounds"]), "o", color="#08519c", ms=4,
                label="rounds" if i == 0 else None)
        ax.text(stats[k]["median"], i, f" {stats[k]['median']:.0f}", va="center", fontsize=8)
    labels = ["ceiling (fastest client\nof each round)" if k == "ceiling" else k for k in names]
    ax.set_yticks(range(len(names)), labels, fontsize=8)
    nodes, pods = rows[0]["nodes"], rows[0]["pods"]
    load = summary.get("load_average_1m", {})
    ax.set_xlabel("pods bound per second (first to last bind)")
    ax.set_title(f"{pods} pods on {nodes} nodes, real kube-apiserver 1.20.2; load {load.get('min')}-{load.get('max')}",
                 fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--pods", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write a PNG of the e2e/ceiling comparison here (matplotlib)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--skip-e2e", action="store_true")
    p.add_argument("--schedulers",
                   default="tidemark,kube-scheduler,bind-py:64,bind-py:128,bind-go:64,bind-go:256x4,bind-go-h1:64",
                   help="which to measure (comma-separated): tidemark, tidemark@DIR (the scheduler of another "
                        "source tree, e.g. a `git archive` of main, run with this venv), kube-scheduler, bind-only "
                        "clients (bind-py:C Tidemark's own binder; bind-go:C Go HTTP/2 on one connection, "
                        "bind-go:CxK on K connections; bind-go-h1:C Go HTTP/1.1; bind-only:C Python threads; "
                        "C binds in flight; the ceiling of a round is the fastest of them), or `ceiling`: the "
                        "fastest of a --sweep run once before the rounds")
    p.add_argument("--sweep", default="bind-go:16,bind-go:64,bind-go:256,bind-go-h1:16,bind-go-h1:64",
                   help="ceiling candidates, each run once before the rounds when --schedulers has `ceiling`")
    p.add_argument("--skip-snapshot", action="store_true")
    p.add_argument("--pin", metavar="SERVER_CPUS:CLIENT_CPUS",
                   help="taskset the API server and etcd to SERVER_CPUS (e.g. 1) and this process and every contender "
                        "to CLIENT_CPUS (e.g. 0); off by default (docs/benchmarks-e2e.md, run G)")
    p.add_argument("--bind-only", help=argparse.SUPPRESS)  # KUBECONFIG,NAMESPACE,NODES,THREADS: the Python fallback
    p.add_argument("--bind-py", help=argparse.SUPPRESS)  # KUBECONFIG,NAMESPACE,NODES,CONNECTIONS: Tidemark's binder
    args = p.parse_args()
    if args.bind_py:
        kubeconfig, namespace, nodes, conns = args.bind_py.rsplit(",", 3)
        return bind_py(kubeconfig, namespace, int(nodes), int(conns))
    if args.bind_only:
        kubeconfig, namespace, nodes, threads = args.bind_only.rsplit(",", 3)
        bind_only(kubeconfig, namespace, int(nodes), int(threads))
        return 0
    report: dict[str, Any] = {}
    if not args.skip_snapshot:
        print("== snapshot cost per session (in-process)")
        report["snapshot"] = snapshot_cost([(100, 2000), (1000, 10000), (5000, 20000)])
    if not args.skip_e2e:
        print(f"== end-to-end binds: {args.nodes} nodes, {args.pods} pods, {args.rounds} round(s)")
        report["e2e"] = e2e(args)
        report["summary"] = summarize(report["e2e"])
        print(json.dumps(report["summary"], indent=1))
        if args.plot and report["e2e"]:
            plot(report["e2e"], report["summary"], Path(args.plot))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ApiStatusError as exc:
        print(f"bench_e2e_binds: {exc}", file=sys.stderr)
        sys.exit(1)
