"""The watch: reflectors over the API that keep the live cache's stores, and wake the scheduler on changes.

Reflectors (tidemark.kube.reflector: list+watch, resume, 410 relist, backoff) follow Nodes, Pods,
PodGroups and Queues (`scheduling.volcano.sh/v1beta1`), PriorityClasses and PodDisruptionBudgets
(policy/v1 or v1beta1, whichever the server serves, discovered in the background).

Pods: ONE reflector over all pods, filtered client-side to our pods (any phase: a gang counts its
finished members) and every other pod bound to a node and not finished (it holds node resources).
Why not two server-side filtered reflectors (pending-and-ours, bound): a pod that gets bound would
leave one stream and enter the other, and the two streams are not ordered with respect to each
other, so for a moment it would be in neither (its node looks free: a double placement) or in
both. In one stream the same change is a single MODIFIED event. This is also what Volcano's and
kube-scheduler's informers do. The cost: other schedulers' pending pods are held in memory.

The pod map is guarded by a lock shared with the assumed decisions (scheduler_ext/cache/assumed.py):
a pod seen bound and its assumed bind dropped are one step, so a snapshot never sees the pod pending
with no assumption (its node would look free).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from tidemark.kube.client import JSON, KubeError
from tidemark.kube.reflector import ADDED, DELETED, BackoffPolicy, Reflector, object_key
from tidemark.kube.resources import (
    NODES,
    PDBS_V1,
    PDBS_V1BETA1,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    ResourceKind,
    served_versions,
)

log = logging.getLogger(__name__)

#: a scheduler reconnects quickly after an outage (the agents' reflectors back off further)
SCHEDULER_BACKOFF: Final = BackoffPolicy(initial=0.5, factor=2.0, cap=5.0, jitter=0.5)
TERMINAL: Final = frozenset({"Succeeded", "Failed"})


def md(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    s = obj.get("spec")
    return s if isinstance(s, Mapping) else {}


def status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    st = obj.get("status")
    return st if isinstance(st, Mapping) else {}


def holds_resources(pod: Mapping[str, Any] | None) -> bool:
    """Bound, not finished, not terminating: its requests count on its node."""
    if pod is None:
        return False
    return bool(spec(pod).get("nodeName")) and status(pod).get("phase") not in TERMINAL and not md(pod).get(
        "deletionTimestamp"
    )


def _ready_status(node: Mapping[str, Any]) -> str:
    for c in status(node).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            return str(c.get("status"))
    return ""


def node_changed_for_scheduling(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A change that can make a pending pod fit: allocatable, labels, taints, unschedulable, readiness.

    Annotation-only changes (the agent's usage and oversubscription figures, every few seconds on
    every node) wait for the next periodic session instead of waking one per update.
    """
    return (
        status(old).get("allocatable") != status(new).get("allocatable")
        or md(old).get("labels") != md(new).get("labels")
        or spec(old).get("taints") != spec(new).get("taints")
        or spec(old).get("unschedulable") != spec(new).get("unschedulable")
        or _ready_status(old) != _ready_status(new)
    )


