"""End-to-end binds per second against a real kube-apiserver 1.20: tidemark-scheduler vs kube-scheduler 1.20.2.

    python benchmarks/bench_e2e_binds.py [--nodes 100] [--pods 2000] [--rounds 2] [--json OUT]

What is measured (docs/benchmarks-e2e.md): a private kube-apiserver + etcd (hack/kube-apiserver.sh
start) with N Ready nodes (32 cpu, 128Gi, 110 pods); for each scheduler and round, P pending pods
(100m cpu, 128Mi) are created in a fresh namespace BEFORE the scheduler starts, then the scheduler
is started as a process and a watch in this process records when each pod's spec.nodeName is set.
Throughput = pods / (last bind - first bind), the definition the kube-scheduler figure (570-890
pods/s) used; "start to last bind" (process start, cache sync, scheduling, binding) is reported too.
Both schedulers run with the same client limits: `--kube-api-qps=1000 --kube-api-burst=1000`,
leader election off. kube-scheduler is built from the same Debian source tree
(`hack/kube-apiserver.sh build-scheduler`); without it only tidemark-scheduler is measured.

The second part measures the scheduler's snapshot cost per session at several sizes in-process
(no API server): the first session parses every pod, later ones reuse the parse cache.
"""

from __future__ import annotations

import argparse
import gc
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


class BindClock:
    """A watch of the namespace: monotonic time at which each pod's nodeName was first seen set."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.bound: dict[str, float] = {}
        self._lock = threading.Lock()
        self.reflector = Reflector.for_resource(api, PODS, namespace=namespace, on_change=self._on, timeout_seconds=300)

    def _on(self, _etype: str, _old: Any, new: Any) -> None:
        if new is not None and (new.get("spec") or {}).get("nodeName"):
            name = new["metadata"]["name"]
            with self._lock:
                self.bound.setdefault(name, time.monotonic())

    def count(self) -> int:
        with self._lock:
            return len(self.bound)


def bind_only(kubeconfig: str, namespace: str, nodes: int, concurrency: int) -> None:
    """The ceiling: no scheduling at all, only the binding POSTs, round-robin over the nodes, from
    `concurrency` threads on one pooled client (what a scheduler that decided instantly could do).
    Run in its own process (`--bind-only`), as the schedulers are, so it does not share an
    interpreter with the benchmark's watch."""
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


def run_round(
    api: Any, env: dict[str, str], which: str, nodes: int, pods: int, rnd: int, workdir: Path
) -> dict[str, Any]:
    namespace = f"bench-{which.replace(':', '-')}-{rnd}"
    request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    scheduler = "volcano" if which == "tidemark" else "nobody" if which.startswith("bind-only") else "default-scheduler"
    t0 = time.monotonic()
    create_pods(api, namespace, pods, scheduler)
    created_s = time.monotonic() - t0
    clock = BindClock(api, namespace)
    clock.reflector.start()
    clock.reflector.wait_for_sync(60)
    kubeconfig = env["KUBECONFIG"]
    log = open(workdir / f"{which}-{rnd}.log", "wb")  # noqa: SIM115
    if which == "tidemark":
        args = [str(CLI), "run", f"--kubeconfig={kubeconfig}", "--listen-address=127.0.0.1:0",
                "--leader-elect=false", "--kube-api-qps=1000", "--kube-api-burst=1000", "--schedule-period=1s"]
    else:
        args = [env["KUBE_SCHEDULER"], f"--kubeconfig={kubeconfig}", "--leader-elect=false",
                "--kube-api-qps=1000", "--kube-api-burst=1000", "--port=0", "--secure-port=0"]
    started = time.monotonic()
    if which.startswith("bind-only"):
        args = [sys.executable, str(Path(__file__).resolve()), "--bind-only", f"{kubeconfig},{namespace},{nodes},"
                f"{int(which.partition(':')[2] or 32)}"]
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait(lambda: clock.count() >= pods or proc.poll() is not None, f"{which}: {pods} binds", 600)
        if proc.poll() == 0 and which.startswith("bind-only"):  # done binding: the watch catches up
            wait(lambda: clock.count() >= pods, f"{which}: {pods} binds seen", 120)
        elif proc.poll() is not None:
            raise RuntimeError(f"{which} exited {proc.returncode}; log: {workdir / f'{which}-{rnd}.log'}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
        clock.reflector.stop()
    return _result(which, rnd, nodes, pods, created_s, started, clock, api, namespace)


def _result(which: str, rnd: int, nodes: int, pods: int, created_s: float, started: float, clock: BindClock,
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
        api = new_api_client(env["KUBECONFIG"], qps=0, burst=1, pool_size=32)
        register_crds(api)
        create_nodes(api, args.nodes)
        which = [w for w in args.schedulers.split(",") if w != "kube-scheduler" or env["KUBE_SCHEDULER"]]
        if not env["KUBE_SCHEDULER"]:
            print("kube-scheduler not built (hack/kube-apiserver.sh build-scheduler): measuring tidemark only")
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
    from scheduler_ext.cache.snapshot import build_cluster

    out = []
    for n_nodes, n_pods in sizes:
        cache = LiveCache(None, scheduler_name="volcano")
        cache._pdb_discovered.set()
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
            cache._on_pod("ADDED", None, pod)
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
            cache._on_pod("MODIFIED", p, new)
            pods[k] = new
        status_pct = cache.snapshot(now).stats
        for k in range(changed):  # 1 %: a changed request (parsed again)
            p = pods[k]
            c = {**p["spec"]["containers"][0], "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}}}
            new = {**p, "metadata": {**p["metadata"], "resourceVersion": "3"}, "spec": {**p["spec"], "containers": [c]}}
            cache._on_pod("MODIFIED", p, new)
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--pods", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--skip-e2e", action="store_true")
    p.add_argument("--schedulers", default="tidemark,kube-scheduler,bind-only:16,bind-only:64",
                   help="which to measure (comma-separated; bind-only:C is the ceiling client with C threads)")
    p.add_argument("--skip-snapshot", action="store_true")
    p.add_argument("--bind-only", help=argparse.SUPPRESS)  # KUBECONFIG,NAMESPACE,NODES,THREADS: the ceiling client
    args = p.parse_args()
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
        by: dict[str, list[float]] = {}
        for r in report["e2e"]:
            by.setdefault(r["scheduler"], []).append(r["pods_per_second"])
        for k, v in by.items():
            print(f"{k}: {statistics.median(v):.0f} pods/s median of {v}")
        if "tidemark" in by and "kube-scheduler" in by:
            ratio = statistics.median(by["tidemark"]) / statistics.median(by["kube-scheduler"])
            print(f"ratio tidemark / kube-scheduler: {ratio:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ApiStatusError as exc:
        print(f"bench_e2e_binds: {exc}", file=sys.stderr)
        sys.exit(1)
