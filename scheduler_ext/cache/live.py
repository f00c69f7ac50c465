"""The live cluster for `run`: watch caches over the API, a parse cache, and the decisions not yet confirmed.

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

A snapshot per session costs time in proportion to what changed where it matters: pods are parsed
into TaskInfo once per (uid, resourceVersion) and later sessions get cheap copies of the parsed
task (`clone_task`); everything else is reassembled by `snapshot.build_cluster` from the cached
objects. `SnapshotStats` says how many pods were parsed and how long it took.

Decisions the API has not confirmed yet are overlaid on the snapshot, so no pod is placed twice
across sessions: a pod whose bind was issued counts as Bound on its node until the watch shows it
bound (or the bind failed); a pod whose eviction was issued counts as Releasing until the watch
shows it terminating; a PodGroup phase this scheduler decided holds until the object changes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_
from typing import Any, Final, cast

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.guard import Tracker
from scheduler_ext.api.task import TaskInfo, task_status_of
from scheduler_ext.api.types import BOUND, PENDING, RELEASING, RUNNING
from scheduler_ext.model.incremental import Fallback, Overlay, new_model
from scheduler_ext.model.incremental import update as update_model
from scheduler_ext.model.snapshot import SnapshotError, SnapshotMemo, build_cluster
from tidemark.apis import parse_resource_list
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
#: an ambiguous bind (no answer) stays assumed at most this long without the watch confirming it
AMBIGUOUS_BIND_TTL: Final = 30.0
#: ... or until the pod watch has been in contact with the server this long after the failure
AMBIGUOUS_CONFIRM_MARGIN: Final = 1.0
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})
_TASK_SLOTS: Final = tuple(TaskInfo.__slots__)
#: task attributes holding mutable containers: fresh ones per copy
_FRESH: Final = frozenset({"cache", "resreq", "init_resreq"})
_SHARED_SLOTS: Final = tuple(s for s in _TASK_SLOTS if s not in _FRESH)


def _compile_clone() -> Callable[[TaskInfo], TaskInfo]:
    """A copy function with one plain attribute assignment per slot (about 3x a getattr/setattr loop)."""
    lines = ["def clone(t):", "    n = _new(_cls)"]
    lines += [f"    n.{name} = t.{name}" for name in _SHARED_SLOTS]
    lines += ["    n.resreq = t.resreq.clone()", "    n.init_resreq = t.init_resreq.clone()", "    n.cache = {}",
              "    return n"]
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": TaskInfo}
    exec("\n".join(lines), scope)
    fn: Callable[[TaskInfo], TaskInfo] = scope["clone"]
    return fn


_clone = _compile_clone()


def clone_task(template: TaskInfo) -> TaskInfo:
    """A session's own copy of a parsed task: the parse is shared, everything the session mutates is new.

    The pod dict, labels and parsed request maps are shared read-only; the Resources are cloned
    (Volcano clones them too), the plugin scratch dict is fresh; vectors are recomputed by the
    snapshot's NodeTable.bind_task.
    """
    return _clone(template)


def _md(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = obj.get("metadata")
    return md if isinstance(md, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    st = obj.get("status")
    return st if isinstance(st, Mapping) else {}


def _rv(obj: Mapping[str, Any]) -> str:
    return str(_md(obj).get("resourceVersion") or "")


def _without_node(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k != "nodeName"}


def holds_resources(pod: Mapping[str, Any] | None) -> bool:
    """Bound, not finished, not terminating: its requests count on its node."""
    if pod is None:
        return False
    return bool(_spec(pod).get("nodeName")) and _status(pod).get("phase") not in _TERMINAL and not _md(pod).get(
        "deletionTimestamp"
    )


def _ready_status(node: Mapping[str, Any]) -> str:
    for c in _status(node).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            return str(c.get("status"))
    return ""


def node_changed_for_scheduling(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A change that can make a pending pod fit: allocatable, labels, taints, unschedulable, readiness.

    Annotation-only changes (the agent's usage and oversubscription figures, every few seconds on
    every node) wait for the next periodic session instead of waking one per update.
    """
    return (
        _status(old).get("allocatable") != _status(new).get("allocatable")
        or _md(old).get("labels") != _md(new).get("labels")
        or _spec(old).get("taints") != _spec(new).get("taints")
        or _spec(old).get("unschedulable") != _spec(new).get("unschedulable")
        or _ready_status(old) != _ready_status(new)
    )


