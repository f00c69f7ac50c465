"""The load step's two arms, their pure parts: evict-only against rebalance (benchmarks/bench_fleet.py
`load_step_arms`; its method: docs/scale.md, "Method", step 5).

Both arms run in one fleet, same seed, same surge nodes; only the scheduler conf differs (`arm_conf`): the scheduler
re-reads its conf file every schedule period, so rewriting it switches arms. What an arm measures comes from three
records the harness already has, each read by a pure function here:
- the audit log: every accepted eviction (`pods/eviction` create, code < 300) and who made it (`classify_evictions`):
  an agent (itself, or the NodeReport controller on its behalf) or the scheduler;
- the scheduler's `Evict` Events: the reason of its evictions (`rebalanced_pods`): `Rebalanced: ...` is a move
  (scheduler_ext/plugins/rescheduling.py), anything else a preemption;
- the load model (localcluster/fleet_load.py LoadModel.ended): each offline pod's CPU-seconds of progress when it
  stopped running. An evicted pod's progress is lost, and so is a moved one's: a batch pod restarts (`lost_core_s`).
"""

from __future__ import annotations

import collections
import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

ARMS: Final = ("evict_only", "rebalance")
#: what the rebalance arm needs in the conf, and what the evict-only arm takes out of it
SHUFFLE: Final = "shuffle"
RESCHEDULING: Final = "rescheduling"
EVICTED, MOVED, PREEMPTED = "evicted", "moved", "preempted"
#: the rescheduling plugin's eviction reason (scheduler_ext/plugins/rescheduling.py EVICT_REASON), as the executor
#: writes it in the Evict Event's message (scheduler_ext/cache/executor.py: "... evicted from <node>: <reason>")
REBALANCED: Final = "Rebalanced"
GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
#: Koordinator's per-workload limiter and the shipped `workloadCooldown`: a workload moved twice within it ping-pongs
COOLDOWN_S: Final = 300.0


