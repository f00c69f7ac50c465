"""Two `tidemark-scheduler run` processes (the real command line) with leader election on a real
kube-apiserver 1.20 (RBAC: the manifest's rules): the leader is SIGKILLed while pods keep arriving,
the other takes over, and no pod is ever bound twice. SIGTERM stops the survivor cleanly and
releases the Lease.

Binds are counted by a watch of the namespace (tidemark.kube.reflector): every change of a pod's
spec.nodeName is recorded; each pod must go from unbound to one node exactly once. Short lease
timings (3s / 2s / 500ms) keep the takeover within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    CONF,
    USER,
    create_node,
    create_pod,
    free_port,
    http_status,
    node_of,
    scheduler_name,
    scrape,
    wait_for,
)
from tidemark.kube.client import request_json
from tidemark.kube.reflector import Reflector
from tidemark.kube.resources import LEASES, PODS

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

CLI = Path(sys.executable).with_name("tidemark-scheduler")


class BindWatch:
    """Records every spec.nodeName change of the namespace's pods (a pod bound twice shows up here)."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.changes: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self.reflector = Reflector.for_resource(api, PODS, namespace=namespace, on_change=self._on_change,
                                                timeout_seconds=60)

    def _on_change(self, etype: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            return
        before = ((old or {}).get("spec") or {}).get("nodeName") or ""
        after = (new.get("spec") or {}).get("nodeName") or ""
        if after != before:
            with self._lock:
                self.changes.setdefault(new["metadata"]["name"], []).append(after)

    def bound(self) -> int:
        with self._lock:
            return sum(1 for v in self.changes.values() if v)


def _start(kube: KubeNamespace, tmp_path: Path, tag: str, port: int) -> subprocess.Popen[bytes]:
    args = [
        str(CLI), "run",
        f"--kubeconfig={kube.server.kubeconfig_path(USER)}",
        f"--scheduler-conf={tmp_path / 'volcano-scheduler.conf'}",
        f"--scheduler-name={scheduler_name(kube)}",
        "--schedule-period=200ms",
        f"--listen-address=127.0.0.1:{port}",
        "--leader-elect",
        f"--lock-object-namespace={kube.name}",
        "--leader-elect-lease-duration=3s",
        "--leader-elect-renew-deadline=2s",
        "--leader-elect-retry-period=500ms",
        "--log-format=json",
    ]
    log = open(tmp_path / f"scheduler-{tag}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _leader(ports: dict[str, int]) -> list[str]:
    out = []
    for tag, port in ports.items():
        try:
            if scrape(f"http://127.0.0.1:{port}/metrics")["tidemark_scheduler_leader"][()] == 1.0:
                out.append(tag)
        except (OSError, KeyError):
            continue
    return out


def test_killing_the_leader_hands_over_without_double_binds(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    assert CLI.exists(), f"{CLI} (the console script of the editable install)"
    (tmp_path / "volcano-scheduler.conf").write_text(CONF)
    create_node(admin, kube, cpu="100", memory="400Gi")
    create_node(admin, kube, cpu="100", memory="400Gi")
    ports = {"a": free_port(), "b": free_port()}
    procs = {tag: _start(kube, tmp_path, tag, port) for tag, port in ports.items()}
    watch = BindWatch(admin, kube.name)
    watch.reflector.start()
    try:
        for tag, port in ports.items():
            wait_for(lambda port=port: http_status(f"http://127.0.0.1:{port}/readyz") == 200, f"{tag} ready")
        leaders = wait_for(lambda: (found := _leader(ports)) and len(found) == 1 and found, "exactly one leader")
        leader = leaders[0]
        survivor = "b" if leader == "a" else "a"
        assert watch.reflector.wait_for_sync(10)
        name = scheduler_name(kube)
        created: list[str] = []
        for i in range(30):
            create_pod(admin, kube, f"p-{i:03d}", name, cpu="100m", memory="64Mi")
            created.append(f"p-{i:03d}")
        wait_for(lambda: watch.bound() >= 5, "the leader binding")
        procs[leader].send_signal(signal.SIGKILL)  # no release: the survivor waits out the lease
        procs[leader].wait(10)
        for i in range(30, 60):
            create_pod(admin, kube, f"p-{i:03d}", name, cpu="100m", memory="64Mi")
            created.append(f"p-{i:03d}")
        wait_for(lambda: _leader({survivor: ports[survivor]}) == [survivor], "the survivor leads", timeout=20)
        wait_for(lambda: all(node_of(admin, kube.name).get(p) for p in created), "every pod bound", timeout=30)
        wait_for(lambda: watch.bound() == 60, "the watch saw every bind")
        twice = {p: v for p, v in watch.changes.items() if len(v) != 1}
        assert not twice, f"pods whose nodeName changed more than once: {twice}"
        final = node_of(admin, kube.name)
        assert all(watch.changes[p] == [final[p]] for p in created)
        samples = scrape(f"http://127.0.0.1:{ports[survivor]}/metrics")["tidemark_scheduler_binds_total"]
        assert samples.get((("result", "conflict"),), 0.0) == 0.0, "the survivor never tried to bind a bound pod"
        # SIGTERM: a clean stop that releases the Lease
        procs[survivor].send_signal(signal.SIGTERM)
        assert procs[survivor].wait(20) == 0
        lease = request_json(admin, "GET", LEASES.object_path("tidemark-scheduler", kube.name))
        assert lease["spec"].get("holderIdentity", "") == "", lease["spec"]
    finally:
        watch.reflector.stop()
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(10)
        for tag in ports:
            log_path = tmp_path / f"scheduler-{tag}.log"
            if log_path.exists() and os.environ.get("TIDEMARK_TEST_SHOW_LOGS"):
                sys.stderr.write(log_path.read_text()[-3000:])
