"""The bounded HTTP server under both programs' listeners (tidemark.serving) and the webhook.

Why by hand on selectors: every cost a client can impose has to have a bound that holds whatever the
client does, and a slot a client holds has to be one the server can take back (issue #13 round 2, issue
#33 item 1). One selector thread does every connection's I/O without blocking, under absolute deadlines;
workers get only complete requests; every phase of a connection counts in `max_connections` and every
phase but a request in a worker can be evicted, oldest first, so a flood of slow, lingering or non-reading
clients cannot keep a probe out (docs/design.md, "Serving"; the figures in docs/security.md).
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import queue
import re
import selectors
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

log = logging.getLogger("tidemark.serving")  # one logger for the listener, whichever module logs

#: defaults of the connection limits (ServingServer's keyword arguments)
DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_WORKERS = 4
DEFAULT_MAX_CONNECTIONS = 128
#: the largest request head (request line and headers) read: a probe's is about 150 bytes
DEFAULT_MAX_HEAD = 16 * 1024
#: the largest request body read (/metrics, /healthz and /readyz take none)
DEFAULT_MAX_BODY = 64 * 1024
#: what an over-sized request's body is read of, to answer it (then the rest is drained unread)
PEEK_BYTES = 4096
#: at most this much (and this long) of a refused request's remaining body is read and dropped before the
#: connection closes: closing with unread input sends a reset, which can lose the answer on the way
LINGER_BYTES = 64 * 1024 * 1024
LINGER_SECONDS = 5.0
#: liveness probes' paths: served by a worker of their own, never queued behind other requests
PROBE_PATHS = frozenset({"/healthz", "/livez"})
#: the probes' paths (the manifests' liveness and readiness probes: daemonset/agent/daemonset.yaml,
#: daemonset/scheduler/deployment.yaml, daemonset/webhook/deployment.yaml) and the slots kept for them
#: (at most half the cap): requests for other paths never hold more than the rest in the workers
RESERVE_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
DEFAULT_RESERVE = 8
#: the answered connections (writing the response, or lingering after it) one peer IP may hold: beyond,
#: its oldest is closed (a flood from one address cannot make the cap its own)
DEFAULT_ANSWERED_PER_PEER = 8
#: connections accepted per wake of the selector: the backlog is drained in a burst, so that under a flood a
#: probe's SYN is not dropped by a full backlog while the selector takes one connection at a time
ACCEPT_BURST = 64
#: the selector's longest wait while a connection is open (its deadline is checked after each wait); with none,
#: nothing is timed (a new connection, a finished request and `stop` each wake it): an idle agent's listener
#: woke 5 times a second for nothing
SELECT_TICK = 0.2
IDLE_SELECT = 2.0

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_REASONS = {400: "Bad Request", 408: "Request Timeout", 411: "Length Required", 413: "Content Too Large",
            431: "Request Header Fields Too Large"}
_READ, _BUSY, _WRITE, _LINGER = "read", "busy", "write", "linger"
#: which connection goes first when a slot is needed: those already answered, then those still read
_EVICT_RANK = {_LINGER: 0, _WRITE: 1, _READ: 2}


def plain_response(status: int, message: str) -> bytes:
    """A complete `Connection: close` response with a text body (what the selector answers by itself)."""
    body = (message.rstrip("\n") + "\n").encode()
    return (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What the selector read of a request before its body: enough to route and to refuse it."""

    method: str
    path: str
    content_length: int
    raw: bytes


def parse_head(raw: bytes) -> RequestHead | tuple[int, str]:
    """The request line and the length headers of a head (http.server parses the rest in the worker);
    (status, why) when the request cannot be read as one with a known length."""
    lines = raw.decode("latin-1").splitlines()
    parts = lines[0].split() if lines else []
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400, "bad request line"
    lengths: set[str] = set()
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        name = name.strip().lower()
        if not sep:
            continue
        if name == "content-length":
            lengths.add(value.strip())
        elif name == "transfer-encoding" and value.strip().lower() != "identity":
            return 411, "a request body needs a Content-Length (no chunked encoding)"
    if len(lengths) > 1:
        return 400, "conflicting Content-Length headers"
    text = lengths.pop() if lengths else "0"
    if not text.isdigit() or not text.isascii() or len(text) > 18:
        return 400, "bad Content-Length"
    return RequestHead(parts[0], parts[1], int(text), raw)


