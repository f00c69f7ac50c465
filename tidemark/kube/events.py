"""An asynchronous, aggregating, rate-limited recorder of core/v1 Events on Nodes and Pods.

Why core/v1 and not events.k8s.io/v1: core/v1 Events work on every server from 1.20 on and are
what `kubectl describe` shows for both kinds. Why asynchronous: a control loop calls `event()`
and goes on; a queue and one worker thread do the writing, so a slow or absent API server never
delays an eviction decision. Why aggregated: a condition that persists (a node over its
watermark) would otherwise write one Event per cycle; as client-go does, the same (object, type,
reason, message) seen again within `aggregation_window` seconds of its last occurrence bumps
`count` and `lastTimestamp` of the existing Event with a PATCH. Occurrences that pile up while the
worker is busy are coalesced into one write. Rate limits: a token bucket per object and reason
(client-go's spam filter, burst 25, one more every 5 minutes, keys by object only; keyed so here
because a routine reason, such as the agent's CapacityPublished on its Node every few seconds, would
otherwise use up the object's budget in a minute and silence the rare ones that matter, such as
EvictingStarted) and a global one for the recorder. Why `yield_to`: Events are what people read, a
component's own writes (the scheduler's binds) are what the cluster runs on; both go to the same API
server, and on a busy control plane an Event written in the middle of a bind burst costs the burst
as much as a bind. With `yield_to` the worker first waits for the component's urgent writes to end,
at most `max_yield` seconds per busy spell, then writes as usual (rate-limited).
`event()` never raises: bad input and API failures are logged and counted.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from tidemark.kube.client import JSON, ApiStatusError, KubeError, TokenBucket, request, request_json
from tidemark.kube.resources import EVENTS

log = logging.getLogger(__name__)

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
DEFAULT_AGGREGATION_WINDOW: Final = 600.0


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The involvedObject of an Event; namespace '' for cluster-scoped objects (Nodes)."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def of(cls, obj: Mapping[str, Any], kind: str | None = None) -> ObjectRef:
        """From an object dict; `kind` is needed when the dict lacks it. Raises ValueError on junk."""
        md = obj.get("metadata")
        if not isinstance(md, Mapping) or not md.get("name"):
            raise ValueError("object has no metadata.name")
        k = kind or obj.get("kind")
        if not k:
            raise ValueError(f"object {md.get('name')!r} has no kind")
        return cls(
            kind=str(k),
            name=str(md["name"]),
            namespace=str(md.get("namespace") or ""),
            uid=str(md.get("uid") or ""),
            api_version=str(obj.get("apiVersion") or "v1"),
        )

    def to_json(self) -> JSON:
        ref: JSON = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


@dataclass(frozen=True, slots=True)
class AggregationKey:
    """What makes two occurrences the same Event."""

    ref: ObjectRef
    type: str
    reason: str
    message: str


def event_namespace(ref: ObjectRef) -> str:
    """Events of cluster-scoped objects live in `default`, as client-go puts them."""
    return ref.namespace or "default"


def event_name(ref: ObjectRef, now_ns: int) -> str:
    """client-go's `<object name>.<unix nanoseconds in hex>`."""
    return f"{ref.name}.{now_ns:x}"


def should_aggregate(last_seen: float | None, now: float, window: float) -> bool:
    """Bump the existing Event iff it was last written no more than `window` seconds ago."""
    return last_seen is not None and 0.0 <= now - last_seen <= window


