"""Binds from one asyncio thread over keep-alive HTTP/1.1 connections: the scheduler's bind path.

Why not the thread pool of `tidemark.kube.eviction.bind`: each bind through the official client
costs about 0.5 ms of client CPU (its request layers, urllib3, and 16 threads contending for the
GIL), and every request wakes its own thread. On a loaded 2-core machine that client, not the API
server, set the bind rate (docs/benchmarks-e2e.md: about 0.4 of a Go client's rate). Here one
event loop keeps up to `connections` binds in flight on as many keep-alive connections; a bind
costs about 0.1 ms of client CPU, and the replies that arrive together are handled in one wake-up.

What it keeps from the ApiClient: the configuration's host (with any path prefix), TLS settings
(CA, client certificate, verify_ssl, tls_server_name), the bearer token through the configuration's
own (throttled) refresh hook on every request, and the client's write rate limiter (QPS/burst).
Configurations it cannot serve (a proxy, a scheme other than http/https) are refused by
`unsupported()`, and callers keep the thread-pool path.

Semantics are `bind()`'s: 201/200 BOUND, 404 NOT_FOUND, 409 CONFLICT, anything else ERROR with the
status; no answer is ERROR with status None (the bind may have happened). A request written on a
reused connection that the server had already closed (EOF before any reply byte) is sent once
more on a fresh connection (the server never read it), as urllib3 does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

from tidemark.kube.client import DEFAULT_TIMEOUT, TokenBucket, status_message
from tidemark.kube.eviction import BindOutcome, BindResult, binding_body
from tidemark.kube.resources import PODS

log = logging.getLogger(__name__)

#: connections idle longer than this are closed instead of reused (servers drop idle ones)
IDLE_REUSE_SECONDS: Final = 30.0
_MAX_HEADER: Final = 64 * 1024

#: called once per submitted bind with its result, or None when it was not sent (fenced, stopped)
Done = Callable[[BindResult | None], None]


def unsupported(configuration: Any) -> str | None:
    """Why this client configuration cannot be served here (None: it can)."""
    if configuration is None:
        return "no client configuration"
    if getattr(configuration, "proxy", None):
        return "a proxy is configured"
    scheme = urlsplit(str(getattr(configuration, "host", "") or "")).scheme
    if scheme not in ("http", "https"):
        return f"unsupported scheme {scheme!r}"
    return None


def _ssl_context(cfg: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=getattr(cfg, "ssl_ca_cert", None) or None)
    if getattr(cfg, "cert_file", None):
        ctx.load_cert_chain(cfg.cert_file, getattr(cfg, "key_file", None) or None)
    if getattr(cfg, "verify_ssl", True) is False:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif getattr(cfg, "assert_hostname", None) is False:
        ctx.check_hostname = False
    return ctx


class _Conn:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken transport
            self.writer.close()


class _NoReply(Exception):
    """The connection ended before any byte of the reply (a stale keep-alive connection)."""


async def _read_reply(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _NoReply() from exc
        raise
    except asyncio.LimitOverrunError as exc:
        raise ConnectionError("reply header too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ConnectionError(f"not an HTTP reply: {lines[0][:100]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, sep, v = line.partition(":")
        if sep:
            headers[k.strip().lower()] = v.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(chunks)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif status in (204, 304) or 100 <= status < 200:
        body = b""
    else:
        body = await reader.read()
        headers["connection"] = "close"
    return status, headers, body


class AsyncBinder:
    """`submit()` from any thread; `stop()` once. See the module docstring."""

    def __init__(
        self,
        configuration: Any,
        *,
        connections: int = 64,
        limiter: TokenBucket | None = None,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        user_agent: str = "tidemark",
    ) -> None:
        why = unsupported(configuration)
        if why is not None:
            raise ValueError(f"AsyncBinder: {why}")
        self._cfg = configuration
        url = urlsplit(str(configuration.host))
        self._tls = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._tls else 80)
        self._host_header = url.netloc
        self._prefix = url.path.rstrip("/")
        self._server_name = getattr(configuration, "tls_server_name", None) or None
        self._ssl = _ssl_context(configuration) if self._tls else None
        self._connections = max(1, connections)
        self._limiter = limiter
        self._connect_timeout, self._read_timeout = timeout
        self._user_agent = user_agent
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        # loop-side state (touched only on the loop thread)
        self._idle: list[_Conn] = []
        self._slots: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- any thread ------------------------------------------------------------------------------
    def submit(self, namespace: str, name: str, uid: str | None, node: str, *, fence: Callable[[], bool],
               done: Done) -> None:
        """Queue one bind; `done` is called exactly once, on the binder's thread (None if never sent)."""
        loop = self._ensure_loop()
        if loop is None:
            done(None)
            return
        try:
            loop.call_soon_threadsafe(self._spawn, namespace, name, uid, node, fence, done)
        except RuntimeError:  # the loop closed meanwhile
            done(None)

    def stop(self, timeout: float = 5.0) -> None:
        """Let binds already sent finish (up to `timeout`); the ones not yet sent get done(None)."""
        with self._lock:
            self._stopped = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(timeout), loop)
            fut.result(timeout + 1.0)
        except Exception:
            log.debug("binder shutdown", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout + 1.0)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop | None:
        with self._lock:
            if self._stopped:
                return None
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    self._slots = asyncio.Semaphore(self._connections)
                    loop.call_soon(ready.set)
                    try:
                        loop.run_forever()
                    finally:
                        for c in self._idle:
                            c.close()
                        self._idle.clear()
                        loop.close()

                self._thread = threading.Thread(target=run, name="binder", daemon=True)
                self._thread.start()
                ready.wait(10.0)
                self._loop = loop
            return self._loop

    # --- the loop thread ---------------------------------------------------------------------------
    def _spawn(self, namespace: str, name: str, uid: str | None, node: str, fence: Callable[[], bool],
               done: Done) -> None:
        task = asyncio.get_running_loop().create_task(self._bind(namespace, name, uid, node, fence, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind(self, namespace: str, name: str, uid: str | None, node: str, fence: Callable[[], bool],
                    done: Done) -> None:
        result: BindResult | None = None
        assert self._slots is not None
        try:
            async with self._slots:
                if self._stopped or not fence():
                    return
                if self._limiter is not None:
                    delay = self._limiter.reserve()
                    if delay > 0:
                        await asyncio.sleep(delay)
                result = await self._post(namespace, name, uid, node)
        except asyncio.CancelledError:
            result = None
        except Exception as exc:  # a bug here must not lose the done() call
            log.exception("binding %s/%s to %s", namespace, name, node)
            result = BindResult(BindOutcome.ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            try:
                done(result)
            except Exception:
                log.exception("bind callback")

    def _request_bytes(self, namespace: str, name: str, uid: str | None, node: str) -> tuple[str, bytes]:
        path = f"{self._prefix}{PODS.object_path(name, namespace, 'binding')}"
        body = json.dumps(binding_body(namespace, name, uid, node), separators=(",", ":")).encode()
        auth = ""
        for setting in (self._cfg.auth_settings() or {}).values():  # runs the (throttled) refresh hook
            if setting.get("in") == "header" and setting.get("value"):
                auth += f"{setting['key']}: {setting['value']}\r\n"
        head = (f"POST {path} HTTP/1.1\r\nHost: {self._host_header}\r\nUser-Agent: {self._user_agent}\r\n{auth}"
                f"Accept: application/json\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        return path, head.encode("latin-1") + body

    async def _connect(self) -> _Conn:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self._host, self._port, ssl=self._ssl, limit=_MAX_HEADER,
                                    server_hostname=(self._server_name or self._host) if self._ssl else None),
            self._connect_timeout,
        )
        return _Conn(reader, writer)

    def _take_idle(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < IDLE_REUSE_SECONDS and not conn.reader.at_eof():
                return conn
            conn.close()
        return None

    async def _post(self, namespace: str, name: str, uid: str | None, node: str) -> BindResult:
        path, data = self._request_bytes(namespace, name, uid, node)
        for attempt in (0, 1):
            conn = self._take_idle() if attempt == 0 else None
            reused = conn is not None
            try:
                if conn is None:
                    conn = await self._connect()
                conn.writer.write(data)
                await conn.writer.drain()
                status, headers, body = await asyncio.wait_for(_read_reply(conn.reader), self._read_timeout)
            except _NoReply:
                if conn is not None:
                    conn.close()
                if reused and attempt == 0:
                    continue  # the server had closed this idle connection: it never read the request
                return BindResult(BindOutcome.ERROR, f"POST {path}: connection closed without a reply")
            except (OSError, EOFError, ValueError) as exc:  # OSError: timeouts, TLS, resets
                if conn is not None:
                    conn.close()
                if reused and attempt == 0 and isinstance(exc, (BrokenPipeError, ConnectionResetError)):
                    continue
                return BindResult(BindOutcome.ERROR, f"POST {path}: {type(exc).__name__}: {exc}")
            if headers.get("connection", "").lower() == "close":
                conn.close()
            else:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            return _outcome(status, body)
        return BindResult(BindOutcome.ERROR, f"POST {path}: no reply")  # not reached

    async def _shutdown(self, timeout: float) -> None:
        waiting = [t for t in self._tasks if not t.done()]
        if waiting:
            _, pending = await asyncio.wait(waiting, timeout=timeout)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for c in self._idle:
            c.close()
        self._idle.clear()


def _outcome(status: int, data: bytes) -> BindResult:
    if 200 <= status <= 299:
        return BindResult(BindOutcome.BOUND, "", status)
    try:
        decoded = json.loads(data) if data else None
    except (ValueError, UnicodeDecodeError):
        decoded = None
    message = status_message(status, decoded if isinstance(decoded, dict) else None, data)
    if status == 404:
        return BindResult(BindOutcome.NOT_FOUND, message, 404)
    if status == 409:
        return BindResult(BindOutcome.CONFLICT, message, 409)
    return BindResult(BindOutcome.ERROR, message, status)