class _Exchange:
    """One request's bytes in, the response's bytes out: the connection a handler sees in a worker.

    The worker never touches the socket: the selector thread read the whole request under its deadlines
    and will write the response under another, so no client, however slow, can hold a worker.
    """

    def __init__(self, request: bytes) -> None:
        self._request = request
        self.out = bytearray()

    def makefile(self, mode: str, bufsize: int = -1) -> io.BytesIO:
        return io.BytesIO(self._request)

    def sendall(self, data: bytes) -> None:
        self.out += data

    def settimeout(self, value: float | None) -> None:
        pass

    def setsockopt(self, *args: Any) -> None:
        pass


class _Conn:
    """One client connection, owned by the selector thread except while a worker handles its request."""

    __slots__ = (
        "buf",
        "counted",
        "deadline",
        "drained",
        "events",
        "handshaking",
        "head",
        "io",
        "out",
        "oversized",
        "paused",
        "peer",
        "phase",
        "reserved",
        "scanned",
        "sent",
        "since",
        "want",
    )

    def __init__(self, sock: socket.socket, peer: Any, now: float, deadline: float, handshaking: bool) -> None:
        self.io = sock
        self.peer = peer
        self.since = now
        self.deadline = deadline
        self.phase = _READ
        self.handshaking = handshaking
        self.buf = bytearray()
        self.scanned = 0
        self.head: RequestHead | None = None
        self.want = 0  # the bytes of the request to read (head + body), once the head is in
        self.oversized = False
        self.counted = 0  # bytes of buf counted against max_buffered
        self.events = 0
        self.out = b""
        self.sent = 0
        self.drained = 0
        self.paused = False
        self.reserved = False  # its request is for a reserve path (known once its head is read)


