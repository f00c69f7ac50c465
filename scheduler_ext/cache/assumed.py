"""The overlay of decisions the API has not confirmed yet: assumed binds, evictions and PodGroup phases.

They are overlaid on the snapshot, so no pod is placed twice across sessions: a pod whose bind was
issued counts as Bound on its node until the watch shows it bound (or the bind failed); a pod whose
eviction was issued counts as Releasing until the watch shows it terminating; a PodGroup phase this
scheduler decided holds until the object changes. (Volcano's cache does the same with AssumePod.)

Written by the scheduler thread (a session's plan) and the executor threads (outcomes); read by the
snapshot builder. One lock, shared with the watch's pod map (scheduler_ext/cache/watch.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import BOUND, PENDING, RELEASING, RUNNING
from scheduler_ext.cache.watch import TERMINAL, md, spec, status
from scheduler_ext.model.live_model import Overlay
from tidemark.kube.client import JSON
from tidemark.kube.reflector import object_key

#: an ambiguous bind (no answer) stays assumed at most this long without the watch confirming it
AMBIGUOUS_BIND_TTL: Final = 30.0
#: ... or until the pod watch has been in contact with the server this long after the failure
AMBIGUOUS_CONFIRM_MARGIN: Final = 1.0


@dataclass(slots=True)
class _AssumedBind:
    node: str
    #: monotonic time the outcome became unknown (no answer); None: issued or succeeded
    ambiguous_at: float | None = None


@dataclass(frozen=True, slots=True)
class Assumed:
    """What one snapshot reads of the overlay (a copy taken under the lock)."""

    #: pod uid -> node of the bind issued
    binds: dict[str, str]
    #: pod uids whose eviction was issued
    evictions: set[str]
    #: PodGroup `ns/name` -> (resourceVersion read, phase decided)
    pg_phases: dict[str, tuple[str, str]]

    def overlay(self) -> dict[str, Overlay]:
        """The incremental model's view: uid -> (assumed node or None, assumed releasing)."""
        out: dict[str, Overlay] = {u: (n, False) for u, n in self.binds.items()}
        for u in self.evictions:
            out[u] = (self.binds.get(u), True)
        return out


class AssumedDecisions:
    """Assumed binds and evictions by pod uid, decided PodGroup phases by `ns/name`."""

    def __init__(self, lock: threading.Lock | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = lock if lock is not None else threading.Lock()
        self._clock = clock
        self._binds: dict[str, _AssumedBind] = {}
        self._evictions: dict[str, float] = {}
        self._pg_phases: dict[str, tuple[str, str]] = {}

    # --- the watch (reflector thread, `lock` held) ----------------------------------------------------
    def observe(self, uid: str, pod: JSON | None) -> None:
        """The pod as the watch now caches it (None: gone): what it confirms is no longer assumed."""
        if pod is None:
            self._binds.pop(uid, None)
            self._evictions.pop(uid, None)
            return
        if spec(pod).get("nodeName"):
            self._binds.pop(uid, None)  # the watch confirms the bind
        if md(pod).get("deletionTimestamp") or status(pod).get("phase") in TERMINAL:
            self._evictions.pop(uid, None)

    # --- the scheduler and executor threads -----------------------------------------------------------
    def assume_bound(self, uid: str, node: str) -> None:
        with self.lock:
            self._binds[uid] = _AssumedBind(node)

    def bind_failed(self, uid: str) -> None:
        """The bind was refused: the pod is pending again next session."""
        with self.lock:
            self._binds.pop(uid, None)

    def bind_unknown(self, uid: str) -> None:
        """No answer: the bind may or may not have happened; keep it assumed until the watch can tell."""
        with self.lock:
            a = self._binds.get(uid)
            if a is not None:
                a.ambiguous_at = self._clock()

    def assume_evicted(self, uid: str) -> None:
        with self.lock:
            self._evictions[uid] = self._clock()

    def eviction_failed(self, uid: str) -> None:
        with self.lock:
            self._evictions.pop(uid, None)

    def clear(self) -> None:
        """Forget everything assumed (e.g. on a new term as leader: the watch caches are the truth)."""
        with self.lock:
            self._binds.clear()
            self._evictions.clear()
            self._pg_phases.clear()

    def assumed(self) -> tuple[dict[str, str], set[str]]:
        with self.lock:
            return {u: a.node for u, a in self._binds.items()}, set(self._evictions)

    def note_podgroup_phases(self, phases: Mapping[str, tuple[str, str]]) -> None:
        """PodGroup `ns/name` -> (resourceVersion read, phase decided): holds until the object changes."""
        with self.lock:
            self._pg_phases.update(phases)

    # --- the snapshot builder (scheduler thread) -------------------------------------------------------
    def expire_ambiguous(self, contact: float | None) -> None:
        """Drop ambiguous binds past their TTL or older than the pod watch's last contact (`contact`)."""
        now = self._clock()
        with self.lock:
            for uid in [
                u
                for u, a in self._binds.items()
                if a.ambiguous_at is not None
                and (
                    now - a.ambiguous_at > AMBIGUOUS_BIND_TTL
                    or (contact is not None and contact > a.ambiguous_at + AMBIGUOUS_CONFIRM_MARGIN)
                )
            ]:
                del self._binds[uid]

    def read(self) -> Assumed:
        """A copy of the overlay; the caller holds `lock` (read together with the watch's pods)."""
        return Assumed({u: a.node for u, a in self._binds.items()}, set(self._evictions), dict(self._pg_phases))

    def settle(self, read: Assumed, cached: Mapping[str, object], keep_phases: Mapping[str, tuple[str, str]]) -> None:
        """After a snapshot built from `read`: drop what can no longer hold.

        A decided phase holds only while the object is the version the session read; assumptions about
        pods no longer cached (not in `cached`: deleted before their bind was even issued) go; those
        made after the snapshot read the pods wait for the next one.
        """
        with self.lock:
            self._pg_phases = {k: v for k, v in self._pg_phases.items() if keep_phases.get(k) == v}
            for uid in [u for u in self._binds if u in read.binds and u not in cached]:
                del self._binds[uid]
            for uid in [u for u in self._evictions if u in read.evictions and u not in cached]:
                del self._evictions[uid]


def with_decided_phases(
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
        if decided is not None and decided[0] == str(md(pg).get("resourceVersion") or ""):
            keep_phases[key] = decided
            if decided[1] != status(pg).get("phase"):
                pg = {**pg, "status": {**status(pg), "phase": decided[1]}}
        pg_objects.append(pg)
    return pg_objects, pg_view, keep_phases


def overlay_task(task: TaskInfo, uid: str, read: Assumed) -> TaskInfo:
    """`task` (a session's own copy) with the assumed bind or eviction of its pod overlaid."""
    node = read.binds.get(uid)
    if node is not None and task.status == PENDING:
        task.node_name = node
        task.status = BOUND
    elif uid in read.evictions and task.status in (BOUND, RUNNING):
        task.status = RELEASING
    return task
