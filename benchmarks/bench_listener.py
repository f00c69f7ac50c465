"""Probes answered while the listeners are flooded (issue 33, item 1): the agent's listener and the webhook.

The server runs in a subprocess, built as the products build it: `tidemark.serving.ServingServer` with its
defaults (agent/daemon/runner.py; the registry here holds stand-in gauges) and
`scheduler_ext.webhook.server.WebhookServer` over TLS with its defaults (the lookups answer "absent"). A
second subprocess floods it; this process sends one probe a second on the manifests' probe paths (agent:
/healthz and /readyz, daemonset/agent/daemonset.yaml; webhook: /healthz) with kubelet's default timeout, and
reports probes answered of probes sent, with the server's RSS (VmHWM: the peak) and CPU.

Floods (`--flood`):
  linger   RATE new connections a second that send a head with an over-cap Content-Length and then neither
           send nor read, plus RATE/4 that ask for /metrics with a tiny receive buffer and never read it
           (issue 33: 28/s for the agent, 54/s for the webhook over TLS)
  slow     12 clients sending a request head one byte every 0.3 s (round 2, tests/unit/test_slow_clients.py)
  bodies   3 clients posting bodies just under the body cap, back to back (round 2,
           tests/unit/test_webhook_bodies.py)
  idle     2000 TCP connections opened and left idle

`--server aiohttp` serves the same endpoints with aiohttp (the comparison of docs/design.md, "Serving"); it
needs aiohttp importable (PYTHONPATH=DIR after `pip install --target DIR aiohttp`). To measure the code of
another checkout, set PYTHONPATH to it: the server subprocess imports tidemark from there.

    python benchmarks/bench_listener.py                      # linger flood, agent and webhook
    python benchmarks/bench_listener.py --target webhook --flood slow --server aiohttp
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

RATES = {"agent": 28.0, "webhook": 54.0}
PROBE_PATHS = {"agent": ("/healthz", "/readyz"), "webhook": ("/healthz",)}
BODY_CAP = {"agent": 64 * 1024, "webhook": 4 * 1024 * 1024}


# --- the server subprocess -------------------------------------------------------------------------------


class _Absent:
    """Lookups that find nothing (the webhook's API reads; no API server here)."""

    def pod_node(self, namespace: str, name: str, uid: str | None) -> None:
        return None

    def queue(self, name: str) -> None:
        return None

    def current(self, path: str) -> None:
        return None


def _registry() -> Any:
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    g = Gauge("tidemark_bench_value", "A stand-in for the agent's series.", ["pod", "resource"], registry=registry)
    for i in range(300):  # about 35 KiB of /metrics
        for r in ("cpu", "memory"):
            g.labels(f"pod-{i:04d}", r).set(i)
    return registry


def serve_tidemark(target: str, certs: str) -> int:
    if target == "agent":
        from tidemark.serving import ServingServer

        return ServingServer("127.0.0.1:0", _registry(), healthz={"loops": lambda: (True, "")},
                             readyz={"api": lambda: (True, "")}).start().port
    from scheduler_ext.webhook.server import WebhookServer, tls_context

    ctx = tls_context(f"{certs}/c", f"{certs}/k")
    return WebhookServer("127.0.0.1:0", ctx, _Absent()).start().port  # type: ignore[arg-type]


def serve_aiohttp(target: str, certs: str, port_file: str) -> None:
    """The same endpoints on aiohttp (what kopf uses): its defaults, the body cap as client_max_size."""
    import asyncio

    from aiohttp import web
    from prometheus_client import generate_latest

    from scheduler_ext.webhook.admission import Settings, review_response, validate

    registry = _registry() if target == "agent" else None
    lookups, settings = _Absent(), Settings()

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    async def review(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(None, lambda: review_response(
            body, lambda req: validate(req, lookups, settings)))  # type: ignore[arg-type]
        return web.json_response(reply)

    app = web.Application(client_max_size=BODY_CAP[target])
    app.router.add_get("/healthz", ok)
    app.router.add_get("/readyz", ok)
    if registry is not None:
        app.router.add_get("/metrics", metrics)
    app.router.add_post("/validate", review)
    app.router.add_post("/mutate", review)
    ctx = None
    if target == "webhook":
        from scheduler_ext.webhook.server import tls_context

        ctx = tls_context(f"{certs}/c", f"{certs}/k")

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = runner.addresses[0][1]
        Path(port_file).write_text(str(port))
        await asyncio.Event().wait()

    asyncio.run(main())


def server_main(ns: argparse.Namespace) -> None:
    if ns.server == "aiohttp":
        serve_aiohttp(ns.target, ns.certs, ns.port_file)
        return
    Path(ns.port_file).write_text(str(serve_tidemark(ns.target, ns.certs)))
    threading.Event().wait()


# --- the flood subprocess --------------------------------------------------------------------------------


def _connect(port: int, tls: ssl.SSLContext | None, rcvbuf: int = 0) -> socket.socket:
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(5)
    raw.connect(("127.0.0.1", port))
    return tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw


def _client_tls(certs: str, target: str) -> ssl.SSLContext | None:
    return ssl.create_default_context(cafile=f"{certs}/c") if target == "webhook" else None


def _linger(port: int, tls: ssl.SSLContext | None, rate: float, seconds: float, held: list[socket.socket]) -> None:
    # a head over the body cap and a first piece of body that is not a review: the webhook refuses at once
    over = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n" + b"x" * 600
    unread = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    start, n = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        n += 1
        for request, rcvbuf in ((over, 0), (unread, 2048)) if n % 4 == 0 else ((over, 0),):
            with contextlib.suppress(OSError):
                s = _connect(port, tls, rcvbuf)
                s.sendall(request)
                held.append(s)
        time.sleep(max(0.0, start + n / rate - time.monotonic()))


def _slow(port: int, tls: ssl.SSLContext | None, seconds: float, held: list[socket.socket]) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            s = _connect(port, tls)
            held.append(s)
            for i in range(len(head)):
                s.sendall(head[i : i + 1])
                time.sleep(0.3)
                if time.monotonic() > end:
                    return
        except OSError:
            time.sleep(0.1)


def _bodies(port: int, tls: ssl.SSLContext | None, size: int, seconds: float) -> None:
    inner = b"[" + b"{}," * ((size - 200) // 3 - 1) + b"{}]"
    body = (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u1","object":{"a":'
            + inner + b"}}}")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with contextlib.suppress(OSError, http.client.HTTPException):
            s = _connect(port, tls)
            s.settimeout(30)
            s.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            while s.recv(65536):
                pass
            s.close()


def flood_main(target: str, flood: str, port: int, certs: str, rate: float, seconds: float) -> None:
    tls = _client_tls(certs, target)
    held: list[socket.socket] = []
    threads: list[threading.Thread] = []
    if flood == "linger":
        n = 8 if tls else 2  # TLS handshakes: several threads keep the rate
        threads = [threading.Thread(target=_linger, args=(port, tls, rate / n, seconds, held)) for _ in range(n)]
    elif flood == "slow":
        threads = [threading.Thread(target=_slow, args=(port, tls, seconds, held)) for _ in range(12)]
    elif flood == "bodies":
        size = BODY_CAP[target] - 1024
        threads = [threading.Thread(target=_bodies, args=(port, tls, size, seconds)) for _ in range(3)]
    elif flood == "idle":
        for _ in range(2000):
            with contextlib.suppress(OSError):
                held.append(_connect(port, None))
        time.sleep(seconds)
    for t in threads:
        t.daemon = True
        t.start()
    for t in threads:
        t.join(seconds + 30)


# --- this process: probes, RSS, CPU ------------------------------------------------------------------------


def _probe(target: str, port: int, path: str, tls: ssl.SSLContext | None, timeout: float) -> bool:
    conn: http.client.HTTPConnection
    if tls is not None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _proc(pid: int) -> tuple[int, int, float]:
    """(VmRSS, VmHWM) in bytes and CPU seconds of a process."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return int(status["VmRSS"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024, cpu


def make_certs(directory: str) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", f"{directory}/k", "-out", f"{directory}/c", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)


def run(target: str, flood: str, server: str, seconds: float, rate: float, probe_timeout: float,
        certs: str) -> dict[str, Any]:
    port_file = Path(certs) / f"port-{target}-{server}"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, __file__, "--serve", "--target", target, "--server", server,
                             "--certs", certs, "--port-file", str(port_file)])
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {server} {target} server did not start")
            time.sleep(0.1)
        port = int(port_file.read_text())
        tls = _client_tls(certs, target)
        time.sleep(1.0)
        rss0, _, cpu0 = _proc(proc.pid)
        flooder = multiprocessing.Process(target=flood_main, args=(target, flood, port, certs, rate, seconds + 2))
        flooder.start()
        time.sleep(2.0)  # the flood reaches its steady state
        sent = answered = 0
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            for path in PROBE_PATHS[target]:
                sent += 1
                answered += _probe(target, port, path, tls, probe_timeout)
            time.sleep(max(0.0, start + sent / len(PROBE_PATHS[target]) - time.monotonic()))
        rss, hwm, cpu = _proc(proc.pid)
        flooder.join(60)
        if flooder.is_alive():
            flooder.terminate()
        return {"target": target, "flood": flood, "server": server, "rate": rate if flood == "linger" else None,
                "probes_sent": sent, "probes_answered": answered, "rss_idle_mib": round(rss0 / 2**20, 1),
                "rss_mib": round(rss / 2**20, 1), "hwm_mib": round(hwm / 2**20, 1),
                "cpu_percent": round(100 * (cpu - cpu0) / (time.monotonic() - start + 2.0), 1)}
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=("agent", "webhook", "both"), default="both")
    p.add_argument("--flood", choices=("linger", "slow", "bodies", "idle"), action="append")
    p.add_argument("--server", choices=("tidemark", "aiohttp"), default="tidemark")
    p.add_argument("--seconds", type=float, default=30.0, help="how long the probes run under the flood")
    p.add_argument("--rate", type=float, help="linger: new connections a second (default 28 agent, 54 webhook)")
    p.add_argument("--probe-timeout", type=float, default=1.0, help="kubelet's default timeoutSeconds")
    p.add_argument("--json", help="append the results to this JSON file")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--certs", help=argparse.SUPPRESS)
    p.add_argument("--port-file", help=argparse.SUPPRESS)
    ns = p.parse_args()
    if ns.serve:
        server_main(ns)
        return
    if shutil.which("openssl") is None:
        raise SystemExit("openssl is needed for the webhook's certificate")
    results = []
    with tempfile.TemporaryDirectory() as certs:
        make_certs(certs)
        for target in ("agent", "webhook") if ns.target == "both" else (ns.target,):
            for flood in ns.flood or ["linger"]:
                r = run(target, flood, ns.server, ns.seconds, ns.rate or RATES[target], ns.probe_timeout, certs)
                print(json.dumps(r), flush=True)
                results.append(r)
    if ns.json:
        path = Path(ns.json)
        old = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps(old + results, indent=1) + "\n")


if __name__ == "__main__":
    main()
