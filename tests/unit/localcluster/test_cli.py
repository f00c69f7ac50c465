"""`python -m localcluster run` on a machine that cannot run the real node: exit 3 with the reason, nothing made."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from localcluster import cli


def test_unsupported_host_exits_3_with_the_reason_before_touching_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cli, "host_is_supported", lambda: "needs root (kubelet, containerd, cgroups, a bridge)")
    out = io.StringIO()
    args = cli.build_parser().parse_args(["run", "--once", "--run-dir", str(tmp_path / "run")])
    assert cli.cmd_run(args, out) == cli.EXIT_UNSUPPORTED == 3
    assert "cannot run the real node: needs root" in out.getvalue()
    assert not (tmp_path / "run").exists()


def test_bad_usage_is_exit_2() -> None:
    assert cli.main(["nonsense"]) == cli.EXIT_USAGE