class ClusterWatch:
    """The watch caches; `on_wake(reason)` is called (from a reflector thread) on changes worth an early session.

    Those are: a new pending pod of ours, a pod releasing its node, a node change that can make pods
    fit, a new or changed PodGroup or Queue. `on_pod_stored(uid, pod)` is called under `lock` with the
    pod as now cached (None: no longer cached), so the assumed decisions follow the watch in the same step.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        scheduler_name: str,
        lock: threading.Lock,
        on_pod_stored: Callable[[str, JSON | None], None] | None = None,
        on_wake: Callable[[str], None] | None = None,
        backoff: BackoffPolicy = SCHEDULER_BACKOFF,
        watch_timeout: int = 300,
    ) -> None:
        self.api_client = api_client
        self.scheduler_name = scheduler_name
        self.lock = lock
        self._on_pod_stored = on_pod_stored
        self._on_wake = on_wake
        self._backoff = backoff
        self._watch_timeout = watch_timeout
        self._stop = threading.Event()
        #: the pods worth scheduling around (`relevant`), by ns/name; guarded by `lock`
        self.pods: dict[str, JSON] = {}
        self.pdb_kind: ResourceKind | None = None
        self.pdb_discovered = threading.Event()
        self._pdb_thread: threading.Thread | None = None
        self.reflectors: dict[str, Reflector] = {
            "nodes": self._reflector(NODES, self._on_node),
            "pods": self._reflector(PODS, self.on_pod),
            "podgroups": self._reflector(PODGROUPS, self._on_podgroup),
            "queues": self._reflector(QUEUES, self._on_queue),
            "priorityclasses": self._reflector(PRIORITY_CLASSES, None),
        }

    def _reflector(
        self, kind: ResourceKind, handler: Callable[[str, JSON | None, JSON | None], None] | None
    ) -> Reflector:
        return Reflector.for_resource(
            self.api_client, kind, on_change=handler, backoff=self._backoff, timeout_seconds=self._watch_timeout
        )

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        for r in self.reflectors.values():
            r.start()
        self._pdb_thread = threading.Thread(target=self._discover_pdbs, name="pdb discovery", daemon=True)
        self._pdb_thread.start()

    def stop(self) -> None:
        self._stop.set()
        for r in list(self.reflectors.values()):
            r.stop()
        if self._pdb_thread is not None:
            self._pdb_thread.join(5)

    def _discover_pdbs(self) -> None:
        """policy/v1 PDBs where served (>= 1.21), else v1beta1; none when the group is absent."""
        delay = 0.5
        while not self._stop.is_set():
            try:
                versions = served_versions(self.api_client, "policy")
            except KubeError as exc:
                log.warning("discovering the PodDisruptionBudget version: %s; retrying in %.1fs", exc, delay)
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, 5.0)
                continue
            kind = PDBS_V1 if "v1" in versions else PDBS_V1BETA1 if "v1beta1" in versions else None
            self.pdb_kind = kind
            if kind is not None and not self._stop.is_set():
                r = self._reflector(kind, None)
                self.reflectors["pdbs"] = r
                r.start()
                log.info("PodDisruptionBudgets: %s", kind.api_version)
            else:
                log.info("the server serves no PodDisruptionBudgets")
            self.pdb_discovered.set()
            return

    def synced(self) -> bool:
        """Every watch cache holds its first full list (and PDB discovery is done)."""
        return self.pdb_discovered.is_set() and all(r.has_synced() for r in list(self.reflectors.values()))

    def wait_for_sync(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.synced():
            if time.monotonic() > deadline or self._stop.wait(0.05):
                return False
        return True

    def last_contact(self, name: str | None = None) -> float | None:
        """Monotonic time any watch (or the one named) last heard from the server."""
        chosen = [self.reflectors[name]] if name is not None else list(self.reflectors.values())
        seen = [c for r in chosen if (c := r.last_contact()) is not None]
        return max(seen) if seen else None

    def store(self, name: str) -> list[JSON]:
        r = self.reflectors.get(name)
        return r.store.list() if r is not None else []

    def get(self, name: str, key: str) -> JSON | None:
        r = self.reflectors.get(name)
        return r.store.get(key) if r is not None else None

    # --- change handlers (reflector threads) ----------------------------------------------------------
    def _wake(self, reason: str) -> None:
        if self._on_wake is not None:
            self._on_wake(reason)

    def _ours(self, pod: Mapping[str, Any]) -> bool:
        return str(spec(pod).get("schedulerName") or "default-scheduler") == self.scheduler_name

    def relevant(self, pod: Mapping[str, Any]) -> bool:
        """Ours (any phase), or bound to a node and not finished (it holds resources there)."""
        if self._ours(pod):
            return True
        return bool(spec(pod).get("nodeName")) and status(pod).get("phase") not in TERMINAL

    def on_pod(self, etype: str, old: JSON | None, new: JSON | None) -> None:
        """The pod reflector's handler: keep the pod map (and the assumed decisions) current."""
        obj = new if new is not None else old
        if obj is None:
            return
        key = object_key(obj)
        uid = str(md(obj).get("uid") or "")
        wake = ""
        with self.lock:
            if etype == DELETED or new is None or not self.relevant(new):
                self.pods.pop(key, None)
                stored = None
            else:
                self.pods[key] = stored = new
            if self._on_pod_stored is not None:
                self._on_pod_stored(uid, stored)
        if new is not None and etype == ADDED and self._ours(new) and not spec(new).get("nodeName"):
            wake = "new pending pod"
        elif holds_resources(old) and not holds_resources(new):
            wake = "pod released its node"
        if wake:
            self._wake(wake)

    def _on_node(self, etype: str, old: JSON | None, new: JSON | None) -> None:
        if etype != "MODIFIED" or old is None or new is None or node_changed_for_scheduling(old, new):
            self._wake(f"node {etype.lower()}")

    def _on_podgroup(self, etype: str, old: JSON | None, new: JSON | None) -> None:
        if etype != "MODIFIED" or old is None or new is None or spec(old) != spec(new):
            self._wake(f"podgroup {etype.lower()}")

    def _on_queue(self, etype: str, old: JSON | None, new: JSON | None) -> None:
        if etype != "MODIFIED" or old is None or new is None or spec(old) != spec(new):
            self._wake(f"queue {etype.lower()}")