def arm_conf(conf: str, arm: str, interval: str | None = None) -> str:
    """The scheduler conf of an arm: `evict_only` is `conf` without the `shuffle` action and the `rescheduling`
    plugin (the agents' evictions are all there is); `rebalance` is `conf` itself, its rescheduling `interval`
    replaced when given (a load step shorter than the shipped 30 s leaves a run or two). Comments are dropped."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r} (one of {', '.join(ARMS)})")
    doc = yaml.safe_load(conf)
    actions = [a.strip() for a in str(doc.get("actions", "")).split(",") if a.strip()]
    for tier in doc.get("tiers") or []:
        plugins = tier.get("plugins") or []
        if arm == "evict_only":
            tier["plugins"] = [p for p in plugins if p.get("name") != RESCHEDULING]
        elif interval is not None:
            for p in plugins:
                if p.get("name") == RESCHEDULING:
                    p.setdefault("arguments", {})["interval"] = interval
    if arm == "evict_only":
        actions = [a for a in actions if a != SHUFFLE]
    elif SHUFFLE not in actions or not any(
        p.get("name") == RESCHEDULING for t in doc.get("tiers") or [] for p in t.get("plugins") or []
    ):
        raise ValueError("the rebalance arm needs the conf's `shuffle` action and `rescheduling` plugin")
    doc["actions"] = ", ".join(actions)
    return str(yaml.safe_dump(doc, sort_keys=False))


@dataclass(frozen=True)
class Eviction:
    t: float  # wall clock (the audit event's)
    pod: str
    kind: str  # EVICTED (an agent's), MOVED (the scheduler's, Rebalanced), PREEMPTED (the scheduler's, other)


def rebalanced_pods(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """Pods the scheduler evicted with the reason Rebalanced, from core/v1 Events (reason `Evict`)."""
    out = set()
    for ev in events:
        obj = ev.get("involvedObject") or {}
        if ev.get("reason") == "Evict" and obj.get("kind", "Pod") == "Pod" and f": {REBALANCED}" in str(
            ev.get("message", "")
        ):
            out.add(str(obj.get("name", "")))
    return out


def classify_evictions(
    audit: Iterable[Mapping[str, Any]],
    agent_users: Iterable[str],
    controller_user: str,
    scheduler_user: str,
    rebalanced: set[str],
) -> list[Eviction]:
    """Accepted evictions (`pods/eviction` create answered < 300; a PDB's 429 moved nothing) by who made them: an
    agent or the controller on an agent's behalf -> EVICTED; the scheduler -> MOVED when its Event says Rebalanced,
    else PREEMPTED. Anyone else's (this harness deleting its workload) are not the step's."""
    agents = set(agent_users)
    out = []
    for ev in audit:
        ref = ev.get("objectRef") or {}
        code = (ev.get("responseStatus") or {}).get("code", 0)
        if ref.get("subresource") != "eviction" or ev.get("verb") != "create" or not 0 < code < 300:
            continue
        user, pod = (ev.get("user") or {}).get("username", ""), str(ref.get("name", ""))
        if user in agents or user == controller_user:
            kind = EVICTED
        elif user == scheduler_user:
            kind = MOVED if pod in rebalanced else PREEMPTED
        else:
            continue
        out.append(Eviction(float(ev.get("_t", 0.0)), pod, kind))
    return out


def lost_core_s(pods: Iterable[str], ended: Mapping[str, float]) -> tuple[float, int]:
    """CPU-seconds of progress the pods held when they stopped running (LoadModel.ended), and how many of them the
    load model never saw run (counted as 0: a pod evicted before it ran lost nothing)."""
    total, unknown = 0.0, 0
    for pod in pods:
        if pod in ended:
            total += ended[pod]
        else:
            unknown += 1
    return total, unknown


def moved_twice(moves: Iterable[tuple[float, str]], window_s: float = COOLDOWN_S) -> int:
    """Workloads (controller owners) moved twice within `window_s` of each other: ping-pong the cool-down forbids."""
    by_workload: dict[str, list[float]] = collections.defaultdict(list)
    for t, workload in moves:
        by_workload[workload].append(t)
    twice = 0
    for ts in by_workload.values():
        ts.sort()
        twice += any(b - a < window_s for a, b in itertools.pairwise(ts))
    return twice


def gangs_below_min(samples: Sequence[Mapping[str, int]], min_member: Mapping[str, int]) -> int:
    """Gangs that ran at least `minMember` members and later fewer, over samples (gang -> its members Running and
    not terminating) taken through the step: in this harness only an eviction or a move takes a member away."""
    below = set()
    for gang, need in min_member.items():
        whole = False
        for s in samples:
            n = s.get(gang, 0)
            if n >= need:
                whole = True
            elif whole:
                below.add(gang)
                break
    return len(below)


def arm_figures(
    evictions: Sequence[Eviction],
    node_of: Mapping[str, str],
    owner_of: Mapping[str, str],
    surge: set[str],
    ended: Mapping[str, float],
    gangs_below: int,
) -> dict[str, Any]:
    """One arm's figures (issue 34's keys first). `node_of`: each pod's node; `owner_of`: its controller owner."""
    lost = [e.pod for e in evictions if e.kind in (EVICTED, MOVED)]
    core_s, unknown = lost_core_s(lost, ended)
    evicted = [e for e in evictions if e.kind == EVICTED]
    moves = [e for e in evictions if e.kind == MOVED]
    return {
        "lost_core_s": round(core_s, 1),
        "evictions": len(evicted),
        "moved": len(moves),
        "moved_twice": moved_twice((e.t, owner_of.get(e.pod, e.pod)) for e in moves),
        "calm_node_evictions": sum(1 for e in evicted if node_of.get(e.pod) not in surge),
        "gangs_below_min": gangs_below,
        "calm_node_moves": sum(1 for e in moves if node_of.get(e.pod) not in surge),
        "preempted": sum(1 for e in evictions if e.kind == PREEMPTED),
        "lost_unknown_pods": unknown,
    }


def arm_order(arms: Sequence[str], round_: int) -> list[str]:
    """The arms' order in round `round_` (0-based): as given in the even rounds, reversed in the odd ones, so that
    neither arm always runs on a fleet the other one just left (a surge's after-effects, a machine growing busier)."""
    return list(arms) if round_ % 2 == 0 else list(reversed(arms))


def _lower_pct(ev: float | None, rb: float | None) -> float | None:
    return round(100 * (ev - rb) / ev, 1) if ev and rb is not None else None


def _spread(values: Sequence[float]) -> dict[str, Any]:
    got = sorted(values)
    if not got:
        return {"median": None, "min": None, "max": None, "rounds": 0}
    return {"median": round(statistics.median(got), 1), "min": got[0], "max": got[-1], "rounds": len(got)}


