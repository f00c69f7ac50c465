"""The pressure path: its pure rules, the poll() sensor over pipes, and the daemon's reaction on a fake clock.

The sensor is driven through an injected opener that hands out pipes (a real fd that poll() watches;
writing a byte is "the kernel fired"); the kernel's own files are exercised in
tests/integration/agent/test_pressure_real.py (v1: memory.pressure_level eventfd, /proc/pressure) and
tests/integration/cgroup_v2/test_pressure_v2.py (PSI triggers on a v2 group).
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent.config import DEFAULT_CONFIG, PressureConfig, load_config
from agent.daemon.metrics import AgentCollector
from agent.decide import pressure
from agent.model import Amounts, PodView, Sample
from agent.sense.pressure import Armed, PressureEvent, PressureSensor, Source, sources_for
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tests.unit.agent.test_daemon import knob, scenario
from tidemark.apis import ANN_OFFLINE_JOB_EVICTING, PodUID

Tree = Callable[..., KubeletCgroupTree]
CFG = DEFAULT_CONFIG.pressure


# --- configuration and the pure rules ------------------------------------------------------------------------


def test_config_defaults_and_the_kernel_bounds() -> None:
    assert CFG.trigger() == "some 150000 1000000" and CFG.memory_level == "low"
    assert (CFG.enabled, CFG.fast_period, CFG.hold) == (True, 0.25, 2.0)
    c, problems = load_config({"pressure": {"stall": "200ms", "window": "2s", "memory_level": "medium"}})
    assert problems == () and c.pressure.trigger() == "some 200000 2000000" and c.pressure.memory_level == "medium"
    for bad in ({"window": "20s"}, {"stall": "1s", "window": "1s"}):
        c, problems = load_config({"pressure": bad})
        assert [p.path for p in problems] == ["pressure"] and c.pressure.trigger() == CFG.trigger()
    c, problems = load_config({"pressure": {"window": "100ms", "memory_level": "high"}})
    assert {p.path for p in problems} == {"pressure.window", "pressure.memory_level"} and c.pressure == CFG


def test_pressure_lasts_hold_seconds_and_samples_fast_meanwhile() -> None:
    assert not pressure.active(None, 10.0, CFG)
    assert pressure.active(9.0, 10.0, CFG) and not pressure.active(8.0, 10.0, CFG)
    assert not pressure.active(9.9, 10.0, PressureConfig(enabled=False))
    assert pressure.sample_period(1.0, True, CFG) == 0.25 and pressure.sample_period(1.0, False, CFG) == 1.0
    assert pressure.sample_period(0.1, True, CFG) == 0.1  # never slower than the normal period


def _sample(t: float, triggered: tuple[str, ...] = (), **kw: object) -> Sample:
    return Sample(t, 1.0, Amounts(), Amounts(), triggered=triggered, **kw)  # type: ignore[arg-type]


def test_memory_pressure_holds_after_a_memory_trigger_only() -> None:
    window = [_sample(100.0), _sample(101.0, ("memory",)), _sample(101.25), _sample(101.5)]
    assert pressure.memory_pressure(window, 102.0, CFG)
    assert not pressure.memory_pressure(window, 103.5, CFG), "hold (2 s) is over"
    assert not pressure.memory_pressure(window, 102.0, PressureConfig(enabled=False))
    assert not pressure.memory_pressure([_sample(101.0, ("cpu",))], 101.0, CFG)
    assert not pressure.memory_pressure([], 1.0, CFG)
    assert pressure.triggered(window) == ("memory",)


def test_notes_show_node_kubepods_and_online_pods_psi() -> None:
    web = PodView(PodUID("u-web"), "default", "web", 0, "Burstable")
    last = _sample(
        1.0,
        ("cpu",),
        pressure={"cpu": 12.5},
        node_pressure={"memory": 3.0, "cpu": 20.0},
        pod_pressure={PodUID("u-web"): {"cpu": 7.25}},
    )
    text = "\n".join(pressure.notes(last, [last], [web], CFG))
    assert "node pressure (PSI some avg10, /proc/pressure): cpu 20.0 %, memory 3.0 %" in text
    assert "kubepods pressure (PSI some avg10): cpu 12.5 %" in text
    assert "default/web cpu 7.2 %" in text
    assert "pressure trigger (cpu): sampled and decided at once" in text
    assert pressure.notes(None, [], [], CFG) == []
    assert pressure.worst_online(last) == {"cpu": 7.25}


# --- the sensor over pipes -----------------------------------------------------------------------------------


class PipeOpener:
    """Hands out a pipe per source: writing to `writers[path]` is the kernel firing it."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.writers: dict[str, int] = {}
        self.armed: list[tuple[str, str, str]] = []
        self.refuse = refuse or set()

    def arm(self, source: Source, trigger: str, level: str) -> Armed:
        if source.path in self.refuse:
            raise PermissionError(13, "Permission denied")
        r, w = os.pipe2(os.O_NONBLOCK)
        self.writers[source.path] = w
        self.armed.append((source.path, trigger, level))
        drain = 8 if source.kind == "pressure_level" else 0
        return Armed(r, select.POLLIN, (r,), drain=drain)

    def fire(self, path: str, data: bytes = b"\x01" * 8) -> None:
        os.write(self.writers[path], data)


