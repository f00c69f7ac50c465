"""Touch tracking for a session model reused across sessions (the live cache's incremental snapshot).

The live cache keeps the model one session ran on and hands the unchanged part of it to the next
session instead of building it again. That is only right for objects the earlier session did not
change, so every change of a reused object is recorded here, without relying on call sites:

- A reused TaskInfo, JobInfo, PodGroup or NodeInfo is *frozen*: its class is swapped for a subclass
  (same slots) whose `__setattr__` and mutating methods (`add_task_info`, `update_task_status`,
  `add_task`, ...) first record the object as *touched* and swap the class back, so later writes in
  the session run at full speed. Writing a value equal to the current one (an immutable scalar) is
  not a change.
- Its containers (a job's `tasks` and status index, a node's `tasks`, `taints`, the kube view's
  pods, ...) are TouchDict/TouchList: their first change records the owner.
- *Scratch* attributes are per-session by design and empty after a build (a task's plugin `cache`,
  a job's fit errors, a PodGroup's `conditions` and `events`): they stay plain containers, and the
  next snapshot gives every reused object whose scratch is not empty fresh ones (`scratched`: a scan
  of pointers, no tracking needed, nothing to miss).
- Resources held by frozen objects are frozen too (their scalar map read-only: a direct item write
  raises TypeError; nothing writes one, Resource methods are the way). A job's own methods change its
  `allocated` and `total_request` (touching the job unfreezes them first); any other change of a
  frozen Resource (a method, a field) is recorded as an unattributed change (`Tracker.unknown`): the
  next snapshot is built from scratch.

Simulate never freezes anything: its classes, containers and speed are untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Final, SupportsIndex

from scheduler_ext.api.job import JobInfo, PodGroup
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.resource import Resource
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import TaskStatus

#: immutable value types: writing an equal value is not a change
_PLAIN: Final = frozenset({str, int, float, bool, type(None), TaskStatus, tuple, frozenset})
_MISSING: Final = object()

#: per class: attributes that are per-session scratch (reset, not rebuilt, when not empty at the next snapshot)
SCRATCH: Final[dict[type, frozenset[str]]] = {
    TaskInfo: frozenset({"cache"}),
    JobInfo: frozenset({"nodes_fit_errors", "job_fit_errors"}),
    PodGroup: frozenset({"conditions", "events"}),
    NodeInfo: frozenset(),
}
#: per class: methods that change the object (and its containers)
MUTATORS: Final[dict[type, tuple[str, ...]]] = {
    TaskInfo: ("generate_last_tx_context", "clear_last_tx_context"),
    JobInfo: ("add_task_info", "delete_task_info", "update_task_status", "reset_fit_err"),
    PodGroup: (),
    NodeInfo: ("add_task", "remove_task", "update_task"),
}
_RESOURCE_MUTATORS: Final = ("add", "sub", "sub_without_assert", "_sub", "multi", "set_max_resource", "fit_delta",
                             "add_scalar", "set_scalar", "min_dimension_resource")


_CACHE: Final = attrgetter("cache")
_NODES_FIT_ERRORS: Final = attrgetter("nodes_fit_errors")
_JOB_FIT_ERRORS: Final = attrgetter("job_fit_errors")
_CONDITIONS: Final = attrgetter("pod_group.conditions")
_EVENTS: Final = attrgetter("pod_group.events")


def _thaw(r: Any) -> None:
    """A frozen Resource back to a plain one (its scalar map writable again)."""
    object.__setattr__(r, "__class__", Resource)
    sr = r.scalar_resources
    if sr is not None and type(sr) is not dict:
        object.__setattr__(r, "scalar_resources", dict(sr))


class _Touching:
    """What TouchDict and TouchList share: the record of their owner at their first change."""

    __slots__ = ()
    _tracker: Tracker | None
    _owner: object

    def _hit(self) -> None:
        # the first change records the owner; it stays recorded until the next snapshot, which rebuilds
        # it: later changes need no record
        tracker = self._tracker
        if tracker is not None:
            self._tracker = None  # type: ignore[misc]  # the slot is the subclass's (dict/list lay-out)
            tracker.note(self._owner)


class TouchDict(_Touching, dict[Any, Any]):
    """A dict that records its owner as touched at its first change."""

    __slots__ = ("_owner", "_tracker")

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._tracker is not None:
            self._hit()
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        if self._tracker is not None:
            self._hit()
        dict.__delitem__(self, key)

    def pop(self, *args: Any) -> Any:
        if self._tracker is not None:
            self._hit()
        return dict.pop(self, *args)

    def popitem(self) -> tuple[Any, Any]:
        self._hit()
        return super().popitem()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._hit()
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._hit()
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self._hit()
        super().clear()

    def __ior__(self, other: Any) -> TouchDict:  # type: ignore[override,misc]
        self._hit()
        super().update(other)
        return self


class TouchList(_Touching, list[Any]):
    """A list that records its owner as touched at its first change."""

    __slots__ = ("_owner", "_tracker")

    def append(self, value: Any) -> None:
        self._hit()
        super().append(value)

    def extend(self, values: Iterable[Any]) -> None:
        self._hit()
        super().extend(values)

    def insert(self, index: SupportsIndex, value: Any) -> None:
        self._hit()
        super().insert(index, value)

    def pop(self, index: SupportsIndex = -1) -> Any:
        self._hit()
        return super().pop(index)

    def remove(self, value: Any) -> None:
        self._hit()
        super().remove(value)

    def clear(self) -> None:
        self._hit()
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._hit()
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self._hit()
        super().reverse()

    def __setitem__(self, index: Any, value: Any) -> None:
        self._hit()
        super().__setitem__(index, value)

    def __delitem__(self, index: Any) -> None:
        self._hit()
        super().__delitem__(index)

    def __iadd__(self, values: Iterable[Any]) -> TouchList:  # type: ignore[override,misc]
        self._hit()
        super().extend(values)
        return self

    def __imul__(self, n: SupportsIndex) -> TouchList:  # type: ignore[override,misc]
        self._hit()
        return super().__imul__(n)  # type: ignore[return-value]


class Tracker:
    """One live cache's record of what its sessions changed in the reused model (see the module doc)."""

    def __init__(self) -> None:
        #: id -> object, for objects a session changed (rebuilt at the next snapshot)
        self.touched: dict[int, Any] = {}
        #: changes that cannot be attributed to one object (the next snapshot is built from scratch)
        self.unknown: list[str] = []
        self.frozen: dict[type, type] = {base: self._frozen_class(base) for base in SCRATCH}
        self._bases: dict[type, type] = {v: k for k, v in self.frozen.items()}
        self.frozen_resource = self._frozen_resource_class()

    # --- recording ------------------------------------------------------------------------------
    def note(self, owner: object) -> None:
        self.touch(owner)

    def touch(self, obj: Any) -> None:
        base = self._bases.get(type(obj))
        if base is not None:
            object.__setattr__(obj, "__class__", base)
            if base is JobInfo:  # its methods change these in place
                for r in (obj.allocated, obj.total_request):
                    if type(r) is self.frozen_resource:
                        _thaw(r)
        self.touched[id(obj)] = obj

    def drain(self) -> tuple[list[Any], list[str]]:
        """What the sessions changed since the last drain: (touched, unknown)."""
        out = (list(self.touched.values()), self.unknown)
        self.touched = {}
        self.unknown = []
        return out

    def is_frozen(self, obj: object) -> bool:
        return type(obj) in self._bases

    # --- freezing ---------------------------------------------------------------------------------
    def freeze_resource(self, r: Resource | None) -> None:
        """A read-only scalar map (a direct item write raises TypeError: use the Resource's methods)."""
        if r is None or type(r) is not Resource:
            return
        object.__setattr__(r, "__class__", self.frozen_resource)
        if r.scalar_resources is not None:
            object.__setattr__(r, "scalar_resources", MappingProxyType(r.scalar_resources))

    def freeze_task(self, t: TaskInfo) -> None:
        frozen = self.frozen_resource
        for r in (t.resreq, t.init_resreq):  # (freeze_resource, inlined: two per task)
            if type(r) is Resource:
                object.__setattr__(r, "__class__", frozen)
                if r.scalar_resources is not None:
                    object.__setattr__(r, "scalar_resources", MappingProxyType(r.scalar_resources))
        object.__setattr__(t, "__class__", self.frozen[TaskInfo])

    def freeze_pod_group(self, pg: PodGroup) -> None:
        d = TouchDict(pg.min_task_member)
        d._tracker, d._owner = self, pg
        pg.min_task_member = d
        self.freeze_resource(pg.min_resources)
        object.__setattr__(pg, "__class__", self.frozen[PodGroup])

    def freeze_job(self, job: JobInfo) -> None:
        # (TouchDicts made inline: a snapshot from scratch freezes every job)
        tasks = TouchDict(job.tasks)
        tasks._tracker, tasks._owner = self, job
        job.tasks = tasks
        index = TouchDict()
        for status, ix in job.task_status_index.items():
            d = TouchDict(ix)
            d._tracker, d._owner = self, job
            dict.__setitem__(index, status, d)
        index._tracker, index._owner = self, job
        job.task_status_index = index
        mins = TouchDict(job.task_min_available)
        mins._tracker, mins._owner = self, job
        job.task_min_available = mins
        frozen = self.frozen_resource
        for r in (job.allocated, job.total_request):
            if type(r) is Resource:
                object.__setattr__(r, "__class__", frozen)
                if r.scalar_resources is not None:
                    object.__setattr__(r, "scalar_resources", MappingProxyType(r.scalar_resources))
        object.__setattr__(job, "__class__", self.frozen[JobInfo])

    def freeze_node(self, node: NodeInfo) -> None:
        tasks = TouchDict(node.tasks)
        tasks._tracker, tasks._owner = self, node
        node.tasks = tasks
        accounted = TouchDict(node._accounted)
        accounted._tracker, accounted._owner = self, node
        node._accounted = accounted
        taints = TouchList(node.taints)
        taints._tracker, taints._owner = self, node
        node.taints = taints
        self.freeze_resource(node.oversubscription_resource)
        t = node.table
        kube = TouchDict(t.kube_pods[node.index])
        kube._tracker, kube._owner = self, node
        t.kube_pods[node.index] = kube
        object.__setattr__(node, "__class__", self.frozen[NodeInfo])

    @staticmethod
    def scratched(tasks: Iterable[TaskInfo], jobs: Iterable[JobInfo]) -> tuple[list[TaskInfo], list[JobInfo]]:
        """The tasks and jobs (with their PodGroups) whose scratch state is not what a build leaves."""
        tasks, jobs = list(tasks), list(jobs)
        # (compress with the containers themselves as selectors: a scan at C speed, non-empty is selected)
        dirty: dict[int, JobInfo] = {}
        for getter in (_NODES_FIT_ERRORS, _JOB_FIT_ERRORS, _CONDITIONS, _EVENTS):
            for j in compress(jobs, map(getter, jobs)):
                dirty[id(j)] = j
        return list(compress(tasks, map(_CACHE, tasks))), list(dirty.values())

    @staticmethod
    def reset_scratch(obj: TaskInfo | JobInfo) -> None:
        """Fresh scratch attributes, as a build leaves them (the object stays frozen)."""
        if isinstance(obj, TaskInfo):
            object.__setattr__(obj, "cache", {})
        else:
            object.__setattr__(obj, "nodes_fit_errors", {})
            object.__setattr__(obj, "job_fit_errors", "")
            object.__setattr__(obj.pod_group, "conditions", [])
            object.__setattr__(obj.pod_group, "events", [])

    # --- the frozen classes -------------------------------------------------------------------------
    def _frozen_class(self, base: type) -> type:
        tracker = self
        scratch = SCRATCH[base]

        def __setattr__(obj: Any, name: str, value: Any) -> None:
            if name not in scratch:  # (scratch: what the next snapshot finds not empty is reset)
                old = getattr(obj, name, _MISSING)
                if old is value or (type(old) in _PLAIN and type(value) is type(old) and old == value):
                    return
                tracker.touch(obj)
            object.__setattr__(obj, name, value)

        def mutator(name: str) -> Callable[..., Any]:
            method = getattr(base, name)

            def touched_first(obj: Any, *args: Any, **kwargs: Any) -> Any:
                tracker.touch(obj)
                return method(obj, *args, **kwargs)

            touched_first.__name__ = name
            return touched_first

        ns: dict[str, Any] = {"__slots__": (), "__setattr__": __setattr__, "__module__": base.__module__}
        for name in MUTATORS[base]:
            ns[name] = mutator(name)
        return type(f"Frozen{base.__name__}", (base,), ns)

    def _frozen_resource_class(self) -> type:
        tracker = self

        def __setattr__(obj: Any, name: str, value: Any) -> None:
            tracker.unknown.append(f"a frozen Resource's {name} was set")
            _thaw(obj)
            object.__setattr__(obj, name, value)

        def mutator(name: str) -> Callable[..., Any]:
            method = getattr(Resource, name)

            def noted(obj: Any, *args: Any, **kwargs: Any) -> Any:
                tracker.unknown.append(f"a frozen Resource changed ({name})")
                _thaw(obj)
                return method(obj, *args, **kwargs)

            noted.__name__ = name
            return noted

        ns: dict[str, Any] = {"__slots__": (), "__setattr__": __setattr__, "__module__": Resource.__module__}
        for name in _RESOURCE_MUTATORS:
            ns[name] = mutator(name)
        return type("FrozenResource", (Resource,), ns)
