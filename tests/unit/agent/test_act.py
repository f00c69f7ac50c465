"""The executors without side effects on the machine: the state dir and the cgroup writer on fake kubelet trees.

Fake trees are plain files (tests/fixtures/cgroups.py): the kernel's refusals (EINVAL on shares of an
idle group, EBUSY) are injected through the writer's `write` hook; the real ones are exercised in
tests/integration/agent_live/.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.act.cgroup_writer import CgroupWriter, write_file
from agent.act.statedir import Journal, KnobEntry, QosClasses, StateDir, atomic_write_json, locked, same
from agent.cgroups.knobs import order_key, validate_cgroup_value
from agent.decide.ops import SetCgroupValue, SetProcessValue
from tests.fixtures.cgroups import KubeletCgroupTree

Tree = Callable[..., KubeletCgroupTree]
CID = "containerd://" + "a" * 64


# --- the state dir ----------------------------------------------------------------------------------------


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    atomic_write_json(str(path), {"a": 1})
    atomic_write_json(str(path), {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert os.listdir(tmp_path) == ["f.json"]


def test_journal_roundtrip_and_a_corrupt_one_is_set_aside(tmp_path: Path) -> None:
    j = Journal(str(tmp_path / "journal.json"), fsync=False)
    j.knobs[("/x", "cpu.idle")] = KnobEntry("/x", "cpu.idle", "0", "1", None, "uid", 5.0)
    j.proc_root = "/host/proc"
    j.save()
    k = Journal(j.path)
    k.load()
    assert k.knobs == j.knobs and k.proc_root == "/proc"  # recorded for humans, never read back (#13 D3)
    Path(j.path).write_text("{not json")
    bad = Journal(j.path)
    bad.load()
    assert len(bad) == 0 and any(n.startswith("journal.json.corrupt-") for n in os.listdir(tmp_path))


def test_the_lock_is_exclusive(tmp_path: Path) -> None:
    a, b = StateDir(str(tmp_path / "s")), StateDir(str(tmp_path / "s"))
    with locked(a) as ok:
        assert ok and not b.try_lock()
    assert b.try_lock()
    b.unlock()


def test_first_seen_qos_levels_persist_and_later_levels_lose(tmp_path: Path) -> None:
    q = QosClasses(str(tmp_path / "q.json"), fsync=False)
    assert q.first("u1", -1, "ns/a", 1.0) == -1
    assert q.first("u1", 2, "ns/a", 2.0) == -1
    q.save()
    r = QosClasses(q.path)
    r.load()
    assert r.first("u1", 0, "ns/a", 3.0) == -1
    assert r.forget_except({"u2"}) == 1 and r.levels == {}


def test_same_ignores_whitespace_and_integer_formatting() -> None:
    assert same("100000\n", "100000") and same("max 100000", "max  100000") and same("+5", "5")
    assert not same("1", "0") and not same("max", "100")


# --- validation and order ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "value", "ok"),
    [
        ("cpu.shares", "2", True),
        ("cpu.shares", "1", False),
        ("cpu.weight", "10001", False),
        ("cpu.idle", "1", True),
        ("cpu.idle", "2", False),
        ("cpu.cfs_quota_us", "-1", True),
        ("cpu.cfs_quota_us", "999", False),
        ("cpu.max", "max 100000", True),
        ("cpu.max", "20000 100000", True),
        ("cpu.max", "20000 100000 7", False),
        ("memory.high", "max", True),
        ("memory.limit_in_bytes", "268435456", True),
        ("memory.limit_in_bytes", "lots", False),
        ("cpu.qos_level", "-1", True),
        ("cgroup.procs", "1", False),
    ],
)
def test_values_are_validated(file: str, value: str, ok: bool) -> None:
    assert (validate_cgroup_value(file, value) is None) == ok


def test_order_shares_before_idle_restore_idle_first_and_limits_by_direction() -> None:
    assert order_key("/a/p", "cpu.shares", "2", "512") < order_key("/a/p", "cpu.idle", "1", "0")
    assert order_key("/a/p", "cpu.idle", "0", "1") < order_key("/a/p", "cpu.shares", "512", "2")
    tighten_child = order_key("/a/p/c", "cpu.cfs_quota_us", "10000", "-1")
    tighten_parent = order_key("/a/p", "cpu.cfs_quota_us", "20000", "-1")
    assert tighten_child < tighten_parent
    loosen_child = order_key("/a/p/c", "cpu.cfs_quota_us", "-1", "10000")
    loosen_parent = order_key("/a/p", "cpu.cfs_quota_us", "-1", "20000")
    assert loosen_parent < loosen_child


# --- the writer ------------------------------------------------------------------------------------------


def _setup(kubelet_cgroup_tree: Tree, tmp_path: Path, **tree_options: object) -> tuple[KubeletCgroupTree, Journal]:
    tree = kubelet_cgroup_tree("v1", **tree_options)
    tree.add_pod("u1", "Burstable", {"c": CID}, cpu_request_milli=500)
    tree.add_pod("u2", "BestEffort")
    return tree, Journal(str(tmp_path / "journal.json"), fsync=False)


def _belief(tree: KubeletCgroupTree, *uids: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for uid in uids:
        pod = tree.pods[uid]
        for d in (pod.dirs, *pod.containers.values()):
            out[d.cpu] = {f: tree.read(d, f) for f in ("cpu.shares", "cpu.idle", "cpu.cfs_quota_us")}
    return out


def test_journals_before_writing_skips_no_ops_and_restores_in_order(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    p1 = tree.pods["u1"].dirs
    order: list[tuple[str, str]] = []

    def write(path: str, value: str) -> None:
        assert os.path.exists(journal.path), "the journal is on disk before the first write"
        order.append((os.path.basename(path), value))
        write_file(path, value)

    writer = CgroupWriter(journal, roots=tree.kubepods.distinct(), write=write)
    belief = _belief(tree, "u1")
    writes = [
        SetCgroupValue(p1.cpu, "cpu.idle", "1"),
        SetCgroupValue(p1.cpu, "cpu.cfs_quota_us", "20000"),
        SetCgroupValue(p1.cpu, "cpu.shares", "512"),  # already 512: a no-op
    ]
    result = writer.apply(writes, belief=belief, owner=lambda _p: "u1")
    assert order == [("cpu.cfs_quota_us", "20000"), ("cpu.idle", "1")] and result.noop == 1
    assert belief[p1.cpu]["cpu.idle"] == "1"
    saved = json.loads(Path(journal.path).read_text())
    assert {(e["file"], e["original"], e["written"]) for e in saved["knobs"]} == {
        ("cpu.idle", "0", "1"),
        ("cpu.cfs_quota_us", "-1", "20000"),
    }
    # a second write of the quota keeps the first original and remembers the previous value
    writer.apply([SetCgroupValue(p1.cpu, "cpu.cfs_quota_us", "30000")], belief=belief)
    entry = journal.knobs[(p1.cpu, "cpu.cfs_quota_us")]
    assert (entry.original, entry.written, entry.previous) == ("-1", "30000", "20000")
    order.clear()
    restored = writer.restore_all()
    assert order == [("cpu.idle", "0"), ("cpu.cfs_quota_us", "-1")] and len(restored.applied) == 2
    assert tree.read(p1, "cpu.idle") == "0" and tree.read(p1, "cpu.cfs_quota_us") == "-1" and len(journal) == 0


def test_restores_only_what_still_holds_our_value(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    p1 = tree.pods["u1"].dirs
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    writer.apply(
        [SetCgroupValue(p1.cpu, "cpu.idle", "1"), SetCgroupValue(p1.cpu, "cpu.cfs_quota_us", "20000")],
        belief=_belief(tree, "u1"),
    )
    tree.write(p1, "cpu.cfs_quota_us", 50000)  # kubelet's own value now
    result = writer.restore_all()
    assert tree.read(p1, "cpu.cfs_quota_us") == "50000" and tree.read(p1, "cpu.idle") == "0"
    assert result.released == 1 and len(result.applied) == 1 and len(journal) == 0


def test_kubelet_changing_an_owned_knob_becomes_the_new_original(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    p1 = tree.pods["u1"].dirs
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    belief = _belief(tree, "u1")
    writer.apply([SetCgroupValue(p1.cpu, "cpu.cfs_quota_us", "20000")], belief=belief)
    belief[p1.cpu]["cpu.cfs_quota_us"] = "70000"  # a reconcile read kubelet's new value
    writer.apply([SetCgroupValue(p1.cpu, "cpu.cfs_quota_us", "20000")], belief=belief)
    assert journal.knobs[(p1.cpu, "cpu.cfs_quota_us")].original == "70000"
    writer.restore_all()
    assert tree.read(p1, "cpu.cfs_quota_us") == "70000"


def test_a_failing_file_never_stops_the_others_and_leaves_no_entry(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    p1, p2 = tree.pods["u1"].dirs, tree.pods["u2"].dirs

    def write(path: str, value: str) -> None:
        if path.startswith(p1.cpu + "/cpu.idle"):
            raise OSError(errno.EINVAL, "Invalid argument")
        write_file(path, value)

    writer = CgroupWriter(journal, roots=tree.kubepods.distinct(), write=write)
    result = writer.apply(
        [SetCgroupValue(p1.cpu, "cpu.idle", "1"), SetCgroupValue(p2.cpu, "cpu.idle", "1")],
        belief=_belief(tree, "u1", "u2"),
    )
    assert [o.path for o in result.failed] == [p1.cpu] and "EINVAL" in result.failed[0].error
    assert [o.path for o in result.applied] == [p2.cpu] and tree.read(p2, "cpu.idle") == "1"
    assert list(journal.knobs) == [(p2.cpu, "cpu.idle")]


def test_nothing_is_written_when_the_journal_cannot_be_saved(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree, _ = _setup(kubelet_cgroup_tree, tmp_path)
    p1 = tree.pods["u1"].dirs
    journal = Journal(str(tmp_path / "absent-dir" / "journal.json"), fsync=False)
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    result = writer.apply([SetCgroupValue(p1.cpu, "cpu.idle", "1")], belief=_belief(tree, "u1"))
    assert result.journal_error and not result.applied and tree.read(p1, "cpu.idle") == "0" and len(journal) == 0


def test_invalid_values_and_paths_outside_kubepods_are_refused(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    outside = os.path.dirname(tree.kubepods.cpu)
    result = writer.apply(
        [
            SetCgroupValue(outside, "cpu.shares", "2"),
            SetCgroupValue(tree.pods["u1"].dirs.cpu, "cpu.shares", "0"),
            SetCgroupValue(tree.pods["u1"].dirs.cpu + "/../../x", "cpu.idle", "1"),
        ]
    )
    assert len(result.invalid) == 3 and not result.applied and len(journal) == 0


def test_replay_after_a_kill_keeps_what_was_written_and_drops_the_rest(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    """Killed between journaling and writing: the file holds `original` (dropped) or `written` (kept)."""
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    p1, p2 = tree.pods["u1"].dirs, tree.pods["u2"].dirs
    journal.knobs[(p1.cpu, "cpu.idle")] = KnobEntry(p1.cpu, "cpu.idle", "0", "1")  # the write never happened
    journal.knobs[(p2.cpu, "cpu.idle")] = KnobEntry(p2.cpu, "cpu.idle", "0", "1")
    tree.write(p2, "cpu.idle", 1)  # this one did
    journal.knobs[(p1.cpu, "cpu.cfs_quota_us")] = KnobEntry(p1.cpu, "cpu.cfs_quota_us", "-1", "30000", "20000")
    tree.write(p1, "cpu.cfs_quota_us", 20000)  # killed between journaling 30000 and writing it
    journal.save()
    again = Journal(journal.path)
    again.load()
    writer = CgroupWriter(again, roots=tree.kubepods.distinct())
    assert writer.replay().released == 1
    assert set(again.knobs) == {(p2.cpu, "cpu.idle"), (p1.cpu, "cpu.cfs_quota_us")}
    writer.restore_all()
    assert tree.read(p2, "cpu.idle") == "0" and tree.read(p1, "cpu.cfs_quota_us") == "-1"


def test_process_values_are_journaled_with_the_process_identity(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    proc = Path(tree.proc_root)
    tree.add_process("u2", 4242, oom_score_adj=0)
    (proc / "4242" / "stat").write_text("4242 (python) S " + " ".join(["0"] * 18) + " 777 0 0")
    writer = CgroupWriter(journal, proc_root=tree.proc_root)
    oom = {4242: "0"}
    result = writer.apply([], [SetProcessValue(4242, "oom_score_adj", "1000")], oom_belief=oom, proc_owner={4242: "u2"})
    assert len(result.applied) == 1 and (proc / "4242" / "oom_score_adj").read_text() == "1000"
    assert journal.procs[4242].start == 777 and journal.procs[4242].original == "0"
    (proc / "4242" / "stat").write_text("4242 (other) S " + " ".join(["0"] * 18) + " 999 0 0")  # PID reused
    result = writer.restore_all()
    assert result.released == 1 and (proc / "4242" / "oom_score_adj").read_text() == "1000"
