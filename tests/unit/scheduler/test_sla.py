"""The sla plugin (Volcano's sla_test.go, plus enqueue/pipelined/order through real sessions)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler_ext.api.job import JobInfo, PodGroup
from scheduler_ext.api.types import JobID
from scheduler_ext.framework.conf import ConfError
from scheduler_ext.plugins.sla import SlaPlugin, parse_go_duration

from .helpers import conf, node, pod, podgroup, queue, run, session

NOW = 1_700_000_000.0


def sla_conf(waiting: str | None = None, tail: str = "", actions: str = "allocate") -> str:
    args = f"    arguments:\n      sla-waiting-time: {waiting}\n" if waiting is not None else ""
    return f'actions: "{actions}"\ntiers:\n- plugins:\n  - name: sla\n{args}{tail}'


def job(name: str, created: float, annotations: dict[str, str] | None = None) -> JobInfo:
    pg = PodGroup(name, "default", queue="q1", min_member=1, annotations=annotations or {}, creation=created)
    return JobInfo(JobID(f"default/{name}"), pg)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3m", 180.0),
        ("1h2m3s4ms5us6ns", 3723.004005006),
        ("1h2m3s4ms5µs6ns", 3723.004005006),
        ("1.5h", 5400.0),
        (".5s", 0.5),
        ("-3m", -180.0),
        ("+2s", 2.0),
        ("0", 0.0),
    ],
)
def test_parse_go_duration(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3", "m", "3x", "1h 2m", "-", ".s", "1.2.3s", "3m-2s"])
def test_parse_go_duration_rejects(text: str) -> None:
    assert parse_go_duration(text) is None


def test_volcano_cases() -> None:
    """sla_test.go: job1 has no own waiting time, job2 waits 1h; both created at the epoch."""
    job1 = job("job1", 0.0)
    job2 = job("job2", 0.0, {"sla-waiting-time": "1h"})
    objs = [node("n1")]
    # global 3m: job1's deadline (3m) is before job2's (1h); job1 waited long enough: permit
    ssn = session(objs, sla_conf("3m"))
    ssn.jobs.update({job1.uid: job1, job2.uid: job2})
    assert ssn.job_order_fn(job1, job2) is True
    assert ssn.job_enqueueable(job1) is True
    # no global: job1 has no SLA, so job2 goes first; job1 abstains: enqueueable (no votes)
    ssn = session(objs, sla_conf())
    assert ssn.job_order_fn(job1, job2) is False
    assert ssn.job_enqueueable(job1) is True


def test_conf_values() -> None:
    with pytest.raises(ConfError):
        conf(sla_conf("1"))  # Volcano logs and ignores a non-string; Tidemark's conf rejects it
    with pytest.raises(ConfError):
        conf(sla_conf("soon"))
    assert SlaPlugin(conf(sla_conf("0s")).tiers[0].plugins[0].arguments).waiting is None  # ignored, as Volcano
    assert SlaPlugin(conf(sla_conf("90s")).tiers[0].plugins[0].arguments).waiting == 90.0


def test_annotation_overrides_global_and_bad_annotation_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    plugin = SlaPlugin(conf(sla_conf("10m")).tiers[0].plugins[0].arguments)
    assert plugin.waiting_time(job("a", 0, {"volcano.sh/sla-waiting-time": "1m"})) == 60.0
    assert plugin.waiting_time(job("b", 0, {"sla-waiting-time": "2m"})) == 120.0
    # the volcano.sh key wins; when it is malformed the plain key is read
    assert plugin.waiting_time(job("c", 0, {"volcano.sh/sla-waiting-time": "3m", "sla-waiting-time": "2m"})) == 180
    with caplog.at_level(logging.WARNING, logger="scheduler_ext.plugins.sla"):
        assert plugin.waiting_time(job("d", 0, {"volcano.sh/sla-waiting-time": "x", "sla-waiting-time": "2m"})) == 120
        assert plugin.waiting_time(job("e", 0, {"sla-waiting-time": "-2m"})) == 600.0  # global
    assert sum("not a positive duration" in r.message for r in caplog.records) == 2
    assert SlaPlugin(conf(sla_conf()).tiers[0].plugins[0].arguments).waiting_time(job("f", 0)) is None


def ts(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pg(name: str, created: str, **kw: Any) -> dict[str, Any]:
    pg = podgroup(name, phase=kw.pop("phase", "Inqueue"), **kw)
    pg["metadata"]["creationTimestamp"] = created
    return pg


def test_job_order_in_allocate_uses_deadlines() -> None:
    objs = [
        queue("q1"),
        node("n1", cpu="1"),
        _pg("a-young", ts(NOW - 60)),
        _pg("b-old", ts(NOW - 3600)),
        _pg("c-urgent", ts(NOW - 60)),
        pod("a-0", group="a-young"),
        pod("b-0", group="b-old"),
        pod("c-0", group="c-urgent"),
    ]
    objs[3]["metadata"]["annotations"] = {"sla-waiting-time": "2h"}  # b: deadline NOW + 1h
    objs[4]["metadata"]["annotations"] = {"sla-waiting-time": "1m"}  # c: deadline NOW
    # a has no SLA at all (no global): it goes last; c's deadline is first
    got = run(objs, sla_conf(tail="  - name: predicates\n"))
    assert [b.task.name for b in got.binds] == ["c-0"]
    ssn = session(objs, sla_conf(tail="  - name: predicates\n"))
    jobs = {j.name: j for j in ssn.jobs.values()}
    key = ssn.job_order_key_fn()
    assert key is not None
    assert [j.name for j in sorted(jobs.values(), key=key)] == ["c-urgent", "b-old", "a-young"]
    assert ssn.job_order_fn(jobs["c-urgent"], jobs["b-old"]) and ssn.job_order_fn(jobs["b-old"], jobs["a-young"])


def test_enqueue_permit_after_waiting_overrides_later_tiers() -> None:
    """sla in tier 1 permits a job that waited too long; proportion in tier 2 would reject it."""
    tail = "- plugins:\n  - name: proportion\n  - name: predicates\n"
    for age, phase in ((3600, "Inqueue"), (60, "Pending")):
        objs = [
            queue("q1", capability={"cpu": "1"}),
            node("n1", cpu="4"),
            _pg("big", ts(NOW - age), phase="Pending", minResources={"cpu": "2"}, min_member=2),
            pod("big-0", group="big"),
            pod("big-1", group="big"),
        ]
        ssn = run(objs, sla_conf("10m", tail=tail, actions="enqueue"))
        assert ssn.jobs["ns1/big"].pod_group.phase == phase, age  # type: ignore[index]


def test_pipelined_permit_after_waiting() -> None:
    """sla in tier 1 permits pipelining a gang that gang (tier 2) would reject."""
    objs = [
        queue("q1"),
        node("n1", cpu="1"),
        _pg("g", ts(NOW - 3600), min_member=2),
        pod("g-0", group="g"),
        pod("g-1", group="g"),
    ]
    tail = "- plugins:\n  - name: gang\n  - name: predicates\n"
    ssn = session(objs, sla_conf("10m", tail=tail))
    g = ssn.jobs["ns1/g"]  # type: ignore[index]
    assert ssn.job_pipelined(g) is True
    ssn = session(objs, sla_conf("2h", tail=tail))
    assert ssn.job_pipelined(ssn.jobs["ns1/g"]) is False  # type: ignore[index]
