"""`tidemark-agent run`'s daemon, wired: `Agent` builds the collaborators and owns the process's life.

It runs nothing itself: the loop's duties and their reasons are the table of `agent.daemon.cycle.Cycle`
(sample, read knobs, decide, ...); the network QoS loop (`agent.daemon.netloop`) runs on its own thread.
What `Agent` keeps is what belongs to the process: start and shutdown (journal replay, watches, threads,
the restore on uninstall), the loop that waits for the next duty or a wake-up (`run`), a failed cycle
counted instead of raised, and the probes (/healthz `healthy`, /readyz `ready`, the `info` gauges).
Readers of the loop's state go to its owner: `Agent.cycle` (last plan, state, window, status),
`Agent.keeper` (configuration in force), `Agent.view` (the Node and Pods as decided on).

The rooms: `inbox` (other threads' news), `clusterview` (the Node and Pods as the decision sees them, our
evictions overlaid), `apijobs` + `apiworker` (Node patches and evictions on their own thread, so an API
outage never stalls sampling or local QoS), `qosapply` (knob reads, writes, restores and their accounting),
`reload` (configuration in force), `wording` (every event's reason and message), `metrics`.
Everything with a side effect is an executor (`agent.act`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.act.cgroup_writer import CgroupWriter
from agent.act.statedir import StateDir
from agent.cgroups.fs import FileReader
from agent.cgroups.layout import KubeLayout
from agent.daemon.apiworker import ApiWorker, EventSink, EvictorLike, NodeWriterLike, NullEvents
from agent.daemon.cluster import ClusterSource
from agent.daemon.clusterview import ClusterView
from agent.daemon.configsource import ConfigSource
from agent.daemon.cycle import Cycle
from agent.daemon.inbox import Inbox
from agent.daemon.metrics import Stats
from agent.daemon.netloop import NetworkLoop
from agent.daemon.netqos import NetworkQos
from agent.daemon.podcache import PodCache
from agent.daemon.qosapply import QosApplier
from agent.daemon.reload import ConfigKeeper
from agent.sense.counters import PodCounters
from agent.sense.knobs import KnobSensor
from agent.sense.pressure import Opener, PressureSensor
from agent.sense.procfs import ProcFS
from agent.sense.sampler import Sampler
from tidemark.apis import PodUID
from tidemark.clock import Clock

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """Runtime options that are not node policy (the YAML config holds the policy)."""

    dry_run: bool = False
    #: seconds between polls of the configuration file
    config_poll: float = 2.0
    #: /readyz: the API answered within this many seconds (the watches reopen every `watch_timeout`)
    api_ready_window: float = 130.0
    #: /healthz: the main loop ran within this many seconds (plus 5 of its longest periods)
    stall_seconds: float = 30.0
    #: /healthz: red after this many cycles in a row failed (a decision that raises every cycle is not alive)
    failing_cycles: int = 5
    #: a pod we evicted counts as terminating from the eviction until the API shows it (grace + this)
    overlay_slack: float = 10.0
    #: the API worker runs on a thread (False: inline, for tests)
    threaded_api: bool = True
    #: the pressure path: watch the kernel's pressure files on a thread (`agent.sense.pressure`; on in
    #: `tidemark-agent run`, off by default here so tests on fake trees never arm the host's /proc/pressure)
    pressure_sensor: bool = False
    #: how the pressure sensor arms its sources (None: the kernel's files; tests inject pipes)
    pressure_opener: Opener | None = None


class Agent:
    """The daemon's wiring and life: `run()` steps the cycle until `stop()` (see the module docstring)."""

    def __init__(
        self,
        *,
        node_name: str,
        layout: KubeLayout,
        procfs: ProcFS,
        reader: FileReader,
        clock: Clock,
        cluster: ClusterSource,
        config: ConfigSource,
        state: StateDir | None,
        node_writer: NodeWriterLike | None = None,
        evictor: EvictorLike | None = None,
        events: EventSink | None = None,
        options: AgentOptions | None = None,
        notifier: Any = None,
    ) -> None:
        self.node_name = node_name
        self.layout = layout
        self.procfs = procfs
        self.reader = reader
        self.clock = clock
        self.cluster = cluster
        self.config_source = config
        self.options = options or AgentOptions()
        self.dry_run = self.options.dry_run
        self.state_dir = state if not self.dry_run else None
        self.events: EventSink = events if (events is not None and not self.dry_run) else NullEvents()
        self.notifier = notifier
        self.stats = Stats()
        #: cycles failed in a row, and how the last one failed (/healthz)
        self.failing = 0
        self.last_failure = ""
        journal = self.state_dir.journal if self.state_dir is not None else None
        if journal is not None:
            journal.proc_root = procfs.root
        self.writer = CgroupWriter(journal, roots=layout.kubepods().distinct(), proc_root=procfs.root, clock=clock.wall)
        self.pods = PodCache(self.state_dir.qos if self.state_dir is not None else None)
        self.sensor = KnobSensor(layout, reader, procfs)
        self.sampler = Sampler(layout, {}, procfs, reader, clock)
        self.inbox = Inbox()
        self.worker = ApiWorker(
            None if self.dry_run else node_writer,
            None if self.dry_run else evictor,
            self.events,
            self.inbox.report,
            self.stats,
            threaded=self.options.threaded_api,
            wall=clock.wall,
            monotonic=clock.monotonic,
        )
        self.keeper = ConfigKeeper(config, self.events, self.stats)
        self.view = ClusterView(
            cluster, self.pods, self.events, clock, self.stats, self.state_dir, self.options.overlay_slack
        )
        self.qos = QosApplier(
            self.writer, self.sensor, self.state_dir, self.pods, self.events, self.stats, procfs, clock.wall
        )
        pressure_sensor = None
        if self.options.pressure_sensor:
            pressure_sensor = PressureSensor(self.inbox.pressure, clock.monotonic, self.options.pressure_opener)
        self.cycle = Cycle(
            node_name=node_name,
            clock=clock,
            inbox=self.inbox,
            cluster=cluster,
            keeper=self.keeper,
            view=self.view,
            qos=self.qos,
            worker=self.worker,
            sampler=self.sampler,
            sensor=self.sensor,
            counters=PodCounters(reader),
            pods=self.pods,
            stats=self.stats,
            state_dir=self.state_dir,
            procfs=procfs,
            pressure_sensor=pressure_sensor,
            config_poll=self.options.config_poll,
            dry_run=self.dry_run,
        )
        self.network = NetworkLoop(
            NetworkQos.for_node(self.state_dir.path if self.state_dir is not None else None, proc_root=procfs.root),
            config=lambda: self.keeper.config,
            pods=lambda: self.pods.views,
            pids=lambda: dict(self.sensor.pids),
            node_ref=lambda: self.view.node_obj,
            events=self.events,
            clock=clock,
            dry_run=self.dry_run,
            paused=lambda: self.qos.paused,
        )
        self._stop = threading.Event()
        self._ready_sent = False
        self._last_watchdog = 0.0
        cluster.set_listener(self._on_cluster_change)

    def step(self, *, once: bool = False) -> None:
        """One step of the cycle: every duty due now (`agent.daemon.cycle`)."""
        self.cycle.step(once=once)

    # --- wiring -----------------------------------------------------------------------------------------

    def _on_cluster_change(self, kind: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """Reflector threads: hand the changed pod to the loop and wake it."""
        if kind == "pods":
            obj = new or old or {}
            uid = (obj.get("metadata") or {}).get("uid")
            if uid:
                self.inbox.pod_changed(PodUID(str(uid)))
            if self.qos.trigger is None:
                self.qos.trigger = self.clock.wall()
        self.inbox.wake()

    def wake(self) -> None:
        self.inbox.wake()

    def stop(self) -> None:
        self._stop.set()
        self.inbox.wake()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # --- health -------------------------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        """Process and loops alive; never depends on the API server."""
        c = self.keeper.config
        longest = max(c.sampler.period, c.eviction.period, c.capacity.period, c.qos.reconcile)
        age = self.clock.monotonic() - self.cycle.last_loop
        limit = self.options.stall_seconds + 5 * longest
        if age > limit:
            return False, f"the main loop last ran {age:.0f}s ago (limit {limit:.0f}s)"
        if self.worker.threaded and self.worker._thread is not None and not self.worker._thread.is_alive():
            return False, "the API writer thread died"
        if self.cycle.pressure_sensor is not None and self.cycle.pressure_sensor.died:
            return False, "the pressure sensor thread died"
        if self.failing >= self.options.failing_cycles:
            return False, f"the last {self.failing} cycles failed; the last with {self.last_failure}"
        return True, f"main loop ran {age:.1f}s ago"

    def api_age(self) -> float | None:
        times = [t for t in (self.cluster.last_contact(), self.worker.last_success) if t is not None]
        return self.clock.monotonic() - max(times) if times else None

    def ready(self) -> tuple[bool, str]:
        """First sync done, a first decision made, and the API reached recently."""
        if not self.cluster.synced():
            return False, "waiting for the first list of the Node and its Pods"
        if self.view.node is None:
            return False, f"node {self.node_name} not found"
        if self.cycle.last_plan is None:
            return False, "no decision yet (waiting for samples)"
        age = self.api_age()
        if age is None or age > self.options.api_ready_window:
            return False, f"the API server has not answered for {age or 0:.0f}s"
        return True, f"API answered {age:.0f}s ago"

    def info(self) -> dict[str, float]:
        age = self.api_age()
        return {
            "config_generation": float(self.keeper.generation),
            "config_ok": 1.0 if self.config_source.ok else 0.0,
            "api_age": -1.0 if age is None else age,
            "ready": 1.0 if self.ready()[0] else 0.0,
        }

    # --- start, stop, the loop -------------------------------------------------------------------------------

    def start(self) -> None:
        """Replay the journal (a previous run may have been killed mid-way) and start the watches."""
        if self.state_dir is not None:
            replayed = self.writer.replay()
            if replayed.released:
                log.info("journal replay: %d entr(ies) no longer hold our value; dropped", replayed.released)
            log.info("journal: %d knob/process value(s) owned from a previous run", len(self.state_dir.journal))
        self.cycle.start()
        self.cluster.start()
        self.network.start()
        if self.dry_run:
            log.info("dry run: decisions are logged, nothing is written (no knobs, no API writes, no events)")

    def shutdown(self, restore: bool = False) -> None:
        self.network.stop(restore=restore and self.state_dir is not None)
        if restore and self.state_dir is not None:
            result = self.writer.restore_all()
            log.info("restored %d original value(s) on the way out", len(result.applied))
        self.worker.stop()
        self.cluster.stop()
        self.view.save_qos_classes()
        self.cycle.stop()

    def run(self, *, once: bool = False, once_timeout: float = 60.0) -> int:
        """Loop until stop() (or, with `once`, until one full decision was applied). Returns the exit code."""
        deadline = self.clock.monotonic() + once_timeout
        while not self._stop.is_set():
            self.run_cycle(once=once)
            if once and self.cycle.once_done:
                self.worker.flush(10.0)
                return 1 if self.worker.backing_off() else 0
            if once and self.clock.monotonic() > deadline:
                log.error("--once: no full decision within %.0fs (%s)", once_timeout, self.ready()[1])
                return 1
            self._heartbeat()
            if self.inbox.woken.wait(min(self.cycle.delay(), 1.0)):
                self.inbox.woken.clear()
        return 0

    def run_cycle(self, *, once: bool = False) -> bool:
        """One step; a failure is counted (N in a row turn /healthz red, with why), never raised."""
        try:
            self.step(once=once)
        except Exception as exc:  # a bug in one cycle must not end the agent; the next cycle retries
            self.stats.decision_failures += 1
            self.failing += 1
            self.last_failure = f"{type(exc).__name__}: {exc}"[:300]
            log.exception("cycle failed")
            return False
        self.failing = 0
        return True

    def _heartbeat(self) -> None:
        n = self.notifier
        if n is None:
            return
        if not self._ready_sent and self.cycle.last_plan is not None:
            self._ready_sent = True
            n.ready(f"deciding for node {self.node_name}")
        interval = getattr(n, "watchdog_interval", None)
        now = self.clock.monotonic()
        if interval and now - self._last_watchdog >= interval and self.healthy()[0]:
            self._last_watchdog = now
            n.watchdog()
