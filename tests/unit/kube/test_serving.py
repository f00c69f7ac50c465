"""The HTTP endpoints over real sockets (port 0, real HTTP requests), with an injected registry and checks."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from tidemark.serving import ServingServer, parse_listen_address, run_checks


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":9102", ("", 9102)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("[::1]:9102", ("::1", 9102)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_parse_listen_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["9102", "host:", "h:x", ":70000", "::1:80", "[::1]80"])
def test_parse_listen_address_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_listen_address(text)


def test_run_checks_lists_each_and_fails_on_any() -> None:
    def boom() -> tuple[bool, str]:
        raise RuntimeError("kaput")

    ok, body = run_checks({"a": lambda: (True, ""), "b": lambda: (False, "api unreachable for 42s"), "c": boom})
    assert not ok
    assert body.splitlines() == [
        "[+]a ok",
        "[-]b failed: api unreachable for 42s",
        "[-]c failed: RuntimeError: kaput",
        "check failed",
    ]
    assert run_checks({}) == (True, "ok\n")


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers.get("Content-Type", "")


class Flag:
    def __init__(self) -> None:
        self.ok = False

    def __call__(self) -> tuple[bool, str]:
        return (self.ok, "synced" if self.ok else "waiting for the first list")


@pytest.fixture
def served() -> Iterator[tuple[ServingServer, Flag, CollectorRegistry]]:
    registry = CollectorRegistry()
    Gauge("tidemark_test_value", "A value.", registry=registry).set(42)
    Counter("tidemark_test_events", "Events.", ["reason"], registry=registry).labels("x").inc(3)
    ready = Flag()
    server = ServingServer("127.0.0.1:0", registry, healthz={"loops": lambda: (True, "")}, readyz=ready).start()
    yield server, ready, registry
    server.stop()


def test_metrics_health_and_readiness_over_http(served: tuple[ServingServer, Flag, CollectorRegistry]) -> None:
    server, ready, _ = served
    base = f"http://127.0.0.1:{server.port}"
    assert server.port > 0 and server.address == f"127.0.0.1:{server.port}"
    status, body, ctype = get(base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert "tidemark_test_value 42.0" in body and 'tidemark_test_events_total{reason="x"} 3.0' in body
    assert get(base + "/healthz")[:2] == (200, "[+]loops ok\nok\n")
    status, body, _ = get(base + "/readyz")
    assert status == 500 and "[-]ready failed: waiting for the first list" in body
    ready.ok = True
    assert get(base + "/readyz")[:2] == (200, "[+]ready ok: synced\nok\n")
    assert get(base + "/nope")[0] == 404


def test_metrics_filters_by_name_and_serves_openmetrics(served: tuple[ServingServer, Flag, CollectorRegistry]) -> None:
    server, _, _ = served
    base = f"http://127.0.0.1:{server.port}"
    _, body, _ = get(base + "/metrics?name[]=tidemark_test_value")
    assert "tidemark_test_value" in body and "tidemark_test_events" not in body
    req = urllib.request.Request(base + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        assert resp.read().decode().endswith("# EOF\n")


def test_all_interfaces_address_serves_ipv4_loopback() -> None:
    server = ServingServer(":0", CollectorRegistry()).start()
    try:
        assert get(f"http://127.0.0.1:{server.port}/healthz")[:2] == (200, "ok\n")
    finally:
        server.stop()


def test_a_taken_port_is_an_error_at_start() -> None:
    first = ServingServer("127.0.0.1:0", CollectorRegistry()).start()
    try:
        with pytest.raises(OSError):
            ServingServer(f"127.0.0.1:{first.port}", CollectorRegistry()).start()
    finally:
        first.stop()