def test_sensor_reports_fired_sources_and_rearms_only_what_changed() -> None:
    got: list[PressureEvent] = []
    opener = PipeOpener(refuse={"/x/refused"})
    sensor = PressureSensor(got.append, lambda: 42.0, opener)
    cpu = Source("cpu", "kubepods", "psi", "/x/cpu.pressure")
    mem = Source("memory", "kubepods", "pressure_level", "/x/memory.pressure_level")
    refused = Source("memory", "node", "psi", "/x/refused")
    try:
        sensor.arm([cpu, mem, refused], "some 150000 1000000", "low")
        assert set(sensor.armed_sources()) == {cpu, mem} and refused in sensor.problems
        assert sensor.poll_once(0) == []
        opener.fire(mem.path)
        assert sensor.poll_once(0) == [PressureEvent(42.0, mem)] and got == [PressureEvent(42.0, mem)]
        assert sensor.poll_once(0) == [], "an eventfd's counter is drained: it reports once"
        sensor.arm([cpu], "some 150000 1000000", "low")
        assert sensor.armed_sources() == (cpu,) and len(opener.armed) == 2, "cpu stays armed, not re-armed"
        sensor.arm([cpu], "some 200000 1000000", "low")
        assert len(opener.armed) == 3 and opener.armed[-1] == (cpu.path, "some 200000 1000000", "low")
        os.close(opener.writers[cpu.path])  # the group went away: POLLHUP
        assert sensor.poll_once(0) == [] and sensor.armed_sources() == ()
    finally:
        sensor.stop()


def test_sensor_thread_wakes_on_a_trigger_and_stops() -> None:
    import threading

    fired = threading.Event()
    opener = PipeOpener()
    sensor = PressureSensor(lambda e: fired.set(), lambda: 0.0, opener)
    src = Source("memory", "kubepods", "psi", "/x/memory.pressure")
    sensor.arm([src], "some 150000 1000000", "low")
    sensor.start()
    try:
        assert sensor.alive
        opener.fire(src.path, b"x")
        assert fired.wait(10), "the thread blocked in poll() reports the trigger"
    finally:
        sensor.stop()
    assert not sensor.alive


def test_sources_per_cgroup_version(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True)
    for r in ("cpu", "memory"):
        (proc / "pressure" / r).write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    v1 = kubelet_cgroup_tree("v1")
    Path(v1.kubepods.memory, "memory.pressure_level").write_text("")
    got = {(s.resource, s.scope, s.kind) for s in sources_for(v1.kubepods, [], str(proc))}
    assert got == {("cpu", "node", "psi"), ("memory", "node", "psi"), ("memory", "kubepods", "pressure_level")}
    v2 = kubelet_cgroup_tree("v2")
    v2.add_pod("u-web", "Burstable", {"c": "containerd://" + "a" * 64}, cpu_request_milli=100)
    online = [("default/web", v2.pods["u-web"].dirs)]
    got = {(s.resource, s.scope, s.kind) for s in sources_for(v2.kubepods, online, str(proc))}
    assert got == {
        ("cpu", "kubepods", "psi"),
        ("memory", "kubepods", "psi"),
        ("cpu", "pod default/web", "psi"),
        ("memory", "pod default/web", "psi"),
    }
    assert sources_for(v1.kubepods, [], str(tmp_path / "no-proc")) == (
        Source("memory", "kubepods", "pressure_level", os.path.join(v1.kubepods.memory, "memory.pressure_level")),
    )


