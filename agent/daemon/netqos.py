"""Network QoS for one node, end to end: sense -> decide -> act, its state, events and metrics.

The daemon calls `NetworkQos.tick(config, pods, now)` every `networkQoS.period`; `plan` calls
`plan_network` (K samples, nothing applied); `restore` and uninstall call `restore()`. Turning
`networkQoS.enabled` off removes everything journaled at the next tick. Events (reason, message) are
returned for the daemon's event sink: `NetworkCeilingLowered` / `NetworkCeilingRestored` when a
direction's ceiling moves, `NetworkShapingFailed` once per veth and error (repeated failures of the
same veth with the same error are not re-reported).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.act.tc_writer import JOURNAL, TcJournal, TcOutcome, TcWriter
from agent.config import NetworkQosConfig
from agent.decide.netqos import DIRECTIONS, NetPlan, NetState, decide_netqos, fmt_bps
from agent.model import NetSnapshot
from agent.sense.network import NetSensor, PodNet

log = logging.getLogger(__name__)
PREFIX: Final = "tidemark_agent_network_"


@dataclass(frozen=True, slots=True)
class NetEvent:
    reason: str
    message: str
    type: str = "Normal"


@dataclass
class NetStats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    operations: Counter[tuple[str, str]] = field(default_factory=Counter)  # (action, result)
    ticks: int = 0
    failures: int = 0


class NetworkQos:
    def __init__(self, sensor: NetSensor, writer: TcWriter) -> None:
        self.sensor = sensor
        self.writer = writer
        self.state = NetState()
        self.last: NetPlan | None = None
        self.last_snapshot: NetSnapshot | None = None
        self.stats = NetStats()
        self._reported: dict[str, str] = {}

    @classmethod
    def for_node(cls, state_dir: str | None, proc_root: str = "/proc", sys_root: str = "/sys") -> NetworkQos:
        """The node's network QoS; without a state dir (`--dry-run`) there is no journal to read or write."""
        import os

        journal = TcJournal(os.path.join(state_dir, JOURNAL) if state_dir else os.devnull)
        if state_dir:
            journal.load()
        return cls(NetSensor(proc_root=proc_root, sys_root=sys_root), TcWriter(journal))

    def tick(
        self, config: NetworkQosConfig, pods: Sequence[PodNet], now: float, *, dry_run: bool = False
    ) -> tuple[NetPlan, list[NetEvent]]:
        """One cycle. Never raises: a sensing or netlink failure is logged, counted and retried next tick."""
        events: list[NetEvent] = []
        try:
            if not config.enabled:
                plan = decide_netqos(None, config, NetState(), now)
                self.state = NetState()
                if self.writer.journal.links and not dry_run:
                    events += self._record(self.writer.restore())
            else:
                snapshot = self.sensor.sample(now, pods, config.interface)
                self.last_snapshot = snapshot
                plan = decide_netqos(snapshot, config, self.state, now)
                events += self._moves(self.state, plan)
                self.state = plan.next_state
                if not dry_run:
                    events += self._record(self.writer.apply(plan.shapes))
        except Exception as e:
            log.warning("network QoS cycle failed: %s", e)
            with self.stats.lock:
                self.stats.failures += 1
            return self.last or NetPlan(enabled=config.enabled), events
        with self.stats.lock:
            self.stats.ticks += 1
        self.last = plan
        return plan, events

    def restore(self) -> list[TcOutcome]:
        outcomes = self.writer.restore()
        self._record(outcomes)
        self.state = NetState()
        return outcomes

    def _moves(self, before: NetState, plan: NetPlan) -> list[NetEvent]:
        out: list[NetEvent] = []
        t = plan.thresholds
        if t is None:
            return out
        for d in DIRECTIONS:
            was, now = before.of(d).limited, plan.next_state.of(d).limited
            online = plan.online_download_bps if d == "download" else plan.online_upload_bps
            shown = "unknown" if online is None else fmt_bps(online)
            if now and not was:
                out.append(
                    NetEvent(
                        "NetworkCeilingLowered",
                        f"online {d} {shown} past {fmt_bps(t.high)}: offline ceiling {fmt_bps(t.limit)} -> "
                        f"{fmt_bps(t.minimum)} over {len(plan.shapes)} pod(s)",
                        "Warning",
                    )
                )
            elif was and not now:
                out.append(
                    NetEvent(
                        "NetworkCeilingRestored",
                        f"online {d} {shown} under {fmt_bps(t.low)}: offline ceiling back to {fmt_bps(t.limit)}",
                    )
                )
        return out

    def _record(self, outcomes: Sequence[TcOutcome]) -> list[NetEvent]:
        events: list[NetEvent] = []
        with self.stats.lock:
            for o in outcomes:
                self.stats.operations[(o.action, "ok" if o.ok else "failed")] += 1
        for o in outcomes:
            if o.ok:
                self._reported.pop(o.veth, None)
                continue
            if self._reported.get(o.veth) == o.error:
                continue
            self._reported[o.veth] = o.error
            events.append(
                NetEvent("NetworkShapingFailed", f"{o.pod or o.veth}: {o.action} on {o.veth}: {o.error}", "Warning")
            )
        return events


