"""The snapshot builder: one session's ClusterInfo from the watch caches, a parse cache and the assumed decisions.

A snapshot per session costs time in proportion to what changed where it matters: pods are parsed
into TaskInfo once per (uid, resourceVersion) and later sessions get cheap copies of the parsed
task (`clone_task`); the last session's model is updated where the objects changed
(scheduler_ext/model/incremental.py), else everything is reassembled by `snapshot.build_cluster`
from the cached objects. `SnapshotStats` says how many pods were parsed and how long it took.
The assumed decisions (scheduler_ext/cache/assumed.py) are overlaid on every snapshot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_
from typing import Any, Final, cast

from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.guard import Tracker
from scheduler_ext.api.task import TaskInfo, task_status_of
from scheduler_ext.cache.assumed import Assumed, AssumedDecisions, overlay_task, with_decided_phases
from scheduler_ext.cache.watch import ClusterWatch
from scheduler_ext.cache.watch import md as _md
from scheduler_ext.cache.watch import spec as _spec
from scheduler_ext.model.incremental import new_model
from scheduler_ext.model.incremental import update as update_model
from scheduler_ext.model.live_model import Fallback, Overlay
from scheduler_ext.model.snapshot import SnapshotError, SnapshotMemo, build_cluster
from tidemark.apis import parse_resource_list
from tidemark.kube.client import JSON
from tidemark.kube.reflector import object_key

log = logging.getLogger(__name__)

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


def _without_node(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k != "nodeName"}


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




class SnapshotBuilder:
    """`build(now)`: the ClusterInfo of one session, from `watch`'s stores with `decisions` overlaid.

    Scheduler thread only. Keeps, between snapshots, the parsed pods (templates), the memo of node
    and pod derivations and the last session's model, and which objects were left out (told once).
    """

    def __init__(
        self,
        watch: ClusterWatch,
        decisions: AssumedDecisions,
        *,
        on_skipped: Callable[[Mapping[str, Any], str], None] | None = None,
    ) -> None:
        self.watch = watch
        self.decisions = decisions
        self.scheduler_name = watch.scheduler_name
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

    def build(self, now: float) -> LiveSnapshot:
        """The ClusterInfo for one session (wall-clock `now`), with assumed decisions overlaid."""
        t0 = time.perf_counter()
        self.decisions.expire_ambiguous(self.watch.last_contact("pods"))
        with self.decisions.lock:
            pods = list(self.watch.pods.values())
            assumed = self.decisions.read()
        nodes = self._sorted_nodes()
        podgroups = self.watch.store("podgroups")
        queues = self.watch.store("queues")
        others: list[Mapping[str, Any]] = [*self.watch.store("priorityclasses"), *self.watch.store("pdbs")]
        objects: list[Mapping[str, Any]] = [*nodes, *queues, *others]
        # PodGroups, with the phases we decided until the object changes (our status write lands)
        pg_objects, pg_view, keep_phases = with_decided_phases(podgroups, assumed.pg_phases)
        objects.extend(pg_objects)
        # Pods: parse only new or changed versions (a bind or a status update reuses the parse)
        templates, pod_uids, pod_objects, parsed, rebased, excluded = self._pod_templates(pods, now)
        objects.extend(pod_objects)
        cluster, incremental = self._model(
            objects, now, _overlaid_factory(templates, assumed), nodes=nodes, others=others, queues=queues,
            pgs=pg_objects, pods=pod_objects, uids=pod_uids, overlay=assumed.overlay(),
        )
        self.decisions.settle(assumed, templates, keep_phases)
        stats = SnapshotStats(
            seconds=time.perf_counter() - t0,
            pods=len(templates),
            nodes=len(cluster.node_list),
            parsed=parsed,
            excluded=excluded,
            assumed_binds=len(assumed.binds),
            assumed_evictions=len(assumed.evictions),
            rebased=rebased,
            incremental=incremental,
        )
        queue_view = {str(_md(q).get("name") or ""): q for q in queues}
        return LiveSnapshot(cluster, pg_view, queue_view, stats, tuple(cluster.warnings))

    def _sorted_nodes(self) -> list[JSON]:
        """The Node store's objects by name (the last order again while the store holds the same objects)."""
        raw_nodes = self.watch.store("nodes")
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




def _overlaid_factory(
    templates: Mapping[str, tuple[str, TaskInfo]], assumed: Assumed
) -> Callable[[Mapping[str, Any], float, list[str]], TaskInfo]:
    """The build's task factory: a copy of the pod's parsed template, the assumed bind or eviction overlaid."""

    def task_factory(pod: Mapping[str, Any], _now: float, _problems: list[str]) -> TaskInfo:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        return overlay_task(clone_task(templates[uid][1]), uid, assumed)

    return task_factory
