"""The tdm plugin: zone windows, budgets, predicate, scores, preemptable victims, job callbacks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.api.types import PENDING, PIPELINED, StatusCode
from scheduler_ext.framework.session import Session, close_session, open_session
from scheduler_ext.model.snapshot import build_cluster
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.plugins.tdm import (
    NOT_ALLOWED_REASON,
    max_pod_evict_num,
    parse_duration,
    parse_int_or_percent,
    reset_evict_clock,
    zone_error,
    zone_window,
)

from .helpers import conf, node, pod, podgroup, queue

DAY = datetime(2024, 3, 5)


def at(hour: int, minute: int = 0, second: int = 0, days: int = 0) -> float:
    """Epoch seconds of a local wall-clock time (tdm reads windows in local time)."""
    return (DAY + timedelta(days=days)).replace(hour=hour, minute=minute, second=second).timestamp()


@pytest.fixture(autouse=True)
def fresh_clock() -> Iterator[None]:
    reset_evict_clock()
    yield
    reset_evict_clock()


def tdm_conf(actions: str, window: str = "10:00-21:00", extra: str = "") -> str:
    return (
        f"actions: {actions}\n"
        "tiers:\n"
        "- plugins:\n"
        "  - name: priority\n"
        "  - name: gang\n"
        "  - name: tdm\n"
        f"    arguments: {{tdm.revocable-zone.rz1: '{window}', tdm.evict.period: 1m}}\n"
        f"{extra}"
    )


def open_at(objects: list[dict[str, Any]], conf_text: str, now: float) -> Session:
    return open_session(build_cluster(objects, now=now), conf(conf_text), PLUGINS)


def run_at(objects: list[dict[str, Any]], conf_text: str, now: float) -> Session:
    c = conf(conf_text)
    ssn = open_session(build_cluster(objects, now=now), c, PLUGINS)
    for name in c.actions:
        ACTIONS[name].build().execute(ssn)
    close_session(ssn)
    return ssn


def binds(ssn: Session) -> dict[str, str]:
    return {b.task.key: b.node for b in ssn.binds}


REVOCABLE = {"volcano.sh/preemptable": "true"}
NON_PREEMPTABLE = {"volcano.sh/preemptable": "false"}


# --- windows ---------------------------------------------------------------------------------------


def test_zone_window_same_day_and_overnight() -> None:
    assert zone_window("10:00-21:00", at(12)) == (at(10), at(21))
    assert zone_window(" 0:00-0:00 ", at(12)) == (at(0), at(0, days=1))
    assert zone_window("21:00-9:30", at(12)) == (at(21), at(9, 30, days=1))


@pytest.mark.parametrize("raw", ["10-21", "10:00", "24:00-1:00", "10:0-11:00", "10:00-11:00-12:00", "a:00-b:00"])
def test_zone_window_malformed(raw: str) -> None:
    with pytest.raises(ValueError):
        zone_window(raw, at(12))
    assert zone_error({"rz": raw}, "rz", at(12)) is not None


def test_zone_error() -> None:
    zones = {"day": "10:00-21:00", "night": "22:00-2:00", "all": "0:00-0:00"}
    assert zone_error(zones, "day", at(12)) is None
    assert zone_error(zones, "day", at(21)) is None  # the end minute itself is inside
    assert zone_error(zones, "day", at(21, 0, 1)) == "current time beyond revocable zone day:10:00-21:00"
    assert zone_error(zones, "day", at(9, 59, 59)) is not None
    assert zone_error(zones, "all", at(23, 59)) is None
    assert zone_error(zones, "night", at(23)) is None
    # Volcano only looks at today's window: after midnight an overnight window is closed
    assert zone_error(zones, "night", at(1)) is not None
    assert zone_error(zones, "nope", at(12)) == "revocable zone nope not support"


def test_parse_helpers() -> None:
    assert parse_duration("100ms") == pytest.approx(0.1)
    assert parse_duration("1h30m") == 5400.0
    assert parse_duration("0") == 0.0
    assert parse_duration("1x") is None
    assert parse_int_or_percent("3", 10) == 3
    assert parse_int_or_percent("30%", 5) == 2  # rounded up
    assert parse_int_or_percent("50%", 5) == 3
    assert parse_int_or_percent("1.5%", 5) == 0
    assert parse_int_or_percent("lots", 5) == 0


def test_bad_period_is_a_conf_error_and_unknown_zone_key_is_accepted() -> None:
    from scheduler_ext.framework.conf import ConfError

    with pytest.raises(ConfError):
        conf(tdm_conf("shuffle").replace("tdm.evict.period: 1m", "tdm.evict.period: soon"))
    c = conf(tdm_conf("shuffle").replace("rz1", "any-zone.x"))
    opt = c.plugin("tdm")
    assert opt is not None and "tdm.revocable-zone.any-zone.x" in opt.arguments


# --- disruption budget ---------------------------------------------------------------------------------


def _budget_job(annotations: dict[str, str], running: int, pending: int = 0) -> Any:
    pg = podgroup("pg", min_member=0)
    pg["metadata"]["annotations"] = annotations
    objs = [queue("q1"), node("n1", cpu="32"), pg]
    objs += [pod(f"r-{i}", group="pg", node_name="n1", phase="Running") for i in range(running)]
    objs += [pod(f"p-{i}", group="pg") for i in range(pending)]
    return build_cluster(objs, now=0.0).jobs["ns1/pg"]  # type: ignore[index]


def test_max_pod_evict_num() -> None:
    assert max_pod_evict_num(_budget_job({}, running=5)) == 1
    assert max_pod_evict_num(_budget_job({"volcano.sh/jdb-max-unavailable": "2"}, running=5)) == 2
    # a pending task is already unavailable
    assert max_pod_evict_num(_budget_job({"volcano.sh/jdb-max-unavailable": "2"}, running=4, pending=1)) == 1
    assert max_pod_evict_num(_budget_job({"volcano.sh/jdb-max-unavailable": "1"}, running=4, pending=1)) == 0
    assert max_pod_evict_num(_budget_job({"volcano.sh/jdb-max-unavailable": "1"}, running=3, pending=2)) == 0
    assert max_pod_evict_num(_budget_job({"volcano.sh/jdb-max-unavailable": "40%"}, running=5)) == 2
    assert max_pod_evict_num(_budget_job({"volcano.sh/jdb-min-available": "4"}, running=5)) == 1
    assert max_pod_evict_num(_budget_job({"volcano.sh/jdb-min-available": "60%"}, running=5)) == 2
    # min-available above the running count falls back to the default
    assert max_pod_evict_num(_budget_job({"volcano.sh/jdb-min-available": "9"}, running=5)) == 1


# --- predicate and node order --------------------------------------------------------------------


def _zone_cluster(*pods: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        queue("q1"),
        node("n1", cpu="1"),
        node("r1", cpu="4", labels={"volcano.sh/revocable-zone": "rz1"}),
        *pods,
    ]


def test_open_zone_takes_only_revocable_tasks() -> None:
    objs = _zone_cluster(pod("plain-0"), pod("plain-1"), pod("rev", annotations=REVOCABLE))
    ssn = run_at(objs, tdm_conf("allocate", extra="  - name: predicates\n"), at(12))
    b = binds(ssn)
    assert b["ns1/rev"] == "r1"  # scored 100 on the open revocable node
    assert sum(1 for k in b if k.startswith("ns1/plain")) == 1  # only n1 takes plain pods
    assert all(v == "n1" for k, v in b.items() if k.startswith("ns1/plain"))
    pending = [t for j in ssn.jobs.values() for t in j.tasks_in(PENDING).values()]
    assert len(pending) == 1
    errs = ssn.jobs[pending[0].job].nodes_fit_errors[pending[0].uid]
    assert NOT_ALLOWED_REASON in errs.error()
    assert "r1" in errs.unschedulable_and_unresolvable_nodes()


def test_closed_zone_takes_nothing() -> None:
    objs = _zone_cluster(pod("rev", annotations=REVOCABLE), pod("rev2", annotations=REVOCABLE, cpu="2"))
    ssn = run_at(objs, tdm_conf("allocate"), at(22))
    assert binds(ssn) == {"ns1/rev": "n1"}


def test_revocable_zone_annotation_on_the_pod() -> None:
    objs = _zone_cluster(pod("rev", annotations={"volcano.sh/revocable-zone": "*"}))
    assert binds(run_at(objs, tdm_conf("allocate"), at(12))) == {"ns1/rev": "r1"}


def test_batch_predicate_agrees_with_node_predicate() -> None:
    objs = _zone_cluster(pod("plain"), pod("rev", annotations=REVOCABLE))
    objs.append(node("r2", labels={"volcano.sh/revocable-zone": "other"}))
    for now in (at(12), at(22)):
        ssn = open_at(objs, tdm_conf("allocate"), now)
        fn = ssn.predicate_fns["tdm"]
        bfn = ssn.batch_predicate_fns["tdm"]
        for task in (t for j in ssn.jobs.values() for t in j.tasks.values()):
            res = bfn(task, ssn.all_nodes)
            single = [fn(task, n) is None for n in ssn.node_list]
            assert list(res.passed) == single
            failed = {int(i) for idx, _ in res.all_failures() for i in idx}
            assert failed == {n.index for n, ok in zip(ssn.node_list, single) if not ok}
            for _idx, statuses in res.all_failures():
                assert statuses[0].code == StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE
                assert statuses[0].plugin == "tdm"


def test_node_order_scores_open_revocable_nodes_for_revocable_tasks() -> None:
    objs = _zone_cluster(pod("plain"), pod("rev", annotations=REVOCABLE))
    ssn = open_at(objs, tdm_conf("allocate"), at(12))
    tasks = {t.name: t for j in ssn.jobs.values() for t in j.tasks.values()}
    assert list(ssn.vector_node_order(tasks["rev"], ssn.all_nodes)) == [0.0, 100.0]
    assert list(ssn.vector_node_order(tasks["plain"], ssn.all_nodes)) == [0.0, 0.0]
    closed = open_at(objs, tdm_conf("allocate"), at(22))
    assert list(closed.vector_node_order(tasks["rev"], np.array([1]))) == [0.0]


# --- preemptable ---------------------------------------------------------------------------------------


def _preempt_cluster(preemptor_ann: dict[str, str], victims_budget: str = "") -> list[dict[str, Any]]:
    low = podgroup("low", min_member=0, priorityClassName="low")
    if victims_budget:
        low["metadata"]["annotations"] = {"volcano.sh/jdb-max-unavailable": victims_budget}
    return [
        {"kind": "PriorityClass", "metadata": {"name": "low"}, "value": 1},
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 100},
        queue("q1"),
        node("n1", cpu="2"),
        node("r1", cpu="1", labels={"volcano.sh/revocable-zone": "rz1"}),
        low,
        podgroup("high", min_member=1, priorityClassName="high"),
        pod("v-0", group="low", node_name="n1", phase="Running", annotations=REVOCABLE),
        pod("v-1", group="low", node_name="n1", phase="Running", annotations=REVOCABLE),
        pod("v-rev", group="low", node_name="r1", phase="Running", annotations=REVOCABLE),
        pod("preemptor", group="high", cpu="2", annotations=preemptor_ann),
    ]


def test_preemptable_victims_and_budget() -> None:
    c = tdm_conf("preempt", window="0:00-0:00")
    # a preemptable (default) preemptor is rejected by tdm
    assert run_at(_preempt_cluster({}), c, at(12)).evictions == []
    # the default budget lets one task of the job go: not enough for a 2-cpu preemptor
    assert run_at(_preempt_cluster(NON_PREEMPTABLE), c, at(12)).evictions == []
    ssn = run_at(_preempt_cluster(NON_PREEMPTABLE, victims_budget="2"), c, at(12))
    assert sorted(e.task.name for e in ssn.evictions) == ["v-0", "v-1"]  # never the revocable node's task
    placed = {t.name: t.node_name for j in ssn.jobs.values() for t in j.tasks_in(PIPELINED).values()}
    assert placed == {"preemptor": "n1"}


def test_preemptable_fn_directly() -> None:
    ssn = open_at(_preempt_cluster(NON_PREEMPTABLE, victims_budget="3"), tdm_conf("preempt"), at(12))
    tasks = {t.name: t for j in ssn.jobs.values() for t in j.tasks.values()}
    fn = ssn.preemptable_fns["tdm"]
    victims, vote = fn(tasks["preemptor"], [tasks["v-rev"], tasks["v-0"], tasks["v-1"]])
    assert vote == 1 and [v.name for v in victims] == ["v-0", "v-1"]  # not the task on the revocable node
    victims, _ = fn(tasks["preemptor"], [tasks["v-0"], tasks["preemptor"]])  # a pending task is no victim
    assert [v.name for v in victims] == ["v-0"]
    victims, vote = fn(tasks["v-0"], [tasks["v-1"]])
    assert vote == -1 and victims == []


# --- job callbacks -----------------------------------------------------------------------------------


def test_job_order_starving_pipelined() -> None:
    pre = podgroup("a-pre", min_member=1)
    pre["metadata"]["annotations"] = REVOCABLE
    objs = [queue("q1"), node("n1"), pre, podgroup("b-plain", min_member=1)]
    objs += [pod("x", group="a-pre"), pod("y", group="b-plain")]
    ssn = open_at(objs, tdm_conf("allocate"), at(12))
    jp, jn = ssn.jobs["ns1/a-pre"], ssn.jobs["ns1/b-plain"]  # type: ignore[index]
    assert ssn.job_order_fns["tdm"](jn, jp) == -1  # non-preemptable jobs first
    assert ssn.job_order_fns["tdm"](jp, jn) == 1
    key = ssn.job_order_key_fns["tdm"]
    assert key(jn) < key(jp)
    assert ssn.job_starving_fns["tdm"](jn) is True
    assert ssn.job_starving_fns["tdm"](jp) is False
    assert ssn.job_pipelined_fns["tdm"](jn) == -1
    ssn.pipeline(next(iter(jn.tasks.values())), "n1")
    assert ssn.job_pipelined_fns["tdm"](jn) == 1
    assert ssn.job_starving_fns["tdm"](jn) is False