class NetworkQosCollector(Collector):
    """Gauges of the last network plan and counters of tc operations (no pod labels)."""

    def __init__(self, qos: NetworkQos) -> None:
        self.qos = qos

    def collect(self) -> Iterator[Metric]:
        plan = self.qos.last
        enabled = GaugeMetricFamily(PREFIX + "qos_enabled", "1 when networkQoS.enabled is in force.")
        enabled.add_metric([], 1.0 if plan is not None and plan.enabled else 0.0)
        yield enabled
        ceiling = GaugeMetricFamily(
            PREFIX + "offline_ceiling_bytes_per_second",
            "Ceiling of all offline pods together (0: nothing shaped).",
            labels=["direction"],
        )
        online = GaugeMetricFamily(
            PREFIX + "online_bytes_per_second", "Online traffic: NIC minus offline veths.", labels=["direction"]
        )
        limited = GaugeMetricFamily(
            PREFIX + "offline_limited",
            "1 while the ceiling is at offlineMin (online past its watermark).",
            labels=["direction"],
        )
        for d in DIRECTIONS:
            ceiling.add_metric([d], (plan.ceiling(d) / 8) if plan else 0.0)
            rate = None if plan is None else (plan.online_download_bps if d == "download" else plan.online_upload_bps)
            if rate is not None:
                online.add_metric([d], rate / 8)
            limited.add_metric([d], 1.0 if plan is not None and plan.next_state.of(d).limited else 0.0)
        yield ceiling
        yield online
        yield limited
        shaped = GaugeMetricFamily(PREFIX + "shaped_pods", "Offline pods shaped on their veth.")
        shaped.add_metric([], float(len(plan.shapes)) if plan else 0.0)
        yield shaped
        unshaped = GaugeMetricFamily(
            PREFIX + "unshaped_offline_pods", "Offline pods not shaped, by reason.", labels=["reason"]
        )
        reasons = Counter(u.reason for u in plan.unshaped) if plan else Counter()
        for reason in ("hostNetwork", "NoVeth"):
            unshaped.add_metric([reason], float(reasons[reason]))
        yield unshaped
        ops = CounterMetricFamily(
            PREFIX + "tc_operations", "Per-veth shaping operations by action and result.", labels=["action", "result"]
        )
        with self.qos.stats.lock:
            items = sorted(self.qos.stats.operations.items())
            failures = self.qos.stats.failures
        for (action, result), n in items:
            ops.add_metric([action, result], float(n))
        yield ops
        fails = CounterMetricFamily(PREFIX + "cycle_failures", "Network QoS cycles that raised (retried next period).")
        fails.add_metric([], float(failures))
        yield fails


def plan_network(
    config: NetworkQosConfig,
    pods: Sequence[PodNet],
    samples: int,
    interval: float,
    sensor: NetSensor | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> NetPlan:
    """`plan`: K rates (K+1 counter reads, `interval` apart) folded through the hysteresis; nothing applied."""
    if not config.enabled:
        return decide_netqos(None, config, NetState(), clock())
    sensor = sensor or NetSensor()
    state = NetState()
    sensor.sample(clock(), pods, config.interface)
    plan = decide_netqos(None, config, state, clock())
    for _ in range(max(1, samples)):
        sleep(interval)
        now = clock()
        plan = decide_netqos(sensor.sample(now, pods, config.interface), config, state, now)
        state = plan.next_state
    return plan
