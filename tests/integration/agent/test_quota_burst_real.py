"""Volcano's per-pod CPU burst on the machine's real cgroup v1 hierarchy: `plan` wants `cpu.cfs_burst_us` from the
pod's annotations, the executor writes it (journaled), the kernel lets a bursty process use it (`cpu.stat`
counts the bursts), and `restore` puts the originals back. The v2 twin is in tests/integration/cgroup_v2/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import StateDir
from agent.cli import main
from agent.decide.ops import SetCgroupValue
from tests.fixtures.cgroups import RealCgroupV1Tree, RealProcess

pytestmark = [pytest.mark.cgroup]

UID = "0a1b2c3d-0000-4000-8000-00000000c003"
CID = f"containerd://{'c' * 64}"
#: sleeps 250 ms, then spins for 40 ms of its own CPU time (not wall time: the host may be loaded): a 20 ms/100 ms
#: quota throttles each spin; a 15 ms burst covers most of it
_BURSTY = r"""
import sys, time
sys.stdin.readline()
while True:
    time.sleep(0.25)
    end = time.process_time() + 0.04
    while time.process_time() < end:
        pass
"""


def cluster(path: Path, annotations: dict[str, str]) -> str:
    path.write_text(
        f"""\
kind: Node
metadata:
  name: n1
  labels: {{volcano.sh/colocation: "true", volcano.sh/oversubscription: "true"}}
status:
  allocatable: {{cpu: "2", memory: 8Gi, pods: "110"}}
---
kind: Pod
metadata: {{name: web, namespace: shop, uid: {UID}, creationTimestamp: "2024-01-01T00:00:00Z",
           annotations: {json.dumps(annotations)}}}
spec:
  nodeName: n1
  containers: [{{name: app, resources: {{requests: {{cpu: 200m, memory: 64Mi}}, limits: {{cpu: 200m, memory: 64Mi}}}}}}]
status: {{qosClass: Guaranteed, containerStatuses: [{{name: app, containerID: "{CID}"}}]}}
"""
    )
    return str(path)


def knob(directory: str, file: str) -> str:
    return Path(directory, file).read_text().strip()


def stat(directory: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in Path(directory, "cpu.stat").read_text().splitlines())}


def bursty(tree: RealCgroupV1Tree, target: str) -> RealProcess:
    popen = subprocess.Popen([sys.executable, "-c", _BURSTY], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    proc = RealProcess(popen.pid, popen, 0)
    tree.processes.append(proc)
    os.sched_setaffinity(popen.pid, {0})
    for ctrl in ("cpu", "cpuacct"):
        Path(target.replace("/cpu/", f"/{ctrl}/", 1), "cgroup.procs").write_text(str(popen.pid))
    assert popen.stdin is not None
    popen.stdin.write(b"go\n")
    popen.stdin.flush()
    return proc


def test_quota_burst_is_planned_written_used_and_restored(
    real_cgroup_v1: RealCgroupV1Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = real_cgroup_v1
    tree.add_pod(UID, "Guaranteed", {"app": CID}, cpu_request_milli=200, cpu_limit_milli=200)
    pod, app = tree.pods[UID].dirs.cpu, tree.pods[UID].containers["app"].cpu
    if not os.path.exists(os.path.join(app, "cpu.cfs_burst_us")):
        pytest.skip("this kernel has no cpu.cfs_burst_us (CONFIG_CFS_BANDWIDTH burst: Linux >= 5.14)")
    assert knob(app, "cpu.cfs_quota_us") == "20000" and knob(app, "cpu.cfs_burst_us") == "0"
    annotations = {"volcano.sh/enable-quota-burst": "true", "volcano.sh/quota-burst-time": "15000"}
    flags = ["--kube-cgroup-root", tree.kube_cgroup_root, "--samples", "1", "--interval", "0.2", "-o", "json"]
    rc = main(["plan", "--node-name", "n1", "--cluster", cluster(tmp_path / "c.yaml", annotations), *flags])
    out, err = capsys.readouterr()
    assert rc == 0, err
    bursts = [w for w in json.loads(out)["cgroup_writes"] if w["file"] == "cpu.cfs_burst_us"]
    assert sorted((w["path"], w["value"]) for w in bursts) == sorted([(app, "15000"), (pod, "15000")])

    proc = bursty(tree, app)
    time.sleep(1.0)
    before = stat(app)
    time.sleep(3.0)
    mid = stat(app)
    assert mid["nr_bursts"] == before["nr_bursts"]  # no burst allowed yet: each spin is throttled
    assert mid["nr_throttled"] > before["nr_throttled"]

    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    writes = [SetCgroupValue(w["path"], w["file"], w["value"]) for w in bursts]
    result = CgroupWriter(state.journal, roots=tree.kubepods.distinct()).apply(writes)
    assert not result.failed and not result.invalid and len(result.applied) == 2, result
    assert knob(app, "cpu.cfs_burst_us") == "15000" and knob(pod, "cpu.cfs_burst_us") == "15000"
    assert {(e.file, e.original, e.written) for e in state.journal.knobs.values()} == {
        ("cpu.cfs_burst_us", "0", "15000")
    }
    time.sleep(3.0)
    after = stat(app)
    print(
        "v1 quota burst: 3 s of a 40 ms spin every 250 ms in a 20 ms/100 ms quota: "
        f"{mid['nr_throttled'] - before['nr_throttled']} throttled periods and no burst before; "
        f"{after['nr_bursts'] - mid['nr_bursts']} bursts "
        f"({(after['burst_time'] - mid['burst_time']) / 1e6:.0f} ms) and {after['nr_throttled'] - mid['nr_throttled']} "
        "throttled periods with the 15 ms burst",
        file=sys.__stderr__,
    )
    assert after["nr_bursts"] > mid["nr_bursts"] and after["burst_time"] > mid["burst_time"]
    assert proc.popen.poll() is None

    rc = main(["restore", "--state-dir", state.path, "--kube-cgroup-root", tree.kube_cgroup_root])
    capsys.readouterr()
    assert rc == 0
    assert knob(app, "cpu.cfs_burst_us") == "0" and knob(pod, "cpu.cfs_burst_us") == "0"
