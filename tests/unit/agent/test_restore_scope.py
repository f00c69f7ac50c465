"""`restore` puts values back only into pods' cgroups and only for pods' processes (hardening round 2, item 8).

A journal is data on disk. Round 1 confined its entries to the kubepods subtrees (tests/unit/agent/test_act.py);
that still let a crafted journal "restore" the kubepods root's own memory limit, a QoS class group's shares, and
process 1's `oom_score_adj`: the agent never writes any of them (its writes go to pod and container groups, and to
the processes listed in them), so a journal naming them can only be forged. Now:

- a cgroup entry must name a pod's directory or one below it: the first component under kubepods is `pod<uid>`
  (cgroupfs) or `<prefix>-pod<uid>.slice` (systemd), or it is the Burstable/BestEffort group and the second is;
- a process entry is restored only while the process is listed in a pod-level group's `cgroup.procs` under the
  writer's kubepods roots (read from the tree itself, so a cgroup namespace's relative `/proc/<pid>/cgroup`
  paths do not matter).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import Journal, KnobEntry, ProcEntry
from agent.cgroups.podpath import pod_level
from tests.fixtures.cgroups import KubeletCgroupTree

Tree = Callable[..., KubeletCgroupTree]
CID = "containerd://" + "b" * 64
START = 777


def _stat(proc_root: str, pid: int) -> None:
    d = Path(proc_root, str(pid))
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(f"{pid} (x) S " + " ".join(["0"] * 18) + f" {START} " + " ".join(["0"] * 32))


def _k(path: str, file: str, original: str, written: str) -> dict[str, object]:
    return {"path": path, "file": file, "original": original, "written": written}


@pytest.mark.parametrize(("driver", "kube_root"), [("cgroupfs", "/"), ("systemd", "/"), ("systemd", "/kubelet.slice")])
def test_pod_level_paths(kubelet_cgroup_tree: Tree, driver: str, kube_root: str) -> None:
    tree = kubelet_cgroup_tree("v1", driver, kube_root)
    tree.add_pod("0f3c6a2e-1111-4d2b-9d7e-8a6b5c4d3e2f", "Burstable", {"c": CID}, cpu_request_milli=500)
    tree.add_pod("guaranteed-uid", "Guaranteed", {"c": CID}, cpu_request_milli=500)
    roots = tree.kubepods.distinct()
    for pod in tree.pods.values():
        assert pod_level(pod.dirs.cpu, roots) and pod_level(pod.dirs.memory, roots)
        assert pod_level(pod.containers["c"].cpu, roots)
    assert not pod_level(tree.kubepods.cpu, roots)
    assert not pod_level(tree.kubepods.memory, roots)
    assert not pod_level(tree.layout.qos("Burstable").cpu, roots)
    assert not pod_level(tree.layout.qos("BestEffort").memory, roots)
    assert not pod_level(os.path.dirname(tree.kubepods.cpu), roots)  # the hierarchy's root group
    assert not pod_level(os.path.join(tree.layout.qos("Burstable").cpu, "not-a-pod"), roots)


def test_restore_leaves_kubepods_qos_groups_and_foreign_processes_alone(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The crafted journal of the issue: the kubepods root's memory limit, a QoS group's shares, process 1's
    oom_score_adj, a process of the host outside every pod; beside them a genuine pod knob and a pod's process."""
    from agent.cli import main

    tree = kubelet_cgroup_tree("v1")
    tree.add_pod("u1", "Burstable", {"c": CID}, cpu_request_milli=500)
    p1 = tree.pods["u1"].dirs
    tree.write(p1, "cpu.idle", 1)
    tree.write(tree.kubepods, "memory.limit_in_bytes", 4096)
    burstable = tree.layout.qos("Burstable")
    tree.write(burstable, "cpu.shares", 2)
    proc = Path(tree.proc_root)
    tree.add_process("u1", 4242, oom_score_adj=1000)  # in the pod's container group
    for pid in (1, 4242, 999):
        _stat(tree.proc_root, pid)
    (proc / "1" / "oom_score_adj").write_text("1000\n")
    (proc / "999" / "oom_score_adj").write_text("1000\n")  # a host process: in no pod's cgroup.procs
    state = tmp_path / "state"
    state.mkdir()
    procs = [{"pid": pid, "start": START, "original": "-1000", "written": "1000"} for pid in (1, 999)]
    procs.append({"pid": 4242, "start": START, "original": "0", "written": "1000", "pod": "u1"})
    (state / "journal.json").write_text(
        json.dumps(
            {
                "version": 1,
                "procs": procs,
                "knobs": [
                    _k(p1.cpu, "cpu.idle", "0", "1"),
                    _k(tree.kubepods.memory, "memory.limit_in_bytes", "9223372036854771712", "4096"),
                    _k(burstable.cpu, "cpu.shares", "1024", "2"),
                ],
            }
        )
    )
    rc = main(["restore", "--state-dir", str(state), *tree.cli_args()])
    out, err = capsys.readouterr()
    assert rc == 1
    assert tree.read(p1, "cpu.idle") == "0" and (proc / "4242" / "oom_score_adj").read_text() == "0"
    assert tree.read(tree.kubepods, "memory.limit_in_bytes") == "4096"
    assert tree.read(burstable, "cpu.shares") == "2"
    assert (proc / "1" / "oom_score_adj").read_text() == "1000\n"
    assert (proc / "999" / "oom_score_adj").read_text() == "1000\n"
    assert "4 skipped" in out, out
    assert err.count("not a pod's cgroup") == 2 and err.count("not in a pod's cgroup") == 2, err


