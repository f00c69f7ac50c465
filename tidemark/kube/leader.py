"""Leader election on a coordination.k8s.io/v1 Lease, written with raw JSON requests (client-go's algorithm).

Why our own: the official client's LeaseLock builds its own CoordinationV1Api from the global
default configuration (a trap) and its elector offers no fencing. This one:

- acquires a Lease that is absent, released (empty holder) or expired. Expiry is judged as
  client-go does, by the LOCAL clock: a lease is expired when it has not changed for
  leaseDurationSeconds since we last observed a change, so clock skew between machines never
  matters, only clock rates;
- renews every `retry_period`; optimistic concurrency through resourceVersion (409 = lost race);
- stops leading when no renewal succeeded for `renew_deadline` (then campaigns again);
- `is_leader()` is fenced: it turns false at (start of the last successful renewal +
  renew_deadline) even if the elector thread is stuck, and a rival can take over only after
  lease_duration (> renew_deadline) without seeing a change, so two `is_leader()` never overlap
  (given similar clock rates). The scheduler checks it before each bind;
- releases the Lease on a clean `stop()` so the next leader does not wait a whole lease.

The Lease I/O is a small `LeaseLock` so the state machine is unit-tested with a fake lock and a
fake clock, and integration-tested with `ApiLeaseLock` against a real apiserver.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from tidemark.kube.client import JSON, ApiStatusError, KubeError, request_json
from tidemark.kube.resources import LEASES

log = logging.getLogger(__name__)

#: client-go's JitterFactor for the acquire loop: many candidates must not retry in lockstep
JITTER_FACTOR = 1.2


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Timings in seconds (kube-scheduler's defaults): lease 15, renew deadline 10, retry 2."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    #: on a clean stop, write an empty holder so a successor need not wait out the lease
    release_on_stop: bool = True

    def problems(self) -> list[str]:
        out = []
        if self.lease_duration <= self.renew_deadline:
            out.append("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            out.append(f"renew_deadline must be greater than {JITTER_FACTOR} * retry_period")
        if self.retry_period <= 0:
            out.append("retry_period must be positive")
        if self.lease_duration < 1:
            out.append("lease_duration must be at least 1 s (the Lease stores whole seconds)")
        return out


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease spec fields the election uses; times are MicroTime strings as stored."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_spec(cls, spec: JSON | None) -> LeaseRecord:
        spec = spec or {}
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            lease_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> JSON:
        spec: JSON = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.lease_transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


def micro_time(t: datetime) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_expired(record: LeaseRecord, observed_at: float, now: float, default_duration: float) -> bool:
    """Free to take: no holder, or unchanged for its lease duration since we observed it (local clock)."""
    if not record.holder_identity:
        return True
    duration = record.lease_duration_seconds or default_duration
    return now >= observed_at + duration


def fenced_deadline(renew_started_at: float, renew_deadline: float) -> float:
    """Until when a leader may act: the start of its last successful write + renew_deadline."""
    return renew_started_at + renew_deadline


def default_identity() -> str:
    """client-go style `hostname_uuid`: unique even for two processes on one host."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class LeaseLock(Protocol):
    description: str

    def get(self, timeout: float) -> tuple[LeaseRecord, str] | None:
        """The record and its resourceVersion, None if the Lease does not exist."""
        ...

    def create(self, record: LeaseRecord, timeout: float) -> bool:
        """False when someone created it first (409)."""
        ...

    def update(self, record: LeaseRecord, resource_version: str, timeout: float) -> bool:
        """False when the resourceVersion is stale (409: someone else wrote)."""
        ...


