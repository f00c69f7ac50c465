#!/usr/bin/env python3
"""A scheduler_perf-like suite: kube-scheduler's own test/integration/scheduler_perf workloads, run by
kube-scheduler 1.20.2 itself and, beside it, by tidemark-scheduler's session (simulate).

    python benchmarks/bench_perf_suite.py [--size 500Nodes] [--workloads A,B] [--repeat 3] [--skip-kube]
                                          [--json benchmarks/results/perf-suite.json]

Workloads (names and sizes as kube-scheduler's config/performance-config.yaml of the Debian source
tree writes them: initNodes / initPods / measurePods):
- SchedulingBasic: nodes of 4 cpu / 32Gi / 110 pods; pods of 100m / 500Mi.
- SchedulingNodeAffinity: every node labelled zone1; pods require zone in (zone1, zone2).
- SchedulingPodAntiAffinity: nodes with unique hostnames; pods (color=green) refuse a node that
  holds another green pod (required anti-affinity on kubernetes.io/hostname, two namespaces).
- Preemption: 4 low pods of 900m per node, then high-priority (10) pods of 3 cpu: each must evict 3.
  (kube-scheduler's pods carry only `priority: 10`; Volcano reads a job's priority from its
  PriorityClass, so Tidemark's pods name a PriorityClass of value 10, as admission would leave them.)
- TidemarkGangs (Tidemark only; kube-scheduler 1.20 has no gangs): SchedulingBasic's nodes and pods,
  the measured pods in PodGroups of 10 with minMember 10.
- TidemarkOffline30 (Tidemark only): SchedulingBasic with 30 % of the nodes labelled for
  oversubscription and 30 % of the measured pods offline (volcano.sh/qos-level -1) in their own queue.

What each side measures (they are not the same thing; docs/benchmarks.md says so next to the figures):
- kube-scheduler: its own benchmark, `go test ./test/integration/scheduler_perf -bench
  BenchmarkPerfScheduling/<workload>/<size>` (the test binary built once from the cached Debian
  tree, `-benchtime=1x`), which runs an in-process apiserver on a private etcd (loopback, free
  port, `--unsafe-no-fsync`) and kube-scheduler's default profile, creates the nodes and the init
  pods (scheduled, not measured), then the measured pods, and samples the number of scheduled pods
  every second: "SchedulingThroughput" Average (and Perc50) in pods/s, its own figure. Binds go
  through the API server, so this is scheduling plus binding in one process.
- Tidemark: the same cluster generated as objects (init pods already bound, spread as the default
  scheduler spreads them), then `scheduler_ext.simulate.simulate` (the code `tidemark-scheduler
  simulate` runs, YAML parsing excluded) with the shipped conf: pods/s = measured pods placed /
  session seconds (snapshot + actions, all cycles; Preemption needs 2 cycles: evict, then bind). No
  API server: decisions only. Best and median of --repeat runs.
- Tidemark live (`--skip-live` to leave out): the same objects on a real kube-apiserver 1.20.2 +
  etcd (hack/kube-apiserver.sh start), init pods created bound, measured pods pending, then
  `tidemark-scheduler run` started as a process exactly as the shipped Deployment runs it; a watch
  records when each measured pod gets its node: pods/s = measured pods / (last bind - first bind)
  and measured pods / (process start - last bind). Scheduling plus binding through a real API
  server, as kube-scheduler's own figure (whose API server is in-process, without TLS).
bench_e2e_binds.py is the end-to-end comparison with both schedulers on the same API server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scheduler_ext.actions.registry import ACTIONS  # noqa: E402
from scheduler_ext.framework.conf import load_conf  # noqa: E402
from scheduler_ext.plugins.registry import PLUGINS  # noqa: E402
from scheduler_ext.simulate import simulate  # noqa: E402

CONF = ROOT / "examples" / "volcano-scheduler.conf"
RESULTS = ROOT / "benchmarks" / "results"
SCRIPT = ROOT / "hack" / "kube-apiserver.sh"
NOW = 1_700_000_000.0
GI = 1024**3

#: workload -> size -> (initNodes, initPods, measurePods), from performance-config.yaml (1.20.2)
SIZES: dict[str, dict[str, tuple[int, int, int]]] = {
    "SchedulingBasic": {"500Nodes": (500, 500, 1000), "5000Nodes": (5000, 1000, 1000)},
    "SchedulingNodeAffinity": {"500Nodes": (500, 500, 1000), "5000Nodes": (5000, 5000, 1000)},
    "SchedulingPodAntiAffinity": {"500Nodes": (500, 100, 400), "5000Nodes": (500, 100, 400)},
    "Preemption": {"500Nodes": (500, 2000, 500), "5000Nodes": (5000, 20000, 5000)},
    "TidemarkGangs": {"500Nodes": (500, 500, 1000), "5000Nodes": (5000, 1000, 1000)},
    "TidemarkOffline30": {"500Nodes": (500, 500, 1000), "5000Nodes": (5000, 1000, 1000)},
}
KUBE_WORKLOADS = ("SchedulingBasic", "SchedulingNodeAffinity", "SchedulingPodAntiAffinity", "Preemption")

# --- the Tidemark side: the workloads as objects -----------------------------------------------------------


def _node(i: int, labels: dict[str, str] | None = None, ann: dict[str, str] | None = None) -> dict[str, Any]:
    name = f"scheduler-perf-{i:05d}"
    res = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {"kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                         "annotations": dict(ann or {})},
            "status": {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, ns: str, cpu: str = "100m", *, node: str = "", priority: int | None = None,
         labels: dict[str, str] | None = None, affinity: dict[str, Any] | None = None,
         ann: dict[str, str] | None = None, grace: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "containers": [{"name": "pause", "resources": {"requests": {"cpu": cpu, "memory": "500Mi"},
                                                         "limits": {"cpu": cpu, "memory": "500Mi"}}}],
    }
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if priority is not None:  # as the Priority admission plugin leaves it: the class and its value
        spec["priority"] = priority
        spec["priorityClassName"] = f"priority-{priority}"
    if affinity:
        spec["affinity"] = affinity
    return {"kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"{ns}-{name}", "labels": dict(labels or {}),
                         "annotations": dict(ann or {}), "creationTimestamp": "2023-11-14T22:13:20Z"},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


NODE_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "failure-domain.beta.kubernetes.io/zone", "operator": "In",
                           "values": ["zone1", "zone2"]}]}]}}}
ANTI_AFFINITY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname",
     "namespaces": ["sched-test", "sched-setup"]}]}}


def generate(workload: str, n_nodes: int, n_init: int, n_measure: int) -> tuple[list[dict[str, Any]], int]:
    """The cluster of one workload as objects, and the number of measured (pending) pods."""
    objs: list[dict[str, Any]] = [
        {"kind": "Queue", "metadata": {"name": "default"}, "spec": {"weight": 1}, "status": {"state": "Open"}},
        {"kind": "Queue", "metadata": {"name": "batch"}, "spec": {"weight": 1}, "status": {"state": "Open"}},
        {"kind": "PriorityClass", "metadata": {"name": "priority-10"}, "value": 10},
    ]
    labels: dict[str, str] = {}
    if workload == "SchedulingNodeAffinity":
        labels = {"failure-domain.beta.kubernetes.io/zone": "zone1"}
    nodes = []
    for i in range(n_nodes):
        extra, ann = dict(labels), {}
        if workload == "TidemarkOffline30" and i % 10 < 3:
            extra["volcano.sh/oversubscription"] = "true"
            ann = {"volcano.sh/oversubscription-cpu": "2000", "volcano.sh/oversubscription-memory": str(8 * GI)}
        nodes.append(_node(i, extra, ann))
    objs.extend(nodes)
    names = [n["metadata"]["name"] for n in nodes]
    # init pods: bound, spread over the nodes as the default scheduler spreads equal pods
    for k in range(n_init):
        node = names[k % n_nodes]
        if workload == "Preemption":
            objs.append(_pod(f"low-{k:05d}", "default", "900m", node=node, grace=0))  # as pod-low-priority.yaml
        elif workload == "SchedulingPodAntiAffinity":
            objs.append(_pod(f"setup-{k:05d}", "sched-setup", node=node, labels={"color": "green"},
                             affinity=ANTI_AFFINITY))
        elif workload == "SchedulingNodeAffinity":
            objs.append(_pod(f"init-{k:05d}", "default", node=node, affinity=NODE_AFFINITY))
        else:
            objs.append(_pod(f"init-{k:05d}", "default", node=node))
    for k in range(n_measure):
        name = f"pod-{k:05d}"
        if workload == "Preemption":
            objs.append(_pod(name, "default", "3000m", priority=10))
        elif workload == "SchedulingPodAntiAffinity":
            objs.append(_pod(name, "sched-test", labels={"color": "green"}, affinity=ANTI_AFFINITY))
        elif workload == "SchedulingNodeAffinity":
            objs.append(_pod(name, "default", affinity=NODE_AFFINITY))
        elif workload == "TidemarkGangs":
            objs.append(_pod(name, "gangs", ann={"scheduling.k8s.io/group-name": f"gang-{k // 10:04d}"}))
        elif workload == "TidemarkOffline30" and k % 10 < 3:
            objs.append(_pod(name, "default", ann={"volcano.sh/qos-level": "-1",
                                                    "scheduling.volcano.sh/queue-name": "batch"}))
        else:
            objs.append(_pod(name, "default"))
    if workload == "TidemarkGangs":
        for g in range((n_measure + 9) // 10):
            objs.append({"kind": "PodGroup", "metadata": {"name": f"gang-{g:04d}", "namespace": "gangs"},
                         "spec": {"minMember": 10, "queue": "default"}, "status": {"phase": "Pending"}})
    return objs, n_measure


def tidemark_run(workload: str, size: str, repeat: int, conf_path: Path) -> dict[str, Any]:
    n_nodes, n_init, n_measure = SIZES[workload][size]
    conf, problems = load_conf(str(conf_path), ACTIONS, PLUGINS)
    if any(p.severity == "error" for p in problems):
        raise SystemExit(f"bad conf {conf_path}: {problems}")
    cycles = 3 if workload == "Preemption" else 1
    runs = []
    for _ in range(repeat):
        objs, _measured = generate(workload, n_nodes, n_init, n_measure)
        c0 = time.process_time()
        res = simulate(objs, conf, ACTIONS, PLUGINS, cycles=cycles, now=NOW)
        cpu = time.process_time() - c0
        placed = sum(1 for k in res.binds if "/pod-" in k)
        runs.append({"session_seconds": res.session_seconds, "cpu_seconds": cpu, "placed": placed,
                     "evicted": len(res.evictions), "pods_per_second": placed / max(res.session_seconds, 1e-9)})
    best = max(runs, key=lambda r: r["pods_per_second"])
    return {
        "scheduler": "tidemark", "workload": workload, "size": size, "nodes": n_nodes, "init_pods": n_init,
        "measured_pods": n_measure, "cycles": cycles, "placed": best["placed"], "evicted": best["evicted"],
        "pods_per_second_best": round(best["pods_per_second"], 1),
        "pods_per_second_median": round(statistics.median(r["pods_per_second"] for r in runs), 1),
        "session_seconds": [round(r["session_seconds"], 4) for r in runs],
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


# --- Tidemark live: the same objects on a real API server, `tidemark-scheduler run` as shipped -------------------


def _api_object(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(collection path, body) of a generated object on a real API server."""
    from tidemark.kube.resources import NODES, PODGROUPS, PODS, QUEUES

    body = json.loads(json.dumps(obj))
    kind = body["kind"]
    md = body["metadata"]
    md.pop("uid", None)
    md.pop("creationTimestamp", None)
    if kind == "Node":
        body["apiVersion"] = "v1"
        return NODES.collection_path(), body
    if kind == "Pod":
        body["apiVersion"] = "v1"
        body["spec"]["containers"][0]["image"] = "registry.invalid/pause"
        body["spec"].pop("priority", None)  # the Priority admission plugin sets it from the class
        body.pop("status", None)
        return PODS.collection_path(md["namespace"]), body
    if kind == "PodGroup":
        body["apiVersion"] = PODGROUPS.api_version
        body.pop("status", None)
        return PODGROUPS.collection_path(md["namespace"]), body
    if kind == "Queue":
        body["apiVersion"] = QUEUES.api_version
        body.pop("status", None)
        return QUEUES.collection_path(), body
    if kind == "PriorityClass":
        body["apiVersion"] = "scheduling.k8s.io/v1"
        return "/apis/scheduling.k8s.io/v1/priorityclasses", body
    raise ValueError(kind)