# --- the daemon: a trigger samples and decides at once ---------------------------------------------------------


def _event(h: object, resource: str) -> None:
    agent = h.agent  # type: ignore[attr-defined]
    src = Source(resource, "kubepods", "psi", f"/x/{resource}.pressure")  # type: ignore[arg-type]
    agent.inbox.pressure(PressureEvent(agent.clock.monotonic(), src))


@pytest.mark.parametrize("with_trigger", [True, False])
def test_sustained_pressure_evicts_within_a_second_of_the_trigger(
    kubelet_cgroup_tree: Tree, tmp_path: Path, with_trigger: bool
) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 1.0, "u-crunch": 2.5}  # 87.5 % of 4 cores: past the 80 % high watermark
    h.tick(1)  # one sample over
    if with_trigger:
        _event(h, "cpu")
    h.agent.step()
    h.tick(1, seconds=0.2)
    notes = h.agent.cycle.last_plan.explanations  # type: ignore[union-attr]
    assert any("pressure trigger (cpu)" in n for n in notes) == with_trigger
    for _ in range(3):  # 0.8 s of agent time in all
        h.tick(1, seconds=0.2)
    if with_trigger:
        assert [c.name for c in h.evictor.calls] == ["crunch"], "3 samples over within 0.5 s of the trigger"
        assert h.annotations().get(ANN_OFFLINE_JOB_EVICTING) == "true"
        assert h.agent.stats.pressure_triggers[("cpu", "psi")] == 1
        assert h.agent.stats.reaction["pressure"].count == 1
    else:
        assert h.evictor.calls == [], "without a trigger the rule waits for 3 one-second samples"
    h.tick(2)
    assert [c.name for c in h.evictor.calls] == ["crunch"]