class ApiLeaseLock:
    """A Lease object over the raw API (dict bodies, no model classes, no global configuration)."""

    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.name = name
        self.description = f"{namespace}/{name}"

    def _timeout(self, timeout: float) -> tuple[float, float]:
        t = max(0.2, timeout)
        return (t, t)

    def get(self, timeout: float) -> tuple[LeaseRecord, str] | None:
        try:
            body = request_json(
                self.api_client, "GET", LEASES.object_path(self.name, self.namespace), timeout=self._timeout(timeout)
            )
        except ApiStatusError as exc:
            if exc.status == 404:
                return None
            raise
        return LeaseRecord.from_spec(body.get("spec")), str((body.get("metadata") or {}).get("resourceVersion", ""))

    def create(self, record: LeaseRecord, timeout: float) -> bool:
        body = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.to_spec(),
        }
        try:
            request_json(
                self.api_client,
                "POST",
                LEASES.collection_path(self.namespace),
                body=body,
                timeout=self._timeout(timeout),
            )
        except ApiStatusError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def update(self, record: LeaseRecord, resource_version: str, timeout: float) -> bool:
        body = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": resource_version},
            "spec": record.to_spec(),
        }
        try:
            request_json(
                self.api_client,
                "PUT",
                LEASES.object_path(self.name, self.namespace),
                body=body,
                timeout=self._timeout(timeout),
            )
        except ApiStatusError as exc:
            if exc.status == 409:
                return False
            raise
        return True


