"""The agent's cgroup v2 readers on a real kernel: `cpu.stat usage_usec`, the working set
(`memory.current - inactive_file`) and PSI (`cpu.pressure`, `memory.pressure`), against the truth of
real processes (their own CPU time from /proc/<pid>/schedstat, the bytes they allocated)."""

from __future__ import annotations

import time

import pytest

from agent.cgroups.fs import FileReader, ReadStats
from agent.sense.cgroups import cpu_usage_ns, memory_working_set, pressure
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.fixtures.cgroups import MiB
from tests.integration.agent.test_real_cgroups import close, report

pytestmark = [pytest.mark.cgroup_v2]

UID = "0a1b2c3d-0000-4000-8000-00000000c003"


def test_usage_usec_and_working_set(real_cgroup_v2: RealCgroupV2Tree) -> None:
    tree = real_cgroup_v2
    tree.add_pod(UID, "Burstable", {"app": "containerd://" + "c" * 64}, cpu_request_milli=500)
    proc = tree.start_process(UID, "app", memory_bytes=80 * MiB, cpu=1)
    pod = tree.pods[UID].dirs
    reader = FileReader(ReadStats())
    proc.wait_touched(80 * MiB)
    u0, p0 = cpu_usage_ns(reader, pod), proc.cpu_seconds()
    time.sleep(2.0)
    u1, p1 = cpu_usage_ns(reader, pod), proc.cpu_seconds()
    assert u0 is not None and u1 is not None
    measured, truth = (u1 - u0) / 1e9, p1 - p0
    ws = memory_working_set(reader, pod)
    kubepods = memory_working_set(reader, tree.kubepods)
    report(f"v2 readers: cpu {measured:.3f} s vs truth {truth:.3f} s; working set {ws} vs 80 MiB allocated")
    assert truth > 0.1
    assert close(measured, truth, 0.02)
    assert ws is not None and close(ws, 80 * MiB, 6 * MiB)
    assert kubepods is not None and kubepods >= ws


def test_pressure_of_a_contended_group(real_cgroup_v2: RealCgroupV2Tree) -> None:
    """Two busy processes on one CPU in one pod: the pod's `cpu.pressure` some avg10 rises above 0."""
    tree = real_cgroup_v2
    tree.add_pod(
        UID, "Burstable", {"a": "containerd://" + "c" * 64, "b": "containerd://" + "d" * 64}, cpu_request_milli=500
    )
    tree.start_process(UID, "a", cpu=0)
    tree.start_process(UID, "b", cpu=0)
    pod = tree.pods[UID].dirs
    reader = FileReader(ReadStats())
    deadline = time.monotonic() + 30
    p = pressure(reader, pod, "cpu")
    while (p is None or p.some_avg10 <= 1.0) and time.monotonic() < deadline:
        time.sleep(0.5)
        p = pressure(reader, pod, "cpu")
    mem = pressure(reader, pod, "memory")
    report(f"v2 PSI: pod cpu some avg10 {p}; memory {mem}")
    assert p is not None and p.some_avg10 > 1.0
    assert mem is not None and mem.full_avg10 is not None  # memory.pressure has a `full` line
