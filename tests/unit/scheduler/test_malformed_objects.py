"""Malformed objects in the scheduler's snapshot and cluster files: one bad object stops nobody.

`simulate` refuses a cluster file with a malformed object (exit 2, naming the file, the object and the
field, never an internal error); `run`'s live cache leaves that object out and schedules the rest.
Covered: absurd quantities (a 400-digit oversubscription annotation, 1e400 in minResources or a queue's
capability), a Queue without or with a malformed weight, a pod of a missing PodGroup, duplicate objects,
minMember < 0 and negative allocatable, and the corpus files that once crashed `simulate`
(`tests.fuzz.corpus.ONCE_CRASHED`). The agent's side of the same files: tests/unit/agent/test_plan_malformed_input.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler_ext.api.task import TaskInfo
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.cli import main as scheduler_main
from scheduler_ext.model.snapshot import SnapshotError, build_cluster
from tests.fuzz.corpus import CASES, ONCE_CRASHED
from tests.unit.scheduler.helpers import node, pod, podgroup, queue, run
from tidemark import apis

NOW = 1_700_000_000.0
HUGE = "9" * 400
CONF = Path(__file__).resolve().parents[2] / "fuzz" / "full.conf"
GANG_CONF = """
actions: "enqueue, allocate"
tiers:
- plugins: [{name: priority}, {name: gang}]
- plugins: [{name: drf}, {name: predicates}, {name: proportion}, {name: nodeorder}]
"""


def _live_build(objects: list[dict[str, Any]]) -> Any:
    """LiveCache's own snapshot step (leave out what cannot be parsed), without watches."""

    def factory(p: Any, now: float, problems: list[str]) -> TaskInfo:
        return TaskInfo(p, default_creation=now, problems=problems)

    return LiveCache(None, scheduler_name="volcano").builder._build(objects, NOW, factory)


# --- absurd quantities ----------------------------------------------------------------------------


def test_a_400_digit_oversubscription_annotation_reads_as_0_and_the_pod_is_scheduled() -> None:
    n = node("n1", labels={apis.LABEL_OVERSUBSCRIPTION: "true"}, annotations={apis.ANN_OVERSUBSCRIPTION_CPU: HUGE})
    c = build_cluster([n, queue("q1"), podgroup("pg"), pod("p", group="pg")], now=NOW)
    assert c.nodes["n1"].oversubscription_resource.milli_cpu == 0
    assert any("out of range" in w for w in c.warnings)
    ssn = run([n, queue("q1"), podgroup("pg"), pod("p", group="pg")], GANG_CONF)
    assert ssn.jobs["ns1/pg"].tasks["ns1-p"].node_name == "n1"  # type: ignore[index]


@pytest.mark.parametrize(
    "bad",
    [
        podgroup("evil", minResources={"cpu": "1e400"}),
        queue("evil-q", capability={"cpu": "1e400"}),
        queue("evil-q2", deserved={"memory": HUGE}),
    ],
    ids=["podgroup-minResources", "queue-capability", "queue-deserved"],
)
def test_one_tenants_absurd_quantity_stops_nobody(bad: dict[str, Any]) -> None:
    good = [node("n1"), queue("q1"), podgroup("pg"), pod("p", group="pg")]
    with pytest.raises(SnapshotError, match=r"spec\.(minResources|capability|deserved)"):
        build_cluster([*good, bad], now=NOW)  # simulate: exit 2 naming the field
    cluster = _live_build([*good, bad])  # run: the object is left out, the rest is scheduled
    assert "ns1/pg" in cluster.jobs and "ns1/evil" not in cluster.jobs
    assert "evil-q" not in cluster.queues


def test_simulate_exits_2_naming_the_field_of_an_absurd_quantity(capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES / "quantities" / "podgroup-minresources-1e400.yaml"
    assert scheduler_main(["simulate", "--conf", str(CONF), "--cluster", str(case)]) == 2
    err = capsys.readouterr().err
    assert "PodGroup batch/gang: spec.minResources: resource cpu='1e400' is out of range" in err


# --- malformed files: exit 2 with the path, never "internal error" --------------------------------


@pytest.mark.parametrize("case", ONCE_CRASHED)
def test_simulate_exits_2_with_the_path_of_a_malformed_file(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = scheduler_main(["simulate", "--conf", str(CONF), "--cluster", str(CASES / case)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert str(CASES / case) in err and "internal error" not in err


# --- Queue weight ---------------------------------------------------------------------------------


def test_a_queue_without_weight_gets_1_and_schedules() -> None:
    q = queue("q1")
    del q["spec"]["weight"]
    c = build_cluster([node("n1"), q], now=NOW)
    assert c.queues["q1"].weight == 1  # type: ignore[index]
    ssn = run([node("n1"), q, podgroup("pg"), pod("p", group="pg")], GANG_CONF)
    assert ssn.jobs["ns1/pg"].tasks["ns1-p"].node_name == "n1"  # type: ignore[index]


@pytest.mark.parametrize("weight", ["heavy", -4, 2.5, 10**30, True])
def test_a_malformed_queue_weight_warns_and_defaults_to_1(weight: Any) -> None:
    q = queue("q1")
    q["spec"]["weight"] = weight
    c = build_cluster([q], now=NOW)
    assert c.queues["q1"].weight == 1  # type: ignore[index]
    assert any(w.startswith("Queue q1: spec.weight=") for w in c.warnings)


# --- missing PodGroup, duplicates, minMember < 0, negative allocatable ------------------------------


def test_a_pod_of_a_missing_podgroup_is_reported() -> None:
    c = build_cluster([node("n1"), queue("q1"), pod("p", group="ghost")], now=NOW)
    assert any("Pod ns1/p" in w and "ns1/ghost" in w and "does not exist" in w for w in c.warnings)


@pytest.mark.parametrize("make", [lambda: pod("p", group="pg"), lambda: queue("q1"), lambda: podgroup("pg")])
def test_duplicates_are_reported_and_the_first_wins(make: Any) -> None:
    second = make()
    if second["kind"] == "Queue":
        second["spec"]["weight"] = 7
    c = build_cluster([node("n1"), queue("q1"), podgroup("pg"), pod("p", group="pg"), second], now=NOW)
    assert any("defined twice" in w for w in c.warnings)
    assert c.queues["q1"].weight == 1  # type: ignore[index]


def test_a_negative_min_member_is_refused() -> None:
    bad = podgroup("pg", min_member=-3)
    with pytest.raises(SnapshotError, match=r"PodGroup ns1/pg: spec.minMember=-3 must be >= 0"):
        build_cluster([queue("q1"), bad], now=NOW)
    cluster = _live_build([node("n1"), queue("q1"), bad, podgroup("ok"), pod("p", group="ok")])
    assert "ns1/pg" not in cluster.jobs and "ns1/ok" in cluster.jobs


def test_a_negative_allocatable_is_refused() -> None:
    bad = node("n1", cpu="-4")
    with pytest.raises(SnapshotError, match=r"Node n1: resource cpu='-4' is negative"):
        build_cluster([bad], now=NOW)
    cluster = _live_build([bad, node("n2")])
    assert list(cluster.nodes) == ["n2"]
