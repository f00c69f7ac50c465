"""Issue #13 D6: the HTTP listener's cost is bounded whatever clients do (real sockets on loopback).

No timing is asserted: waits poll with generous deadlines, and what is checked is the outcome
(threads, closed connections, answers, stderr).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge

from tidemark.serving import ServingServer

MAX_WORKERS = 3


def _serve(**kwargs: object) -> ServingServer:
    registry = CollectorRegistry()
    Gauge("tidemark_test_value", "A value.", registry=registry).set(1)
    return ServingServer("127.0.0.1:0", registry, **kwargs).start()  # type: ignore[arg-type]


@pytest.fixture
def server() -> Iterator[ServingServer]:
    s = _serve(max_workers=MAX_WORKERS, max_connections=64, timeout=30.0)
    yield s
    s.stop()


def _healthz(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as resp:
        return int(resp.status)


def _until(cond: Callable[[], bool], deadline: float = 30.0) -> bool:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def _serving_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("serving"))


def test_300_half_open_connections_hold_no_threads_and_probes_still_answer(server: ServingServer) -> None:
    before = _serving_threads()
    conns = []
    try:
        for _ in range(300):
            conns.append(socket.create_connection(("127.0.0.1", server.port), timeout=30))
        assert _until(lambda: server.dropped >= 300 - 64)  # beyond max_connections the oldest idle go
        assert _healthz(server.port) == 200  # a probe sends at once: never the oldest idle connection
        assert _serving_threads() <= before + MAX_WORKERS
        assert _serving_threads() <= 1 + MAX_WORKERS  # the selector thread + the pool, nothing per connection
    finally:
        for c in conns:
            c.close()


def test_idle_and_slow_connections_are_closed_after_the_timeout() -> None:
    server = _serve(max_workers=MAX_WORKERS, timeout=0.5)
    try:
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        slow.sendall(b"GET /hea")  # a request that never ends (slowloris) holds a worker only until the timeout
        assert idle.recv(1) == b""  # closed by the server
        assert slow.recv(1) == b""
        idle.close()
        slow.close()
        assert _healthz(server.port) == 200
    finally:
        server.stop()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def serving_log() -> Iterator[_Records]:
    """tidemark.serving's records at DEBUG, kept from other handlers (earlier tests may leave stale ones)."""
    logger = logging.getLogger("tidemark.serving")
    handler = _Records()
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(saved[0])
    logger.propagate = saved[1]


def test_client_closing_early_prints_no_traceback(capfd: pytest.CaptureFixture[str], serving_log: _Records) -> None:
    started = threading.Event()

    def slow_check() -> tuple[bool, str]:
        started.set()
        time.sleep(0.3)  # the client resets the connection meanwhile
        return True, ""

    server = _serve(max_workers=MAX_WORKERS, timeout=30.0)
    server.healthz = {"slow": slow_check}
    try:
        for _ in range(3):
            started.clear()
            c = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert started.wait(30)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()  # RST: the server's write fails
        assert _until(lambda: any("went away" in r.getMessage() for r in serving_log.records))
        server.healthz = {}
        assert _healthz(server.port) == 200
    finally:
        server.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred during processing" not in err, err
    assert not [r for r in serving_log.records if r.levelno >= logging.WARNING]


def test_every_response_closes_its_connection(server: ServingServer) -> None:
    c = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while chunk := c.recv(4096):
        data += chunk
    c.close()
    assert data.startswith(b"HTTP/1.1 200") and b"Connection: close" in data
