"""Hardening round 2, item 1: slow clients stall no listener's /healthz (real sockets on loopback).

The finding: the read timeout was per read, with no deadline for the whole request head, and a
connection was handed to a worker at its first byte. N clients each sending one header byte every
few seconds held all N workers for as long as they liked: 8 over TLS stalled every /healthz probe of
the webhook (8 workers), 4 did it to the agent's and the scheduler's listeners (4 workers), and
kubelet's liveness probes then restart the pods. Now the selector thread reads each request's head
and body itself, under absolute deadlines, and hands a worker only a complete request; liveness probes
have their own lane. Each test runs more dribbling clients than the listener has workers and asserts
that every /healthz probe meanwhile answers within PROBE_BOUND seconds.
"""

from __future__ import annotations

import contextlib
import http.client
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from tidemark.serving import ServingServer

#: a probe must answer within this (kubelet's default probe timeout is 1 s; ours are 5 s): generous for
#: a loaded 2-core machine, and far below what a stall costs (the whole time the clients dribble)
PROBE_BOUND = 2.5
DRIBBLE_SECONDS = 4.0
HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"


class Dribbler:
    """Slow clients, one thread each: connect (a TLS handshake included), send `prefix` at once, then one
    byte of `payload` every `interval` seconds."""

    def __init__(self, connect: Callable[[], socket.socket], count: int, payload: bytes, interval: float,
                 prefix: bytes = b"") -> None:
        self.connect = connect
        self.payload = payload
        self.prefix = prefix
        self.interval = interval
        self.closed_by_server = 0
        self.socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def _run(self) -> None:
        try:
            s = self.connect()
        except OSError:
            with self._lock:
                self.closed_by_server += 1
            return
        with self._lock:
            self.socks.append(s)
        try:
            if self.prefix:
                s.sendall(self.prefix)
            for i in range(len(self.payload)):
                s.sendall(self.payload[i : i + 1])
                if self._stop.wait(self.interval):
                    return
        except OSError:
            with self._lock:
                self.closed_by_server += 1

    def __enter__(self) -> Dribbler:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with self._lock:
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
        for t in self._threads:
            t.join(15)


def _probe_until(probe: Callable[[], int], seconds: float) -> list[float]:
    """Probe /healthz again and again for `seconds`; each probe's latency (a failure is inf)."""
    latencies: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        try:
            status = probe()
        except OSError:
            status = 0
        latencies.append(time.monotonic() - start if status == 200 else float("inf"))
        time.sleep(0.2)
    return latencies


def _http_probe(port: int) -> Callable[[], int]:
    def probe() -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_BOUND)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status
        finally:
            conn.close()

    return probe


def _tcp(port: int) -> Callable[[], socket.socket]:
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=10)


def _assert_probes_answer(latencies: list[float]) -> None:
    assert latencies, "no probe ran"
    assert max(latencies) < PROBE_BOUND, f"/healthz stalled: latencies {[round(x, 2) for x in latencies]}"


# --- the agent's and the scheduler's listeners --------------------------------------------------------------


@pytest.fixture
def agent_listener() -> Iterator[ServingServer]:
    """What agent/daemon/runner.py serves: ServingServer's defaults (4 workers)."""
    server = ServingServer("127.0.0.1:0", CollectorRegistry(), healthz={"loops": lambda: (True, "")},
                           readyz={"api": lambda: (True, "")}).start()
    yield server
    server.stop()


@pytest.fixture
def scheduler_listener() -> Iterator[ServingServer]:
    """The scheduler's own Health (scheduler_ext/run/health.py) and its listener, over fakes of the loop."""
    from scheduler_ext.run.health import Health
    from scheduler_ext.run.options import RunOptions

    health = Health(
        None, RunOptions(listen_address="127.0.0.1:0"), CollectorRegistry(),
        cache=SimpleNamespace(last_contact=time.monotonic, synced=lambda: True),  # type: ignore[arg-type]
        executor=SimpleNamespace(last_success=None),  # type: ignore[arg-type]
        conf_source=SimpleNamespace(current=SimpleNamespace(generation=1)),  # type: ignore[arg-type]
        loop_alive=lambda: True, clock=time.monotonic,
    )
    server = health.server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("listener", ["agent_listener", "scheduler_listener"])
def test_slow_header_clients_do_not_stall_healthz(listener: str, request: pytest.FixtureRequest) -> None:
    server: ServingServer = request.getfixturevalue(listener)
    assert server.max_workers == 4
    with Dribbler(_tcp(server.port), server.max_workers + 4, HEAD, 0.3):
        time.sleep(0.5)  # every dribbler has sent its first bytes
        _assert_probes_answer(_probe_until(_http_probe(server.port), DRIBBLE_SECONDS))


