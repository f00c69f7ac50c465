"""Colocation quality on the real node: an online service's tail latency beside offline work, three ways.

Tidemark exists for one result: offline work fills the capacity online pods requested and do not use,
and the online pods do not notice. This measures it on the real one-node cluster of `make run`
(localcluster.realnode: kubelet 1.20.2 + containerd, the project image, the shipped manifests), with the
same online service, the same request rate and the same offline jobs in every arm:

- online: nginx (Debian's nginx-light) in a Burstable pod (requests cpu 1, memory 256Mi; limit memory
  512Mi), serving a 64 KiB text file gzip-compressed on the fly (nginx's default level 1) with an access
  log on disk, driven from the HOST to the pod's IP on the bridge by an open-loop generator (this file,
  `--generate`): requests leave on a fixed timetable at RATE per second whatever the answers do, and each
  latency counts from the request's INTENDED send time (no coordinated omission: a stalled server shows
  as queueing in the figures, not as fewer requests). RATE is calibrated so that nginx uses about a third
  of its CPU request (`--rate` skips it);
- offline, one kind at a time (stress-ng from Debian): `cpu` two pods of one matrixprod worker each;
  `memory` one pod holding an anonymous hog (stress-ng --vm --vm-keep, 3/4 of what the arm gives it) and
  streaming a sparse file through the page cache (dd: the node or the pod's memory group must reclaim
  without pause); `io` one pod writing buffered (stress-ng --hdd wr-seq) and one with O_DIRECT, both to
  an emptyDir on the disk nginx logs to;
- arms: `alone` (online only); `kubelet_besteffort` and `kubelet_burstable` (Tidemark NOT installed:
  offline pods placed by kube-scheduler, BestEffort without requests, or Burstable with plain cpu/memory
  requests sized to what is idle and unrequested); `tidemark` (the agent and scheduler as shipped, the
  manifests' default agent config; offline pods ask `kubernetes.io/batch-cpu`/`batch-memory` (requests =
  limits) sized to what the agent publishes, qos-level -1, a PodGroup, `schedulerName: volcano`);
  optionally `tidemark_noqos` (the same with `qos.enabled: false`: what the QoS knobs contribute) and
  `tidemark_nolimits` (the same pods asking batch-* requests without limits, as README's example does: they
  may use the idle CPU beyond what the agent published, and meet the eviction watermarks).
  Tidemark is uninstalled between arms as a user would (labels removed, the DaemonSet, Deployments and
  webhook configurations deleted; the agent restores its knobs on SIGTERM when its DaemonSet is gone), a
  `tidemark-agent restore` on the host follows, and every kubelet arm checks the cgroup files for agent
  knobs;
- per cell: online p50/p99/p99.9, rate achieved and errors over the measured window; node CPU
  utilisation (kubepods cpuacct.usage over the node's cores); offline work per second (stress-ng bogo ops
  over its run); evictions, OOM kills and restarts, online and offline; reclaim and disk figures.

Rounds interleave the arms (each round runs every arm of every kind once, Tidemark installed for one
half of the round and not for the other, the halves alternating). Medians and ranges per kind and arm go
to `--json` (benchmarks/results/colocation.json) with the raw rounds, and a plot to
benchmarks/results/colocation.png. docs/benchmarks-colocation.md has the method and the figures.

Run (root, cgroup v1; exits 0 with the reason where the machine cannot run it):
  python benchmarks/bench_colocation.py [--quick] [--kinds cpu,memory,io] [--rounds 5] [--measure 30]
  make bench-colocation   (installs the bench extra, then the full run)
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

KINDS = ("cpu", "memory", "io")
ARMS = ("alone", "kubelet_besteffort", "kubelet_burstable", "tidemark")
EXTRA_ARMS = ("tidemark_noqos", "tidemark_nolimits")
TIDEMARK_ARMS = ("tidemark", "tidemark_noqos", "tidemark_nolimits")
#: the medians every kind and arm has in the JSON (the issue's shape)
FIELDS = (
    "online_p50_ms",
    "online_p99_ms",
    "online_p999_ms",
    "online_rps",
    "online_errors",
    "node_cpu_util",
    "offline_work_per_s",
    "online_evictions",
    "online_restarts",
    "offline_evictions",
)
#: more figures per cell (medians under "more" in the JSON)
MORE_FIELDS = (
    "online_ooms",
    "offline_ooms",
    "offline_rejected",
    "offline_pods_running",
    "node_oom_kills",
    "online_cores",
    "offline_cores",
    "node_busy_util",
    "node_mem_util",
    "reclaim_scanned_mib_s",
    "direct_reclaim_stalls",
    "disk_write_mib_s",
    "generator_lag_p99_ms",
    "agent_knobs_found",
    "published_batch_cpu_m",
    "published_batch_memory_mib",
)
NS = "colocation"
PORT = 8080
PATH = "/index.txt"
CTL_ROOT = Path("/run/tidemark-colocation")
CG = Path("/sys/fs/cgroup")
STATE_DIR = Path("/var/lib/tidemark")
UNLIMITED_V1 = 9223372036854771712
MIB = 2**20
GIB = 2**30
#: online pod: Burstable, one CPU requested (half of this 2-core node), memory request 256Mi, limit 512Mi
ONLINE_CPU_REQUEST_M = 1000
#: the calibrated rate makes nginx use this fraction of its CPU request
TARGET_FRACTION = 1.0 / 3.0
#: memory kind: the hog holds this fraction of what its arm gives it; the node keeps this much free
HOG_FRACTION = 0.75
# The tidemark arms ask this share of what the agent published at the cell's start: B moves every capacity
# period (10 s) with U_non, and a gang asking all of it was left Pending ("Insufficient kubernetes.io/batch-cpu")
# whenever the next publication was a few millicores lower (the memory cell of round 0, 2026-11-28)
PUBLISHED_FRACTION = 0.9
MEMORY_MARGIN = 2 * GIB
AGENT_LABELS = ("volcano.sh/colocation", "volcano.sh/oversubscription")
DEMO_ANNOTATIONS = (
    "volcano.sh/evicting-cpu-high-watermark",
    "volcano.sh/evicting-cpu-low-watermark",
    "volcano.sh/evicting-memory-high-watermark",
    "volcano.sh/evicting-memory-low-watermark",
)


# ---------------------------------------------------------------------------------------------------------
# Pure parts (tests/unit/test_bench_colocation.py)
# ---------------------------------------------------------------------------------------------------------
def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (q in 0..100); None for an empty list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values) / 100.0 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(records: list[tuple[float, float, float]], t0: float, t1: float) -> dict[str, Any]:
    """The generator's records (intended send time, latency or NaN for an error, send lag) whose intended
    time lies in [t0, t1): percentiles in ms of the answered ones, the answered rate, the errors."""
    inside = [r for r in records if t0 <= r[0] < t1]
    ok = sorted(r[1] for r in inside if not math.isnan(r[1]))
    lags = sorted(r[2] for r in inside if not math.isnan(r[2]))
    span = max(t1 - t0, 1e-9)

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000.0, 3)

    return {
        "online_p50_ms": ms(percentile(ok, 50)),
        "online_p99_ms": ms(percentile(ok, 99)),
        "online_p999_ms": ms(percentile(ok, 99.9)),
        "online_max_ms": ms(ok[-1] if ok else None),
        "online_rps": round(len(ok) / span, 2),
        "online_errors": len(inside) - len(ok),
        "online_requests": len(inside),
        "generator_lag_p99_ms": ms(percentile(lags, 99)),
    }


_BRIEF = re.compile(
    r"^stress-ng: (?:metrc|info):\s+\[\d+\]\s+(?P<name>[a-z][a-z0-9-]*)\s+(?P<ops>\d+)\s+(?P<real>[\d.]+)\s+"
    r"(?P<usr>[\d.]+)\s+(?P<sys>[\d.]+)\s+(?P<rate>[\d.]+)\s+(?P<rate_cpu>[\d.]+)\s*$"
)


def parse_metrics_brief(text: str) -> dict[str, dict[str, float]]:
    """stress-ng's --metrics-brief table: per stressor, bogo ops, real time and rates."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = _BRIEF.match(line.strip())
        if m:
            out[m["name"]] = {
                "bogo_ops": float(m["ops"]),
                "real_time_s": float(m["real"]),
                "usr_s": float(m["usr"]),
                "sys_s": float(m["sys"]),
                "ops_per_s": float(m["rate"]),
            }
    return out


