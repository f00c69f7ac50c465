"""The shuffle action: it evicts exactly what the victim-task plugins (tdm here) choose."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.api.types import RELEASING, RUNNING
from scheduler_ext.framework.session import Session, close_session, open_session
from scheduler_ext.model.snapshot import build_cluster
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.plugins.tdm import reset_evict_clock

from .helpers import conf, node, pod, podgroup, queue

NOON = datetime(2024, 3, 5, 12, 0).timestamp()
PREEMPTABLE = {"volcano.sh/preemptable": "true"}


@pytest.fixture(autouse=True)
def fresh_clock() -> Iterator[None]:
    reset_evict_clock()
    yield
    reset_evict_clock()


def shuffle_conf(window: str = "0:00-1:00", victim: bool = True, period: str = "1m") -> str:
    return (
        "actions: shuffle\n"
        "tiers:\n"
        "- plugins:\n"
        "  - name: tdm\n"
        f"    enabledVictim: {str(victim).lower()}\n"
        f"    arguments: {{tdm.revocable-zone.rz1: '{window}', tdm.evict.period: {period}}}\n"
    )


def run_at(objects: list[dict[str, Any]], conf_text: str, now: float = NOON) -> Session:
    c = conf(conf_text)
    ssn = open_session(build_cluster(objects, now=now), c, PLUGINS)
    for name in c.actions:
        ACTIONS[name].build().execute(ssn)
    close_session(ssn)
    return ssn


def cluster() -> list[dict[str, Any]]:
    pg = podgroup("pg", min_member=0, phase="Running")
    pg["metadata"]["annotations"] = {"volcano.sh/jdb-max-unavailable": "2"}
    return [
        queue("q1"),
        node("r1", labels={"volcano.sh/revocable-zone": "rz1"}),
        node("n1"),
        pg,
        pod("on-r1-a", group="pg", node_name="r1", phase="Running", annotations=PREEMPTABLE),
        pod("on-r1-b", group="pg", node_name="r1", phase="Running", annotations=PREEMPTABLE),
        pod("on-r1-c", group="pg", node_name="r1", phase="Running", annotations=PREEMPTABLE),
        pod("on-r1-fixed", group="pg", node_name="r1", phase="Running"),
        pod("on-n1", group="pg", node_name="n1", phase="Running", annotations=PREEMPTABLE),
    ]


def evicted(ssn: Session) -> list[str]:
    return sorted(e.task.name for e in ssn.evictions)


def test_closed_zone_victims_are_evicted_within_budget() -> None:
    ssn = run_at(cluster(), shuffle_conf())
    assert evicted(ssn) == ["on-r1-a", "on-r1-b"]  # budget 2; never the node outside the zone
    assert {e.reason for e in ssn.evictions} == {"shuffle"}
    for e in ssn.evictions:
        assert e.task.status == RELEASING
    r1 = ssn.nodes["r1"]
    assert r1.releasing.milli_cpu == 2000
    assert ssn.jobs["ns1/pg"].tasks_in(RUNNING).keys() == {  # type: ignore[index]
        "ns1-on-r1-c",
        "ns1-on-r1-fixed",
        "ns1-on-n1",
    }


def test_open_zone_has_no_victims() -> None:
    assert run_at(cluster(), shuffle_conf(window="0:00-0:00")).evictions == []


def test_victim_flag_off_means_no_victims() -> None:
    assert run_at(cluster(), shuffle_conf(victim=False)).evictions == []


def test_no_victim_plugin_means_no_evictions() -> None:
    assert run_at(cluster(), "actions: shuffle\ntiers:\n- plugins:\n  - name: gang\n").evictions == []


def test_evict_period_throttles_across_sessions() -> None:
    assert len(run_at(cluster(), shuffle_conf(), NOON).evictions) == 2
    assert run_at(cluster(), shuffle_conf(), NOON + 30).evictions == []  # within 1m of the last run
    assert len(run_at(cluster(), shuffle_conf(), NOON + 61).evictions) == 2
    # the clock moves on every run, even one that finds nothing
    run_at(cluster(), shuffle_conf(window="0:00-0:00"), NOON + 200)
    assert run_at(cluster(), shuffle_conf(), NOON + 230).evictions == []
    reset_evict_clock()
    assert len(run_at(cluster(), shuffle_conf(), NOON + 230).evictions) == 2
