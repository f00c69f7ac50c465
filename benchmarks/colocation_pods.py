"""bench_colocation's pods and agent configs (pure: manifests from the sizes; tests/unit/test_bench_colocation.py):
the offline jobs of each kind and arm, the online nginx pod, the agent.yaml of each Tidemark arm, and stress-ng's
output parsed into offline work."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colocation_stats import (
    CUT_ARMS,
    NOTIER_ARM,
    ONLINE_ONLY_ARMS,
    OPEN_ARM,
    SHARE_ARM,
    SUPPRESS_ARMS,
    TIDEMARK_ARMS,
    WAIT_ARMS,
)

REPO = Path(__file__).resolve().parents[1]
NS = "colocation"
PORT = 8080
PATH = "/index.txt"
MIB = 2**20
GIB = 2**30
#: online pod: Burstable, one CPU requested (half of this 2-core node), memory request 256Mi, limit 512Mi
ONLINE_CPU_REQUEST_M = 1000
#: memory kind: the hog holds this fraction of what its arm gives it; the node keeps this much free
HOG_FRACTION = 0.75
# The tidemark arms ask this share of what the agent published at the cell's start: B moves every capacity
# period (10 s) with U_non, and a gang asking all of it was left Pending ("Insufficient kubernetes.io/batch-cpu")
# whenever the next publication was a few millicores lower (the memory cell of round 0, 2026-11-28)
PUBLISHED_FRACTION = 0.9
MEMORY_MARGIN = 2 * GIB
#: the Tidemark arms whose pods ask batch-* requests without limits (README's example): they may use idle CPU
#: up to the agent's tier ceiling
REQUESTS_ONLY_ARMS = ("tidemark_nolimits", *SUPPRESS_ARMS, *WAIT_ARMS, *CUT_ARMS, OPEN_ARM, SHARE_ARM, NOTIER_ARM)


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
    if arm in ONLINE_ONLY_ARMS:
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
            # published; the requests-only arms (README's example) may use idle CPU up to the tier's ceiling
            resources = {"requests": batch}
            if arm not in REQUESTS_ONLY_ARMS:
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


def online_pod(image: str, access_log: bool = True) -> dict[str, Any]:
    """The online nginx pod; `access_log` False (`bench_colocation.py --access-log off`): nginx writes no access log
    (a cpu-only run: the log's per-request `write()` reaches the node's ext4 journal, shared with etcd's fsyncs)."""
    start = NGINX_START if access_log else NGINX_START.replace("access_log /var/log/nginx/access.log;",
                                                                "access_log off;")
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
                "command": ["sh", "-c", start],
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


def tier_cpu_config(agent_yaml: str, key: str, value: float | str | bool) -> str:
    """An agent.yaml with `tier.cpu.<key>` = value (docs/agent.md; an agent that does not know the key yet warns
    and ignores it, and the arm then measures the shipped behaviour)."""
    import yaml

    conf = yaml.safe_load(agent_yaml) or {}
    tier = conf.setdefault("tier", {}) or {}
    conf["tier"] = tier
    cpu = tier.setdefault("cpu", {}) or {}
    tier["cpu"] = cpu
    cpu[key] = value
    return str(yaml.safe_dump(conf, sort_keys=False))


def suppress_config(agent_yaml: str, ratio: float) -> str:
    """An agent.yaml with `tier.cpu.suppressRatio` = ratio."""
    return tier_cpu_config(agent_yaml, "suppressRatio", ratio)


def arm_config(arm: str) -> str:
    """The agent config an arm runs with: `default` (the shipped ConfigMap or --agent-config), `noqos`,
    `s<percent>` for a suppress setting (tidemark_s70 -> s70), `w<percent>` for an online-wait target
    (tidemark_w10 -> w10) or `cut:<mode>` for a wait cut (tidemark_pcut -> cut:proportional)."""
    if arm == "tidemark_noqos":
        return "noqos"
    if arm in SUPPRESS_ARMS:
        return f"s{round(SUPPRESS_ARMS[arm] * 100)}"
    if arm in WAIT_ARMS:
        return f"w{round(WAIT_ARMS[arm] * 100)}"
    if arm in CUT_ARMS:
        return f"cut:{CUT_ARMS[arm]}"
    if arm == OPEN_ARM:
        return "open"
    if arm == SHARE_ARM:
        return "share"
    if arm == NOTIER_ARM:
        return "notier"
    return "default"


def agent_yaml_for(config: str, base: str) -> str:
    """The agent.yaml of `config` (arm_config's names) derived from the base agent.yaml."""
    if config == "noqos":
        return noqos_config(base)
    if config.startswith("s") and config[1:].isdigit():
        return suppress_config(base, int(config[1:]) / 100.0)
    if config.startswith("w") and config[1:].isdigit():
        return tier_cpu_config(base, "onlineWaitTarget", int(config[1:]) / 100.0)
    if config == "notier":
        import yaml

        conf = yaml.safe_load(base) or {}
        conf["tier"] = {**(conf.get("tier") or {}), "enabled": False}
        return str(yaml.safe_dump(conf, sort_keys=False))
    if config == "share":
        return tier_cpu_config(tier_cpu_config(base, "onlineWaitSignal", "share"), "subtractSystem", True)
    if config == "open":
        # the share at a target of 1 is never passed: the feedback off, whichever signal is shipped
        loosest = tier_cpu_config(suppress_config(base, 1.0), "onlineWaitSignal", "share")
        return tier_cpu_config(loosest, "onlineWaitTarget", 1.0)
    if config.startswith("cut:"):
        return tier_cpu_config(base, "cut", config[4:])
    if config != "default":
        raise ValueError(f"unknown agent config {config!r}")
    return base
