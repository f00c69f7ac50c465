"""`tidemark-scheduler run`: schedule a live cluster in place of Volcano's scheduler.

One loop thread runs sessions, never two at a time: every `--schedule-period` (measured from the end
of the previous session, as Volcano's wait.Until), and earlier when the watch caches report a new
pending pod of ours, a pod releasing its node, or a node change (debounced, so a burst of pods is
one session). A session = snapshot of the watch caches (scheduler_ext.cache.live) -> the conf's
actions over it (scheduler_ext.simulate.run_session, the same cycle `simulate` runs) -> a plan
(scheduler_ext.cache.plan) -> the executor (binds, evictions, status writes, events), which works
asynchronously while the loop goes on.

Around it: the conf file is re-read every period (a ConfigMap mount swaps a symlink; a bad new conf
keeps the old one, logs, counts and emits a Warning event on the scheduler's own Pod when
POD_NAME/POD_NAMESPACE are set); the `default` Queue is created if absent and queues with an empty
state are opened through `/status`; with `--leader-elect` sessions run only while this replica
holds the Lease `tidemark-scheduler` in `--lock-object-namespace`, and every bind, eviction and
status write first checks `is_leader()` (fencing); /metrics, /healthz, /readyz on
`--listen-address`; SIGTERM/SIGINT stop cleanly and release the Lease.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from prometheus_client import CollectorRegistry

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.cache.executor import Executor
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.cache.plan import build_plan
from scheduler_ext.framework.conf import ConfError, SchedulerConf, parse_conf
from scheduler_ext.framework.interface import Action, ActionSpec, Plugin, PluginSpec
from scheduler_ext.framework.session import SessionOptions
from scheduler_ext.metrics import SchedulerMetrics
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.simulate import run_session
from tidemark import apis
from tidemark.apis import DEFAULT_QUEUE, DEFAULT_SCHEDULER_NAME, parse_bool
from tidemark.kube.client import ApiStatusError, KubeError, new_api_client, request_json
from tidemark.kube.events import EventRecorder, ObjectRef
from tidemark.kube.leader import ApiLeaseLock, LeaderElectionConfig, LeaderElector
from tidemark.kube.resources import QUEUES
from tidemark.serving import CheckResult, ServingServer, parse_listen_address

log = logging.getLogger(__name__)

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
LEASE_NAME: Final = "tidemark-scheduler"
DEFAULT_CONF_RESOURCE: Final = "volcano-scheduler.conf"
#: the API counts as reached when something answered within this many seconds (readiness)
API_STALE_AFTER: Final = 30.0
#: with nothing else heard for this long, the loop asks GET /version
API_PROBE_AFTER: Final = 10.0



def parse_go_duration(text: str) -> float:
    """A Go duration (`1s`, `500ms`, `1m30s`, `0`) in seconds; ValueError otherwise (as Go's flag)."""
    value = apis.parse_go_duration(text)
    if value is None:
        raise ValueError(f"invalid duration {text!r} (e.g. 1s, 500ms, 1m30s)")
    return value


def parse_go_bool(text: str | bool) -> bool:
    """Go's strconv.ParseBool, as a flag value; ValueError otherwise."""
    if isinstance(text, bool):
        return text
    parsed = parse_bool(text)
    if parsed.warning is not None:
        raise ValueError(f"invalid boolean {text!r} (true or false)")
    return parsed.value


def default_conf_text() -> str:
    """The conf used without --scheduler-conf: the one in examples/ (shipped inside the package)."""
    return Path(__file__).with_name(DEFAULT_CONF_RESOURCE).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class RunOptions:
    """`run`'s settings (flags; Volcano's names). Times in seconds."""

    kubeconfig: str | None = None
    #: None: the default conf shipped with the package
    scheduler_conf: str | None = None
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    schedule_period: float = 1.0
    listen_address: str = ":8080"
    leader_elect: bool = False
    lock_namespace: str = "kube-system"
    lock_name: str = LEASE_NAME
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    #: the Lease holder name; None: hostname_uuid
    identity: str | None = None
    qps: float = 2000.0
    burst: int = 2000
    #: the scheduler's own Pod (downward API), for Events about the conf
    pod_name: str = ""
    pod_namespace: str = ""
    bind_workers: int = 16
    status_workers: int = 4
    #: after an early wake-up, wait this long for more changes to batch them into one session
    wake_debounce: float = 0.02
    #: at least this long between the end of a session and an early (event-triggered) next one
    min_session_gap: float = 0.05
    api_stale_after: float = API_STALE_AFTER
    session_options: SessionOptions = field(default_factory=SessionOptions)


# --- conf hot reload ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedConf:
    conf: SchedulerConf
    digest: str
    generation: int


class ConfSource:
    """The scheduler conf: loaded at start (an error there is fatal), then re-read on `poll()`.

    The file is read whole every poll (it is small): a ConfigMap volume swaps its `..data` symlink,
    so neither inotify on the file nor an mtime check on the link is reliable, the content is.
    A new content is parsed; on error the previous conf stays and the error is reported once.
    """

    def __init__(
        self,
        path: str | None,
        actions: Mapping[str, ActionSpec] = ACTIONS,
        plugins: Mapping[str, PluginSpec] = PLUGINS,
    ) -> None:
        self.path = path
        self.actions = actions
        self.plugins = plugins
        self.current: LoadedConf | None = None
        self._failed_digest = ""

    @property
    def name(self) -> str:
        return self.path or f"(built-in {DEFAULT_CONF_RESOURCE})"

    def _read(self) -> str:
        if self.path is None:
            return default_conf_text()
        with open(self.path, encoding="utf-8") as f:
            return f.read()

    def _parse(self, text: str) -> SchedulerConf:
        conf, warnings = parse_conf(text, self.actions, self.plugins)
        for w in warnings:
            log.warning("conf %s: %s", self.name, w)
        return conf

    def load(self) -> LoadedConf:
        """The first load; raises ConfError (or OSError) when the conf cannot be used."""
        text = self._read()
        conf = self._parse(text)
        self.current = LoadedConf(conf, hashlib.sha256(text.encode()).hexdigest(), 1)
        return self.current

    def poll(self) -> tuple[LoadedConf | None, str | None]:
        """(new conf, None) when the content changed and parses; (None, error) once per bad content."""
        assert self.current is not None, "load() first"
        try:
            text = self._read()
        except OSError as exc:
            digest, error = f"unreadable:{exc}", f"cannot read {self.path}: {exc.strerror or exc}"
        else:
            digest = hashlib.sha256(text.encode()).hexdigest()
            if digest == self.current.digest:
                self._failed_digest = ""
                return None, None
            try:
                conf = self._parse(text)
            except ConfError as exc:
                error = str(exc)
            else:
                self.current = LoadedConf(conf, digest, self.current.generation + 1)
                self._failed_digest = ""
                return self.current, None
        if digest == self._failed_digest:
            return None, None
        self._failed_digest = digest
        return None, error


# --- plugin timing (volcano_plugin_scheduling_latency_microseconds) ----------------------------------


def _time_hooks(plugin: Plugin, name: str, observe: Callable[[str, str, float], None]) -> None:
    """Time the plugin's OnSessionOpen/OnSessionClose through instance attributes (skipped if slotted)."""
    for attr, label in (("on_session_open", "OnSessionOpen"), ("on_session_close", "OnSessionClose")):
        hook = getattr(plugin, attr)

        def timed(ssn: Any, _hook: Callable[[Any], None] = hook, _label: str = label) -> None:
            t0 = time.perf_counter()
            try:
                _hook(ssn)
            finally:
                observe(name, _label, time.perf_counter() - t0)

        try:
            setattr(plugin, attr, timed)
        except AttributeError:
            return


def timed_plugins(
    plugins: Mapping[str, PluginSpec], observe: Callable[[str, str, float], None]
) -> dict[str, PluginSpec]:
    """The registry with every plugin's session hooks timed."""
    out: dict[str, PluginSpec] = {}
    for name, spec in plugins.items():

        def build(arguments: Any, _spec: PluginSpec = spec) -> Plugin:
            plugin = _spec.build(arguments)
            _time_hooks(plugin, _spec.name, observe)
            return plugin

        out[name] = dataclasses.replace(spec, build=build)
    return out


# --- the scheduler -----------------------------------------------------------------------------------


def throttle_refresh_hook(api_client: Any, interval: float = 1.0) -> None:
    """Run the client's credential refresh hook at most once per `interval` seconds.

    A kubeconfig- or in-cluster-loaded Configuration re-applies the whole kubeconfig before EVERY
    request (kubernetes client: `refresh_api_key_hook`), which re-reads the proxy environment too:
    about a third of a bind's client-side CPU. Tokens are still refreshed (exec plugins, rotated
    service-account tokens), at most `interval` late.
    """
    cfg = getattr(api_client, "configuration", None)
    hook = getattr(cfg, "refresh_api_key_hook", None)
    if cfg is None or hook is None:
        return
    lock = threading.Lock()
    last = [float("-inf")]

    def throttled(configuration: Any) -> None:
        now = time.monotonic()
        with lock:
            if now - last[0] < interval:
                return
            last[0] = now
        hook(configuration)

    cfg.refresh_api_key_hook = throttled




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
        self.api = (
            api_client
            if api_client is not None
            else new_api_client(
                options.kubeconfig,
                qps=options.qps,
                burst=options.burst,
                pool_size=64,
                user_agent=f"tidemark-scheduler/{options.scheduler_name}",
            )
        )
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
        self.cache = LiveCache(self.api, scheduler_name=options.scheduler_name, on_wake=self._on_wake)
        self.recorder = EventRecorder(
            self.api, options.scheduler_name, qps=50.0, burst=200, max_pending=10_000, per_object_burst=25
        )
        self.elector: LeaderElector | None = None
        if options.leader_elect:
            self.elector = LeaderElector(
                ApiLeaseLock(self.api, options.lock_namespace, options.lock_name),
                identity=options.identity,
                config=options.leader_election,
                on_started_leading=self._started_leading,
                on_stopped_leading=self._stopped_leading,
            )
        self.executor = Executor(
            self.api,
            self.cache,
            self.recorder,
            self.metrics,
            fence=self.is_leader,
            bind_workers=options.bind_workers,
            status_workers=options.status_workers,
        )
        self.server = ServingServer(
            options.listen_address,
            self.registry,
            healthz={"loop": self._check_loop},
            readyz={"informers": self._check_synced, "api": self._check_api, "conf": self._check_conf},
        )
        self._implicit_phases: dict[str, str] = {}
        self._new_term = threading.Event()
        self._heartbeat = clock()
        self._session_started: float | None = None
        self._probe_ok: float | None = None
        self._last_probe = float("-inf")
        self._gc_frozen = False
        self._last_logged = float("-inf")
        self._last_conf_poll = float("-inf")
        self.sessions = 0
        #: the last session's snapshot statistics (tests, benchmarks)
        self.last_stats: Any = None

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Scheduler:
        """Load the conf (ConfError/OSError here are fatal), start watches, serving, election, the loop."""
        loaded = self.conf_source.load()
        self._install_conf(loaded.conf)
        self.metrics.conf_generation.set(loaded.generation)
        log.info("scheduler conf %s loaded: actions %s", self.conf_source.name, ", ".join(loaded.conf.actions))
        self.server.start()
        self.cache.start()
        self.recorder.start()
        if self.elector is not None:
            self.elector.start()
        else:
            self._new_term.set()
        self._thread = threading.Thread(target=self._loop, name="scheduler loop", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop scheduling, release the Lease, let running API calls finish, stop watches and serving."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self.elector is not None:
            self.elector.stop()  # is_leader() is false from here: nothing more is bound
        self.executor.stop(timeout=min(5.0, timeout))
        self.recorder.stop(timeout=2.0)
        self.cache.stop()
        self.server.stop()
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
        if self._stop.is_set():
            return False
        return self.elector.is_leader() if self.elector is not None else True

    # --- callbacks -------------------------------------------------------------------------------------
    def _on_wake(self, reason: str) -> None:
        log.debug("wake: %s", reason)
        self._wake.set()

    def _started_leading(self) -> None:
        self._new_term.set()
        self._wake.set()

    def _stopped_leading(self) -> None:
        self.metrics.leader.set(0)
        self.cache.clear_assumptions()

    def _observe_plugin(self, name: str, on_session: str, seconds: float) -> None:
        self.metrics.plugin_latency.labels(name, on_session).observe(seconds * 1e6)

    def _observe_action(self, name: str, seconds: float) -> None:
        self.metrics.action_latency.labels(name).observe(seconds * 1e6)

    # --- checks ------------------------------------------------------------------------------------------
    def _check_loop(self) -> CheckResult:
        if self._thread is None or not self._thread.is_alive():
            return False, "the scheduling loop is not running"
        now = self._clock()
        started = self._session_started
        if started is not None:
            return (now - started < 300.0), f"in a session for {now - started:.0f}s"
        quiet = now - self._heartbeat
        limit = max(60.0, 10 * self.options.schedule_period)
        return quiet < limit, f"last loop iteration {quiet:.1f}s ago"

    def _check_synced(self) -> CheckResult:
        synced = self.cache.synced()
        return synced, "watch caches synced" if synced else "watch caches not synced yet"

    def _api_contact(self) -> float | None:
        seen = [t for t in (self.cache.last_contact(), self.executor.last_success, self._probe_ok) if t is not None]
        return max(seen) if seen else None

    def _check_api(self) -> CheckResult:
        contact = self._api_contact()
        if contact is None:
            return False, "the API server has not answered yet"
        age = self._clock() - contact
        return age < self.options.api_stale_after, f"API server last answered {age:.1f}s ago"

    def _check_conf(self) -> CheckResult:
        cur = self.conf_source.current
        return cur is not None, f"generation {cur.generation}" if cur else "no conf"

    # --- the loop ----------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._heartbeat = self._clock()
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
                return
            if self._wake.wait(due - now):
                if self._stop.is_set():
                    return
                # batch a burst of changes, and keep a minimum gap after the last session
                gap_left = last_end + self.options.min_session_gap - self._clock()
                self._stop.wait(max(self.options.wake_debounce, gap_left))
                self._wake.clear()
                return

    def _tick(self) -> bool:
        """One loop iteration; True when a session ran (only the leader with synced caches runs one)."""
        self._maybe_reload_conf()
        self._maybe_probe_api()
        leading = self.is_leader()
        self.metrics.leader.set(1 if leading else 0)
        contact = self._api_contact()
        if contact is not None:
            self.metrics.api_last_contact.set(max(0.0, self._clock() - contact))
        if not leading or not self.cache.synced():
            return False
        if not self._gc_frozen:
            # The watch caches' first lists are long-lived: keep the cyclic GC from re-traversing them.
            gc.collect()
            gc.freeze()
            self._gc_frozen = True
        if self._new_term.is_set():
            self._new_term.clear()
            self.cache.clear_assumptions()
            self._implicit_phases.clear()
            log.info("leading: scheduling as %s", self.options.scheduler_name)
        self._ensure_default_queue()
        self.run_once()
        return True

    def _maybe_reload_conf(self) -> None:
        now = self._clock()
        if now - self._last_conf_poll < min(1.0, self.options.schedule_period):
            return  # early wake-ups do not re-read the file
        self._last_conf_poll = now
        new, error = self.conf_source.poll()
        if new is not None:
            self._install_conf(new.conf)
            self.metrics.conf_generation.set(new.generation)
            log.info("scheduler conf %s reloaded (generation %d)", self.conf_source.name, new.generation)
        elif error is not None:
            cur = self.conf_source.current
            gen = cur.generation if cur else 0
            message = f"{self.conf_source.name}: {error}; keeping the previous conf (generation {gen})"
            log.error("bad scheduler conf: %s", message)
            self.metrics.conf_reload_errors.inc()
            if self.options.pod_name and self.options.pod_namespace:
                self.recorder.warning(
                    ObjectRef("Pod", self.options.pod_name, self.options.pod_namespace), "InvalidSchedulerConf", message
                )

    def _install_conf(self, conf: SchedulerConf) -> None:
        for a in self._actions:
            a.uninitialize()
        actions = [self._action_specs[name].build() for name in conf.actions]
        for a in actions:
            a.initialize()
        self._conf = conf
        self._actions = actions

    def _maybe_probe_api(self) -> None:
        now = self._clock()
        contact = self._api_contact()
        if (contact is not None and now - contact < API_PROBE_AFTER) or now - self._last_probe < API_PROBE_AFTER:
            return
        self._last_probe = now
        try:
            request_json(self.api, "GET", "/version", timeout=(2.0, 2.0))
        except KubeError as exc:
            log.debug("API probe: %s", exc)
            return
        self._probe_ok = self._clock()

    def _ensure_default_queue(self) -> None:
        """Create the `default` Queue if absent (its state is opened by the queue status write)."""
        if self.cache.get("queues", DEFAULT_QUEUE) is not None or not self.is_leader():
            return
        body = {
            "apiVersion": QUEUES.api_version,
            "kind": QUEUES.kind,
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {"weight": 1, "reclaimable": True},
        }
        try:
            request_json(self.api, "POST", QUEUES.collection_path(), body=body)
            log.info("created the %s Queue", DEFAULT_QUEUE)
        except ApiStatusError as exc:
            if exc.status != 409:
                log.warning("creating the %s Queue: %s", DEFAULT_QUEUE, exc)
        except KubeError as exc:
            log.warning("creating the %s Queue: %s", DEFAULT_QUEUE, exc)

    def run_once(self) -> None:
        """One session over the current watch caches; its side effects are queued on the executor."""
        conf = self._conf
        assert conf is not None, "start() loads the conf"
        now = time.time()
        t0 = time.perf_counter()
        self._session_started = self._clock()
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
            )
        finally:
            if gc_enabled:
                gc.enable()
            self._session_started = None
        self._implicit_phases = {k: v for k, v in self._implicit_phases.items() if k in ssn.jobs}
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
        self._record(ssn, plan, snap.stats, took, now)
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

    def _record(self, ssn: Any, plan: Any, stats: Any, took: float, now: float) -> None:
        m = self.metrics
        m.sessions.labels("ok").inc()
        m.session_seconds.observe(took)
        m.e2e_latency.observe(took * 1000.0)
        m.snapshot_seconds.observe(stats.seconds)
        m.snapshot_parsed.inc(stats.parsed)
        m.snapshot_pods.set(stats.pods)
        m.snapshot_nodes.set(stats.nodes)
        m.pending_tasks.set(plan.pending_tasks)
        if plan.unschedulable_tasks:
            m.schedule_attempts.labels("unschedulable").inc(plan.unschedulable_tasks)
        m.set_unschedulable(dict(plan.unschedulable_jobs), implicit=plan.unschedulable_implicit)
        if plan.evictions:
            m.preemption_victims.set(len(plan.evictions))
            m.exact.inc_preemption_attempts()
        seen: set[str] = set()
        for b in ssn.binds:
            job = ssn.jobs.get(b.task.job)
            if job is None or job.uid in seen:
                continue
            seen.add(job.uid)
            took_ms = max(0.0, (now - job.creation) * 1000.0)
            if job.pod_group.implicit:
                # an implicit group is named after its pod's UID: no per-job series (house style 10)
                m.e2e_job_latency.observe(took_ms)
            else:
                m.set_job_duration(job.name, str(job.queue), job.namespace, took_ms)
        m.forget_jobs(str(j) for j in ssn.jobs if not ssn.jobs[j].pod_group.implicit)


# --- the command ---------------------------------------------------------------------------------------


def options_from_args(ns: argparse.Namespace, environ: Mapping[str, str] | None = None) -> RunOptions:
    """RunOptions from `run`'s parsed flags; ValueError names the bad flag."""
    env = os.environ if environ is None else environ
    try:
        period = parse_go_duration(str(ns.schedule_period))
    except ValueError as exc:
        raise ValueError(f"--schedule-period: {exc}") from None
    if period <= 0:
        raise ValueError("--schedule-period must be positive")
    try:
        leader_elect = parse_go_bool(ns.leader_elect)
    except ValueError as exc:
        raise ValueError(f"--leader-elect: {exc}") from None
    try:
        parse_listen_address(ns.listen_address)
    except ValueError as exc:
        raise ValueError(f"--listen-address: {exc}") from None
    timings: dict[str, Any] = {}
    for flag, attr in (
        ("leader_elect_lease_duration", "lease_duration"),
        ("leader_elect_renew_deadline", "renew_deadline"),
        ("leader_elect_retry_period", "retry_period"),
    ):
        raw = getattr(ns, flag, None)
        if raw is not None:
            try:
                timings[attr] = parse_go_duration(str(raw))
            except ValueError as exc:
                raise ValueError(f"--{flag.replace('_', '-')}: {exc}") from None
    le = dataclasses.replace(LeaderElectionConfig(), **timings)
    problems = le.problems()
    if problems:
        raise ValueError("leader election timings: " + "; ".join(problems))
    if ns.kube_api_qps <= 0 or ns.kube_api_burst <= 0:
        raise ValueError("--kube-api-qps and --kube-api-burst must be positive")
    return RunOptions(
        kubeconfig=ns.kubeconfig or None,
        scheduler_conf=ns.scheduler_conf or None,
        scheduler_name=ns.scheduler_name,
        schedule_period=period,
        listen_address=ns.listen_address,
        leader_elect=leader_elect,
        lock_namespace=ns.lock_object_namespace,
        leader_election=le,
        qps=float(ns.kube_api_qps),
        burst=int(ns.kube_api_burst),
        pod_name=env.get("POD_NAME", ""),
        pod_namespace=env.get("POD_NAMESPACE", ""),
    )


def run_command(ns: argparse.Namespace) -> int:
    """`tidemark-scheduler run`: exit 0 after SIGTERM/SIGINT, 2 on bad flags or conf, 1 on other failures."""
    from tidemark.logs import setup_logging

    try:
        options = options_from_args(ns)
    except ValueError as exc:
        print(f"tidemark-scheduler run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    verbose = int(getattr(ns, "verbose", 0) or 0)
    setup_logging(ns.log_format, logging.DEBUG if verbose >= 1 else logging.INFO)
    if verbose < 2:  # run_session's per-action lines: the session line carries them
        logging.getLogger("scheduler_ext.simulate").setLevel(logging.WARNING)
    try:
        scheduler = Scheduler(options)
    except KubeError as exc:
        print(f"tidemark-scheduler run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if getattr(scheduler.api.configuration, "verify_ssl", True) is False:
        import urllib3

        log.warning("TLS verification of the API server is off (insecure-skip-tls-verify)")
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            scheduler.start()
        except ConfError as exc:
            print(f"tidemark-scheduler run: {scheduler.conf_source.name}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except OSError as exc:
            print(f"tidemark-scheduler run: {exc}", file=sys.stderr)
            return EXIT_USAGE if isinstance(exc, FileNotFoundError) else EXIT_FAILURE
        log.info(
            "tidemark-scheduler running: name %s, period %.3fs, leader election %s, serving on %s",
            options.scheduler_name,
            options.schedule_period,
            "on" if options.leader_elect else "off",
            scheduler.server.address,
        )
        while not stop.wait(0.5):
            if scheduler.wait(0):
                break
        scheduler.stop()
        return EXIT_OK
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