@dataclass(slots=True)
class _AssumedBind:
    node: str
    #: monotonic time the outcome became unknown (no answer); None: issued or succeeded
    ambiguous_at: float | None = None


@dataclass(frozen=True, slots=True)
class SnapshotStats:
    seconds: float
    pods: int
    nodes: int
    #: pods parsed this time (new, or a change TaskInfo reads); the rest reused an earlier parse
    parsed: int
    #: pods left out because they cannot be parsed (a warning is logged once per version)
    excluded: int
    assumed_binds: int
    assumed_evictions: int
    #: changed pods whose earlier parse was reused (a bind, a status update)
    rebased: int = 0
    #: the model was the last session's with only what changed rebuilt (scheduler_ext/model/incremental.py)
    incremental: bool = False


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    cluster: ClusterInfo
    #: PodGroup objects as stored (`ns/name`), for status comparisons
    pod_groups: Mapping[str, JSON]
    #: Queue objects as stored (name)
    queues: Mapping[str, JSON]
    stats: SnapshotStats
    warnings: tuple[str, ...] = field(default_factory=tuple)


class LiveCache:
    """Watch caches plus assumed decisions; `snapshot(now)` builds one session's ClusterInfo.

    `on_wake(reason)` is called (from a reflector thread) on changes worth an early session: a new
    pending pod of ours, a pod releasing its node, a node change that can make pods fit, a new or
    changed PodGroup or Queue.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        scheduler_name: str,
        on_wake: Callable[[str], None] | None = None,
        backoff: BackoffPolicy = SCHEDULER_BACKOFF,
        watch_timeout: int = 300,
        clock: Callable[[], float] = time.monotonic,
        on_skipped: Callable[[Mapping[str, Any], str], None] | None = None,
    ) -> None:
        self.api_client = api_client
        self.scheduler_name = scheduler_name
        self._on_wake = on_wake
        self._backoff = backoff
        self._watch_timeout = watch_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pods: dict[str, JSON] = {}
        self._assumed_binds: dict[str, _AssumedBind] = {}
        self._assumed_evictions: dict[str, float] = {}
        self._pg_phases: dict[str, tuple[str, str]] = {}
        # scheduler thread only
        self._templates: dict[str, tuple[str, TaskInfo]] = {}
        self._bad: dict[str, str] = {}
        #: node and pod derivations of the last snapshot, reused for unchanged objects
        self.memo = SnapshotMemo()
        self._build_clean = False
        #: the Node store's objects at the last snapshot and the same sorted by name
        self._nodes_sorted: tuple[list[JSON], list[JSON]] = ([], [])
        #: the pods of the last snapshot, their uids by id(pod) and in order (empty when one was left out)
        self._last_pods: tuple[list[JSON], dict[int, str], list[str]] = ([], {}, [])
        #: (kind, namespace, name) -> resourceVersion of the non-pod objects left out and reported
        self._bad_objects: dict[tuple[str, str, str], str] = {}
        #: told once per object resourceVersion about each object left out (the scheduler emits a Warning Event)
        self._on_skipped = on_skipped
        self.pdb_kind: ResourceKind | None = None
        self._pdb_discovered = threading.Event()
        self._pdb_thread: threading.Thread | None = None
        self.reflectors: dict[str, Reflector] = {
            "nodes": self._reflector(NODES, self._on_node),
            "pods": self._reflector(PODS, self._on_pod),
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
    def start(self) -> LiveCache:
        for r in self.reflectors.values():
            r.start()
        self._pdb_thread = threading.Thread(target=self._discover_pdbs, name="pdb discovery", daemon=True)
        self._pdb_thread.start()
        return self

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
            self._pdb_discovered.set()
            return

    def synced(self) -> bool:
        """Every watch cache holds its first full list (and PDB discovery is done)."""
        return self._pdb_discovered.is_set() and all(r.has_synced() for r in list(self.reflectors.values()))

    def wait_for_sync(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.synced():
            if time.monotonic() > deadline or self._stop.wait(0.05):
                return False
        return True

    def last_contact(self) -> float | None:
        """Monotonic time any watch last heard from the server."""
        seen = [c for r in list(self.reflectors.values()) if (c := r.last_contact()) is not None]
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
        return str(_spec(pod).get("schedulerName") or "default-scheduler") == self.scheduler_name

    def relevant(self, pod: Mapping[str, Any]) -> bool:
        """Ours (any phase), or bound to a node and not finished (it holds resources there)."""
        if self._ours(pod):
            return True
        return bool(_spec(pod).get("nodeName")) and _status(pod).get("phase") not in _TERMINAL

    def _on_pod(self, etype: str, old: JSON | None, new: JSON | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        key = object_key(obj)
        uid = str(_md(obj).get("uid") or "")
        wake = ""
        with self._lock:
            if etype == DELETED or new is None or not self.relevant(new):
                self._pods.pop(key, None)
                self._assumed_binds.pop(uid, None)
                self._assumed_evictions.pop(uid, None)
            else:
                self._pods[key] = new
                if _spec(new).get("nodeName"):
                    self._assumed_binds.pop(uid, None)  # the watch confirms the bind
                if _md(new).get("deletionTimestamp") or _status(new).get("phase") in _TERMINAL:
                    self._assumed_evictions.pop(uid, None)
        if new is not None and etype == ADDED and self._ours(new) and not _spec(new).get("nodeName"):
            wake = "new pending pod"
        elif holds_resources(old) and not holds_resources(new):
            wake = "pod released its node"
        if wake:
            self._wake(wake)

    def _on_node(self, etype: str, old: JSON | None, new: JSON | None) -> None:
        if etype != "MODIFIED" or old is None or new is None or node_changed_for_scheduling(old, new):
            self._wake(f"node {etype.lower()}")

    def _on_podgroup(self, etype: str, old: JSON | None, new: JSON | None) -> None:
        if etype != "MODIFIED" or old is None or new is None or _spec(old) != _spec(new):
            self._wake(f"podgroup {etype.lower()}")

    def _on_queue(self, etype: str, old: JSON | None, new: JSON | None) -> None:
        if etype != "MODIFIED" or old is None or new is None or _spec(old) != _spec(new):
            self._wake(f"queue {etype.lower()}")

    # --- assumed decisions (scheduler thread and executor threads) --------------------------------------
    def assume_bound(self, uid: str, node: str) -> None:
        with self._lock:
            self._assumed_binds[uid] = _AssumedBind(node)

    def bind_failed(self, uid: str) -> None:
        """The bind was refused: the pod is pending again next session."""
        with self._lock:
            self._assumed_binds.pop(uid, None)

    def bind_unknown(self, uid: str) -> None:
        """No answer: the bind may or may not have happened; keep it assumed until the watch can tell."""
        with self._lock:
            a = self._assumed_binds.get(uid)
            if a is not None:
                a.ambiguous_at = self._clock()

    def assume_evicted(self, uid: str) -> None:
        with self._lock:
            self._assumed_evictions[uid] = self._clock()

    def eviction_failed(self, uid: str) -> None:
        with self._lock:
            self._assumed_evictions.pop(uid, None)

    def clear_assumptions(self) -> None:
        """Forget everything assumed (e.g. on a new term as leader: the watch caches are the truth)."""
        with self._lock:
            self._assumed_binds.clear()
            self._assumed_evictions.clear()
            self._pg_phases.clear()

    def assumed(self) -> tuple[dict[str, str], set[str]]:
        with self._lock:
            return {u: a.node for u, a in self._assumed_binds.items()}, set(self._assumed_evictions)

    def note_podgroup_phases(self, phases: Mapping[str, tuple[str, str]]) -> None:
        """PodGroup `ns/name` -> (resourceVersion read, phase decided): holds until the object changes."""
        with self._lock:
            self._pg_phases.update(phases)

    # --- the snapshot (scheduler thread) ------------------------------------------------------------------
    def _expire_ambiguous(self) -> None:
        contact = self.reflectors["pods"].last_contact()
        now = self._clock()
        with self._lock:
            for uid in [
                u
                for u, a in self._assumed_binds.items()
                if a.ambiguous_at is not None
                and (
                    now - a.ambiguous_at > AMBIGUOUS_BIND_TTL
                    or (contact is not None and contact > a.ambiguous_at + AMBIGUOUS_CONFIRM_MARGIN)
                )
            ]:
                del self._assumed_binds[uid]

    @staticmethod
    def _rebase(old: TaskInfo, pod: JSON, rv: str) -> tuple[str, TaskInfo] | None:
        """The parsed task of a new version that differs only where TaskInfo reads no parse from.

        The commonest changes are a bind (spec.nodeName) and kubelet's status updates: TaskInfo takes
        from them only node_name and status (phase, deletionTimestamp), so the old parse is reused.
        Anything else (metadata it reads, the rest of the spec) changed: None, parse again.
        """
        before = old.pod
        md_new, md_old = _md(pod), _md(before)
        for key in ("name", "namespace", "uid", "annotations", "labels", "creationTimestamp"):
            if md_new.get(key) != md_old.get(key):
                return None
        spec_new, spec_old = _spec(pod), _spec(before)
        if spec_new != spec_old and _without_node(spec_new) != _without_node(spec_old):
            return None
        t = clone_task(old)
        t.pod = pod
        t.node_name = str(spec_new.get("nodeName") or "")
        t.status = task_status_of(pod)
        return rv, t

    def _template(self, pod: JSON, now: float) -> tuple[str, TaskInfo] | None:
        """The parsed task of this pod version (parsed now if new or changed); None if unparsable."""
        md = _md(pod)
        uid = str(md.get("uid") or "")
        rv = str(md.get("resourceVersion") or "")
        entry = self._templates.get(uid)
        if entry is not None and entry[0] == rv:
            return entry
        if self._bad.get(uid) == rv:
            return None
        problems: list[str] = []
        try:
            if not isinstance(_spec(pod).get("containers") or [], list):
                problems.append("spec.containers must be a list")
            task = TaskInfo(pod, default_creation=now, problems=problems)
        except Exception as exc:  # one bad pod never stops the loop (house style 8)
            problems.append(f"{type(exc).__name__}: {exc}")
        if problems:
            self._bad[uid] = rv
            why = problems[0].removesuffix("; ignored")
            where = _pod_field(pod)
            why = f"{where}: {why}" if where and not why.startswith("spec.") else why
            log.warning("pod %s left out of scheduling: %s", object_key(pod), why)
            self._skipped({"kind": "Pod", "apiVersion": "v1", **pod}, why)
            return None
        self._bad.pop(uid, None)
        return rv, task

    def snapshot(self, now: float) -> LiveSnapshot:
        """The ClusterInfo for one session (wall-clock `now`), with assumed decisions overlaid."""
        t0 = time.perf_counter()
        self._expire_ambiguous()
        with self._lock:
            pods = list(self._pods.values())
            binds = {u: a.node for u, a in self._assumed_binds.items()}
            evictions = set(self._assumed_evictions)
            pg_phases = dict(self._pg_phases)
        nodes = self._sorted_nodes()
        podgroups = self.store("podgroups")
        queues = self.store("queues")
        others: list[Mapping[str, Any]] = [*self.store("priorityclasses"), *self.store("pdbs")]
        objects: list[Mapping[str, Any]] = [*nodes, *queues, *others]
        # PodGroups, with the phases we decided until the object changes (our status write lands)
        pg_objects, pg_view, keep_phases = _with_decided_phases(podgroups, pg_phases)
        objects.extend(pg_objects)
        # Pods: parse only new or changed versions (a bind or a status update reuses the parse)
        templates, pod_uids, pod_objects, parsed, rebased, excluded = self._pod_templates(pods, now)
        objects.extend(pod_objects)
        task_factory = _overlaid_factory(templates, binds, evictions)
        overlay: dict[str, Overlay] = {u: (n, False) for u, n in binds.items()}
        for u in evictions:
            overlay[u] = (binds.get(u), True)
        cluster, incremental = self._model(
            objects, now, task_factory, nodes=nodes, others=others, queues=queues, pgs=pg_objects,
            pods=pod_objects, uids=pod_uids, overlay=overlay,
        )
        with self._lock:
            # a decided phase holds only while the object is the version the session read
            self._pg_phases = {k: v for k, v in self._pg_phases.items() if keep_phases.get(k) == v}
            # assumptions about pods no longer cached (deleted before their bind was even issued);
            # those made after this snapshot read the pods wait for the next one
            for uid in [u for u in self._assumed_binds if u in binds and u not in templates]:
                del self._assumed_binds[uid]
            for uid in [u for u in self._assumed_evictions if u in evictions and u not in templates]:
                del self._assumed_evictions[uid]
        stats = SnapshotStats(
            seconds=time.perf_counter() - t0,
            pods=len(templates),
            nodes=len(cluster.node_list),
            parsed=parsed,
            excluded=excluded,
            assumed_binds=len(binds),
            assumed_evictions=len(evictions),
            rebased=rebased,
            incremental=incremental,
        )
        queue_view = {str(_md(q).get("name") or ""): q for q in queues}
        return LiveSnapshot(cluster, pg_view, queue_view, stats, tuple(cluster.warnings))

    def _sorted_nodes(self) -> list[JSON]:
        """The Node store's objects by name (the last order again while the store holds the same objects)."""
        raw_nodes = self.store("nodes")
        last_raw, last_sorted = self._nodes_sorted
        if len(raw_nodes) == len(last_raw) and all(map(is_, raw_nodes, last_raw)):
            return last_sorted  # the same Node objects as last time: the same order
        nodes = sorted(raw_nodes, key=lambda n: str(_md(n).get("name") or ""))
        self._nodes_sorted = (raw_nodes, nodes)
        return nodes

    def _pod_templates(
        self, pods: list[JSON], now: float
    ) -> tuple[dict[str, tuple[str, TaskInfo]], list[str], list[Mapping[str, Any]], int, int, int]:
        """The pods' templates, uids and objects (those that parse), parsing only new or changed versions."""
        parsed = rebased = excluded = 0
        previous = self._templates

        def one(p: JSON, uid: str, rv: str) -> tuple[str, TaskInfo] | None:
            """The template of a new or changed pod (counted); None when it cannot be parsed."""
            nonlocal parsed, rebased, excluded
            entry = previous.get(uid)
            if entry is not None and entry[0] == rv:
                return entry
            fresh = self._rebase(entry[1], p, rv) if entry is not None else None
            if fresh is not None:
                rebased += 1
                return fresh
            fresh = self._template(p, now)
            if fresh is None:
                excluded += 1
                return None
            parsed += 1
            return fresh

        again = self._pods_again(pods, previous, one)
        if again is not None:
            templates, pod_uids, uid_of = again
            pod_objects = cast(list[Mapping[str, Any]], pods)
        else:
            parsed = rebased = excluded = 0
            templates = {}
            pod_uids = []
            pod_objects = []
            for p in pods:
                md = p.get("metadata") or {}
                uid = str(md.get("uid") or "")
                entry = one(p, uid, str(md.get("resourceVersion") or ""))
                if entry is None:
                    continue
                templates[uid] = entry
                pod_uids.append(uid)
                pod_objects.append(p)
            uid_of = dict(zip(map(id, pods), pod_uids)) if excluded == 0 else {}
        self._last_pods = (pods, uid_of, pod_uids) if excluded == 0 else ([], {}, [])
        self._templates = templates
        if len(self._bad) > 2 * max(16, excluded):
            present = {str(_md(p).get("uid") or "") for p in pods}
            self._bad = {u: rv for u, rv in self._bad.items() if u in present}
        return templates, pod_uids, pod_objects, parsed, rebased, excluded

    def _pods_again(
        self, pods: list[JSON], previous: dict[str, tuple[str, TaskInfo]],
        one: Callable[[JSON, str, str], tuple[str, TaskInfo] | None],
    ) -> tuple[dict[str, tuple[str, TaskInfo]], list[str], dict[int, str]] | None:
        """The templates when most pods are the last snapshot's objects (only new ones parsed); None: the full loop."""
        last_pods, uid_of, last_uids = self._last_pods
        if last_pods and len(pods) == len(last_pods) and all(map(is_, pods, last_pods)):
            # the very same pods in the same order: the same uids and templates
            return previous, last_uids, uid_of
        if not last_pods:
            return None
        # a pod object seen last time (kept alive in last_pods, so ids are not reused) has the same uid
        # and template: only new objects (added or changed pods) are looked at
        known = list(map(uid_of.get, map(id, pods)))
        fresh = list(compress(range(len(pods)), map(is_, known, repeat(None))))
        if len(fresh) > len(pods) // 2:
            return None
        templates = dict(previous)
        for i in fresh:
            p = pods[i]
            md = p.get("metadata") or {}
            uid = str(md.get("uid") or "")
            entry = one(p, uid, str(md.get("resourceVersion") or ""))
            if entry is None:
                return None
            templates[uid] = entry
            known[i] = uid
        pod_uids = cast(list[str], known)
        present = set(pod_uids)
        if len(present) != len(pod_uids):
            return None  # one uid twice: the full loop keeps the last, as always
        for gone in templates.keys() - present:
            del templates[gone]
        return templates, pod_uids, dict(zip(map(id, pods), pod_uids))

    def _model(
        self,
        objects: list[Mapping[str, Any]],
        now: float,
        task_factory: Callable[[Mapping[str, Any], float, list[str]], TaskInfo],
        *,
        nodes: list[JSON],
        others: list[Mapping[str, Any]],
        queues: list[JSON],
        pgs: list[Mapping[str, Any]],
        pods: list[Mapping[str, Any]],
        uids: list[str],
        overlay: dict[str, Overlay],
    ) -> tuple[ClusterInfo, bool]:
        """The last session's model updated (True), else a full build (False) that becomes the next one's model."""
        memo = self.memo
        if memo is not None and memo.live_model is not None:
            try:
                cluster = update_model(
                    memo.live_model, memo, nodes=nodes, others=others, queues=queues, pgs=pgs,
                    pods=pods, uids=uids, overlay=overlay, now=now, task_factory=task_factory,
                )
                return cluster, True
            except (Fallback, SnapshotError) as exc:
                log.debug("snapshot: a full build (%s)", exc)
            except Exception:  # a defect here must not stop scheduling: the full build is always right
                log.exception("snapshot: the incremental update failed; building from scratch")
        if memo is not None:
            memo.live_model = None
        cluster = self._build(objects, now, task_factory)
        if memo is not None and self._build_clean:
            memo.live_model = new_model(
                cluster, Tracker(), memo, nodes=nodes, others=others, queues=queues, pgs=pgs,
                pods=pods, uids=uids, overlay=overlay, now=now,
            )
        return cluster, False

    def _build(
        self,
        objects: list[Mapping[str, Any]],
        now: float,
        task_factory: Callable[[Mapping[str, Any], float, list[str]], TaskInfo],
    ) -> ClusterInfo:
        """build_cluster; a malformed non-pod object (SnapshotError) is left out, never the whole cycle.

        `self._build_clean` says afterwards whether every object was used (False: some were left out).
        """
        self._build_clean = False
        try:
            cluster = build_cluster(
                objects, now=now, scheduler_name=self.scheduler_name, task_factory=task_factory, memo=self.memo
            )
        except SnapshotError as exc:
            log.debug("snapshot: %s; finding and leaving out the malformed objects", exc)
        else:
            self._bad_objects.clear()
            self._build_clean = True
            return cluster
        good: list[Mapping[str, Any]] = []
        bad: dict[tuple[str, str, str], str] = {}
        for obj in objects:
            why = "" if obj.get("kind") == "Pod" else _problem_alone(obj, now)
            if not why:
                good.append(obj)
                continue
            md = _md(obj)
            key = (str(obj.get("kind") or ""), str(md.get("namespace") or ""), str(md.get("name") or ""))
            rv = str(md.get("resourceVersion") or "")
            bad[key] = rv
            if self._bad_objects.get(key) != rv:  # once per object version: the log and the Event
                log.warning("left out of scheduling: %s", why)
                self._skipped(obj, why)
        self._bad_objects = bad
        return build_cluster(
            good, now=now, scheduler_name=self.scheduler_name, task_factory=task_factory, memo=self.memo
        )

    def _skipped(self, obj: Mapping[str, Any], why: str) -> None:
        if self._on_skipped is None:
            return
        try:
            self._on_skipped(obj, why)
        except Exception:  # reporting never stops a session
            log.exception("reporting a skipped object failed")


