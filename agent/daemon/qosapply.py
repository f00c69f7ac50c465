"""QoS apply: read the knob files, show them to the decision, write what the plan says, account for it.

- sensing: `KnobSensor` resolves the pods' cgroups and reads their knob files, all of them at a
  reconcile (`qos.reconcile`) or only the pods that changed (pod events);
- what `decide` sees: after a full read (or a config or label change) the owned knobs at their
  ORIGINAL values (`KnobSensor.counterfactual`), so the plan lists every knob still wanted and the
  owned knobs it leaves out are restored (where kubelet did not change them since); in between, the
  plain belief, so the plan lists only values that moved (the suppression quota);
- applying: one `CgroupWriter` batch per decision, then the restores; metrics and events
  (`agent.daemon.wording`) for what was written, what failed and what was put back;
- restore requests (`tidemark-agent restore` beside a running agent): everything goes back and the
  knobs stay paused until the agent restarts;
- drift (`drifted`, with every sample): a few of the files the agent wrote are read again, in turn; one that
  holds something else means someone rewrote it behind the agent's back, and the cycle reads and decides
  everything at once instead of at the next reconcile. systemd does that to every unit's cgroup files on
  `systemctl daemon-reload` (kubelet's systemd driver makes each pod a slice: measured on the v2 node,
  docs/agent.md "systemd"), and package upgrades run daemon-reload.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.act.cgroup_writer import OWN, BatchResult, CgroupWriter
from agent.act.statedir import Journal, StateDir
from agent.daemon import wording
from agent.daemon.apiworker import EventSink
from agent.daemon.metrics import Stats
from agent.daemon.podcache import PodCache
from agent.decide.ops import Plan
from agent.knobs import entry_key
from agent.model import CgroupState, PodView
from agent.sense.knobs import KnobSensor
from agent.sense.procfs import ProcFS
from tidemark.apis import PodUID

log = logging.getLogger(__name__)

#: journaled knob files read again per drift check (one check per sample: 1 s by default)
DRIFT_READS = 8


class QosApplier:
    def __init__(
        self,
        writer: CgroupWriter,
        sensor: KnobSensor,
        state_dir: StateDir | None,
        pods: PodCache,
        events: EventSink,
        stats: Stats,
        procfs: ProcFS,
        wall: Callable[[], float],
    ) -> None:
        self.writer = writer
        self.sensor = sensor
        self.state_dir = state_dir
        self.pods = pods
        self.events = events
        self.stats = stats
        self.procfs = procfs
        self.wall = wall
        #: the knob files were read at least once (before that, `decide` gets no cgroups)
        self.sensed = False
        #: a restore request paused the knobs until the agent restarts
        self.paused = False
        #: wall time of the pod event that asked for knobs, for the reaction-latency metric
        self.trigger: float | None = None
        #: pods a pod event found waiting for their cgroups are sensed again (the cycle's retries): the
        #: event's time is kept for the metric until knobs are written or no pod is waiting any more
        self.holding = False
        self._announced: set[PodUID] = set()
        self._failed_reported: set[tuple[str, str, str]] = set()
        #: the drift check's place in the journal, and its backoff while a knob keeps being rewritten
        self._drift_at = 0
        self._drift_hold = 0.0
        self._drift_last = -1e9
        self._drift_streak = 0

    @property
    def journal(self) -> Journal | None:
        return self.state_dir.journal if self.state_dir is not None else None

    # --- sensing ------------------------------------------------------------------------------------------

    def sense(
        self,
        only: set[PodUID] | None,
        cpu_burst: bool,
        memory_qos: bool = False,
        io_devices: Sequence[str] = (),
        io_qos: bool = False,
    ) -> None:
        """Find and read the pods' cgroups: all (a reconcile, which also finds the disks I/O QoS limits:
        `io_devices` is `io_qos.devices`) or those that changed."""
        t0 = time.perf_counter()
        views = self.pods.views
        journal = self.journal
        owned = {e.pod for e in journal.knobs.values()} if journal is not None else set()

        def need(pod: PodView) -> tuple[bool, bool]:
            mine = pod.uid in owned
            if pod.offline:  # v1 I/O QoS limits each container (blk-throttle is flat there)
                return True, pod.uses_batch or mine or (io_qos and self.sensor.version == "v1")
            # v2 memory QoS protects online pods on the pod and on each container; a CPU burst (the node switch or
            # the pod's volcano.sh/enable-quota-burst) goes on both too
            protect = memory_qos and self.sensor.version == "v2"
            burst = cpu_burst or pod.quota_burst is not None
            return burst or protect or mine, burst or protect or mine

        if only is None:
            self.sensor.resolve(views)
            self.sensor.read(views, need=need)
            self.sensor.resolve_devices(io_devices)
            self._forget_vanished()
        else:
            self.sensor.resolve(views, only)
            self.sensor.read(views, only, need=need)
        self.sensed = True
        self.stats.loop("qos_sense", time.perf_counter() - t0)

    def _forget_vanished(self) -> None:
        """Journal entries whose cgroup (or process) is gone have nothing left to restore."""
        journal = self.journal
        if journal is None:
            return
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

    def drifted(self, now: float, max_hold: float) -> str | None:
        """A knob the agent wrote that holds another value now, in words (None: none found). Reads up to
        `DRIFT_READS` journaled files per call, in turn; after a find, the next check waits 1, 2, 4... seconds
        (at most `max_hold`, the reconcile period) while finds keep coming, so a value someone keeps rewriting
        costs a full read per reconcile, not per sample."""
        journal = self.journal
        if journal is None or self.paused or not self.sensed or now < self._drift_hold or not journal.knobs:
            return None
        entries = list(journal.knobs.values())
        n = len(entries)
        for i in range(min(DRIFT_READS, n)):
            e = entries[(self._drift_at + i) % n]
            if entry_key(e.path, e.file, e.written)[1] != e.file:
                continue  # one line of a keyed file (io.max): the reconcile compares those
            current = self.sensor.reader.read(os.path.join(e.path, e.file))
            if current is None or e.ours(current.strip()):
                continue
            self._drift_at = (self._drift_at + i + 1) % n
            self._drift_streak = self._drift_streak + 1 if now - self._drift_last < max(30.0, max_hold * 2) else 0
            self._drift_last = now
            self._drift_hold = now + min(max_hold, float(2**self._drift_streak))
            return f"{e.path}/{e.file} holds {current.strip()!r}, the agent wrote {e.written!r}"
        self._drift_at = (self._drift_at + DRIFT_READS) % n
        return None

    def cgroups(self, full: bool) -> CgroupState | None:
        """What `decide` sees of the knobs (see the module docstring); None before the first read."""
        if not self.sensed:
            return None
        return self.sensor.counterfactual(self.journal) if full else self.sensor.state()

    def forget(self, removed: frozenset[PodUID]) -> None:
        for uid in removed:
            self._announced.discard(uid)

    # --- applying -----------------------------------------------------------------------------------------

    def apply(self, plan: Plan, trigger: float, *, restore: bool, node_obj: Mapping[str, Any] | None) -> None:
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
        journal = self.journal
        if restore and journal is not None and len(journal):
            wanted = {entry_key(w.path, w.file, w.value) for w in plan.cgroup_writes}
            wanted_pids = {p.pid for p in plan.process_writes}
            resolved = set(self.sensor.pods)
            ancestors = {p for d in self.sensor.ancestors.values() for p in d.distinct()}
            knobs = [
                e
                for e in journal.knobs.values()
                if e.key not in wanted
                and (owner.get(e.path) in resolved or e.path in ancestors)
                and e.file in self.sensor.files.get(e.path, {})
            ]
            procs = [p for p in journal.procs.values() if p.pid not in wanted_pids and p.pid in self.sensor.oom]
            if knobs or procs:
                restored = self.writer.restore(knobs, procs, belief=self.sensor.files, oom_belief=self.sensor.oom)
        self._account(result, restored, trigger, node_obj)
        self.stats.loop("qos_apply", time.perf_counter() - t0)

    def _view(self, uid: str) -> PodView | None:
        return next((p for p in self.pods.views if p.uid == uid), None)

    def _account(
        self, result: BatchResult, restored: BatchResult, trigger: float, node_obj: Mapping[str, Any] | None
    ) -> None:
        per_pod: dict[str, list[str]] = {}
        for o in result.applied:
            if o.file:
                self.stats.count(self.stats.cgroup_writes, o.file)
            else:
                self.stats.count(self.stats.process_writes, "ok")
            per_pod.setdefault(o.pod, []).append(f"{o.file or 'oom_score_adj'}={o.value}")
        for o in result.failed:
            if o.error in ("gone", OWN):
                continue
            if o.file:
                self.stats.count(self.stats.cgroup_failures, o.file)
            else:
                self.stats.count(self.stats.process_writes, "failed")
            key = (o.pod, o.file, o.error)
            if key not in self._failed_reported:
                self._failed_reported.add(key)
                view = self._view(o.pod)
                if view is not None:
                    said = wording.cgroup_write_failed(o.file, o.value, o.path, o.error)
                    self.events.event(wording.pod_ref(view), said.type, said.reason, said.message)
        for why in result.invalid:
            log.error("refused an invalid knob write: %s", why)
        if result.journal_error and node_obj is not None:
            said = wording.journal_unwritable(result.journal_error)
            self.events.event(node_obj, said.type, said.reason, said.message)
        for o in restored.applied:
            self.stats.count(self.stats.cgroup_restores, o.file or "oom_score_adj")
        if restored.applied and node_obj is not None:
            said = wording.restored_unwanted(
                len(restored.applied), {o.file or "oom_score_adj" for o in restored.applied}
            )
            log.info("%s", said.message)
            self.events.event(node_obj, said.type, said.reason, said.message)
        # the reaction to a pod event is a write in a pod's group (the offline tier's root quota moves every second)
        for_pods = any(o.pod for o in result.applied)
        if for_pods:
            start = self.trigger if self.trigger is not None else trigger
            self.stats.react("qos", self.wall() - start)
        if for_pods or not self.holding:
            self.trigger = None
        for uid, changes in per_pod.items():
            if not uid or uid in self._announced:
                continue
            self._announced.add(PodUID(uid))
            view = self._view(uid)
            if view is not None:
                said = wording.qos_applied(view, changes)
                self.events.event(wording.pod_ref(view), said.type, said.reason, said.message)

    # --- restores ---------------------------------------------------------------------------------------

    def restore_request(self, node_obj: Mapping[str, Any] | None) -> None:
        """`tidemark-agent restore` asked through the state dir: put everything back, pause the knobs."""
        assert self.state_dir is not None
        result = self.writer.restore_all()
        self.paused = True
        self.state_dir.clear_restore_request()
        said = wording.restore_requested(len(result.applied), result.released)
        log.warning("%s", said.message)
        for o in result.applied:
            self.stats.count(self.stats.cgroup_restores, o.file or "oom_score_adj")
        if node_obj is not None:
            self.events.event(node_obj, said.type, said.reason, said.message)
