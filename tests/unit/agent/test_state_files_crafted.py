"""Issue 33 item 7: crafted state files are set aside, never raised out of a loader.

A non-ASCII digit (`²`: `str.isdigit()` says yes, `int()` says no) in a journal value or a profile bucket key
raised out of the loaders (`restore` exited 1 with a traceback, the agent's start raised); `٣` loaded as bucket
3; a checkpoint with `half_life: 1e-300` loaded and then overflowed at every fold. Each loader below must
return (empty or without the bad entry), keep the file for a human, and say so in one ERROR line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent.act.statedir import Journal, ProfileCheckpoint, QosClasses
from agent.act.tc_writer import TcJournal
from agent.cli import main as agent_main
from agent.decide.profile import CHECKPOINT_KIND, CHECKPOINT_VERSION
from agent.model import ProfileState

NOW = 1_700_000_000.0


def _hist(buckets: dict[str, float]) -> dict[str, object]:
    return {"reference": NOW - 60, "buckets": buckets}


def _checkpoint(buckets: dict[str, float] | None = None, half_life: float = 43200.0) -> dict[str, object]:
    return {
        "kind": CHECKPOINT_KIND, "version": CHECKPOINT_VERSION, "folded": NOW - 60,
        "half_life": {"cpu": half_life, "memory": 86400.0},
        "node": {"first": NOW - 3600, "last": NOW - 60, "seconds": 3540.0, "cpu": [], "memory": []},
        "pods": {"u1": {"first": NOW - 600, "last": NOW - 60, "cpu": _hist(buckets or {"3": 1.0}),
                        "memory": _hist({"1": 1.0})}},
    }


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("key", ["²", "٣", "３", "3\n"])
def test_profile_bucket_keys_of_non_ascii_digits_set_the_checkpoint_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str
) -> None:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps(_checkpoint({key: 1.0})))
    cp = ProfileCheckpoint(str(path), fsync=False)
    state = cp.load(NOW)
    assert state == ProfileState() and not path.exists()
    assert len(list(tmp_path.glob("profiles.json.corrupt-*"))) == 1
    assert len(_errors(caplog)) == 1 and "bucket" in _errors(caplog)[0]


@pytest.mark.parametrize("half_life", [1e-300, 1e-9, 1e300])
def test_a_checkpoint_half_life_outside_the_configurable_range_is_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, half_life: float
) -> None:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps(_checkpoint(half_life=half_life)))
    state = ProfileCheckpoint(str(path), fsync=False).load(NOW)
    assert state == ProfileState() and not path.exists()
    assert len(_errors(caplog)) == 1 and "half_life" in _errors(caplog)[0]


@pytest.mark.parametrize(("file", "value"), [
    ("blkio.throttle.read_bps_device", "8:0 ²"),
    ("io.max", "8:0 rbps=²"),
    ("io.max", "8:0 rbps=١٢"),
    ("cpu.shares", "１０２４"),
])
def test_journal_values_with_non_ascii_digits_are_rejected_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, file: str, value: str
) -> None:
    path = tmp_path / "journal.json"
    good = {"path": "/sys/fs/cgroup/cpu/kubepods", "file": "cpu.shares", "original": "1024", "written": "2"}
    bad = {"path": "/sys/fs/cgroup/blkio/kubepods", "file": file, "original": value, "written": value}
    path.write_text(json.dumps({"version": 1, "knobs": [good, bad], "procs": []}))
    j = Journal(str(path), fsync=False)
    j.load()
    assert len(j.knobs) == 1 and len(j.rejected) == 1
    assert len(list(tmp_path.glob("journal.json.rejected-*"))) == 1


def test_restore_names_a_journal_entry_with_a_non_ascii_digit_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    bad = {"path": "/sys/fs/cgroup/blkio/kubepods", "file": "blkio.throttle.read_bps_device",
           "original": "8:0 ²", "written": "8:0 ²"}
    (state / "journal.json").write_text(json.dumps({"version": 1, "knobs": [bad], "procs": []}))
    rc = agent_main(["restore", "--state-dir", str(state), "--cgroup-root", str(tmp_path / "cg"),
                     "--proc-root", str(tmp_path / "proc")])
    err = capsys.readouterr().err
    # exit 1 is restore's "not everything could be restored" (the entry is rejected and named), not a crash
    assert rc == 1 and "Traceback" not in err and "knobs[0] rejected" in err and "8:0 ²" in err


@pytest.mark.parametrize("pods", [
    [1, 2],
    {"u1": {"level": -1, "seen": "yesterday"}},
    {"u1": {"level": -1, "seen": [1]}},
    {"u1": {"level": 99, "pod": "p"}},
    {"u1": {"level": -1, "seen": 1e400}},
    "pods",
])
def test_qos_classes_of_a_crafted_shape_are_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, pods: object
) -> None:
    path = tmp_path / "qos-classes.json"
    path.write_text(json.dumps({"version": 1, "pods": pods}))
    q = QosClasses(str(path), fsync=False)
    q.load()
    assert q.levels == {} and not path.exists()
    assert len(list(tmp_path.glob("qos-classes.json.corrupt-*"))) == 1 and len(_errors(caplog)) == 1


def test_qos_classes_keep_good_entries(tmp_path: Path) -> None:
    path = tmp_path / "qos-classes.json"
    path.write_text(json.dumps({"version": 1, "pods": {"u1": {"level": -1, "pod": "b/x", "seen": 5.0}}}))
    q = QosClasses(str(path), fsync=False)
    q.load()
    assert q.levels["u1"].level == -1 and path.exists()


@pytest.mark.parametrize("record", [
    '{"index": 1e400, "ifb": "tmq1"}',
    '{"index": "١٢", "ifb": "tmq12"}',
    '{"index": 3, "ifb": "tmq3", "download_bps": 1e400}',
    '{"index": 3, "ifb": "tmq3", "netns": "²"}',
])
def test_tc_journal_records_with_crafted_numbers_are_left_out_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, record: str
) -> None:
    path = tmp_path / "netqos-journal.json"
    path.write_text('{"version": 1, "links": {"good": {"index": 4, "ifb": "tmq4"}, "bad": ' + record + "}}")
    j = TcJournal(str(path), fsync=False)
    j.load()
    assert list(j.links) == ["good"]
    assert len(_errors(caplog)) == 1 and "bad" in _errors(caplog)[0]