def live_run(workload: str, size: str, workdir: Path) -> dict[str, Any]:
    """One workload on a fresh private API server, scheduled by `tidemark-scheduler run` as shipped."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    import bench_e2e_binds as e2e

    from tidemark.kube.client import KubeError, new_api_client, request_json

    n_nodes, n_init, n_measure = SIZES[workload][size]
    objs, _ = generate(workload, n_nodes, n_init, n_measure)
    data_dir = workdir / f"live-{workload}-{size}"
    started = e2e.sh("start", str(data_dir), "--authz", "RBAC", "--watch-pid", str(os.getpid()), timeout=180)
    if started.returncode != 0:
        raise SystemExit(f"kube-apiserver start failed: {started.stderr}")
    try:
        env = e2e.env_of(data_dir)
        api = new_api_client(env["KUBECONFIG"], qps=0, burst=1, pool_size=16)
        e2e.register_crds(api)
        for ns in sorted({o["metadata"]["namespace"] for o in objs if "namespace" in o["metadata"]}
                         | {"tidemark-system"}):
            if ns != "default":
                request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})

        def create(obj: dict[str, Any]) -> None:
            path, body = _api_object(obj)
            for attempt in range(5):
                try:
                    request_json(api, "POST", path, body=body)
                    return
                except KubeError:
                    if attempt == 4:
                        raise
                    time.sleep(0.2)

        measured = [o for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
        with ThreadPoolExecutor(8) as pool:
            for group in (("PriorityClass", "Queue"), ("Node",), ("PodGroup",)):
                list(pool.map(create, [o for o in objs if o["kind"] in group]))
            list(pool.map(create, [o for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")]))
            list(pool.map(create, measured))
        clocks = {ns: e2e.BindClock(api, ns) for ns in sorted({o["metadata"]["namespace"] for o in measured})}
        for c in clocks.values():
            c.reflector.start()
            c.reflector.wait_for_sync(60)
        names = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in measured}

        def bound() -> list[float]:
            return [t for ns, c in clocks.items() for name, t in list(c.bound.items()) if (ns, name) in names]

        args = e2e.shipped_tidemark_args(env["KUBECONFIG"], data_dir)
        with open(data_dir / "tidemark.log", "wb") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                with contextlib.suppress(TimeoutError):  # reported as placed < measured
                    e2e.wait(lambda: len(bound()) >= len(measured) or proc.poll() is not None, "binds", 180)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
                for c in clocks.values():
                    c.reflector.stop()
        times = sorted(bound())
        out: dict[str, Any] = {"scheduler": "tidemark-live", "workload": workload, "size": size, "nodes": n_nodes,
                               "init_pods": n_init, "measured_pods": n_measure, "placed": len(times),
                               "load_average_1m": round(os.getloadavg()[0], 2)}
        if len(times) >= 2:
            out["pods_per_second_first_to_last"] = round(len(times) / max(times[-1] - times[0], 1e-9), 1)
            out["pods_per_second_start_to_last"] = round(len(times) / max(times[-1] - t0, 1e-9), 1)
            out["start_to_first_seconds"] = round(times[0] - t0, 2)
        return out
    finally:
        e2e.sh("stop", str(data_dir), timeout=60)


# --- the kube-scheduler side: its own scheduler_perf ---------------------------------------------------------


def kube_tools() -> dict[str, str]:
    found = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, check=False)
    return dict(line.split("=", 1) for line in found.stdout.splitlines() if "=" in line)


def build_perf_test(tools: dict[str, str]) -> Path | None:
    """scheduler_perf's test binary, built once (`go test -c`, GOPATH mode as the tree's own make
    runs it, the tree's Go cache) into the cache; None when the tree or Go is missing."""
    cache = Path(tools.get("TIDEMARK_CACHE", Path.home() / ".cache" / "tidemark"))
    src = cache / "kube-1.20.2" / "src"
    out = cache / "kube-1.20.2" / "bin" / "scheduler_perf.test"
    if out.exists():
        return out
    go = shutil.which("go")
    if go is None or not (src / "test" / "integration" / "scheduler_perf").is_dir():
        print(f"kube-scheduler side skipped: no Go toolchain or no source tree at {src} (hack/kube-apiserver.sh build)")
        return None
    gopath = src / "_output" / "local" / "go"
    pkg = gopath / "src" / "k8s.io" / "kubernetes"
    env = {**os.environ, "GOPATH": str(gopath), "GOCACHE": str(gopath / "cache"), "GO111MODULE": "off",
           "GOPROXY": "off", "GOFLAGS": "", "CGO_ENABLED": "0", "PWD": str(pkg)}
    print(f"building scheduler_perf's test binary (go test -c; minutes the first time) into {out}", flush=True)
    tmp = out.with_name(".scheduler_perf.test.tmp")
    done = subprocess.run([go, "test", "-c", "-o", str(tmp), "./test/integration/scheduler_perf"], cwd=pkg, env=env,
                          capture_output=True, text=True, check=False, timeout=3600)
    if done.returncode != 0:
        print(f"building scheduler_perf failed: {done.stderr[-2000:]}")
        return None
    tmp.rename(out)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Etcd:
    """A private etcd on loopback (free ports, fsync off), as the integration framework wants one."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}"
        peer = f"http://127.0.0.1:{_free_port()}"
        self.log = open(workdir / "etcd.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [binary, "--data-dir", str(workdir / "etcd-data"), "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"default={peer}", "--unsafe-no-fsync=true", "--quota-backend-bytes=4294967296"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        host, port = self.url[7:].split(":")
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, int(port)), 0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit("etcd did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


def kube_run(binary: Path, tools: dict[str, str], workload: str, size: str, workdir: Path) -> dict[str, Any]:
    """One scheduler_perf sub-benchmark, on a fresh etcd; its own throughput figures."""
    src_config = binary.parents[1] / "src" / "test" / "integration" / "scheduler_perf" / "config"
    run_dir = workdir / f"{workload}-{size}"
    shutil.copytree(src_config, run_dir / "config")
    (run_dir / "items").mkdir()
    etcd = Etcd(tools.get("ETCD", "etcd"), run_dir)
    started = time.monotonic()
    try:
        with open(run_dir / "test.log", "wb") as log:
            done = subprocess.run(
                [str(binary), "-test.run=^$", f"-test.bench=^BenchmarkPerfScheduling$/^{workload}$/^{size}$",
                 "-test.benchtime=1x", "-test.timeout=30m", f"-data-items-dir={run_dir / 'items'}"],
                cwd=run_dir, env={**os.environ, "KUBE_INTEGRATION_ETCD_URL": etcd.url},
                stdout=log, stderr=subprocess.STDOUT, check=False, timeout=2400)
    finally:
        etcd.stop()
    wall = time.monotonic() - started
    items: list[dict[str, Any]] = []
    for f in sorted((run_dir / "items").glob("*.json")):
        items.extend(json.loads(f.read_text()).get("dataItems") or [])
    n_nodes, n_init, n_measure = SIZES[workload][size]
    out: dict[str, Any] = {"scheduler": "kube-scheduler", "workload": workload, "size": size, "nodes": n_nodes,
                           "init_pods": n_init, "measured_pods": n_measure, "exit_code": done.returncode,
                           "wall_seconds": round(wall, 1), "load_average_1m": round(os.getloadavg()[0], 2)}
    for item in items:
        labels = item.get("labels") or {}
        if labels.get("Metric") == "SchedulingThroughput":
            data = item.get("data") or {}
            out["pods_per_second_average"] = round(float(data.get("Average", 0.0)), 1)
            out["pods_per_second_perc50"] = round(float(data.get("Perc50", 0.0)), 1)
        elif labels.get("Metric") == "scheduler_e2e_scheduling_duration_seconds":
            out["e2e_scheduling_ms"] = {k: round(float(v), 2) for k, v in (item.get("data") or {}).items()}
    if "pods_per_second_average" not in out:
        out["error"] = f"no SchedulingThroughput (exit {done.returncode}); log: {run_dir / 'test.log'}"
        tail = (run_dir / "test.log").read_text(errors="replace").splitlines()[-5:]
        print("\n".join(tail))
    return out


# --- main -----------------------------------------------------------------------------------------------


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | nodes / init / measured | tidemark simulate pods/s (best, median) | tidemark live pods/s "
             "(first to last bind; start to last) | kube-scheduler scheduler_perf pods/s (Average, Perc50) |",
             "|---|---|---|---|---|"]
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["workload"], r["size"]), {})[r["scheduler"]] = r
    for (w, s), d in by.items():
        t, k, lv = d.get("tidemark"), d.get("kube-scheduler"), d.get("tidemark-live")
        some = t or k or lv
        assert some is not None
        tm = f"{t['pods_per_second_best']:.0f}, {t['pods_per_second_median']:.0f}" if t else "-"
        ks = (f"{k['pods_per_second_average']:.0f}, {k['pods_per_second_perc50']:.0f}"
              if k and "pods_per_second_average" in k else ("n/a (Tidemark only)" if w.startswith("Tidemark") else "-"))
        live = (f"{lv['pods_per_second_first_to_last']:.0f}; {lv['pods_per_second_start_to_last']:.0f}"
                if lv and "pods_per_second_first_to_last" in lv else "-")
        lines.append(f"| {w}/{s} | {some['nodes']} / {some['init_pods']} / {some['measured_pods']} | {tm} | {live} "
                     f"| {ks} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="500Nodes", choices=["500Nodes", "5000Nodes"])
    ap.add_argument("--workloads", default=",".join(SIZES))
    ap.add_argument("--repeat", type=int, default=3, help="Tidemark sessions per workload (best and median)")
    ap.add_argument("--skip-kube", action="store_true", help="leave out kube-scheduler's scheduler_perf")
    ap.add_argument("--skip-live", action="store_true", help="leave out Tidemark on a real API server")
    ap.add_argument("--conf", default=str(CONF))
    ap.add_argument("--json", default=str(RESULTS / "perf-suite.json"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory (scheduler_perf logs)")
    ns = ap.parse_args()
    workloads = [w for w in ns.workloads.split(",") if w]
    unknown = [w for w in workloads if w not in SIZES]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; known: {', '.join(SIZES)}")
    rows: list[dict[str, Any]] = []
    kube: Callable[[str], dict[str, Any]] | None = None
    workdir = Path(tempfile.mkdtemp(prefix="bench-perf-suite-"))
    tools = kube_tools()
    live_ok = "KUBE_APISERVER" in tools and "ETCD" in tools
    if not ns.skip_live and not live_ok:
        print("Tidemark live side skipped: no kube-apiserver build (hack/kube-apiserver.sh build)")
    if not ns.skip_kube:
        binary = build_perf_test(tools)
        if binary is not None:
            def kube(w: str) -> dict[str, Any]:
                return kube_run(binary, tools, w, ns.size, workdir)
    try:
        for w in workloads:
            r = tidemark_run(w, ns.size, ns.repeat, Path(ns.conf))
            print(json.dumps(r), flush=True)
            rows.append(r)
            if not ns.skip_live and live_ok:
                r = live_run(w, ns.size, workdir)
                print(json.dumps(r), flush=True)
                rows.append(r)
            if kube is not None and w in KUBE_WORKLOADS:
                r = kube(w)
                print(json.dumps(r), flush=True)
                rows.append(r)
    finally:
        if ns.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(_table(rows))
    out = Path(ns.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    conf = Path(ns.conf).resolve()
    doc = {"benchmark": "scheduler_perf-like suite", "size": ns.size,
           "conf": str(conf.relative_to(ROOT)) if conf.is_relative_to(ROOT) else str(conf),
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "cores": os.cpu_count(), "results": rows}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
