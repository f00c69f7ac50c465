"""The scheduling loop of `run`: the Scheduler object (`start()`, `stop()`; tests run it in-process).

One loop thread runs sessions, never two at a time: every `--schedule-period` (measured from the end
of the previous session, as Volcano's wait.Until), and earlier when the watch caches report a new
pending pod of ours, a pod releasing its node, or a node change (debounced, so a burst of pods is
one session). A periodic session due while earlier binds are still in flight waits for them, at most
one more period (`_hold_for_binds`); early wake-ups do not wait. A session = snapshot of the watch
caches (scheduler_ext.cache.live) -> the conf's actions over it (scheduler_ext.framework.cycle.run_session,
the same cycle `simulate` runs) -> a plan
(scheduler_ext.model.plan, which also asks for the `default` Queue when it is absent) -> the
executor (scheduler_ext.cache.executor: binds, evictions, Queue creation, status writes, events),
the only side effect, which works asynchronously while the loop goes on.

The other rooms: conf_source (conf and hot reload), leader (election and fencing), health (checks
and serving), client (the API client and its refresh-hook patch), observe (session metrics).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from prometheus_client import CollectorRegistry

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.cache.executor import Executor
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.framework.conf import SchedulerConf, cluster_warnings
from scheduler_ext.framework.cycle import run_session
from scheduler_ext.framework.interface import Action, ActionSpec, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.metrics import SchedulerMetrics
from scheduler_ext.model.plan import build_plan
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.run.client import scheduler_api_client, throttle_refresh_hook
from scheduler_ext.run.conf_source import ConfReloader, ConfSource
from scheduler_ext.run.health import Health
from scheduler_ext.run.leader import Leadership
from scheduler_ext.run.observe import record_session, timed_plugins
from scheduler_ext.run.options import RunOptions
from tidemark.apis import DEFAULT_QUEUE
from tidemark.kube.events import WARNING, EventRecorder, ObjectRef

log = logging.getLogger(__name__)

#: the Queues `run` makes sure exist (Volcano's scheduler creates `default` at start-up)
#: the Warning Event on an object the live cache leaves out of scheduling (its message names the field)
SKIPPED_REASON: Final = "LeftOutOfScheduling"
REQUIRED_QUEUES: Final[Mapping[str, Mapping[str, Any]]] = {DEFAULT_QUEUE: {"weight": 1, "reclaimable": True}}


class Scheduler:
    """The `run` process in an object: `start()`, `stop()`; tests run it in-process.

    `api_client` and `registry` are injected for tests (defaults: a client from --kubeconfig /
    in-cluster, and a fresh CollectorRegistry).
    """

    def __init__(
        self,
        options: RunOptions,
        *,
        api_client: Any = None,
        registry: CollectorRegistry | None = None,
        actions: Mapping[str, ActionSpec] = ACTIONS,
        plugins: Mapping[str, PluginSpec] = PLUGINS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self._clock = clock
        self.api = api_client if api_client is not None else scheduler_api_client(options)
        throttle_refresh_hook(self.api)
        self.metrics = SchedulerMetrics(registry)
        self.registry = self.metrics.registry
        self.conf_source = ConfSource(options.scheduler_conf, actions, plugins)
        self._action_specs = actions
        self._plugins = timed_plugins(plugins, self._observe_plugin)
        self._actions: list[Action] = []
        self._conf: SchedulerConf | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cache = LiveCache(
            self.api, scheduler_name=options.scheduler_name, on_wake=self._on_wake, on_skipped=self._skipped
        )
        # Events yield to binds: `Scheduled` for every pod of a burst would otherwise compete with the
        # burst's binds for the API server (docs/scheduler-live.md, "Side effects").
        self.recorder = EventRecorder(
            self.api,
            options.scheduler_name,
            qps=50.0,
            burst=200,
            max_pending=10_000,
            per_object_burst=25,
            yield_to=lambda timeout: self.executor.wait_binds(timeout),
        )
        own_pod = (
            ObjectRef("Pod", options.pod_name, options.pod_namespace)
            if options.pod_name and options.pod_namespace
            else None
        )
        self.conf_reload = ConfReloader(
            self.conf_source,
            self._install_conf,
            self.metrics,
            self.recorder,
            period=options.schedule_period,
            pod=own_pod,
            clock=clock,
        )
        self.leadership = Leadership(
            self.api,
            options,
            stopping=self._stop.is_set,
            on_started=self._wake.set,
            on_stopped=self._stopped_leading,
        )
        self.executor = Executor(
            self.api,
            self.cache,
            self.recorder,
            self.metrics,
            fence=self.is_leader,
            bind_workers=options.bind_workers,
            status_workers=options.status_workers,
            bind_connections=options.bind_connections,
        )
        self.health = Health(
            self.api,
            options,
            self.registry,
            cache=self.cache,
            executor=self.executor,
            conf_source=self.conf_source,
            loop_alive=lambda: self._thread is not None and self._thread.is_alive(),
            clock=clock,
        )
        self.server = self.health.server
        self._implicit_phases: dict[str, str] = {}
        self._table1_lines: tuple[str, ...] = ()
        self._gc_frozen = False
        self._last_logged = float("-inf")
        self.sessions = 0
        #: the last session's snapshot statistics (tests, benchmarks)
        self.last_stats: Any = None

    def _skipped(self, obj: Mapping[str, Any], why: str) -> None:
        """An object the cache left out (once per resourceVersion): a Warning Event on it naming the field."""
        self.recorder.event(obj, WARNING, SKIPPED_REASON, f"left out of scheduling: {why}")

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Scheduler:
        """Load the conf (ConfError/OSError here are fatal), start watches, serving, election, the loop."""
        self.conf_reload.load()
        self.server.start()
        if self.health.healthz_server is not None:
            self.health.healthz_server.start()
        self.cache.start()
        self.recorder.start()
        self.leadership.start()
        self._thread = threading.Thread(target=self._loop, name="scheduler loop", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop scheduling, release the Lease, let running API calls finish, stop watches and serving."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self.leadership.stop()  # is_leader() is false from here: nothing more is bound
        self.executor.stop(timeout=min(5.0, timeout))
        self.recorder.stop(timeout=2.0)
        self.cache.stop()
        self.server.stop()
        if self.health.healthz_server is not None:
            self.health.healthz_server.stop()
        for a in self._actions:
            a.uninitialize()
        self.metrics.leader.set(0)
        log.info("scheduler stopped")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (True) or timeout."""
        return self._stop.wait(timeout)

    @property
    def port(self) -> int:
        return self.server.port

    def is_leader(self) -> bool:
        return self.leadership.is_leader()

    # --- callbacks -------------------------------------------------------------------------------------
    def _on_wake(self, reason: str) -> None:
        log.debug("wake: %s", reason)
        self._wake.set()

    def _stopped_leading(self) -> None:
        self.metrics.leader.set(0)
        self.cache.clear_assumptions()

    def _observe_plugin(self, name: str, on_session: str, seconds: float) -> None:
        self.metrics.plugin_latency.labels(name, on_session).observe(seconds * 1e6)

    def _observe_action(self, name: str, seconds: float) -> None:
        self.metrics.action_latency.labels(name).observe(seconds * 1e6)

    def _install_conf(self, conf: SchedulerConf) -> None:
        for a in self._actions:
            a.uninitialize()
        actions = [self._action_specs[name].build() for name in conf.actions]
        for a in actions:
            a.initialize()
        self._conf = conf
        self._actions = actions

    # --- the loop ----------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self.health.beat()
            try:
                self._tick()
            except Exception:  # one bad cycle never ends the loop
                log.exception("scheduling cycle failed")
                self.metrics.sessions.labels("error").inc()
            self._wait_next(self._clock())

    def _wait_next(self, last_end: float) -> None:
        """Until the period since the last session passes, or an early wake-up (debounced, spaced)."""
        period = max(0.0, self.options.schedule_period)
        while not self._stop.is_set():
            now = self._clock()
            due = last_end + period
            if now >= due:
                self._hold_for_binds(due + period)
                return
            if self._wake.wait(due - now):
                if self._stop.is_set():
                    return
                # batch a burst of changes, and keep a minimum gap after the last session
                gap_left = last_end + self.options.min_session_gap - self._clock()
                self._stop.wait(max(self.options.wake_debounce, gap_left))
                self._wake.clear()
                return

    def _hold_for_binds(self, until: float) -> None:
        """A periodic session waits while the earlier sessions' binds are in flight, up to `until`.

        Such a session re-reads a cluster whose pods are still being bound and plans nothing (every pod
        it could place is assumed already), but it costs the process CPU and the GIL the binder needs,
        and the API server (on the same cores) the CPU it binds with: on the end-to-end benchmark it
        halved the bind rate (docs/benchmarks-e2e.md, run H2). An early wake-up (a new pending pod, a
        node change, a pod releasing its node) ends the wait at once; so does `until` (one more period).
        """
        while not self._stop.is_set() and not self._wake.is_set():
            left = until - self._clock()
            if left <= 0 or self.executor.wait_binds(min(left, 0.05)):
                return

    def _tick(self) -> bool:
        """One loop iteration; True when a session ran (only the leader with synced caches runs one)."""
        self.conf_reload.maybe_reload()
        self.health.maybe_probe_api()
        leading = self.is_leader()
        self.metrics.leader.set(1 if leading else 0)
        contact = self.health.api_contact()
        if contact is not None:
            self.metrics.api_last_contact.set(max(0.0, self._clock() - contact))
        if not leading or not self.cache.synced():
            return False
        if not self._gc_frozen:
            # The watch caches' first lists are long-lived: keep the cyclic GC from re-traversing them.
            gc.collect()
            gc.freeze()
            self._gc_frozen = True
        if self.leadership.take_new_term():
            self.cache.clear_assumptions()
            self._implicit_phases.clear()
            log.info("leading: scheduling as %s", self.options.scheduler_name)
        # Early wake-ups asked for before this session's snapshot are served by it: the store
        # changes before its callback wakes us, so clearing here loses nothing (a wake-up after
        # the clear still brings the next session). Without it the first list's "new pending pod"
        # wake-ups ran a second, empty session in the middle of the first one's binds.
        self._wake.clear()
        self.run_once()
        return True

    def _warn_table1(self, conf: SchedulerConf, ssn: Session) -> None:
        """The seed guide's Table 1 (labelled nodes, no oversubscription plugin): logged when it changes."""
        lines = tuple(cluster_warnings(conf, (n.node for n in ssn.node_list)))
        if lines != self._table1_lines:
            for line in lines:
                log.warning("cluster: %s", line)
            self._table1_lines = lines

    def run_once(self) -> None:
        """One session over the current watch caches; its side effects are queued on the executor."""
        conf = self._conf
        assert conf is not None, "start() loads the conf"
        now = time.time()
        t0 = time.perf_counter()
        self.health.session_started()
        gc_enabled = gc.isenabled()
        gc.disable()  # the session allocates many small objects: no cyclic GC passes in the middle
        try:
            snap = self.cache.snapshot(now)
            action_times: list[tuple[str, float]] = []

            def on_action(name: str, seconds: float) -> None:
                action_times.append((name, seconds))
                self._observe_action(name, seconds)

            ssn = run_session(
                snap.cluster,
                conf,
                self._plugins,
                self._actions,
                options=self.options.session_options,
                implicit_phases=self._implicit_phases,
                on_action=on_action,
            )
            plan = build_plan(
                ssn,
                pod_groups=snap.pod_groups,
                queues=snap.queues,
                now_iso=datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                required_queues=REQUIRED_QUEUES,
            )
        finally:
            if gc_enabled:
                gc.enable()
            self.health.session_ended()
        self._implicit_phases = {k: v for k, v in self._implicit_phases.items() if k in ssn.jobs}
        self._warn_table1(conf, ssn)
        decided: dict[str, tuple[str, str]] = {}
        for job in ssn.jobs.values():
            obj = snap.pod_groups.get(job.uid)
            if obj is not None and not job.pod_group.implicit:
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                decided[job.uid] = (rv, job.pod_group.phase)
        self.cache.note_podgroup_phases(decided)
        self.executor.apply(plan)
        took = time.perf_counter() - t0
        self.sessions += 1
        self.last_stats = snap.stats
        record_session(self.metrics, ssn, plan, snap.stats, took, now)
        busy = bool(plan.binds or plan.evictions or plan.podgroups or plan.queues or plan.pod_conditions)
        quiet_for = self._clock() - self._last_logged
        level = logging.INFO if busy or quiet_for >= 60.0 else logging.DEBUG
        if level == logging.INFO:
            self._last_logged = self._clock()
        log.log(
            level,
            "session %d: %d binds, %d evictions, %d pending, %d status writes; snapshot %.3fs (%d pods, %d parsed, "
            "%d rebased, %d nodes), actions %s, total %.3fs",
            self.sessions,
            len(plan.binds),
            len(plan.evictions),
            plan.pending_tasks,
            len(plan.podgroups) + len(plan.queues) + len(plan.pod_conditions),
            snap.stats.seconds,
            snap.stats.pods,
            snap.stats.parsed,
            snap.stats.rebased,
            snap.stats.nodes,
            " ".join(f"{name}={secs:.3f}s" for name, secs in action_times),
            took,
        )