def paired_rounds(rounds: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Rounds of both arms (each round: arm -> its figures), compared within each round (the same surge nodes, minutes
    apart): how much lower rebalance's lost core-seconds are than evict_only's, in %, per round, and per pod the step
    put at risk (the arms' placements put different counts on the surge nodes), with the median and the range across
    rounds. `met`: issue 34's 50 % holds in every round (the range, not only the median, above it); None with no
    complete round. A round whose evict_only arm lost nothing compares nothing and is left out."""
    whole, per_pod = [], []
    for r in rounds:
        ev, rb = r.get(ARMS[0]), r.get(ARMS[1])
        if ev is None or rb is None:
            continue
        if (pct := _lower_pct(ev.get("lost_core_s"), rb.get("lost_core_s"))) is not None:
            whole.append(pct)
        ev_n, rb_n = ev.get("offline_pods_on_surge_nodes"), rb.get("offline_pods_on_surge_nodes")
        if ev_n and rb_n:
            pct = _lower_pct(ev.get("lost_core_s", 0.0) / ev_n, rb.get("lost_core_s", 0.0) / rb_n)
            if pct is not None:
                per_pod.append(pct)
    return {
        "lost_core_s_lower_pct": _spread(whole) | {"each": whole},
        "per_pod_at_risk_lower_pct": _spread(per_pod) | {"each": per_pod},
        "met": (min(whole) >= 50.0) if whole else None,
    }


#: the rescheduling plugin's series (scheduler_ext/metrics.py `_register_rebalance`)
REBALANCE_HOT: Final = "tidemark_scheduler_rebalance_hot_nodes"
REBALANCE_COOL: Final = "tidemark_scheduler_rebalance_cool_nodes"
REBALANCE_SKIPPED: Final = "tidemark_scheduler_rebalance_skipped_total"


def rescheduling_seen(scrapes: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """What the rescheduling plugin saw during a step, from the scheduler's /metrics scraped along it
    (localcluster/agentmetrics.py `parse_metrics`): the fewest and most cool nodes and the most hot nodes of its runs,
    and the candidates it held back, by reason, between the first and the last scrape. A step that moved nothing says
    why here: no cool node, or every candidate held (a failed CI run had 0 moves and nothing to tell which)."""
    got = [m for m in scrapes if REBALANCE_COOL in m]
    if not got:
        return {"scrapes": 0}
    held: dict[str, int] = {}
    prefix = REBALANCE_SKIPPED + '{reason="'
    for key, v in got[-1].items():
        if key.startswith(prefix):
            n = round(v - got[0].get(key, 0.0))
            if n > 0:
                held[key[len(prefix):].rstrip('"}')] = n
    cool = [m[REBALANCE_COOL] for m in got]
    return {
        "scrapes": len(got),
        "cool_nodes_min": int(min(cool)),
        "cool_nodes_max": int(max(cool)),
        "hot_nodes_max": int(max(m.get(REBALANCE_HOT, 0.0) for m in got)),
        "held": held,
    }


def offline_spec(cpu: int) -> dict[str, Any]:
    """An offline pod's spec: batch-cpu (milli) and 128Mi of batch-memory, requested and limited."""
    return {
        "schedulerName": "volcano",
        "priorityClassName": "volcano-free",
        "containers": [
            {
                "name": "w",
                "image": "registry.invalid/batch",
                "resources": {
                    "requests": {"kubernetes.io/batch-cpu": str(cpu), "kubernetes.io/batch-memory": "128Mi"},
                    "limits": {"kubernetes.io/batch-cpu": str(cpu), "kubernetes.io/batch-memory": "128Mi"},
                },
            }
        ],
    }


def offline_replicaset(
    name: str, namespace: str, replicas: int, min_member: int, cpu: int = 100
) -> list[tuple[str, dict[str, Any]]]:
    """A PodGroup and a ReplicaSet of offline pods in it (the workload of a load-step arm)."""
    labels = {"fleet.tidemark.dev/job": name}
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": "batch"},
    }
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {"volcano.sh/qos-level": "-1", GROUP_ANNOTATION: name}},
                "spec": offline_spec(cpu),
            },
        },
    }
    return [
        (f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups", pg),
        (f"/apis/apps/v1/namespaces/{namespace}/replicasets", rs),
    ]
