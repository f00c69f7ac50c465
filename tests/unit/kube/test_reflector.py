"""The reflector's state machine, driven by a scripted ListerWatcher and a manual clock (no server, no sleeps).

These pin what the real-server tests cannot provoke on demand: the exact backoff schedule, an
ERROR event with code 410 in the middle of a stream, a non-410 ERROR event, a server closing
watches at once, and consumers whose callbacks raise. tests/integration/kube covers the same
loop against a real kube-apiserver.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.kube.fakes import ManualClock, ScriptedListerWatcher, pod
from tidemark.kube.client import ApiStatusError, TransportError
from tidemark.kube.reflector import (
    Backoff,
    BackoffPolicy,
    HttpWatchStream,
    ListResult,
    Reflector,
    Store,
    WatchExpired,
    object_key,
)

Change = tuple[str, str | None, str | None]


def _desc(obj: dict[str, Any] | None) -> str | None:
    if obj is None:
        return None
    return f"{obj['metadata']['name']}@{obj['metadata']['resourceVersion']}"


def make(lw: ScriptedListerWatcher, clock: ManualClock, **kwargs: Any) -> tuple[Reflector, list[Change]]:
    changes: list[Change] = []
    r = Reflector(
        lw,
        on_change=lambda t, old, new: changes.append((t, _desc(old), _desc(new))),
        clock=clock,
        wait=clock.wait,
        rand=lambda: 0.0,
        **kwargs,
    )
    lw.on_exhausted = r.stop
    return r, changes


def ev(type_: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": type_, "object": obj}


def test_backoff_schedule_doubles_to_the_cap_with_jitter_on_top() -> None:
    policy = BackoffPolicy(initial=0.8, factor=2.0, cap=30.0, jitter=0.5)
    assert [policy.delay(n, 0.0) for n in range(7)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0]
    assert policy.delay(100, 0.0) == 30.0  # no overflow however long the outage
    assert policy.delay(0, 0.999) == pytest.approx(0.8 * 1.4995)
    b = Backoff(policy, rand=lambda: 1.0)
    assert [b.next(), b.next()] == pytest.approx([1.2, 2.4])
    b.reset()
    assert b.next() == pytest.approx(1.2)


def test_object_key_is_namespace_slash_name_or_name() -> None:
    assert object_key(pod("a", "1", namespace="x")) == "x/a"
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"


def test_store_replace_reports_only_real_changes() -> None:
    s = Store()
    s.replace([pod("a", "1"), pod("b", "1")])
    g = s.generation
    changes = s.replace([pod("a", "1"), pod("b", "2"), pod("c", "1")])
    assert [(t, _desc(o), _desc(n)) for t, o, n in changes] == [
        ("MODIFIED", "b@1", "b@2"),
        ("ADDED", None, "c@1"),
    ]
    changes = s.replace([pod("c", "1")])
    assert sorted((t, _desc(o)) for t, o, _ in changes) == [("DELETED", "a@1"), ("DELETED", "b@2")]
    assert s.keys() == ["ns/c"] and len(s) == 1 and "ns/c" in s and s.generation > g
    assert s.get_object("c", "ns") is s.get("ns/c")


def test_lists_then_follows_events_and_resumes_each_watch_from_the_last_resource_version() -> None:
    clock = ManualClock()
    lw = ScriptedListerWatcher(
        lists=[ListResult([pod("a", "1")], "10")],
        watches=[
            [ev("ADDED", pod("b", "11")), ev("MODIFIED", pod("a", "12"))],
            [ev("DELETED", pod("b", "13"))],  # the previous watch ended (timeout): resumed from 12
        ],
    )
    r, changes = make(lw, clock)
    r.run()
    assert lw.list_calls == 1  # a dropped watch is resumed, never relisted
    assert lw.watch_calls == ["10", "12", "13"]
    assert changes == [
        ("ADDED", None, "a@1"),
        ("ADDED", None, "b@11"),
        ("MODIFIED", "a@1", "a@12"),
        ("DELETED", "b@13", None),  # DELETED carries the object's final state as `old`
    ]
    assert [o["metadata"]["name"] for o in r.store.list()] == ["a"]
    assert r.has_synced() and r.last_contact() == clock.now
    assert clock.waits == []  # nothing failed, nothing waited


def test_error_event_410_mid_stream_relists_at_once_and_reports_the_difference() -> None:
    clock = ManualClock()
    lw = ScriptedListerWatcher(
        lists=[
            ListResult([pod("a", "1"), pod("b", "1")], "10"),
            ListResult([pod("a", "20"), pod("c", "19")], "21"),
        ],
        watches=[
            [ev("ADDED", pod("x", "11")), ev("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})],
            [],
        ],
    )
    r, changes = make(lw, clock)
    r.run()
    assert lw.list_calls == 2
    assert lw.watch_calls == ["10", "21", "21"]  # the last one found the script exhausted
    assert changes[3:] == [
        ("MODIFIED", "a@1", "a@20"),
        ("ADDED", None, "c@19"),
        ("DELETED", "b@1", None),
        ("DELETED", "x@11", None),
    ]
    assert sorted(r.store.keys()) == ["ns/a", "ns/c"]
    assert clock.waits == [0.8]  # no wait for the 410; one for the empty watch that closed at once


def test_http_410_on_watch_relists_without_waiting() -> None:
    clock = ManualClock()
    lw = ScriptedListerWatcher(
        lists=[ListResult([pod("a", "1")], "10"), ListResult([pod("a", "1")], "30")],
        watches=[WatchExpired("too old resource version: 10 (25)"), [ev("ADDED", pod("b", "31"))]],
    )
    r, changes = make(lw, clock)
    r.run()
    assert lw.watch_calls == ["10", "30", "31"]
    assert clock.waits == []
    assert changes == [("ADDED", None, "a@1"), ("ADDED", None, "b@31")]


def test_repeated_410_without_progress_backs_off() -> None:
    clock = ManualClock()
    lw = ScriptedListerWatcher(
        lists=[ListResult([], "1"), ListResult([], "2"), ListResult([], "3")],
        watches=[WatchExpired("gone"), WatchExpired("gone"), WatchExpired("gone")],
    )
    r, _ = make(lw, clock)
    r.run()
    assert clock.waits == [0.8, 1.6]  # the first 410 relists at once; the next ones wait


def test_api_outage_backs_off_exponentially_forever_then_recovers_and_resumes() -> None:
    clock = ManualClock()
    down = TransportError("connection refused")
    lw = ScriptedListerWatcher(
        lists=[down, down, ApiStatusError(503, "unavailable"), down, down, ListResult([pod("a", "1")], "10")],
        watches=[down, down, down, [ev("MODIFIED", pod("a", "11"))], down],
    )
    r, _ = make(lw, clock)
    r.run()
    assert clock.waits == [0.8, 1.6, 3.2, 6.4, 12.8, 0.8, 1.6, 3.2, 0.8]
    assert lw.list_calls == 6  # watch failures resume from the same version, no relist
    assert lw.watch_calls == ["10", "10", "10", "10", "11", "11"]
    assert r.errors == 9 and r.has_synced()


def test_other_error_events_relist_after_backoff() -> None:
    clock = ManualClock()
    lw = ScriptedListerWatcher(
        lists=[ListResult([], "1"), ListResult([pod("a", "5")], "5")],
        watches=[[ev("ERROR", {"kind": "Status", "code": 500, "message": "internal"})]],
    )
    r, changes = make(lw, clock)
    r.run()
    assert lw.list_calls == 2 and clock.waits == [0.8]
    assert changes == [("ADDED", None, "a@5")]


def test_bookmarks_move_the_resume_point_silently() -> None:
    clock = ManualClock()
    lw = ScriptedListerWatcher(
        lists=[ListResult([], "1")],
        watches=[[ev("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "50"}})]],
    )
    r, changes = make(lw, clock)
    r.run()
    assert lw.watch_calls == ["1", "50"] and changes == []


def test_a_watch_that_closes_at_once_without_events_waits_before_the_next() -> None:
    clock = ManualClock()
    lw = ScriptedListerWatcher(lists=[ListResult([], "1")], watches=[[], []])
    r, _ = make(lw, clock)
    r.run()
    assert clock.waits == [0.8, 1.6]


def test_a_raising_consumer_does_not_stop_the_store() -> None:
    clock = ManualClock()
    lw = ScriptedListerWatcher(lists=[ListResult([], "1")], watches=[[ev("ADDED", pod("a", "2"))]])

    def boom(*_: Any) -> None:
        raise ValueError("consumer bug")

    r = Reflector(lw, on_change=boom, clock=clock, wait=clock.wait)
    lw.on_exhausted = r.stop
    r.run()
    assert r.store.keys() == ["ns/a"] and r.resource_version == "2"


def test_synced_only_after_the_first_lists_changes_are_delivered() -> None:
    """A consumer that builds its state from the callbacks must never see has_synced() with half a list."""
    clock = ManualClock()
    lw = ScriptedListerWatcher(lists=[ListResult([pod("a", "1"), pod("b", "2")], "2")], watches=[[]])
    seen: list[tuple[str, bool]] = []
    r: Reflector

    def on_change(_t: str, _old: Any, new: Any) -> None:
        seen.append((new["metadata"]["name"], r.has_synced()))

    r = Reflector(lw, on_change=on_change, on_sync=lambda: seen.append(("sync", r.has_synced())),
                  clock=clock, wait=clock.wait)
    lw.on_exhausted = r.stop
    r.run()
    assert seen == [("a", False), ("b", False), ("sync", False)]
    assert r.has_synced()


def test_timeout_seconds_is_mandatory() -> None:
    with pytest.raises(ValueError):
        Reflector(ScriptedListerWatcher([], []), timeout_seconds=0)


class BlockingStream:
    """A watch that blocks until closed, like a quiet real one."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.closed.wait(30)
        return iter(())

    def close(self) -> None:
        self.closed.set()


