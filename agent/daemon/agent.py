"""`tidemark-agent run`: the loops that sense, decide and act on one node.

One main loop (this module) runs every local duty on the injected clock, each at its own period:

- sampler (`sampler.period`, 1 s): one read of the kubepods root, every pod cgroup and /proc; K reads
  give K-1 samples, kept for `sampler.window`;
- watermarks and eviction (`eviction.period`, 1 s): `decide` over the window with the new samples
  folded into the hysteresis; the evicting annotation and the victims go out at once;
- capacity (`capacity.period`, 10 s): the same decision's B/X annotations and batch-* status are
  written only on these ticks (or together with an evicting change: B = X = 0 at once), and only
  when `decide`'s publication rule says so (moved past the threshold, missing, or resync);
- QoS (`qos.reconcile`, 10 s, and at once on pod events for the pods that changed): the knob files
  are read afresh, then every decision applies the knob writes against that view;
- configuration poll (`AgentOptions.config_poll`), restore requests, API results.

API writes (Node patches, evictions) run on the `ApiWorker` thread, so an API outage never stalls
sampling or local QoS; the Node and Pods come from reflectors (`agent.daemon.cluster`) whose stores
outlive an outage. Everything with a side effect is an executor (`agent.act`); the decision is the
pure `agent.decide.decide`.

Knobs and restores: `decide` sees the knobs the agent owns (journaled) at their ORIGINAL values
(`KnobSensor.counterfactual`), so its plan lists every knob still wanted; owned knobs it leaves out are
no longer wanted (a feature turned off, labels removed) and are restored, where kubelet did not change
them since.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agent.act.cgroup_writer import BatchResult, CgroupWriter
from agent.act.evictor import EvictResult
from agent.act.statedir import StateDir
from agent.cgroups.fs import FileReader
from agent.cgroups.layout import KubeLayout
from agent.config import AgentConfig
from agent.daemon.apiworker import (
    ApiJob,
    ApiWorker,
    EventSink,
    EvictorLike,
    NodeEvent,
    NodeWriterLike,
    NullEvents,
    Report,
)
from agent.daemon.cluster import ClusterSource
from agent.daemon.configsource import ConfigSource
from agent.daemon.knobs import KnobSensor
from agent.daemon.metrics import Stats, Status
from agent.daemon.podcache import PodCache
from agent.decide.capacity import X_KEY
from agent.decide.ops import Plan
from agent.decide.plan import decide, initial_state
from agent.model import AgentState, NodeView, PodView, Sample, Snapshot
from agent.procfs import ProcFS
from agent.render import plan_json
from agent.sampler import RawRead, Sampler, to_sample
from agent.sensing import node_view
from tidemark.apis import ANN_NODE_USAGE, ANN_OFFLINE_JOB_EVICTING, RESOURCES, PodUID
from tidemark.clock import Clock

log = logging.getLogger(__name__)

CAPACITY_ANNOTATIONS = frozenset({*X_KEY.values(), ANN_NODE_USAGE})


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
    #: a pod we evicted counts as terminating from the eviction until the API shows it (grace + this)
    overlay_slack: float = 10.0
    #: the API worker runs on a thread (False: inline, for tests)
    threaded_api: bool = True


def _pod_ref(p: PodView) -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid}}


def _rv_int(obj: Mapping[str, Any] | None) -> int | None:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
    except ValueError:
        return None


def _fmt(resource: str, value: float) -> str:
    return f"{value:.0f}m" if resource == "cpu" else f"{value / 2**20:.0f}Mi"


class Agent:
    """The daemon: `step()` runs whatever is due; `run()` loops until `stop()` (see the module docstring)."""

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
        self.status = Status(node=node_name)
        journal = self.state_dir.journal if self.state_dir is not None else None
        if journal is not None:
            journal.proc_root = procfs.root
        self.writer = CgroupWriter(journal, roots=layout.kubepods().distinct(), proc_root=procfs.root, clock=clock.wall)
        self.pods = PodCache(self.state_dir.qos if self.state_dir is not None else None)
        self.sensor = KnobSensor(layout, reader, procfs)
        self.sampler = Sampler(layout, {}, procfs, reader, clock)
        self.worker = ApiWorker(
            None if self.dry_run else node_writer,
            None if self.dry_run else evictor,
            self.events,
            self._on_report,
            self.stats,
            threaded=self.options.threaded_api,
            wall=clock.wall,
            monotonic=clock.monotonic,
        )
        self.config: AgentConfig = config.resolve(None)[0]
        self.config_generation = 1
        self.applied_overrides: tuple[str, ...] = ()
        self.agent_state: AgentState = AgentState()
        self.samples: collections.deque[Sample] = collections.deque()
        self.last_plan: Plan | None = None
        self.qos_paused = False
        self.decisions = 0

        self._stop = threading.Event()
        self._wake = threading.Event()
        self._reports: collections.deque[Report] = collections.deque()
        self._reports_lock = threading.Lock()
        self._dirty_pods: set[PodUID] = set()
        self._dirty_all = True
        self._dirty_lock = threading.Lock()
        self._force_decide = False
        self._prev_read: RawRead | None = None
        self._new_samples = 0
        self._node_obj: dict[str, Any] | None = None
        self._node_view: NodeView | None = None
        self._node_rv: str | None = None
        self._node_labels: Mapping[str, str] | None = None
        self._generation: tuple[int, int] = (-1, -1)
        self._blocked: dict[PodUID, float] = {}
        self._overlay: dict[PodUID, float] = {}
        self._ghosts: dict[PodUID, tuple[PodView, float]] = {}
        self._last_views: tuple[PodView, ...] = ()
        self._reported_node_warnings: set[str] = set()
        self._announced: set[PodUID] = set()
        self._failed_reported: set[tuple[str, str, str]] = set()
        self._qos_trigger: float | None = None
        self._sensed = False
        self._full_qos = True
        self._synced_once = False
        now = clock.monotonic()
        self._next = {
            "sample": now,
            "decide": now,
            "capacity": now,
            "qos": now,
            "config": now + self.options.config_poll,
        }
        self._last_loop = now
        self._started = now
        self._ready_sent = False
        self._last_watchdog = 0.0
        self.once_done = False
        cluster.set_listener(self._on_cluster_change)

    # --- wiring -----------------------------------------------------------------------------------------

    def _on_cluster_change(self, kind: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """Reflector threads: remember which pods changed and wake the main loop."""
        if kind == "pods":
            obj = new or old or {}
            uid = (obj.get("metadata") or {}).get("uid")
            with self._dirty_lock:
                if uid:
                    self._dirty_pods.add(PodUID(str(uid)))
            if self._qos_trigger is None:
                self._qos_trigger = self.clock.wall()
        self._wake.set()

    def _on_report(self, report: Report) -> None:
        with self._reports_lock:
            self._reports.append(report)
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # --- health -------------------------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        """Process and loops alive; never depends on the API server."""
        c = self.config
        longest = max(c.sampler.period, c.eviction.period, c.capacity.period, c.qos.reconcile)
        age = self.clock.monotonic() - self._last_loop
        limit = self.options.stall_seconds + 5 * longest
        if age > limit:
            return False, f"the main loop last ran {age:.0f}s ago (limit {limit:.0f}s)"
        if self.worker.threaded and self.worker._thread is not None and not self.worker._thread.is_alive():
            return False, "the API writer thread died"
        return True, f"main loop ran {age:.1f}s ago"

    def api_age(self) -> float | None:
        times = [t for t in (self.cluster.last_contact(), self.worker.last_success) if t is not None]
        return self.clock.monotonic() - max(times) if times else None

    def ready(self) -> tuple[bool, str]:
        """First sync done, a first decision made, and the API reached recently."""
        if not self.cluster.synced():
            return False, "waiting for the first list of the Node and its Pods"
        if self._node_view is None:
            return False, f"node {self.node_name} not found"
        if self.last_plan is None:
            return False, "no decision yet (waiting for samples)"
        age = self.api_age()
        if age is None or age > self.options.api_ready_window:
            return False, f"the API server has not answered for {age or 0:.0f}s"
        return True, f"API answered {age:.0f}s ago"

    def info(self) -> dict[str, float]:
        age = self.api_age()
        return {
            "config_generation": float(self.config_generation),
            "config_ok": 1.0 if self.config_source.ok else 0.0,
            "api_age": -1.0 if age is None else age,
            "ready": 1.0 if self.ready()[0] else 0.0,
        }

    # --- the loop ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Replay the journal (a previous run may have been killed mid-way) and start the watches."""
        if self.state_dir is not None:
            replayed = self.writer.replay()
            if replayed.released:
                log.info("journal replay: %d entr(ies) no longer hold our value; dropped", replayed.released)
            log.info("journal: %d knob/process value(s) owned from a previous run", len(self.state_dir.journal))
        self.cluster.start()
        if self.dry_run:
            log.info("dry run: decisions are logged, nothing is written (no knobs, no API writes, no events)")

    def shutdown(self, restore: bool = False) -> None:
        if restore and self.state_dir is not None:
            result = self.writer.restore_all()
            log.info("restored %d original value(s) on the way out", len(result.applied))
        self.worker.stop()
        self.cluster.stop()
        if self.state_dir is not None:
            self._save_qos_classes()

    def run(self, *, once: bool = False, once_timeout: float = 60.0) -> int:
        """Loop until stop() (or, with `once`, until one full decision was applied). Returns the exit code."""
        deadline = self.clock.monotonic() + once_timeout
        while not self._stop.is_set():
            try:
                self.step(once=once)
            except Exception:  # a bug in one cycle must not end the agent; the next cycle retries
                self.stats.decision_failures += 1
                log.exception("cycle failed")
            if once and self.once_done:
                self.worker.flush(10.0)
                return 1 if self.worker.backing_off() else 0
            if once and self.clock.monotonic() > deadline:
                log.error("--once: no full decision within %.0fs (%s)", once_timeout, self.ready()[1])
                return 1
            self._heartbeat()
            delay = max(0.0, min(self._next.values()) - self.clock.monotonic())
            if self._wake.wait(min(delay, 1.0)):
                self._wake.clear()
        return 0

    def _heartbeat(self) -> None:
        n = self.notifier
        if n is None:
            return
        if not self._ready_sent and self.last_plan is not None:
            self._ready_sent = True
            n.ready(f"deciding for node {self.node_name}")
        interval = getattr(n, "watchdog_interval", None)
        now = self.clock.monotonic()
        if interval and now - self._last_watchdog >= interval and self.healthy()[0]:
            self._last_watchdog = now
            n.watchdog()

    def _due(self, name: str, now: float) -> bool:
        return now >= self._next[name]

    def _schedule(self, name: str, now: float, period: float) -> None:
        nxt = self._next[name] + period
        self._next[name] = nxt if nxt > now else now + period

    def step(self, *, once: bool = False) -> None:
        """Run every duty that is due now (and those woken by events)."""
        t0 = time.perf_counter()
        now = self.clock.monotonic()
        self._last_loop = now
        c = self.config
        self._drain_reports()
        if self.state_dir is not None and self.state_dir.restore_requested():
            self._restore_request()
        if self._due("config", now):
            self._schedule("config", now, self.options.config_poll)
            self._poll_config()
        self._refresh_cluster()
        if self._due("sample", now):
            self._schedule("sample", now, c.sampler.period)
            self._sample()
        if self._node_view is None or not self.cluster.synced():
            self.stats.loop("step", time.perf_counter() - t0)
            return
        with self._dirty_lock:
            dirty, self._dirty_pods = self._dirty_pods, set()
            dirty_all, self._dirty_all = self._dirty_all, False
        sensed = False
        if self._due("qos", now) or dirty_all:
            self._schedule("qos", now, c.qos.reconcile)
            self._sense(None)
            sensed = True
        elif dirty:
            self._sense(dirty)
            sensed = True
        if sensed:
            self._full_qos = True
        capacity_due = self._due("capacity", now) and bool(self.samples)
        decide_due = self._due("decide", now) or sensed or self._force_decide or capacity_due
        if once:
            ready = len(self.samples) >= c.eviction.consecutive and self._sensed
            if not ready:
                self.stats.loop("step", time.perf_counter() - t0)
                return
            capacity_due, decide_due = True, True
        if decide_due and self.samples:
            if self._due("decide", now):
                self._schedule("decide", now, c.eviction.period)
            if capacity_due:
                self._schedule("capacity", now, c.capacity.period)
            self._force_decide = False
            self._decide(capacity_due)
            if once:
                self.once_done = True
        self.stats.loop("step", time.perf_counter() - t0)

    # --- duties --------------------------------------------------------------------------------------------

    def _drain_reports(self) -> None:
        with self._reports_lock:
            reports, self._reports = list(self._reports), collections.deque()
        for r in reports:
            if r.kind == "node" and r.node is not None:
                self._take_node(r.node)
            elif r.kind == "eviction" and r.eviction is not None and r.result is not None:
                self._eviction_result(r.eviction.uid, r.eviction.grace_seconds, r.result, r.at)

    def _eviction_result(self, uid: PodUID, grace: int | None, result: EvictResult, at: float) -> None:
        if result.outcome in ("evicted", "gone"):
            view = next((p for p in self.pods.views if p.uid == uid), None)
            seconds = float(grace if grace is not None else (view.grace_seconds if view else 30.0))
            self._overlay[uid] = at + (seconds if result.outcome == "evicted" else 0.0)
            self._blocked.pop(uid, None)
        elif result.outcome == "blocked":
            retry = self.config.eviction.refused_retry
            if result.retry_after:
                retry = max(retry, result.retry_after)
            self._blocked[uid] = self.clock.monotonic() + retry
            self._force_decide = True

    def _take_node(self, obj: dict[str, Any]) -> None:
        """A newer Node (from the reflector or the answer to our own patch) becomes the view."""
        new_rv, old_rv = _rv_int(obj), _rv_int(self._node_obj)
        if self._node_obj is not None and new_rv is not None and old_rv is not None and new_rv < old_rv:
            return
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if rv and rv == self._node_rv:
            return
        self._node_obj, self._node_rv = obj, rv
        view = node_view(obj)
        first = self._node_view is None
        self._node_view = view
        if first:
            self.agent_state = initial_state(view.evicting_annotation or view.evicting_taint)
        for w in view.warnings:
            if w not in self._reported_node_warnings:
                self._reported_node_warnings.add(w)
                log.warning("%s", w)
                self.events.event(obj, "Warning", "InvalidAnnotation", w[:1024])
        if view.labels != self._node_labels:
            self._node_labels = dict(view.labels)
            self._full_qos = True  # the labels decide whether knobs are wanted at all
            self._resolve_config("node labels changed" if not first else "node first seen")

    def _refresh_cluster(self) -> None:
        gen = self.cluster.generation()
        if gen == self._generation:
            return
        node_gen_changed = gen[0] != self._generation[0]
        self._generation = gen
        if node_gen_changed:
            obj = self.cluster.node()
            if obj is not None:
                self._take_node(obj)
        t0 = time.perf_counter()
        update = self.pods.update(self.cluster.pods(), self.clock.wall())
        if update.added or update.removed:
            with self._dirty_lock:
                self._dirty_pods |= set(update.added)
        if update.removed:
            self._keep_ghosts(update.removed)
        for uid in update.removed:
            self._overlay.pop(uid, None)
            self._blocked.pop(uid, None)
            self._announced.discard(uid)
        for n in update.notices:
            log.warning("%s", n.message if n.message.startswith("pod ") else f"pod {n.namespace}/{n.name}: {n.message}")
            self.events.event(
                {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "metadata": {"name": n.name, "namespace": n.namespace, "uid": n.uid},
                },
                "Warning",
                n.reason,
                n.message[:1024],
            )
        if self.cluster.synced() and not self._synced_once:
            self._synced_once = True
            forgotten = self.pods.forget_unknown_classes()
            if forgotten:
                log.info("forgot the first-seen qos-level of %d pod(s) no longer on the node", forgotten)
        if update.parsed or update.removed:
            self._save_qos_classes()
            self.stats.loop("pods", time.perf_counter() - t0)

    def _save_qos_classes(self) -> None:
        if self.state_dir is None:
            return
        try:
            self.state_dir.qos.save()
        except OSError as e:
            log.error("cannot save the first-seen qos-levels: %s", e.strerror or e)

    def _sample(self) -> None:
        t0 = time.perf_counter()
        try:
            cur = self.sampler.read()
        except Exception:
            log.exception("sampling failed")
            self.stats.sample_failures += 1
            return
        prev, self._prev_read = self._prev_read, cur
        if prev is None:
            return
        sample = to_sample(prev, cur, self.procfs.clk_tck)
        if sample.kubepods is None:
            self.stats.sample_failures += 1
        self.samples.append(sample)
        self._new_samples += 1
        self.stats.samples += 1
        horizon = max(self.config.sampler.window, self.config.eviction.consecutive * self.config.sampler.period) + 5
        while self.samples and self.samples[0].time < sample.time - horizon:
            self.samples.popleft()
        self.stats.loop("sample", time.perf_counter() - t0)

    def _sense(self, only: set[PodUID] | None) -> None:
        """Find and read the pods' cgroups: all (a reconcile) or those that changed."""
        t0 = time.perf_counter()
        views = self.pods.views
        journal = self.state_dir.journal if self.state_dir is not None else None
        owned = {e.pod for e in journal.knobs.values()} if journal is not None else set()
        burst = self.config.qos.cpu_burst

        def need(pod: PodView) -> tuple[bool, bool]:
            mine = pod.uid in owned
            if pod.offline:
                return True, pod.uses_batch or mine
            return burst or mine, burst or mine

        if only is None:
            self.sensor.resolve(views)
            self.sensor.read(views, need=need)
            self._forget_vanished()
        else:
            self.sensor.resolve(views, only)
            self.sensor.read(views, only, need=need)
        self.sampler.pod_dirs = {uid: pc.pod for uid, pc in self.sensor.pods.items()}
        self._sensed = True
        self.stats.loop("qos_sense", time.perf_counter() - t0)

    def _forget_vanished(self) -> None:
        """Journal entries whose cgroup (or process) is gone have nothing left to restore."""
        if self.state_dir is None:
            return
        import os

        journal = self.state_dir.journal
        gone = [k for k, e in journal.knobs.items() if not os.path.isdir(e.path)]
        for k in gone:
            del journal.knobs[k]
        dead = [pid for pid in journal.procs if not os.path.exists(os.path.join(self.procfs.root, str(pid)))]
        for pid in dead:
            del journal.procs[pid]
        if gone or dead:
            try:
                journal.save()
            except OSError as e:
                log.error("cannot save the journal: %s", e.strerror or e)

    def _keep_ghosts(self, removed: frozenset[PodUID]) -> None:
        """A terminating pod that left the API stays visible (as terminating) until the samples forget it.

        kubelet frees the memory and CPU of a pod before it deletes the Pod object, but the watermark
        check averages the last N samples: without the ghost, the usage still in that window would no
        longer count as released and a second victim would go for the same pressure.
        """
        c = self.config
        lifetime = (c.eviction.consecutive + 2) * max(c.sampler.period, c.eviction.period)
        expires = self.clock.monotonic() + lifetime
        for view in self._last_views:
            if view.uid in removed and (view.deletion is not None or view.uid in self._overlay):
                deletion = view.deletion if view.deletion is not None else self._overlay[view.uid]
                self._ghosts[view.uid] = (replace(view, deletion=deletion), expires)

    def _pod_views(self, now: float) -> tuple[PodView, ...]:
        """The parsed pods, with our own evictions shown as terminating until the API shows them, and ghosts."""
        views = self.pods.views
        self._last_views = self._pod_views_overlaid(views, now)
        if not self._ghosts:
            return self._last_views
        mono = self.clock.monotonic()
        self._ghosts = {uid: g for uid, g in self._ghosts.items() if g[1] > mono}
        live = {p.uid for p in views}
        return self._last_views + tuple(g[0] for uid, g in self._ghosts.items() if uid not in live)

    def _pod_views_overlaid(self, views: tuple[PodView, ...], now: float) -> tuple[PodView, ...]:
        if not self._overlay:
            return views
        slack = self.config.eviction.terminating_slack + self.options.overlay_slack
        out: list[PodView] = []
        for p in views:
            until = self._overlay.get(p.uid)
            if until is not None:
                if p.deletion is not None or now > until + slack:
                    del self._overlay[p.uid]
                else:
                    p = replace(p, deletion=until)
            out.append(p)
        return tuple(out)

    def _decide(self, capacity_due: bool) -> None:
        t0 = time.perf_counter()
        node = self._node_view
        assert node is not None
        now_wall = self.clock.wall()
        mono = self.clock.monotonic()
        self._blocked = {uid: t for uid, t in self._blocked.items() if t > mono}
        pods = self._pod_views(now_wall)
        journal = self.state_dir.journal if self.state_dir is not None else None
        # A full QoS decision (after a reconcile read, a pod event, a config or label change) shows the owned
        # knobs at their originals, so the plan says which are still wanted and the rest is restored; in
        # between, the plain belief: the plan lists only the values that moved (the suppression quota).
        full = self._full_qos
        self._full_qos = False
        if not self._sensed:
            cgroups = None
        elif full:
            cgroups = self.sensor.counterfactual(journal)
        else:
            cgroups = self.sensor.state()
        snapshot = Snapshot(
            node=node,
            pods=pods,
            samples=tuple(self.samples),
            new_samples=self._new_samples,
            cgroups=cgroups,
            state=self.agent_state,
            unevictable=frozenset(self._blocked),
        )
        config = self.config
        plan = decide(snapshot, config, now_wall)
        self._new_samples = 0
        self.decisions += 1
        self.stats.decisions += 1
        was_evicting = self.agent_state.watermarks.evicting
        self.last_plan = plan
        trigger = self.samples[-1].time if self.samples else now_wall
        decided = time.perf_counter()
        self.stats.loop("decide", decided - t0)

        job, stripped = self._api_job(plan, node, capacity_due, was_evicting, trigger)
        next_state = plan.next_state
        if stripped:
            hold = config.eviction.admission_hold
            next_state = replace(
                next_state, x_history=tuple(h for h in self.agent_state.x_history if now_wall - h[0] <= hold)
            )
        self.agent_state = next_state
        if self.dry_run:
            self._log_dry_run(plan, job)
        else:
            self.worker.submit(job)
            if self._sensed and not self.qos_paused and cgroups is not None:
                self._apply_qos(plan, trigger, restore=full)
        self._publish_status(plan)
        done = time.perf_counter()
        self.stats.loop("act", done - decided)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "decision %d: evicting=%s knob writes=%d process writes=%d evictions=%d node patch=%s; "
                "decide %.2f ms, act %.2f ms",
                self.decisions,
                plan.evicting,
                len(plan.cgroup_writes),
                len(plan.process_writes),
                len(plan.evictions),
                not job.empty(),
                (decided - t0) * 1000,
                (done - decided) * 1000,
                extra={"node": self.node_name, "full_qos": full, "capacity": capacity_due},
            )

    def _api_job(
        self, plan: Plan, node: NodeView, capacity_due: bool, was_evicting: bool, trigger: float
    ) -> tuple[ApiJob, bool]:
        body = dict(plan.node_patch.body) if plan.node_patch else {}
        annotations = dict((body.get("metadata") or {}).get("annotations") or {})
        flip = ANN_OFFLINE_JOB_EVICTING in annotations or "spec" in body
        stripped = False
        status = dict(plan.node_status_patch.body) if plan.node_status_patch else None
        if not capacity_due and not flip:
            kept = {k: v for k, v in annotations.items() if k not in CAPACITY_ANNOTATIONS}
            stripped = len(kept) != len(annotations) or status is not None
            annotations, status = kept, None
        patch: dict[str, Any] | None = None
        if annotations or "spec" in body:
            patch = {}
            if annotations:
                patch["metadata"] = {"annotations": annotations}
            if "spec" in body:
                patch["spec"] = body["spec"]
        events: list[NodeEvent] = []
        if plan.evicting and not was_evicting:
            over = [r for r in RESOURCES if plan.next_state.watermarks.over(r) >= self.config.eviction.consecutive]
            figures = (
                ", ".join(f"{r} {plan.usage.percent.get(r):.1f} % (high {node.watermarks.high(r)} %)" for r in over)
                or "usage past a high watermark"
            )
            events.append(
                NodeEvent(
                    "Warning",
                    "EvictingStarted",
                    f"{figures} for {self.config.eviction.consecutive} consecutive samples: the node is evicting "
                    f"offline pods ({len(plan.evictions)} now); B = X = 0 until every resource is at or under its low "
                    "watermark",
                )
            )
        elif was_evicting and not plan.evicting:
            events.append(
                NodeEvent(
                    "Normal",
                    "EvictingCleared",
                    "every resource at or under its low watermark for "
                    f"{self.config.eviction.consecutive} consecutive samples: the node takes offline work again "
                    f"(cpu {plan.usage.percent.cpu:.1f} %, memory {plan.usage.percent.memory:.1f} %)",
                )
            )
        if capacity_due and (status or any(k in annotations for k in X_KEY.values())):
            moved = any(
                node.published_x.get(r) != int(plan.capacity.published_x.get(r))
                or node.published_batch.get(r) != int(plan.capacity.published_batch.get(r))
                for r in RESOURCES
            )
            if moved:
                c = plan.capacity
                events.append(
                    NodeEvent(
                        "Normal",
                        "CapacityPublished",
                        f"batch-cpu {_fmt('cpu', c.published_batch.cpu)}, batch-memory "
                        f"{_fmt('memory', c.published_batch.memory)}; oversubscription cpu "
                        f"{_fmt('cpu', c.published_x.cpu)}, memory {_fmt('memory', c.published_x.memory)} "
                        f"(B cpu {_fmt('cpu', c.B.cpu)}, memory "
                        f"{_fmt('memory', c.B.memory)}; U_non cpu {_fmt('cpu', plan.usage.non_offline.cpu)})",
                    )
                )
        job = ApiJob(
            node_patch=patch,
            status_patch=status,
            evictions=plan.evictions,
            node_marked=node.evicting_annotation,
            trigger=trigger,
            node_events=tuple(events),
            node_ref=self._node_obj or {"kind": "Node", "apiVersion": "v1", "metadata": {"name": self.node_name}},
        )
        return job, stripped

    def _apply_qos(self, plan: Plan, trigger: float, *, restore: bool) -> None:
        t0 = time.perf_counter()
        owner = self.sensor.owner_of()
        result = self.writer.apply(
            plan.cgroup_writes,
            plan.process_writes,
            belief=self.sensor.files,
            oom_belief=self.sensor.oom,
            owner=lambda path: str(owner.get(path, "")),
            proc_owner=self.sensor.proc_owner(),
        )
        restored = BatchResult()
        journal = self.state_dir.journal if self.state_dir is not None else None
        if restore and journal is not None and len(journal):
            wanted = {(w.path, w.file) for w in plan.cgroup_writes}
            wanted_pids = {p.pid for p in plan.process_writes}
            resolved = set(self.sensor.pods)
            knobs = [
                e
                for e in journal.knobs.values()
                if e.key not in wanted and owner.get(e.path) in resolved and e.file in self.sensor.files.get(e.path, {})
            ]
            procs = [p for p in journal.procs.values() if p.pid not in wanted_pids and p.pid in self.sensor.oom]
            if knobs or procs:
                restored = self.writer.restore(knobs, procs, belief=self.sensor.files, oom_belief=self.sensor.oom)
        self._account(result, restored, trigger)
        self.stats.loop("qos_apply", time.perf_counter() - t0)

    def _account(self, result: BatchResult, restored: BatchResult, trigger: float) -> None:
        per_pod: dict[str, list[str]] = {}
        for o in result.applied:
            if o.file:
                self.stats.count(self.stats.cgroup_writes, o.file)
            else:
                self.stats.count(self.stats.process_writes, "ok")
            per_pod.setdefault(o.pod, []).append(f"{o.file or 'oom_score_adj'}={o.value}")
        for o in result.failed:
            if o.error == "gone":
                continue
            if o.file:
                self.stats.count(self.stats.cgroup_failures, o.file)
            else:
                self.stats.count(self.stats.process_writes, "failed")
            key = (o.pod, o.file, o.error)
            if key not in self._failed_reported:
                self._failed_reported.add(key)
                view = next((p for p in self.pods.views if p.uid == o.pod), None)
                message = f"writing {o.file or 'oom_score_adj'}={o.value} in {o.path} failed: {o.error}"
                if view is not None:
                    self.events.event(_pod_ref(view), "Warning", "CgroupWriteFailed", message)
        for why in result.invalid:
            log.error("refused an invalid knob write: %s", why)
        if result.journal_error and self._node_obj is not None:
            self.events.event(self._node_obj, "Warning", "JournalUnwritable", result.journal_error)
        for o in restored.applied:
            self.stats.count(self.stats.cgroup_restores, o.file or "oom_score_adj")
        if restored.applied and self._node_obj is not None:
            files = sorted({o.file or "oom_score_adj" for o in restored.applied})
            message = f"restored {len(restored.applied)} original value(s) no longer wanted ({', '.join(files)})"
            log.info("%s", message)
            self.events.event(self._node_obj, "Normal", "QosRestored", message)
        if result.applied:
            start = self._qos_trigger if self._qos_trigger is not None else trigger
            self.stats.react("qos", self.clock.wall() - start)
        self._qos_trigger = None
        for uid, changes in per_pod.items():
            if not uid or uid in self._announced:
                continue
            self._announced.add(PodUID(uid))
            view = next((p for p in self.pods.views if p.uid == uid), None)
            if view is not None:
                self.events.event(
                    _pod_ref(view),
                    "Normal",
                    "QosApplied",
                    f"offline (qos-level {view.qos_level}): {', '.join(sorted(set(changes)))}"[:1024],
                )

    def _log_dry_run(self, plan: Plan, job: ApiJob) -> None:
        if plan.cgroup_writes or plan.process_writes or plan.evictions or not job.empty():
            import json

            log.info("dry run plan: %s", json.dumps(plan_json(plan), sort_keys=True))

    def _publish_status(self, plan: Plan) -> None:
        node = self._node_view
        assert node is not None
        u = plan.usage
        journal = self.state_dir.journal if self.state_dir is not None else None
        offline = sum(1 for p in self.pods.views if p.offline)
        self.status = Status(
            node=self.node_name,
            allocatable_cpu=node.allocatable.cpu,
            allocatable_memory=node.allocatable.memory,
            usage={
                "kubepods": (u.kubepods.cpu, u.kubepods.memory),
                "online": (u.online.cpu, u.online.memory),
                "offline": (u.offline.cpu, u.offline.memory),
                "node": (u.node.cpu, u.node.memory),
                "non_offline": (u.non_offline.cpu, u.non_offline.memory),
            },
            usage_ratio=(u.percent.cpu / 100.0, u.percent.memory / 100.0),
            watermarks={r: (node.watermarks.high(r), node.watermarks.low(r)) for r in RESOURCES},
            budget=(plan.capacity.B.cpu, plan.capacity.B.memory),
            batch_published=(plan.capacity.published_batch.cpu, plan.capacity.published_batch.memory),
            oversubscription_published=(plan.capacity.published_x.cpu, plan.capacity.published_x.memory),
            oversubscription_computed=(plan.capacity.X.cpu, plan.capacity.X.memory),
            evicting=plan.evicting,
            pods={"online": len(self.pods.views) - offline, "offline": offline},
            journal_entries=len(journal) if journal is not None else 0,
            qos_paused=self.qos_paused,
        )

    # --- configuration ----------------------------------------------------------------------------------

    def _poll_config(self) -> None:
        t0 = time.perf_counter()
        reload = self.config_source.poll()
        if reload is None:
            return
        node = self._node_obj
        if reload.accepted:
            self.stats.count(self.stats.config_reloads, "accepted")
            self._resolve_config("configuration file changed")
            if node is not None and reload.problems:
                self.events.event(node, "Warning", "ConfigWarnings", reload.describe()[:1024])
        else:
            self.stats.count(self.stats.config_reloads, "rejected")
            if node is not None:
                self.events.event(
                    node,
                    "Warning",
                    "ConfigRejected",
                    f"configuration {self.config_source.path} rejected, the last good one stays: "
                    f"{self.config_source.last_rejection}"[:1024],
                )
        self.stats.loop("config", time.perf_counter() - t0)

    def _resolve_config(self, why: str) -> None:
        config, problems, applied = self.config_source.resolve(self._node_labels)
        for p in problems:
            log.warning("configuration: %s", p)
        if config == self.config and applied == self.applied_overrides:
            return
        old = self.config
        self.config, self.applied_overrides = config, applied
        self.config_generation += 1
        log.info(
            "configuration generation %d in force (%s)%s",
            self.config_generation,
            why,
            f"; overrides: {', '.join(applied)}" if applied else "",
        )
        now = self.clock.monotonic()
        if config.sampler.period != old.sampler.period:
            self._next["sample"] = min(self._next["sample"], now + config.sampler.period)
        self._next["decide"] = min(self._next["decide"], now + config.eviction.period)
        self._next["capacity"] = min(self._next["capacity"], now + config.capacity.period)
        self._next["qos"] = now  # knobs follow the new policy at once
        self._full_qos = True
        if self._node_obj is not None and self.config_generation > 2:
            self.events.event(
                self._node_obj, "Normal", "ConfigApplied", f"configuration generation {self.config_generation} ({why})"
            )

    # --- restore requests ---------------------------------------------------------------------------------

    def _restore_request(self) -> None:
        assert self.state_dir is not None
        result = self.writer.restore_all()
        self.qos_paused = True
        self.state_dir.clear_restore_request()
        message = (
            f"restore requested: put back {len(result.applied)} original value(s) ({result.released} no longer "
            "ours); knobs are not applied again until the agent restarts"
        )
        log.warning("%s", message)
        for o in result.applied:
            self.stats.count(self.stats.cgroup_restores, o.file or "oom_score_adj")
        if self._node_obj is not None:
            self.events.event(self._node_obj, "Normal", "QosRestored", message)
