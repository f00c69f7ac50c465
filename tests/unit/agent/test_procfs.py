"""Node totals from /proc through psutil (root = psutil.PROCFS_PATH): busy ticks, CPU count, used memory."""

from __future__ import annotations

import threading
from pathlib import Path

import psutil
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.sense.procfs import MemInfo, ProcFS, cpu_times_of, meminfo_of, process_start

STAT = """cpu  16437 10 5345 45613 589 7 71 59 0 0
cpu0 6114 0 2341 25523 37 0 12 24 0 0
cpu1 10323 0 3004 20089 552 0 59 34 0 0
intr 1 2 3
btime 1700000000
"""
MEMINFO = "MemTotal:       1000 kB\nMemFree:  100 kB\nMemAvailable:   400 kB\nBuffers: 10 kB\nCached: 50 kB\n"


def _root(tmp_path: Path, stat: str = STAT, meminfo: str = MEMINFO) -> str:
    (tmp_path / "stat").write_text(stat)
    (tmp_path / "meminfo").write_text(meminfo)
    return str(tmp_path)


def test_busy_excludes_idle_iowait_steal(tmp_path: Path) -> None:
    t = cpu_times_of(_root(tmp_path))
    assert t is not None
    assert t.busy_ticks == 16437 + 10 + 5345 + 7 + 71
    assert t.total_ticks == 16437 + 10 + 5345 + 45613 + 589 + 7 + 71 + 59
    assert t.ncpu == 2


def test_malformed_reads_as_none(tmp_path: Path) -> None:
    assert cpu_times_of(_root(tmp_path, stat="")) is None
    assert cpu_times_of(_root(tmp_path, stat="cpu a b c d e f g h i j\n")) is None
    assert cpu_times_of(str(tmp_path / "absent")) is None
    assert meminfo_of(_root(tmp_path, meminfo="nothing")) is None


def test_meminfo_used_is_total_minus_available(tmp_path: Path) -> None:
    m = meminfo_of(_root(tmp_path))
    assert m == MemInfo(1000 * 1024, 400 * 1024)
    assert m.used == 600 * 1024


def test_procfs_root_is_a_parameter_and_psutil_root_is_put_back(tmp_path: Path) -> None:
    root = _root(tmp_path, meminfo="MemTotal: 10 kB\nMemFree: 1 kB\nMemAvailable: 4 kB\n")
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "oom_score_adj").write_text("-998\n")
    procfs = ProcFS(root, clk_tck=100)
    before = psutil.PROCFS_PATH
    assert procfs.cpu_times() is not None
    assert procfs.meminfo() == MemInfo(10240, 4096)
    assert before == psutil.PROCFS_PATH
    assert procfs.oom_score_adj(42) == "-998"
    assert procfs.oom_score_adj(43) is None
    assert procfs.mountinfo() is None


def test_two_roots_in_threads_never_mix(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    ra = _root(a, meminfo="MemTotal: 10 kB\nMemFree: 1 kB\nMemAvailable: 4 kB\n")
    rb = _root(b, meminfo="MemTotal: 20 kB\nMemFree: 1 kB\nMemAvailable: 5 kB\n")
    seen: list[tuple[str, MemInfo | None]] = []

    def loop(root: str) -> None:
        for _ in range(200):
            seen.append((root, meminfo_of(root)))

    threads = [threading.Thread(target=loop, args=(r,)) for r in (ra, rb)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {(r, m) for r, m in seen} == {(ra, MemInfo(10240, 4096)), (rb, MemInfo(20480, 5120))}


def test_real_proc() -> None:
    procfs = ProcFS()
    t = procfs.cpu_times()
    assert t is not None and t.total_ticks > t.busy_ticks > 0 and t.ncpu == psutil.cpu_count()
    m = procfs.meminfo()
    assert m is not None and m.total > m.used > 0


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)
@given(st.text())
def test_never_raises(tmp_path: Path, text: str) -> None:
    root = _root(tmp_path, stat=text, meminfo=text)
    cpu_times_of(root)
    meminfo_of(root)


def test_process_start_in_ticks_since_boot(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (tmp_path / "4242").mkdir()
    # a whole line as the kernel writes it (52 fields; psutil reads up to field 39)
    (tmp_path / "4242" / "stat").write_text("4242 (py thon) S " + " ".join(["0"] * 18) + " 777 " + " ".join(["0"] * 32))
    assert process_start(root, 4242) == 777
    assert ProcFS(root).process_start(4242) == 777
    assert process_start(root, 4243) is None  # gone
    (tmp_path / "stat").write_text(STAT.replace("btime 1700000000\n", ""))
    assert process_start(root, 4242) is None  # no boot time: unknown, never a wrong identity


def test_real_process_start_matches_the_kernels_field() -> None:
    import os

    with open(f"/proc/{os.getpid()}/stat") as f:
        starttime = int(f.read().rsplit(")", 1)[1].split()[19])
    assert process_start("/proc", os.getpid()) == starttime