def format_time(t: datetime) -> str:
    """metav1.Time: RFC 3339, seconds, UTC."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class _Pending:
    key: AggregationKey
    count: int
    first: datetime
    last: datetime


@dataclass(slots=True)
class _Written:
    name: str
    namespace: str
    count: int
    last_seen: float


class EventRecorder:
    """Write Events from any thread without blocking; see the module docstring for the policy.

    `clock` is monotonic (aggregation window, rate limits); `wall_clock` gives the timestamps
    written. The worker starts on the first event (or `start()`); `flush()` waits until
    everything queued was written, `stop()` flushes briefly then ends the worker.
    """

    def __init__(
        self,
        api_client: Any,
        component: str,
        *,
        host: str | None = None,
        aggregation_window: float = DEFAULT_AGGREGATION_WINDOW,
        qps: float = 10.0,
        burst: int = 50,
        per_object_burst: int = 25,
        per_object_refill_seconds: float = 300.0,
        max_pending: int = 1000,
        cache_size: int = 4096,
        retries: int = 3,
        request_timeout: tuple[float, float] = (5.0, 10.0),
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] | None = None,
        yield_to: Callable[[float], bool] | None = None,
        max_yield: float = 5.0,
    ) -> None:
        self.api_client = api_client
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self.aggregation_window = aggregation_window
        self.max_pending = max_pending
        self.cache_size = cache_size
        self.retries = max(1, retries)
        self.request_timeout = request_timeout
        self._clock = clock
        self._wall = wall_clock or (lambda: datetime.now(UTC))
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._queue: deque[AggregationKey] = deque()
        self._pending: dict[AggregationKey, _Pending] = {}
        self._busy = False
        self._written: OrderedDict[AggregationKey, _Written] = OrderedDict()
        self._spam: OrderedDict[tuple[ObjectRef, str, str], TokenBucket] = OrderedDict()
        self._per_object_burst = per_object_burst
        self._per_object_qps = 1.0 / per_object_refill_seconds if per_object_refill_seconds > 0 else 0.0
        self._limiter = TokenBucket(qps, burst, clock=clock, sleep=self._sleep)
        #: waits up to the given seconds for the component's urgent writes to end; True when they have
        self._yield_to = yield_to
        self._max_yield = max_yield
        #: end of the current busy spell's yield (None: not yielding)
        self._yield_until: float | None = None
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        #: counters: Events created, Events bumped, occurrences dropped (queue full, spam, stopped), writes failed
        self.created = 0
        self.patched = 0
        self.dropped = 0
        self.failed = 0

    # --- the caller's side ---------------------------------------------------------------------

    def event(self, obj: Mapping[str, Any] | ObjectRef, type_: str, reason: str, message: str) -> None:
        """Record an occurrence (Normal or Warning); returns at once, never raises."""
        try:
            ref = obj if isinstance(obj, ObjectRef) else ObjectRef.of(obj)
            key = AggregationKey(ref, str(type_), str(reason), str(message)[:1024])
            now = self._wall()
        except Exception as exc:  # never raise into a control loop
            log.warning("event %s dropped: %s", reason, exc)
            self.dropped += 1
            return
        with self._cond:
            if self._stop.is_set():
                self.dropped += 1
                return
            pending = self._pending.get(key)
            if pending is not None:
                pending.count += 1
                pending.last = now
                return
            if len(self._pending) >= self.max_pending:
                self.dropped += 1
                log.debug("event queue full; dropped %s %s on %s", type_, reason, ref.name)
                return
            self._pending[key] = _Pending(key, 1, now, now)
            self._queue.append(key)
            self._cond.notify_all()
        self.start()

    def normal(self, obj: Mapping[str, Any] | ObjectRef, reason: str, message: str) -> None:
        self.event(obj, NORMAL, reason, message)

    def warning(self, obj: Mapping[str, Any] | ObjectRef, reason: str, message: str) -> None:
        self.event(obj, WARNING, reason, message)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> EventRecorder:
        with self._thread_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name=f"events {self.component}", daemon=True)
                self._thread.start()
        return self

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is queued or being written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def stop(self, timeout: float = 2.0) -> None:
        """Give queued events up to `timeout` seconds, then end the worker (the rest is dropped)."""
        self.flush(timeout)
        with self._cond:
            self._stop.set()
            self.dropped += sum(p.count for p in self._pending.values())
            self._pending.clear()
            self._queue.clear()
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # --- the worker ----------------------------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                self._busy = True
            try:
                self._yield()  # while we wait, more occurrences coalesce into the pending entries
                self._limiter.take()
                with self._cond:
                    key = self._queue.popleft() if self._queue else None
                    item = self._pending.pop(key, None) if key is not None else None
                if item is not None and not self._stop.is_set():
                    self._write(item)
            except Exception:  # the worker must survive anything
                log.exception("event worker")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _yield(self) -> None:
        """Wait for the component's urgent writes to end, at most `max_yield` seconds per busy spell:
        past that, Events go out beside them (rate-limited) until a check finds the writes ended."""
        if self._yield_to is None:
            return
        now = self._clock()
        if self._yield_until is None:
            self._yield_until = now + self._max_yield
        if self._yield_to(max(0.0, self._yield_until - now)):
            self._yield_until = None

    def _spam_allows(self, ref: ObjectRef, type_: str, reason: str) -> bool:
        spam_key = (ref, type_, reason)
        bucket = self._spam.get(spam_key)
        if bucket is None:
            bucket = TokenBucket(self._per_object_qps, self._per_object_burst, clock=self._clock)
            self._spam[spam_key] = bucket
            if len(self._spam) > self.cache_size:
                self._spam.popitem(last=False)
        else:
            self._spam.move_to_end(spam_key)
        return bucket.try_take()

    def _write(self, item: _Pending) -> None:
        key = item.key
        if self._per_object_qps > 0 and not self._spam_allows(key.ref, key.type, key.reason):
            self.dropped += item.count
            log.debug("event spam filter: dropped %s on %s/%s", key.reason, key.ref.kind, key.ref.name)
            return
        for attempt in range(self.retries):
            try:
                self._write_once(item)
                return
            except ApiStatusError as exc:
                if 400 <= exc.status < 500 and exc.status not in (409, 429):
                    self.failed += 1
                    log.warning("event %s on %s/%s refused: %s", key.reason, key.ref.kind, key.ref.name, exc)
                    return
                error: Exception = exc
            except KubeError as exc:
                error = exc
            if attempt + 1 < self.retries and self._stop.wait(0.5 * (attempt + 1)):
                break
        self.failed += 1
        log.warning("event %s on %s/%s not written: %s", key.reason, key.ref.kind, key.ref.name, error)

    def _write_once(self, item: _Pending) -> None:
        key = item.key
        now = self._clock()
        seen = self._written.get(key)
        if seen is not None and should_aggregate(seen.last_seen, now, self.aggregation_window):
            count = seen.count + item.count
            patch = {"count": count, "lastTimestamp": format_time(item.last)}
            try:
                request(
                    self.api_client,
                    "PATCH",
                    EVENTS.object_path(seen.name, seen.namespace),
                    body=patch,
                    content_type="application/merge-patch+json",
                    timeout=self.request_timeout,
                )
            except ApiStatusError as exc:
                if exc.status != 404:
                    raise
                # The Event expired (TTL) or was deleted: start a new one below.
                self._written.pop(key, None)
            else:
                seen.count = count
                seen.last_seen = now
                self._written.move_to_end(key)
                self.patched += 1
                return
        self._create(item, now)

    def _create(self, item: _Pending, now: float) -> None:
        key = item.key
        ns = event_namespace(key.ref)
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "", "namespace": ns},
            "involvedObject": key.ref.to_json(),
            "reason": key.reason,
            "message": key.message,
            "type": key.type,
            "count": item.count,
            "firstTimestamp": format_time(item.first),
            "lastTimestamp": format_time(item.last),
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        for attempt in range(2):
            body["metadata"]["name"] = event_name(key.ref, time.time_ns() + attempt)
            try:
                created = request_json(
                    self.api_client, "POST", EVENTS.collection_path(ns), body=body, timeout=self.request_timeout
                )
            except ApiStatusError as exc:
                if exc.status == 409 and attempt == 0:
                    continue  # name collision: one more try with another suffix
                raise
            name = str((created.get("metadata") or {}).get("name") or body["metadata"]["name"])
            self._written[key] = _Written(name, ns, item.count, now)
            self._written.move_to_end(key)
            if len(self._written) > self.cache_size:
                self._written.popitem(last=False)
            self.created += 1
            return