class BoundedHTTPServer(HTTPServer):
    """An HTTP server whose cost is bounded whatever its clients do.

    One thread runs a selector over the listening socket and every connection, and does all of their I/O
    without blocking: the TLS handshake, the request head, the request body, and the response. Each
    phase has an absolute deadline (`timeout` seconds: the handshake and head from the connection, the
    body from its head, the response from when it is ready), however slowly the bytes come. A worker (a
    pool of `max_workers`) gets only a complete request and returns the response's bytes, so a client
    that dribbles a byte every few seconds holds a file descriptor, never a thread; requests for
    `probe_paths` (liveness) have a worker of their own, never queued behind others.

    Bounds: a head of at most `max_head` bytes (431 beyond), a body of at most `max_body` bytes (413,
    answered before the body is read: `oversized_response`), at most `max_buffered` bytes of bodies held
    at once (a connection over it waits, unread, within its deadline), at most `max_connections`
    connections in every phase (handshake, head, body, in a worker, response, the drain after a refusal).
    A new connection takes the slot of the oldest one not in a worker (answered ones first: lingering,
    then not reading their response; then the oldest still being read: a probe sends its request at
    once, so it is never the oldest); one peer IP holds at most `answered_per_peer` answered
    connections; requests for other paths than `reserve_paths` hold at most max_connections - `reserve`
    slots in the workers (beyond, a complete request waits, evictable, within its deadline), so a probe
    always finds a slot. A client that goes away costs one DEBUG line, never a traceback.
    """

    request_queue_size = 128  # the listen() backlog; the selector drains it at once

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        family: socket.AddressFamily,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_workers: int = DEFAULT_MAX_WORKERS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        ssl_context: ssl.SSLContext | None = None,
        max_head: int = DEFAULT_MAX_HEAD,
        max_body: int = DEFAULT_MAX_BODY,
        max_buffered: int | None = None,
        probe_paths: frozenset[str] = PROBE_PATHS,
        reserve_paths: frozenset[str] = RESERVE_PATHS,
        reserve: int = DEFAULT_RESERVE,
        answered_per_peer: int = DEFAULT_ANSWERED_PER_PEER,
    ) -> None:
        self.address_family = family
        self.allow_reuse_address = True
        self.request_timeout = timeout
        self.max_connections = max_connections
        self.ssl_context = ssl_context
        self.max_head = max_head
        self.max_body = max_body
        self.max_buffered = max_buffered if max_buffered is not None else max(4 * max_body, 1024 * 1024)
        self.probe_paths = probe_paths
        self.reserve_paths = reserve_paths | probe_paths
        self.reserve = min(max(0, reserve), max_connections // 2)  # a small cap keeps half for other requests
        self.answered_per_peer = max(1, answered_per_peer)
        self._wake_r, self._wake_w = socket.socketpair()  # (before the bind: a failed one calls server_close)
        super().__init__(address, handler)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="serving-worker")
        self._probe_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="serving-probe")
        self._conns: dict[int, _Conn] = {}  # every connection the selector thread owns (by id)
        self._busy = 0  # connections in a worker
        self._busy_general = 0  # of which requests for other paths than reserve_paths
        self._waiting: collections.deque[_Conn] = collections.deque()  # complete requests waiting for a worker
        self._buffered = 0  # bytes of request heads and bodies held (read, or in a worker)
        self._paused: collections.deque[_Conn] = collections.deque()
        self._finished: queue.SimpleQueue[tuple[_Conn, bytes]] = queue.SimpleQueue()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = threading.Event()
        self.socket.setblocking(False)  # accept in bursts until the backlog is empty
        self.dropped = 0

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # `:PORT` means every interface, IPv4 too (as Go's net.Listen does).
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    # --- the selector thread --------------------------------------------------------------------------

    def serve(self) -> None:
        """The selector loop (the server's one long-lived thread besides the workers)."""
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stopping.is_set():
                busy = self._conns or self._busy or self._waiting or self._paused
                for key, _mask in sel.select(timeout=SELECT_TICK if busy else IDLE_SELECT):
                    if key.data is None:
                        self._accept(sel)
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            while self._wake_r.recv(4096):
                                pass
                    else:
                        self._io(sel, key.data)
                self._take_finished(sel)
                self._resume(sel)
                self._expire(sel, time.monotonic())
        finally:
            for c in list(self._conns.values()):
                self._close(sel, c)
            sel.close()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                sock, peer = self.socket.accept()
            except OSError:  # BlockingIOError: the backlog is empty
                return
            if not self._make_room(sel):  # every slot is a request in a worker (probes' own included)
                self.dropped += 1
                sock.close()
                continue
            sock.setblocking(False)
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ssl.SSLError) as exc:
                    log.debug("client went away: %s", exc)
                    sock.close()
                    continue
            now = time.monotonic()
            c = _Conn(sock, peer, now, now + self.request_timeout, self.ssl_context is not None)
            self._conns[id(c)] = c
            self._want(sel, c, selectors.EVENT_READ)

    def _make_room(self, sel: selectors.BaseSelector) -> bool:
        """Free a slot for a new connection if none is: close the first evictable (_EVICT_RANK, then oldest)."""
        while len(self._conns) + self._busy >= self.max_connections:
            if not self._conns:
                return False
            victim = min(self._conns.values(), key=lambda c: (_EVICT_RANK[c.phase], c.since))
            log.debug("%s: %s connection closed for a new one (%d open)", victim.peer, victim.phase,
                      self.max_connections)
            self._close(sel, victim)
            self.dropped += 1
        return True

    def _cap_answered(self, sel: selectors.BaseSelector, c: _Conn) -> None:
        """At most answered_per_peer connections of c's peer IP answered and still open: close the oldest."""
        host = c.peer[0] if isinstance(c.peer, tuple) else c.peer
        same = [o for o in self._conns.values()
                if o.phase in (_WRITE, _LINGER) and (o.peer[0] if isinstance(o.peer, tuple) else o.peer) == host]
        for o in sorted(same, key=lambda o: o.since)[: max(0, len(same) - self.answered_per_peer)]:
            if o is not c:
                log.debug("%s: more than %d answered connections; the oldest closed", host, self.answered_per_peer)
                self._close(sel, o)
                self.dropped += 1

    def _want(self, sel: selectors.BaseSelector, c: _Conn, events: int) -> None:
        if c.events == events:
            return
        if events == 0:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(c.io)
        elif c.events == 0:
            sel.register(c.io, events, c)
        else:
            sel.modify(c.io, events, c)
        c.events = events

    def _close(self, sel: selectors.BaseSelector, c: _Conn) -> None:
        self._want(sel, c, 0)
        self._conns.pop(id(c), None)
        if c.paused:
            c.paused = False
            for line in (self._paused, self._waiting):
                with contextlib.suppress(ValueError):
                    line.remove(c)
        self._buffered -= c.counted
        c.counted = 0
        c.buf = bytearray()
        with contextlib.suppress(OSError):
            c.io.close()

    def _io(self, sel: selectors.BaseSelector, c: _Conn) -> None:
        if c.phase == _WRITE:
            self._write(sel, c)
        elif c.phase == _LINGER:
            self._drain(sel, c)
        elif c.phase == _READ:
            self._read(sel, c)

    def _read(self, sel: selectors.BaseSelector, c: _Conn) -> None:
        if c.handshaking:
            try:
                c.io.do_handshake()  # type: ignore[attr-defined]
            except ssl.SSLWantReadError:
                self._want(sel, c, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._want(sel, c, selectors.EVENT_WRITE)
                return
            except (OSError, ssl.SSLError) as exc:
                log.debug("client went away: %s", exc)
                self._close(sel, c)
                return
            c.handshaking = False
        while True:
            if c.head is not None and self._buffered >= self.max_buffered:
                self._want(sel, c, 0)  # bodies held are at their bound: wait, unread, within the deadline
                c.paused = True
                self._paused.append(c)
                return
            limit = 65536 if c.head is None else min(65536, c.want - len(c.buf))
            try:
                data = c.io.recv(limit)
            except (BlockingIOError, ssl.SSLWantReadError):
                self._want(sel, c, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._want(sel, c, selectors.EVENT_WRITE)
                return
            except (OSError, ssl.SSLError) as exc:
                log.debug("client went away: %s", exc)
                self._close(sel, c)
                return
            if not data:  # the client closed before its request was complete
                self._close(sel, c)
                return
            c.buf += data
            c.counted += len(data)
            self._buffered += len(data)
            if c.head is None and not self._head_done(sel, c):
                if c.phase != _READ:
                    return  # answered by the selector (a malformed or over-sized head)
                continue
            if c.oversized:
                if self._answer_oversized(sel, c):
                    return
                continue
            if len(c.buf) >= c.want:
                self._complete(sel, c)
                return

    def _head_done(self, sel: selectors.BaseSelector, c: _Conn) -> bool:
        """Whether the head is now complete (and c.want set); answers 400/411/413/431 itself."""
        found = _HEAD_END.search(c.buf, max(0, c.scanned - 3))
        if found is None:
            c.scanned = len(c.buf)
            if len(c.buf) > self.max_head:
                self._respond(sel, c, plain_response(431, f"the request head is longer than {self.max_head} bytes"))
            return False
        if found.end() > self.max_head:
            self._respond(sel, c, plain_response(431, f"the request head is longer than {self.max_head} bytes"))
            return False
        head = parse_head(bytes(c.buf[: found.end()]))
        if not isinstance(head, RequestHead):
            self._respond(sel, c, plain_response(*head))
            return False
        c.head = head
        c.deadline = time.monotonic() + self.request_timeout  # the body's own absolute deadline
        if head.content_length > self.max_body:
            c.oversized = True  # read a little of it at most to answer (oversized_response), never the whole
            c.want = found.end() + min(head.content_length, PEEK_BYTES)
            return not self._answer_oversized(sel, c)
        c.want = found.end() + head.content_length
        return True

    def _answer_oversized(self, sel: selectors.BaseSelector, c: _Conn) -> bool:
        """Answer a request whose body is over `max_body` as soon as `oversized_response` can (before its
        body is read: at most PEEK_BYTES of it); whether it is answered."""
        head = c.head
        assert head is not None
        final = len(c.buf) >= c.want
        response = self.oversized_response(head, bytes(c.buf[len(head.raw) : c.want]), final)
        if response is None and final:
            response = BoundedHTTPServer.oversized_response(self, head, b"", True)
        if response is None:
            return False
        self._respond(sel, c, response)
        return True

    def _complete(self, sel: selectors.BaseSelector, c: _Conn) -> None:
        head = c.head
        assert head is not None
        self._want(sel, c, 0)
        path = head.path.split("?", 1)[0].rstrip("/") or "/"
        probe = head.method in ("GET", "HEAD") and path in self.probe_paths
        c.reserved = head.method in ("GET", "HEAD") and path in self.reserve_paths
        if not c.reserved and self._busy_general >= self.max_connections - self.reserve:
            c.paused = True  # the other slots are the probes': wait (evictable) for a worker's slot
            self._waiting.append(c)
            return
        c.phase = _BUSY
        del self._conns[id(c)]
        self._busy += 1
        self._busy_general += not c.reserved
        request = bytes(c.buf[: c.want])
        c.buf = bytearray()
        c.want = 0  # read whole: nothing to drain after the answer
        try:
            (self._probe_pool if probe else self._pool).submit(self._handle, c, request)
        except RuntimeError:  # the pool is shut down: stopping
            self._busy -= 1
            self._busy_general -= not c.reserved
            self._buffered -= c.counted
            c.counted = 0
            with contextlib.suppress(OSError):
                c.io.close()

    def oversized_response(self, head: RequestHead, peek: bytes, final: bool) -> bytes | None:
        """The answer to a request whose body is larger than `max_body`, given the body's first bytes read so
        far (`final`: all PEEK_BYTES of them); None to wait for more. Here: 413 at once."""
        return plain_response(413, f"the request body is larger than {self.max_body} bytes")

    def _respond(self, sel: selectors.BaseSelector, c: _Conn, response: bytes) -> None:
        """Answer from the selector thread (the request is not read further)."""
        c.out, c.sent = response, 0
        c.phase = _WRITE
        c.deadline = time.monotonic() + self.request_timeout
        self._cap_answered(sel, c)
        self._write(sel, c)

    def _write(self, sel: selectors.BaseSelector, c: _Conn) -> None:
        while c.sent < len(c.out):
            try:
                c.sent += c.io.send(c.out[c.sent : c.sent + 262144])
            except (BlockingIOError, ssl.SSLWantWriteError):
                self._want(sel, c, selectors.EVENT_WRITE)
                return
            except ssl.SSLWantReadError:
                self._want(sel, c, selectors.EVENT_READ)
                return
            except (OSError, ssl.SSLError) as exc:
                log.debug("client went away: %s", exc)
                self._close(sel, c)
                return
        unread = c.head is None or c.oversized or len(c.buf) < c.want
        if not unread:
            self._close(sel, c)
            return
        # the request was refused before it was read whole: drain what the client still sends, so that
        # closing does not reset the connection under the answer
        c.phase = _LINGER
        c.deadline = min(c.deadline, time.monotonic() + LINGER_SECONDS)
        if self.ssl_context is None:
            with contextlib.suppress(OSError):
                c.io.shutdown(socket.SHUT_WR)
        self._buffered -= c.counted
        c.counted = 0
        c.buf = bytearray()
        self._drain(sel, c)

    def _drain(self, sel: selectors.BaseSelector, c: _Conn) -> None:
        while c.drained < LINGER_BYTES:
            try:
                data = c.io.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                self._want(sel, c, selectors.EVENT_READ)
                return
            except (OSError, ssl.SSLError, ssl.SSLWantWriteError):
                break
            if not data:
                break
            c.drained += len(data)
        self._close(sel, c)

    def _resume(self, sel: selectors.BaseSelector) -> None:
        while self._waiting and self._busy_general < self.max_connections - self.reserve:
            c = self._waiting.popleft()
            c.paused = False
            if id(c) in self._conns:
                self._complete(sel, c)
        while self._paused and self._buffered < self.max_buffered:
            c = self._paused.popleft()
            c.paused = False
            if id(c) in self._conns and c.phase == _READ:
                self._read(sel, c)

    def _take_finished(self, sel: selectors.BaseSelector) -> None:
        while True:
            try:
                c, response = self._finished.get_nowait()
            except queue.Empty:
                return
            self._busy -= 1
            self._busy_general -= not c.reserved
            self._buffered -= c.counted
            c.counted = 0
            if self._stopping.is_set():
                with contextlib.suppress(OSError):
                    c.io.close()
                continue
            self._conns[id(c)] = c
            self._respond(sel, c, response)

    def _expire(self, sel: selectors.BaseSelector, now: float) -> None:
        for c in [c for c in self._conns.values() if c.deadline < now]:
            log.debug("%s: %s deadline passed; closed", c.peer, c.phase)
            self._close(sel, c)

    # --- the workers ------------------------------------------------------------------------------------

    def _handle(self, c: _Conn, request: bytes) -> None:
        exchange = _Exchange(request)
        try:
            self.finish_request(exchange, c.peer)  # type: ignore[arg-type]
        except Exception as exc:  # a handler bug: one log line (JSON-safe), the server goes on
            log.warning("serving a request failed: %s: %s", type(exc).__name__, exc)
        response = bytes(exchange.out) or plain_response(400, "no response")
        self._finished.put((c, response))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._probe_pool.shutdown(wait=False, cancel_futures=True)

    def server_close(self) -> None:
        super().server_close()
        for s in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("error serving %s", client_address, exc_info=True)