def parse_stress_yaml(text: str) -> dict[str, dict[str, float]]:
    """stress-ng's --yaml file: per stressor, bogo ops and wall-clock time (its `metrics:` list)."""
    import yaml

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return {}
    out: dict[str, dict[str, float]] = {}
    for m in doc.get("metrics") or [] if isinstance(doc, dict) else []:
        if isinstance(m, dict) and "stressor" in m and "bogo-ops" in m:
            out[str(m["stressor"])] = {
                "bogo_ops": float(m["bogo-ops"]),
                "real_time_s": float(m.get("wall-clock-time", 0.0)),
                "usr_s": float(m.get("user-time", 0.0)),
                "sys_s": float(m.get("system-time", 0.0)),
                "ops_per_s": float(m.get("bogo-ops-per-second-real-time", 0.0)),
            }
    return out


def offline_work(results: dict[str, dict[str, dict[str, float]]], stressor: str) -> float:
    """Offline work per second of a cell: the bogo ops of `stressor` summed over the pods, over the longest
    run among them (a pod evicted early counts what it did before; a pod that never ran counts 0)."""
    runs = [r[stressor] for r in results.values() if stressor in r]
    span = max((r["real_time_s"] for r in runs), default=0.0)
    return round(sum(r["bogo_ops"] for r in runs) / span, 2) if span > 0 else 0.0


