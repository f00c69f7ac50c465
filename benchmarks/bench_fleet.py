"""Fleet scale: N kubemark hollow nodes, each with its own tidemark-agent, against one API server (docs/scale.md).

    python benchmarks/bench_fleet.py --nodes 50,100 [--pods-per-node 10] [--steady 180] [--json OUT] [--plot PNG]

Per N, a fresh fleet (localcluster/fleet.py: etcd + kube-apiserver with an audit log, kube-controller-manager,
N hollow kubelets, the shipped scheduler and NodeReport controller, one real agent per node sensing a synthetic
host that a seeded load model keeps in step with its pods), then:
1. workload (the churn window): pods-per-node x N pods, 70 % online as Deployments of 10 replicas (load label
   idle/busy/spiky, seeded; 50m CPU, 64Mi), 30 % offline as gangs of 5 (PodGroup minMember 5, queue batch,
   qos-level -1, batch-cpu 100, batch-memory 128Mi), all created at once; end to end = a pod first seen by a
   watch here -> seen Running (the hollow kubelet's status). pods/s = pods / (first seen -> last Running).
2. steady state (`--steady` s, nothing created): each agent's API requests per minute by verb and resource
   from the audit log (its own user), its writes plus the NodeReport controller's writes to its Node
   ("agent_writes_per_min"), the hollow kubelet's requests beside it; agent CPU and RSS; API server and etcd
   CPU per node.
3. load step: 10 % of the nodes that run offline pods go to 4 x their online requests (past the 80 % CPU
   watermark) for 45 s: evictions needed (those nodes) vs issued (by agents, per node).
4. load step in two arms (`--step-arms`, on by default; issue 34): evict_only (the conf without shuffle and
   rescheduling) then rebalance (the shipped conf), same surge nodes, each with its own offline ReplicaSets and a
   60-s ramp of the surge nodes' online load to 70 % of the node held 60 s (the offline tier starves):
   `load_step.evict_only` / `load_step.rebalance`
   with lost_core_s, evictions, moved, moved_twice, calm_node_evictions, gangs_below_min, and `load_step.arms`
   (the set-up and lost_core_s_lower_pct). `--step-rounds N`: N rounds of the two arms, their order reversed every
   other round, compared within each round (`load_step.rounds`, `load_step.arms.paired`: per round, the median and
   the range). `load_step_arms`; the accounting in localcluster/fleet_step.py.
0. (beside step 1 and its settle, on one node the workload is kept off by a NoSchedule taint) capacity ->
   placement: load outside the pods on that node takes its batch-cpu to about 0 (below the watermark), an offline
   pod pinned to it waits, the load ends; the time from the Node showing enough batch-cpu to the pod being bound.
   The taint goes before the steady state.
`--json PATH` writes one object per N (the issue's fields) under "runs".
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from localcluster.agentmetrics import http_get, parse_metrics  # noqa: E402
from localcluster.fleet import (  # noqa: E402
    Fleet,
    agent_user,
    cpu_seconds,
    kubelet_user,
    read_audit,
    rss_bytes,
)
from localcluster.fleet_load import LOAD_LABEL  # noqa: E402
from localcluster.fleet_step import (  # noqa: E402
    ARMS,
    GROUP_ANNOTATION,
    MOVED,
    arm_conf,
    arm_figures,
    arm_order,
    classify_evictions,
    gangs_below_min,
    offline_replicaset,
    offline_spec,
    paired_rounds,
    rebalanced_pods,
    rescheduling_seen,
)
from tidemark.kube.client import ApiStatusError, KubeError, request_json  # noqa: E402
from tidemark.kube.reflector import Reflector  # noqa: E402
from tidemark.kube.resources import NODES, PODS  # noqa: E402
from tidemark.quantities import quantity_to_int  # noqa: E402

NS = "fleet"
PROBE = "job-99999"
#: the taint that keeps the workload off the capacity probe's node (`taint_probe_node`)
PROBE_TAINT = "tidemark.bench/capacity-probe"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


class PodClock:
    """First-seen and Running-seen monotonic times of every pod in the namespace."""

    def __init__(self, api: Any) -> None:
        self.seen: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        #: pod name -> its node, once bound (the controller's evictions are counted on the pod's node)
        self.node_of: dict[str, str] = {}
        #: pod name -> its controller owner's name, its gang (PodGroup); pods Running and not terminating
        self.owner_of: dict[str, str] = {}
        self.group_of: dict[str, str] = {}
        self.live: set[str] = set()
        self.lock = threading.Lock()
        self.reflector = Reflector.for_resource(api, PODS, namespace=NS, on_change=self._on, timeout_seconds=300)

    def _on(self, _etype: str, old: Any, new: Any) -> None:
        if new is None:
            if old is not None:
                with self.lock:
                    self.live.discard(old["metadata"]["name"])
            return
        meta = new["metadata"]
        name, now = meta["name"], time.monotonic()
        owner = next((o["name"] for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        group = (meta.get("annotations") or {}).get(GROUP_ANNOTATION)
        with self.lock:
            if owner:
                self.owner_of[name] = owner
            if group:
                self.group_of[name] = group
            if (new.get("status") or {}).get("phase") == "Running" and not meta.get("deletionTimestamp"):
                self.live.add(name)
            else:
                self.live.discard(name)
            self.seen.setdefault(name, now)
            if (new.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, now)
                self.node_of[name] = new["spec"]["nodeName"]
            if (new.get("status") or {}).get("phase") == "Running":
                self.running.setdefault(name, now)


#: an arm after the first starts once every surge node publishes this share of its batch-cpu before the first arm
RECOVERED = 0.8


def _post(api: Any, path: str, body: dict[str, Any]) -> None:
    for attempt in range(5):
        try:
            request_json(api, "POST", path, body=body)
            return
        except KubeError as exc:
            if "already exists" in str(exc):
                return
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))


def online_deployment(i: int, replicas: int, load: str) -> dict[str, Any]:
    labels = {"app": f"web-{i}"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"web-{i}", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**labels, LOAD_LABEL: load}, "annotations": {"volcano.sh/qos-level": "2"}},
                "spec": {
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
            },
        },
    }


def offline_gang(i: int, size: int, node: str | None = None, cpu: int = 100) -> list[tuple[str, dict[str, Any]]]:
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": f"job-{i}", "namespace": NS},
        "spec": {"minMember": size, "queue": "batch"},
    }
    out = [(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups", pg)]
    for k in range(size):
        spec = offline_spec(cpu)
        if node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        out.append(
            (
                f"/api/v1/namespaces/{NS}/pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"job-{i}-{k}",
                        "namespace": NS,
                        "annotations": {"volcano.sh/qos-level": "-1", GROUP_ANNOTATION: f"job-{i}"},
                    },
                    "spec": spec,
                },
            )
        )
    return out


def workload(fleet: Fleet, clock: PodClock, pods_per_node: int, seed: int, least: float = 1.0) -> dict[str, Any]:
    """All pods at once; waits until every pod is Running (or, at the deadline, at least the fraction `least` of them:
    the figures are then of those, `pods_running` says how many). Returns the end-to-end figures."""
    rng = random.Random(seed)
    total = pods_per_node * fleet.n
    online = round(total * 0.7 / 10) * 10
    gangs = (total - online) // 5
    expected = online + gangs * 5
    t0 = time.monotonic()
    bodies: list[tuple[str, dict[str, Any]]] = []
    for i in range(online // 10):
        bodies.append(
            (
                f"/apis/apps/v1/namespaces/{NS}/deployments",
                online_deployment(i, 10, rng.choice(["idle", "busy", "spiky"])),
            )
        )
    for i in range(gangs):
        bodies += offline_gang(i, 5)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda pb: _post(fleet.api, *pb), bodies))
    created = time.monotonic() - t0
    deadline = time.monotonic() + 120 + total / 5
    while True:
        with clock.lock:
            n = sum(1 for name in clock.running if name in clock.seen and not name.startswith(PROBE))
        if n >= expected:
            break
        if time.monotonic() > deadline:
            if n >= least * expected:
                fleet.log(f"{n}/{expected} pods Running after {deadline - t0:.0f} s (at least {least:g}): going on")
                break
            raise TimeoutError(f"{n}/{expected} pods Running after {deadline - t0:.0f} s")
        time.sleep(0.5)
    with clock.lock:
        ours = [p for p in clock.running if not p.startswith(PROBE)]
        seen = {p: clock.seen[p] for p in ours}
        bound = {p: clock.bound.get(p, clock.running[p]) for p in ours}
        running = {p: clock.running[p] for p in ours}
    first = min(seen.values())

    def pct(values: list[float], q: float) -> float:
        values = sorted(values)
        return round(values[min(len(values) - 1, int(len(values) * q))], 2)

    e2e = [running[p] - seen[p] for p in ours]
    to_bind = [bound[p] - seen[p] for p in ours]
    to_run = [running[p] - bound[p] for p in ours]
    return {
        "pods": expected,
        "pods_running": len(ours),
        "created_s": round(created, 2),
        # created -> Running (the scheduler, the hollow kubelets and the API server together)
        "e2e_pods_per_s": round(len(ours) / (max(running.values()) - first), 1),
        "e2e_p50_s": pct(e2e, 0.5),
        "e2e_p99_s": pct(e2e, 0.99),
        "window_s": round(max(running.values()) - first, 1),
        # created -> bound (the scheduler's part) and bound -> Running (the kubelets')
        "bind_pods_per_s": round(len(ours) / (max(bound.values()) - first), 1),
        "bind_p50_s": pct(to_bind, 0.5),
        "bind_p99_s": pct(to_bind, 0.99),
        "run_p50_s": pct(to_run, 0.5),
        "run_p99_s": pct(to_run, 0.99),
        "arrival_s": round(max(seen.values()) - first, 1),
    }


def api_per_client(events: list[dict[str, Any]], minutes: float, nodes: list[str]) -> dict[str, Any]:
    """Per node, per minute: the agent's requests by verb/resource, its writes plus the controller's Node writes
    for it, and the hollow kubelet's requests and writes."""
    agents = {agent_user(n): n for n in nodes}
    kubelets = {kubelet_user(n): n for n in nodes}
    per: dict[str, collections.Counter[str]] = {n: collections.Counter() for n in nodes}
    by_verb: collections.Counter[str] = collections.Counter()
    publications: dict[str, list[float]] = {n: [] for n in nodes}
    for ev in events:
        user = (ev.get("user") or {}).get("username", "")
        verb = ev.get("verb", "")
        ref = ev.get("objectRef") or {}
        res = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
        if user in agents:
            node = agents[user]
            per[node]["agent_requests"] += 1
            by_verb[f"{verb} {res}"] += 1
            if verb in WRITES:
                per[node]["agent_writes"] += 1
            if verb in WRITES and ref.get("resource") == "nodereports":
                publications[node].append(ev.get("_t", 0.0))
            if verb == "watch":
                per[node]["agent_watches"] += 1
        elif user in kubelets:
            node = kubelets[user]
            per[node]["kubelet_requests"] += 1
            if verb in WRITES:
                per[node]["kubelet_writes"] += 1
        elif (
            user == "tidemark-webhook" and verb in WRITES and ref.get("resource") == "nodes" and ref.get("name") in per
        ):
            per[ref["name"]]["controller_node_writes"] += 1

    def stat(key: str, extra: str = "") -> dict[str, float]:
        vals = sorted((per[n][key] + (per[n][extra] if extra else 0)) / minutes for n in nodes)
        return {
            "p50": round(vals[len(vals) // 2], 2),
            "max": round(vals[-1], 2),
            "mean": round(statistics.mean(vals), 2),
        }

    def paced(n: str) -> float:
        """Writes per minute at the agent's publication pace: (publications - 1) / their span, times the writes
        per publication. A window of fixed length holds k or k+1 periodic publications by where it starts, so
        a count over it reads 1 to 1.5 times the pace; the pace does not depend on the window's edges."""
        total = per[n]["agent_writes"] + per[n]["controller_node_writes"]
        times = sorted(publications[n])
        if len(times) < 2 or times[-1] <= times[0]:
            return total / minutes
        return 60 * (len(times) - 1) / (times[-1] - times[0]) * total / len(times)

    pace = sorted(paced(n) for n in nodes)
    return {
        "agent_writes_per_min": {"p50": round(pace[len(pace) // 2], 2), "max": round(pace[-1], 2),
                                 "mean": round(statistics.mean(pace), 2)},
        "agent_writes_per_min_counted": stat("agent_writes", "controller_node_writes"),
        "agent_own_writes_per_min": stat("agent_writes"),
        "controller_node_writes_per_min": stat("controller_node_writes"),
        "agent_requests_per_min": stat("agent_requests"),
        "agent_watches_opened_per_min": stat("agent_watches"),
        "kubelet_requests_per_min": stat("kubelet_requests"),
        "kubelet_writes_per_min": stat("kubelet_writes"),
        "agent_by_verb_resource_per_min": {k: round(v / minutes / len(nodes), 3) for k, v in by_verb.most_common()},
    }


def steady(fleet: Fleet, seconds: float) -> dict[str, Any]:
    agents = fleet.pids("agent")
    cp = fleet.control_plane_pids()
    kubelets = fleet.pids("kubemark")
    c0 = {
        k: cpu_seconds(p)
        for k, p in {
            **{f"a/{n}": p for n, p in agents.items()},
            **cp,
            **{f"k/{n}": p for n, p in kubelets.items()},
        }.items()
    }
    me0 = cpu_seconds(os.getpid())  # this process: the load model, the watches, the audit reader
    w0, m0 = time.time(), time.monotonic()
    load0 = os.getloadavg()[0]
    time.sleep(seconds)
    w1, el = time.time(), time.monotonic() - m0
    me1 = cpu_seconds(os.getpid())
    c1 = {
        k: cpu_seconds(p)
        for k, p in {
            **{f"a/{n}": p for n, p in agents.items()},
            **cp,
            **{f"k/{n}": p for n, p in kubelets.items()},
        }.items()
    }

    def pct(prefix: str) -> list[float]:
        return [
            100 * (c1[k] - c0[k]) / el
            for k in c0
            if k.startswith(prefix) and c0[k] is not None and c1.get(k) is not None
        ]

    rss = sorted(r for r in (rss_bytes(p) for p in agents.values()) if r)
    krss = sorted(r for r in (rss_bytes(p) for p in kubelets.values()) if r)
    api = api_per_client(read_audit(fleet.audit_log, w0, w1), el / 60, fleet.nodes)
    agent_cpu, kubelet_cpu = pct("a/"), pct("k/")
    return {
        **api,
        "agent_cpu_percent": round(statistics.median(agent_cpu), 2),
        "agent_cpu_pct": round(statistics.median(agent_cpu), 2),  # issue 34's name for the same figure
        "agent_cpu_percent_max": round(max(agent_cpu), 2),
        "agent_rss_mib": round(statistics.median(rss) / 2**20, 1),
        "agent_rss_mib_max": round(rss[-1] / 2**20, 1),
        "kubelet_cpu_percent": round(statistics.median(kubelet_cpu), 2),
        "kubelet_rss_mib": round(statistics.median(krss) / 2**20, 1),
        "apiserver_cpu_per_node_ms_per_s": round(
            1000 * (c1["kube-apiserver"] - c0["kube-apiserver"]) / el / fleet.n, 3
        ),
        "etcd_cpu_per_node_ms_per_s": round(1000 * (c1["etcd"] - c0["etcd"]) / el / fleet.n, 3),
        "steady_s": round(el, 1),
        "harness_cpu_percent": round(100 * ((me1 or 0) - (me0 or 0)) / el, 1),
        "loadavg": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


#: the NodeReport controller's user (localcluster/fleet.py): it makes the evictions the agents ask for
CONTROLLER_USER = "tidemark-webhook"


def load_step(fleet: Fleet, seconds: float, seed: int, node_of: Mapping[str, str] | None = None) -> dict[str, Any]:
    """10 % of the nodes with offline and online pods surge past the CPU watermark for `seconds` (their online
    pods at 4 x their request, or more: enough for them alone to hold 95 % of the node, LoadModel.surge_factor). An
    eviction counts on the node that asked: the agent's own call (`--node-writes direct`), or the controller's on an
    agent's behalf, placed by the evicted pod's node (`node_of`, PodClock's)."""
    with fleet.load.lock:
        online_nodes = {p.node for p in fleet.load.pods.values() if not p.offline}
        offline_nodes = sorted({p.node for p in fleet.load.pods.values() if p.offline} & online_nodes)
    rng = random.Random(seed)
    surge = set(rng.sample(offline_nodes, max(1, len(offline_nodes) // 10)))
    w0 = time.time()
    fleet.load.surge = surge
    time.sleep(seconds)
    fleet.load.surge = set()
    events = read_audit(fleet.audit_log, w0, time.time() + 1)
    agents = {agent_user(n): n for n in fleet.nodes}
    asked_by = gang_evictions(fleet.api)
    evicted: collections.Counter[str] = collections.Counter()
    gang = 0
    for ev in events:
        ref = ev.get("objectRef") or {}
        user = (ev.get("user") or {}).get("username", "")
        code = (ev.get("responseStatus") or {}).get("code", 0)
        if ref.get("subresource") != "eviction" or ev.get("verb") != "create" or code >= 300:
            continue
        name = ref.get("name", "")
        if user in agents:
            evicted[agents[user]] += 1
        elif user == CONTROLLER_USER and name in asked_by:  # a gang member taken with the pod a node asked for
            evicted[asked_by[name]] += 1
            gang += 1
        elif user == CONTROLLER_USER and node_of is not None and name in node_of:
            evicted[node_of[name]] += 1
    return {
        "surge_nodes": len(surge),
        "nodes_evicting": len(set(evicted) & surge),
        "evictions": sum(evicted.values()),
        "evictions_on_calm_nodes": sum(v for n, v in evicted.items() if n not in surge),
        "gang_evictions": gang,
        "surge_s": seconds,
    }


#: the controller's Event on a gang member it evicted with the pod an agent asked for
#: (scheduler_ext/controller/evictions.py `_evict_gang`)
GANG_MESSAGE = re.compile(r"with its gang on behalf of node (\S+?):")


def gang_evictions(api: Any) -> dict[str, str]:
    """Pod name -> the node whose agent asked for the eviction that took it with its gang. The controller takes a
    gang whole when one member's eviction would leave it below minMember (issue 34 item 3): its other members may
    run on calm nodes, and that is the asking node's eviction, not theirs."""
    try:
        items = request_json(api, "GET", f"/api/v1/namespaces/{NS}/events").get("items") or []
    except KubeError:
        return {}
    out: dict[str, str] = {}
    for e in items:
        m = GANG_MESSAGE.search(str(e.get("message") or ""))
        name = (e.get("involvedObject") or {}).get("name")
        if m and isinstance(name, str):
            out[name] = m.group(1)
    return out


#: the scheduler's user (localcluster/fleet.py): its evictions are the rescheduling plugin's moves (or preemptions)
SCHEDULER_USER = "tidemark-scheduler-fleet"
#: an arm's offline job: a ReplicaSet (an evicted or moved pod comes back, placed by the scheduler: the rescheduling
#: plugin moves only pods with a controller owner) of 5 in a gang of minMember 3 (two members may go, not three)
STEP_REPLICAS, STEP_MIN_MEMBER = 5, 3
#: the scheduler re-reads its conf every schedule period (1 s, daemonset/scheduler/deployment.yaml): 2 periods and
#: a margin for a busy machine
CONF_SWITCH_S = 5.0


def _delete(api: Any, path: str) -> None:
    try:
        request_json(api, "DELETE", path, body={"propagationPolicy": "Background"})
    except ApiStatusError as exc:
        if exc.status != 404:
            raise


def _wait_for(cond: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def write_conf(path: Path, text: str) -> None:
    """Whole or not at all (a rename): the scheduler re-reads the file every period and must never see it half
    written (an empty conf would parse as no actions)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def _live(clock: PodClock, prefix: str) -> int:
    with clock.lock:
        return sum(1 for p in clock.live if p.startswith(prefix))


def drop_bare_offline(fleet: Fleet, clock: PodClock) -> None:
    """The workload's bare gangs (job-*) go before the arms: no controller owns them, so no plugin may move them,
    and they would be lost alike in both arms."""
    for pod in request_json(fleet.api, "GET", f"/api/v1/namespaces/{NS}/pods").get("items", []):
        if pod["metadata"]["name"].startswith("job-"):
            _delete(fleet.api, PODS.object_path(pod["metadata"]["name"], NS))
    pgs = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups"
    for pg in request_json(fleet.api, "GET", pgs).get("items", []):
        if pg["metadata"]["name"].startswith("job-"):
            _delete(fleet.api, f"{pgs}/{pg['metadata']['name']}")
    _wait_for(lambda: _live(clock, "job-") == 0, "the bare offline pods gone", 120)


def await_recovered(fleet: Fleet, surge: set[str], reference: dict[str, int], timeout: float) -> float:
    """Seconds waited until every surge node publishes at least RECOVERED x the batch-cpu it published before the
    first arm (`reference`; filled by the first arm): the last arm's surge falls at once (an urgent decrease), the
    way back waits the sampler window and `capacity.publish.min_interval`, about 2 minutes, more than a fixed
    `--step-forget` (the second 20-node run: a surge node at 128m of its 405m, 0 offline pods on the surge nodes in
    the rebalance arm, nothing to lose)."""
    t0 = time.monotonic()
    if not reference:
        reference.update({n: b for n in sorted(surge) if (b := batch_cpu_of(fleet.api, n)) is not None})
        return 0.0

    def recovered() -> bool:
        return all((batch_cpu_of(fleet.api, n) or 0) >= RECOVERED * b for n, b in reference.items())

    while not recovered() and time.monotonic() - t0 < timeout:
        time.sleep(2.0)
    return round(time.monotonic() - t0, 1)


def busiest(clock: PodClock, prefix: str, candidates: Sequence[str], k: int) -> set[str]:
    """The `k` candidate nodes running the most of the arm's pods (`prefix`), by name on a tie: the step's surge
    nodes. Chosen after the placement: picked before it, the 2 surge nodes of the 2026-11-30 CI run held 1 offline
    pod between them (100m, which no ramp under the watermark starves), and the arm had nothing to move."""
    with clock.lock:
        count = collections.Counter(clock.node_of.get(p) for p in clock.live if p.startswith(prefix))
    return set(sorted(candidates, key=lambda n: (-count.get(n, 0), n))[:k])


def run_arm(
    fleet: Fleet, clock: PodClock, arm: str, conf: str, jobs: int, surge: set[str], args: argparse.Namespace,
    reference: dict[str, int] | None = None, candidates: Sequence[str] = (),
) -> dict[str, Any]:
    """One arm: its conf, `jobs` ReplicaSets Running, settled, the ramp and its hold on `surge`, the figures
    (localcluster/fleet_step.py arm_figures), then the workload deleted. An empty `surge` (the first arm) is filled
    with the `busiest` of `candidates` once the arm's pods run, and kept for the next arm."""
    write_conf(fleet.scheduler_conf, conf)
    # the surge nodes' agents forget the last surge (the earlier step's, the other arm's ramp) before the workload is
    # placed: while their window holds it they publish batch-cpu near 0, the arm's pods land elsewhere and the arm
    # has nothing to lose (the first 20-node run: 3 offline pods on the surge nodes in evict_only, 0 in rebalance)
    time.sleep(max(CONF_SWITCH_S, args.step_forget))
    waited = await_recovered(fleet, surge or set(candidates), reference if reference is not None else {},
                             args.step_recover)
    before_b = {n: batch_cpu_of(fleet.api, n) for n in sorted(surge or candidates)}
    prefix = {"evict_only": "ev", "rebalance": "rb"}[arm] + "-job-"
    names = [f"{prefix}{i}" for i in range(jobs)]
    bodies = [b for n in names for b in offline_replicaset(n, NS, STEP_REPLICAS, STEP_MIN_MEMBER)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda pb: _post(fleet.api, *pb), bodies))
    expected = jobs * STEP_REPLICAS
    _wait_for(lambda: _live(clock, prefix) >= expected, f"{expected} {arm} pods Running", 120 + expected / 5)
    time.sleep(args.step_settle)  # the agents' windows hold the new pods and no surge (the other arm's is over)
    if not surge:
        surge.update(busiest(clock, prefix, candidates, max(1, len(fleet.nodes) // 10)))
    surge_b = {n: before_b.get(n) for n in sorted(surge)}
    with clock.lock:  # what the step can take: with none on a surge node, neither arm loses anything there
        at_risk = sum(1 for p in clock.live if p.startswith(prefix) and clock.node_of.get(p) in surge)
    w0 = time.time()
    fleet.load.start_ramp(surge, time.monotonic(), args.step_ramp, args.step_top / 100)
    samples: list[collections.Counter[str]] = []
    scrapes: list[dict[str, float]] = []  # the scheduler's /metrics: what its rescheduling plugin saw
    end = time.monotonic() + args.step_ramp + args.step_hold
    while time.monotonic() < end:
        with clock.lock:
            samples.append(collections.Counter(clock.group_of.get(p, "") for p in clock.live if p.startswith(prefix)))
        scrapes.append(scrape(fleet.scheduler_metrics))
        time.sleep(1.0)
    fleet.load.end_surge()
    time.sleep(CONF_SWITCH_S)  # the last evictions' Events (the scheduler's recorder writes them asynchronously)
    audit = read_audit(fleet.audit_log, w0, time.time())
    events = request_json(fleet.api, "GET", f"/api/v1/namespaces/{NS}/events", query={"fieldSelector": "reason=Evict"})
    evictions = classify_evictions(
        audit, [agent_user(n) for n in fleet.nodes], CONTROLLER_USER, SCHEDULER_USER,
        rebalanced_pods(events.get("items", [])),
    )
    with clock.lock:
        node_of, owner_of = dict(clock.node_of), dict(clock.owner_of)
    with fleet.load.lock:
        ended = dict(fleet.load.ended)
    out = arm_figures(
        [e for e in evictions if e.pod.startswith(prefix)], node_of, owner_of, surge, ended,
        gangs_below_min(samples, dict.fromkeys(names, STEP_MIN_MEMBER)),
    )
    for n in names:
        _delete(fleet.api, f"/apis/apps/v1/namespaces/{NS}/replicasets/{n}")
        _delete(fleet.api, f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups/{n}")
    _wait_for(lambda: _live(clock, prefix) == 0, f"the {arm} pods gone", 120 + expected / 5)
    moves = [e.t for e in evictions if e.pod.startswith(prefix) and e.kind == MOVED]
    return {**out, "offline_pods_on_surge_nodes": at_risk, "surge_batch_cpu_m": surge_b, "recover_waited_s": waited,
            # the margin the window left: the first move's time after the ramp's start (of ramp + hold seconds)
            "first_move_s": round(min(moves) - w0, 1) if moves else None,
            "rescheduling": rescheduling_seen(scrapes)}


def scrape(url: str) -> dict[str, float]:
    """One /metrics scrape parsed ({} when it fails: the figures count the scrapes that answered)."""
    try:
        return parse_metrics(http_get(url)) if url else {}
    except OSError:
        return {}


def batch_cpu_of(api: Any, node: str) -> int | None:
    """The batch-cpu (milli) `node` publishes, None when unreadable."""
    try:
        n = request_json(api, "GET", NODES.object_path(node))
    except KubeError:
        return None
    return (quantity_to_int((n["status"].get("allocatable") or {}).get("kubernetes.io/batch-cpu", "0")) or 0)


def load_step_arms(fleet: Fleet, clock: PodClock, args: argparse.Namespace) -> dict[str, Any]:
    """Issue 34's load step, both arms in this fleet, same seed, same surge nodes (10 % of the nodes: those running
    online pods that hold the most of the first arm's offline pods, `busiest`): evict_only (the conf without shuffle
    and rescheduling), then rebalance (the shipped conf, its rescheduling interval `--step-interval`). Each arm: its
    own offline workload (ReplicaSets, as many pods as the workload's bare gangs had), settled, then the surge
    nodes' online load ramps from calm to `--step-top` % of the node over `--step-ramp` s and holds `--step-hold` s;
    then the workload goes. The shipped conf is back at the end."""
    with fleet.load.lock:
        online_nodes = sorted({p.node for p in fleet.load.pods.values() if not p.offline})
    surge: set[str] = set()  # the first arm's busiest online nodes (`busiest`), the same for the next arm
    total = args.pods_per_node * fleet.n
    jobs = args.step_jobs or (total - round(total * 0.7 / 10) * 10) // STEP_REPLICAS
    shipped = fleet.scheduler_conf.read_text()
    drop_bare_offline(fleet, clock)
    rounds: list[dict[str, Any]] = []
    error = None
    reference: dict[str, int] = {}
    try:
        for r in range(args.step_rounds):
            this: dict[str, Any] = {}
            rounds.append(this)
            for arm in arm_order(args.arms, r):
                conf = arm_conf(shipped, arm, args.step_interval)
                this[arm] = run_arm(fleet, clock, arm, conf, jobs, surge, args, reference, online_nodes)
                fleet.log(f"load step, round {r + 1}, {arm}: {this[arm]}")
    except (TimeoutError, KubeError) as exc:  # the rounds done are still worth writing; none done: the caller's
        if len(rounds) < 2:
            raise
        fleet.log(f"load step round {len(rounds)} failed: {exc}")
        error = str(exc)
        rounds.pop()
    finally:
        fleet.load.end_surge()
        write_conf(fleet.scheduler_conf, shipped)
    out: dict[str, Any] = dict(rounds[0])  # the first round under issue 34's keys, as with one round
    if args.step_rounds > 1:
        out["rounds"] = rounds
    if error is not None:
        out["arms_error"] = error
    paired = paired_rounds(rounds)
    out["arms"] = {
        "surge_nodes": sorted(surge),
        "jobs": jobs,
        "replicas": STEP_REPLICAS,
        "min_member": STEP_MIN_MEMBER,
        "ramp_s": args.step_ramp,
        "top_pct": args.step_top,
        "hold_s": args.step_hold,
        "settle_s": args.step_settle,
        "forget_s": args.step_forget,
        "rescheduling_interval": args.step_interval,
        "order": " then ".join(args.arms) + (", reversed every other round" if args.step_rounds > 1 else ""),
        "rounds": len(rounds),
        # the median over the rounds (one round: that round's); the spread and the per-pod figures in `paired`
        "lost_core_s_lower_pct": paired["lost_core_s_lower_pct"]["median"],
        "paired": paired,
    }
    return out


def taint_probe_node(fleet: Fleet, on: bool) -> None:
    """The capacity probe's node (the fleet's first) kept idle while the workload is placed beside the probe: a
    NoSchedule taint that only the probe's pod tolerates (`on`), then taken off (the node's other taints kept)."""
    node = fleet.nodes[0]
    taints = request_json(fleet.api, "GET", NODES.object_path(node)).get("spec", {}).get("taints") or []
    taints = [t for t in taints if t.get("key") != PROBE_TAINT]
    if on:
        taints.append({"key": PROBE_TAINT, "effect": "NoSchedule"})
    request_json(fleet.api, "PATCH", NODES.object_path(node), body={"spec": {"taints": taints}},
                 content_type="application/merge-patch+json")


def capacity_to_placement(fleet: Fleet, clock: PodClock, timeout: float = 180) -> dict[str, Any]:
    """On an idle node, load outside the pods takes its batch-cpu to about 0 (below the CPU watermark: no
    eviction), an offline pod pinned to it waits, the load ends: the Node showing room -> the pod bound. Runs
    beside the workload and its settle (`run_one`): the way back takes the agent's 60-s window and a resync, about
    2 minutes the run used to spend waiting (the node is the one `taint_probe_node` keeps idle)."""
    node, need = fleet.nodes[0], 300
    host = fleet.hosts[node]

    def batch_cpu() -> int:
        n = request_json(fleet.api, "GET", NODES.object_path(node))
        return (quantity_to_int((n["status"].get("allocatable") or {}).get("kubernetes.io/batch-cpu", "0")) or 0)

    room: dict[str, float] = {}

    def on_node(_e: str, _old: Any, new: Any) -> None:
        if (
            new is not None
            and (quantity_to_int((new["status"].get("allocatable") or {}).get("kubernetes.io/batch-cpu", "0"))
                 or 0) >= need
        ):
            room.setdefault("t", time.monotonic())
        else:
            room.pop("t", None)

    calm = host.system_cores
    host.system_cores = 0.7
    deadline = time.monotonic() + timeout
    while batch_cpu() >= need:
        if time.monotonic() > deadline:
            host.system_cores = calm
            return {"capacity_to_placement_s": None, "why": f"{node}'s batch-cpu did not fall below {need}"}
        time.sleep(0.5)
    for path, body in offline_gang(99999, 1, node=node, cpu=need):
        if body.get("kind") == "Pod":
            body["spec"]["tolerations"] = [{"key": PROBE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
        _post(fleet.api, path, body)
    time.sleep(5)
    with clock.lock:
        pending = "job-99999-0" not in clock.bound
    watch = Reflector.for_resource(
        fleet.api, NODES, field_selector=f"metadata.name={node}", on_change=on_node, timeout_seconds=300
    ).start()
    watch.wait_for_sync(30)
    host.system_cores = calm
    while True:
        now = time.monotonic()
        t_room = room.get("t")
        with clock.lock:
            bound = clock.bound.get("job-99999-0")
        if bound is not None and t_room is not None:
            watch.stop()
            request_json(fleet.api, "DELETE", PODS.object_path("job-99999-0", NS))
            return {
                "capacity_to_placement_s": round(max(0.0, bound - t_room), 2),
                "capacity_back_s": round(t_room - (deadline - timeout), 1),
                "pending_while_low": pending,
            }
        if now > deadline:
            watch.stop()
            return {"capacity_to_placement_s": None, "why": f"not bound within {timeout:.0f} s (room seen: {t_room})"}
        time.sleep(0.2)


def run_one(n: int, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix=f"tidemark-fleet-{n}-"))

    def log(s: str) -> None:
        print(f"[fleet {n}] {s}", file=sys.stderr, flush=True)

    with Fleet(n, run_dir, log=log, seed=args.seed) as fleet:
        t0 = time.monotonic()
        fleet.start()
        log(f"up in {time.monotonic() - t0:.0f} s: {fleet.timings}")
        _post(fleet.api, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        clock = PodClock(fleet.api)
        clock.reflector.start()
        clock.reflector.wait_for_sync(30)
        probe_pool = ThreadPoolExecutor(1, thread_name_prefix="capacity-probe")
        probe = None
        if not args.no_step:  # beside the workload, on a node kept out of it
            taint_probe_node(fleet, on=True)
            probe = probe_pool.submit(capacity_to_placement, fleet, clock)
        w0 = time.time()
        e2e = workload(fleet, clock, args.pods_per_node, args.seed, args.workload_least)
        log(f"workload: {e2e}")
        time.sleep(args.settle)
        cap = probe.result() if probe is not None else {}  # steady state starts with the probe's pod gone
        probe_pool.shutdown()
        if probe is not None:
            taint_probe_node(fleet, on=False)
        log(f"capacity -> placement: {cap}")
        w1 = time.time()
        churn = api_per_client(read_audit(fleet.audit_log, w0, w1), (w1 - w0) / 60, fleet.nodes)
        st = steady(fleet, args.steady)
        log(
            f"steady: writes/min {st['agent_writes_per_min']}, requests/min {st['agent_requests_per_min']}, "
            f"agent cpu {st['agent_cpu_percent']} %, rss {st['agent_rss_mib']} MiB"
        )
        with clock.lock:
            placed = dict(clock.node_of)
        step = load_step(fleet, args.surge, args.seed, placed) if not args.no_step else {}
        log(f"load step: {step}")
        if args.step_arms and not args.no_step:
            try:
                step.update(load_step_arms(fleet, clock, args))
            except (TimeoutError, KubeError) as exc:  # the run's other figures are still worth writing
                log(f"load step arms failed: {exc}")
                step["arms_error"] = str(exc)
        clock.reflector.stop()
        out: dict[str, Any] = {
            "nodes": n,
            **{k: v for k, v in st.items()},
            **e2e,
            "churn": churn,
            "load_step": step,
            **cap,
            "startup": fleet.timings,
            "hollow_restarts": fleet.hollow_restarts,  # hollow kubelets that died and were started again
            "run_dir": str(run_dir),
        }
    return out


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["nodes"] for r in runs]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    ax[0].plot(xs, [r["agent_writes_per_min"]["p50"] for r in runs], "o-", label="agent + controller (p50)")
    ax[0].plot(xs, [r["kubelet_writes_per_min"]["p50"] for r in runs], "s--", label="hollow kubelet (p50)")
    ax[0].set(title="writes per node per minute (steady)", xlabel="nodes")
    ax[0].legend()
    ax[1].plot(xs, [r["apiserver_cpu_per_node_ms_per_s"] for r in runs], "o-", label="kube-apiserver")
    ax[1].plot(xs, [r["etcd_cpu_per_node_ms_per_s"] for r in runs], "s--", label="etcd")
    ax[1].set(title="control plane CPU per node (ms/s)", xlabel="nodes")
    ax[1].legend()
    ax[2].plot(xs, [r["e2e_pods_per_s"] for r in runs], "o-")
    ax[2].set(title="end to end pods/s (created -> Running)", xlabel="nodes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="50", help="comma-separated fleet sizes (default 50)")
    p.add_argument("--pods-per-node", type=int, default=10)
    p.add_argument("--steady", type=float, default=180.0, help="seconds of steady state measured (default 180)")
    p.add_argument("--settle", type=float, default=90.0,
                   help="seconds after the workload before steady state (default 90: the agents' 60-s sampler "
                   "window refilled, and a capacity period)")
    p.add_argument("--surge", type=float, default=45.0, help="seconds of the load step (default 45)")
    p.add_argument("--workload-least", type=float, default=1.0,
                   help="the fraction of the workload's pods Running at its deadline that lets the run go on (default "
                   "1: all; at 100 nodes on 2 cores 985 of 1000 were)")
    p.add_argument("--no-step", action="store_true", help="skip the load step and the capacity probe")
    p.add_argument("--step-arms", action=argparse.BooleanOptionalAction, default=True,
                   help="after the load step, issue 34's two arms: evict_only vs rebalance (default on)")
    p.add_argument("--arms", default=",".join(ARMS),
                   help="the load step's arms, in order (default evict_only,rebalance; the fleet test runs rebalance)")
    p.add_argument("--step-jobs", type=int, default=0,
                   help="each arm's offline ReplicaSets of 5 (default 0: as many pods as the workload's bare gangs "
                   "had, 30 %% of the pods)")
    p.add_argument("--step-ramp", type=float, default=60.0, help="seconds of an arm's ramp, calm -> top (60)")
    p.add_argument("--step-top", type=float, default=70.0,
                   help="%% of a surge node's CPU its online pods alone hold at the ramp's top (70: the B target, "
                   "under the 80 %% watermark with the node's own usage on top: the offline tier starves)")
    p.add_argument("--step-hold", type=float, default=60.0, help="seconds an arm's ramp holds at its top (60)")
    p.add_argument("--step-settle", type=float, default=70.0,
                   help="seconds between an arm's workload Running and its ramp (70: the agents' 60-s window)")
    p.add_argument("--step-forget", type=float, default=75.0,
                   help="seconds before an arm's workload, for the surge nodes' agents to forget the last surge (75: "
                   "the 60-s sampler window and a capacity period)")
    p.add_argument("--step-recover", type=float, default=240.0,
                   help="seconds at most an arm after the first waits for the surge nodes' batch-cpu to be back at "
                   f"{RECOVERED * 100:.0f} %% of what they published before the first arm (240)")
    p.add_argument("--step-rounds", type=int, default=1,
                   help="rounds of the arms, their order reversed every other round, compared within each round "
                   "(default 1; 3 gives a median and a range: docs/scale.md)")
    p.add_argument("--step-interval", default="10s",
                   help="the rescheduling plugin's interval in the rebalance arm (shipped 30s; default 10s: a "
                   "shorter arm; the agents' 40-s rebalanceGrace covers the shipped 30s too)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path)
    args = p.parse_args(argv)
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not args.arms or any(a not in ARMS for a in args.arms):
        print(f"--arms: a comma-separated list of {', '.join(ARMS)}: {','.join(args.arms)!r}", file=sys.stderr)
        return 2
    if args.step_rounds < 1:
        print(f"--step-rounds: at least 1: {args.step_rounds}", file=sys.stderr)
        return 2
    if args.step_jobs < 0:
        print(f"--step-jobs: a count of ReplicaSets, 0 for the default: {args.step_jobs}", file=sys.stderr)
        return 2
    try:
        sizes = [int(x) for x in args.nodes.split(",")]
    except ValueError:
        print(f"--nodes: not a list of integers: {args.nodes!r}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("bench_fleet needs root (the API server's build and /dev/shm hosts)", file=sys.stderr)
        return 2
    runs = []
    for n in sizes:
        runs.append(run_one(n, args))
        print(json.dumps(runs[-1], indent=1))
        if args.json:
            args.json.write_text(json.dumps({"runs": runs, "machine": {"cpus": os.cpu_count()}}, indent=1) + "\n")
    if args.plot and runs:
        plot(runs, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
