"""EventRecorder policy with the API replaced by an in-memory fake (the real-server test shows the bodies are accepted).

The fake stands in for `tidemark.kube.events.request`/`request_json` only; the recorder's queue,
worker thread, aggregation, coalescing and rate limits run for real, on a manual clock.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.kube.fakes import ManualClock
from tidemark.kube import events as ev
from tidemark.kube.client import ApiStatusError, Response, TransportError
from tidemark.kube.events import AggregationKey, EventRecorder, ObjectRef, event_name, event_namespace, should_aggregate

POD = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}
NODE = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1", "uid": "u2"}}
WALL = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


class FakeApi:
    """Records writes; `gate` blocks POSTs until set; `fail` makes the next calls raise it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail: list[Exception] = []

    def request(self, api: Any, method: str, path: str, **kw: Any) -> Response:
        self.entered.set()
        self.gate.wait(10)
        if self.fail:
            raise self.fail.pop(0)
        self.calls.append((method, path, kw.get("body")))
        return Response(200, kw.get("body"), {})

    def request_json(self, api: Any, method: str, path: str, **kw: Any) -> dict[str, Any]:
        return self.request(api, method, path, **kw).body or {}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi()
    monkeypatch.setattr(ev, "request", fake.request)
    monkeypatch.setattr(ev, "request_json", fake.request_json)
    return fake


def recorder(clock: ManualClock, **kw: Any) -> EventRecorder:
    kw.setdefault("retries", 1)
    return EventRecorder(object(), "tidemark-agent", host="node-a", clock=clock, wall_clock=lambda: WALL, **kw)


def test_pure_helpers() -> None:
    ref = ObjectRef.of(POD)
    assert ref == ObjectRef("Pod", "p", "ns", "u1", "v1")
    assert event_namespace(ref) == "ns" and event_namespace(ObjectRef.of(NODE)) == "default"
    assert event_name(ref, 255) == "p.ff"
    assert ObjectRef.of(NODE).to_json() == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u2"}
    assert ObjectRef.of({"metadata": {"name": "x"}}, kind="Node").kind == "Node"
    with pytest.raises(ValueError):
        ObjectRef.of({"metadata": {"name": "x"}})
    assert should_aggregate(100.0, 700.0, 600.0) and not should_aggregate(100.0, 700.1, 600.0)
    assert not should_aggregate(None, 1.0, 600.0)
    a = AggregationKey(ref, "Normal", "R", "m")
    assert a == AggregationKey(ObjectRef.of(POD), "Normal", "R", "m") and a != AggregationKey(ref, "Normal", "R", "m2")


def test_creates_then_bumps_count_within_the_window_then_starts_anew(api: FakeApi) -> None:
    clock = ManualClock()
    r = recorder(clock)
    r.warning(POD, "CPUHighWatermark", "cpu 91% >= 80%")
    assert r.flush(5)
    method, path, body = api.calls[0]
    assert (method, path) == ("POST", "/api/v1/namespaces/ns/events")
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ns", "uid": "u1"}
    assert body["type"] == "Warning" and body["count"] == 1 and body["reason"] == "CPUHighWatermark"
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2024-05-06T07:08:09Z"
    assert body["source"] == {"component": "tidemark-agent", "host": "node-a"}
    assert body["reportingComponent"] == "tidemark-agent"
    name = body["metadata"]["name"]
    clock.advance(599)
    r.warning(POD, "CPUHighWatermark", "cpu 91% >= 80%")
    assert r.flush(5)
    assert api.calls[1][0] == "PATCH" and api.calls[1][1] == f"/api/v1/namespaces/ns/events/{name}"
    assert api.calls[1][2] == {"count": 2, "lastTimestamp": "2024-05-06T07:08:09Z"}
    clock.advance(601)  # more than 10 minutes after the last occurrence
    r.warning(POD, "CPUHighWatermark", "cpu 91% >= 80%")
    assert r.flush(5)
    assert api.calls[2][0] == "POST" and api.calls[2][2]["count"] == 1
    assert (r.created, r.patched) == (2, 1)
    r.stop()


def test_a_different_message_or_object_is_a_different_event(api: FakeApi) -> None:
    r = recorder(ManualClock())
    r.normal(POD, "Evicted", "a")
    r.normal(POD, "Evicted", "b")
    r.normal(NODE, "Evicted", "a")
    assert r.flush(5)
    assert [c[0] for c in api.calls] == ["POST", "POST", "POST"]
    assert api.calls[2][1] == "/api/v1/namespaces/default/events"
    r.stop()


def test_occurrences_queued_behind_a_slow_write_coalesce_into_one_patch(api: FakeApi) -> None:
    r = recorder(ManualClock())
    api.gate.clear()
    r.normal(NODE, "Evicting", "x")
    assert api.entered.wait(5)  # the worker is inside the (slow) POST
    for _ in range(5):
        r.normal(NODE, "Evicting", "x")  # returns at once: the caller never waits for the API
    api.gate.set()
    assert r.flush(5)
    assert [(c[0], c[2].get("count")) for c in api.calls] == [("POST", 1), ("PATCH", 6)]
    r.stop()


