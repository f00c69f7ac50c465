"""The API server goes away for 10 s and comes back: the scheduler survives, loses no bind, and binds
what arrived before the outage. Runs on a private kube-apiserver + etcd (hack/kube-apiserver.sh
start), so only this test's server is stopped: its kube-apiserver process is stopped with SIGTERM
and started again with the same command line (same port, certificates and etcd data), as a
restarted control plane would be.

During the outage the scheduler must stay healthy (/healthz does not depend on the API) and turn
unready (/readyz: the API has not answered recently), then ready again after the restart.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from scheduler_ext.run import RunOptions
from tests.fixtures.kubeapi import KubeAPIServer, KubeNamespace, _parse_env, _parse_tokens, _register_crds, _script
from tests.integration.scheduler.helpers import (
    USER,
    apply_rbac,
    create_node,
    create_pod,
    http_status,
    metric,
    node_of,
    running_scheduler,
    wait_for,
)
from tidemark.kube.client import KubeError, new_api_client, request

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

OUTAGE = 10.0


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class PrivateServer:
    """A private apiserver whose kube-apiserver process can be stopped and started again."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        env = _parse_env(data_dir / "env")
        self.server = KubeAPIServer(data_dir=data_dir, env=env, tokens=_parse_tokens(Path(env["TOKEN_FILE"])))
        self.pid = int(env["KUBE_APISERVER_PID"])
        self.argv = [a.decode() for a in Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0") if a]
        self.restarted: subprocess.Popen[bytes] | None = None

    def _port_open(self) -> bool:
        url = urlsplit(self.server.api_url)
        try:
            with socket.create_connection((url.hostname or "127.0.0.1", url.port or 443), timeout=0.5):
                return True
        except OSError:
            return False

    def stop_apiserver(self) -> None:
        """SIGTERM: it stops listening at once, then drains its long-running requests (watches)."""
        os.kill(self.pid, signal.SIGTERM)
        wait_for(lambda: not self._port_open(), "kube-apiserver to stop listening", timeout=20)

    def start_apiserver(self) -> None:
        if _alive(self.pid):  # still draining watches: this server process is ours to end
            os.kill(self.pid, signal.SIGKILL)
            wait_for(lambda: not _alive(self.pid), "the old kube-apiserver to exit", timeout=20)
        log = open(self.data_dir / "kube-apiserver.restarted.log", "wb")  # noqa: SIM115 - closed at teardown
        self.restarted = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        self.pid = self.restarted.pid
        api = new_api_client(str(self.server.kubeconfig_path("admin")))

        def ready() -> bool:
            try:
                return request(api, "GET", "/readyz", timeout=(1.0, 1.0)).status == 200
            except KubeError:
                return False

        wait_for(ready, "the restarted kube-apiserver ready", timeout=60, interval=0.1)
        api.close()

    def close(self) -> None:
        if self.restarted is not None and self.restarted.poll() is None:
            self.restarted.terminate()
            try:
                self.restarted.wait(20)
            except subprocess.TimeoutExpired:
                self.restarted.kill()
                self.restarted.wait(5)
        _script("stop", str(self.data_dir), timeout=60)  # etcd and the watchdog (the old pid is gone)


@pytest.fixture
def private(kube_apiserver: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServer]:
    """Depends on the session server only to make sure the binaries exist (or the test is skipped)."""
    data_dir = tmp_path_factory.mktemp("private-apiserver")
    started = _script("start", str(data_dir), "--authz", "RBAC", "--watch-pid", str(os.getpid()), timeout=120)
    if started.returncode != 0:
        pytest.fail(f"hack/kube-apiserver.sh start exited {started.returncode}:\n{started.stderr}", pytrace=False)
    srv = PrivateServer(data_dir)
    try:
        _register_crds(srv.server)
        yield srv
    finally:
        srv.close()


def _namespace(srv: PrivateServer) -> KubeNamespace:
    from kubernetes import client

    api = srv.server.admin_client()
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="outage")))
    return KubeNamespace(name="outage", server=srv.server, api=api, core=core, custom=client.CustomObjectsApi(api))


def test_apiserver_outage_is_survived_without_lost_binds(private: PrivateServer, tmp_path: Path) -> None:
    kube = _namespace(private)
    admin: Any = new_api_client(str(private.server.kubeconfig_path("admin")))
    apply_rbac(admin, [kube.name])
    create_node(admin, kube, cpu="100", memory="400Gi")
    with running_scheduler(kube, tmp_path=tmp_path, user=USER, scheduler_name="volcano",
                           api_stale_after=3.0, leader_elect=True) as sched:
        assert isinstance(sched.options, RunOptions)
        base = f"http://127.0.0.1:{sched.port}"
        for i in range(10):
            create_pod(admin, kube, f"before-{i}", "volcano", cpu="100m", memory="64Mi")
        wait_for(lambda: sum(1 for v in node_of(admin, kube.name).values() if v) == 10, "the first pods bound")
        # pods created just before the outage: some binds are in flight or not yet made when it starts
        for i in range(20):
            create_pod(admin, kube, f"edge-{i}", "volcano", cpu="100m", memory="64Mi")
        private.stop_apiserver()
        went_unready = False
        outage_end = time.monotonic() + OUTAGE
        while time.monotonic() < outage_end:  # the outage lasts 10 s; the scheduler is watched throughout
            assert http_status(f"{base}/healthz") == 200, "liveness must not depend on the API server"
            went_unready = went_unready or http_status(f"{base}/readyz") == 500
            time.sleep(0.2)
        assert went_unready, "/readyz reports that the API server is unreachable"
        assert sched._thread is not None and sched._thread.is_alive()
        private.start_apiserver()
        wait_for(lambda: http_status(f"{base}/readyz") == 200, "ready again after the restart", timeout=30)
        wait_for(lambda: metric(sched, "tidemark_scheduler_leader") == 1, "leading again", timeout=30)
        wait_for(lambda: all(node_of(admin, kube.name).values()), "every pod from before the outage bound",
                 timeout=30)
        for i in range(10):
            create_pod(admin, kube, f"after-{i}", "volcano", cpu="100m", memory="64Mi")
        wait_for(lambda: sum(1 for v in node_of(admin, kube.name).values() if v) == 40, "all 40 pods bound",
                 timeout=30)
        bound = metric(sched, "tidemark_scheduler_binds_total", {"result": "bound"})
        assert bound <= 40, "no pod was bound twice"
    admin.close()
