"""Node totals from /proc: /proc/stat busy ticks, /proc/meminfo used memory."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agent.procfs import MemInfo, ProcFS, parse_meminfo, parse_proc_stat

STAT = """cpu  16437 10 5345 45613 589 7 71 59 0 0
cpu0 6114 0 2341 25523 37 0 12 24 0 0
cpu1 10323 0 3004 20089 552 0 59 34 0 0
intr 1 2 3
"""


def test_proc_stat_busy_excludes_idle_iowait_steal() -> None:
    t = parse_proc_stat(STAT)
    assert t is not None
    assert t.busy_ticks == 16437 + 10 + 5345 + 7 + 71
    assert t.total_ticks == 16437 + 10 + 5345 + 45613 + 589 + 7 + 71 + 59
    assert t.ncpu == 2


def test_proc_stat_malformed() -> None:
    assert parse_proc_stat("") is None
    assert parse_proc_stat("cpu a b c") is None
    short = parse_proc_stat("cpu 1 2 3 4")
    assert short is not None and short.busy_ticks == 6


def test_meminfo() -> None:
    m = parse_meminfo("MemTotal:       1000 kB\nMemFree:  100 kB\nMemAvailable:   400 kB\nHugePages_Total: 0\n")
    assert m == MemInfo(1000 * 1024, 400 * 1024)
    assert m.used == 600 * 1024
    old = parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 150 kB\n")
    assert old is not None and old.available == 300 * 1024
    assert parse_meminfo("nothing") is None


def test_procfs_root_is_a_parameter(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(STAT)
    (tmp_path / "meminfo").write_text("MemTotal: 10 kB\nMemAvailable: 4 kB\n")
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "oom_score_adj").write_text("-998\n")
    procfs = ProcFS(str(tmp_path), clk_tck=100)
    assert procfs.cpu_times() is not None
    assert procfs.meminfo() == MemInfo(10240, 4096)
    assert procfs.oom_score_adj(42) == "-998"
    assert procfs.oom_score_adj(43) is None
    assert procfs.mountinfo() is None


def test_real_proc() -> None:
    procfs = ProcFS()
    t = procfs.cpu_times()
    assert t is not None and t.total_ticks > t.busy_ticks > 0
    m = procfs.meminfo()
    assert m is not None and m.total > m.used > 0


@given(st.text())
def test_never_raises(text: str) -> None:
    parse_proc_stat(text)
    parse_meminfo(text)
