"""The executors without side effects on the machine: the state dir and the cgroup writer on fake kubelet trees.

Fake trees are plain files (tests/fixtures/cgroups.py): the kernel's refusals (EINVAL on shares of an
idle group, EBUSY) are injected through the writer's `write` hook; the real ones are exercised in
tests/integration/agent_live/.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.act.cgroup_writer import CgroupWriter, write_file
from agent.act.statedir import Journal, KnobEntry, QosClasses, StateDir, atomic_write_json, locked, same
from agent.decide.ops import SetCgroupValue, SetProcessValue
from agent.knobs import order_key, validate_cgroup_value
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
    assert saved["knobs"][1]["resets"] == {"cpu.shares": "512"}  # what the kernel resets when idle changes
    restored = writer.restore_all()
    assert order == [("cpu.idle", "0"), ("cpu.shares", "512"), ("cpu.cfs_quota_us", "-1")]
    assert len(restored.applied) == 3
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
    # applied: cpu.idle=0 and then the shares it resets, back to kubelet's 512
    assert result.released == 1 and len(result.applied) == 2 and len(journal) == 0
    assert tree.read(p1, "cpu.shares") == "512"


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


def test_a_refused_write_backs_off_instead_of_being_retried_every_period(
    kubelet_cgroup_tree: Tree, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the same refused write was tried again on every decision (about 100 ms) with a WARNING each time.
    Now it waits 1 s, then 2, 4... (up to 60 s), is logged at the 1st, 2nd, 4th... refusal, and any value of
    that knob waits with it; the other knobs are written as usual, and one that lands ends its back-off."""
    from agent.act.cgroup_writer import RETRY_MAX

    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    p1, p2 = tree.pods["u1"].dirs, tree.pods["u2"].dirs
    now = [100.0]
    refuse = [True]
    tries: list[str] = []

    def write(path: str, value: str) -> None:
        if path.startswith(p1.cpu + "/cpu.cfs_quota_us"):
            tries.append(value)
            if refuse[0]:
                raise OSError(errno.EINVAL, "Invalid argument")
        write_file(path, value)

    writer = CgroupWriter(journal, roots=tree.kubepods.distinct(), write=write, monotonic=lambda: now[0])
    belief = _belief(tree, "u1", "u2")

    periods = [0]

    def period(value: str = "4000") -> Any:
        periods[0] += 1  # the other knob changes every period: it is written every period
        return writer.apply([SetCgroupValue(p1.cpu, "cpu.cfs_quota_us", value),
                             SetCgroupValue(p2.cpu, "cpu.shares", str(100 + periods[0]))], belief=belief)

    with caplog.at_level(logging.WARNING, logger="agent.act.cgroup_writer"):
        first = period()
        assert [o.file for o in first.failed] == ["cpu.cfs_quota_us"] and first.deferred == 0
        for _ in range(9):  # the next 0.9 s of 100 ms periods: held back, another value of the knob too
            now[0] += 0.1
            held = period("3000")
            assert held.deferred == 1 and not held.failed and [o.file for o in held.applied] == ["cpu.shares"]
        assert tries == ["4000"]
        waits, failed_at = [], 100.0
        for _ in range(8):  # tried again only when each back-off ends: 1, 2, 4, 8, 16, 32, 60, 60 s
            while not period().failed:
                now[0] += 0.1
            waits.append(round(now[0] - failed_at))
            failed_at = now[0]
        assert waits == [1, 2, 4, 8, 16, 32, 60, 60] and len(tries) == 9
    warned = [r for r in caplog.records if "cpu.cfs_quota_us" in r.getMessage()]
    assert len(warned) == 4, [r.getMessage() for r in warned]  # the 1st, 2nd, 4th and 8th of 9 refusals
    refuse[0] = False
    now[0] += RETRY_MAX
    landed = period("3000")
    assert {o.file for o in landed.applied} == {"cpu.cfs_quota_us", "cpu.shares"}
    assert tree.read(p1, "cpu.cfs_quota_us") == "3000" and not writer.refused
    now[0] += 0.1
    refuse[0] = True
    assert period("2000").failed  # a refusal after a success starts again at 1 s, tried at once
    assert writer.refused and len(writer.refused) == 1
    now[0] += 3 * RETRY_MAX  # not asked for again (its pod gone): forgotten at the next batch
    writer.apply([], belief=belief)
    assert not writer.refused


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
    (proc / "4242" / "stat").write_text("4242 (python) S " + " ".join(["0"] * 18) + " 777 " + " ".join(["0"] * 32))
    writer = CgroupWriter(journal, proc_root=tree.proc_root)
    oom = {4242: "0"}
    result = writer.apply([], [SetProcessValue(4242, "oom_score_adj", "1000")], oom_belief=oom, proc_owner={4242: "u2"})
    assert len(result.applied) == 1 and (proc / "4242" / "oom_score_adj").read_text() == "1000"
    assert journal.procs[4242].start == 777 and journal.procs[4242].original == "0"
    # PID reused
    (proc / "4242" / "stat").write_text("4242 (other) S " + " ".join(["0"] * 18) + " 999 " + " ".join(["0"] * 32))
    result = writer.restore_all()
    assert result.released == 1 and (proc / "4242" / "oom_score_adj").read_text() == "1000"


