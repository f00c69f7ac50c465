"""The network QoS cycle (sense -> decide -> act), its events and metrics, with a fake clock.

Sensing and the executor are replaced by recorders of our own classes' interfaces (no kernel state is
imitated); the real ones run against real namespaces in tests/integration/agent/test_netqos.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from agent.act.tc_writer import LinkRecord, TcJournal, TcOutcome
from agent.config import Bandwidth, NetworkQosConfig
from agent.daemon.netqos import NetworkQos, NetworkQosCollector, plan_network
from agent.decide.netqos import Shape
from agent.model import NetPod, NetSnapshot
from agent.sense.network import PodNet

M = 1_000_000
CONFIG = NetworkQosConfig(
    enabled=True,
    nic_speed=1000 * M,
    offline_limit=Bandwidth(bits=400 * M),
    offline_min=Bandwidth(bits=100 * M),
    online_high=Bandwidth(bits=800 * M),
    online_low=Bandwidth(bits=500 * M),
    consecutive=2,
)
PODS = [PodNet("u1", "batch/a", True, pid=10), PodNet("u2", "web/b", False, pid=11)]


class Sensor:
    def __init__(self, rx: list[float]) -> None:
        self.rx = list(rx)

    def sample(self, now: float, pods: Sequence[PodNet], interface: str = "") -> NetSnapshot:
        rx = self.rx.pop(0)
        return NetSnapshot(
            now, "eth0", None, rx, 0.0, (NetPod("u1", "batch/a", True, veth="veth1", tx_bps=0.0, rx_bps=0.0),)
        )


class Writer:
    def __init__(self, tmp: Path, fail: str = "") -> None:
        self.journal = TcJournal(str(tmp / "j.json"), fsync=False)
        self.applied: list[list[Shape]] = []
        self.restores = 0
        self.fail = fail

    def apply(self, shapes: Iterable[Shape]) -> list[TcOutcome]:
        shapes = list(shapes)
        self.applied.append(shapes)
        return [TcOutcome(s.veth, "shape", not self.fail, pod=s.key, error=self.fail) for s in shapes]

    def restore(self) -> list[TcOutcome]:
        self.restores += 1
        out = [TcOutcome(v, "remove", True) for v in self.journal.links]
        self.journal.links.clear()
        return out


def _qos(tmp_path: Path, rx: list[float], fail: str = "") -> tuple[NetworkQos, Writer]:
    writer = Writer(tmp_path, fail)
    return NetworkQos(Sensor(rx), writer), writer  # type: ignore[arg-type]


def test_ceiling_moves_with_events_and_shapes_applied(tmp_path: Path) -> None:
    qos, writer = _qos(tmp_path, [900 * M, 900 * M, 100 * M, 100 * M])
    reasons: list[list[str]] = []
    ceilings = []
    for t in range(4):
        plan, events = qos.tick(CONFIG, PODS, float(t))
        reasons.append([e.reason for e in events])
        ceilings.append(writer.applied[-1][0].download_bps)
    assert reasons == [[], ["NetworkCeilingLowered"], [], ["NetworkCeilingRestored"]]
    assert ceilings == [400 * M, 100 * M, 100 * M, 400 * M]
    assert qos.last is plan and not qos.state.download.limited


def test_failures_reported_once_per_error(tmp_path: Path) -> None:
    qos, _ = _qos(tmp_path, [0.0] * 3, fail="veth1 already has a root qdisc tbf")
    seen = [[e.reason for e in qos.tick(CONFIG, PODS, float(t))[1]] for t in range(3)]
    assert seen == [["NetworkShapingFailed"], [], []]
    assert qos.stats.operations[("shape", "failed")] == 3


def test_disabled_removes_what_is_journaled_and_dry_run_applies_nothing(tmp_path: Path) -> None:
    qos, writer = _qos(tmp_path, [0.0, 0.0])
    qos.tick(CONFIG, PODS, 0.0, dry_run=True)
    assert writer.applied == []
    writer.journal.links["veth1"] = LinkRecord(5, "tmq5")
    plan, _ = qos.tick(replace(CONFIG, enabled=False), PODS, 1.0)
    assert not plan.enabled and writer.restores == 1 and writer.journal.links == {}
    qos.tick(replace(CONFIG, enabled=False), PODS, 2.0)
    assert writer.restores == 1  # nothing journaled: nothing to do


def test_a_failing_cycle_never_raises(tmp_path: Path) -> None:
    qos, _ = _qos(tmp_path, [])  # the sensor raises IndexError
    plan, events = qos.tick(CONFIG, PODS, 0.0)
    assert plan.enabled and events == [] and qos.stats.failures == 1


def test_metrics(tmp_path: Path) -> None:
    qos, _ = _qos(tmp_path, [900 * M, 900 * M])
    registry = CollectorRegistry()
    registry.register(NetworkQosCollector(qos))
    qos.tick(CONFIG, PODS, 0.0)
    qos.tick(CONFIG, PODS, 1.0)
    text = generate_latest(registry).decode()
    assert 'tidemark_agent_network_offline_ceiling_bytes_per_second{direction="download"} 1.25e+07' in text
    assert 'tidemark_agent_network_offline_limited{direction="download"} 1.0' in text
    assert 'tidemark_agent_network_online_bytes_per_second{direction="download"} 1.125e+08' in text
    assert "tidemark_agent_network_shaped_pods 1.0" in text
    assert 'tidemark_agent_network_tc_operations_total{action="shape",result="ok"} 2.0' in text
    assert "tidemark_agent_network_qos_enabled 1.0" in text


def test_plan_network_folds_k_samples_with_a_fake_clock(tmp_path: Path) -> None:
    t = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        t[0] += s

    sensor: Any = Sensor([0.0, 900 * M, 900 * M, 900 * M])
    plan = plan_network(CONFIG, PODS, 3, 0.5, sensor=sensor, sleep=sleep, clock=lambda: t[0])
    assert slept == [0.5, 0.5, 0.5]
    assert plan.next_state.download.limited and plan.shapes[0].download_bps == 100 * M
    off = plan_network(NetworkQosConfig(), PODS, 3, 0.5, sensor=sensor, sleep=sleep, clock=lambda: t[0])
    assert not off.enabled and slept == [0.5, 0.5, 0.5]
