"""Tier dispatch rules: first non-zero order, votes, victim intersection, enable flags."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import ABSTAIN, PERMIT, REJECT
from scheduler_ext.framework.session import Session

from .helpers import node, pod, podgroup, queue, session

CONF = """
actions: allocate
tiers:
- plugins:
  - name: priority
  - name: gang
    enableJobOrder: false
- plugins:
  - name: drf
  - name: proportion
"""


@pytest.fixture
def ssn() -> Session:
    objs = [
        queue("q1"),
        node("n1"),
        podgroup("a", min_member=1),
        podgroup("b", min_member=1),
        pod("a-p-1", group="a"),
        pod("a-p-2", group="a"),
        pod("b-p-1", group="b"),
    ]
    s = session(objs, CONF)
    # a clean slate: only the callbacks each test registers
    for table in (s.job_order_fns, s.job_order_key_fns, s.job_pipelined_fns, s.preemptable_fns, s.job_starving_fns):
        table.clear()
    s._ordered_cache.clear()
    return s


def jobs(ssn: Session) -> tuple[JobInfo, JobInfo]:
    return ssn.jobs["ns1/a"], ssn.jobs["ns1/b"]  # type: ignore[index]


def test_job_order_first_non_zero_then_uid(ssn: Session) -> None:
    a, b = jobs(ssn)
    ssn.add_job_order_fn("priority", lambda _l, _r: 0)
    ssn.add_job_order_fn("drf", lambda lv, rv: 1 if lv.uid == "ns1/a" else -1)  # prefers b
    assert ssn.job_order_fn(b, a) and not ssn.job_order_fn(a, b)
    ssn.add_job_order_fn("priority", lambda lv, rv: -1 if lv.uid == "ns1/a" else 1)  # earlier tier prefers a
    assert ssn.job_order_fn(a, b)


def test_job_order_falls_back_to_creation_then_uid(ssn: Session) -> None:
    a, b = jobs(ssn)
    assert ssn.job_order_fn(a, b)  # equal creation: UID order
    b.creation = a.creation - 1
    assert ssn.job_order_fn(b, a)


def test_disabled_flag_skips_plugin(ssn: Session) -> None:
    a, b = jobs(ssn)
    ssn.add_job_order_fn("gang", lambda lv, rv: 1 if lv.uid == "ns1/a" else -1)  # gang has enableJobOrder: false
    assert ssn.job_order_fn(a, b)


def test_key_fn_used_only_when_every_plugin_has_one(ssn: Session) -> None:
    ssn.add_job_order_fn("priority", lambda lv, rv: 0)
    assert ssn.job_order_key_fn() is None
    ssn.add_job_order_key_fn("priority", lambda j: 0)
    key = ssn.job_order_key_fn()
    assert key is not None
    a, b = jobs(ssn)
    assert key(a) < key(b)


def test_pipelined_votes(ssn: Session) -> None:
    j, _ = jobs(ssn)
    assert ssn.job_pipelined(j)  # no votes: permitted
    ssn.add_job_pipelined_fn("priority", lambda _j: ABSTAIN)
    ssn.add_job_pipelined_fn("drf", lambda _j: REJECT)
    assert not ssn.job_pipelined(j)
    ssn.add_job_pipelined_fn("priority", lambda _j: PERMIT)
    assert ssn.job_pipelined(j)  # a permit in tier 1 decides before tier 2 rejects


def _victims(names: list[str]) -> Any:
    def fn(_t: TaskInfo, cands: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
        return [c for c in cands if c.name in names], PERMIT

    return fn


def test_victims_intersection_within_first_deciding_tier(ssn: Session) -> None:
    tasks = sorted(ssn.jobs["ns1/a"].tasks.values(), key=lambda t: t.name)  # type: ignore[index]
    tasks += list(ssn.jobs["ns1/b"].tasks.values())  # type: ignore[index]
    pre = tasks[0]
    ssn.add_preemptable_fn("priority", _victims(["a-p-2", "b-p-1"]))
    ssn.add_preemptable_fn("gang", _victims(["b-p-1"]))
    ssn.add_preemptable_fn("drf", _victims(["a-p-2"]))
    assert [v.name for v in ssn.preemptable(pre, tasks)] == ["b-p-1"]
    ssn.add_preemptable_fn("gang", lambda _t, _c: ([], ABSTAIN))
    assert sorted(v.name for v in ssn.preemptable(pre, tasks)) == ["a-p-2", "b-p-1"]
    # a deciding plugin with no victims voids its tier; the next tier decides (Volcano)
    ssn.add_preemptable_fn("gang", lambda _t, _c: ([], PERMIT))
    assert [v.name for v in ssn.preemptable(pre, tasks)] == ["a-p-2"]
    del ssn.preemptable_fns["drf"]
    ssn._ordered_cache.clear()
    assert ssn.preemptable(pre, tasks) == []


def test_victims_empty_intersection_is_undecided_again(ssn: Session) -> None:
    """Volcano: an empty intersection is a nil slice, so the next plugin (or tier) decides afresh."""
    tasks = sorted(ssn.jobs["ns1/a"].tasks.values(), key=lambda t: t.name)  # type: ignore[index]
    tasks += list(ssn.jobs["ns1/b"].tasks.values())  # type: ignore[index]
    pre = tasks[0]
    ssn.add_preemptable_fn("priority", _victims(["a-p-2"]))
    ssn.add_preemptable_fn("gang", _victims(["b-p-1"]))
    ssn.add_preemptable_fn("drf", _victims(["a-p-1"]))
    # priority and gang disagree (empty intersection): tier 1 is undecided, tier 2 (drf) decides
    assert [v.name for v in ssn.preemptable(pre, tasks)] == ["a-p-1"]
    ssn.add_preemptable_fn("proportion", _victims(["b-p-1"]))
    ssn._ordered_cache.clear()
    # within tier 2, drf and proportion disagree too: nothing decided anywhere
    assert ssn.preemptable(pre, tasks) == []


def test_job_starving_first_tier_with_fns(ssn: Session) -> None:
    j, _ = jobs(ssn)
    assert not ssn.job_starving(j)
    ssn.add_job_starving_fns("drf", lambda _j: True)
    assert ssn.job_starving(j)
    ssn.add_job_starving_fns("priority", lambda _j: False)
    assert not ssn.job_starving(j)
