"""The HTTP endpoints of both programs: /metrics, /healthz, /readyz, on `--listen-address HOST:PORT`.

Why the standard library's HTTPServer in a daemon thread: three tiny endpoints need no framework, and
a scrape or probe must never wait behind a control loop. Its cost is bounded whatever clients do
(issue #13, hardening round 2): one selector thread does every connection's I/O without blocking (the
TLS handshake, the request head and body, the response), each under an absolute deadline; a small
worker pool gets only complete requests, so slow clients hold file descriptors, never threads; liveness
probes have a worker of their own; heads, bodies, the bytes held and the connections are capped, every
connection's slot can be taken back but a request's in a worker, and probes have slots of their own
(issue #33; tidemark/serving_bounded.py); a client that leaves early is one DEBUG line. What is served
is injected: the CollectorRegistry (house style 10: metrics come from collectors into an injected
registry) and the health/readiness checks, callables returning (ok, reason). /healthz must not depend on the API server
(an outage must not get the agent killed); /readyz may (docs/design.md, "Serving").
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from tidemark.serving_bounded import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_WORKERS,
    DEFAULT_TIMEOUT_SECONDS,
    BoundedHTTPServer,
    RequestHead,
    plain_response,
)

__all__ = [
    "BoundedHTTPServer",
    "Check",
    "CheckResult",
    "Checks",
    "RequestHead",
    "ServingServer",
    "parse_listen_address",
    "plain_response",
    "run_checks",
]

log = logging.getLogger(__name__)

#: (ok, reason): reason explains a failure (or what was checked), shown in the response body
CheckResult = tuple[bool, str]
Check = Callable[[], CheckResult]
Checks = Mapping[str, Check]


def parse_listen_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` -> (host, port); `:9102` -> ('', 9102) = all interfaces; `[::1]:9102` for IPv6."""
    text = address.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or text[end + 1 : end + 2] != ":":
            raise ValueError(f"bad listen address {address!r}: expected [IPv6]:PORT")
        host, port_text = text[1:end], text[end + 2 :]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"bad listen address {address!r}: expected HOST:PORT or :PORT")
        if ":" in host:
            raise ValueError(f"bad listen address {address!r}: put IPv6 hosts in brackets")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bad listen address {address!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"bad listen address {address!r}: port out of range")
    return host, port


def run_checks(checks: Checks) -> tuple[bool, str]:
    """Run every check (a raising check fails); the body lists each, as kube-apiserver's ?verbose does."""
    ok = True
    lines: list[str] = []
    for name, check in checks.items():
        try:
            passed, reason = check()
        except Exception as exc:  # a broken check is a failed check, never a crashed server
            passed, reason = False, f"{type(exc).__name__}: {exc}"
        ok = ok and bool(passed)
        if passed:
            lines.append(f"[+]{name} ok" + (f": {reason}" if reason else ""))
        else:
            lines.append(f"[-]{name} failed: {reason or 'no reason given'}")
    lines.append("ok" if ok else "check failed")
    return ok, "\n".join(lines) + "\n"


class _Server(BoundedHTTPServer):
    app: ServingServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_error(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")  # one request per connection: no idle keep-alive in a worker
        self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        app = self.server.app
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        if path == "/metrics":
            try:
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                names = parse_qs(url.query).get("name[]")
                registry = app.registry.restricted_registry(names) if names else app.registry
                self._send(200, encoder(registry), content_type)
            except Exception as exc:  # a broken collector must not take the endpoint down silently
                log.exception("collecting metrics")
                self._send(500, f"collecting metrics failed: {exc}\n".encode())
        elif path in ("/healthz", "/livez"):
            ok, body = run_checks(app.healthz)
            self._send(200 if ok else 500, body.encode())
        elif path == "/readyz":
            ok, body = run_checks(app.readyz)
            self._send(200 if ok else 500, body.encode())
        elif path == "/":
            self._send(200, b"/metrics /healthz /readyz\n")
        else:
            self._send(404, b"not found\n")

    do_HEAD = do_GET


def _as_checks(checks: Checks | Check | None, default_name: str) -> Checks:
    if checks is None:
        return {}
    if callable(checks):
        return {default_name: checks}
    return dict(checks)


class ServingServer:
    """Serve /metrics from `registry` and /healthz, /readyz from the checks, in a daemon thread.

    Port 0 binds a free port; `port` then says which (tests). Checks may be one callable or a
    mapping name -> callable; none means always healthy/ready.
    """

    def __init__(
        self,
        listen_address: str,
        registry: CollectorRegistry,
        *,
        healthz: Checks | Check | None = None,
        readyz: Checks | Check | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_workers: int = DEFAULT_MAX_WORKERS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.listen_address = listen_address
        self.timeout = timeout
        self.max_workers = max_workers
        self.max_connections = max_connections
        self.registry = registry
        self.healthz = _as_checks(healthz, "live")
        self.readyz = _as_checks(readyz, "ready")
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _make(self, address: tuple[str, int], family: socket.AddressFamily) -> _Server:
        server = _Server(
            address,
            _Handler,
            family,
            timeout=self.timeout,
            max_workers=self.max_workers,
            max_connections=self.max_connections,
        )
        server.app = self
        return server

    def start(self) -> ServingServer:
        """Bind and serve; raises OSError when the address is taken (a startup error, exit code 1)."""
        host, port = parse_listen_address(self.listen_address)
        if host == "" and socket.has_ipv6:
            try:
                self._server = self._make(("::", port), socket.AF_INET6)
            except OSError:
                self._server = None
        if self._server is None:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._server = self._make((host, port), family)
        self._thread = threading.Thread(target=self._server.serve, name="serving", daemon=True)
        self._thread.start()
        log.info("serving /metrics /healthz /readyz on %s", self.address)
        return self

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("not started")
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        """The bound address as HOST:PORT (IPv6 in brackets)."""
        if self._server is None:
            raise RuntimeError("not started")
        host = str(self._server.server_address[0])
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._server is not None:
            self._server.server_close()
            self._server = None

    @property
    def dropped(self) -> int:
        """Connections closed unserved because `max_connections` were open (a flood, or a scan)."""
        return self._server.dropped if self._server is not None else 0
