"""List+watch of one resource kind into a thread-safe store of plain dicts (client-go's Reflector).

Why our own: the official client's `watch.Watch` builds model objects (slow) and leaves resume,
410 handling, backoff and bookmarks to the caller. This module does all of it, in a daemon thread:

- list (paginated, a consistent read) -> replace the store -> watch from the list's
  resourceVersion with `allowWatchBookmarks` and a server-side `timeoutSeconds`;
- a watch that ends (timeout, dropped connection) resumes from the last resourceVersion seen
  (an event's or a bookmark's), so nothing is missed and nothing is relisted;
- `410 Gone` (an HTTP 410 or an ERROR event with code 410: the resourceVersion was compacted away)
  -> relist at once; the relist is diffed against the store so consumers see ordinary
  ADDED/MODIFIED/DELETED changes;
- any other failure (API outage, 5xx, 403, a broken stream) -> exponential backoff with jitter and
  retry, forever: an API outage never kills the loop;
- a per-change callback `(event_type, old, new)` lets consumers keep per-cycle work proportional to
  what changed; `has_synced()` and `last_contact()` feed /readyz.

The transport is a `ListerWatcher`, so the state machine is unit-tested with a scripted fake and
integration-tested against a real apiserver with `ApiListerWatcher`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import urllib3

from tidemark.kube.client import (
    DEFAULT_TIMEOUT,
    JSON,
    ApiStatusError,
    KubeError,
    TransportError,
    open_request,
    request_json,
    status_message,
)
from tidemark.kube.resources import ResourceKind

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
#: callback(event_type, old, new): ADDED (None, new); MODIFIED (old, new); DELETED (last known state, None)
ChangeHandler = Callable[[str, JSON | None, JSON | None], None]
Change = tuple[str, JSON | None, JSON | None]
# Aliases: inside Store, `list` names the method.
_Objects = list[JSON]
_Keys = list[str]
_Pairs = list[tuple[str, JSON]]
_Changes = list[Change]


def object_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKeyFunc)."""
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    name = str(md.get("name", ""))
    return f"{ns}/{name}" if ns else name


