"""The file layer: pure parsers and a reader that never raises."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.cgroups.fs import FileReader, Pressure, parse_cpu_max, parse_int, parse_keyed, parse_pids, parse_pressure


def test_parse_int() -> None:
    assert parse_int("123\n") == 123
    assert parse_int("-1") == -1
    assert parse_int("max") is None
    assert parse_int("") is None


def test_parse_keyed_skips_malformed_lines() -> None:
    text = "usage_usec 100\nuser_usec 60\nbroken\nnr_periods x\nthrottled_usec 5\n"
    assert parse_keyed(text) == {"usage_usec": 100, "user_usec": 60, "throttled_usec": 5}


def test_parse_pressure_some_and_full() -> None:
    text = "some avg10=1.50 avg60=2.00 avg300=0.10 total=123\nfull avg10=0.25 avg60=0.00 avg300=0.00 total=9\n"
    assert parse_pressure(text) == Pressure(1.5, 0.25)
    assert parse_pressure("some avg10=3.00 avg60=0 avg300=0 total=0") == Pressure(3.0, None)
    assert parse_pressure("garbage") is None
    assert parse_pressure("some avg10=x") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max 100000", (None, 100000)),
        ("50000 100000", (50000, 100000)),
        ("20000", (20000, 100000)),
        ("x y", None),
        ("", None),
        ("1 2 3", None),
    ],
)
def test_parse_cpu_max(text: str, expected: object) -> None:
    assert parse_cpu_max(text) == expected


def test_parse_pids() -> None:
    assert parse_pids("1\n22\n\nabc\n333\n") == (1, 22, 333)
    assert parse_pids("²\n٣\n4") == (4,)  # str.isdigit() accepts these; int() does not (or should not)


def test_reader_counts_missing_and_errors(tmp_path: Path) -> None:
    reader = FileReader()
    (tmp_path / "f").write_text("42\n")
    assert reader.read_int(str(tmp_path / "f")) == 42
    assert reader.read(str(tmp_path / "absent")) is None
    assert reader.read(str(tmp_path / "f" / "under-a-file")) is None  # ENOTDIR: a vanished cgroup
    assert reader.stats.missing == 2
    if os.geteuid() != 0:
        (tmp_path / "locked").write_text("1")
        (tmp_path / "locked").chmod(0)
        assert reader.read(str(tmp_path / "locked")) is None
        assert reader.stats.errors == 1
    assert reader.read(str(tmp_path)) is None  # a directory: EISDIR is an error, not missing
    assert reader.stats.errors >= 1
    assert reader.stats.reads == (4 if os.geteuid() == 0 else 5)


def test_reader_keyed_none_when_missing(tmp_path: Path) -> None:
    assert FileReader().read_keyed(str(tmp_path / "memory.stat")) is None


@given(st.text())
def test_parsers_never_raise(text: str) -> None:
    parse_int(text)
    parse_keyed(text)
    parse_pressure(text)
    parse_cpu_max(text)
    parse_pids(text)
