"""The pressure path's kernel files on this machine's cgroup v1 host (root): a memcg `memory.pressure_level`
eventfd fires under a real memory hog in a limited kubepods group, and a `/proc/pressure/cpu` PSI trigger
fires under a real CPU hog. The sensor is the daemon's (`agent.sense.pressure`), on its own thread.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from agent.sense.pressure import PressureEvent, PressureSensor, Source, sources_for
from tests.fixtures.cgroups import MiB, RealCgroupV1Tree

pytestmark = [pytest.mark.cgroup]

A = "0a1b2c3d-0000-4000-8000-00000000a001"
B = "0a1b2c3d-0000-4000-8000-00000000b002"


class Events:
    def __init__(self) -> None:
        self.got: list[PressureEvent] = []
        self.cond = threading.Condition()

    def __call__(self, e: PressureEvent) -> None:
        with self.cond:
            self.got.append(e)
            self.cond.notify_all()

    def wait_for(self, pred: object, timeout: float) -> list[PressureEvent]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not [e for e in self.got if pred(e)]:  # type: ignore[operator]
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return [e for e in self.got if pred(e)]  # type: ignore[operator]


def test_memory_pressure_level_eventfd_fires_under_a_real_hog(real_cgroup_v1: RealCgroupV1Tree) -> None:
    tree = real_cgroup_v1
    limit = 64 * MiB
    with open(os.path.join(tree.kubepods.memory, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    tree.add_pod(A, "BestEffort", {"c": "containerd://" + "a" * 64})
    sources = sources_for(tree.kubepods, [], "/proc")
    level = [s for s in sources if s.kind == "pressure_level"]
    assert level == [Source("memory", "kubepods", "pressure_level", f"{tree.kubepods.memory}/memory.pressure_level")]
    events = Events()
    sensor = PressureSensor(events, time.monotonic)
    sensor.arm(level, "some 150000 1000000", "low")
    assert sensor.armed_sources() == tuple(level) and not sensor.problems
    sensor.start()
    try:
        assert events.got == [], "no reclaim yet, no event"
        t0 = time.monotonic()
        tree.start_process(A, "c", memory_bytes=limit + 32 * MiB, busy=False, cpu=1)  # past the limit: reclaim
        got = events.wait_for(lambda e: e.source.kind == "pressure_level", 30)
        assert got, "memory.pressure_level reported no reclaim of a group pushed past its limit"
        assert got[0].time - t0 < 30
    finally:
        sensor.stop()
    assert not sensor.alive and sensor.armed_sources() == ()


@pytest.mark.skipif(not os.path.exists("/proc/pressure/cpu"), reason="the kernel has no PSI (/proc/pressure)")
def test_proc_pressure_cpu_trigger_fires_under_a_real_cpu_hog(real_cgroup_v1: RealCgroupV1Tree) -> None:
    tree = real_cgroup_v1
    node = Source("cpu", "node", "psi", "/proc/pressure/cpu")
    assert node in sources_for(tree.kubepods, [], "/proc"), "a v1 group has no cpu.pressure: the node's is used"
    events = Events()
    sensor = PressureSensor(events, time.monotonic)
    sensor.arm([node], "some 150000 1000000", "low")
    assert sensor.armed_sources() == (node,), sensor.problems
    sensor.start()
    try:
        tree.add_pod(A, "BestEffort", {"c": "containerd://" + "a" * 64})
        tree.add_pod(B, "BestEffort", {"c": "containerd://" + "b" * 64})
        for uid in (A, B, A):  # three busy processes on one CPU: each waits two thirds of the time
            tree.start_process(uid, "c", cpu=0)
        got = events.wait_for(lambda e: e.source == node, 20)
        assert got, "the /proc/pressure/cpu trigger did not fire with three busy processes on one CPU"
    finally:
        sensor.stop()
