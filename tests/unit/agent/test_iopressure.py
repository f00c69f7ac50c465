"""The I/O controller (agent.decide.iopressure) and its sensing (agent.sense.iowait)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.cgroups.fs import FileReader
from agent.config_ioqos import IoQosConfig, TierIoConfig
from agent.decide.iopressure import IoLimit, IoSignal, effective, initial, step
from agent.model import CgroupDirs
from agent.sense.iowait import OfflineRates, OnlineWaitSensor, blkio_ticks, parse_diskstats, psi_some_total

Mi = 2**20
CFG = TierIoConfig(online_wait_target=0.10, min_bps=4 * Mi, max_bps=0, raise_step=8 * Mi, decrease=0.5)


def test_a_wait_over_target_halves_the_limit_from_the_offline_rate_when_there_was_none() -> None:
    s = step(initial(CFG), IoSignal(0.3, "ns/web io.pressure", offline_peak=200 * Mi), CFG)
    assert s.bps == 100 * Mi and "fastest offline pod" in s.rule
    s = step(s, IoSignal(0.3, offline_peak=100 * Mi), CFG)
    assert s.bps == 50 * Mi
    for _ in range(10):
        s = step(s, IoSignal(0.5), CFG)
    assert s.bps == 4 * Mi  # the floor


def test_calm_raises_additively_then_lifts_the_limit_once_it_no_longer_binds() -> None:
    s = IoLimit(20 * Mi)
    s = step(s, IoSignal(0.01, offline_peak=20 * Mi), CFG)
    assert s.bps == 28 * Mi
    s = step(s, IoSignal(0.01, offline_peak=10 * Mi), CFG)  # under half of 28: not binding
    assert s.bps is None and "lifted" in s.rule
    assert step(IoLimit(20 * Mi), IoSignal(None), CFG).bps == 20 * Mi  # no reading: holds


def test_max_bps_caps_and_is_the_start() -> None:
    cfg = replace(CFG, max_bps=30 * Mi)
    assert initial(cfg).bps == 30 * Mi
    assert step(IoLimit(28 * Mi), IoSignal(0.0, offline_peak=1.0), cfg).bps == 30 * Mi
    assert step(IoLimit(None), IoSignal(0.0), cfg).bps == 30 * Mi


def test_the_static_limit_stays_a_ceiling_and_the_default_is_none() -> None:
    io = IoQosConfig()
    assert io.offline_write_bps == 0 and io.offline_read_bps == 0  # the static 50Mi/s is no longer the default
    assert effective(io, IoLimit(None)) == io
    eff = effective(io, IoLimit(20 * Mi))
    assert eff.offline_read_bps == eff.offline_write_bps == 20 * Mi
    static = replace(io, offline_write_bps=10 * Mi)
    assert effective(static, IoLimit(20 * Mi)).offline_write_bps == 10 * Mi
    assert step(IoLimit(5 * Mi), IoSignal(0.9), replace(CFG, enabled=False)).bps is None


@settings(max_examples=300, deadline=None)
@given(
    start=st.one_of(st.none(), st.integers(min_value=1, max_value=2**34)),
    wait=st.floats(min_value=0.0, max_value=1.0),
    peak=st.one_of(st.none(), st.floats(min_value=0.0, max_value=2**34)),
    target=st.floats(min_value=0.01, max_value=1.0),
    min_bps=st.integers(min_value=1, max_value=2**26),
    max_bps=st.integers(min_value=0, max_value=2**32),
    raise_step=st.integers(min_value=1, max_value=2**26),
    decrease=st.floats(min_value=0.05, max_value=0.95),
)
def test_property_aimd_within_bounds(
    start: int | None,
    wait: float,
    peak: float | None,
    target: float,
    min_bps: int,
    max_bps: int,
    raise_step: int,
    decrease: float,
) -> None:
    """Multiplicative decrease when the online wait exceeds its target, additive increase when calm, always within
    [minBps, maxBps] (maxBps 0: no upper bound, and no limit at all allowed when calm)."""
    cfg = TierIoConfig(True, target, min_bps, max_bps, raise_step, decrease)
    top = max(max_bps, min_bps) if max_bps > 0 else None
    if start is not None:
        start = max(min_bps, start if top is None else min(start, top))
    new = step(IoLimit(start), IoSignal(wait, offline_peak=peak), cfg)
    if new.bps is not None:
        assert new.bps >= min_bps
        assert top is None or new.bps <= top
    if wait > target:
        assert new.bps is not None
        if start is not None:
            assert new.bps == max(min_bps, int(start * decrease)) or (top is not None and new.bps == top)
            assert new.bps <= start
    else:
        if start is None:
            assert new.bps == (top if max_bps > 0 else None)
        elif new.bps is not None:
            assert new.bps == (start + raise_step if top is None else min(top, start + raise_step))
        else:
            assert max_bps == 0 and peak is not None and peak < start / 2


def test_sensing_online_wait_from_v2_psi_and_v1_fallbacks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pod = tmp_path / "pod1"
    pod.mkdir()
    d = CgroupDirs(str(pod), str(pod), str(pod), "v2")
    sensor = OnlineWaitSensor(FileReader(), "io", str(tmp_path))
    (pod / "io.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\nfull total=5\n")
    assert sensor.read({"ns/web": d}, 10.0) is None  # the first read has no delta
    (pod / "io.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1250000\n")
    w = sensor.read({"ns/web": d}, 11.0)
    assert w is not None and abs(w.ratio - 0.25) < 1e-9 and "ns/web" in w.source
    assert psi_some_total("full total=3") is None
    # v1: the node's PSI, else the disks' utilisation
    v1 = CgroupDirs(str(pod), str(pod), str(pod), "v1")
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "io").write_text("some avg10=1 total=0\n")
    s1 = OnlineWaitSensor(FileReader(), "io", str(tmp_path))
    s1.read({"ns/web": v1}, 0.0)
    (tmp_path / "pressure" / "io").write_text("some avg10=1 total=500000\n")
    w1 = s1.read({"ns/web": v1}, 2.0)
    assert w1 is not None and abs(w1.ratio - 0.25) < 1e-9 and "/proc/pressure/io" in w1.source
    (tmp_path / "pressure" / "io").unlink()
    line = "   8       0 sda {r} 0 0 {rms} {w} 0 0 {wms} 0 {ticks} 0\n"
    (tmp_path / "diskstats").write_text(line.format(r=10, rms=10, w=10, wms=10, ticks=1000))
    s2 = OnlineWaitSensor(FileReader(), "io", str(tmp_path))
    s2.read({}, 0.0, ["8:0"])
    (tmp_path / "diskstats").write_text(line.format(r=20, rms=60, w=20, wms=60, ticks=1600))
    w2 = s2.read({}, 1.0, ["8:0"])
    assert w2 is not None and abs(w2.ratio - 0.6) < 1e-9 and "await 5.0 ms" in w2.source
    assert parse_diskstats("garbage line\n") == {}


def _stat(tid: int, comm: str, ticks: int) -> str:
    """A /proc/<tid>/stat line: 50 fields, `delayacct_blkio_ticks` the 42nd."""
    fields = ["S", *["0"] * 38, str(ticks), *["0"] * 8]
    return f"{tid} ({comm}) " + " ".join(fields) + "\n"


def test_blkio_ticks_reads_field_42_whatever_the_command_holds() -> None:
    assert blkio_ticks(_stat(7, "nginx: worker", 12)) == 12
    assert blkio_ticks(_stat(7, "a) b (c", 34)) == 34
    assert blkio_ticks("7 (short) S 1 2") is None
    assert blkio_ticks("no parenthesis at all") is None
    assert blkio_ticks(_stat(7, "x", 5).replace(" 5 ", " -5 ")) is None


def test_v1_online_io_wait_is_each_online_pods_own_block_io_delay_when_the_kernel_accounts_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """v1 has no per-group PSI; the node's /proc/pressure/io counts the offline writer's own stalls, and in the
    colocation benchmark held the I/O controller at tier.io.minBps. With `kernel.task_delayacct = 1` the
    signal is the online pods' own tasks' block I/O delay; the node's PSI stays the fallback."""
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    flag = tmp_path / "sys" / "kernel" / "task_delayacct"
    (tmp_path / "pressure").mkdir()
    node_psi = tmp_path / "pressure" / "io"
    node_psi.write_text("some avg10=1 total=0\n")
    web, batch = tmp_path / "web", tmp_path / "web2"
    for pod, tids in ((web, (11, 12)), (batch, (21,))):
        (pod / "c1").mkdir(parents=True)
        (pod / "tasks").write_text(f"{tids[0]}\n")
        (pod / "c1" / "tasks").write_text("".join(f"{t}\n" for t in tids[1:]))
    dirs = {"ns/web": CgroupDirs(str(web), str(web), str(web), "v1"),
            "ns/web2": CgroupDirs(str(batch), str(batch), str(batch), "v1")}  # fmt: skip

    def ticks(values: dict[int, int]) -> None:
        for tid, t in values.items():
            (tmp_path / str(tid)).mkdir(exist_ok=True)
            (tmp_path / str(tid) / "stat").write_text(_stat(tid, "nginx", t))

    flag.write_text("1\n")
    sensor = OnlineWaitSensor(FileReader(), "io", str(tmp_path))
    ticks({11: 100, 12: 0, 21: 0})
    assert sensor.read(dirs, 10.0) is None  # the first read has no delta
    node_psi.write_text("some avg10=1 total=1900000\n")  # the node stalled 95 % (the offline writer): ignored
    ticks({11: 110, 12: 30, 21: 5})  # web: 0.1 s + 0.3 s in 2 s (tasks add up; the child group's counted)
    w = sensor.read(dirs, 12.0)
    assert w is not None and abs(w.ratio - 0.2) < 1e-9, w
    assert w.source == "ns/web block I/O delay (delayacct)"
    ticks({11: 110, 12: 30, 21: 5, 13: 999})  # a task seen once adds nothing
    (web / "tasks").write_text("11\n13\n")
    w = sensor.read(dirs, 13.0)
    assert w is not None and w.ratio == 0.0
    flag.write_text("0\n")  # turned off: the node's PSI again
    sensor.read(dirs, 14.0)
    node_psi.write_text("some avg10=1 total=2400000\n")
    w = sensor.read(dirs, 15.0)
    assert w is not None and abs(w.ratio - 0.5) < 1e-9 and w.source.startswith("/proc/pressure/io (the node's")
    mem = OnlineWaitSensor(FileReader(), "memory", str(tmp_path))  # memory: no per-task delay in /proc/<tid>/stat
    flag.write_text("1\n")
    assert mem.read(dirs, 1.0) is None


