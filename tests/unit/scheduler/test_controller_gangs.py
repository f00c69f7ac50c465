"""The gang rule of the agents' evictions (scheduler_ext/controller/gangs.py): every case of the verdict. Before it,
the controller evicted the asked member alone and left its gang below minMember."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from scheduler_ext.controller.gangs import gang_message, gang_verdict, group_of, min_member, running
from tidemark.apis import ANN_GROUP_NAME, ANN_QOS_LEVEL


def pod(name: str, group: str | None = "g", *, qos: str = "-1", phase: str = "Running", deleting: bool = False,
        ns: str = "ns", owner: str | None = None) -> dict[str, Any]:  # fmt: skip
    ann = {ANN_QOS_LEVEL: qos}
    if group is not None:
        ann[ANN_GROUP_NAME] = group
    md: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}", "annotations": ann}
    if deleting:
        md["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    if owner:
        md["ownerReferences"] = [{"kind": owner, "name": "o", "uid": "o", "controller": True}]
    return {"metadata": md, "status": {"phase": phase}, "spec": {"nodeName": "n1"}}


def pg(min_member: Any) -> dict[str, Any]:
    return {"metadata": {"name": "g", "namespace": "ns", "uid": "pg"}, "spec": {"minMember": min_member}}


def names(v: Any) -> list[str]:
    return [p["metadata"]["name"] for p in v.members]


def test_no_group_no_podgroup_or_min_member_one_evicts_the_pod_alone() -> None:
    a = pod("a", group=None)
    assert names(gang_verdict(a, pg(3), [a, pod("b"), pod("c")])) == ["a"]
    b = pod("b")
    for group in (None, pg(1), pg(0), pg("3"), pg(True), {"spec": None}):
        v = gang_verdict(b, group, [b, pod("c"), pod("d")])
        assert names(v) == ["b"] and not v.gang and not v.why


@pytest.mark.parametrize("running_members, minimum, whole", [
    (3, 3, True),    # at minMember: one fewer breaks it
    (4, 3, False),   # one to spare
    (2, 3, False),   # already below minMember: nothing left to protect
    (2, 2, True),
    (5, 2, False),
])  # fmt: skip
def test_the_whole_gang_goes_exactly_when_the_pod_alone_would_break_it(running_members: int, minimum: int,
                                                                       whole: bool) -> None:  # fmt: skip
    members = [pod(f"m{i}") for i in range(running_members)]
    v = gang_verdict(members[1], pg(minimum), [*members, pod("other", group="h"), pod("x", group=None)])
    if whole:
        assert names(v)[0] == "m1" and sorted(names(v)) == sorted(f"m{i}" for i in range(running_members))
        assert v.gang == "g" and v.min_member == minimum
        assert "below minMember" in gang_message(v, "ns/m1") and "ns/m0" in gang_message(v, "ns/m1")
    else:
        assert names(v) == ["m1"] and not v.gang


def test_only_running_members_not_being_deleted_count_and_are_taken() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    pending, done, deleting = pod("p", phase="Pending"), pod("s", phase="Succeeded"), pod("d", deleting=True)
    v = gang_verdict(a, pg(3), [a, b, c, pending, done, deleting])
    assert sorted(names(v)) == ["a", "b", "c"]
    # with those three not counted, four listed are below a minMember of 4: the pod alone
    assert names(gang_verdict(a, pg(4), [a, b, c, pending, done, deleting])) == ["a"]
    assert running(a) and not running(pending) and not running(deleting)


def test_the_asked_pod_counts_once_even_when_it_is_not_listed() -> None:
    a, b = pod("a"), pod("b")
    assert sorted(names(gang_verdict(a, pg(2), [b]))) == ["a", "b"]
    assert sorted(names(gang_verdict(a, pg(2), [a, b]))) == ["a", "b"]


@pytest.mark.parametrize("bad, why", [
    (pod("b", qos="2"), "not offline"),
    (pod("b", qos="BE"), None),             # BE is offline: taken
    (pod("b", owner="DaemonSet"), "owned by a DaemonSet"),
    (pod("b", ns="kube-system"), "in kube-system"),
])  # fmt: skip
def test_a_member_that_may_not_be_evicted_denies_the_ask(bad: dict[str, Any], why: str | None) -> None:
    a, c = pod("a"), pod("c")
    v = gang_verdict(a, pg(3), [a, bad, c])
    if why is None:
        assert sorted(names(v)) == ["a", "b", "c"]
    else:
        assert not v.members and why in v.why and "another victim" in v.why and "below minMember 3" in v.why


def test_every_combination_of_members_keeps_the_invariants() -> None:
    """Exhaustive over small gangs: a verdict never evicts a non-member, an online member, or a pod not running; the
    asked pod is always first; the pod goes alone exactly when the gang keeps minMember without it or is below it."""
    kinds = ["run", "pending", "online", "deleting", "foreign"]
    for minimum in range(0, 5):
        for combo in itertools.product(kinds, repeat=3):
            a = pod("a")
            others = []
            for i, k in enumerate(combo):
                others.append({"run": pod(f"o{i}"), "pending": pod(f"o{i}", phase="Pending"),
                               "online": pod(f"o{i}", qos="1"), "deleting": pod(f"o{i}", deleting=True),
                               "foreign": pod(f"o{i}", group="h")}[k])  # fmt: skip
            v = gang_verdict(a, pg(minimum), [a, *others])
            counted = [o for o, k in zip(others, combo, strict=True) if k in ("run", "online")]
            alone = minimum <= 1 or len(counted) >= minimum or len(counted) + 1 < minimum
            if alone:
                assert names(v) == ["a"], (minimum, combo)
            elif any(k == "online" for k in combo):
                assert not v.members and "not offline" in v.why, (minimum, combo)
            else:
                assert names(v)[0] == "a" and len(v.members) == len(counted) + 1, (minimum, combo)
                assert all(group_of(p) == "g" and running(p) for p in v.members)


def test_min_member_and_group_of_read_only_well_typed_values() -> None:
    assert min_member(None) == 0 and min_member({"spec": {"minMember": 2}}) == 2
    assert min_member({"spec": {"minMember": 2.5}}) == 0 and min_member({"spec": []}) == 0
    assert group_of({"metadata": {"annotations": {ANN_GROUP_NAME: 3}}}) == ""
    assert group_of({"metadata": {"annotations": None}}) == "" and group_of({}) == ""
