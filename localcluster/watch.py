"""What the live view knows about the cluster: watches (reflectors) of Nodes, Pods and Events.

Reads are thread-safe snapshots of the reflectors' stores; every Event is also appended to the run
directory's `events.log` and handed to the listeners (the view prints them without a terminal).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tidemark.kube.reflector import Reflector
from tidemark.kube.resources import EVENTS, NODES, PODS

JSON = dict[str, Any]
MAX_EVENTS: Final = 200


def _md(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    md = (obj or {}).get("metadata")
    return md if isinstance(md, Mapping) else {}


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
    namespace: str = ""  # the involved object's ("" for a Node)


class ClusterWatch:
    """Reflectors over Nodes, Pods and Events; thread-safe reads."""

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
        self.events: deque[EventLine] = deque(maxlen=MAX_EVENTS)
        self._event_listeners: list[Callable[[EventLine], None]] = []
        self.nodes = Reflector.for_resource(api, NODES, timeout_seconds=300)
        self.pods = Reflector.for_resource(api, PODS, timeout_seconds=300)
        self.event_watch = Reflector.for_resource(api, EVENTS, on_change=self._event_changed, timeout_seconds=300)

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

    def pods_in(self, namespace: str) -> list[JSON]:
        return sorted(
            (p for p in self.pods.store.list() if _md(p).get("namespace") == namespace),
            key=lambda p: (str(_md(p).get("creationTimestamp")), str(_md(p).get("name"))),
        )

    def recent_events(self, n: int = 8) -> list[EventLine]:
        with self._lock:
            return list(self.events)[-n:]

    # --- callbacks (reflector threads) ----------------------------------------------------------

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
            namespace=str(inv.get("namespace") or ""),
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