class LeaderElector:
    """Campaign for a Lease in a daemon thread; see the module docstring.

    Callbacks run on the elector thread and must return quickly (start your own thread for long
    work); a callback that raises is logged. After losing the lease the elector campaigns again.
    `clock` is monotonic (all expiry arithmetic), `wall_clock` only stamps acquireTime/renewTime.
    """

    def __init__(
        self,
        lock: LeaseLock,
        *,
        identity: str | None = None,
        config: LeaderElectionConfig | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] | None = None,
        rand: Callable[[], float] = random.random,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self.config = config or LeaderElectionConfig()
        problems = self.config.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.lock = lock
        self.identity = identity or default_identity()
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self._clock = clock
        self._wall = wall_clock or (lambda: datetime.now(UTC))
        self._rand = rand
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._state_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._observed: LeaseRecord | None = None
        self._observed_rv = ""
        self._observed_at = 0.0
        self._leading = False
        self._renewed_at = float("-inf")
        self._reported_leader = ""
        self._release_on_stop = self.config.release_on_stop

    # --- queries -------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True only while leading AND before the local lease deadline (fencing: check before acting)."""
        with self._state_lock:
            if not self._leading or self._stop.is_set():
                return False
            return self._clock() < fenced_deadline(self._renewed_at, self.config.renew_deadline)

    def leader_identity(self) -> str:
        """The holder we last observed ('' when unknown or released)."""
        with self._state_lock:
            return self._observed.holder_identity if self._observed else ""

    # --- one step of the algorithm (public for tests) ------------------------------------------

    def try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        """One attempt; True when we hold the lease afterwards. Raises KubeError on I/O failure."""
        t = self.config.retry_period if timeout is None else timeout
        started = self._clock()
        now_wall = micro_time(self._wall())
        ours = LeaseRecord(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.config.lease_duration)),
            acquire_time=now_wall,
            renew_time=now_wall,
        )
        current = self.lock.get(t)
        if current is None:
            if not self.lock.create(ours, t):
                return False
            self._record_success(ours, "", started)
            return True
        record, rv = current
        if record != self._observed or rv != self._observed_rv:
            with self._state_lock:
                self._observed, self._observed_rv, self._observed_at = record, rv, self._clock()
            self._notify_leader(record.holder_identity)
        holding = record.holder_identity == self.identity
        if not holding and not lease_expired(record, self._observed_at, self._clock(), self.config.lease_duration):
            return False
        if holding:
            new = replace(
                ours, acquire_time=record.acquire_time or now_wall, lease_transitions=record.lease_transitions
            )
        else:
            new = replace(ours, lease_transitions=record.lease_transitions + 1)
        if not self.lock.update(new, rv, t):
            return False
        self._record_success(new, rv, started)
        return True

    def _record_success(self, record: LeaseRecord, rv: str, started: float) -> None:
        with self._state_lock:
            # Our own write: observed now, so a rival's view and ours start from the same change.
            self._observed, self._observed_rv, self._observed_at = record, rv, self._clock()
            self._renewed_at = started
        self._notify_leader(record.holder_identity)

    def _notify_leader(self, holder: str) -> None:
        if holder and holder != self._reported_leader:
            self._reported_leader = holder
            if holder != self.identity:
                log.info("lease %s: leader is %s", self.lock.description, holder)
            self._call(self.on_new_leader, holder)

    # --- the loop ------------------------------------------------------------------------------

    def start(self) -> LeaderElector:
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name=f"leader {self.lock.description}", daemon=True)
            self._thread.start()
        return self

    def stop(self, *, release: bool | None = None, timeout: float = 5.0) -> None:
        """Stop campaigning. `is_leader()` is false from this call on; the lease is released if configured."""
        self._release_on_stop = self.config.release_on_stop if release is None else release
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._thread is None or not self._thread.is_alive():
            self._step_down(release=self._release_on_stop)  # no loop left to do it (no-op if it did)

    def run(self) -> None:
        """Campaign, lead, and campaign again after a loss, until stop()."""
        while not self._stop.is_set():
            if not self._acquire():
                return
            self._set_leading()
            self._renew_until_lost()
            self._step_down(release=self._stop.is_set() and self._release_on_stop)

    def _attempt(self, timeout: float) -> bool:
        try:
            return self.try_acquire_or_renew(timeout)
        except KubeError as exc:
            log.warning("lease %s: %s", self.lock.description, exc)
        except Exception:  # a bug in one attempt must not end the campaign
            log.exception("lease %s: unexpected error", self.lock.description)
        return False

    def _acquire(self) -> bool:
        period = self.config.retry_period
        while not self._stop.is_set():
            if self._attempt(period):
                log.info("lease %s: acquired by %s", self.lock.description, self.identity)
                return True
            if self._wait(period * (1.0 + JITTER_FACTOR * self._rand())) or self._stop.is_set():
                return False
        return False

    def _renew_until_lost(self) -> None:
        cfg = self.config
        while not self._stop.is_set():
            if self._wait(cfg.retry_period) or self._stop.is_set():
                return
            deadline = fenced_deadline(self._renewed_at, cfg.renew_deadline)
            while not self._stop.is_set():
                remaining = deadline - self._clock()
                if remaining <= 0:
                    log.warning(
                        "lease %s: no renewal for %.1fs; stepping down", self.lock.description, cfg.renew_deadline
                    )
                    return
                if self._attempt(min(remaining, cfg.retry_period)):
                    break
                if self._wait(min(cfg.retry_period / 2, max(0.0, deadline - self._clock()))):
                    return

    def _set_leading(self) -> None:
        with self._state_lock:
            self._leading = True
        self._call(self.on_started_leading)

    def _step_down(self, *, release: bool) -> None:
        with self._state_lock:
            was_leading = self._leading
            self._leading = False
        if not was_leading:
            return
        if release:
            self._release()
        log.info("lease %s: %s stopped leading", self.lock.description, self.identity)
        self._call(self.on_stopped_leading)

    def _release(self) -> None:
        """Write an empty holder (only if the lease is still ours) so a successor takes over at once."""
        try:
            current = self.lock.get(self.config.retry_period)
            if current is None or current[0].holder_identity != self.identity:
                return
            now_wall = micro_time(self._wall())
            record = replace(
                current[0], holder_identity="", lease_duration_seconds=1, renew_time=now_wall, acquire_time=now_wall
            )
            self.lock.update(record, current[1], self.config.retry_period)
        except KubeError as exc:
            log.warning("lease %s: release failed: %s", self.lock.description, exc)

    def _call(self, fn: Callable[..., None] | None, *args: Any) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception:  # a consumer's callback must not break the election
            log.exception("lease %s: callback %s failed", self.lock.description, getattr(fn, "__name__", fn))
