"""The live cache's three parts on their own: the watch's wake-ups, the assumed decisions the watch confirms,
and the ambiguous binds that expire (scheduler_ext/cache/watch.py, assumed.py; fake clock, no threads)."""

from __future__ import annotations

from typing import Any

from scheduler_ext.cache.assumed import AMBIGUOUS_BIND_TTL, AMBIGUOUS_CONFIRM_MARGIN, AssumedDecisions
from scheduler_ext.cache.live import LiveCache

from .helpers import node, pod


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _pod(name: str, rv: str, **kw: Any) -> dict[str, Any]:
    p = pod(name, cpu="1", memory="1Gi", **kw)
    p["metadata"].update(uid=f"uid-{name}", resourceVersion=rv)
    return p


def test_an_ambiguous_bind_holds_until_its_ttl_or_until_the_pod_watch_has_heard_from_the_server() -> None:
    clock = _Clock()
    d = AssumedDecisions(clock=clock)
    d.assume_bound("a", "n1")
    d.assume_bound("b", "n1")
    d.bind_unknown("a")  # no answer at t=100; b's bind was answered
    clock.now += AMBIGUOUS_BIND_TTL - 1
    d.expire_ambiguous(contact=None)
    assert d.assumed()[0] == {"a": "n1", "b": "n1"}, "no contact, within the TTL: still assumed"
    d.expire_ambiguous(contact=100.0 + AMBIGUOUS_CONFIRM_MARGIN / 2)
    assert "a" in d.assumed()[0], "contact right after the failure may predate the bind's event"
    d.expire_ambiguous(contact=100.0 + AMBIGUOUS_CONFIRM_MARGIN * 2)
    assert d.assumed()[0] == {"b": "n1"}, "the watch was in touch well after: it would have shown the bind"
    d.assume_bound("c", "n2")
    d.bind_unknown("c")
    clock.now += AMBIGUOUS_BIND_TTL + 1
    d.expire_ambiguous(contact=None)
    assert d.assumed()[0] == {"b": "n1"}, "past the TTL without contact: given up; an answered bind stays"


def test_the_watch_confirms_binds_and_evictions_in_the_step_that_stores_the_pod() -> None:
    cache = LiveCache(None, scheduler_name="volcano")
    assert cache.watch.lock is cache.decisions.lock, "one lock: the pod map and the overlay change together"
    pending = _pod("a", "1", scheduler="volcano")
    running = _pod("r", "1", node_name="n1", phase="Running", scheduler="volcano")
    cache.watch.on_pod("ADDED", None, pending)
    cache.watch.on_pod("ADDED", None, running)
    cache.decisions.assume_bound("uid-a", "n1")
    cache.decisions.assume_evicted("uid-r")
    status_only = {**pending, "metadata": {**pending["metadata"], "resourceVersion": "2"}}
    cache.watch.on_pod("MODIFIED", pending, status_only)
    assert cache.decisions.assumed() == ({"uid-a": "n1"}, {"uid-r"}), "nothing confirmed yet"
    bound = {**status_only, "spec": {**status_only["spec"], "nodeName": "n1"}}
    cache.watch.on_pod("MODIFIED", status_only, bound)
    assert cache.decisions.assumed() == ({}, {"uid-r"}), "the watch shows the bind"
    leaving = {**running, "metadata": {**running["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    cache.watch.on_pod("MODIFIED", running, leaving)
    assert cache.decisions.assumed() == ({}, set()), "the watch shows the eviction"
    cache.decisions.assume_bound("uid-a", "n2")
    cache.watch.on_pod("DELETED", bound, None)
    assert cache.decisions.assumed() == ({}, set()) and "ns1/a" not in cache.watch.pods


def test_an_assumption_about_a_pod_no_longer_cached_goes_with_the_next_snapshot() -> None:
    cache = LiveCache(None, scheduler_name="volcano")
    cache.watch.pdb_discovered.set()
    cache.reflectors["nodes"].store.put(node("n1", cpu="4", memory="8Gi"))
    cache.decisions.assume_bound("uid-gone", "n1")
    cache.decisions.assume_evicted("uid-gone-too")
    snap = cache.snapshot(0.0)
    assert (snap.stats.assumed_binds, snap.stats.assumed_evictions) == (1, 1)
    assert cache.decisions.assumed() == ({}, set())


def test_the_watch_wakes_the_loop_only_for_changes_that_can_make_a_pod_fit() -> None:
    woken: list[str] = []
    cache = LiveCache(None, scheduler_name="volcano", on_wake=woken.append)
    watch = cache.watch
    ours, other = _pod("a", "1", scheduler="volcano"), _pod("b", "1", scheduler="default-scheduler")
    watch.on_pod("ADDED", None, ours)
    watch.on_pod("ADDED", None, other)
    assert woken == ["new pending pod"] and "ns1/b" not in watch.pods, "another scheduler's pending pod"
    bound = _pod("c", "1", node_name="n1", phase="Running", scheduler="default-scheduler")
    watch.on_pod("ADDED", None, bound)
    watch.on_pod("MODIFIED", bound, {**bound, "status": {"phase": "Succeeded"}})
    assert woken[-1] == "pod released its node" and "ns1/c" not in watch.pods
    n = node("n1", cpu="4", memory="8Gi")
    annotated = {**n, "metadata": {**n["metadata"], "annotations": {"usage": "1"}}}
    del woken[:]
    watch.reflectors["nodes"].on_change("MODIFIED", n, annotated)  # type: ignore[misc]
    assert woken == [], "an annotation-only Node change waits for the periodic session"
    bigger = {**n, "status": {**n["status"], "allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}}
    watch.reflectors["nodes"].on_change("MODIFIED", n, bigger)  # type: ignore[misc]
    assert woken == ["node modified"]
