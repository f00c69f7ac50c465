"""What the scenario and the live view know about the cluster: watches of Nodes, Pods and Events, with timings.

Every transition that the scenario measures is stamped (monotonic time) when the watch delivers it:
a pod bound (`spec.nodeName` set), Running, given a deletionTimestamp, deleted; the node's evicting
annotation set or cleared. Watch latency on loopback is a few milliseconds, but Nodes and Pods come
on two streams, so their relative order is only exact by resourceVersion (etcd's global revision
on this server), which is recorded too for a pod's binding and the node's evicting transitions.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tidemark.apis import ANN_NODE_USAGE, node_is_evicting, parse_qos_level
from tidemark.kube.reflector import Reflector
from tidemark.kube.resources import EVENTS, NODES, PODS

JSON = dict[str, Any]
MAX_EVENTS: Final = 200


def _md(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    md = (obj or {}).get("metadata")
    return md if isinstance(md, Mapping) else {}


@dataclass
class PodTimes:
    """Monotonic times at which the watch first saw each transition of one pod (by UID)."""

    key: str
    created: float
    bound: float | None = None
    bound_rv: int | None = None
    node: str = ""
    running: float | None = None
    terminating: float | None = None
    terminating_rv: int | None = None
    deleted: float | None = None
    failed_reason: str = ""
    phase: str = ""
    offline: bool = False


@dataclass
class EventLine:
    at: float
    wall: str
    type: str
    reason: str
    source: str
    object: str
    message: str
    count: int = 1


@dataclass
class NodeTimes:
    evicting_since: float | None = None
    #: (monotonic time, evicting, resourceVersion of the Node when the watch saw the change)
    evicting_transitions: list[tuple[float, bool, int | None]] = field(default_factory=list)
    batch_published: float | None = None


def _rv(obj: Mapping[str, Any]) -> int | None:
    raw = str(_md(obj).get("resourceVersion") or "")
    return int(raw) if raw.isdigit() else None


class ClusterWatch:
    """Reflectors over Nodes, Pods and Events with per-object transition times; thread-safe reads."""

    def __init__(
        self,
        api: Any,
        node_name: str,
        clock: Callable[[], float] = time.monotonic,
        events_log: Path | None = None,
    ) -> None:
        self.node_name = node_name
        self._events_log = open(events_log, "a", buffering=1) if events_log else None  # noqa: SIM115
        self.clock = clock
        self._lock = threading.Lock()
        self.pod_times: dict[str, PodTimes] = {}
        self.node_times = NodeTimes()
        self.events: deque[EventLine] = deque(maxlen=MAX_EVENTS)
        self._event_listeners: list[Callable[[EventLine], None]] = []
        self.nodes = Reflector.for_resource(api, NODES, on_change=self._node_changed, timeout_seconds=300)
        self.pods = Reflector.for_resource(api, PODS, on_change=self._pod_changed, timeout_seconds=300)
        self.event_watch = Reflector.for_resource(api, EVENTS, on_change=self._event_changed, timeout_seconds=300)
        self._evicting = False

    def start(self, timeout: float = 30.0) -> ClusterWatch:
        for r in (self.nodes, self.pods, self.event_watch):
            r.start()
        for r in (self.nodes, self.pods, self.event_watch):
            if not r.wait_for_sync(timeout):
                raise TimeoutError("the cluster watch did not sync")
        return self

    def stop(self) -> None:
        for r in (self.nodes, self.pods, self.event_watch):
            r.stop(2.0)
        if self._events_log is not None:
            self._events_log.close()
            self._events_log = None

    def on_event(self, listener: Callable[[EventLine], None]) -> None:
        self._event_listeners.append(listener)

    # --- reads ----------------------------------------------------------------------------------

    def node(self, name: str | None = None) -> JSON:
        return self.nodes.store.get(name or self.node_name) or {}

    def node_list(self) -> list[JSON]:
        return sorted(self.nodes.store.list(), key=lambda n: str(_md(n).get("name")))

    def pods_in(self, namespace: str) -> list[JSON]:
        return sorted(
            (p for p in self.pods.store.list() if _md(p).get("namespace") == namespace),
            key=lambda p: (str(_md(p).get("creationTimestamp")), str(_md(p).get("name"))),
        )

    def pod(self, namespace: str, name: str) -> JSON | None:
        return self.pods.store.get(f"{namespace}/{name}")

    def times(self, uid: str) -> PodTimes | None:
        with self._lock:
            return self.pod_times.get(uid)

    def last_mark_rv(self) -> int | None:
        """The Node's resourceVersion when it was last seen marked evicting."""
        with self._lock:
            marked = [rv for _, evicting, rv in self.node_times.evicting_transitions if evicting]
        return marked[-1] if marked else None

    def last_clear_rv(self) -> int | None:
        """The Node's resourceVersion when its evicting mark was last seen cleared."""
        with self._lock:
            cleared = [rv for _, evicting, rv in self.node_times.evicting_transitions if not evicting]
        return cleared[-1] if cleared else None

    def evicting(self) -> bool:
        return node_is_evicting(self.node())

    def node_usage(self) -> dict[str, Any]:
        raw = (_md(self.node()).get("annotations") or {}).get(ANN_NODE_USAGE)
        try:
            value = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def recent_events(self, n: int = 8) -> list[EventLine]:
        with self._lock:
            return list(self.events)[-n:]

    # --- callbacks (reflector threads) ----------------------------------------------------------

    def _node_changed(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        if _md(new or old).get("name") != self.node_name or new is None:
            return
        now = self.clock()
        evicting = node_is_evicting(new)
        alloc = (new.get("status") or {}).get("allocatable") or {}
        with self._lock:
            if evicting != self._evicting:
                self._evicting = evicting
                self.node_times.evicting_transitions.append((now, evicting, _rv(new)))
                self.node_times.evicting_since = now if evicting else None
            if self.node_times.batch_published is None and str(alloc.get("kubernetes.io/batch-cpu", "0")) not in (
                "0",
                "",
            ):
                self.node_times.batch_published = now

    def _pod_changed(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        now = self.clock()
        obj = new or old or {}
        md = _md(obj)
        uid = str(md.get("uid") or "")
        if not uid:
            return
        with self._lock:
            t = self.pod_times.get(uid)
            if t is None:
                t = PodTimes(
                    key=f"{md.get('namespace')}/{md.get('name')}",
                    created=now,
                    offline=parse_qos_level(md.get("annotations") or {}).offline,
                )
                self.pod_times[uid] = t
            if new is None:
                t.deleted = t.deleted or now
                return
            node = str((new.get("spec") or {}).get("nodeName") or "")
            if node and t.bound is None:
                t.bound, t.node, t.bound_rv = now, node, _rv(new)
            status = new.get("status") or {}
            t.phase = str(status.get("phase") or "")
            if t.phase == "Running" and t.running is None:
                t.running = now
            if t.phase == "Failed" and status.get("reason"):
                t.failed_reason = str(status.get("reason"))
            if _md(new).get("deletionTimestamp") and t.terminating is None:
                t.terminating, t.terminating_rv = now, _rv(new)

    def _event_changed(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        if new is None:
            return
        count = int(new.get("count") or 1)
        if old is not None and int(old.get("count") or 1) == count:
            return
        inv = new.get("involvedObject") or {}
        source = (new.get("source") or {}).get("component") or new.get("reportingComponent") or ""
        obj = f"{inv.get('kind', '?')}/{inv.get('name', '?')}"
        line = EventLine(
            at=self.clock(),
            wall=str(new.get("lastTimestamp") or new.get("eventTime") or "")[11:19],
            type=str(new.get("type") or ""),
            reason=str(new.get("reason") or ""),
            source=str(source),
            object=obj,
            message=str(new.get("message") or "").replace("\n", " "),
            count=count,
        )
        with self._lock:
            self.events.append(line)
            if self._events_log is not None:
                self._events_log.write(
                    f"{new.get('lastTimestamp') or new.get('eventTime') or ''} {line.type} {line.reason} {line.object} "
                    f"[{line.source}] x{line.count}: {line.message}\n"
                )
        for listener in list(self._event_listeners):
            listener(line)