# --- crafted journals (#13 D3: a writable journal must not become a host file write) ------------------------


def _plant(state_dir: Path, knobs: list[object], procs: list[object] = (), **extra: object) -> Path:  # type: ignore[assignment]
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "journal.json"
    path.write_text(json.dumps({"version": 1, "knobs": knobs, "procs": list(procs), **extra}))
    return path


def _k(path: str, file: str, original: object, written: object, **more: object) -> dict[str, object]:
    return {"path": path, "file": file, "original": original, "written": written, **more}


def test_loading_rejects_crafted_entries_and_keeps_the_rest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = _k("/cg/cpu/kubepods/podx", "cpu.idle", "0", "1", pod="u", since=1.0)
    path = _plant(
        tmp_path,
        [
            good,
            _k("/cg/cpu/kubepods/podx/../../../../etc", "cpu.shares", "2", "2"),  # traversal
            _k("etc/cron.d", "cpu.shares", "2", "2"),  # relative
            _k("/etc", "../passwd", "root", "x"),  # foreign file names
            _k("/cg/cpu/kubepods", "release_agent", "", "/tmp/x"),
            _k("/cg/cpu/kubepods", "cgroup.procs", "1", "1"),
            _k("/cg/cpu/kubepods", "cpu.cfs_period_us", "100000", "50000"),  # declared, never written
            _k("/cg/cpu/kubepods/podx", "cpu.shares", "99999999999999999999999", "2"),  # absurd values
            _k("/cg/memory/kubepods/podx", "memory.max", "1e400", "max"),
            _k("/cg/cpu/kubepods/podx", "cpu.max", "max 100000", "max 100000\n/etc/passwd"),
            _k("/cg/cpu/kubepods/podx", "cpu.weight", 100, "1"),  # not a string
            _k("/cg/cpu/kubepods/podx", "cpu.idle", "0", "1", previous="7"),
            _k("/cg/cpu/kubepods/podx", "cpu.idle", "0", "1"),  # a second entry for the same file
            _k("/cg/cpu/kubepods/pody", "cpu.idle", "0", "1", mode="0777"),  # unknown field
            "cpu.idle",
        ],
        [
            {"pid": 42, "start": 7, "original": "0", "written": "1000"},
            {"pid": 43, "start": 7, "original": "0", "written": "1000", "file": "../../etc/shadow"},
            {"pid": -1, "start": 7, "original": "0", "written": "1000"},
            {"pid": True, "start": 7, "original": "0", "written": "1000"},
            {"pid": "44", "start": 7, "original": "0", "written": "1000"},
            {"pid": 45, "start": 7, "original": "-5000", "written": "1000"},
        ],
        proc_root="/tmp/evil-proc",
    )
    j = Journal(str(path))
    with caplog.at_level("ERROR"):
        j.load()
    assert list(j.knobs.values()) == [KnobEntry("/cg/cpu/kubepods/podx", "cpu.idle", "0", "1", None, "u", 1.0)]
    assert list(j.procs) == [42]
    assert len(j.rejected) == 19 and all("rejected" in r for r in j.rejected)
    assert "knobs[1] rejected" in caplog.text and "not a normalized absolute path" in caplog.text
    assert "release_agent is not a knob this agent writes" in caplog.text
    assert j.proc_root == "/proc"  # never taken from the journal
    assert any(n.startswith("journal.json.rejected-") for n in os.listdir(tmp_path))
    # a journal that is not an object of lists is set aside as a whole, as a corrupt one
    _plant(tmp_path / "s2", [], [])
    (tmp_path / "s2" / "journal.json").write_text(json.dumps({"knobs": {"a": 1}}))
    bad = Journal(str(tmp_path / "s2" / "journal.json"))
    bad.load()
    assert len(bad) == 0 and any(n.startswith("journal.json.corrupt-") for n in os.listdir(tmp_path / "s2"))


