"""Hardening round 3, item 1: the connection cap cannot be held by connections the server cannot close.

The finding: the listener freed a slot only by closing a connection still sending its request. A client
refused with 413 lingered (draining) for 5 s, one that did not read its response sat in the write phase
for 10 s, requests waiting for a worker held their slots, and accept took one connection per wake: about
28 new connections a second kept every slot full and kubelet's probes were closed at accept. Each test
fills a small cap with one kind of connection the old server could not close and asserts that a probe is
answered (real sockets on loopback; no sleeps: waits poll for an outcome).
"""

from __future__ import annotations

import contextlib
import http.client
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from tidemark.serving import BoundedHTTPServer

OVER_CAP = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n"
BIG = 8 * 1024 * 1024  # a response larger than the kernel's socket buffers: a client that does not read it blocks


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/slow":
            self.server.release.wait(30)
        body = b"x" * BIG if self.path == "/big" else b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


class _Server(BoundedHTTPServer):
    release: threading.Event


@contextlib.contextmanager
def _serve(**kwargs: object) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler, socket.AF_INET, **kwargs)  # type: ignore[arg-type]
    server.release = threading.Event()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.stop()
        thread.join(10)
        server.server_close()


def _port(server: _Server) -> int:
    return int(server.server_address[1])


def _healthz(server: _Server) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=10)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except OSError:
        return 0  # closed at accept: what kubelet sees as a failed probe
    finally:
        conn.close()


def _until(cond: Callable[[], bool], deadline: float = 20.0) -> bool:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def _phases(server: _Server) -> list[str]:
    return [c.phase for c in list(server._conns.values())]


@pytest.fixture
def clients() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()


def _connect(server: _Server, clients: list[socket.socket], request: bytes, rcvbuf: int = 0) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", _port(server)))
    s.sendall(request)
    clients.append(s)
    return s


def test_clients_lingering_after_a_413_do_not_hold_the_cap(clients: list[socket.socket]) -> None:
    with _serve(max_connections=8, timeout=30.0) as server:
        for _ in range(8):
            s = _connect(server, clients, OVER_CAP)
            assert select.select([s], [], [], 10)[0], "no 413"  # answered; now it drains what the client sends
        assert _until(lambda: _phases(server).count("linger") == 8)
        assert _healthz(server) == 200


def test_clients_that_do_not_read_their_response_do_not_hold_the_cap(clients: list[socket.socket]) -> None:
    with _serve(max_connections=4, timeout=30.0) as server:
        for _ in range(4):
            _connect(server, clients, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n", rcvbuf=4096)
        assert _until(lambda: _phases(server).count("write") == 4)
        assert _healthz(server) == 200


def test_a_peers_answered_connections_are_capped(clients: list[socket.socket]) -> None:
    with _serve(max_connections=64, timeout=30.0) as server:  # answered_per_peer: DEFAULT_ANSWERED_PER_PEER (8)
        for _ in range(12):
            s = _connect(server, clients, OVER_CAP)
            assert select.select([s], [], [], 10)[0]
        assert _until(lambda: _phases(server) == ["linger"] * 8), str(_phases(server))


def test_requests_waiting_for_a_worker_leave_the_reserve_to_probes(clients: list[socket.socket]) -> None:
    with _serve(max_connections=16, max_workers=16, timeout=30.0) as server:  # reserve: DEFAULT_RESERVE (8)
        for _ in range(16):
            _connect(server, clients, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _until(lambda: server._busy + len(server._conns) == 16)
        assert server._busy <= 8
        assert _healthz(server) == 200  # it takes a waiting request's slot (the oldest), or a free one
        server.release.set()
        assert _until(lambda: server._busy == 0)


def test_accept_drains_the_backlog_in_one_wake() -> None:
    server = _Server(("127.0.0.1", 0), _Handler, socket.AF_INET)
    socks = [socket.create_connection(("127.0.0.1", _port(server)), timeout=10) for _ in range(20)]
    sel = selectors.DefaultSelector()
    try:
        server._accept(sel)  # one readiness event of the listening socket
        assert len(server._conns) == 20
    finally:
        for c in list(server._conns.values()):
            server._close(sel, c)
        for s in socks:
            s.close()
        sel.close()
        server.stop()
        server.server_close()
