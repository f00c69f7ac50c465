"""`tidemark-scheduler run` with Volcano's own vc-scheduler Deployment args and the seed guide's conf,
on a real kube-apiserver 1.20 (RBAC: the manifest's rules).

The args are those of Volcano's installer chart (scheduler.yaml), unchanged, including `-v=3` and the
literal `2>&1`; only what a shared test apiserver needs is added or made unique: `--kubeconfig`
(in-cluster config in a Deployment), `--listen-address` and `--healthz-address` on free ports (the
defaults :8080 and :11251 may be taken here), `--scheduler-name` and the conf's path. The scheduler
must start, serve /healthz where `--enable-healthz` puts it, bind a pod, log one warning line per
flag without effect (`--node-worker-threads`, `2>&1`) and no other warning about flags, and stop
cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    USER,
    create_node,
    create_pod,
    free_port,
    http_status,
    node_of,
    scheduler_name,
    wait_for,
)

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

CLI = Path(sys.executable).with_name("tidemark-scheduler")
REPO = Path(__file__).resolve().parents[3]
#: Volcano's vc-scheduler Deployment args (installer/helm/chart/volcano/templates/scheduler.yaml)
VOLCANO_ARGS = (
    "--logtostderr",
    "--scheduler-conf=/volcano.scheduler/volcano-scheduler.conf",
    "--enable-healthz=true",
    "--enable-metrics=true",
    "--leader-elect=false",
    "--kube-api-qps=2000",
    "--kube-api-burst=2000",
    "--schedule-period=1s",
    "--node-worker-threads=20",
    "-v=3",
    "2>&1",
)


def test_volcano_deployment_args_and_the_seed_conf(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    assert CLI.exists(), f"{CLI} (the console script of the editable install)"
    conf = tmp_path / "volcano-scheduler.conf"
    conf.write_text((REPO / "examples" / "volcano-scheduler.conf").read_text())  # the seed guide's conf
    port, healthz = free_port(), free_port()
    args = [a.replace("/volcano.scheduler/volcano-scheduler.conf", str(conf)) for a in VOLCANO_ARGS]
    cmd = [str(CLI), "run", *args,
           f"--kubeconfig={kube.server.kubeconfig_path(USER)}",
           f"--listen-address=127.0.0.1:{port}",
           f"--healthz-address=127.0.0.1:{healthz}",
           f"--scheduler-name={scheduler_name(kube)}",
           "--log-format=json"]
    log_path = tmp_path / "scheduler.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: proc.poll() is not None or http_status(f"http://127.0.0.1:{healthz}/healthz") == 200,
                 "/healthz on --healthz-address")
        assert proc.poll() is None, log_path.read_text()
        wait_for(lambda: http_status(f"http://127.0.0.1:{port}/readyz") == 200, "ready")
        create_node(admin, kube, cpu="8", memory="16Gi")
        create_pod(admin, kube, "p-0", scheduler_name(kube), cpu="500m", memory="256Mi")
        wait_for(lambda: node_of(admin, kube.name).get("p-0"), "the pod bound")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    warnings = [rec["msg"] for rec in lines if rec["level"] == "WARNING"]
    flag_lines = [w for w in warnings if "vc-scheduler" in w]
    assert len(flag_lines) == 2, warnings
    assert flag_lines[0].startswith("--node-worker-threads=20 accepted for vc-scheduler compatibility")
    assert flag_lines[1] == "argument '2>&1' ignored (as vc-scheduler ignores it)"
    assert not any("unrecognized" in rec["msg"] for rec in lines)
