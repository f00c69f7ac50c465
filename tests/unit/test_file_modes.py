"""Hardening round 2, item 11: files and directories are created with the narrowest mode, and no mode
the program did not create is changed.

Before: the rejected-journal copy was 0644 (the journal is 0600), the state directory's missing parents
(and the network QoS journal's directory) 0755, and `webhook-certs.sh --output DIR` chmodded DIR (and
every `*.key` in it) whatever DIR was. Every test runs under umask 022, the usual one.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.act.statedir import JOURNAL, StateDir
from agent.act.tc_writer import TcJournal

SCRIPT = Path(__file__).resolve().parents[2] / "daemonset" / "webhook" / "webhook-certs.sh"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def _umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_rejected_journal_copy_is_as_private_as_the_journal(tmp_path: Path) -> None:
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    journal = tmp_path / "state" / JOURNAL
    journal.write_text(json.dumps({"knobs": [{"path": "relative", "file": "cpu.shares"}], "procs": []}))
    journal.chmod(0o600)
    state.load()
    assert state.journal.rejected
    (copy,) = (tmp_path / "state").glob(f"{JOURNAL}.rejected-*")
    assert _mode(copy) == 0o600
    assert copy.read_bytes() == journal.read_bytes()


def test_a_second_rejection_in_the_same_second_keeps_the_first_copy(tmp_path: Path) -> None:
    """The copy is created exclusively (never through a file or link someone else put there)."""
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    journal = tmp_path / "state" / JOURNAL
    journal.write_text(json.dumps({"knobs": [{"path": "relative", "file": "cpu.shares"}], "procs": []}))
    state.load()
    state.load()
    copies = list((tmp_path / "state").glob(f"{JOURNAL}.rejected-*"))
    assert copies and all(_mode(c) == 0o600 for c in copies)


def test_the_state_dir_and_its_missing_parents_are_created_0700(tmp_path: Path) -> None:
    StateDir(str(tmp_path / "a" / "b" / "state")).ensure()
    for path in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "state"):
        assert _mode(path) == 0o700, path


def test_an_existing_state_dir_keeps_its_mode(tmp_path: Path) -> None:
    """kubelet makes a hostPath `DirectoryOrCreate` 0755: not the agent's to change."""
    existing = tmp_path / "state"
    existing.mkdir()
    existing.chmod(0o755)
    StateDir(str(existing)).ensure()
    assert _mode(existing) == 0o755


def test_the_network_qos_journal_directory_is_created_0700(tmp_path: Path) -> None:
    journal = TcJournal(str(tmp_path / "new" / "netqos.json"), fsync=False)
    journal.save()
    assert _mode(tmp_path / "new") == 0o700
    assert _mode(tmp_path / "new" / "netqos.json") == 0o600


needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def _certs(out: Path) -> None:
    subprocess.run(["bash", str(SCRIPT), "--output", str(out), "--no-kubectl"], check=True, capture_output=True,
                   timeout=120)


@needs_openssl
def test_webhook_certs_leaves_an_existing_output_directory_and_its_files_alone(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(0o755)
    foreign = out / "other.key"
    foreign.write_text("not ours\n")
    foreign.chmod(0o644)
    _certs(out)
    assert _mode(out) == 0o755
    assert _mode(foreign) == 0o644
    for name in ("ca.key", "tls.key"):
        assert _mode(out / name) == 0o600, name
    for name in ("ca.crt", "tls.crt"):
        assert _mode(out / name) & 0o077 == 0, name  # nothing of the CA's files for group or others


@needs_openssl
def test_webhook_certs_creates_a_missing_output_directory_0700(tmp_path: Path) -> None:
    out = tmp_path / "new" / "certs"
    _certs(out)
    assert _mode(out) == 0o700
    assert _mode(tmp_path / "new") == 0o700
    assert _mode(out / "ca.key") == 0o600


@needs_openssl
def test_webhook_certs_rerun_in_its_own_directory_keeps_the_keys_private(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    _certs(out)
    (out / "ca.key").chmod(0o644)  # e.g. copied around by hand since: the rotation writes a new key file
    _certs(out)
    assert _mode(out / "ca.key") == 0o600
