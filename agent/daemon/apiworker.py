"""The API side of a plan, on its own thread: the NodeReport intent, then evictions, with backoff.

Why a thread: an API outage (or a slow server) must never hold up sampling and the local QoS writes.
The main loop submits one `ApiJob` per decision (`agent.daemon.apijobs`); a job not yet started is
merged with the next one (annotation keys: newest wins; evictions: the newest decision's), so during an
outage the writes coalesce and go out once the server answers again (after exponential backoff).

Order inside a job, as docs/design.md, "Watermarks and eviction" requires: the report (the evicting
annotation, B = X = 0, the optional taint) is on the Node BEFORE the first eviction call; if it fails, no pod is
evicted in that round.
Evictions never repeat for a pod within `dedupe_seconds` (the main loop may not have seen the pod's
deletionTimestamp yet). Every outcome is reported back to the main loop (`report`), which wakes up to
act on it: a PodDisruptionBudget refusal makes it pick the next victim at once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agent.act.evictor import EvictResult
from agent.daemon import wording
from agent.daemon.apijobs import ApiJob, merge
from agent.daemon.metrics import Stats
from agent.daemon.wording import NodeEvent
from agent.decide.ops import EvictPod
from tidemark.nodereport import ReportSpec

log = logging.getLogger(__name__)
JSON = dict[str, Any]


class NodeWriterLike(Protocol):
    def write(self, spec: ReportSpec) -> JSON:
        """Put `spec` on the Node (through the NodeReport, or directly); the Node as it then is."""
        ...


class EvictorLike(Protocol):
    def evict(self, op: EvictPod) -> EvictResult: ...


class BatchEvictorLike(EvictorLike, Protocol):
    def evict_many(self, ops: Sequence[EvictPod]) -> list[EvictResult]:
        """One result per op, in order: all of one decision's victims asked at once (`agent.act.report_evictor`)."""
        ...


class EventSink(Protocol):
    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...


class NullEvents:
    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        log.debug("event (not written) %s %s: %s", type_, reason, message)


@dataclass(frozen=True, slots=True)
class Report:
    """One outcome for the main loop: a Node as written, or an eviction's result."""

    kind: str  # "node" | "eviction" | "failure"
    node: JSON | None = None
    eviction: EvictPod | None = None
    result: EvictResult | None = None
    at: float = 0.0
    message: str = ""