def test_the_head_has_an_absolute_deadline() -> None:
    """One byte every 0.2 s used to keep a connection for ever (the timeout was per read)."""
    server = ServingServer("127.0.0.1:0", CollectorRegistry(), timeout=1.0).start()
    try:
        with Dribbler(_tcp(server.port), 2, HEAD, 0.2) as slow:
            start = time.monotonic()
            while slow.closed_by_server < 2 and time.monotonic() - start < 10:
                time.sleep(0.1)
            took = time.monotonic() - start
        assert slow.closed_by_server == 2 and took < 4, took  # closed at the 1 s deadline, not after 50 bytes
    finally:
        server.stop()


# --- the webhook, over TLS ---------------------------------------------------------------------------------


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(tmp_path / "k"), "-out", str(tmp_path / "c"), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    return tmp_path


@pytest.fixture
def webhook(certs: Path) -> Iterator[tuple[int, ssl.SSLContext]]:
    from scheduler_ext.webhook.server import WebhookServer, tls_context
    from tests.unit.scheduler.test_webhook_admission import FakeLookups

    server = WebhookServer("127.0.0.1:0", tls_context(str(certs / "c"), str(certs / "k")), FakeLookups()).start()
    client = ssl.create_default_context(cafile=str(certs / "c"))
    yield server.port, client
    server.stop()


def _tls(port: int, client: ssl.SSLContext) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        return client.wrap_socket(raw, server_hostname="127.0.0.1")  # the handshake completes, then the dribble

    return connect


def _https_probe(port: int, client: ssl.SSLContext) -> Callable[[], int]:
    def probe() -> int:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=PROBE_BOUND, context=client)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status
        finally:
            conn.close()

    return probe


def test_slow_tls_clients_do_not_stall_the_webhooks_healthz(webhook: tuple[int, ssl.SSLContext]) -> None:
    port, client = webhook
    with Dribbler(_tls(port, client), 12, HEAD, 0.3):  # the webhook has 8 workers
        time.sleep(0.5)
        _assert_probes_answer(_probe_until(_https_probe(port, client), DRIBBLE_SECONDS))


def test_half_done_tls_handshakes_do_not_stall_the_webhooks_healthz(webhook: tuple[int, ssl.SSLContext]) -> None:
    """Clients that open TCP and send a ClientHello byte by byte (the handshake used to run in a worker)."""
    port, client = webhook
    hello = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client.wrap_bio(*hello, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    client_hello = hello[1].read()
    with Dribbler(_tcp(port), 12, client_hello, 0.3):
        time.sleep(0.5)
        _assert_probes_answer(_probe_until(_https_probe(port, client), DRIBBLE_SECONDS))


def test_slow_bodies_do_not_stall_the_webhooks_healthz(webhook: tuple[int, ssl.SSLContext]) -> None:
    """Complete heads of POST /validate, then bodies one byte at a time (the body was read in a worker)."""
    port, client = webhook
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    with Dribbler(_tls(port, client), 12, b"[" * 1000, 0.3, prefix=head):
        time.sleep(0.5)
        _assert_probes_answer(_probe_until(_https_probe(port, client), DRIBBLE_SECONDS))


def test_a_whole_request_over_tls_still_works(webhook: tuple[int, ssl.SSLContext]) -> None:
    port, client = webhook
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=client)
    body = (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u1", '
            b'"operation": "CREATE", "object": {"metadata": {"name": "q"}}, '
            b'"resource": {"group": "scheduling.volcano.sh", "resource": "queues"}}}')
    conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and b'"uid": "u1"' in resp.read()
    conn.close()


def test_the_body_has_an_absolute_deadline(certs: Path) -> None:
    """A complete head of POST /validate, then its body one byte every 0.2 s (the webhook read bodies in a worker
    with a per-read timeout): closed at the body's 1 s deadline, not after its 1000 bytes."""
    from scheduler_ext.webhook.server import WebhookServer, tls_context
    from tests.unit.scheduler.test_webhook_admission import FakeLookups

    server = WebhookServer("127.0.0.1:0", tls_context(str(certs / "c"), str(certs / "k")), FakeLookups(),
                           timeout=1.0).start()
    client = ssl.create_default_context(cafile=str(certs / "c"))
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    try:
        with Dribbler(_tls(server.port, client), 2, b"[" * 1000, 0.2, prefix=head) as slow:
            start = time.monotonic()
            while slow.closed_by_server < 2 and time.monotonic() - start < 10:
                time.sleep(0.1)
            took = time.monotonic() - start
        assert slow.closed_by_server == 2 and took < 4, took
    finally:
        server.stop()
