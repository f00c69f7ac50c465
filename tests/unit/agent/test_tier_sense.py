"""The online pods' CPU wait (agent/sense/onlinewait.py) on the kernel's file formats: v2 `cpu.pressure` totals, v1
`/proc/<tid>/schedstat` of the tasks of a pod's cpu groups; the worst online pod; offline pods never count."""

from __future__ import annotations

from pathlib import Path

from agent.cgroups.fs import FileReader
from agent.model import CgroupDirs
from agent.sense.onlinewait import REWALK_S, OnlineWaitSensor, TaskDirs, pressure_total_us, schedstat, v1_tids
from agent.sense.snapshot import pod_view
from tidemark.apis import PodUID

from .helpers import pod

PSI = "some avg10=1.00 avg60=0.50 avg300=0.10 total={}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"


def test_parsers() -> None:
    assert pressure_total_us(PSI.format(123)) == 123
    assert pressure_total_us("full avg10=0 total=5\n") is None and pressure_total_us("some total=x\n") is None
    assert schedstat("100 40 7\n") == (100, 40, 7) and schedstat("100 40\n") == (100, 40, 0)
    assert schedstat("1\n") is None and schedstat("a b c") is None


def group(root: Path, name: str, version: str) -> CgroupDirs:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    return CgroupDirs(str(d), str(d), str(d), version)  # type: ignore[arg-type]


def test_v2_the_worst_online_pods_pressure_over_the_wall_time(tmp_path: Path) -> None:
    web, api, job = (group(tmp_path, n, "v2") for n in ("web", "api", "job"))
    pods = {PodUID("web"): pod("web"), PodUID("api"): pod("api"), PodUID("job"): pod("job", level=-1)}
    dirs = {PodUID("web"): web, PodUID("api"): api, PodUID("job"): job}
    for d, total in ((web, 1_000_000), (api, 0), (job, 0)):
        Path(d.cpu, "cpu.pressure").write_text(PSI.format(total))
    sensor = OnlineWaitSensor(FileReader())
    assert sensor.read(pods, dirs, 100.0) is None  # one read: no value yet
    for d, total in ((web, 1_100_000), (api, 300_000), (job, 2_000_000)):
        Path(d.cpu, "cpu.pressure").write_text(PSI.format(total))
    wait = sensor.read(pods, dirs, 101.0)
    # web waited 0.1 s of 1 s, api 0.3 s; the offline job's 2 s never count
    assert wait is not None and wait.pod == "default/api" and abs(wait.ratio - 0.3) < 1e-9
    assert wait.source == "cpu.pressure" and set(sensor.last) == {PodUID("web"), PodUID("api")}


def test_tidemarks_own_pods_never_drive_the_feedback(tmp_path: Path) -> None:
    """The agent waiting 0.9 of the second (it waits for the other online pods and the host: the offline pods sit
    under it by cpu.idle) is not the online service the tier protects; the pod parser sets `component` from the
    shipped manifests' label."""
    web, agent = group(tmp_path, "web", "v2"), group(tmp_path, "agent", "v2")
    pods = {PodUID("web"): pod("web"), PodUID("agent"): pod("agent", ns="tidemark-system", component=True)}
    dirs = {PodUID("web"): web, PodUID("agent"): agent}
    sensor = OnlineWaitSensor(FileReader())
    for total in (0, 100_000):
        Path(web.cpu, "cpu.pressure").write_text(PSI.format(total))
        Path(agent.cpu, "cpu.pressure").write_text(PSI.format(total * 9))
        wait = sensor.read(pods, dirs, 100.0 + total / 100_000)
    assert wait is not None and wait.pod == "default/web" and abs(wait.ratio - 0.1) < 1e-9
    assert set(sensor.last) == {PodUID("web")}
    labelled = {"metadata": {"uid": "u", "name": "a", "namespace": "tidemark-system",
                             "labels": {"app.kubernetes.io/part-of": "tidemark"}}, "spec": {"containers": []}}
    assert pod_view(labelled, 0.0)[0].component
    assert not pod_view({"metadata": {"uid": "u", "name": "w", "labels": {"app": "web"}}}, 0.0)[0].component