def test_sensing_the_fastest_offline_rate(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pod = tmp_path / "off"
    pod.mkdir()
    d = CgroupDirs(str(pod), str(pod), str(pod), "v2")
    rates = OfflineRates(FileReader())
    (pod / "io.stat").write_text("8:0 rbytes=0 wbytes=0 rios=0 wios=0\n")
    assert rates.read({"ns/batch": d}, ["8:0"], 0.0) is None
    (pod / "io.stat").write_text("8:0 rbytes=1000 wbytes=4000 rios=1 wios=1\n9:0 rbytes=99999999 wbytes=0\n")
    assert rates.read({"ns/batch": d}, ["8:0"], 2.0) == 2000.0


def test_a_disk_line_that_appears_after_the_first_read_counts_from_zero(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """v2 io.stat lists a disk only once the group did I/O on it (found in the v2 lane: a new pod's first writer
    gave no rate at all)."""
    pod = tmp_path / "off"
    pod.mkdir()
    d = CgroupDirs(str(pod), str(pod), str(pod), "v2")
    rates = OfflineRates(FileReader())
    (pod / "io.stat").write_text("")
    assert rates.read({"ns/batch": d}, ["7:0"], 0.0) is None
    (pod / "io.stat").write_text("7:0 rbytes=0 wbytes=8000 rios=0 wios=2\n")
    assert rates.read({"ns/batch": d}, ["7:0"], 4.0) == 2000.0
