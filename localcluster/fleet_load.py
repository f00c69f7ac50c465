"""The fleet's load model (localcluster/fleet.py): a watch of every pod keeps each hollow node's synthetic host
(localcluster/fleet_host.py) in step with the pods running there, and every tick each pod burns CPU by its
`fleet.tidemark.dev/load` label (seeded): online `idle` 10 %, `busy` 60 %, `spiky` 10 % or 150 % of its CPU request
(20 s period), offline its batch-cpu request; a node in `surge` runs its online pods at 4 x their request, or, after
`start_ramp`, rises from its calm load to a level fixed at the ramp's start. Each offline pod's CPU-seconds of
progress are kept (`progress`; `ended`, by pod name, once it stops running: what an eviction or a move loses).
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

from localcluster.fleet_host import SyntheticHost
from tidemark.quantities import quantity_to_int

LOAD_LABEL = "fleet.tidemark.dev/load"
#: CPU per second of a pod by its load label, as a fraction of its CPU request
LOAD_FRACTION = {"idle": 0.10, "busy": 0.60}
SPIKY = (0.10, 1.50, 20.0)  # low, high, period (s)
SURGE = 4.0
#: the share of a surged node's CPU its pods hold at least (past the default 80 % CPU watermark)
SURGE_TARGET = 0.95
#: an arm's ramp: the surge nodes' online pods alone at 70 % of the node (`start_ramp`; at 75 % the agents sampled them
#: at 81-82 %, past the 80 % watermark, whose evictions never wait: a 20-node run at 70 moved 7, evicted 0)
RAMP_TARGET = 0.70


def cpu_milli(value: str) -> int:
    return int(float(value[:-1])) if value.endswith("m") else int(float(value) * 1000)


@dataclass
class PodLoad:
    node: str
    uid: str
    kind: str  # idle, busy, spiky, offline
    request_cores: float
    offline: bool
    name: str = ""


@dataclass
class LoadModel:
    """Keeps every hollow node's host in step with the pods running there and burns their CPU."""

    hosts: dict[str, SyntheticHost]
    seed: int = 1
    surge: set[str] = field(default_factory=set)
    pods: dict[str, PodLoad] = field(default_factory=dict)  # uid -> load
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: offline pod uid -> CPU-seconds burnt while Running (its progress); pod name -> the same when it stopped
    progress: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    #: a ramped surge (`start_ramp`): its start (monotonic), length, and each node's online factor at full level,
    #: fixed at the start (a pod moved or evicted off the node relieves it; `surge_factor` would refill it)
    ramp_since: float | None = None
    ramp_s: float = 0.0
    ramp_factor: dict[str, float] = field(default_factory=dict)

    def on_pod(self, _etype: str, old: Any, new: Any) -> None:
        obj = new if new is not None else old
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        uid, node = meta.get("uid", ""), spec.get("nodeName", "")
        host = self.hosts.get(node)
        running = new is not None and status.get("phase") == "Running" and not meta.get("deletionTimestamp")
        with self.lock:
            if host is None or not running:
                gone = self.pods.pop(uid, None)
                if gone is not None and gone.node in self.hosts:
                    self.hosts[gone.node].remove_pod(uid)
                if gone is not None and gone.offline:
                    self.ended[gone.name] = self.progress.pop(uid, 0.0)
                return
            if uid in self.pods:
                return
            requests: dict[str, str] = {}
            for c in spec.get("containers") or []:
                requests.update((c.get("resources") or {}).get("requests") or {})
            offline = "kubernetes.io/batch-cpu" in requests
            cores = (
                (quantity_to_int(requests["kubernetes.io/batch-cpu"]) or 0)
                if offline else cpu_milli(requests.get("cpu", "0"))
            ) / 1000
            memory = 64 * 2**20
            kind = "offline" if offline else (meta.get("labels") or {}).get(LOAD_LABEL, "idle")
            self.pods[uid] = PodLoad(node, uid, kind, cores, offline, meta.get("name", ""))
            containers = [c["containerID"] for c in status.get("containerStatuses") or [] if c.get("containerID")]
            host.add_pod(
                uid, status.get("qosClass") or "BestEffort", cpu_milli(requests.get("cpu", "0")), memory, containers
            )

    def cores(self, pod: PodLoad, now: float) -> float:
        if pod.offline:
            return pod.request_cores
        return pod.request_cores * (SURGE if pod.node in self.surge else self.calm_fraction(pod, now))

    def calm_fraction(self, pod: PodLoad, now: float) -> float:
        """An online pod's CPU outside a surge, as a fraction of its request."""
        if pod.kind == "spiky":
            low, high, period = SPIKY
            phase = (zlib.crc32(pod.uid.encode()) ^ self.seed) % 100 / 100 * period  # stable across runs, unlike hash()
            return high if (now + phase) % period < period / 2 else low
        return LOAD_FRACTION.get(pod.kind, 0.1)

    def start_ramp(self, nodes: set[str], now: float, ramp_s: float, top: float = RAMP_TARGET) -> None:
        """`nodes`' online pods rise from their calm load over `ramp_s` s to where they alone hold `top` of the
        node's CPU (their request at least), and stay there. At the default 70 %: at the agents' B target and the
        rescheduling plugin's 70 %, under the 80 % watermark, so the offline tier's allowance (0.9 of the node minus
        the online and system usage) falls under the agent's satisfaction of what 200m or more of offline pods
        request: a starved tier, whatever the node's offline load. (Before: online up to where ALL the node's pods
        held 95 %, so a node with more offline work got less online load; 5 or 6 offline pods left it at 35 %, and
        neither arm had anything to do.)"""
        with self.lock:
            self.ramp_factor = {}
            for n in nodes:
                if n not in self.hosts:
                    continue
                online = sum(p.request_cores for p in self.pods.values() if p.node == n and not p.offline)
                self.ramp_factor[n] = max(1.0, top * self.hosts[n].ncpu / online) if online else SURGE
            self.ramp_since, self.ramp_s = now, ramp_s
            self.surge = set(nodes)

    def end_surge(self) -> None:
        with self.lock:
            self.surge, self.ramp_since, self.ramp_factor = set(), None, {}

    def ramp_level(self, now: float) -> float:
        """0 at the ramp's start, 1 after `ramp_s` (and always 1 for a step: no ramp started)."""
        if self.ramp_since is None or self.ramp_s <= 0:
            return 1.0
        return min(1.0, max(0.0, (now - self.ramp_since) / self.ramp_s))

    def surge_factor(self, node: str) -> float:
        """A surged node's online pods at SURGE x their request, or more: enough for them alone to hold
        SURGE_TARGET of the node's CPU whatever its mix (a node of small online pods at 4 x stayed under the
        watermark), past the agents' 80 % CPU watermark, which under the satisfaction measure is the online pods'
        usage: evicted at once (OnlineCPUHighWatermark; a starved tier's evictions wait the agent's rebalanceGrace,
        longer than the step). Called under the lock."""
        online = sum(p.request_cores for p in self.pods.values() if p.node == node and not p.offline)
        if online <= 0:
            return SURGE
        return max(SURGE, SURGE_TARGET * self.hosts[node].ncpu / online)

    def tick(self, seconds: float, now: float) -> None:
        with self.lock:
            factors = {n: self.ramp_factor.get(n) or self.surge_factor(n) for n in self.surge if n in self.hosts}
            level = self.ramp_level(now)
            per_node: dict[str, dict[str, float]] = {n: {} for n in self.hosts}
            for pod in self.pods.values():
                cores = self.cores(pod, now)
                if pod.node in factors and not pod.offline:
                    full = pod.request_cores * factors[pod.node]
                    calm = pod.request_cores * self.calm_fraction(pod, now)
                    cores = full if level >= 1.0 else calm + (full - calm) * level
                if pod.offline:
                    self.progress[pod.uid] = self.progress.get(pod.uid, 0.0) + cores * seconds
                per_node[pod.node][pod.uid] = cores
            for node, host in self.hosts.items():
                host.advance(seconds, per_node[node])