def test_per_object_spam_filter_and_queue_bound_drop_instead_of_blocking(api: FakeApi) -> None:
    r = recorder(ManualClock(), per_object_burst=2)
    for i in range(3):
        r.normal(POD, "Routine", f"m{i}")
    r.normal(POD, "Rare", "m")  # a routine reason's spent budget does not silence another reason
    assert r.flush(5)
    assert [c[2].get("reason") for c in api.calls] == ["Routine", "Routine", "Rare"] and r.dropped == 1
    r.stop()

    api.calls.clear()
    api.gate.clear()
    q = recorder(ManualClock(), max_pending=2)
    q.normal(NODE, "first", "m")
    assert api.entered.wait(5)
    for i in range(4):
        q.normal(NODE, f"more{i}", "m")  # two fit in the queue, two are dropped
    api.gate.set()
    assert q.flush(5)
    assert len(api.calls) == 3 and q.dropped == 2
    q.stop()


def test_never_raises_on_bad_input_or_api_failure(api: FakeApi) -> None:
    r = recorder(ManualClock())
    r.normal({"metadata": {}}, "R", "m")  # no name, no kind
    r.normal("not an object", "R", "m")  # type: ignore[arg-type]
    assert r.dropped == 2
    api.fail.append(TransportError("connection refused"))
    r.normal(POD, "R", "m")
    assert r.flush(5)
    assert r.failed == 1 and api.calls == []
    api.fail.append(ApiStatusError(403, "forbidden"))
    r.normal(POD, "R2", "m")
    assert r.flush(5)
    assert r.failed == 2
    r.stop()
    r.normal(POD, "R3", "m")  # after stop: dropped, no error
    assert r.dropped == 3


def test_a_patch_on_an_expired_event_creates_a_new_one(api: FakeApi) -> None:
    r = recorder(ManualClock())
    r.normal(POD, "R", "m")
    assert r.flush(5)
    api.fail.append(ApiStatusError(404, "not found"))
    r.normal(POD, "R", "m")
    assert r.flush(5)
    assert [c[0] for c in api.calls] == ["POST", "POST"]
    assert api.calls[1][2]["count"] == 1
    r.stop()


def test_transient_failures_are_retried(api: FakeApi) -> None:
    r = recorder(ManualClock(), retries=2)
    api.fail.append(ApiStatusError(500, "etcd timeout"))
    r.normal(POD, "R", "m")
    assert r.flush(5)
    assert [c[0] for c in api.calls] == ["POST"] and r.failed == 0
    r.stop()


class UrgentWrites:
    """The component's urgent writes (the scheduler's binds) as `yield_to` sees them, in flight while
    `busy`: a wait then times out and advances the manual clock by its timeout; otherwise it returns at once."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.busy = True
        self.waits: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        if self.busy:
            self.clock.advance(timeout)
        return not self.busy


def test_events_wait_for_the_urgent_writes_to_end(api: FakeApi) -> None:
    clock = ManualClock()
    urgent = UrgentWrites(clock)
    urgent.busy = False
    r = recorder(clock, yield_to=urgent.wait, max_yield=5.0)
    r.normal(POD, "Scheduled", "a")
    assert r.flush(5)
    assert urgent.waits == [5.0] and len(api.calls) == 1  # nothing urgent: written at once
    r.stop()


def test_events_yield_at_most_max_yield_per_busy_spell_then_go_out_beside_the_writes(api: FakeApi) -> None:
    clock = ManualClock()
    urgent = UrgentWrites(clock)
    r = recorder(clock, yield_to=urgent.wait, max_yield=5.0)
    start = clock()
    r.normal(POD, "Scheduled", "a")
    assert r.flush(5)
    # the first Event of the spell waited the whole yield; the next ones of the same spell do not wait again
    assert urgent.waits == [5.0] and clock() - start == 5.0 and len(api.calls) == 1
    r.normal(POD, "Scheduled", "b")
    r.normal(NODE, "Scheduled", "c")
    assert r.flush(5)
    assert urgent.waits == [5.0, 0.0, 0.0] and clock() - start == 5.0 and len(api.calls) == 3
    # the spell ends (the check finds the writes done): the next spell yields in full again
    urgent.busy = False
    r.normal(POD, "Scheduled", "d")
    assert r.flush(5)
    urgent.busy = True
    r.normal(POD, "Scheduled", "e")
    assert r.flush(5)
    assert urgent.waits == [5.0, 0.0, 0.0, 0.0, 5.0] and len(api.calls) == 5
    r.stop()


def test_an_event_waits_while_binds_are_in_flight_and_goes_out_when_they_end(api: FakeApi) -> None:
    """With a real condition-variable wait (the scheduler's Executor.wait_binds): no write while busy."""
    done = threading.Event()
    r = recorder(ManualClock(), yield_to=done.wait, max_yield=30.0)
    r.normal(POD, "Scheduled", "a")
    assert not r.flush(0.3) and api.calls == []  # the binds are in flight: the Event waits
    done.set()
    assert r.flush(5) and len(api.calls) == 1
    r.stop()
