"""Issue 33 item 13: the state directory's files are regular files, created new, never followed, read bounded.

Before: the temp file of every atomic write was opened without O_EXCL/O_NOFOLLOW (a symlink planted at
`journal.json.tmp.<pid>` was written through, into its target), a FIFO at `profiles.json` blocked the agent's
start for ever, the lock file was truncated through a symlink, and a state file was read whole however big.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest

from agent.act import statedir
from agent.act.statedir import Journal, ProfileCheckpoint, StateDir, StateDirError, atomic_write_json
from agent.model import ProfileState

NOW = 1_700_000_000.0


def test_a_symlink_planted_at_the_temp_name_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path = tmp_path / "journal.json"
    os.symlink(victim, f"{path}.tmp.{os.getpid()}")
    atomic_write_json(str(path), {"version": 1, "knobs": [], "procs": []}, fsync=False)
    assert victim.read_text() == "precious\n"
    assert json.loads(path.read_text())["version"] == 1 and not path.is_symlink()
    assert not os.path.lexists(f"{path}.tmp.{os.getpid()}")
    assert (path.stat().st_mode & 0o777) == 0o600


def test_a_fifo_at_profiles_json_is_set_aside_without_blocking(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "profiles.json"
    os.mkfifo(path)
    result: list[ProfileState] = []
    loader = threading.Thread(target=lambda: result.append(ProfileCheckpoint(str(path), fsync=False).load(NOW)),
                              daemon=True)
    loader.start()
    loader.join(5.0)
    if loader.is_alive():  # blocked in open(): free it (a writer opens the FIFO) before failing
        with open(path, "w"):
            pass
        loader.join(5.0)
        pytest.fail("loading profiles.json blocked on a FIFO")
    assert result == [ProfileState()]
    assert not os.path.lexists(path) and len(list(tmp_path.glob("profiles.json.corrupt-*"))) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "regular file" in errors[0]


def test_a_symlinked_journal_is_not_followed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    entry = {"path": "/sys/fs/cgroup/cpu/kubepods", "file": "cpu.shares", "original": "1024", "written": "2"}
    elsewhere.write_text(json.dumps({"version": 1, "knobs": [entry], "procs": []}))
    path = tmp_path / "journal.json"
    os.symlink(elsewhere, path)
    j = Journal(str(path), fsync=False)
    j.load()
    assert len(j) == 0 and elsewhere.exists() and not os.path.lexists(path)
    assert any("symbolic link" in r.getMessage() for r in caplog.records)


def test_a_state_file_larger_than_the_bound_is_set_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statedir, "MAX_STATE_BYTES", 1000, raising=False)
    path = tmp_path / "journal.json"
    path.write_text(json.dumps({"version": 1, "knobs": [], "procs": [], "pad": "x" * 5000}))
    j = Journal(str(path), fsync=False)
    j.load()
    assert not path.exists() and len(list(tmp_path.glob("journal.json.corrupt-*"))) == 1


def test_a_symlinked_lock_file_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    state = tmp_path / "state"
    state.mkdir()
    os.symlink(victim, state / "lock")
    with pytest.raises(StateDirError, match="symbolic link"):
        StateDir(str(state), fsync=False).try_lock()
    assert victim.read_text() == "precious\n"


def test_the_knob_journal_is_one_line_and_never_fsynced_while_the_profiles_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal guards kernel memory (cgroup files, /proc values), which a reboot resets: the rename is all a
    killed agent needs, and the tier changes a knob every second (statedir's docstring). The usage profiles outlive
    a reboot and keep their fsync."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(statedir.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    state.journal.knobs[("/x", "cpu.idle")] = statedir.KnobEntry("/x", "cpu.idle", "0", "1", None, "uid", 5.0)
    state.journal.save()
    assert synced == []
    text = (tmp_path / "state" / "journal.json").read_text()
    assert "\n" not in text.strip() and json.loads(text)["knobs"][0]["original"] == "0"
    loaded = Journal(state.journal.path)
    loaded.load()
    assert loaded.knobs[("/x", "cpu.idle")].written == "1"
    state.profiles.save(ProfileState())
    assert synced, "the profiles' checkpoint must stay fsync'd"