def test_the_daemon_replay_skips_non_pod_entries_and_keeps_them(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree = kubelet_cgroup_tree("v1", "systemd")
    tree.add_pod("u1", "BestEffort", {"c": CID})
    p1 = tree.pods["u1"].dirs
    tree.write(p1, "cpu.idle", 1)
    tree.write(tree.kubepods, "cpu.shares", 2)
    journal = Journal(str(tmp_path / "journal.json"), fsync=False)
    journal.knobs[(p1.cpu, "cpu.idle")] = KnobEntry(p1.cpu, "cpu.idle", "0", "1")
    journal.knobs[(tree.kubepods.cpu, "cpu.shares")] = KnobEntry(tree.kubepods.cpu, "cpu.shares", "1024", "2")
    _stat(tree.proc_root, 1)
    Path(tree.proc_root, "1", "oom_score_adj").write_text("1000\n")
    journal.procs[1] = ProcEntry(1, START, "-1000", "1000", None, "")
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct(), proc_root=tree.proc_root)
    assert writer.replay().skipped == 1 and len(journal.knobs) == 2
    restored = writer.restore_all()
    assert restored.skipped == 2 and [o.file for o in restored.applied] == ["cpu.idle"]
    assert tree.read(tree.kubepods, "cpu.shares") == "2"
    assert Path(tree.proc_root, "1", "oom_score_adj").read_text() == "1000\n"
    assert set(journal.knobs) == {(tree.kubepods.cpu, "cpu.shares")} and set(journal.procs) == {1}


def test_v2_memory_protection_on_the_ancestors_is_restorable_and_nothing_else_there(kubelet_cgroup_tree: Tree) -> None:
    """v2 memory QoS sets memory.min/low on kubepods and the Burstable group (agent.decide.memqos): those stay
    restorable; the same groups' limits, weights and the groups below a QoS group that are not pods do not."""
    from agent.cgroups.podpath import restorable

    tree = kubelet_cgroup_tree("v2", "systemd")
    roots = tree.kubepods.distinct()
    burstable = tree.layout.qos("Burstable").memory
    for path in (tree.kubepods.memory, burstable):
        assert restorable(path, "memory.min", roots) and restorable(path, "memory.low", roots)
        assert not restorable(path, "memory.max", roots) and not restorable(path, "cpu.weight", roots)
    assert not restorable(os.path.join(burstable, "other.slice"), "memory.min", roots)
    assert not restorable(os.path.dirname(tree.kubepods.memory), "memory.min", roots)