def test_restore_command_restores_only_under_the_given_roots(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Path traversal, symlink escapes (a directory and a file), a group outside kubepods, a foreign file and an
    absurd value next to genuine entries: the genuine ones are restored, nothing else is touched, exit 1."""
    from agent.cli import main

    tree, _ = _setup(kubelet_cgroup_tree, tmp_path)
    p1, p2 = tree.pods["u1"].dirs, tree.pods["u2"].dirs
    tree.write(p1, "cpu.idle", 1)
    tree.write(p2, "cpu.idle", 1)
    outside = tmp_path / "host-etc"
    outside.mkdir()
    for name in ("cpu.shares", "memory.limit_in_bytes"):
        (outside / name).write_text("2\n")
    (outside / "cpu.cfs_quota_us").write_text("20000\n")
    escape_dir = os.path.join(os.path.dirname(p2.cpu), "podevil")  # inside besteffort, pointing outside
    os.symlink(outside, escape_dir)
    quota_link = os.path.join(p1.cpu, "cpu.cfs_quota_us")  # the file itself a symlink to the outside
    os.remove(quota_link)
    os.symlink(outside / "cpu.cfs_quota_us", quota_link)
    machine_group = os.path.dirname(tree.kubepods.cpu)  # the cpu hierarchy's root group: not kubepods
    Path(machine_group, "cpu.shares").write_text("2\n")
    proc = Path(tree.proc_root)
    tree.add_process("u2", 4242, oom_score_adj=1000)
    (proc / "4242" / "stat").write_text("4242 (python) S " + " ".join(["0"] * 18) + " 777 " + " ".join(["0"] * 32))
    state = tmp_path / "state"
    _plant(
        state,
        [
            _k(p1.cpu, "cpu.idle", "0", "1"),
            _k(p2.cpu, "cpu.idle", "0", "1"),
            _k(str(outside), "cpu.shares", "1024", "2"),
            _k(escape_dir, "cpu.shares", "1024", "2"),
            _k(p1.cpu, "cpu.cfs_quota_us", "-1", "20000"),
            _k(machine_group, "cpu.shares", "1024", "2"),
            _k(p2.cpu + "/../../../../../host-etc", "cpu.shares", "1024", "2"),
            _k(p2.memory, "memory.limit_in_bytes", "1e400", "2"),
            _k(str(outside), "notify_on_release", "1", "2"),
        ],
        [{"pid": 4242, "start": 777, "original": "0", "written": "1000", "pod": "u2"}],
        proc_root=str(outside),  # a journal naming its own /proc is not believed
    )
    rc = main(["restore", "--state-dir", str(state), *tree.cli_args()])
    out, err = capsys.readouterr()
    assert rc == 1
    assert tree.read(p1, "cpu.idle") == "0" and tree.read(p2, "cpu.idle") == "0"
    assert (proc / "4242" / "oom_score_adj").read_text() == "0"
    assert (outside / "cpu.shares").read_text() == "2\n" and (outside / "memory.limit_in_bytes").read_text() == "2\n"
    assert (outside / "cpu.cfs_quota_us").read_text() == "20000\n"
    assert Path(machine_group, "cpu.shares").read_text() == "2\n"
    assert "restored 3 of 10 journaled value(s)" in out and "4 skipped" in out and "3 rejected" in out
    assert err.count("skipped:") == 4 and err.count("rejected:") == 3
    assert "resolves to" in err and "is a symlink" in err and "outside the kubepods cgroups" in err
    # the skipped entries stay for a restore with the right roots; the rejected ones are gone from the journal
    kept = json.loads((state / "journal.json").read_text())
    assert len(kept["knobs"]) == 4 and not kept["procs"]
    assert any(n.startswith("journal.json.rejected-") for n in os.listdir(state))


def test_restore_command_with_a_clean_journal_exits_0(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.cli import main

    tree, _ = _setup(kubelet_cgroup_tree, tmp_path)
    p1 = tree.pods["u1"].dirs
    state = StateDir(str(tmp_path / "state"))
    writer = CgroupWriter(state.journal, roots=tree.kubepods.distinct())
    state.ensure()
    writer.apply([SetCgroupValue(p1.cpu, "cpu.idle", "1"), SetCgroupValue(p1.cpu, "cpu.shares", "2")],
                 belief=_belief(tree, "u1"))  # fmt: skip
    assert tree.read(p1, "cpu.shares") == "2"
    # the wrong roots (kubelet's default root, not this tree's): skipped and kept, exit 1
    rc = main(["restore", "--state-dir", state.path, "--cgroup-root", tree.cgroup_root, "--kube-cgroup-root", "/x"])
    assert rc == 1 and tree.read(p1, "cpu.idle") == "1" and "2 skipped" in capsys.readouterr().out
    # the right ones: restored (idle=0 before the shares: the writer's order), exit 0
    rc = main(["restore", "--state-dir", state.path, *tree.cli_args()])
    out = capsys.readouterr().out
    assert rc == 0 and "restored 2 of 2" in out and "0 skipped" in out
    assert tree.read(p1, "cpu.idle") == "0" and tree.read(p1, "cpu.shares") == "512"


def test_plan_writes_through_symlinks_are_refused(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    """A directory under kubepods that is a symlink to elsewhere, and a knob file that is a symlink: never written."""
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    p1 = tree.pods["u1"].dirs
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "cpu.shares").write_text("1024\n")
    (outside / "cpu.cfs_quota_us").write_text("-1\n")
    escape = os.path.join(os.path.dirname(p1.cpu), "podevil")
    os.symlink(outside, escape)
    os.remove(os.path.join(p1.cpu, "cpu.cfs_quota_us"))
    os.symlink(outside / "cpu.cfs_quota_us", os.path.join(p1.cpu, "cpu.cfs_quota_us"))
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    result = writer.apply(
        [SetCgroupValue(escape, "cpu.shares", "2"), SetCgroupValue(p1.cpu, "cpu.cfs_quota_us", "20000")]
    )
    assert len(result.invalid) == 1 and "resolves to" in result.invalid[0]
    assert not result.applied and [o.file for o in result.failed] == ["cpu.cfs_quota_us"]
    assert (outside / "cpu.shares").read_text() == "1024\n" and (outside / "cpu.cfs_quota_us").read_text() == "-1\n"
    assert len(journal) == 0


def test_the_daemon_replay_and_restores_skip_entries_outside_its_roots(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    """The running agent checks journal entries too: outside its roots they are neither read nor written, and kept."""
    tree, journal = _setup(kubelet_cgroup_tree, tmp_path)
    p1 = tree.pods["u1"].dirs
    tree.write(p1, "cpu.idle", 1)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "cpu.shares").write_text("2\n")
    journal.knobs[(p1.cpu, "cpu.idle")] = KnobEntry(p1.cpu, "cpu.idle", "0", "1")
    journal.knobs[(str(outside), "cpu.shares")] = KnobEntry(str(outside), "cpu.shares", "1024", "2")
    writer = CgroupWriter(journal, roots=tree.kubepods.distinct())
    replayed = writer.replay()
    assert replayed.skipped == 1 and replayed.released == 0 and len(journal) == 2
    restored = writer.restore_all()
    assert restored.skipped == 1 and [o.file for o in restored.applied] == ["cpu.idle"]
    assert tree.read(p1, "cpu.idle") == "0" and (outside / "cpu.shares").read_text() == "2\n"
    assert list(journal.knobs) == [(str(outside), "cpu.shares")]