def _pod_field(pod: Mapping[str, Any]) -> str:
    """The path of the pod's first resource list that does not parse ('' when none does not)."""
    spec = _spec(pod)
    lists: list[tuple[str, Any]] = [("spec.overhead", spec.get("overhead"))]
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            res = c.get("resources") if isinstance(c, Mapping) else None
            if isinstance(res, Mapping):
                lists += [(f"spec.{key}[{i}].resources.{part}", res.get(part)) for part in ("requests", "limits")]
    for path, rl in lists:
        problems: list[str] = []
        parse_resource_list(rl, problems)
        if problems:
            return path
    return ""


def _problem_alone(obj: Mapping[str, Any], now: float) -> str:
    """Why `obj` alone makes no cluster ('' when it does): the message names the object and the field."""
    try:
        build_cluster([obj], now=now)
    except SnapshotError as exc:
        return str(exc)
    return ""


def _with_decided_phases(
    podgroups: list[JSON], pg_phases: Mapping[str, tuple[str, str]]
) -> tuple[list[Mapping[str, Any]], dict[str, JSON], dict[str, tuple[str, str]]]:
    """The PodGroups with the phases we decided while the object is the version we read, and the decisions kept."""
    keep_phases: dict[str, tuple[str, str]] = {}
    pg_view: dict[str, JSON] = {}
    pg_objects: list[Mapping[str, Any]] = []
    for pg in podgroups:
        key = object_key(pg)
        pg_view[key] = pg
        decided = pg_phases.get(key)
        if decided is not None and decided[0] == _rv(pg):
            keep_phases[key] = decided
            if decided[1] != _status(pg).get("phase"):
                pg = {**pg, "status": {**_status(pg), "phase": decided[1]}}
        pg_objects.append(pg)
    return pg_objects, pg_view, keep_phases


def _overlaid_factory(
    templates: Mapping[str, tuple[str, TaskInfo]], binds: Mapping[str, str], evictions: set[str]
) -> Callable[[Mapping[str, Any], float, list[str]], TaskInfo]:
    """The build's task factory: a copy of the pod's parsed template, the assumed bind or eviction overlaid."""

    def task_factory(pod: Mapping[str, Any], _now: float, _problems: list[str]) -> TaskInfo:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        t = clone_task(templates[uid][1])
        node = binds.get(uid)
        if node is not None and t.status == PENDING:
            t.node_name = node
            t.status = BOUND
        elif uid in evictions and t.status in (BOUND, RUNNING):
            t.status = RELEASING
        return t

    return task_factory
