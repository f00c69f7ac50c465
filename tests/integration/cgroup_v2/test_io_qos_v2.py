"""I/O QoS on a real cgroup v2 kernel (the lane's VM, or a v2 host), driven by the AGENT's plan: `tidemark-agent
plan` on a kubelet-shaped tree with `io_qos.devices` naming a loop disk (a loop device over a file, ext4, mounted;
tests/fixtures/blockdev.py), its `io.max` / `io.weight` writes applied through the executor (journaled), then put
back by `restore`.

dd, started inside the pods' container groups, measures (dd's own figures):

- a direct writer in the offline pod, held at `io_qos.offline_write_bps` (an eighth of the disk's unlimited rate
  in the run, 1-16 MiB/s) while the limit is in place (the pod
  level's `io.max` holds its container: v2 limits are hierarchical), unthrottled before and after the restore;
- a buffered writer with fsync in the offline pod, held too: v2 attributes page-cache writeback to the cgroup
  that dirtied the pages (cgroup writeback, memory + io controllers), unlike v1;
- a buffered writer without fsync, then `sync` from outside the pod: the writeback is still the pod's (held);
- a direct writer in the online pod, never limited.

Rates are asserted as ratios of the limit with room (TCG runs code about 10x slower; the host is shared); the
figures are recorded as properties and printed (`pytest -s`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import Journal
from agent.cli import main
from agent.decide.ops import SetCgroupValue
from agent.knobs import IO_KNOBS
from tests.fixtures.blockdev import LoopDisk, Transfer, dd, loop_disk, skip_reason
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.fixtures.cgroups import MiB
from tests.fixtures.vm import in_vm
from tests.integration.agent.test_real_cgroups import report
from tidemark.clock import SystemClock

pytestmark = [pytest.mark.cgroup_v2]

ONLINE = "0a1b2c3d-0000-4000-8000-00000000e001"
OFFLINE = "0a1b2c3d-0000-4000-8000-00000000f002"


def limit_for(unlimited: Transfer) -> int:
    """offline_write_bps for the run (reads unlimited): an eighth of the unlimited rate, 1-16 MiB/s in whole MiB.
    Under TCG on a loaded host the VM's disk moves 4-25 MiB/s: a fixed limit would sometimes not bite at all."""
    return max(1, min(16, int(unlimited.rate / 8 / MiB))) * MiB


CLUSTER = """\
kind: Node
metadata:
  name: n1
  labels: {{volcano.sh/colocation: "true"}}
status:
  allocatable: {{cpu: "2", memory: 1Gi, pods: "110"}}
---
kind: Pod
metadata: {{name: web, namespace: shop, uid: {online}, creationTimestamp: "2024-01-01T00:00:00Z"}}
spec:
  nodeName: n1
  containers: [{{name: app, resources: {{requests: {{cpu: 500m, memory: 64Mi}}}}}}]
status: {{qosClass: Burstable, containerStatuses: [{{name: app, containerID: "containerd://{a}"}}]}}
---
kind: Pod
metadata:
  name: crunch
  namespace: batch
  uid: {offline}
  annotations: {{volcano.sh/qos-level: BE}}
  creationTimestamp: "2024-01-01T01:00:00Z"
spec:
  nodeName: n1
  containers: [{{name: job}}]
status: {{qosClass: BestEffort, containerStatuses: [{{name: job, containerID: "containerd://{b}"}}]}}
"""


@pytest.fixture
def disk() -> Iterator[LoopDisk]:
    reason = skip_reason()
    if reason:
        if in_vm():
            pytest.fail(f"inside the cgroup v2 VM, but: {reason}")
        pytest.skip(reason)
    with loop_disk(256) as d:
        yield d


