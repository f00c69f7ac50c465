"""The network QoS loop of the daemon: its own thread, every `networkQoS.period`, sense -> decide -> act.

It runs beside the main cycle (entering pods' namespaces and dumping links must never delay a CPU or
memory decision) and reads the daemon's state only through callables: the configuration in force, the
pods (class from `PodView.offline`), the processes of offline pods (the knob sensor's `pids`), the Node
object events go to. Events and metrics come from `agent.daemon.netqos.NetworkQos`. `--dry-run` decides
and logs, applies nothing. A restore (uninstall, `restore` without a running agent) removes every qdisc
and IFB it made; a restore request to a running agent pauses the knobs, and a paused agent's network
loop removes its qdiscs at its next period and stays off until the agent restarts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.config import AgentConfig
from agent.daemon.apiworker import EventSink
from agent.daemon.netqos import NetworkQos
from agent.decide.netqos import NetPlan
from agent.model import PodView
from agent.sense.network import PodNet
from tidemark.apis import PodUID
from tidemark.clock import Clock

log = logging.getLogger(__name__)


class NetworkLoop:
    def __init__(
        self,
        qos: NetworkQos,
        *,
        config: Callable[[], AgentConfig],
        pods: Callable[[], Sequence[PodView]],
        pids: Callable[[], Mapping[PodUID, Sequence[int]]],
        node_ref: Callable[[], Mapping[str, Any] | None],
        events: EventSink,
        clock: Clock,
        dry_run: bool = False,
        paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self.qos = qos
        self._config = config
        self._pods = pods
        self._pids = pids
        self._node_ref = node_ref
        self.events = events
        self.clock = clock
        self.dry_run = dry_run
        #: a restore request paused the knobs: network QoS removes what it made and stays off likewise
        self._paused = paused
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the thread's ticks and a restore never interleave

    def pod_nets(self) -> list[PodNet]:
        """Offline pods with one of their processes (online pods' traffic is the NIC's minus these)."""
        pids = self._pids()
        out = []
        for p in self._pods():
            if not p.offline:
                continue
            found = pids.get(p.uid) or ()
            out.append(PodNet(p.uid, p.key, True, pid=found[0] if found else None))
        return out

    def tick(self) -> NetPlan:
        with self._lock:
            return self._tick()

    def _tick(self) -> NetPlan:
        config = self._config().network_qos
        if self._paused():
            config = replace(config, enabled=False)
        plan, events = self.qos.tick(config, self.pod_nets(), self.clock.monotonic(), dry_run=self.dry_run)
        if self.dry_run and plan.enabled:
            for line in plan.explanations:
                log.info("dry run: %s", line)
        node = self._node_ref()
        for ev in events:
            log.info("%s: %s", ev.reason, ev.message)
            if node is not None:
                self.events.event(node, ev.type, ev.reason, ev.message)
        return plan

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="network-qos", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a bug must not end the loop; the next period retries
                log.exception("network QoS loop failed")
            self._stop.wait(self._config().network_qos.period)

    def stop(self, *, restore: bool = False) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if restore and not self.dry_run:
            self.restore()

    def restore(self) -> int:
        """Remove every journaled qdisc and IFB; the number of veths that could not be cleaned."""
        with self._lock:
            failed = [o for o in self.qos.restore() if not o.ok]
        for o in failed:
            log.warning("network QoS restore: %s: %s", o.veth, o.error)
        return len(failed)


def restore_network(state_dir: str) -> tuple[int, int]:
    """`tidemark-agent restore`: (veths cleaned, veths failed) from the state dir's network journal alone."""
    import os

    from agent.act.tc_writer import JOURNAL

    if not os.path.exists(os.path.join(state_dir, JOURNAL)):
        return 0, 0  # network QoS never ran here: pyroute2 is not even imported
    outcomes = NetworkQos.for_node(state_dir).restore()
    return sum(o.ok for o in outcomes), sum(not o.ok for o in outcomes)
