"""The scheduler's only side effects: binder, evictor and status writer, applying a Plan asynchronously.

`apply(plan)` returns at once; the scheduling loop never waits for the API server:
- binds go through tidemark.kube.binding.AsyncBinder (one asyncio thread, `bind_connections`
  keep-alive connections, `pods/binding`) when the client configuration allows it, else through the
  thread pool as evictions do (the Eviction API with the version the server takes); each first
  checks `fence()` (the leader elector's `is_leader()`), so a replica that lost its lease issues
  nothing more, even for work queued before it lost it;
- the live cache's overlay (scheduler_ext/cache/assumed.py) is told at once that the pods are
  bound/releasing (assumed until the watch confirms), and on the outcome: a refused bind puts the
  pod back to pending for the next session (with a FailedScheduling event), a bind without an
  answer stays assumed until the watch can tell; a 429 eviction (a PodDisruptionBudget said no) is
  counted and the pod is no longer assumed gone;
- status writes (PodGroup and Queue `/status`, the pods' PodScheduled condition) and the creation of
  a missing `default` Queue run on a second, smaller pool, coalesced per object (only the newest
  wanted status of an object is written; one creation of a Queue at a time) and skipped when this
  replica already wrote that status over the same resourceVersion;
- Events through tidemark.kube.events (asynchronous, aggregated, rate-limited): Scheduled on binds,
  FailedScheduling on refused binds and on new unschedulable verdicts, Evict on victims, and
  Volcano's Unschedulable/Scheduled on PodGroups whose status changed.
Nothing here raises into the loop: failures are logged and counted (house style 8).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Final, Literal

from scheduler_ext.cache.live import LiveCache
from scheduler_ext.metrics import SchedulerMetrics
from scheduler_ext.model.plan import (
    POD_SCHEDULED,
    REASON_UNSCHEDULABLE,
    BindOp,
    EvictOp,
    Plan,
    PodConditionOp,
    PodGroupStatusOp,
    QueueCreateOp,
    QueueStatusOp,
    status_fingerprint,
)
from tidemark.kube.binding import AsyncBinder, unsupported
from tidemark.kube.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiStatusError, KubeError, request, request_json
from tidemark.kube.events import EventRecorder, ObjectRef, format_time
from tidemark.kube.eviction import BindOutcome, BindResult, EvictionOutcome, Evictor, bind
from tidemark.kube.resources import PODGROUPS, PODS, QUEUES

log = logging.getLogger(__name__)

_WRITTEN_MAX: Final = 50_000


class Executor:
    """Applies plans; see the module docstring. `stop()` cancels what has not started."""

    def __init__(
        self,
        api_client: Any,
        cache: LiveCache,
        recorder: EventRecorder,
        metrics: SchedulerMetrics,
        *,
        fence: Callable[[], bool] = lambda: True,
        bind_workers: int = 16,
        status_workers: int = 4,
        bind_connections: int = 0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.api_client = api_client
        self.cache = cache
        self.recorder = recorder
        self.metrics = metrics
        self.fence = fence
        self._clock = clock
        self._wall = wall_clock or (lambda: datetime.now(UTC))
        self._evictor = Evictor(api_client)
        self._actions = ThreadPoolExecutor(max_workers=max(1, bind_workers), thread_name_prefix="bind")
        self._status = ThreadPoolExecutor(max_workers=max(1, status_workers), thread_name_prefix="status")
        self._binder: AsyncBinder | None = None
        if bind_connections > 0 and api_client is not None:
            cfg = getattr(api_client, "configuration", None)
            why = unsupported(cfg)
            if why is None:
                self._binder = AsyncBinder(cfg, connections=bind_connections,
                                           limiter=getattr(api_client, "limiter", None),
                                           user_agent=str(getattr(api_client, "user_agent", "tidemark")))
            else:
                log.info("binding through the thread pool: %s", why)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._outstanding = 0
        #: binds queued or in flight (a subset of _outstanding): the loop holds a periodic session for them
        self._binds = 0
        self._pending_status: dict[str, Callable[[], None]] = {}
        self._written: dict[str, tuple[str, Any]] = {}
        self._stopped = False
        #: monotonic time of the last successful API write (readiness: the server answers)
        self.last_success: float | None = None

    # --- the loop's side -------------------------------------------------------------------------------
    def apply(self, plan: Plan) -> None:
        """Queue everything in the plan (binds first); returns at once."""
        for b in plan.binds:
            self.cache.decisions.assume_bound(b.uid, b.node)
            if self._binder is not None:
                self._submit_async_bind(b)
            else:
                self._submit(self._actions, self._bind_in_pool, b, bind=True)
        for e in plan.evictions:
            self.cache.decisions.assume_evicted(e.uid)
            self._submit(self._actions, self._evict, e)
        for pg in plan.podgroups:
            key = f"podgroup/{pg.namespace}/{pg.name}"
            if not self._already_written(key, pg.resource_version, status_fingerprint(pg.status)):
                self._submit_status(key, functools.partial(self._write_podgroup, key, pg))
        for q in plan.queues:
            key = f"queue/{q.name}"
            if not self._already_written(key, q.resource_version, status_fingerprint(q.status)):
                self._submit_status(key, functools.partial(self._write_queue, key, q))
        for c in plan.pod_conditions:
            key = f"pod/{c.uid}"
            if not self._already_written(key, c.resource_version, (c.reason, c.message, c.nominated_node)):
                self._submit_status(key, functools.partial(self._write_pod_condition, key, c))
        for qc in plan.queues_to_create:
            self._submit_status(f"create-queue/{qc.name}", functools.partial(self._create_queue, qc))

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or running (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._outstanding:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    @property
    def binds_in_flight(self) -> int:
        return self._binds

    def wait_binds(self, timeout: float) -> bool:
        """Wait until no bind is queued or in flight; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._binds:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Let running calls finish (up to `timeout`), drop what has not started."""
        with self._lock:
            self._stopped = True
            self._pending_status.clear()
        self._actions.shutdown(wait=False, cancel_futures=True)
        self._status.shutdown(wait=False, cancel_futures=True)
        if self._binder is not None:
            self._binder.stop(timeout)
        self.wait_idle(timeout)

    # --- plumbing --------------------------------------------------------------------------------------
    def _submit(self, pool: ThreadPoolExecutor, fn: Callable[[Any], None], arg: Any, bind: bool = False) -> None:
        with self._lock:
            if self._stopped:
                return
            self._outstanding += 1
            self._binds += bind
        try:
            pool.submit(self._run, fn, arg)
        except RuntimeError:  # shut down meanwhile
            self._done(bind)

    def _bind_in_pool(self, op: BindOp) -> None:
        try:
            self._bind(op)
        finally:
            self._bind_finished()

    def _submit_async_bind(self, op: BindOp) -> None:
        assert self._binder is not None
        with self._lock:
            if self._stopped:
                return
            self._outstanding += 1
            self._binds += 1
        self._binder.submit(op.namespace, op.name, op.uid, op.node, fence=self.fence,
                            done=functools.partial(self._async_bind_done, op))

    def _async_bind_done(self, op: BindOp, result: BindResult | None) -> None:
        try:
            if result is None:
                self._fenced_bind(op)
            else:
                self._bind_outcome(op, result)
        except Exception:  # an executor bug must never kill the binder
            log.exception("executor")
        finally:
            self._done(bind=True)

    def _submit_status(self, key: str, fn: Callable[[], None]) -> None:
        """Coalesce per object: a newer status replaces one that has not been written yet."""
        with self._lock:
            if self._stopped:
                return
            queued = key in self._pending_status
            self._pending_status[key] = fn
            if queued:
                return
            self._outstanding += 1
        try:
            self._status.submit(self._run_status, key)
        except RuntimeError:
            self._done()

    def _run_status(self, key: str) -> None:
        with self._lock:
            fn = self._pending_status.pop(key, None)
        self._run(lambda _arg: fn() if fn is not None else None, None)

    def _run(self, fn: Callable[[Any], None], arg: Any) -> None:
        try:
            fn(arg)
        except Exception:  # an executor bug must never kill a worker or the loop
            log.exception("executor")
        finally:
            self._done()

    def _bind_finished(self) -> None:
        """A pool bind's own end (its _run's _done ends the outstanding count)."""
        with self._idle:
            self._binds -= 1
            if self._binds <= 0:
                self._idle.notify_all()

    def _done(self, bind: bool = False) -> None:
        with self._idle:
            self._outstanding -= 1
            self._binds -= bind
            if self._outstanding <= 0 or (bind and self._binds <= 0):
                self._idle.notify_all()

    def _ok(self) -> None:
        self.last_success = self._clock()

    def _already_written(self, key: str, rv: str, value: Any) -> bool:
        with self._lock:
            return self._written.get(key) == (rv, value)

    def _remember(self, key: str, rv: str, value: Any) -> None:
        with self._lock:
            if len(self._written) >= _WRITTEN_MAX:
                self._written.clear()  # worst case: a few redundant writes
            self._written[key] = (rv, value)

    def _forget(self, key: str) -> None:
        with self._lock:
            self._written.pop(key, None)

    # --- binds and evictions --------------------------------------------------------------------------
    def _fenced_bind(self, op: BindOp) -> None:
        self.metrics.binds.labels("fenced").inc()
        self.cache.decisions.bind_failed(op.uid)
        log.info("not binding %s/%s: no longer the leader (or stopping)", op.namespace, op.name)

    def _bind(self, op: BindOp) -> None:
        if not self.fence():
            self._fenced_bind(op)
            return
        self._bind_outcome(op, bind(self.api_client, op.namespace, op.name, op.uid, op.node))

    def _bind_outcome(self, op: BindOp, result: BindResult) -> None:
        ref = ObjectRef("Pod", op.name, op.namespace, op.uid)
        if result.outcome is BindOutcome.BOUND:
            self._ok()
            self.metrics.binds.labels("bound").inc()
            self.metrics.schedule_attempts.labels("scheduled").inc()
            if op.created > 0:
                self.metrics.task_latency.observe(max(0.0, (time.time() - op.created) * 1000.0))
            self.recorder.normal(ref, "Scheduled", f"Successfully assigned {op.namespace}/{op.name} to {op.node}")
            log.debug("bound %s/%s to %s", op.namespace, op.name, op.node)
            return
        if result.outcome is BindOutcome.CONFLICT:
            # Already bound (by an earlier attempt whose answer was lost, or by someone else): the
            # watch will show where; nothing to retry.
            self._ok()
            self.metrics.binds.labels("conflict").inc()
            self.cache.decisions.bind_failed(op.uid)
            log.info("bind %s/%s to %s: conflict: %s", op.namespace, op.name, op.node, result.message)
            return
        if result.outcome is BindOutcome.NOT_FOUND:
            self._ok()
            self.metrics.binds.labels("not_found").inc()
            self.cache.decisions.bind_failed(op.uid)
            return
        self.metrics.binds.labels("error").inc()
        self.metrics.schedule_attempts.labels("error").inc()
        if result.status is None or result.status >= 500:
            self.cache.decisions.bind_unknown(op.uid)  # may have happened: assumed until the watch can tell
        else:
            self.cache.decisions.bind_failed(op.uid)
        log.warning("bind %s/%s to %s failed: %s", op.namespace, op.name, op.node, result.message)
        self.recorder.warning(ref, "FailedScheduling", f"Binding rejected: {result.message}")

    def _evict(self, op: EvictOp) -> None:
        if not self.fence():
            self.metrics.evictions.labels("fenced").inc()
            self.cache.decisions.eviction_failed(op.uid)
            return
        result = self._evictor.evict(op.namespace, op.name, uid=op.uid)
        ref = ObjectRef("Pod", op.name, op.namespace, op.uid)
        if result.outcome is EvictionOutcome.EVICTED:
            self._ok()
            self.metrics.evictions.labels("evicted").inc()
            self.recorder.warning(ref, "Evict", f"Pod {op.namespace}/{op.name} evicted from {op.node}: {op.reason}")
            log.info("evicted %s/%s from %s: %s", op.namespace, op.name, op.node, op.reason)
            return
        self.cache.decisions.eviction_failed(op.uid)
        if result.outcome is EvictionOutcome.BLOCKED:
            self._ok()
            self.metrics.evictions.labels("blocked").inc()
            log.info("eviction of %s/%s refused (429): %s", op.namespace, op.name, result.message)
        elif result.outcome is EvictionOutcome.NOT_FOUND:
            self._ok()
            self.metrics.evictions.labels("not_found").inc()
        else:
            self.metrics.evictions.labels("error").inc()
            log.warning("eviction of %s/%s failed: %s", op.namespace, op.name, result.message)

    # --- status ------------------------------------------------------------------------------------------
    def _patch(self, kind: str, path: str, body: Mapping[str, Any], content_type: str) -> bool:
        """One status write; False (logged, counted) when it failed. A gone object is not a failure."""
        return self._patch_outcome(kind, path, body, content_type) == "ok"

    def _patch_outcome(
        self, kind: str, path: str, body: Mapping[str, Any], content_type: str
    ) -> Literal["ok", "conflict", "failed"]:
        """`_patch`, telling a conflict (409: the object moved past the resourceVersion written on) apart."""
        if not self.fence():
            return "failed"
        try:
            request(self.api_client, "PATCH", path, body=body, content_type=content_type)
        except ApiStatusError as exc:
            if exc.status == 404:
                self._ok()
                return "failed"
            if exc.status == 409:
                # written on a resourceVersion the object has moved past (our own previous write had not come
                # back through the watch yet): the next session decides again on the newer object
                self._ok()
                self.metrics.status_writes.labels(kind, "conflict").inc()
                log.debug("status write %s: the object changed since the session read it", path)
                return "conflict"
            self.metrics.status_writes.labels(kind, "error").inc()
            log.warning("status write %s: %s", path, exc)
            return "failed"
        except KubeError as exc:
            self.metrics.status_writes.labels(kind, "error").inc()
            log.warning("status write %s: %s", path, exc)
            return "failed"
        self._ok()
        self.metrics.status_writes.labels(kind, "ok").inc()
        return "ok"

    def _write_podgroup(self, key: str, op: PodGroupStatusOp) -> None:
        path = PODGROUPS.object_path(op.name, op.namespace, "status")
        # The status is a whole (conditions are a list a merge patch replaces), computed from the object the
        # session read: written only on that resourceVersion, as Volcano's UpdatePodGroup (an Update) is. A
        # session that read the PodGroup before the previous session's write came back would otherwise write
        # the older conditions over it (a privilege action's Privileged=True lost that way was never undone).
        body = {"status": dict(op.status)}
        if op.resource_version:
            body["metadata"] = {"resourceVersion": op.resource_version}
        outcome = self._patch_outcome("podgroup", path, body, MERGE_PATCH)
        if outcome == "ok":
            self._remember(key, op.resource_version, status_fingerprint(op.status))
        else:
            self._forget(key)
            if not (outcome == "conflict" and op.kept_conditions and self._keep_conditions(op, path)):
                return
        if op.event is not None:
            etype, reason, message = op.event
            ref = ObjectRef("PodGroup", op.name, op.namespace, api_version=PODGROUPS.api_version)
            self.recorder.event(ref, etype, reason, message)

    def _keep_conditions(self, op: PodGroupStatusOp, path: str, attempts: int = 3) -> bool:
        """After a conflict: the op's one-time conditions (`PodGroupStatusOp.kept_conditions`) written onto the
        PodGroup as it is now, on its own resourceVersion; the rest of the op's status, computed from the older
        object, is left to the next session. True once they are there."""
        for _ in range(attempts):
            try:
                obj = request_json(self.api_client, "GET", path)
            except KubeError as exc:
                log.warning("re-reading PodGroup %s/%s after a conflict: %s", op.namespace, op.name, exc)
                return False
            conds = list((obj.get("status") or {}).get("conditions") or [])
            kept = {c.get("type"): c for c in op.kept_conditions}
            there = {(c.get("type"), c.get("transitionID")) for c in conds}
            if all((t, c.get("transitionID")) in there for t, c in kept.items()):
                return True  # already there
            merged = [dict(kept.pop(c.get("type"))) if c.get("type") in kept else c for c in conds]
            merged += [dict(c) for c in kept.values()]
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            body = {"metadata": {"resourceVersion": rv}, "status": {"conditions": merged}}
            outcome = self._patch_outcome("podgroup", path, body, MERGE_PATCH)
            if outcome == "ok":
                log.info("PodGroup %s/%s: kept %s after a conflict", op.namespace, op.name,
                         ", ".join(str(c.get("type")) for c in op.kept_conditions))
                return True
            if outcome != "conflict":
                return False
        log.warning("PodGroup %s/%s: %s not written after %d conflicts", op.namespace, op.name,
                    ", ".join(str(c.get("type")) for c in op.kept_conditions), attempts)
        return False

    def _write_queue(self, key: str, op: QueueStatusOp) -> None:
        path = QUEUES.object_path(op.name, subresource="status")
        if self._patch("queue", path, {"status": dict(op.status)}, MERGE_PATCH):
            self._remember(key, op.resource_version, status_fingerprint(op.status))
        else:
            self._forget(key)

    def _create_queue(self, op: QueueCreateOp) -> None:
        """POST the Queue; one that exists already (409) is fine. Its state is opened by a later
        status write, once the watch shows it (the session opens every queue with an empty state)."""
        if not self.fence():
            return
        body = {
            "apiVersion": QUEUES.api_version,
            "kind": QUEUES.kind,
            "metadata": {"name": op.name},
            "spec": dict(op.spec),
        }
        try:
            request(self.api_client, "POST", QUEUES.collection_path(), body=body)
        except ApiStatusError as exc:
            if exc.status == 409:
                self._ok()
            else:
                log.warning("creating the %s Queue: %s", op.name, exc)
            return
        except KubeError as exc:
            log.warning("creating the %s Queue: %s", op.name, exc)
            return
        self._ok()
        log.info("created the %s Queue", op.name)

    def _write_pod_condition(self, key: str, op: PodConditionOp) -> None:
        cond: dict[str, Any] = {
            "type": POD_SCHEDULED,
            "status": "False",
            "reason": op.reason,
            "message": op.message,
            "lastProbeTime": None,
        }
        if op.transition:
            cond["lastTransitionTime"] = format_time(self._wall())
        status: dict[str, Any] = {"conditions": [cond]}
        if op.nominated_node:
            status["nominatedNodeName"] = op.nominated_node
        elif op.clear_nominated:
            status["nominatedNodeName"] = None
        path = PODS.object_path(op.name, op.namespace, "status")
        if self._patch("pod", path, {"status": status}, STRATEGIC_MERGE_PATCH):
            self._remember(key, op.resource_version, (op.reason, op.message, op.nominated_node))
            if op.reason == REASON_UNSCHEDULABLE:
                self.recorder.warning(ObjectRef("Pod", op.name, op.namespace, op.uid), "FailedScheduling", op.message)
        else:
            self._forget(key)