class BlockingLW:
    description = "blocking"

    def __init__(self) -> None:
        self.stream = BlockingStream()

    def list(self) -> ListResult:
        return ListResult([pod("a", "1")], "1")

    def watch(self, resource_version: str, timeout_seconds: int) -> BlockingStream:
        return self.stream


def test_stop_interrupts_a_blocked_watch_promptly() -> None:
    lw = BlockingLW()
    r = Reflector(lw, timeout_seconds=300).start()
    assert r.wait_for_sync(5)
    started = time.monotonic()
    r.stop()
    assert time.monotonic() - started < 2
    assert lw.stream.closed.is_set() and r.stopped()


class FakeRaw:
    """The urllib3 response surface HttpWatchStream uses."""

    chunked = True

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    def supports_chunked_reads(self) -> bool:
        return True

    def read_chunked(self, amt: Any = None, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks

    def shutdown(self) -> None:
        raise RuntimeError("already released")  # as urllib3 does once the response is back in the pool

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


def test_http_stream_splits_events_across_chunk_boundaries() -> None:
    lines = [json.dumps(ev("ADDED", pod(n, str(i)))).encode() for i, n in enumerate("abc")]
    blob = b"\n".join(lines) + b"\n"
    raw = FakeRaw([blob[:7], blob[7:150], blob[150:151], blob[151:]])
    events = list(HttpWatchStream(raw, "t"))
    assert [e["object"]["metadata"]["name"] for e in events] == ["a", "b", "c"]
    assert raw.closed


def test_http_stream_reports_an_undecodable_line_as_a_transport_error() -> None:
    with pytest.raises(TransportError):
        list(HttpWatchStream(FakeRaw([b'{"type": "ADDED"}\n{not json\n']), "t"))