def _rv(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return str(md.get("resourceVersion") or "")


# --- store -----------------------------------------------------------------------------------


class Store:
    """Objects keyed by `object_key`, safe to read from any thread.

    Returned dicts are the stored objects themselves (no copies, for speed): treat them as
    read-only. `generation` increases with every change, so a consumer can skip a cycle cheaply
    when nothing moved.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, JSON] = {}
        self._generation = 0

    def get(self, key: str) -> JSON | None:
        with self._lock:
            return self._items.get(key)

    def get_object(self, name: str, namespace: str | None = None) -> JSON | None:
        return self.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> _Objects:
        with self._lock:
            return list(self._items.values())

    def keys(self) -> _Keys:
        with self._lock:
            return list(self._items)

    def items(self) -> _Pairs:
        with self._lock:
            return list(self._items.items())

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    # Writers (the reflector thread only).
    def put(self, obj: JSON) -> JSON | None:
        """Insert or replace; returns the previous object."""
        key = object_key(obj)
        with self._lock:
            old = self._items.get(key)
            self._items[key] = obj
            self._generation += 1
            return old

    def delete(self, obj: Mapping[str, Any]) -> JSON | None:
        """Remove; returns the stored object (None if it was not there)."""
        with self._lock:
            old = self._items.pop(object_key(obj), None)
            self._generation += 1
            return old

    def replace(self, objects: _Objects) -> _Changes:
        """Swap in a full list; return the changes as (event_type, old, new), unchanged objects omitted."""
        new_items = {object_key(o): o for o in objects}
        changes: _Changes = []
        with self._lock:
            for key, obj in new_items.items():
                old = self._items.get(key)
                if old is None:
                    changes.append((ADDED, None, obj))
                elif _rv(old) != _rv(obj) or not _rv(obj):
                    changes.append((MODIFIED, old, obj))
            for key, old in self._items.items():
                if key not in new_items:
                    changes.append((DELETED, old, None))
            self._items = new_items
            self._generation += 1
        return changes


# --- backoff ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Exponential backoff with jitter (client-go's reflector: 800 ms doubling to 30 s, plus jitter).

    delay(n) = min(cap, initial * factor**n) * (1 + jitter * r), r uniform in [0, 1): jitter
    spreads the reconnects of many agents after an apiserver restart.
    """

    initial: float = 0.8
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.5

    def delay(self, attempt: int, rand: float) -> float:
        base = min(self.cap, self.initial * self.factor ** min(attempt, 64))
        return base * (1.0 + self.jitter * rand)


class Backoff:
    """A BackoffPolicy with its attempt counter; `reset()` after a success."""

    def __init__(self, policy: BackoffPolicy | None = None, rand: Callable[[], float] = random.random) -> None:
        self.policy = policy or BackoffPolicy()
        self._rand = rand
        self.attempts = 0

    def next(self) -> float:
        delay = self.policy.delay(self.attempts, self._rand())
        self.attempts += 1
        return delay

    def reset(self) -> None:
        self.attempts = 0


# --- transport -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[JSON]
    resource_version: str


class WatchStream(Protocol):
    """Decoded watch events ({"type": ..., "object": {...}}); `close()` may be called from another thread."""

    def __iter__(self) -> Iterator[JSON]: ...

    def close(self) -> None: ...


class ListerWatcher(Protocol):
    description: str

    def list(self) -> ListResult: ...

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchStream: ...


class WatchExpired(KubeError):
    """410 Gone: the resourceVersion is older than the server keeps; relist."""


class WatchErrorEvent(KubeError):
    """An ERROR event other than 410 (the stream's state is unknown: relist after backoff)."""


def _split_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    buf = b""
    for chunk in chunks:
        if not chunk:
            continue
        buf += chunk
        if b"\n" not in chunk:
            continue
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buf.strip():
        yield buf


class HttpWatchStream:
    """One watch HTTP response, decoded line by line (the server sends one JSON event per line)."""

    def __init__(self, raw: Any, description: str) -> None:
        self._raw = raw
        self._description = description
        self._closed = False

    def _chunks(self) -> Iterator[bytes]:
        raw = self._raw
        if getattr(raw, "chunked", False) and raw.supports_chunked_reads():
            yield from raw.read_chunked(None, decode_content=True)
        else:
            while True:
                data = raw.read1(65536)
                if not data:
                    return
                yield data

    def __iter__(self) -> Iterator[JSON]:
        try:
            for line in _split_lines(self._chunks()):
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise TransportError(f"watch {self._description}: undecodable line: {line[:200]!r}") from exc
                if isinstance(event, dict):
                    yield event
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if self._closed:
                return
            raise TransportError(f"watch {self._description}: {exc}") from exc
        finally:
            self.close()

    def close(self) -> None:
        """Unblock a reader in another thread (socket shutdown) and drop the connection."""
        if self._closed:
            return
        self._closed = True
        raw = self._raw
        # shutdown() (urllib3 >= 2.3) raises once the finished response went back to the pool:
        # nothing to unblock then. Closing is best effort; the connection is discarded either way.
        with contextlib.suppress(Exception):
            raw.shutdown()
        with contextlib.suppress(Exception):
            raw.close()
            raw.release_conn()


class ApiListerWatcher:
    """List and watch one resource kind over the API, with optional namespace and selectors."""

    def __init__(
        self,
        api_client: Any,
        kind: ResourceKind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        request_timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    ) -> None:
        self.api_client = api_client
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.request_timeout = request_timeout
        parts = [str(kind)]
        if namespace:
            parts.append(f"ns={namespace}")
        if label_selector:
            parts.append(f"labels={label_selector}")
        if field_selector:
            parts.append(f"fields={field_selector}")
        self.description = " ".join(parts)

    def _selectors(self) -> dict[str, str]:
        q: dict[str, str] = {}
        if self.label_selector:
            q["labelSelector"] = self.label_selector
        if self.field_selector:
            q["fieldSelector"] = self.field_selector
        return q

    def list(self) -> ListResult:
        """A consistent (quorum) list, paginated; items get the kind/apiVersion list items lack."""
        path = self.kind.collection_path(self.namespace)
        items: list[JSON] = []
        cont = ""
        while True:
            query = self._selectors()
            if self.page_size > 0:
                query["limit"] = str(self.page_size)
            if cont:
                query["continue"] = cont
            try:
                body = request_json(self.api_client, "GET", path, query=query, timeout=self.request_timeout)
            except ApiStatusError as exc:
                if exc.status == 410:  # the continue token expired mid-list
                    raise WatchExpired(str(exc)) from exc
                raise
            for item in body.get("items") or []:
                if isinstance(item, dict):
                    item.setdefault("kind", self.kind.kind)
                    item.setdefault("apiVersion", self.kind.api_version)
                    items.append(item)
            md = body.get("metadata") or {}
            cont = str(md.get("continue") or "")
            if not cont:
                return ListResult(items, str(md.get("resourceVersion") or ""))

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchStream:
        query = self._selectors()
        query.update(
            watch="true",
            allowWatchBookmarks="true",
            timeoutSeconds=str(int(timeout_seconds)),
        )
        if resource_version:
            query["resourceVersion"] = resource_version
        # The read timeout backs up the server-side timeout: a half-dead connection must not hang forever.
        timeout = (self.request_timeout[0], float(timeout_seconds) + 30.0)
        path = self.kind.collection_path(self.namespace)
        raw = open_request(self.api_client, "GET", path, query=query, timeout=timeout)
        if raw.status != 200:
            try:
                data = raw.data
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            finally:
                raw.release_conn()
            try:
                body = json.loads(data) if data else None
            except ValueError:
                body = None
            body = body if isinstance(body, dict) else None
            message = status_message(raw.status, body, data)
            if raw.status == 410:
                raise WatchExpired(message)
            raise ApiStatusError(raw.status, message, body)
        return HttpWatchStream(raw, self.description)


# --- the reflector ---------------------------------------------------------------------------


class Reflector:
    """Keeps `store` equal to the server's view of one resource, in a daemon thread, until `stop()`.

    `wait(seconds) -> stopped` is how the loop sleeps between retries; it defaults to waiting on
    the stop event, and tests inject one that records delays instead of sleeping. `clock` is
    monotonic time for `last_contact()`.
    """

    def __init__(
        self,
        lister_watcher: ListerWatcher,
        *,
        on_change: ChangeHandler | None = None,
        on_sync: Callable[[], None] | None = None,
        timeout_seconds: int = 300,
        backoff: BackoffPolicy | None = None,
        min_watch_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        wait: Callable[[float], bool] | None = None,
        store: Store | None = None,
    ) -> None:
        if timeout_seconds < 1:
            raise ValueError("timeout_seconds must be >= 1: a watch without a timeout can hang forever")
        self.lw = lister_watcher
        self.store = store if store is not None else Store()
        self.on_change = on_change
        self.on_sync = on_sync
        self.timeout_seconds = int(timeout_seconds)
        self.min_watch_seconds = min_watch_seconds
        self._backoff = Backoff(backoff, rand)
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._synced = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        self._last_contact: float | None = None
        self._expired_in_a_row = 0
        self.resource_version = ""
        #: counters for tests and metrics
        self.lists = 0
        self.watches = 0
        self.errors = 0

    @classmethod
    def for_resource(
        cls,
        api_client: Any,
        kind: ResourceKind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        **kwargs: Any,
    ) -> Reflector:
        lw = ApiListerWatcher(
            api_client, kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )
        return cls(lw, **kwargs)

    # --- public state --------------------------------------------------------------------------

    def has_synced(self) -> bool:
        """True once the first full list is in the store and its changes were delivered to
        `on_change` / `on_sync` (stays true across relists)."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def last_contact(self) -> float | None:
        """Monotonic time of the last successful API response (list, watch opened, or event)."""
        return self._last_contact

    def stopped(self) -> bool:
        return self._stop.is_set()

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Reflector:
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name=f"reflector {self.lw.description}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop: interrupts a blocked watch read, then joins the thread."""
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        """The loop: list, then watch and resume, relisting on 410; returns only after stop()."""
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch_once()
            except WatchExpired as exc:
                log.info("%s: %s; relisting", self.lw.description, exc)
                need_list = True
                # The first 410 relists at once; more in a row without a delivered event back off.
                if self._expired_in_a_row > 0 and self._sleep(self._backoff.next()):
                    return
                self._expired_in_a_row += 1
            except WatchErrorEvent as exc:
                self.errors += 1
                need_list = True
                log.warning("%s: %s; relisting after backoff", self.lw.description, exc)
                if self._sleep(self._backoff.next()):
                    return
            except Exception as exc:  # an API outage or a bug in a reply must never kill the loop
                if self._stop.is_set():
                    return
                self.errors += 1
                delay = self._backoff.next()
                log.warning(
                    "%s: %s: %s; retrying in %.1fs",
                    self.lw.description,
                    type(exc).__name__,
                    exc,
                    delay,
                    exc_info=not isinstance(exc, KubeError),
                )
                if self._sleep(delay):
                    return

    # --- internals -----------------------------------------------------------------------------

    def _sleep(self, seconds: float) -> bool:
        return bool(self._wait(seconds)) or self._stop.is_set()

    def _contact(self) -> None:
        self._last_contact = self._clock()

    def _emit(self, event_type: str, old: JSON | None, new: JSON | None) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(event_type, old, new)
        except Exception:  # a consumer's bug must not stop the store from following the server
            log.exception("%s: change handler failed on %s", self.lw.description, event_type)

    def _list(self) -> None:
        result = self.lw.list()
        self.lists += 1
        self._contact()
        changes = self.store.replace(result.items)
        self.resource_version = result.resource_version
        if self._expired_in_a_row == 0:  # in a streak of 410s only a delivered event counts as progress
            self._backoff.reset()
        first = not self._synced.is_set()
        log.debug(
            "%s: listed %d objects at rv %s (%d changes)",
            self.lw.description,
            len(result.items),
            result.resource_version,
            len(changes),
        )
        for change in changes:
            self._emit(*change)
        if self.on_sync is not None:
            try:
                self.on_sync()
            except Exception:  # a consumer's bug must not stop the loop
                log.exception("%s: sync handler failed", self.lw.description)
        # Synced only once the first list's changes are delivered (client-go: the handlers have
        # processed the initial items): a consumer that keeps its own state from the callbacks
        # must not act on half of the list (the scheduler's first session saw 1381 of 2000 pods).
        self._synced.set()
        if first:
            log.info("%s: synced (%d objects)", self.lw.description, len(result.items))

    def _watch_once(self) -> None:
        started = self._clock()
        stream = self.lw.watch(self.resource_version, self.timeout_seconds)
        self.watches += 1
        with self._lock:
            self._stream = stream
        if self._stop.is_set():
            stream.close()
            return
        self._contact()
        events = 0
        try:
            for event in stream:
                if self._stop.is_set():
                    return
                self._contact()
                self._handle(event)
                events += 1
        finally:
            with self._lock:
                self._stream = None
            stream.close()
        if events:
            self._backoff.reset()
            self._expired_in_a_row = 0
        elif self._clock() - started < self.min_watch_seconds and not self._stop.is_set():
            # A server (or proxy) closing watches at once must not make us spin.
            self._sleep(self._backoff.next())

    def _handle(self, event: Mapping[str, Any]) -> None:
        """Apply one watch event to the store (and the callback); raises WatchExpired / WatchErrorEvent."""
        etype = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise WatchErrorEvent(f"watch event without an object: {str(event)[:200]}")
        if etype == "ERROR":
            code = obj.get("code")
            message = obj.get("message", "")
            if code == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise WatchExpired(f"watch expired: {message}")
            raise WatchErrorEvent(f"watch ERROR event {code} {obj.get('reason', '')}: {message}")
        rv = _rv(obj)
        if etype == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if etype in (ADDED, MODIFIED):
            old = self.store.put(obj)
            if rv:
                self.resource_version = rv
            self._emit(MODIFIED if old is not None else ADDED, old, obj)
        elif etype == DELETED:
            self.store.delete(obj)
            if rv:
                self.resource_version = rv
            self._emit(DELETED, obj, None)
        else:
            log.debug("%s: ignoring watch event type %r", self.lw.description, etype)
