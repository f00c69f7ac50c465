"""The agent's urllib3-only client (tidemark/kube/lite.py): what it loads, what it leaves to the official client, the
token file's re-read, and real requests over HTTP and over TLS with a client certificate (a local server, openssl's
certificates); and that the agent's path never imports `kubernetes`."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.unit.kube.fakes import ManualClock
from tidemark.kube import lite
from tidemark.kube.client import KubeError, TokenBucket, TransportError, new_api_client, request, request_json

REPO = Path(__file__).resolve().parents[3]


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any], extra: str = "") -> Path:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "x",
           "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
           "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}},
                        {"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "n"}}]}  # fmt: skip
    path.write_text(json.dumps(doc) + extra)  # JSON is YAML
    return path


def test_a_token_kubeconfig_loads_with_its_server_and_verification(tmp_path: Path) -> None:
    cfg = lite.from_kubeconfig(str(_kubeconfig(tmp_path / "k", {"server": "https://h:6443/", "insecure-skip-tls-verify":
                                                                   True}, {"token": "t"})))  # fmt: skip
    assert cfg == lite.LiteConfig("https://h:6443", token="t", verify=False)


def test_certificates_load_from_data_and_from_paths_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(b"CA")
    (tmp_path / "pki" / "tok").write_text("from-file\n")
    user = {"client-certificate-data": base64.b64encode(b"CERT").decode(), "client-key": "pki/../pki/key.pem",
            "tokenFile": "pki/tok"}  # fmt: skip
    (tmp_path / "pki" / "key.pem").write_bytes(b"KEY")
    cluster = {"server": "https://h", "certificate-authority": "pki/ca.crt", "tls-server-name": "api"}
    cfg = lite.from_kubeconfig(str(_kubeconfig(tmp_path / "k", cluster, user)))
    assert cfg is not None
    assert (cfg.ca, cfg.cert, cfg.key, cfg.token, cfg.verify, cfg.server_name) == (b"CA", b"CERT", b"KEY", None, True,
                                                                                    "api")  # fmt: skip
    assert cfg.token_file == str(tmp_path / "pki" / "tok")


@pytest.mark.parametrize(
    ("cluster", "user"),
    [({}, {"exec": {"command": "aws"}}), ({}, {"auth-provider": {"name": "gcp"}}), ({}, {"username": "a",
     "password": "b"}), ({}, {"token": "t", "as": "someone"}), ({"proxy-url": "http://proxy:3128"}, {"token": "t"})],
)  # fmt: skip
def test_what_only_the_official_client_does_is_left_to_it(tmp_path: Path, cluster: dict[str, Any],
                                                          user: dict[str, Any]) -> None:  # fmt: skip
    path = _kubeconfig(tmp_path / "k", {"server": "https://h", **cluster}, user)
    assert lite.from_kubeconfig(str(path)) is None


@pytest.mark.parametrize(
    ("text", "words"),
    [("[1, 2]", "not a kubeconfig"), ("a: [", "not YAML"), (None, "cannot read"),
     ('{"current-context": "x", "contexts": []}', "no context named 'x'"),
     ('{"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}], "clusters": [{"name": "c", '
      '"cluster": {}}]}', "has no server"),
     ('{"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}], "clusters": [{"name": "c", '
      '"cluster": {"server": "https://h", "certificate-authority-data": "%%%"}}]}', "not base64"),
     ('{"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}], "clusters": [{"name": "c", '
      '"cluster": {"server": "https://h", "certificate-authority": "gone.crt"}}]}', "cannot read")],
)  # fmt: skip
def test_a_broken_kubeconfig_is_a_kube_error_naming_what_is_wrong(tmp_path: Path, text: str | None, words: str) -> None:
    path = tmp_path / "k"
    if text is not None:
        path.write_text(text)
    with pytest.raises(KubeError, match=words):
        lite.from_kubeconfig(str(path))


def test_a_named_context_wins_over_the_current_one(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "k", {"server": "https://h"}, {"token": "t"})
    assert lite.from_kubeconfig(str(path), "other") is not None
    with pytest.raises(KubeError, match="no context named 'nope'"):
        lite.from_kubeconfig(str(path), "nope")


def test_in_cluster_reads_the_service_account_and_brackets_ipv6(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa")
    (tmp_path / "ca.crt").write_bytes(b"CA")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert lite.in_cluster(env, str(tmp_path)) == lite.LiteConfig("https://[fd00::1]:443", ca=b"CA",
                                                                   token_file=str(tmp_path / "token"))  # fmt: skip
    assert lite.in_cluster({}, str(tmp_path)) is None
    assert lite.in_cluster(env, str(tmp_path / "none")) is None


def test_the_token_file_is_read_again_after_its_period_and_a_vanished_file_keeps_the_last(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("one\n")
    clock = ManualClock(0.0)
    api = lite.LiteApiClient(lite.LiteConfig("http://h", token_file=str(tok)), TokenBucket(0, 1), pool_size=1,
                             user_agent="t", clock=clock)  # fmt: skip
    assert api.bearer() == "one"
    tok.write_text("two")
    clock.advance(lite.TOKEN_PERIOD - 1)
    assert api.bearer() == "one"  # within the period: no read
    clock.advance(1)
    assert api.bearer() == "two"
    tok.unlink()
    clock.advance(lite.TOKEN_PERIOD)
    assert api.bearer() == "two"
    fresh = lite.LiteApiClient(lite.LiteConfig("http://h", token_file=str(tok)), TokenBucket(0, 1), pool_size=1,
                               user_agent="t")  # fmt: skip
    with pytest.raises(KubeError, match="cannot read"):
        fresh.bearer()


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _echo(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.dumps({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"),
                           "agent": self.headers.get("User-Agent"), "ctype": self.headers.get("Content-Type"),
                           "body": json.loads(self.rfile.read(n)) if n else None}).encode()  # fmt: skip
        self.send_response(404 if self.path.startswith("/missing") else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = _echo


def _serve(server: ThreadingHTTPServer) -> Iterator[int]:
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def http_port() -> Iterator[int]:
    yield from _serve(ThreadingHTTPServer(("127.0.0.1", 0), _Echo))


def test_requests_carry_the_token_the_agent_and_the_query_and_writes_take_the_bucket(http_port: int) -> None:
    bucket = TokenBucket(qps=1.0, burst=1, clock=ManualClock(), sleep=lambda s: None)
    api = lite.LiteApiClient(lite.LiteConfig(f"http://127.0.0.1:{http_port}", token="t0k"), bucket, pool_size=2,
                             user_agent="tidemark-agent/n1")  # fmt: skip
    got = request_json(api, "GET", "/api/v1/pods", query={"labelSelector": "a=b,c", "watch": True})
    assert got["path"] == "/api/v1/pods?labelSelector=a%3Db%2Cc&watch=true"
    assert (got["auth"], got["agent"], got["method"]) == ("Bearer t0k", "tidemark-agent/n1", "GET")
    assert bucket.reserve() == 0.0  # a read took no token
    bucket = api.limiter = TokenBucket(qps=1.0, burst=1, clock=ManualClock(), sleep=lambda s: None)
    got = request_json(api, "PATCH", "/api/v1/nodes/n1", body={"a": 1}, content_type="application/merge-patch+json")
    assert (got["body"], got["ctype"]) == ({"a": 1}, "application/merge-patch+json")
    request_json(api, "POST", "/x", body=[{"op": "add"}])
    assert bucket.reserve() == pytest.approx(2.0)  # two writes: the burst token and one borrowed
    with pytest.raises(KubeError) as info:
        request(api, "GET", "/missing")
    assert getattr(info.value, "status", None) == 404


def test_no_answer_is_a_transport_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = lite.LiteApiClient(lite.LiteConfig(f"http://127.0.0.1:{port}"), TokenBucket(0, 1), pool_size=1,
                             user_agent="t")  # fmt: skip
    with pytest.raises(TransportError):
        request(api, "GET", "/", timeout=(1.0, 1.0))


def _pki(d: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, by openssl (EC keys: fast)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
        "-out", "ca.crt", "-days", "2", "-subj", "/CN=test-ca")  # fmt: skip
    for name, subj in (("server", "/CN=127.0.0.1"), ("client", "/CN=system:node:n1")):
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", subj)  # fmt: skip
        (d / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
            f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")  # fmt: skip


class _WhoAmI(_Echo):
    def _echo(self) -> None:
        peer = self.connection.getpeercert()  # type: ignore[attr-defined]
        cn = dict(x[0] for x in peer["subject"])["commonName"] if peer else None
        body = json.dumps({"cn": cn}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _echo


def test_tls_verifies_the_server_and_presents_the_client_certificate_of_a_kubeconfig(tmp_path: Path) -> None:
    _pki(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "ca.crt"))
    ctx.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    ctx.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WhoAmI)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    for port in _serve(server):
        cluster = {"server": f"https://127.0.0.1:{port}",
                   "certificate-authority-data": base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()}
        user = {"client-certificate": "client.crt", "client-key": "client.key"}
        api = new_api_client(str(_kubeconfig(tmp_path / "kubeconfig", cluster, user)), lite=True)
        assert isinstance(api, lite.LiteApiClient)
        assert request_json(api, "GET", "/api")["cn"] == "system:node:n1"
        # a server the kubeconfig's CA did not sign is refused
        other = tmp_path / "other"
        other.mkdir()
        _pki(other)
        cluster["certificate-authority-data"] = base64.b64encode((other / "ca.crt").read_bytes()).decode()
        wrong = new_api_client(str(_kubeconfig(tmp_path / "wrong", cluster, user)), lite=True)
        with pytest.raises(TransportError):
            request(wrong, "GET", "/api", timeout=(2.0, 2.0))


def test_new_api_client_falls_back_to_the_official_client_for_an_exec_plugin(tmp_path: Path) -> None:
    plugin = {"command": "true", "apiVersion": "client.authentication.k8s.io/v1"}
    path = _kubeconfig(tmp_path / "k", {"server": "https://h"}, {"exec": plugin})
    api = new_api_client(str(path), lite=True)
    assert not isinstance(api, lite.LiteApiClient) and api.configuration.host == "https://h"


def test_the_agents_client_path_does_not_import_the_official_client(tmp_path: Path) -> None:
    """The point of the module: the agent's process never loads `kubernetes` (about 20 MiB on every node)."""
    path = _kubeconfig(tmp_path / "k", {"server": "https://h", "insecure-skip-tls-verify": True}, {"token": "t"})
    code = (
        "import sys, agent.cli, agent.daemon.runner, agent.daemon.cluster, agent.act.node_writer, "
        "agent.act.report_writer, agent.act.report_evictor, tidemark.kube.events, tidemark.kube.reflector\n"
        "from tidemark.kube.client import new_api_client\n"
        f"api = new_api_client({str(path)!r}, lite=True)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'requests', 'pydantic'))\n"
        "print(type(api).__name__, bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout  # fmt: skip
    assert out.strip() == "LiteApiClient []"