class ApiWorker:
    """Executes ApiJobs in order on a thread (or inline with `threaded=False`, for tests and --once)."""

    def __init__(
        self,
        node_writer: NodeWriterLike | None,
        evictor: EvictorLike | None,
        events: EventSink,
        report: Callable[[Report], None],
        stats: Stats,
        *,
        threaded: bool = True,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        backoff_initial: float = 0.5,
        backoff_cap: float = 30.0,
        dedupe_seconds: float = 30.0,
    ) -> None:
        self.node_writer = node_writer
        self.evictor = evictor
        self.events = events
        self.report = report
        self.stats = stats
        self.threaded = threaded
        self._wall = wall
        self._mono = monotonic
        self.backoff_initial = backoff_initial
        self.backoff_cap = backoff_cap
        self.dedupe_seconds = dedupe_seconds
        self._cond = threading.Condition()
        self._pending: ApiJob | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._retry_at = 0.0
        self.busy = False
        #: our knowledge of the evicting annotation after our own last patch (None: never patched it)
        self.marked: bool | None = None
        self._recent: dict[str, float] = {}
        self.last_success: float | None = None
        self.last_error: str | None = None

    # --- the main loop's side -------------------------------------------------------------------------

    def submit(self, job: ApiJob) -> None:
        if job.empty() and not job.node_events:
            return
        if not self.threaded:
            if self._mono() < self._retry_at:
                with self._cond:
                    self._pending = merge(self._pending, job) if self._pending else job
                return
            with self._cond:
                if self._pending is not None:
                    job = merge(self._pending, job)
                    self._pending = None
            self._run_job(job)
            return
        with self._cond:
            self._pending = merge(self._pending, job) if self._pending is not None else job
            self._cond.notify_all()
        self.start()

    def pending(self) -> bool:
        with self._cond:
            return self._pending is not None or self.busy

    def backing_off(self) -> bool:
        return self._failures > 0

    def start(self) -> None:
        if self.threaded and self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._loop, name="api-writer", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def flush(self, timeout: float) -> bool:
        """Wait until no job is pending or running (threaded), or run the pending one (inline)."""
        if not self.threaded:
            with self._cond:
                job, self._pending = self._pending, None
            if job is not None:
                self._run_job(job)
            return self._pending is None
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._pending is not None or self.busy) and not self._stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.1))
        return True

    # --- the worker ---------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while self._pending is None and not self._stop.is_set():
                    self._cond.wait(1.0)
                if self._stop.is_set():
                    return
            delay = self._retry_at - self._mono()
            if delay > 0 and self._stop.wait(delay):
                return
            with self._cond:
                job, self._pending = self._pending, None
                self.busy = job is not None
            if job is None:
                continue
            try:
                self._run_job(job)
            except Exception:  # the writer thread must survive anything
                log.exception("API writer")
            finally:
                with self._cond:
                    self.busy = False
                    self._cond.notify_all()

    def _fail(self, job: ApiJob, why: str) -> None:
        self._failures += 1
        delay = min(self.backoff_cap, self.backoff_initial * 2 ** (self._failures - 1)) * (1 + 0.2 * random.random())
        self._retry_at = self._mono() + delay
        self.last_error = why
        log.warning("API write failed (%s); retrying in %.1fs", why, delay)
        self.report(Report("failure", at=self._wall(), message=why))
        with self._cond:
            # keep what did not land, under anything newer
            self._pending = merge(job, self._pending) if self._pending is not None else job
            self._cond.notify_all()

    def _ok(self) -> None:
        self._failures = 0
        self._retry_at = 0.0
        self.last_success = self._mono()

    def _run_job(self, job: ApiJob) -> None:
        # Any exception of a writer is a failed write (KubeError from the real one): back off, retry.
        if job.report is not None and not job.report.empty() and self.node_writer is not None:
            try:
                node = self.node_writer.write(job.report)
            except Exception as e:
                self.stats.count2(self.stats.api_writes, ("node", "error"))
                self._fail(job, f"writing the NodeReport: {e}")
                return
            self.stats.count2(self.stats.api_writes, ("node", "ok"))
            if job.report.resources:
                self.stats.count2(self.stats.api_writes, ("status", "ok"))
            self._ok()
            self._marked_by(job.report, job.trigger)
            self.report(Report("node", node=node, at=self._wall()))
        job = replace(job, report=None)
        for ev in job.node_events:
            self.events.event(job.node_ref, ev.type, ev.reason, ev.message)
        job = replace(job, node_events=())
        if job.evictions and self.evictor is not None:
            if not (job.node_marked or self.marked):
                log.info("%d eviction(s) wait until the Node is marked evicting", len(job.evictions))
                return
            self._evict(job)

    def _marked_by(self, spec: ReportSpec, trigger: float | None) -> None:
        """The Node's evicting mark as the written `spec` set it."""
        mark = spec.marks_evicting()
        if mark is not None:
            self.marked = mark
            if trigger is not None:
                self.stats.react("mark_evicting" if mark else "clear_evicting", self._wall() - trigger)

    def _outcomes(self, todo: list[EvictPod]) -> Iterator[tuple[EvictPod, EvictResult]]:
        """Each victim with its result: one call for all of them (an evictor that asks the NodeReport controller),
        else one Eviction API call per victim, made as the loop reaches it (an outage stops the rest)."""
        assert self.evictor is not None
        many = getattr(self.evictor, "evict_many", None)
        if many is not None and todo:
            yield from zip(todo, many(todo), strict=True)
            return
        for ev in todo:
            yield ev, self.evictor.evict(ev)

    def _evict(self, job: ApiJob) -> None:
        assert self.evictor is not None
        now = self._mono()
        self._recent = {uid: t for uid, t in self._recent.items() if now - t < self.dedupe_seconds}
        done: list[str] = []
        todo = [ev for ev in job.evictions if ev.uid not in self._recent]
        for i, (ev, result) in enumerate(self._outcomes(todo)):
            at = self._wall()
            self.stats.count2(self.stats.evictions, (ev.reason, result.outcome))
            pod = wording.pod_ref_of(ev.namespace, ev.name, ev.uid)
            said: NodeEvent | None = None
            if result.outcome == "evicted":
                self._recent[ev.uid] = self._mono()
                done.append(f"{ev.key} ({ev.reason})")
                if job.trigger is not None:
                    self.stats.react("evict", at - job.trigger)
                said = wording.evicted(ev)
                log.info("evicted %s (%s): %s", ev.key, ev.reason, ev.detail)
            elif result.outcome == "blocked":
                said = wording.eviction_blocked(ev, result.message)
                log.info("eviction of %s refused (%s); the next victim goes instead", ev.key, result.message)
            elif result.outcome == "error":
                said = wording.eviction_failed(ev, result.message)
                log.warning("evicting %s failed: %s", ev.key, result.message)
            if said is not None and not result.recorded:
                self.events.event(pod, said.type, said.reason, said.message)
            self.report(Report("eviction", eviction=ev, result=result, at=at))
            if result.outcome == "error" and result.transport:
                self._fail(replace(job, report=None, evictions=tuple(todo[i:])), result.message)
                return
        if done:
            said = wording.evicted_offline_pods(done)
            self.events.event(job.node_ref, said.type, said.reason, said.message)
        self._ok()