def test_an_online_spike_of_a_second_does_not_evict_under_the_satisfaction_measure(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    """The default measure: online usage alone past the high watermark evicts, but only after N sampler periods. Before,
    a CPU trigger's fast samples confirmed it in 0.75 s: a 1.5 s online spike on `make run`'s node evicted both offline
    jobs, although the tier's ceiling had already cut them within the first fast sample."""
    h = scenario(kubelet_cgroup_tree, tmp_path, config_text=None)
    h.cores = {"u-web": 3.5, "u-crunch": 0.1, "u-etl": 0.05}  # online alone 87.5 % of 4 cores: past the 80 %
    h.tick(1)
    _event(h, "cpu")
    h.agent.step()
    for _ in range(5):  # a second of fast samples
        h.tick(1, seconds=0.2)
    assert h.evictor.calls == [], "a second of spike: the ceiling cut the tier, nothing evicted"
    h.cores = {"u-web": 0.5, "u-crunch": 0.1, "u-etl": 0.05}  # the spike ends
    h.tick(3)
    assert h.evictor.calls == []
    h.cores = {"u-web": 3.5, "u-crunch": 0.1, "u-etl": 0.05}  # sustained this time: 3 sampler periods
    h.tick(4)
    assert h.evictor.calls, "online usage alone past the watermark for 3 periods evicts"
    assert any("OnlineCPUHighWatermark" in r for r in h.events.reasons())


@pytest.mark.parametrize("memory_gib", [0, 9])
def test_fast_sampling_near_the_watermark_ends_when_pressure_is_over(
    kubelet_cgroup_tree: Tree, tmp_path: Path, memory_gib: int
) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.tree.set_memory("u-crunch", memory_gib * GiB)  # 9 GiB = 56 % of 16: within 10 points of the 60 % mark
    h.tick(1)
    before = h.agent.stats.samples
    _event(h, "memory")
    h.tick(1, seconds=0.05)
    for _ in range(12):  # 3 s in 0.25 s steps: fast while the 2 s hold lasts, then back to 1 s
        h.tick(1, seconds=0.25)
    taken = h.agent.stats.samples - before
    if memory_gib == 0:
        assert taken == 4, "far under the watermark: the trigger's own sample, then one per second"
        return
    assert 8 <= taken <= 11, taken
    samples = h.agent.cycle.window.samples
    assert samples[-1].triggered == () and samples[-len(samples)].triggered == ()
    assert any(s.triggered == ("memory",) for s in samples)


def test_a_memory_trigger_tightens_offline_memory_high_at_once_on_v2(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path, version="v2")
    h.tree.set_memory("u-crunch", 2 * GiB)
    h.tick(2)
    calm = knob(h, "u-crunch", "memory.high")
    assert calm != str(2 * GiB), "memory is far under its high watermark: not held at the working set"
    _event(h, "memory")
    h.tick(1, seconds=0.05)
    assert knob(h, "u-crunch", "memory.high") == str(2 * GiB), "held at its working set by the triggered sample"
    assert knob(h, "u-web", "memory.high") == "max", "online pods are never capped"
    h.tick(5)
    assert knob(h, "u-crunch", "memory.high") == calm, "released when pressure is over"


def test_pressure_disabled_ignores_triggers(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path, config_text="pressure: {enabled: false}\n")
    h.cores = {"u-web": 1.0, "u-crunch": 2.5}
    h.tick(1)
    _event(h, "cpu")
    for _ in range(5):
        h.tick(1, seconds=0.2)
    assert h.evictor.calls == [] and h.agent.stats.pressure_triggers == {}


def test_psi_and_throttling_metrics(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path, version="v2")
    h.agent.sampler._node_psi = {}  # the host's /proc/pressure is not the fake tree's
    h.tree.write(h.tree.kubepods, "cpu.pressure", "some avg10=12.50 avg60=1.00 avg300=0.00 total=5\n")
    h.tree.write(h.tree.pods["u-web"].dirs, "memory.pressure", "some avg10=40.00 avg60=0 avg300=0 total=1\n")
    etl = h.tree.pods["u-etl"].dirs
    h.tick(11)  # a reconcile reads cpu.stat (the first read is the base)
    stat = h.tree.read(etl, "cpu.stat")
    h.tree.write(
        etl,
        "cpu.stat",
        stat.replace("nr_periods 0", "nr_periods 100")
        .replace("nr_throttled 0", "nr_throttled 40")
        .replace("throttled_usec 0", "throttled_usec 2500000"),
    )
    h.tick(10)
    _event(h, "memory")
    h.tick(1, seconds=0.1)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(h.agent))
    text = generate_latest(registry).decode()
    assert 'tidemark_agent_pressure_some_ratio{resource="cpu",scope="kubepods"} 0.125' in text
    assert 'tidemark_agent_pressure_some_ratio{resource="memory",scope="online_pods_max"} 0.4' in text
    assert 'tidemark_agent_pressure_triggers_total{resource="memory",source="psi"} 1.0' in text
    assert 'tidemark_agent_cpu_cfs_throttled_periods_total{class="offline"} 40.0' in text
    assert 'tidemark_agent_cpu_cfs_throttled_seconds_total{class="offline"} 2.5' in text
    assert 'tidemark_agent_cpu_cfs_periods_total{class="offline"} 100.0' in text
    assert "default/web cpu 0.0 %, memory 40.0 %" in "\n".join(h.agent.cycle.last_plan.explanations)  # type: ignore[union-attr]


def test_unprivileged_trigger_rounds_the_window_to_2s() -> None:
    from agent.sense.pressure import unprivileged_trigger

    assert unprivileged_trigger("some 150000 1000000") == "some 300000 2000000"
    assert unprivileged_trigger("full 500000 3000000") == "full 666666 4000000"
    assert unprivileged_trigger("some 150000 2000000") is None
    assert unprivileged_trigger("bogus") is None


def test_a_memory_onset_samples_at_once_while_cpu_pressure_lasts(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 1.0, "u-crunch": 1.9}  # 72.5 % of 4 cores: within 10 points of the 80 % mark
    h.tick(1)
    _event(h, "cpu")
    h.tick(1, seconds=0.05)  # the cpu onset: sampled
    n = h.agent.stats.samples
    h.tick(1, seconds=0.1)
    _event(h, "cpu")  # cpu pressure lasts: the next sample waits for fast_period
    h.tick(1, seconds=0.05)
    assert h.agent.stats.samples == n
    _event(h, "memory")  # a memory onset: sampled at once
    h.tick(1, seconds=0.05)
    assert h.agent.stats.samples == n + 1 and h.agent.cycle.window.samples[-1].triggered == ("cpu", "memory")