def test_v1_run_delay_of_the_pods_tasks_over_the_wall_time(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    web = group(tmp_path / "cpu", "web", "v1")
    Path(web.cpu, "c1").mkdir()
    Path(web.cpu, "tasks").write_text("11\n")
    Path(web.cpu, "c1", "tasks").write_text("12\n13\n")

    def stat(tid: int, run: int, delay: int) -> None:
        (proc / str(tid)).mkdir(parents=True, exist_ok=True)
        (proc / str(tid) / "schedstat").write_text(f"{run} {delay} 3\n")

    for tid in (11, 12, 13):
        stat(tid, 1000, 100)
    sensor = OnlineWaitSensor(FileReader(), str(proc))
    pods = {PodUID("web"): pod("web")}
    dirs = {PodUID("web"): web}
    assert sensor.read(pods, dirs, 1.0) is None
    stat(11, 1600, 100_000_100)  # +600 run, +0.1 s delay
    stat(12, 1400, 50_000_100)  # +400 run, +0.05 s delay
    (proc / "13" / "schedstat").unlink()  # exited: adds nothing
    stat(14, 9999, 9_999_999_999)  # not in the pod
    wait = sensor.read(pods, dirs, 2.0)
    assert wait is not None and wait.source == "schedstat" and abs(wait.ratio - 0.15) < 1e-9
    # an idle pod: a few microseconds of delay against as little run time is no wait (it read 0.5 before)
    stat(11, 1700, 100_005_100)
    stat(12, 1405, 50_000_100)
    idle = sensor.read(pods, dirs, 3.0)
    assert idle is not None and idle.ratio < 0.001
    gone = sensor.read({}, {}, 3.0)  # the pod went away: nothing kept
    assert gone is None and not sensor.last


def test_the_delay_per_slice_of_the_pods_tasks_on_v1_and_v2(tmp_path: Path) -> None:
    """`slice`: the tasks' run delay over their run slices (schedstat's 2nd over its 3rd field); v2 lists them in
    `cgroup.threads`. The worst pod is the one with the longest delay per slice, not the one waiting most of the
    time: `busy` waits 0.2 of the second in 0.1 ms waits, `slow` 0.02 in 2 ms ones. A pod with fewer than
    MIN_SLICES_PER_S slices a second gives none."""
    proc = tmp_path / "proc"

    def stat(tid: int, run: int, delay_ns: int, slices: int) -> None:
        (proc / str(tid)).mkdir(parents=True, exist_ok=True)
        (proc / str(tid) / "schedstat").write_text(f"{run} {delay_ns} {slices}\n")

    for version, listing in (("v1", "tasks"), ("v2", "cgroup.threads")):
        root = tmp_path / version
        busy, slow, quiet = (group(root, n, version) for n in ("busy", "slow", "quiet"))
        for d, tid in ((busy, 1), (slow, 2), (quiet, 3)):
            Path(d.cpu, "c").mkdir()
            Path(d.cpu, "c", listing).write_text(f"{tid}\n")
            Path(d.cpu, "cpu.pressure").write_text(PSI.format(0))
            stat(tid, 0, 0, 0)
        pods = {PodUID(n): pod(n) for n in ("busy", "slow", "quiet")}
        dirs = {PodUID("busy"): busy, PodUID("slow"): slow, PodUID("quiet"): quiet}
        sensor = OnlineWaitSensor(FileReader(), str(proc))
        assert sensor.read(pods, dirs, 10.0, "slice") is None
        stat(1, 1, 200_000_000, 2000)  # 0.1 ms a slice
        stat(2, 1, 20_000_000, 10)  # 2 ms a slice
        stat(3, 1, 90_000_000, 9)  # 10 ms a slice, but 9 slices in the second: no value
        wait = sensor.read(pods, dirs, 11.0, "slice")
        assert wait is not None and wait.pod == "default/slow" and wait.source == "schedstat", (version, wait)
        assert wait.delay_ms is not None and abs(wait.delay_ms - 2.0) < 1e-9
        assert set(sensor.last) == {PodUID("busy"), PodUID("slow")} and abs(sensor.last[PodUID("busy")] - 0.1) < 1e-9
        if version == "v1":  # the same reads give the share: busy is the worst by it
            stat(1, 2, 400_000_000, 4000)
            stat(2, 2, 40_000_000, 20)
            share = sensor.read(pods, dirs, 12.0, "share")
            assert share is not None and share.pod == "default/busy" and abs((share.ratio or 0) - 0.2) < 1e-9


def test_a_pods_task_directories_are_walked_again_only_when_its_tree_changed(tmp_path: Path) -> None:
    """TaskDirs: the tasks of an unchanged tree without a walk; a new container (the pod directory's link count),
    a container gone (its file unreadable) or REWALK_S (a change deeper down) walks again; a pod gone is forgotten."""
    now = [0.0]
    dirs = TaskDirs(clock=lambda: now[0])
    reader = FileReader()
    web = tmp_path / "web"
    (web / "c1").mkdir(parents=True)
    (web / "tasks").write_text("")
    (web / "c1" / "tasks").write_text("12\n13\n")
    assert sorted(v1_tids(reader, str(web), "tasks", dirs)) == [12, 13] and dirs.walks == 1
    (web / "c1" / "tasks").write_text("12\n")  # tasks come and go: read, not walked
    assert v1_tids(reader, str(web), "tasks", dirs) == [12] and dirs.walks == 1
    (web / "c2").mkdir()  # a container started
    (web / "c2" / "tasks").write_text("21\n")
    assert sorted(v1_tids(reader, str(web), "tasks", dirs)) == [12, 21] and dirs.walks == 2
    (web / "c1" / "tasks").unlink()  # a container replaced: the same link count, a listed file gone
    (web / "c1").rmdir()
    (web / "c3").mkdir()
    (web / "c3" / "tasks").write_text("31\n")
    assert sorted(v1_tids(reader, str(web), "tasks", dirs)) == [21, 31] and dirs.walks == 3
    (web / "c3" / "inner").mkdir()  # deeper: seen at the next rewalk
    (web / "c3" / "inner" / "tasks").write_text("32\n")
    assert sorted(v1_tids(reader, str(web), "tasks", dirs)) == [21, 31] and dirs.walks == 3
    now[0] = REWALK_S
    assert sorted(v1_tids(reader, str(web), "tasks", dirs)) == [21, 31, 32] and dirs.walks == 4
    assert v1_tids(reader, str(tmp_path / "gone"), "tasks", dirs) == []
    # the uncached walk agrees
    assert sorted(v1_tids(reader, str(web), "tasks")) == [21, 31, 32]
    dirs.keep([])
    assert sorted(v1_tids(reader, str(web), "tasks", dirs)) == [21, 31, 32] and dirs.walks == 5
