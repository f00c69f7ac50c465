"""Victims: offline only, in the order of docs/design.md, "Watermarks and eviction", the shortest prefix that
brings usage under high."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.decide.eviction import evictable, victim_order, watermark_victims
from agent.model import ZERO, Amounts, PodView
from agent.sense.snapshot import pod_view
from tidemark.apis import PodUID, Watermarks

from .helpers import pod

A = Amounts(10_000, 10_000)
MARKS = Watermarks((80, 30), (60, 30))
NOW = 1000.0


def usage(**kw: tuple[float, float]) -> dict[PodUID, Amounts]:
    return {PodUID(k): Amounts(*v) for k, v in kw.items()}


def victims(
    pods: list[PodView],
    use: dict[PodUID, Amounts],
    kube: Amounts,
    pressured: tuple[str, ...] = ("cpu",),
    mode: str = "usage",
    requests: Amounts = ZERO,
    now: float = NOW,
) -> list[str]:
    found, _ = watermark_victims(pods, use, kube, A, MARKS, pressured, mode, requests, now, 10.0)  # type: ignore[arg-type]
    return [v.pod.uid for v in found]


def test_order_qos_level_then_priority_then_usage_then_youngest_then_uid() -> None:
    pods = [
        pod("a", level=-1, priority=0, created=1),
        pod("b", level=-3, priority=100, created=1),  # lowest qos-level first
        pod("c", level=-1, priority=-5, created=1),  # lower priority
        pod("d", level=-1, priority=0, created=1),
        pod("e", level=-1, priority=0, created=2),  # younger than a
        pod("f", level=-1, priority=0, created=2),  # same as e: UID breaks the tie
    ]
    use = usage(a=(100, 0), b=(1, 0), c=(1, 0), d=(500, 0), e=(100, 0), f=(100, 0))
    order = [p.uid for p in victim_order(pods, use, ("cpu",), A)]
    assert order == ["b", "c", "d", "e", "f", "a"]


def test_never_online_kube_system_mirror_or_terminating() -> None:
    pods = [
        pod("online", level=0),
        pod("ls", level=1),
        pod("sys", level=-1, ns="kube-system"),
        pod("static", level=-1, mirror=True),
        pod("dying", level=-1, deletion=NOW + 5),
        pod("ok", level=-7),
    ]
    assert [p.uid for p in pods if evictable(p)] == ["ok"]
    use = usage(online=(5000, 0), ls=(5000, 0), sys=(5000, 0), static=(5000, 0), ok=(1, 0))
    assert victims(pods, use, Amounts(9500, 0)) == ["ok"]


def test_shortest_prefix() -> None:
    pods = [pod("big", level=-1), pod("mid", level=-1), pod("small", level=-1)]
    use = usage(big=(1500, 0), mid=(700, 0), small=(100, 0))
    # high 80 % of 10000 = 8000; kubepods 9000 -> release > 1000: big alone
    assert victims(pods, use, Amounts(9000, 0)) == ["big"]
    # kubepods 9600 -> release > 1600: big + mid
    assert victims(pods, use, Amounts(9600, 0)) == ["big", "mid"]
    # under the watermark after release is strict: exactly 8000 is still over
    assert victims(pods, use, Amounts(9500, 0)) == ["big", "mid"]
    assert victims(pods, use, Amounts(9499, 0)) == ["big"]
    # nothing pressured, nothing evicted
    assert victims(pods, use, Amounts(9999, 0), pressured=()) == []


def test_not_enough_evicts_every_offline_pod_and_says_so() -> None:
    pods = [pod("on", level=0), pod("off", level=-1)]
    found, notes = watermark_victims(
        pods, usage(on=(9000, 0), off=(100, 0)), Amounts(9100, 0), A, MARKS, ("cpu",), "usage", Amounts(), NOW, 10.0
    )
    assert [v.pod.uid for v in found] == ["off"]
    assert any("does not bring cpu under" in n for n in notes)


def test_terminating_pods_count_as_released_for_grace_plus_slack() -> None:
    pods = [pod("dying", level=-1, deletion=NOW - 5), pod("next", level=-1)]
    use = usage(dying=(1500, 0), next=(500, 0))
    # deletionTimestamp 5 s ago, slack 10 s: still counted, 9000 - 1500 < 8000 -> nobody else
    assert victims(pods, use, Amounts(9000, 0)) == []
    # 11 s past its deletionTimestamp: no longer counted; "next" cannot be enough alone but is taken
    assert victims(pods, use, Amounts(9000, 0), now=NOW + 6) == ["next"]


def test_memory_reason_and_mixed_pressure() -> None:
    pods = [pod("cpu-hog", level=-1), pod("mem-hog", level=-1)]
    use = usage(**{"cpu-hog": (3000, 0), "mem-hog": (0, 2000)})
    found, _ = watermark_victims(
        pods, use, Amounts(9000, 7000), A, MARKS, ("cpu", "memory"), "usage", Amounts(), NOW, 10.0
    )
    assert [(v.pod.uid, v.reason) for v in found] == [
        ("cpu-hog", "CPUHighWatermark"),
        ("mem-hog", "MemoryHighWatermark"),
    ]
    found, _ = watermark_victims(pods, use, Amounts(0, 7000), A, MARKS, ("memory",), "usage", Amounts(), NOW, 10.0)
    assert [(v.pod.uid, v.reason) for v in found] == [("mem-hog", "MemoryHighWatermark")]


def test_oversubscription_only_stops_when_requests_fit() -> None:
    pods = [pod("a", level=-1, cpu=3000), pod("b", level=-1, cpu=3000)]
    use = usage(a=(10, 0), b=(10, 0))
    # usage stays past high, but requests 12000 -> 9000 after one eviction: within allocatable 10000
    assert victims(pods, use, Amounts(9500, 0), mode="usage_and_requests", requests=Amounts(12000, 0)) == ["a"]
    assert victims(pods, use, Amounts(9500, 0), mode="usage", requests=Amounts(12000, 0)) == ["a", "b"]


pod_strategy = st.builds(
    lambda i, level, prio, created, ns, mirror, deleting, cpu: pod(
        f"p{i}",
        level=level,
        priority=prio,
        created=created,
        ns=ns,
        mirror=mirror,
        deletion=NOW if deleting else None,
    ),
    st.integers(0, 10_000),
    st.integers(-7, 7),
    st.integers(-10, 10),
    st.floats(0, 100),
    st.sampled_from(["default", "kube-system", "batch"]),
    st.booleans(),
    st.booleans(),
    st.floats(0, 5000),
)


@given(
    st.lists(pod_strategy, max_size=15, unique_by=lambda p: p.uid),
    st.floats(0, 20_000),
    st.floats(0, 20_000),
    st.lists(st.floats(0, 5000), min_size=15, max_size=15),
)
def test_property_never_an_online_pod(pods: list[PodView], kcpu: float, kmem: float, amounts: list[float]) -> None:
    use = {p.uid: Amounts(amounts[i], amounts[-1 - i]) for i, p in enumerate(pods)}
    found, _ = watermark_victims(
        pods, use, Amounts(kcpu, kmem), A, MARKS, ("cpu", "memory"), "usage", Amounts(), NOW, 10.0
    )
    uids = [v.pod.uid for v in found]
    assert len(uids) == len(set(uids))
    for v in found:
        assert v.pod.offline and not v.pod.kube_system and not v.pod.mirror and not v.pod.terminating
    # shortest prefix: without the last victim some pressured resource would still be over
    if found:
        order = [p.uid for p in victim_order(pods, use, ("cpu", "memory"), A)]
        assert uids == order[: len(uids)]


@pytest.mark.parametrize(
    "extra",
    [
        {"metadata": {"ownerReferences": [{"kind": "DaemonSet", "name": "ds", "uid": "d1", "controller": True}]}},
        {"spec": {"priorityClassName": "system-node-critical"}},
        {"spec": {"priority": 2_000_000_000}},
    ],
    ids=["daemonset", "system-node-critical", "critical-priority"],
)
def test_offline_daemonset_or_critical_pods_are_never_victims(extra: dict[str, Any]) -> None:
    obj: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "batch", "uid": "u1", "annotations": {"volcano.sh/qos-level": "BE"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
    }
    plain, _ = pod_view(obj, 0.0)
    assert plain.offline and evictable(plain)
    for key, value in extra.items():
        obj[key] = {**obj[key], **value}
    view, _ = pod_view(obj, 0.0)
    assert view.offline and view.exempt is not None and not evictable(view)
