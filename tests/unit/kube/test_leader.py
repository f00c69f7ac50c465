"""Leader election arithmetic and state machine with an in-memory Lease and a manual clock.

The real-server test (tests/integration/kube/test_leader_api.py) shows two electors on a real
Lease; these pin the rules exactly: local-clock expiry, skew immunity, 409 races, fencing, release.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.unit.kube.fakes import ManualClock
from tidemark.kube.client import TransportError
from tidemark.kube.leader import (
    LeaderElectionConfig,
    LeaderElector,
    LeaseRecord,
    fenced_deadline,
    lease_expired,
    micro_time,
)

CFG = LeaderElectionConfig(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)


class FakeLock:
    """An in-memory Lease with resourceVersion semantics (409 -> False)."""

    description = "fake/lease"

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.rv = 0
        self.fail = False
        self.before_update: list[object] = []

    def get(self, timeout: float) -> tuple[LeaseRecord, str] | None:
        if self.fail:
            raise TransportError("partitioned")
        return None if self.record is None else (self.record, str(self.rv))

    def create(self, record: LeaseRecord, timeout: float) -> bool:
        if self.fail:
            raise TransportError("partitioned")
        if self.record is not None:
            return False
        self.record, self.rv = record, self.rv + 1
        return True

    def update(self, record: LeaseRecord, resource_version: str, timeout: float) -> bool:
        if self.fail:
            raise TransportError("partitioned")
        while self.before_update:
            hook = self.before_update.pop(0)
            assert callable(hook)
            hook()
        if resource_version != str(self.rv):
            return False
        self.record, self.rv = record, self.rv + 1
        return True


def elector(lock: FakeLock, clock: ManualClock, identity: str, **kwargs: object) -> LeaderElector:
    return LeaderElector(lock, identity=identity, config=CFG, clock=clock, rand=lambda: 0.0, **kwargs)  # type: ignore[arg-type]


def test_config_validation_names_every_problem() -> None:
    assert CFG.problems() == []
    assert len(LeaderElectionConfig(lease_duration=5, renew_deadline=10, retry_period=9).problems()) == 2
    with pytest.raises(ValueError, match="lease_duration must be greater"):
        LeaderElector(FakeLock(), config=LeaderElectionConfig(lease_duration=10, renew_deadline=10))


def test_expiry_arithmetic_uses_the_local_observation_time() -> None:
    held = LeaseRecord(holder_identity="a", lease_duration_seconds=15)
    assert not lease_expired(held, observed_at=100.0, now=114.99, default_duration=99)
    assert lease_expired(held, observed_at=100.0, now=115.0, default_duration=99)
    assert lease_expired(LeaseRecord(holder_identity=""), 100.0, 100.0, 15)  # released
    assert not lease_expired(LeaseRecord(holder_identity="a"), 100.0, 114.0, 15)  # 0 s stored: the default
    assert fenced_deadline(50.0, 10.0) == 60.0
    assert micro_time(datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)) == "2024-01-02T03:04:05.000006Z"


def test_acquires_an_absent_lease_then_renews_keeping_acquire_time() -> None:
    clock, lock = ManualClock(), FakeLock()
    a = elector(lock, clock, "a")
    assert a.try_acquire_or_renew()
    assert lock.record is not None
    first = lock.record
    assert (first.holder_identity, first.lease_duration_seconds, first.lease_transitions) == ("a", 15, 0)
    clock.advance(2)
    assert a.try_acquire_or_renew()
    assert lock.record.acquire_time == first.acquire_time and lock.record.lease_transitions == 0
    assert a.leader_identity() == "a"


def test_a_held_lease_is_taken_only_after_it_stayed_unchanged_for_lease_duration() -> None:
    clock, lock = ManualClock(), FakeLock()
    a, b = elector(lock, clock, "a"), elector(lock, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b observes a's record now (t=0)
    clock.advance(10)
    assert a.try_acquire_or_renew()  # a renews at t=10
    clock.advance(0.5)
    assert not b.try_acquire_or_renew()  # b sees the change: its 15 s start again at t=10.5
    clock.advance(14.75)
    assert not b.try_acquire_or_renew()  # t=25.25 (a's record has not changed since b saw it at 10.5)
    clock.advance(0.25)
    assert b.try_acquire_or_renew()  # t=25.5: unchanged for 15 s by b's clock
    assert lock.record is not None
    assert (lock.record.holder_identity, lock.record.lease_transitions) == ("b", 1)
    assert b.leader_identity() == "b"


def test_writers_clock_skew_is_irrelevant() -> None:
    """The holder's renewTime says 1970; a rival still waits a full lease from its own observation."""
    clock, lock = ManualClock(), FakeLock()
    a = elector(lock, clock, "a", wall_clock=lambda: datetime(1970, 1, 1, tzinfo=UTC))
    b = elector(lock, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.advance(14.9)
    assert not b.try_acquire_or_renew()


def test_a_concurrent_write_loses_the_race_with_409() -> None:
    clock, lock = ManualClock(), FakeLock()
    a, b = elector(lock, clock, "a"), elector(lock, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.advance(15)
    lock.before_update.append(lambda: a.try_acquire_or_renew())  # a renews between b's read and b's write
    assert not b.try_acquire_or_renew()
    assert lock.record is not None and lock.record.holder_identity == "a"


def test_run_leads_renews_and_steps_down_when_renewal_fails_for_renew_deadline() -> None:
    clock, lock = ManualClock(start=0.0), FakeLock()
    seen: list[tuple[float, bool]] = []
    calls: list[str] = []

    def wait(seconds: float) -> bool:
        seen.append((clock.now, a.is_leader()))
        clock.advance(seconds)
        if clock.now >= 6:
            lock.fail = True  # partitioned from t=6: the last successful renewal started at t=4
        if clock.now >= 30:
            a.stop(release=False)
            return True
        return False

    a = LeaderElector(
        lock,
        identity="a",
        config=CFG,
        clock=clock,
        rand=lambda: 0.0,
        wait=wait,
        on_started_leading=lambda: calls.append("started"),
        on_stopped_leading=lambda: calls.append("stopped"),
    )
    a.run()
    assert calls == ["started", "stopped"]
    assert all(leading for t, leading in seen if t < 14)
    assert not any(leading for t, leading in seen if t >= 14)  # 4 + renew_deadline
    assert (13.0, True) in seen and (14.0, False) in seen


def test_is_leader_is_fenced_by_the_local_deadline_even_without_the_loop() -> None:
    clock, lock = ManualClock(), FakeLock()
    a = elector(lock, clock, "a")
    assert a.try_acquire_or_renew()
    a._set_leading()  # what run() does after a successful acquire; the thread is "stuck" from here on
    clock.advance(9.99)
    assert a.is_leader()
    clock.advance(0.01)
    assert not a.is_leader()


def test_clean_stop_releases_so_a_successor_takes_over_at_once() -> None:
    clock, lock = ManualClock(), FakeLock()
    a, b = elector(lock, clock, "a"), elector(lock, clock, "b")
    assert a.try_acquire_or_renew()
    a._set_leading()
    assert not b.try_acquire_or_renew()
    a.stop(release=True)  # never started a thread: stop() steps down itself
    assert not a.is_leader()
    assert lock.record is not None and lock.record.holder_identity == ""
    assert b.try_acquire_or_renew()  # no 15 s wait
    assert lock.record.holder_identity == "b" and lock.record.lease_transitions == 1
