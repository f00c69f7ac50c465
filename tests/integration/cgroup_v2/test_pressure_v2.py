"""The pressure path on a real cgroup v2 kernel: PSI triggers (`some <stall_us> <window_us>` written to a
group's `cpu.pressure` / `memory.pressure`) fire under real hogs, through the daemon's sensor
(`agent.sense.pressure`) on its own thread. Under QEMU's TCG nothing but "it fired" is asserted."""

from __future__ import annotations

import threading
import time

import pytest

from agent.sense.pressure import PressureEvent, PressureSensor, sources_for
from tests.fixtures.cgroup_v2 import RealCgroupV2Tree
from tests.fixtures.cgroups import MiB

pytestmark = [pytest.mark.cgroup_v2]

WEB = "0a1b2c3d-0000-4000-8000-00000000d004"
HOG = "0a1b2c3d-0000-4000-8000-00000000e005"


def _sensor() -> tuple[PressureSensor, list[PressureEvent], threading.Event]:
    got: list[PressureEvent] = []
    fired = threading.Event()

    def on_event(e: PressureEvent) -> None:
        got.append(e)
        fired.set()

    return PressureSensor(on_event, time.monotonic), got, fired


def _wait(got: list[PressureEvent], fired: threading.Event, scope: str, resource: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.source.scope == scope and e.source.resource == resource for e in got):
            return True
        fired.wait(0.5)
        fired.clear()
    return any(e.source.scope == scope and e.source.resource == resource for e in got)


def test_psi_triggers_of_kubepods_and_an_online_pod_fire_under_real_hogs(real_cgroup_v2: RealCgroupV2Tree) -> None:
    tree = real_cgroup_v2
    tree.add_pod(WEB, "Burstable", {"app": "containerd://" + "d" * 64}, cpu_request_milli=500)
    tree.add_pod(HOG, "BestEffort", {"job": "containerd://" + "e" * 64})
    web = tree.pods[WEB].dirs
    sources = sources_for(tree.kubepods, [("default/web", web)])
    assert {(s.scope, s.resource, s.kind) for s in sources} == {
        ("kubepods", "cpu", "psi"),
        ("kubepods", "memory", "psi"),
        ("pod default/web", "cpu", "psi"),
        ("pod default/web", "memory", "psi"),
    }
    sensor, got, fired = _sensor()
    sensor.arm(sources, "some 150000 1000000", "low")
    assert set(sensor.armed_sources()) == set(sources) and not sensor.problems
    sensor.start()
    try:
        # CPU: two busy processes of the online pod on one CPU stall each other half of the time
        tree.start_process(WEB, "app", cpu=0)
        tree.start_process(WEB, "app", cpu=0)
        assert _wait(got, fired, "pod default/web", "cpu", 60), "the online pod's cpu.pressure trigger never fired"
        # memory: an offline hog held far under what it touches by memory.high stalls in reclaim
        tree.write(tree.pods[HOG].containers["job"], "memory.high", 16 * MiB)
        tree.start_process(HOG, "job", memory_bytes=96 * MiB, busy=False, cpu=1)
        assert _wait(got, fired, "kubepods", "memory", 90), "kubepods' memory.pressure trigger never fired"
    finally:
        sensor.stop()
    assert sensor.armed_sources() == ()