def agent_io_plan(
    tree: RealCgroupV2Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str], device: str, limit: int
) -> tuple[list[SetCgroupValue], list[str]]:
    """`tidemark-agent plan` on the tree with the loop disk managed: its block I/O writes and explanations."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER.format(online=ONLINE, offline=OFFLINE, a="a" * 64, b="b" * 64))
    conf = tmp_path / "agent.yaml"
    conf.write_text(
        f'io_qos:\n  devices: ["{device}"]\n  offline_write_bps: {limit}\n  offline_read_bps: 0\n'
        "  offline_read_iops: 0\n  offline_write_iops: 0\n"
    )
    argv = ["plan", "--node-name", "n1", "--cluster", str(cluster), "--config", str(conf)]
    argv += ["--kube-cgroup-root", tree.kube_cgroup_root, "--samples", "1", "--interval", "0.2", "-o", "json"]
    rc = main(argv, clock=SystemClock())
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    writes = [SetCgroupValue(w["path"], w["file"], w["value"]) for w in doc["cgroup_writes"] if w["file"] in IO_KNOBS]
    return writes, doc["explanations"]


def write(where: list[str], disk: LoopDisk, name: str, mib: int, *flags: str) -> Transfer:
    return dd(where, "if=/dev/zero", f"of={os.path.join(disk.mount, name)}", "bs=1M", f"count={mib}", *flags)


def test_io_max_from_the_plan_holds_direct_and_buffered_writers_and_is_restored(
    real_cgroup_v2: RealCgroupV2Tree,
    disk: LoopDisk,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
) -> None:
    tree = real_cgroup_v2
    tree.add_pod(ONLINE, "Burstable", {"app": "containerd://" + "a" * 64}, cpu_request_milli=500)
    tree.add_pod(OFFLINE, "BestEffort", {"job": "containerd://" + "b" * 64})
    pod = tree.pods[OFFLINE].dirs.cpu
    if not os.path.exists(os.path.join(pod, "io.max")):
        pytest.fail("no io.max in the pod group: the io controller is not enabled below the root")
    job = [tree.pods[OFFLINE].containers["job"].cpu]
    web = [tree.pods[ONLINE].containers["app"].cpu]

    before = write(job, disk, "before", 32, "oflag=direct")
    limit = limit_for(before)
    mib = 3 * limit // MiB  # about 3 s at the limit
    writes, notes = agent_io_plan(tree, tmp_path, capsys, disk.number, limit)
    line = f"{disk.number} rbps=max wbps={limit} riops=max wiops=max"
    assert (pod, "io.max", line) in {(w.path, w.file, w.value) for w in writes}
    assert all(w.path == pod for w in writes)  # the offline pod's level: never the online pod
    assert any(f"({disk.number}, configured" in n and "has no effect there" in n for n in notes), notes
    journal = Journal(str(tmp_path / "journal.json"), fsync=False)
    writer = CgroupWriter(journal, roots=[tree.kubepods.cpu])
    result = writer.apply(writes)
    assert not result.failed and not result.invalid, (result.failed, result.invalid)
    assert tree.read(pod, "io.max") == line

    limited = write(job, disk, "limited", mib, "oflag=direct")
    buffered_fsync = write(job, disk, "buffered-fsync", mib, "conv=fsync")
    buffered = write(job, disk, "buffered", mib)
    t0 = time.monotonic()
    subprocess.run(["sync", "-f", disk.mount], check=True)  # from outside the pod: still the pod's writeback
    synced = Transfer(buffered.bytes, time.monotonic() - t0)
    online = write(web, disk, "online", 32, "oflag=direct")

    restored = writer.restore_all()
    assert len(restored.applied) == len(writes) and not journal.knobs
    assert disk.number not in tree.read(pod, "io.max")
    after = write(job, disk, "after", 32, "oflag=direct")

    figures = {
        "offline direct write, unlimited": before,
        "offline direct write, limited": limited,
        "offline buffered write + fsync, limited": buffered_fsync,
        "offline buffered write (no fsync), limited": buffered,
        "its writeback by a sync from outside the pod": synced,
        "online direct write while the offline pod is limited": online,
        "offline direct write after the restore": after,
    }
    record_property("io.max wbps MiB/s", limit // MiB)
    report(f"v2 io.max wbps {limit // MiB} MiB/s ({mib} MiB per limited run)")
    for name, t in figures.items():
        report(f"v2 {name}: {t}")
        record_property(name, round(t.rate / MiB, 2))
    assert limited.rate <= 1.3 * limit, limited
    assert buffered_fsync.rate <= 1.3 * limit, buffered_fsync  # cgroup writeback: v2 holds buffered writes
    assert synced.rate <= 1.3 * limit, synced
    assert before.rate >= 2 * limit and after.rate >= 2 * limit, (before, after)
    assert online.rate >= 2 * limit, online