def test_cpu_pressure_neither_hurries_nor_delays_a_memory_eviction(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.tree.set_memory("u-crunch", 12 * GiB)  # 75 % of 16 GiB: memory past its 60 % high watermark
    h.tick(1)
    _event(h, "cpu")
    for _ in range(4):
        h.tick(1, seconds=0.2)
    assert h.evictor.calls == [], "fast samples taken for CPU pressure do not count for memory"
    for _ in range(8):  # CPU pressure goes on; memory counts one sample per sampler period
        _event(h, "cpu")
        h.tick(1, seconds=0.25)
    assert [c.name for c in h.evictor.calls] == ["crunch"], "3 periods over: evicted as without pressure"


def test_a_memory_trigger_confirms_memory_fast(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.tree.set_memory("u-crunch", 12 * GiB)
    h.tick(1)
    _event(h, "memory")
    for _ in range(4):
        h.tick(1, seconds=0.2)
    assert [c.name for c in h.evictor.calls] == ["crunch"]
    assert any("MemoryHighWatermark" in r for r in h.events.reasons())


def test_counted_resources_of_a_sample() -> None:
    def fast(t: float, triggered: tuple[str, ...] = ()) -> Sample:
        return Sample(t, 0.25, Amounts(), Amounts(), triggered=triggered)  # type: ignore[arg-type]

    window = [_sample(9.0, ("memory",)), _sample(10.1), fast(10.35), fast(10.6, ("cpu",)), fast(10.85), fast(11.1)]
    assert pressure.counted(window[1], window, 1.0, CFG) == ("cpu", "memory"), "a sample of the sampler period"
    assert pressure.counted(window[2], window, 1.0, CFG) == ("memory",), "memory's trigger lasts (9.0 + 2 s)"
    assert pressure.counted(window[3], window, 1.0, CFG) == ("cpu", "memory")
    assert pressure.counted(window[4], window, 1.0, CFG) == ("cpu", "memory")
    assert pressure.counted(window[5], window, 1.0, CFG) == ("cpu", "memory"), "the first of a new period"
    late = [_sample(9.0, ("memory",)), _sample(11.1), fast(11.35), fast(11.6, ("cpu",)), fast(11.85)]
    assert pressure.counted(late[2], late, 1.0, CFG) == ()
    assert pressure.counted(late[4], late, 1.0, CFG) == ("cpu",), "the cpu trigger at 11.6 lasts; memory's ended"
    assert pressure.counted(fast(5.0), [fast(5.0)], 1.0, CFG) == ("cpu", "memory"), "nothing before: a new period"
    # the satisfaction measure with a tier: a fast sample never counts for CPU (the ceiling cuts the tier at once)
    assert pressure.counted(window[3], window, 1.0, CFG, cpu_fast=False) == ("memory",)
    assert pressure.counted(late[4], late, 1.0, CFG, cpu_fast=False) == ()
    assert pressure.counted(window[5], window, 1.0, CFG, cpu_fast=False) == ("cpu", "memory"), "a new period counts"


def test_healthz_turns_red_when_the_sensor_thread_died(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    from agent.daemon.agent import AgentOptions

    opener = PipeOpener()
    options = AgentOptions(threaded_api=False, config_poll=1.0, pressure_sensor=True, pressure_opener=opener)
    h = scenario(kubelet_cgroup_tree, tmp_path, options=options)
    sensor = h.agent.cycle.pressure_sensor
    assert sensor is not None and sensor.alive and h.agent.healthy()[0]
    sensor._stop.set()  # the thread ends as if it had died, while the agent still runs
    sensor._kick()
    assert sensor._thread is not None
    sensor._thread.join(10)
    sensor._stop.clear()
    assert h.agent.healthy() == (False, "the pressure sensor thread died")
    h.agent.shutdown()
    assert not sensor.died