def median_range(values: list[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "min": None, "max": None, "n": 0}
    med = statistics.median(got)
    return {"median": round(med, 4), "min": round(min(got), 4), "max": round(max(got), 4), "n": len(got)}


def fit_rate(points: list[tuple[float, float]], target_cores: float) -> float:
    """The rate at which the online pod uses `target_cores`, from (requests/s, cores) points: the least-squares
    line through the origin (an idle nginx uses nothing), rounded to 10 requests/s."""
    num = sum(r * c for r, c in points)
    den = sum(r * r for r, _ in points)
    if num <= 0 or den <= 0:
        raise ValueError(f"calibration gave no CPU cost per request: {points}")
    return float(max(10, round(target_cores / (num / den) / 10.0) * 10))


def summarize(cells: list[dict[str, Any]], loads: list[float]) -> dict[str, Any]:
    """The JSON: medians (with ranges) per kind and arm, the raw cells under `raw`, the loads beside them."""
    kinds: dict[str, dict[str, dict[str, Any]]] = {}
    ranges: dict[str, dict[str, dict[str, Any]]] = {}
    more: dict[str, dict[str, dict[str, Any]]] = {}
    rounds = 0
    for kind in KINDS:
        for arm in (*ARMS, *EXTRA_ARMS):
            rows = [c for c in cells if c["kind"] == kind and c["arm"] == arm]
            if not rows:
                continue
            rounds = max(rounds, len(rows))
            stats = {f: median_range([r.get(f) for r in rows]) for f in FIELDS}
            kinds.setdefault(kind, {})[arm] = {f: s["median"] for f, s in stats.items()}
            ranges.setdefault(kind, {})[arm] = {f: [s["min"], s["max"]] for f, s in stats.items()}
            more.setdefault(kind, {})[arm] = {f: median_range([r.get(f) for r in rows]) for f in MORE_FIELDS}
    return {"kinds": kinds, "ranges": ranges, "more": more, "rounds": rounds, "load": loads, "raw": cells}


def goals(summary: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """The project's goals for this benchmark, each (goal, met or None when not measured, figures)."""
    out: list[tuple[str, bool | None, str]] = []
    kinds = summary["kinds"]
    ranges = summary["ranges"]
    # a tidemark cell that ran no offline pod (no capacity published) measures nothing about colocation
    idle = {c["kind"] for c in summary["raw"] if c["arm"] == "tidemark" and not c.get("offline_pods_running")}

    def med(kind: str, arm: str, f: str) -> float | None:
        v = kinds.get(kind, {}).get(arm, {}).get(f)
        return None if v is None else float(v)

    def add(kind: str, goal: str, met: bool, detail: str) -> None:
        if kind in idle:
            n = sum(1 for c in summary["raw"] if c["kind"] == kind and c["arm"] == "tidemark"
                    and not c.get("offline_pods_running"))
            out.append((goal, None, f"{detail}; not measured: the tidemark arm ran no offline pod in {n} round(s) "
                                    "(no batch-cpu published)"))
        else:
            out.append((goal, met, detail))

    for kind in ("cpu", "memory"):
        a, t = med(kind, "alone", "online_p99_ms"), med(kind, "tidemark", "online_p99_ms")
        ua, ut = med(kind, "alone", "node_cpu_util"), med(kind, "tidemark", "node_cpu_util")
        if a and t is not None:
            add(kind, f"{kind}: tidemark p99 within 10 % of alone", t <= 1.10 * a,
                f"{t:.2f} vs {a:.2f} ms ({t / a - 1:+.0%}; stretch 5 %: {'met' if t <= 1.05 * a else 'not met'})")
        if ua is not None and ut is not None:
            add(kind, f"{kind}: node CPU utilisation +40 points over alone", ut - ua >= 0.40,
                f"{ua:.0%} -> {ut:.0%} ({(ut - ua) * 100:+.0f} points; stretch 85 %+: "
                f"{'met' if ut >= 0.85 else 'not met'})")
        b = med(kind, "kubelet_burstable", "online_p99_ms")
        if b and t is not None:
            add(kind, f"{kind}: tidemark p99 at least 20 % under kubelet_burstable", t <= 0.80 * b,
                f"{t:.2f} vs {b:.2f} ms ({t / b - 1:+.0%})")
    for kind in KINDS:
        t = med(kind, "tidemark", "online_p99_ms")
        be_range = ranges.get(kind, {}).get("kubelet_besteffort", {}).get("online_p99_ms")
        if t is not None and be_range and be_range[1] is not None:
            add(kind, f"{kind}: tidemark p99 no worse than kubelet_besteffort (within its range)",
                t <= float(be_range[1]), f"{t:.2f} ms vs besteffort {be_range[0]:.2f}-{be_range[1]:.2f} ms")
        wt, wb = med(kind, "tidemark", "offline_work_per_s"), med(kind, "kubelet_besteffort", "offline_work_per_s")
        if wt is not None and wb:
            add(kind, f"{kind}: tidemark offline work >= 70 % of kubelet_besteffort's", wt >= 0.70 * wb,
                f"{wt:.0f} vs {wb:.0f} bogo ops/s ({wt / wb:.0%})")
    bad = [f"{c['kind']}/{c['arm']} round {c['round']}" for c in summary["raw"] if c["arm"] in TIDEMARK_ARMS
           and (c.get("online_evictions") or 0) + (c.get("online_restarts") or 0) + (c.get("online_ooms") or 0)]
    if any(c["arm"] in TIDEMARK_ARMS for c in summary["raw"]):
        out.append(("zero online evictions, OOM kills or restarts with Tidemark", not bad, ", ".join(bad) or "none"))
    return out


# --- the pods (pure: manifests from the sizes) -------------------------------------------------------------
@dataclass(frozen=True)
class Sizing:
    """What an arm gives the offline pods of a kind: the CPU (milli-cores) and memory (bytes) their requests
    share (plain requests in kubelet_burstable, batch-* in the tidemark arms; unused in kubelet_besteffort),
    and the memory kind's hog (bytes held by stress-ng --vm)."""

    cpu_milli: int = 0
    memory_bytes: int = 0
    hog_bytes: int = 0


#: per kind: (pod suffix, memory each pod requests outside the memory kind, the stress-ng command)
CPU_JOB = "stress-ng --cpu 1 --cpu-method matrixprod"
IO_BUFFERED = "stress-ng --hdd 1 --hdd-bytes 2G --hdd-opts wr-seq --temp-path /scratch"
IO_DIRECT = "stress-ng --hdd 1 --hdd-bytes 1G --hdd-opts direct,wr-seq --temp-path /scratch"
#: the stressor whose bogo ops are the kind's offline work
WORK_STRESSOR = {"cpu": "cpu", "memory": "vm", "io": "hdd"}

OFFLINE_WRAPPER = r"""
set -u
{prep}
{stress} --timeout 7200 --metrics-brief --yaml /io/$POD_NAME.yaml >/io/$POD_NAME.log 2>&1 &
s=$!
trap 'kill -INT $s 2>/dev/null' TERM INT
while [ ! -e /io/stop ] && kill -0 $s 2>/dev/null; do sleep 0.2; done
kill -INT $s 2>/dev/null
wait $s
{after}
"""
#: the memory kind's page-cache streamer: a sparse file (holes read as zero pages, no disk I/O), read in a loop
#: from when the benchmark says the hog holds its memory (the file `stream`) until the stop
STREAMER_PREP = (
    "truncate -s 64G /scratch/sparse\n"
    "( while [ ! -e /io/stream ] && [ ! -e /io/stop ]; do sleep 0.2; done\n"
    "  while [ ! -e /io/stop ]; do dd if=/scratch/sparse of=/dev/null bs=1M count=65536 2>/dev/null; done ) &\n"
    "d=$!"
)


def offline_jobs(kind: str, sizing: Sizing) -> list[tuple[str, str, int]]:
    """(name suffix, stress-ng command line, memory the pod asks for) for each offline pod of `kind`."""
    if kind == "cpu":
        return [(f"cpu-{i}", CPU_JOB, 128 * MIB) for i in range(2)]
    if kind == "memory":
        hog = max(64 * MIB, sizing.hog_bytes)
        hog_job = f"stress-ng --vm 1 --vm-bytes {hog // MIB}M --vm-keep --vm-method write64"
        return [("mem-0", hog_job, sizing.memory_bytes)]
    if kind == "io":
        return [("io-buffered", IO_BUFFERED, 512 * MIB), ("io-direct", IO_DIRECT, 512 * MIB)]
    raise ValueError(kind)


def offline_pods(kind: str, arm: str, sizing: Sizing, image: str, ctl: str, cell: str) -> list[dict[str, Any]]:
    """The offline pods of one cell: the same jobs in every arm; only their resources, scheduler and
    annotations differ (module docstring)."""
    if arm == "alone":
        return []
    jobs = offline_jobs(kind, sizing)
    pods = []
    for suffix, stress, mem in jobs:
        share = sizing.cpu_milli // len(jobs)
        resources: dict[str, Any] = {}
        meta: dict[str, Any] = {"name": f"{cell}-{suffix}", "namespace": NS,
                                "labels": {"app": "colocation-offline", "cell": cell}}
        spec: dict[str, Any] = {}
        if arm == "kubelet_burstable":
            resources = {"requests": {"cpu": f"{max(share, 10)}m", "memory": str(max(mem, 64 * MIB))}}
        elif arm in TIDEMARK_ARMS:
            batch = {"kubernetes.io/batch-cpu": str(max(share, 10)),
                     "kubernetes.io/batch-memory": str(max(mem, 64 * MIB))}
            # requests = limits: the agent's CFS quota and memory limit hold each pod to its share of what it
            # published; tidemark_nolimits asks requests only (README's example), so the pods may use idle CPU
            resources = {"requests": batch}
            if arm != "tidemark_nolimits":
                resources["limits"] = dict(batch)
            meta["annotations"] = {"volcano.sh/qos-level": "-1", "scheduling.k8s.io/group-name": cell}
            spec["schedulerName"] = "volcano"
        elif arm != "kubelet_besteffort":
            raise ValueError(arm)
        prep = STREAMER_PREP if kind == "memory" else ""
        after = "kill $d 2>/dev/null" if kind == "memory" else ""
        spec.update(
            restartPolicy="Never",
            terminationGracePeriodSeconds=5,  # an evicted job's trap writes what it did
            dnsPolicy="Default",
            containers=[{
                "name": "job",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", OFFLINE_WRAPPER.format(prep=prep, stress=stress, after=after)],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": resources,
                "volumeMounts": [{"name": "io", "mountPath": "/io"}, {"name": "scratch", "mountPath": "/scratch"}],
            }],
            volumes=[{"name": "io", "hostPath": {"path": ctl, "type": "DirectoryOrCreate"}},
                     {"name": "scratch", "emptyDir": {}}],
        )
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return pods


def podgroup(cell: str, members: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": cell, "namespace": NS},
            "spec": {"minMember": members, "queue": "default"}}


NGINX_CONF = """user root;
worker_processes 2;
pid /tmp/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  default_type text/plain;
  access_log /var/log/nginx/access.log;
  sendfile on;
  tcp_nodelay on;
  keepalive_timeout 600;
  keepalive_requests 100000000;
  gzip on;
  gzip_comp_level 1;
  gzip_min_length 0;
  gzip_types text/plain;
  server { listen PORT default_server; root /srv/www; location / { } }
}
""".replace("PORT", str(PORT))

NGINX_START = (
    "set -e; mkdir -p /srv/www /var/log/nginx; "
    "cd /usr/share/common-licenses && cat GPL-3 GPL-2 Apache-2.0 > /srv/www/index.txt; "
    "cat > /tmp/nginx.conf <<'EOF'\n" + NGINX_CONF + "EOF\n"
    "exec nginx -c /tmp/nginx.conf -g 'daemon off;'"
)


def online_pod(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": NS, "labels": {"app": "colocation-web"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "dnsPolicy": "Default",
            "containers": [{
                "name": "nginx",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", NGINX_START],
                "ports": [{"containerPort": PORT}],
                "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2},
                "resources": {"requests": {"cpu": f"{ONLINE_CPU_REQUEST_M}m", "memory": "256Mi"},
                              "limits": {"memory": "512Mi"}},
            }],
        },
    }


def shipped_agent_config() -> str:
    """The agent.yaml of the shipped ConfigMap (daemonset/agent/configmap.yaml)."""
    import yaml

    docs = [d for d in yaml.safe_load_all((REPO / "daemonset" / "agent" / "configmap.yaml").read_text()) if d]
    return str(next(d["data"]["agent.yaml"] for d in docs if d.get("kind") == "ConfigMap"))


def noqos_config(agent_yaml: str) -> str:
    """An agent.yaml with `qos.enabled: false` (the attribution arm: no offline knobs at all)."""
    import yaml

    conf = yaml.safe_load(agent_yaml) or {}
    conf.setdefault("qos", {})["enabled"] = False
    return str(yaml.safe_dump(conf, sort_keys=False))


# ---------------------------------------------------------------------------------------------------------
# The open-loop generator (`--generate HOST:PORT`, a child process of the benchmark)
# ---------------------------------------------------------------------------------------------------------
REQUEST = (f"GET {PATH} HTTP/1.1\r\nHost: web\r\nAccept-Encoding: gzip\r\nUser-Agent: tidemark-colocation\r\n\r\n"
           ).encode()


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status
            await reader.readexactly(size + 2)
    m = re.search(rb"content-length:\s*(\d+)", lower)
    if m and int(m[1]):
        await reader.readexactly(int(m[1]))
    return status


async def _generate(host: str, port: int, rate: float, out: str, max_conns: int, timeout: float,
                    duration: float | None = None) -> dict[str, Any]:
    """Sends GETs on a fixed timetable (request i at start + i / rate) until stdin closes (or for `duration`
    seconds); each latency is measured from the INTENDED send time, so waiting for a connection or behind a
    slow answer counts. At most `max_conns` connections (keep-alive, opened as needed); a failed request or
    one not answered within `timeout` is an error. Writes (intended, latency or NaN, send lag) triples of
    doubles to `out`."""
    loop = asyncio.get_running_loop()
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    slots = asyncio.Semaphore(max_conns)
    records = array.array("d")
    stop = asyncio.Event()
    opened = 0
    pending: dict[asyncio.Task[None], float] = {}

    def on_stdin() -> None:
        if not os.read(0, 4096):
            loop.remove_reader(0)
            stop.set()

    if duration is None:
        loop.add_reader(0, on_stdin)
    else:
        loop.call_later(duration, stop.set)

    async def one(intended: float) -> None:
        nonlocal opened
        conn = None
        async with slots:
            try:
                conn = idle.pop() if idle else None
                if conn is None:
                    conn = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                    opened += 1
                sent = loop.time()
                conn[1].write(REQUEST)
                status = await asyncio.wait_for(_read_response(conn[0]), timeout)
                done = loop.time()
                if status != 200:
                    raise ValueError(status)
                records.extend((intended, done - intended, sent - intended))
                idle.append(conn)
            except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                records.extend((intended, math.nan, math.nan))
                if conn is not None:
                    conn[1].close()

    start = loop.time() + 0.05
    i = 0
    while not stop.is_set():
        intended = start + i / rate
        delay = intended - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = loop.create_task(one(intended))
        pending[task] = intended
        task.add_done_callback(lambda t: pending.pop(t, None))
        i += 1
    if pending:
        await asyncio.wait(list(pending), timeout=timeout)
    for task, intended in list(pending.items()):
        task.cancel()
        records.extend((intended, math.nan, math.nan))
    with open(out, "wb") as f:
        records.tofile(f)
    return {"sent": i, "connections": opened, "records": len(records) // 3}


def generator_main(target: str, rate: float, out: str, max_conns: int) -> int:
    host, port = target.rsplit(":", 1)
    summary = asyncio.run(_generate(host, int(port), rate, out, max_conns, timeout=10.0))
    print(json.dumps(summary), flush=True)
    return 0


class Generator:
    """The generator as a child process: `start()`, then `stop()` returns its records."""

    def __init__(self, target: str, rate: float, path: Path) -> None:
        self.target, self.rate, self.path = target, rate, path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Generator:
        self.path.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--generate", self.target, "--rate", str(self.rate),
             "--records", str(self.path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        return self

    def stop(self) -> list[tuple[float, float, float]]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        data = array.array("d")
        with contextlib.suppress(OSError), open(self.path, "rb") as f:
            data.frombytes(f.read())
        self.path.unlink(missing_ok=True)
        return [(data[i], data[i + 1], data[i + 2]) for i in range(0, len(data) - 2, 3)]


# ---------------------------------------------------------------------------------------------------------
# The node's counters
# ---------------------------------------------------------------------------------------------------------
def _read(path: Path | str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _int(path: Path | str, default: int = 0) -> int:
    try:
        return int(_read(path))
    except ValueError:
        return default


def pod_cgroup(pod: dict[str, Any], controller: str) -> Path:
    qos = {"BestEffort": "besteffort", "Burstable": "burstable"}.get(pod.get("status", {}).get("qosClass", ""))
    base = CG / controller / "kubepods"
    return (base / qos if qos else base) / f"pod{pod['metadata']['uid']}"


def proc_stat_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the machine: user+nice+system+irq+softirq (+steal in total)."""
    f = [int(x) for x in _read("/proc/stat").splitlines()[0].split()[1:]]
    busy = f[0] + f[1] + f[2] + f[5] + f[6]
    return busy, sum(f[:8])


def vmstat() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in _read("/proc/vmstat").splitlines():
        k, _, v = line.partition(" ")
        if k.startswith(("pgscan_", "allocstall_")) or k in ("oom_kill", "pgmajfault"):
            out[k] = int(v)
    return out


def disk_sectors_written() -> int:
    """Sectors written to the machine's disks (the block devices with a device behind them: no loop, zram, dm)."""
    try:
        disks = {d for d in os.listdir("/sys/block") if os.path.exists(f"/sys/block/{d}/device")}
    except OSError:
        return 0
    total = 0
    for line in _read("/proc/diskstats").splitlines():
        p = line.split()
        if len(p) > 9 and p[2] in disks:
            total += int(p[9])
    return total


def meminfo() -> dict[str, int]:
    out = {}
    for line in _read("/proc/meminfo").splitlines():
        k, _, v = line.partition(":")
        out[k] = int(v.split()[0]) * 1024
    return out


@dataclass
class Counters:
    t: float
    kubepods_ns: int
    web_ns: int
    offline_ns: int
    busy: tuple[int, int]
    vm: dict[str, int]
    sectors: int

    @staticmethod
    def read(web: dict[str, Any] | None, offline: list[dict[str, Any]]) -> Counters:
        return Counters(
            t=time.monotonic(),
            kubepods_ns=_int(CG / "cpuacct" / "kubepods" / "cpuacct.usage"),
            web_ns=_int(pod_cgroup(web, "cpuacct") / "cpuacct.usage") if web else 0,
            offline_ns=sum(_int(pod_cgroup(p, "cpuacct") / "cpuacct.usage") for p in offline),
            busy=proc_stat_busy(),
            vm=vmstat(),
            sectors=disk_sectors_written(),
        )


def window_figures(c0: Counters, c1: Counters, cores: float) -> dict[str, Any]:
    dt = max(c1.t - c0.t, 1e-9)
    busy = (c1.busy[0] - c0.busy[0]) / max(c1.busy[1] - c0.busy[1], 1)
    scanned = sum(c1.vm.get(k, 0) - c0.vm.get(k, 0) for k in c1.vm if k.startswith("pgscan_"))
    stalls = sum(c1.vm.get(k, 0) - c0.vm.get(k, 0) for k in c1.vm if k.startswith("allocstall_"))
    return {
        "node_cpu_util": round((c1.kubepods_ns - c0.kubepods_ns) / 1e9 / dt / cores, 4),
        "online_cores": round((c1.web_ns - c0.web_ns) / 1e9 / dt, 4),
        "offline_cores": round(max(0, c1.offline_ns - c0.offline_ns) / 1e9 / dt, 4),
        "node_busy_util": round(busy, 4),
        "reclaim_scanned_mib_s": round(scanned * 4096 / MIB / dt, 1),
        "direct_reclaim_stalls": stalls,
        "node_oom_kills": c1.vm.get("oom_kill", 0) - c0.vm.get("oom_kill", 0),
        "disk_write_mib_s": round((c1.sectors - c0.sectors) * 512 / MIB / dt, 1),
    }


def cgroup_pids(pod: dict[str, Any]) -> list[int]:
    """The processes in the pod's cgroups (cpu hierarchy; none when kubelet removed them)."""
    out: list[int] = []
    for d, _dirs, files in os.walk(pod_cgroup(pod, "cpu")):
        if "cgroup.procs" in files:
            out += [int(x) for x in _read(Path(d, "cgroup.procs")).split()]
    return out


def oom_kills(pod: dict[str, Any]) -> int:
    """OOM kills inside the pod's memory cgroup (v1 memory.oom_control `oom_kill`, kernel >= 4.13)."""
    for line in _read(pod_cgroup(pod, "memory") / "memory.oom_control").splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def agent_knobs(pods: list[dict[str, Any]] | None = None) -> list[str]:
    """What of the agent's knobs the cgroup files show: `cpu.idle` = 1 and a memory soft limit anywhere under
    kubepods (kubelet writes neither on v1), blkio throttles on a pod; CFS quotas on the given pods (none of
    which has a CPU limit) and memory limits on those without a memory limit; `oom_score_adj` 1000 in a
    Burstable pod (kubelet gives them less)."""
    found: list[str] = []
    for d, _dirs, files in os.walk(CG / "cpu" / "kubepods"):
        if "cpu.idle" in files and _read(Path(d, "cpu.idle")) == "1":
            found.append(f"{d}/cpu.idle=1")
    for d, _dirs, files in os.walk(CG / "memory" / "kubepods"):
        if "memory.soft_limit_in_bytes" in files and _int(Path(d, "memory.soft_limit_in_bytes")) != UNLIMITED_V1:
            found.append(f"{d}/memory.soft_limit_in_bytes={_read(Path(d, 'memory.soft_limit_in_bytes'))}")
    for d, _dirs, files in os.walk(CG / "blkio" / "kubepods"):
        for f in files:
            if f.startswith("blkio.throttle.") and f.endswith("_device") and _read(Path(d, f)):
                found.append(f"{d}/{f}={_read(Path(d, f))!r}")
    for p in pods or []:
        limits = [c.get("resources", {}).get("limits") or {} for c in p["spec"]["containers"]]
        cpu_dir, mem_dir = pod_cgroup(p, "cpu"), pod_cgroup(p, "memory")
        if not any("cpu" in lim or "kubernetes.io/batch-cpu" in lim for lim in limits):
            for d, _dirs, files in os.walk(cpu_dir):
                if "cpu.cfs_quota_us" in files and _read(Path(d, "cpu.cfs_quota_us")) not in ("", "-1"):
                    found.append(f"{d}/cpu.cfs_quota_us={_read(Path(d, 'cpu.cfs_quota_us'))}")
        if not any("memory" in lim or "kubernetes.io/batch-memory" in lim for lim in limits):
            for d, _dirs, files in os.walk(mem_dir):
                if "memory.limit_in_bytes" in files and _int(Path(d, "memory.limit_in_bytes")) != UNLIMITED_V1:
                    found.append(f"{d}/memory.limit_in_bytes={_read(Path(d, 'memory.limit_in_bytes'))}")
        if p.get("status", {}).get("qosClass") == "Burstable":
            # the container's first process (its shell) only: stress-ng raises its own workers' to 1000
            for d, _dirs, files in os.walk(mem_dir):
                pids = sorted(int(x) for x in _read(Path(d, "cgroup.procs")).split()) if "cgroup.procs" in files else []
                if pids and d != str(mem_dir) and _read(f"/proc/{pids[0]}/oom_score_adj") == "1000":
                    found.append(f"pid {pids[0]} ({p['metadata']['name']}) oom_score_adj=1000")
    return found


def journal_entries() -> int | None:
    try:
        doc = json.loads((STATE_DIR / "journal.json").read_text())
    except (OSError, ValueError):
        return None
    return len(doc.get("knobs") or []) + len(doc.get("procs") or [])


# ---------------------------------------------------------------------------------------------------------
# The cluster side
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Colocation:
    node: Any  # localcluster.realnode.RealNode
    args: argparse.Namespace
    say: Any
    image: str = ""
    rate: float = 0.0
    installed: bool = True
    config: str = "default"  # the agent config in force: default | noqos
    web: dict[str, Any] | None = None
    web_uid: str = ""
    calibration: list[dict[str, Any]] = field(default_factory=list)
    api: Any = None
    core: Any = None
    apps: Any = None
    custom: Any = None
    admission: Any = None
    cores: float = 2.0
    #: the tidemark arm's agent.yaml: the shipped ConfigMap's unless --agent-config names another
    base_config: str = ""
    #: the machine's busy cores while the online pod ran alone (calibration): what is not idle
    idle_busy_cores: float = 0.0

    # --- API helpers -------------------------------------------------------------------------------
    def connect(self) -> None:
        import urllib3
        from kubernetes import client, config  # type: ignore[import-untyped,unused-ignore]

        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the local apiserver's own CA
        self.api = config.new_client_from_config(config_file=str(self.node.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.admission = client.AdmissionregistrationV1Api(self.api)

    def raw(self, fn: Any, *a: Any, **kw: Any) -> Any:
        """A client call's JSON as plain dicts (None on 404)."""
        from kubernetes.client.rest import ApiException  # type: ignore[import-untyped,unused-ignore]

        try:
            return json.loads(fn(*a, _preload_content=False, **kw).data)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def node_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.raw(self.core.read_node, self.node.node_name)
        return obj

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.raw(self.core.list_namespaced_pod, NS, label_selector=selector)["items"]
        return items

    def published(self) -> tuple[int, int]:
        alloc = self.node_obj()["status"].get("allocatable") or {}
        return int(alloc.get("kubernetes.io/batch-cpu", "0")), int(alloc.get("kubernetes.io/batch-memory", "0"))

    def evicting(self) -> bool:
        return (self.node_obj()["metadata"].get("annotations") or {}).get("volcano.sh/offline-job-evicting") == "true"

    def wait(self, cond: Any, timeout: float, what: str, poll: float = 0.5) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(poll)
        self.say(f"  (waited {timeout:.0f} s for {what}: not yet)")
        return False

    # --- setup ------------------------------------------------------------------------------------
    def setup(self) -> None:
        from localcluster.realnode import _run

        self.connect()
        archive = _run(["bash", str(REPO / "hack" / "bench-image.sh"), "build"], timeout=3600).stdout.strip()
        self.image = _run(["bash", str(REPO / "hack" / "bench-image.sh"), "ref"]).stdout.strip()
        self.node.ctr("images", "import", archive, timeout=600)
        self.say(f"bench image {self.image} imported ({archive})")
        self.base_config = (Path(self.args.agent_config).read_text() if self.args.agent_config
                            else shipped_agent_config())
        alloc = self.node_obj()["status"]["allocatable"]
        self.cores = int(_parse_cpu(alloc["cpu"])) / 1000.0
        # The shipped defaults, not the demo's: make run's node carries examples/local-node.yaml's CPU
        # watermarks (30/15 %); a user who sets none gets the agent's defaults (80/30, 60/30).
        self.node.kubectl("annotate", "node", self.node.node_name, *[f"{a}-" for a in DEMO_ANNOTATIONS], check=False)
        self.node.kubectl("create", "namespace", NS, check=False)

        def sa_token() -> bool:
            sa = self.raw(self.core.read_namespaced_service_account, "default", NS)
            return bool(sa and sa.get("secrets"))

        self.wait(sa_token, 60, "the default ServiceAccount token")
        # Tidemark out first: its pods as shipped request 1200m of this node's 2000m (two scheduler replicas of
        # 500m), and the online pod's 1 CPU must fit beside the one scheduler replica the tidemark arms run.
        self.want("alone")
        self.replace_web()
        if not self.wait(lambda: self._web_ready(), 120, "the online pod Ready"):
            raise RuntimeError("the online pod (nginx) did not become Ready: "
                               + json.dumps(self.raw(self.core.read_namespaced_pod, "web", NS).get("status"))[:800])
        self.say(f"online: nginx in pod web at {self.web_ip()}:{PORT} (Burstable, cpu 1, memory 256Mi/512Mi)")
        CTL_ROOT.mkdir(parents=True, exist_ok=True)

    def _web_ready(self) -> bool:
        self.web = self.raw(self.core.read_namespaced_pod, "web", NS)
        return (bool(self.web) and not self.web["metadata"].get("deletionTimestamp")
                and self.web["metadata"]["uid"] == self.web_uid and self.node.pod_ready(self.web))

    def replace_web(self) -> None:
        """A new online pod: an earlier one (a previous run's, or a dead one) deleted and waited for first."""
        with contextlib.suppress(Exception):
            self.core.delete_namespaced_pod("web", NS, grace_period_seconds=0)
        self.wait(lambda: self.raw(self.core.read_namespaced_pod, "web", NS) is None, 300, "the old web pod gone")
        created = self.core.create_namespaced_pod(NS, online_pod(self.image))
        self.web_uid = created.metadata.uid

    def web_ip(self) -> str:
        assert self.web is not None
        return str(self.web["status"]["podIP"])

    def web_state(self) -> dict[str, Any]:
        pod = self.raw(self.core.read_namespaced_pod, "web", NS)
        if not pod:
            return {"uid": None, "restarts": 0, "ooms": 0, "evicted": True}
        statuses = pod["status"].get("containerStatuses") or [{}]
        return {
            "uid": pod["metadata"]["uid"],
            "restarts": int(statuses[0].get("restartCount", 0)),
            "ooms": oom_kills(pod),
            "evicted": bool(pod["metadata"].get("deletionTimestamp")) or pod["status"].get("reason") == "Evicted",
        }

    def ensure_web(self) -> None:
        """The online pod again where something removed it (counted as an eviction by the cell)."""
        if self._web_ready():
            return
        pod = self.raw(self.core.read_namespaced_pod, "web", NS)
        if (pod is None or pod["metadata"].get("deletionTimestamp") or pod["metadata"]["uid"] != self.web_uid
                or pod["status"].get("phase") in ("Failed", "Succeeded")):
            self.say("the online pod is gone or dead: a new one")
            self.replace_web()
        self.wait(self._web_ready, 120, "the online pod Ready")

    # --- Tidemark in and out ---------------------------------------------------------------------------
    def uninstall(self) -> None:
        """As a user removes it: labels off the Node (the agent restores its knobs and publishes 0), then the
        DaemonSet (its agent, on SIGTERM with its DaemonSet gone, restores everything it wrote), the Deployments
        and the webhook configurations; `tidemark-agent restore` on the host; the files are checked."""
        t0 = time.monotonic()
        steps = []
        self.node.kubectl("label", "node", self.node.node_name, *[f"{k}-" for k in AGENT_LABELS], check=False)
        self.wait(lambda: self.published() == (0, 0), 30, "batch-cpu/batch-memory published as 0")
        steps.append(f"labels off {time.monotonic() - t0:.0f} s")
        self.node.kubectl("delete", "-n", "tidemark-system", "daemonset/tidemark-agent",
                          "deployment/tidemark-scheduler", "deployment/tidemark-webhook", "--ignore-not-found",
                          "--wait=false", timeout=60)
        self.node.kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                          "tidemark-admission", "--ignore-not-found", timeout=60)
        # the scheduler's and webhook's pods hold nothing on the node: not waited for (the agent's pod keeps its
        # grace period: on SIGTERM with its DaemonSet gone it restores what it wrote)
        self.node.kubectl("delete", "pods", "-n", "tidemark-system", "-l",
                          "app.kubernetes.io/name in (tidemark-scheduler,tidemark-webhook)", "--grace-period=0",
                          "--force", "--wait=false", check=False, timeout=60)

        def gone() -> bool:
            # a pod whose processes are all gone from its cgroup counts: kubelet may take minutes more to tear its
            # sandbox down and report it (here: `failed to remove netns ... device or resource busy` while other
            # jobs hold mounts), and the agent has restored everything before its process exits
            left = self.raw(self.core.list_namespaced_pod, "tidemark-system")["items"]
            done = [p for p in left if p["metadata"].get("deletionTimestamp") and not cgroup_pids(p)]
            for p in done:
                with contextlib.suppress(Exception):
                    self.core.delete_namespaced_pod(p["metadata"]["name"], "tidemark-system", grace_period_seconds=0)
            return len(done) == len(left)

        self.wait(gone, 90, "the agent, scheduler and webhook pods gone", poll=1.0)
        steps.append(f"pods gone {time.monotonic() - t0:.0f} s")
        restore = subprocess.run(
            [str(Path(sys.executable).parent / "tidemark-agent"), "restore", "--state-dir", str(STATE_DIR),
             "--cgroup-root", str(CG)], capture_output=True, text=True, timeout=120, check=False)
        found = agent_knobs()
        self.installed = False
        self.say(f"Tidemark uninstalled in {time.monotonic() - t0:.0f} s ({', '.join(steps)}); tidemark-agent restore: "
                 f"{(restore.stdout or restore.stderr).strip().splitlines()[-1:] or ['(nothing)']}; journal entries: "
                 f"{journal_entries()}; agent knobs under kubepods: {len(found)}"
                 + (f" {found[:5]}" if found else " (cpu.idle, soft limits, blkio throttles all kubelet's)"))

    def install(self, config: str) -> None:
        """`kubectl apply -k` of the local overlay (the shipped manifests; `noqos`: with qos.enabled false in the
        agent's ConfigMap), the webhook's certificates, the labels; waits for the pods and the first publication."""
        t0 = time.monotonic()
        self.node.kubectl("apply", "-k", str(self.stage(config)), timeout=180)
        self.node.webhook_certs()
        self.node.kubectl("label", "node", self.node.node_name, "--overwrite", *[f"{k}=true" for k in AGENT_LABELS])
        self.node.wait_tidemark()
        self.wait(lambda: "kubernetes.io/batch-cpu" in (self.node_obj()["status"].get("allocatable") or {}), 60,
                  "the agent's first publication")
        self.installed, self.config = True, config
        self.say(f"Tidemark installed ({config} agent config) in {time.monotonic() - t0:.0f} s; published "
                 f"batch-cpu/batch-memory {self.published()}")

    def switch_config(self, config: str) -> None:
        """Another agent config while installed: the ConfigMap applied, the agent pod replaced (its DaemonSet
        stays, so nothing is restored by the old pod; the new one starts with the new config)."""
        t0 = time.monotonic()
        self.node.kubectl("apply", "-k", str(self.stage(config)), timeout=180)
        self.node.kubectl("delete", "pod", "-n", "tidemark-system", "-l", "app.kubernetes.io/name=tidemark-agent",
                          "--wait=true", timeout=120)
        self.node.wait_tidemark()
        self.config = config
        self.say(f"agent config {config} in force in {time.monotonic() - t0:.0f} s")

    def stage(self, config: str) -> Path:
        """The overlay to apply: a copy of daemonset/ (localcluster's staging) whose agent ConfigMap carries the
        arm's agent.yaml (the shipped one unless --agent-config or noqos) and whose scheduler Deployment has ONE
        replica: the shipped two request 500m each, and with the agent (100m) and the webhook (2 x 50m)
        Tidemark's pods would ask 1200m of this 2-core node; applied beside the 1-CPU online pod, their
        system-cluster-critical priority makes kube-scheduler preempt it (measured). On a real cluster the
        scheduler's replicas run on other nodes."""
        import yaml

        self.node.agent_config = noqos_config(self.base_config) if config == "noqos" else self.base_config
        overlay = Path(self.node.stage_manifests())
        dep = overlay.parents[1] / "scheduler" / "deployment.yaml"
        docs = [d for d in yaml.safe_load_all(dep.read_text()) if d]
        for d in docs:
            if d.get("kind") == "Deployment":
                d["spec"]["replicas"] = 1
        dep.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return overlay

    def want(self, arm: str) -> None:
        if arm in TIDEMARK_ARMS:
            config = "noqos" if arm == "tidemark_noqos" else "default"
            if not self.installed:
                self.install(config)
            elif self.config != config:
                self.switch_config(config)
        elif self.installed:
            self.uninstall()

    # --- calibration --------------------------------------------------------------------------------
    def measure_idle(self, seconds: float = 5.0) -> None:
        """The machine's busy cores with the online pod alone at the chosen rate: what kubelet_burstable's
        requests may take of the idle CPU."""
        gen = Generator(f"{self.web_ip()}:{PORT}", self.rate, self.args.run_dir / "idle.bin").start()
        time.sleep(1.0)
        b0 = proc_stat_busy()
        time.sleep(seconds)
        b1 = proc_stat_busy()
        gen.stop()
        self.idle_busy_cores = (b1[0] - b0[0]) / max(b1[1] - b0[1], 1) * self.cores
        self.say(f"the machine with the online pod alone at {self.rate:.0f} req/s: {self.idle_busy_cores:.2f} of "
                 f"{self.cores:.0f} cores busy (load {os.getloadavg()[0]:.1f})")

    def calibrate(self, rates: list[float], seconds: float) -> float:
        points = []
        for r in rates:
            gen = Generator(f"{self.web_ip()}:{PORT}", r, self.args.run_dir / "calib.bin").start()
            time.sleep(1.5)
            c0 = Counters.read(self.web, [])
            time.sleep(seconds)
            c1 = Counters.read(self.web, [])
            records = gen.stop()
            lat = latency_summary(records, c0.t, c1.t)
            cores = (c1.web_ns - c0.web_ns) / 1e9 / (c1.t - c0.t)
            points.append((lat["online_rps"], cores))
            row = {"rate": r, "achieved_rps": lat["online_rps"], "online_cores": round(cores, 4),
                   "p50_ms": lat["online_p50_ms"], "p99_ms": lat["online_p99_ms"], "load_1m": os.getloadavg()[0]}
            self.calibration.append(row)
            self.say(f"  calibration: {r:.0f} req/s -> nginx {cores:.3f} cores, p50 {lat['online_p50_ms']} ms, "
                     f"p99 {lat['online_p99_ms']} ms (load {row['load_1m']:.1f})")
        target = TARGET_FRACTION * ONLINE_CPU_REQUEST_M / 1000.0
        rate = fit_rate(points, target)
        self.say(f"calibrated rate: {rate:.0f} req/s for {target:.2f} cores (a third of the online pod's 1-CPU "
                 f"request; {1000 * sum(c for _, c in points) / max(sum(r for r, _ in points), 1):.3f} ms of CPU "
                 "per request)")
        return rate

    # --- one cell ---------------------------------------------------------------------------------------
    def sizing(self, kind: str, arm: str) -> tuple[Sizing, dict[str, Any]]:
        note: dict[str, Any] = {}
        mem = meminfo()
        avail = max(0, mem["MemAvailable"] - MEMORY_MARGIN)
        note["mem_available_gib"] = round(mem["MemAvailable"] / GIB, 2)
        if arm in ("alone", "kubelet_besteffort"):
            return Sizing(hog_bytes=int(HOG_FRACTION * avail)), note
        if arm == "kubelet_burstable":
            alloc = self.node_obj()["status"]["allocatable"]
            req_cpu = req_mem = 0
            for p in self.raw(self.core.list_pod_for_all_namespaces,
                              field_selector=f"spec.nodeName={self.node.node_name}")["items"]:
                if p["status"].get("phase") in ("Succeeded", "Failed"):
                    continue
                for c in p["spec"]["containers"]:
                    r = c.get("resources", {}).get("requests") or {}
                    req_cpu += _parse_cpu(r.get("cpu", "0"))
                    req_mem += _parse_mem(r.get("memory", "0"))
            unreq_cpu = _parse_cpu(alloc["cpu"]) - req_cpu
            unreq_mem = _parse_mem(alloc["memory"]) - req_mem
            idle_cpu = int(1000 * self.cores - 1000 * self.idle_busy_cores)
            cpu = max(0, min(unreq_cpu, idle_cpu))
            memory = max(0, min(unreq_mem, avail))
            note.update(unrequested_cpu_m=unreq_cpu, idle_cpu_m=idle_cpu,
                        unrequested_memory_gib=round(unreq_mem / GIB, 2))
            return Sizing(cpu_milli=cpu, memory_bytes=memory, hog_bytes=int(HOG_FRACTION * memory)), note
        # tidemark arms: what the agent publishes, once it is not evicting
        self.wait(lambda: not self.evicting(), 60, "the node out of the evicting state")
        # the capacity follows the node's usage over the agent's 60 s window: after a cell that kept the kernel
        # busy outside the pods (reclaim, writeback), give the window time to move past it
        self.wait(lambda: self.published()[0] >= 100, 120, "batch-cpu >= 100m published")
        cpu, memory = self.published()
        note.update(published_batch_cpu_m=cpu, published_batch_memory_mib=round(memory / MIB))
        cpu, memory = int(cpu * PUBLISHED_FRACTION), int(memory * PUBLISHED_FRACTION)
        if kind != "memory":
            memory = 0
        return Sizing(cpu_milli=cpu, memory_bytes=memory, hog_bytes=int(HOG_FRACTION * memory)), note

    def cell(self, kind: str, arm: str, rnd: int) -> dict[str, Any]:
        self.want(arm)
        self.ensure_web()
        cell = f"{kind}-{arm.replace('_', '-')}-r{rnd}"
        ctl = CTL_ROOT / cell
        shutil.rmtree(ctl, ignore_errors=True)
        ctl.mkdir(parents=True)
        rec: dict[str, Any] = {"kind": kind, "arm": arm, "round": rnd, "load_1m_start": round(os.getloadavg()[0], 2)}
        sizing, note = self.sizing(kind, arm)
        rec.update(note)
        rec["sizing"] = {"cpu_milli": sizing.cpu_milli, "memory_mib": sizing.memory_bytes // MIB,
                         "hog_mib": sizing.hog_bytes // MIB}
        manifests = offline_pods(kind, arm, sizing, self.image, str(ctl), cell)
        if arm in TIDEMARK_ARMS and sizing.cpu_milli < 20 * max(1, len(manifests)):
            rec["no_capacity"] = True
            manifests = []
        web0 = self.web_state()
        gen = Generator(f"{self.web_ip()}:{PORT}", self.rate, self.args.run_dir / "records.bin").start()
        time.sleep(1.0)
        t_create = time.monotonic()
        if manifests and arm in TIDEMARK_ARMS:
            self.custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", NS, "podgroups",
                                                        podgroup(cell, len(manifests)))
        for m in manifests:
            self.core.create_namespaced_pod(NS, m)
        offline: list[dict[str, Any]] = []

        def started() -> bool:
            nonlocal offline
            offline = self.pods(f"cell={cell}")
            return all(p["status"].get("phase") in ("Running", "Succeeded", "Failed") for p in offline)

        if manifests:
            self.wait(started, 90, "the offline pods Running")
            rec["offline_start_s"] = round(time.monotonic() - t_create, 2)
        running = [p for p in offline if p["status"].get("phase") == "Running"]
        rec["offline_pods_running"] = len(running)
        rec["offline_rejected"] = sum(1 for p in offline if p["status"].get("phase") == "Failed")
        if manifests:
            time.sleep(2.0)  # the agent's knobs land within a second of Running
        knobs = agent_knobs(running)
        rec["agent_knobs_found"] = len(knobs)
        rec["agent_knobs"] = sorted({re.sub(r"/pod[0-9a-f-]+(/[0-9a-f]{64})?", "/pod*", k).split("kubepods", 1)[-1]
                                     for k in knobs})[:12]
        if kind == "memory" and running:
            # warm-up: until the hog holds 90 % of its memory (its first touch takes seconds per GiB at the
            # CPU its arm gives it), then the page-cache streamer starts
            t_fill = time.monotonic()
            hog = rec["sizing"]["hog_mib"] * MIB

            def filled() -> bool:
                stat = _read(pod_cgroup(running[0], "memory") / "memory.stat")
                rss = next((int(x.split()[1]) for x in stat.splitlines() if x.startswith("total_rss ")), 0)
                return rss >= 0.9 * hog

            rec["hog_filled"] = self.wait(filled, self.args.fill_timeout, "the hog to hold 90 % of its memory")
            rec["hog_fill_s"] = round(time.monotonic() - t_fill, 1)
            (ctl / "stream").touch()
        time.sleep(self.args.warmup)
        c0 = Counters.read(self.web, running)
        time.sleep(self.args.measure)
        c1 = Counters.read(self.web, running)
        kp = _read(CG / "memory" / "kubepods" / "memory.usage_in_bytes")
        inactive = next((int(x.split()[1]) for x in _read(CG / "memory" / "kubepods" / "memory.stat").splitlines()
                         if x.startswith("total_inactive_file ")), 0)
        alloc_mem = _parse_mem(self.node_obj()["status"]["allocatable"]["memory"])
        rec["node_mem_util"] = round((int(kp or 0) - inactive) / alloc_mem, 4)
        rec.update(window_figures(c0, c1, self.cores))
        # before the stop: what happened to the offline pods (evicted: deleted by the agent; nothing else deletes)
        after = {p["metadata"]["name"]: p for p in self.pods(f"cell={cell}")}
        names = [m["metadata"]["name"] for m in manifests]
        evicted = [n for n in names if n not in after or after[n]["metadata"].get("deletionTimestamp")
                   or after[n]["status"].get("reason") == "Evicted"]
        rec["offline_evictions"] = len(evicted)
        rec["offline_ooms"] = sum(oom_kills(p) for p in after.values())
        (ctl / "stop").touch()
        self.wait(lambda: all((ctl / f"{n}.yaml").exists() for n in names if n in after
                              and after[n]["status"].get("phase") == "Running"), 30, "the offline jobs' metrics",
                  poll=0.3)
        records = gen.stop()
        rec.update(latency_summary(records, c0.t, c1.t))
        results = {n: parse_stress_yaml(_read(ctl / f"{n}.yaml")) for n in names}
        rec["offline_work_per_s"] = offline_work(results, WORK_STRESSOR[kind]) if arm != "alone" else None
        rec["offline_runs"] = {n: r.get(WORK_STRESSOR[kind]) for n, r in results.items()}
        web1 = self.web_state()
        rec["online_restarts"] = web1["restarts"] - web0["restarts"] if web1["uid"] == web0["uid"] else 1
        rec["online_ooms"] = max(0, web1["ooms"] - web0["ooms"]) if web1["uid"] == web0["uid"] else 0
        rec["online_evictions"] = int(web1["evicted"] or web1["uid"] != web0["uid"])
        rec["load_1m_end"] = round(os.getloadavg()[0], 2)
        rec["installed"] = self.installed
        self.cleanup(cell, [p["metadata"]["uid"] for p in offline])
        shutil.rmtree(ctl, ignore_errors=True)
        return rec

    def cleanup_all(self) -> None:
        """Every pod of the benchmark's namespace deleted (an attached node stays up)."""
        if self.core is not None:
            with contextlib.suppress(Exception):
                self.core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)

    def cleanup(self, cell: str, uids: list[str]) -> None:
        """The cell's offline pods deleted (grace 0) and waited for until kubelet has removed their cgroups."""
        self.core.delete_collection_namespaced_pod(NS, label_selector=f"cell={cell}", grace_period_seconds=0)
        with contextlib.suppress(Exception):
            self.custom.delete_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", NS, "podgroups", cell)

        def gone() -> bool:
            dirs = [d / f"pod{u}" for u in uids for d in (CG / "memory" / "kubepods", CG / "memory" / "kubepods" /
                                                          "besteffort", CG / "memory" / "kubepods" / "burstable")]
            return not self.pods(f"cell={cell}") and not any(d.exists() for d in dirs)

        self.wait(gone, 90, "the offline pods and their cgroups gone")



def _parse_cpu(q: str) -> int:
    q = str(q)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def _parse_mem(q: str) -> int:
    q = str(q)
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
    for u, mult in units.items():
        if q.endswith(u):
            return int(float(q[: -len(u)]) * mult)
    return int(float(q))


# ---------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------
def _cell_text(m: dict[str, Any], r: dict[str, Any], name: str, fmt: str = "{:.2f}", pct: bool = False) -> str:
    v, (lo, hi) = m.get(name), r.get(name, [None, None])
    if v is None:
        return "-"
    if pct:
        return f"{v:.0%} ({lo:.0%}-{hi:.0%})"
    return f"{fmt.format(v)} ({fmt.format(lo)}-{fmt.format(hi)})"


def table(summary: dict[str, Any]) -> str:
    """Medians (ranges) per kind and arm, one line each."""
    lines = [f"{'kind':<7}{'arm':<20}{'p50 ms':>18}{'p99 ms':>22}{'p99.9 ms':>22}{'rps':>7}{'err':>5}"
             f"{'node CPU':>16}{'offline ops/s':>24}{'evict on/off':>13}{'restarts':>9}"]
    for kind, arms in summary["kinds"].items():
        for arm, m in arms.items():
            r = summary["ranges"][kind][arm]
            lines.append(
                f"{kind:<7}{arm:<20}{_cell_text(m, r, 'online_p50_ms'):>18}{_cell_text(m, r, 'online_p99_ms'):>22}"
                f"{_cell_text(m, r, 'online_p999_ms'):>22}{m.get('online_rps') or 0:>7.0f}"
                f"{m.get('online_errors') or 0:>5.0f}{_cell_text(m, r, 'node_cpu_util', pct=True):>16}"
                f"{_cell_text(m, r, 'offline_work_per_s', '{:.0f}'):>24}"
                f"{(m.get('online_evictions') or 0):>8.0f}/{(m.get('offline_evictions') or 0):<4.0f}"
                f"{(m.get('online_restarts') or 0):>9.0f}"
            )
    return "\n".join(lines)


def plot(summary: dict[str, Any], out: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot")
        return False
    kinds = list(summary["kinds"])
    arms = [a for a in (*ARMS, *EXTRA_ARMS) if any(a in summary["kinds"][k] for k in kinds)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    width = 0.8 / max(1, len(arms))
    colors = {"alone": "tab:gray", "kubelet_besteffort": "tab:orange", "kubelet_burstable": "tab:red",
              "tidemark": "tab:blue", "tidemark_noqos": "tab:cyan", "tidemark_nolimits": "tab:purple"}
    for ax, name, label in ((axes[0], "online_p99_ms", "online p99 latency (ms)"),
                            (axes[1], "node_cpu_util", "node CPU utilisation (kubepods / cores)")):
        for i, arm in enumerate(arms):
            xs, ys, lo, hi = [], [], [], []
            for k, kind in enumerate(kinds):
                v = summary["kinds"][kind].get(arm, {}).get(name)
                if v is None:
                    continue
                r = summary["ranges"][kind][arm][name]
                xs.append(k + (i - (len(arms) - 1) / 2) * width)
                ys.append(v)
                lo.append(v - r[0])
                hi.append(r[1] - v)
            ax.bar(xs, ys, width * 0.95, yerr=[lo, hi], capsize=3, label=arm, color=colors.get(arm))
        ax.set_xticks(range(len(kinds)))
        ax.set_xticklabels([f"{k} interference" for k in kinds])
        ax.set_ylabel(label)
        if name == "node_cpu_util":
            ax.set_ylim(0, 1)
            ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        else:
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    load = summary.get("load") or [0.0]
    fig.suptitle(f"colocation on the real node ({summary.get('date', '')[:10]}): medians of {summary['rounds']} "
                 f"round(s), bars = range; nginx at {summary.get('rate', 0):.0f} req/s (open loop); load average "
                 f"{min(load):.1f}-{max(load):.1f} on {summary.get('cores', 2):.0f} cores", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return True


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------
def schedule(kinds: list[str], arms: list[str], rounds: int, first_on: bool = False) -> list[tuple[int, str, str]]:
    """(round, kind, arm) in run order: each round runs every kind and arm once; Tidemark's arms form one half
    of the round and the others the other half, the halves alternating (Tidemark's first in round 0 when
    `first_on`), so one install or uninstall happens per round; inside a half the kinds and arms rotate with
    the round."""
    def rotate(xs: list[str], r: int) -> list[str]:
        return xs[r % len(xs):] + xs[: r % len(xs)] if xs else xs

    # Tidemark's half, grouped by agent config (one config switch in it): the noqos group first in odd rounds
    default = [a for a in arms if a in TIDEMARK_ARMS and a != "tidemark_noqos"]
    noqos = [a for a in arms if a == "tidemark_noqos"]
    off = [a for a in arms if a not in TIDEMARK_ARMS]
    out: list[tuple[int, str, str]] = []
    for r in range(rounds):
        on = rotate(default, r) + noqos if r % 2 == 0 else noqos + rotate(default, r)
        halves = [on, rotate(off, r)] if (r % 2 == 0) == first_on else [rotate(off, r), on]
        ks = rotate(kinds, r)
        for half in halves:
            for arm in half:
                out.extend((r, k, arm) for k in ks)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--arms", default="",
                    help=f"of {', '.join(ARMS + EXTRA_ARMS)}; default all of them (--quick: {', '.join(ARMS)})")
    ap.add_argument("--rounds", type=int, default=None, help="default 5 (--quick: 2)")
    ap.add_argument("--measure", type=float, default=None, help="seconds measured per cell, default 30 (--quick: 8)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds after the offline pods run, default 10 (--quick: 4)")
    ap.add_argument("--rate", type=float, default=0.0, help="requests/s; 0 = calibrate")
    ap.add_argument("--fill-timeout", type=float, default=None,
                    help="memory kind: at most this long for the hog to fill before the warm-up, "
                         "default 90 (--quick: 45)")
    ap.add_argument("--quick", action="store_true", help="every kind and arm, 2 rounds, short windows (< 15 min)")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "colocation.json"))
    ap.add_argument("--plot", default=str(REPO / "benchmarks" / "results" / "colocation.png"))
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/tidemark-colocation"))
    ap.add_argument("--lock-wait", type=float, default=900.0)
    ap.add_argument("--agent-config", default="",
                    help="an agent.yaml for the tidemark arms instead of the shipped ConfigMap's (say why)")
    ap.add_argument("--attach", type=Path, default=None,
                    help="use the real node already up in this run dir (python -m localcluster.realnode up DIR: "
                         "development; it stays up afterwards)")
    ap.add_argument("--generate", help=argparse.SUPPRESS)
    ap.add_argument("--records", help=argparse.SUPPRESS)
    ap.add_argument("--max-conns", type=int, default=64, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.generate:
        return generator_main(args.generate, args.rate, args.records, args.max_conns)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.measure = args.measure or (8.0 if args.quick else 30.0)
    args.warmup = args.warmup if args.warmup is not None else (4.0 if args.quick else 10.0)
    args.fill_timeout = args.fill_timeout if args.fill_timeout is not None else (45.0 if args.quick else 90.0)
    kinds = [k for k in args.kinds.split(",") if k]
    arms = [a for a in args.arms.split(",") if a] or list(ARMS if args.quick else ARMS + EXTRA_ARMS)
    bad = [k for k in kinds if k not in KINDS] + [a for a in arms if a not in ARMS + EXTRA_ARMS]
    if bad:
        print(f"unknown kind or arm: {', '.join(bad)}", file=sys.stderr)
        return 2

    sys.path.insert(0, str(REPO))
    from localcluster.realnode import STATE_PATH, RealNode, Unsupported, cache_bin, host_is_supported

    reason = host_is_supported()
    if reason:
        print(f"bench_colocation: skipped: {reason}")
        return 0

    t_start = time.monotonic()

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # killed: tear the node down as on Ctrl-C
    signal.signal(signal.SIGHUP, on_term)

    def say(s: str) -> None:
        print(f"[{time.monotonic() - t_start:6.0f} s] {s}", flush=True)

    args.run_dir.mkdir(parents=True, exist_ok=True)
    if args.attach:
        node = RealNode(run_dir=args.attach.resolve(), log=lambda s: say(f"realnode: {s}"))
        node.bins = {b: str(cache_bin() / b) for b in ("kubectl", "kubelet", "kube-apiserver")}
        with contextlib.suppress(OSError, ValueError):  # its pids: the waits check that kubelet still runs
            node.pids = dict(json.loads(STATE_PATH.read_text()).get("pids") or {})
        say(f"attached to the real node in {args.attach}")
    else:
        node = RealNode(run_dir=args.run_dir / "node", log=lambda s: say(f"realnode: {s}"))
        try:
            node.up(lock_wait=args.lock_wait)
        except Unsupported as e:
            print(f"bench_colocation: skipped: {e}")
            return 0
        say(f"real node up in {node.timings.get('up', 0):.0f} s (Tidemark applied as shipped)")
    colo = Colocation(node=node, args=args, say=say)
    failed = ""
    cells: list[dict[str, Any]] = []
    loads: list[float] = []
    try:
        colo.setup()  # leaves Tidemark uninstalled: the calibration is the online pod alone on the node
        if args.rate:
            colo.rate = args.rate
        else:
            rates = [100.0, 250.0, 400.0] if args.quick else [100.0, 200.0, 300.0, 400.0, 500.0]
            colo.rate = colo.calibrate(rates, 4.0 if args.quick else 8.0)
        colo.measure_idle()
        plan = schedule(kinds, arms, args.rounds, first_on=False)  # calibration left Tidemark uninstalled
        say(f"{len(plan)} cells: kinds {kinds}, arms {arms}, {args.rounds} round(s), warm-up {args.warmup:.0f} s, "
            f"measured {args.measure:.0f} s each, nginx at {colo.rate:.0f} req/s")
        for i, (rnd, kind, arm) in enumerate(plan):
            rec = colo.cell(kind, arm, rnd)
            cells.append(rec)
            loads.append(rec["load_1m_start"])
            say(f"cell {i + 1}/{len(plan)} round {rnd} {kind:<6} {arm:<19} p50 {rec['online_p50_ms']} p99 "
                f"{rec['online_p99_ms']} p99.9 {rec['online_p999_ms']} ms, {rec['online_rps']:.0f} req/s, "
                f"err {rec['online_errors']}, node CPU {rec['node_cpu_util']:.0%}, offline "
                f"{rec['offline_work_per_s']} ops/s ({rec['offline_pods_running']} pods, evicted "
                f"{rec['offline_evictions']}), knobs {rec['agent_knobs_found']}, load {rec['load_1m_start']:.1f}"
                f"->{rec['load_1m_end']:.1f}")
    except KeyboardInterrupt:
        say("interrupted: tearing down")
        failed = "interrupted"
    except Exception as e:  # the cells so far are still reported
        traceback.print_exc()
        say(f"stopped by an error: {e!r}; tearing down")
        failed = repr(e)
    finally:
        if args.attach:
            colo.cleanup_all()
        else:
            problems = node.down()
            say(f"real node down{': left ' + ', '.join(problems) if problems else ', clean'}")
        shutil.rmtree(CTL_ROOT, ignore_errors=True)
    if not cells:
        return 1
    summary = summarize(cells, loads)
    commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True,
                            text=True, check=False).stdout.strip()
    summary.update(rate=colo.rate, calibration=colo.calibration, idle_busy_cores=round(colo.idle_busy_cores, 3),
                   measure_s=args.measure, warmup_s=args.warmup, cores=colo.cores, image=colo.image,
                   agent_config=args.agent_config or "shipped (daemonset/agent/configmap.yaml)", commit=commit,
                   date=time.strftime("%Y-%m-%d %H:%M:%S %z"), command=" ".join(sys.argv), error=failed or None)
    print(table(summary))
    print("goals:")
    for goal, met, detail in goals(summary):
        print(f"  [{'met' if met else 'NOT met' if met is not None else '-'}] {goal}: {detail}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    plotted = plot(summary, Path(args.plot))
    print(f"results: {args.json}" + (f", plot {args.plot}" if plotted else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
