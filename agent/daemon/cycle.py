"""The agent's main loop: a table of named duties `step()` runs in order, each when due.

The table (`Cycle.duties`, rows of `agent.daemon.timing.Duty`: name, reason, what runs, when due) is the
daemon's whole local behaviour; a new periodic duty is one row. Other threads only hand news over through
the `Inbox` (pod changes, pressure triggers, API results), which wakes the loop.

The pressure path (`agent.sense.pressure` events, `agent.decide.pressure` rules): a resource's first
trigger samples and decides at once; while pressure lasts near a watermark, samples (each decided on) come
every `pressure.fast_period`; every `qos` read re-arms the sources.

A decision (`_decide`) builds the `Snapshot` (the window, the pods with our evictions overlaid, the
knobs, the carried `AgentState`), calls the pure `agent.decide.decide`, stores `plan.next_state` as it
is, hands the plan's API writes to the worker (`apijobs.api_job`) and its knob writes to the
`QosApplier`, and publishes the gauges' `Status`. Nothing of the plan is pruned or patched here.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace

from agent.act.statedir import StateDir
from agent.config import AgentConfig
from agent.daemon.apijobs import ApiJob, api_job
from agent.daemon.apiworker import ApiWorker
from agent.daemon.cluster import ClusterSource
from agent.daemon.clusterview import ClusterView, NodeChange
from agent.daemon.inbox import Inbox
from agent.daemon.metrics import Stats, Status, status_of
from agent.daemon.podcache import PodCache
from agent.daemon.qosapply import QosApplier
from agent.daemon.reload import ConfigKeeper
from agent.daemon.timing import Duty, Schedule, always
from agent.decide import pressure, resense
from agent.decide.calm import Calm, Probe, decide_calm, probe_breaks
from agent.decide.capacity import cadence, publish_floors
from agent.decide.ops import Plan
from agent.decide.plan import PUBLISHING, decide, initial_state
from agent.model import AgentState, CgroupDirs, NodeView, OnlineWait, PodView, ProfileState, Snapshot, TierSense
from agent.render import plan_json
from agent.sense.counters import PodCounters
from agent.sense.knobs import KnobSensor
from agent.sense.onlinewait import OnlineWaitSensor
from agent.sense.pressure import PressureSensor, sources_for
from agent.sense.procfs import ProcFS
from agent.sense.sampler import Sampler, SampleWindow
from agent.sense.tiersense import TierSensor
from tidemark.apis import RESOURCES, PodUID, Resource
from tidemark.clock import Clock

log = logging.getLogger(__name__)

#: a pressure trigger samples at once, but not within this many seconds of the previous read
MIN_SAMPLE_GAP = 0.05
#: a timed duty whose gate is shut (no first list of the Node and its Pods yet, no sample yet) is looked at again
#: this often: its timer stays due, and a due timer was a wait of 0, the loop spinning at start-up (about a
#: CPU-second per agent) or for as long as the API server could not be reached
GATED_POLL = 0.1


class Cycle:
    """The main loop's state and its duty table; every collaborator comes in at construction."""

    def __init__(
        self,
        *,
        node_name: str,
        clock: Clock,
        inbox: Inbox,
        cluster: ClusterSource,
        keeper: ConfigKeeper,
        view: ClusterView,
        qos: QosApplier,
        worker: ApiWorker,
        sampler: Sampler,
        sensor: KnobSensor,
        counters: PodCounters,
        pods: PodCache,
        stats: Stats,
        state_dir: StateDir | None,
        procfs: ProcFS,
        pressure_sensor: PressureSensor | None,
        config_poll: float,
        dry_run: bool,
    ) -> None:
        self.node_name = node_name
        self.clock = clock
        self.inbox = inbox
        self.cluster = cluster
        self.keeper = keeper
        self.view = view
        self.qos = qos
        self.worker = worker
        self.sampler = sampler
        self.sensor = sensor
        self.counters = counters
        self.pods = pods
        self.stats = stats
        self.state_dir = state_dir
        self.procfs = procfs
        #: the pressure path (`agent.sense.pressure`; None: not watching)
        self.pressure_sensor = pressure_sensor
        self.config_poll = config_poll
        self.dry_run = dry_run
        now = clock.monotonic()
        self.duties = self._table()
        self.schedule = Schedule(now, self.duties)
        self.window = SampleWindow()
        #: what the next decision starts from (`Plan.next_state` of the last one)
        self.agent_state = AgentState()
        self.last_plan: Plan | None = None
        self.decisions = 0
        self.status = Status(node=node_name)
        self.once_done = False
        self.last_loop = now
        self._started_wall = clock.wall()
        #: this step: run for `--once`, the timed duties whose timer fired, a knob read happened
        self._once = False
        self._fired: set[str] = set()
        self._sensed = False
        self._force_decide = False
        self._full_qos = True
        #: the pressure path: each resource's last trigger (monotonic), the resources triggered since the last
        #: sample, the last read, the onset a decision is still to answer (the reaction metric)
        self._last_by_resource: dict[Resource, float] = {}
        self._triggered: set[Resource] = set()
        self._last_read: float | None = None
        self._trigger_pending: float | None = None
        #: pods a pod event found waiting for their cgroups, sensed again on a backoff (`agent.decide.resense`)
        self.retries: dict[PodUID, resense.Retry] = {}
        #: the usage profiles loaded from the state dir (`start`), carried in from the first decision on;
        #: when they were last written (monotonic)
        self.loaded_profile = ProfileState()
        self._profile_saved = now
        self._profile_failed = False
        #: the online pods' CPU wait (`agent.sense.onlinewait`), read by the "tier" duty
        self.wait_sensor = OnlineWaitSensor(sensor.reader, procfs.root)
        self.online_wait: OnlineWait | None = None
        #: the memory guard's and the I/O controller's readings (`agent.sense.tiersense`), the newest kept
        self.tier_sensor = TierSensor(sensor.reader, procfs.root)
        self.tier_sense: TierSense | None = None
        #: whether the node is calm (`agent.decide.calm`): then the sample, tier and decide duties run every
        #: `sampler.calmPeriod`
        self.calm = Calm(None, False, "no decision yet")
        #: the kubepods root's last read (a sample's or a probe's): the next probe's CPU delta starts there
        self._probed: Probe | None = None

    def _table(self) -> tuple[Duty, ...]:
        """The duties in the order a step runs them (a later duty sees what an earlier one did this step)."""
        return (
            Duty("reports", "the API worker's results: the Node as written (its first sight starts the state, "
                 "new labels reconfigure) and refused evictions (the next victim is chosen at once)",
                 self._take_reports, when=always),
            Duty("restore", "`tidemark-agent restore` asked this running agent to put kubelet's values back "
                 "and pause its knobs", self._restore, when=self._restore_requested),
            Duty("config", "the configuration file may have changed: a new policy takes effect without a "
                 "restart", self._poll_config, every=lambda: self.config_poll, first=self.config_poll),
            Duty("cluster", "the reflectors' news: the Node and its Pods as the next decision sees them",
                 self._refresh_cluster, when=always),
            Duty("pressure", "a PSI trigger or memcg pressure event: its onset samples at once",
                 self._take_pressure, when=always),
            Duty("sample", "usage is the decisions' input: one read of every cgroup a period (faster while "
                 "pressure lasts near a watermark; slower while the node is calm, agent.decide.calm)", self._sample,
                 every=lambda: self._period(self.config.sampler.period)),
            Duty("probe", "a calm node's kubepods usage between two samples: past the calm line, a sample at once",
                 self._probe, every=lambda: self.config.sampler.period),
            Duty("qos", "the knob files as they are: all at a reconcile (a knob changed behind the agent's "
                 "back is put right), the pods of a pod event at once, pods waiting for their cgroups on a "
                 "backoff", self._sense_qos, every=lambda: self.config.qos.reconcile, when=self._qos_news,
                 gate=self._synced),
            Duty("tier", "the offline tier gives CPU back before the online pods notice: their CPU wait is read "
                 "and the decision (its tier ceiling, agent.decide.tier) runs every tier period",
                 self._tier, every=lambda: self._period(self.config.tier.period), gate=self._tier_on),
            Duty("decide", "the pure decision over the window: evictions, knob writes, capacity; every "
                 "eviction period, at once after a knob read, a refused eviction, a pressure sample, and on "
                 "capacity ticks", self._decide_due, every=lambda: self._period(self.config.eviction.period),
                 when=self._decide_wanted, gate=self._may_decide),
        )  # fmt: skip

    @property
    def config(self) -> AgentConfig:
        return self.keeper.config

    def _period(self, base: float) -> float:
        """A sensing duty's period: `base`, or `sampler.calmPeriod` while the node is calm."""
        return max(base, self.config.sampler.calm_period) if self.calm.calm else base

    def _end_calm(self, cause: str, why: str) -> None:
        """Calm ends: the sensing duties are due within their own periods again (not the calm one)."""
        was, self.calm = self.calm.calm, Calm(None, False, f"not calm: {why}", cause)
        if not was:
            return
        self.stats.count(self.stats.calm_ends, cause)
        now, c = self.clock.monotonic(), self.config
        for name, base in (("sample", c.sampler.period), ("tier", c.tier.period), ("decide", c.eviction.period)):
            self.schedule.hurry(name, now + base)
        self._calm_status()
        log.debug("sampling every %gs again: %s", c.sampler.period, why, extra={"node": self.node_name})

    def _probe(self, now: float) -> None:
        """While calm: read the kubepods root (usage past the calm line ends calm and samples now) and check a few
        knobs for drift, as each sample does."""
        node = self.view.node
        if not self.calm.calm or node is None or now - (self._last_read or 0.0) < self.config.sampler.period / 2:
            return
        self._check_drift(now)
        t0 = time.perf_counter()
        cur = Probe(*self.sampler.probe())
        why = probe_breaks(self._probed, cur, node.allocatable, node.watermarks)
        self._probed = cur
        self.stats.loop("probe", time.perf_counter() - t0)
        if why is not None:
            self._end_calm(*why)
            self.schedule.hurry("sample", now)

    def _calm_after(self, plan: Plan, node: NodeView) -> None:
        """After a decision: is the node (still) calm? (`agent.decide.calm`)"""
        now, c = self.clock.monotonic(), self.config
        lasting = any(pressure.active(t, now, c.pressure) for t in self._last_by_resource.values())
        new = decide_calm(plan, node.watermarks, node.allocatable, c, lasting, self.calm.since, now)
        if self.calm.calm and not new.calm:
            self._end_calm(new.cause, new.reason.removeprefix("not calm: "))
            return
        if new.calm and not self.calm.calm:
            log.debug("the node is calm: %s", new.reason, extra={"node": self.node_name})
        self.calm = new
        self._calm_status()

    def _calm_status(self) -> None:
        self.status = replace(self.status, sample_period=self._period(self.config.sampler.period))

    def start(self) -> None:
        """Load the usage profiles a previous run left; watch for pressure (armed at the first knob read)."""
        if self.state_dir is not None:
            self.loaded_profile = self.state_dir.profiles.load(self.clock.wall())
        if self.pressure_sensor is not None:
            self.pressure_sensor.start()

    def stop(self) -> None:
        if self.pressure_sensor is not None:
            self.pressure_sensor.stop()
        self.save_profiles()

    def delay(self) -> float:
        """Seconds until the next duty: the local timers, and the capacity tick the last plan set; a duty whose gate
        is shut is looked at again in GATED_POLL at the soonest (the capacity tick is the decision's, a pod's
        re-sense the knob read's)."""
        held = [d.name for d in self.duties if d.every is not None and d.gate is not None and not d.gate()]
        due = self.agent_state.capacity_due
        now = self.clock.monotonic()
        extra: tuple[float, ...] = ()
        if due is not None and self.window.samples and not self.calm.calm:  # calm: the tick waits for a calm sample
            extra = (due - self.clock.wall(),)
        if "decide" in held:
            extra = tuple(max(e, GATED_POLL) for e in extra)
        retry = resense.next_due(self.retries)
        if retry is not None:
            extra = (*extra, max(retry - now, GATED_POLL) if "qos" in held else retry - now)
        return self.schedule.delay(now, *extra, held=held, held_poll=GATED_POLL)

    # --- the step -----------------------------------------------------------------------------------------

    def step(self, *, once: bool = False) -> None:
        """Run every duty of the table that is due now, in order (see `agent.daemon.timing.Duty`)."""
        t0 = time.perf_counter()
        now = self.clock.monotonic()
        self.last_loop = now
        self._once, self._fired, self._sensed = once, set(), False
        for duty in self.duties:
            if duty.gate is not None and not duty.gate():
                continue
            timed = duty.every is not None and self.schedule.due(duty.name, now)
            if not timed and (duty.when is None or not duty.when(now)):
                continue
            if timed:
                assert duty.every is not None
                self.schedule.advance(duty.name, now, duty.every())
                self._fired.add(duty.name)
            duty.run(now)
        self.stats.loop("step", time.perf_counter() - t0)

    # --- when due ---------------------------------------------------------------------------------------------

    def _restore_requested(self, _now: float) -> bool:
        return self.state_dir is not None and self.state_dir.restore_requested()

    def _synced(self) -> bool:
        """The Node and its Pods are listed: knobs and decisions need them."""
        return self.view.node is not None and self.cluster.synced()

    def _qos_news(self, now: float) -> bool:
        return self.inbox.pods_pending() or bool(resense.due(self.retries, now))

    def _may_decide(self) -> bool:
        """Synced with samples; `--once` waits for a full window and a first knob read."""
        if not self._synced() or not self.window.samples:
            return False
        return not self._once or (len(self.window.samples) >= self.config.eviction.consecutive and self.qos.sensed)

    def _decide_wanted(self, _now: float) -> bool:
        # a calm node's capacity tick is decided with the next calm sample (the decision publishes what is due)
        capacity_due = not self.calm.calm and cadence(
            self.agent_state.capacity_due, self.config.capacity.period, self.clock.wall()
        )[0]
        # --once: the first decision is a capacity tick too (the state starts due)
        return self._once or self._sensed or self._force_decide or capacity_due

    def _tier_on(self) -> bool:
        c = self.config
        return (c.tier.enabled or c.tier_memory.enabled or c.tier_io.enabled) and self._may_decide()

    # --- the duties -------------------------------------------------------------------------------------------

    def _tier(self, _now: float) -> None:
        """Read the online pods' CPU wait; the decision that follows in this step recomputes the tier's ceiling from
        it and the newest sample and hands its writes to the executor (only values that changed)."""
        t0 = time.perf_counter()
        views = {p.uid: p for p in self.pods.views}
        dirs = {uid: pc.pod for uid, pc in self.sensor.pods.items()}
        self.online_wait = self.wait_sensor.read(views, dirs, self.clock.wall(), self.config.tier.online_wait_signal)
        self._tier_memory_io(views, dirs)
        self._force_decide = True
        self.stats.loop("tier", time.perf_counter() - t0)

    def _tier_memory_io(self, views: Mapping[PodUID, PodView], dirs: Mapping[PodUID, CgroupDirs]) -> None:
        """The memory guard's and the I/O controller's readings (agent.decide.memguard, agent.decide.iopressure)."""
        c = self.config
        if not (c.tier_memory.enabled or c.tier_io.enabled):
            self.tier_sense = None
            return
        online = {views[uid].key: d for uid, d in dirs.items() if uid in views and not views[uid].offline}
        offline = {views[uid].key: d for uid, d in dirs.items() if uid in views and views[uid].offline}
        self.tier_sense = self.tier_sensor.read(
            self.clock.wall(), self.sensor.ancestors.get("besteffort"), online, offline,
            [d.number for d in self.sensor.devices], memory=c.tier_memory.enabled, io=c.tier_io.enabled,
        )  # fmt: skip

    def _take_reports(self, _now: float) -> None:
        for r in self.inbox.take_reports():
            if r.kind == "node" and r.node is not None:
                self._node_changed(self.view.take_node(r.node))
            elif r.kind == "eviction" and r.eviction is not None and r.result is not None:
                ev = r.eviction
                if self.view.eviction_result(ev.uid, ev.grace_seconds, r.result, r.at, self.config, ev.workload):
                    self._force_decide = True

    def _restore(self, _now: float) -> None:
        self.qos.restore_request(self.view.node_obj)

    def _poll_config(self, _now: float) -> None:
        self._reconfigured(self.keeper.poll(self.view.labels, self.view.node_obj))

    def _sample(self, now: float) -> None:
        """Read once; then sample fast while pressure lasts near a watermark, and decide on such samples."""
        c = self.config
        triggered = bool(self._triggered)
        self._read_sample()
        fast = self._fast(now)  # on the sample just taken
        if fast:
            self.schedule.hurry("sample", now + pressure.sample_period(c.sampler.period, True, c.pressure))
        if fast or triggered:
            self._force_decide = True  # a triggered sample, and each one while pressure lasts, decided at once
        if self.calm.calm:  # a calm sample is read by the tier and decided in this step, not on timers of their own
            self.schedule.hurry("tier", now)
            self.schedule.hurry("decide", now)
        self._check_drift(now)

    def _check_drift(self, now: float) -> None:
        """A few journaled knobs read again (`QosApplier.drifted`) every sampler period, calm or not."""
        drift = self.qos.drifted(now, self.config.qos.reconcile)
        if drift is not None:  # e.g. systemd's daemon-reload: everything is read and decided now
            log.info("a knob changed behind the agent's back (%s): reading and deciding every knob now", drift)
            self.inbox.all_changed()

    def _sense_qos(self, now: float) -> None:
        """Read the knobs: all of them at a reconcile (or when every pod is to be read), else the changed pods."""
        dirty, dirty_all = self.inbox.take_pods()
        again = resense.due(self.retries, now)
        routine = not (dirty or dirty_all or again)
        if "qos" in self._fired or dirty_all:
            if "qos" not in self._fired:
                self.schedule.advance("qos", now, self.config.qos.reconcile)
            self._sense(None)
        elif dirty or again:
            self._sense(dirty | again)
        else:
            return
        if again:
            with self.stats.lock:
                self.stats.qos_resenses += len(again)
        # a calm node's routine reconcile is decided with the next calm sample, within `sampler.calmPeriod` (a pod
        # event, a drift found, a pod waiting for its cgroups: at once)
        self._sensed = not (routine and self.calm.calm)
        self._reschedule(dirty, again, now)
        self._full_qos = True
        self._arm_pressure()

    def _decide_due(self, _now: float) -> None:
        self._force_decide = False
        self._decide()
        if self._trigger_pending is not None:
            self.stats.react("pressure", self.clock.monotonic() - self._trigger_pending)
            self._trigger_pending = None
        if self._once:
            self.once_done = True

    # --- what the duties share --------------------------------------------------------------------------------

    def _node_changed(self, change: NodeChange | None) -> None:
        if change is None:
            return
        node = self.view.node
        assert node is not None
        if change.first:
            state = initial_state(node.evicting_annotation or node.evicting_taint, self._started_wall)
            self.agent_state = replace(state, profile=self.loaded_profile)
        if change.labels_changed:
            self._full_qos = True  # the labels decide whether knobs are wanted at all
            self._force_decide = True  # a user's change is answered at once, calm or not
            why = "node first seen" if change.first else "node labels changed"
            self._reconfigured(
                self.keeper.resolve(self.view.labels, why, self.view.node_obj, announce=not change.first)
            )

    def _reconfigured(self, old: AgentConfig | None) -> None:
        """A new configuration came into force (`old` was the previous one): re-time, re-apply the knobs."""
        if old is None:
            return
        now = self.clock.monotonic()
        self.schedule.reconfigured(now, {d.name: d.every() for d in self.duties if d.every is not None})
        self.schedule.hurry("qos", now)  # the knobs follow the new policy now, decided in this step
        self._full_qos = True
        self._force_decide = True
        if old.pressure != self.config.pressure:
            self._arm_pressure()

    def _refresh_cluster(self, _now: float) -> None:
        new, change = self.view.refresh_node()
        if not new:
            return
        self._node_changed(change)
        pods = self.view.refresh_pods(self.config)
        self.inbox.pods_added(pods.added)
        self.qos.forget(pods.removed)
        if pods.removed and self.retries:
            self.retries = resense.forget(self.retries, pods.removed)
            self.qos.holding = bool(self.retries)

    def _take_pressure(self, now: float) -> None:
        """Fold the pressure sensor's events in: sample (and decide) at once, then fast while pressure lasts."""
        events = self.inbox.take_pressure()
        if not events or not self.config.pressure.enabled:
            return
        cfg = self.config.pressure
        # a resource's onset (not one that already lasts, e.g. memory while the node's CPU PSI fires) samples now
        onset = any(not pressure.active(self._last_by_resource.get(e.source.resource), now, cfg) for e in events)
        first = min(e.time for e in events)
        for e in events:
            self._last_by_resource[e.source.resource] = max(e.time, self._last_by_resource.get(e.source.resource, 0.0))
        if onset and self._trigger_pending is None:
            self._trigger_pending = first  # the reaction metric: pressure onset -> the decision it woke
        for e in events:
            self._triggered.add(e.source.resource)
            self.stats.count2(self.stats.pressure_triggers, (e.source.resource, e.source.kind))
        if not onset:
            return  # pressure lasts: samples go on every fast_period (v1 events may come every few ms)
        self._end_calm("pressure", "a pressure trigger")
        # at once, unless the last read was a moment ago (a CPU delta over a few ms says little)
        at = now if self._last_read is None else max(now, self._last_read + MIN_SAMPLE_GAP)
        self.schedule.hurry("sample", at)

    def _fast(self, now: float) -> bool:
        """Sample fast: pressure lasts for a resource whose usage is near its high watermark."""
        cfg = self.config.pressure
        lasting = [r for r, t in self._last_by_resource.items() if pressure.active(t, now, cfg)]
        node = self.view.node
        if not lasting or node is None:
            return False
        last = self.window.samples[-1] if self.window.samples else None
        return pressure.worth_hurrying(last, lasting, node.allocatable, node.watermarks, cfg)

    def _arm_pressure(self) -> None:
        """Watch the current sources: kubepods, the node where groups have none, the online pods (v2)."""
        online = {p.uid: p.key for p in self.pods.views if not p.offline}
        self.sampler.online = frozenset(online)
        sensor = self.pressure_sensor
        if sensor is None:
            return
        c = self.config.pressure
        if not c.enabled:
            sensor.arm((), c.trigger(), c.memory_level)
            return
        pods = ((online[uid], pc.pod) for uid, pc in self.sensor.pods.items() if uid in online)
        sensor.arm(sources_for(self.sampler.kubepods, pods, self.procfs.root), c.trigger(), c.memory_level)

    def _read_sample(self) -> None:
        t0 = time.perf_counter()
        try:
            cur = self.sampler.read()
        except Exception:
            log.exception("sampling failed")
            self.stats.sample_failures += 1
            return
        self._last_read = cur.mono
        self._probed = Probe(cur.mono, cur.kubepods_cpu_ns, cur.kubepods_memory)
        c = self.config
        horizon = max(c.sampler.window, c.eviction.consecutive * c.sampler.period) + 5
        triggered = tuple(r for r in RESOURCES if r in self._triggered)
        self._triggered.clear()
        sample = self.window.add(cur, self.procfs.clk_tck, horizon, triggered)
        if sample is None:
            return
        if sample.kubepods is None:
            self.stats.sample_failures += 1
        self.stats.samples += 1
        self.stats.loop("sample", time.perf_counter() - t0)

    def _sense(self, only: set[PodUID] | None) -> None:
        c = self.config
        self.qos.sense(only, c.qos.cpu_burst, c.memory_qos.enabled, c.io_qos.devices, c.io_qos.enabled)
        self.sampler.pod_dirs = {uid: pc.pod for uid, pc in self.sensor.pods.items()}
        if only is None:
            self._count()

    def _reschedule(self, events: set[PodUID], again: frozenset[PodUID], now: float) -> None:
        """After a sense: pods a pod event (or a due retry) found waiting for cgroups are sensed again soon."""
        look = events | again | set(self.retries)
        if not look:
            return
        found = self.sensor.pods
        sensed = {p.uid: resense.waiting(p, found.get(p.uid)) for p in self.pods.views if p.uid in look}
        gone = [uid for uid in self.retries if uid not in sensed]
        before = len(self.retries)
        self.retries = resense.reschedule(
            resense.forget(self.retries, gone), sensed, events, now, soon=self.sensor.unfinished
        )
        self.qos.holding = bool(self.retries)
        if log.isEnabledFor(logging.DEBUG) and (self.retries or before):
            log.debug("pods waiting for their cgroups: %d (re-sensed %d)", len(self.retries), len(again))

    def _count(self) -> None:
        """Add each pod's CFS throttling, and each offline pod's block I/O on the managed disks, since the last
        full read to the metrics (`agent.sense.counters`)."""
        classes = {p.uid: "offline" if p.offline else "online" for p in self.pods.views}
        found = self.sensor.pods
        in_class = [(uid, classes[uid], pc.pod) for uid, pc in found.items() if uid in classes]
        for t in self.counters.throttling(in_class):
            self.stats.throttled(t.cls, t.periods, t.throttled, t.seconds)
        disks = {d.number: d.name for d in self.sensor.devices}
        offline = [(uid, pc.pod) for uid, pc in found.items() if classes.get(uid) == "offline"]
        for io in self.counters.io(offline, disks):
            self.stats.count2(self.stats.io_bytes, (io.disk, io.op), io.n)

    def _decide(self) -> None:
        """Snapshot -> the pure decision -> its state kept as it is -> the hand-over to the executors."""
        t0 = time.perf_counter()
        full, self._full_qos = self._full_qos, False
        now = self.clock.wall()
        snapshot = self._snapshot(full, now)
        plan = decide(snapshot, self.config, now)
        previous, self.agent_state = self.agent_state, plan.next_state
        self.last_plan = plan
        self.decisions += 1
        self.stats.decisions += 1
        trigger = snapshot.samples[-1].time if snapshot.samples else now
        decided = time.perf_counter()
        self.stats.loop("decide", decided - t0)
        job = self._hand_over(plan, previous, snapshot, trigger, full)
        self._calm_after(plan, snapshot.node)
        self._checkpoint_profiles()
        done = time.perf_counter()
        self.stats.loop("act", done - decided)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "decision %d: evicting=%s knob writes=%d process writes=%d evictions=%d node report=%s; "
                "decide %.2f ms, act %.2f ms",
                self.decisions,
                plan.evicting,
                len(plan.cgroup_writes),
                len(plan.process_writes),
                len(plan.evictions),
                not job.empty(),
                (decided - t0) * 1000,
                (done - decided) * 1000,
                extra={"node": self.node_name, "full_qos": full, "capacity": plan.capacity_tick},
            )

    def _snapshot(self, full: bool, now: float) -> Snapshot:
        """What the decision reads: the Node and Pods (our evictions overlaid), the window, the knobs (all of them
        after a full read), the carried state, the online wait signals."""
        node = self.view.node
        assert node is not None
        unevictable = self.view.unevictable()
        pods = self.view.pod_views(now, self.config)
        return Snapshot(
            node, pods, tuple(self.window.samples), self.window.taken(), self.qos.cgroups(full), self.agent_state,
            unevictable=unevictable,
            online_wait=self.online_wait if self.config.tier.enabled else None,
            tier_sense=self.tier_sense,
            evicted=self.view.eviction_history(now, self.config),
            sample_period=self._period(self.config.sampler.period),
        )  # fmt: skip

    def _hand_over(self, plan: Plan, previous: AgentState, snapshot: Snapshot, trigger: float, full: bool) -> ApiJob:
        """The plan as it is: API writes to the worker, knob writes to the QoS applier (not while paused, not in
        a dry run, which logs the plan instead); then the gauges' `Status`."""
        job = api_job(
            plan,
            previous,
            snapshot.node,
            self.view.node_ref(self.node_name),
            consecutive=self.config.eviction.consecutive,
            trigger=trigger,
            x_floor=publish_floors(self.config.capacity, snapshot.node.allocatable),
        )
        if self.dry_run:
            self._log_dry_run(plan, job)
        else:
            self.worker.submit(job)
            self._log_publication(plan)
            if self.qos.sensed and not self.qos.paused and snapshot.cgroups is not None:
                self.qos.apply(plan, trigger, restore=full, node_obj=self.view.node_obj)
        journal = self.state_dir.journal if self.state_dir is not None else None
        entries = len(journal) if journal is not None else 0
        last = snapshot.samples[-1] if snapshot.samples else None
        self.status = status_of(self.node_name, snapshot.node, plan, self.pods.views, entries, self.qos.paused, last)
        for h in plan.held:  # once per decision that holds a victim back
            self.stats.count(self.stats.evictions_held, h.cooldown)
        return job

    def _log_publication(self, plan: Plan) -> None:
        """One info line per capacity publication, with its reasons (which value moved, how far, or the resync):
        at most a few a minute, and what an operator asks first of a node that writes more often than that."""
        if plan.report is None:
            return
        why = next((n for n in plan.explanations if n.startswith(PUBLISHING)), None)
        if why is not None:
            log.info("capacity published: %s", why[len(PUBLISHING):], extra={"node": self.node_name})

    def _checkpoint_profiles(self, *, force: bool = False) -> None:
        """Write the usage profiles every `capacity.profile.checkpoint` (and on the way out); a failure is logged
        once per run of failures, never raised: the profiles live on in memory."""
        now = self.clock.monotonic()
        if self.state_dir is None or self.dry_run or self.agent_state.profile.folded is None:
            return
        if not force and now - self._profile_saved < self.config.profile.checkpoint:
            return
        self._profile_saved = now
        try:
            self.state_dir.profiles.save(self.agent_state.profile)
        except OSError as e:
            if not self._profile_failed:
                log.warning("cannot write the usage profiles to %s: %s (retried every %gs)",
                            self.state_dir.profiles.path, e, self.config.profile.checkpoint)  # fmt: skip
            self._profile_failed = True
        else:
            self._profile_failed = False

    def save_profiles(self) -> None:
        """Write the usage profiles now (the agent stops)."""
        self._checkpoint_profiles(force=True)

    def _log_dry_run(self, plan: Plan, job: ApiJob) -> None:
        if plan.cgroup_writes or plan.process_writes or plan.evictions or not job.empty():
            log.info("dry run plan: %s", json.dumps(plan_json(plan), sort_keys=True))
