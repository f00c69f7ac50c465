"""The client layer: token bucket on a manual clock, write-only limiting, configuration order, error taxonomy.

`request()` is exercised over real HTTP against a tiny local server (no apiserver needed) so the
translation of statuses and transport failures is pinned without mocks of urllib3.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client

from tests.unit.kube.fakes import ManualClock
from tidemark.kube.client import (
    ApiStatusError,
    KubeError,
    RateLimitedApiClient,
    TokenBucket,
    TransportError,
    load_configuration,
    new_api_client,
    request,
    request_json,
)


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    clock = ManualClock(0.0)
    slept: list[float] = []
    b = TokenBucket(qps=2.0, burst=3, clock=clock, sleep=slept.append)
    assert [b.reserve() for _ in range(5)] == [0.0, 0.0, 0.0, 0.5, 1.0]  # waiters queue in call order
    clock.advance(1.0)  # two tokens back, both already promised
    assert b.reserve() == 0.5
    clock.advance(10.0)
    assert [b.try_take() for _ in range(4)] == [True, True, True, False]  # refill caps at burst
    assert b.take() == 0.5 and slept == [0.5]


def test_token_bucket_unlimited_when_qps_is_not_positive() -> None:
    b = TokenBucket(qps=0, burst=1, clock=ManualClock())
    assert all(b.reserve() == 0.0 for _ in range(100)) and b.try_take()


def test_only_write_calls_pass_the_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(k8s_client.ApiClient, "call_api", lambda self, method, url, *a, **k: seen.append(method))
    bucket = TokenBucket(qps=1.0, burst=1, clock=ManualClock(), sleep=lambda s: None)
    api = RateLimitedApiClient(k8s_client.Configuration(host="http://127.0.0.1:1"), bucket)
    for method in ("GET", "GET", "POST", "PATCH", "PUT", "DELETE"):
        api.call_api(method, "http://x/")
    assert seen == ["GET", "GET", "POST", "PATCH", "PUT", "DELETE"]
    assert bucket.reserve() == pytest.approx(4.0)  # 4 writes took 1 burst token + 3 borrowed


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://{host}:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _kubeconfig(path: Path, host: str) -> Path:
    path.write_text(KUBECONFIG.replace("{host}", host))
    return path


def test_configuration_prefers_the_flag_then_kubeconfig_env_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = _kubeconfig(tmp_path / "flag", "flag.example")
    env = _kubeconfig(tmp_path / "env", "env.example")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    _kubeconfig(home / ".kube" / "config", "home.example")
    monkeypatch.setenv("HOME", str(home))
    assert load_configuration(str(flag), environ={}).host == "https://flag.example:6443"
    assert load_configuration(None, environ={"KUBECONFIG": str(env)}).host == "https://env.example:6443"
    cfg = load_configuration(None, environ={})
    assert cfg.host == "https://home.example:6443" and cfg.api_key["BearerToken"] == "Bearer secret-token"
    monkeypatch.setenv("HOME", str(tmp_path / "nowhere"))
    with pytest.raises(KubeError, match="no Kubernetes configuration"):
        load_configuration(None, environ={})
    with pytest.raises(KubeError):
        load_configuration(str(tmp_path / "missing"), environ={})


def test_new_api_client_sizes_the_pool_and_rate_limits(tmp_path: Path) -> None:
    api = new_api_client(str(_kubeconfig(tmp_path / "k", "h.example")), qps=5, burst=7, pool_size=32)
    assert api.configuration.connection_pool_maxsize == 32
    assert (api.limiter.qps, api.limiter.burst) == (5.0, 7)
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == 32


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith("/ok"):
            self._reply(200, json.dumps({"path": self.path, "auth": self.headers.get("Authorization")}).encode())
        elif self.path == "/missing":
            status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": 'pods "x" not found'}
            self._reply(404, json.dumps(status).encode())
        else:
            self._reply(502, b"bad gateway from a proxy", "text/plain")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._reply(201, json.dumps({"got": json.loads(body), "ctype": self.headers["Content-Type"]}).encode())


@pytest.fixture
def http_api() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    cfg = k8s_client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    cfg.api_key = {"authorization": "t0k"}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    yield new_api_client(configuration=cfg)
    server.shutdown()
    server.server_close()


def test_request_decodes_json_sends_auth_and_encodes_queries(http_api: Any) -> None:
    body = request_json(http_api, "GET", "/ok", query={"labelSelector": "a=b,c", "watch": True})
    assert body["auth"] == "Bearer t0k"
    assert body["path"] == "/ok?labelSelector=a%3Db%2Cc&watch=true"
    reply = request(http_api, "POST", "/p", body={"x": 1}, content_type="application/merge-patch+json")
    assert reply.status == 201 and reply.body == {"got": {"x": 1}, "ctype": "application/merge-patch+json"}


def test_request_translates_statuses_and_transport_failures(http_api: Any) -> None:
    with pytest.raises(ApiStatusError) as info:
        request(http_api, "GET", "/missing")
    assert (info.value.status, info.value.reason, info.value.message) == (404, "NotFound", 'pods "x" not found')
    with pytest.raises(ApiStatusError) as info:
        request(http_api, "GET", "/proxy")
    assert info.value.status == 502 and info.value.message == "bad gateway from a proxy" and info.value.body is None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    http_api.configuration.host = f"http://127.0.0.1:{closed_port}"
    with pytest.raises(TransportError):
        request(http_api, "GET", "/ok", timeout=(1.0, 1.0))
