"""The live cache tells the scheduler about each object it leaves out of scheduling, once per resourceVersion
(the scheduler turns it into a Warning Event; tests/integration/scheduler/test_bad_objects_api.py checks the
Event on the real API server). No watches here: the cache's own snapshot steps on object dicts."""

from __future__ import annotations

import copy
from typing import Any

from scheduler_ext.api.task import TaskInfo
from scheduler_ext.cache.live import LiveCache
from tests.unit.scheduler.helpers import node, pod, podgroup, queue

NOW = 1_700_000_000.0


def _factory(p: Any, now: float, problems: list[str]) -> TaskInfo:
    return TaskInfo(p, default_creation=now, problems=problems)


def _versioned(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = rv
    return out


def test_a_bad_object_is_reported_once_per_version_and_the_rest_is_built() -> None:
    told: list[tuple[str, str]] = []
    cache = LiveCache(None, scheduler_name="volcano", on_skipped=lambda o, why: told.append((o["kind"], why)))
    good = [node("n1"), queue("q1"), podgroup("pg"), pod("p", group="pg")]
    evil = _versioned(podgroup("evil", minResources={"cpu": "1e400"}), "7")
    for _ in range(3):
        cluster = cache.builder._build([*good, evil], NOW, _factory)
        assert [j.name for j in cluster.jobs.values()] == ["pg"]
    assert len(told) == 1 and told[0][0] == "PodGroup" and "spec.minResources" in told[0][1], told
    cache.builder._build([*good, _versioned(evil, "8")], NOW, _factory)  # a new version, still bad
    assert len(told) == 2
    cache.builder._build(good, NOW, _factory)  # gone (or fixed): forgotten, so a later bad version is told again
    cache.builder._build([*good, _versioned(evil, "8")], NOW, _factory)
    assert len(told) == 3


def test_a_bad_pod_is_reported_once_per_version() -> None:
    told: list[tuple[str, str]] = []
    cache = LiveCache(None, scheduler_name="volcano", on_skipped=lambda o, why: told.append((o["kind"], why)))
    bad = _versioned(pod("p", cpu="1e400"), "3")
    bad["metadata"]["uid"] = "u1"
    assert cache.builder._template(bad, NOW) is None
    assert cache.builder._template(bad, NOW) is None
    assert len(told) == 1 and told[0][0] == "Pod", told
    assert told[0][1].startswith("spec.containers[0].resources.requests: resource cpu=") and "ignored" not in told[0][1]
    assert cache.builder._template(_versioned(bad, "4"), NOW) is None
    assert len(told) == 2


def test_a_failing_reporter_never_stops_the_build() -> None:
    def boom(obj: Any, why: str) -> None:
        raise RuntimeError("recorder gone")

    cache = LiveCache(None, scheduler_name="volcano", on_skipped=boom)
    good = [node("n1"), queue("q1"), podgroup("pg"), pod("p", group="pg")]
    cluster = cache.builder._build([*good, podgroup("evil", minResources={"cpu": "1e400"})], NOW, _factory)
    assert [j.name for j in cluster.jobs.values()] == ["pg"]
