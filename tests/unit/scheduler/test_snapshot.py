"""Snapshot building: implicit PodGroups, default queue, defaults for missing fields."""

from __future__ import annotations

import pytest

from scheduler_ext.api.types import BOUND, PENDING
from scheduler_ext.model.snapshot import SnapshotError, build_cluster

from .helpers import node, pod, podgroup, queue

NOW = 1_700_000_000.0


def test_implicit_podgroup_per_controlling_owner_and_per_pod() -> None:
    owner = {"ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": True}]}
    objs = [
        node("n1"),
        pod("web-a", metadata=owner, annotations={"scheduling.volcano.sh/queue-name": "q1"}),
        pod("web-b", metadata=owner, annotations={"scheduling.volcano.sh/queue-name": "q1"}),
        pod("solo", cpu="500m", memory="256Mi"),
        queue("q1"),
    ]
    c = build_cluster(objs, now=NOW)
    rs = c.jobs["ns1/podgroup-rs-1"]  # type: ignore[index]
    assert rs.queue == "q1" and rs.min_available == 1 and len(rs.tasks) == 2
    solo = c.jobs["ns1/podgroup-ns1-solo"]  # type: ignore[index]
    assert solo.queue == "default" and solo.pod_group.phase == "Pending"
    mr = solo.get_min_resources()
    assert (mr.milli_cpu, mr.memory) == (500, 256 * 1024**2)


def test_default_queue_exists_and_empty_state_is_open() -> None:
    q = queue("q1")
    del q["status"]
    c = build_cluster([q], now=NOW)
    assert c.queues["default"].is_open()  # type: ignore[index]
    assert c.queues["q1"].state == "Open"  # type: ignore[index]


def test_job_with_missing_queue_is_skipped() -> None:
    c = build_cluster([podgroup("pg", queue="nosuch"), pod("p", group="pg")], now=NOW)
    assert "ns1/pg" not in c.jobs
    assert any("nosuch" in w for w in c.warnings)


def test_not_ready_nodes_excluded_and_missing_condition_is_ready() -> None:
    objs = [node("n1"), node("n2", conditions=[{"type": "Ready", "status": "False"}])]
    c = build_cluster(objs, now=NOW)
    assert list(c.nodes) == ["n1"] and c.not_ready_nodes == ["n2"]


def test_other_schedulers_pods_hold_node_resources_only_when_bound() -> None:
    objs = [
        node("n1", cpu="4"),
        pod("theirs", cpu="1", node_name="n1", phase="Running", scheduler="default-scheduler"),
        pod("pending-theirs", scheduler="default-scheduler"),
        pod("mine", group=None),
    ]
    c = build_cluster(objs, now=NOW)
    assert c.nodes["n1"].used.milli_cpu == 1000
    assert [t.name for t in c.foreign_tasks] == ["theirs"]
    assert all(t.name != "pending-theirs" for j in c.jobs.values() for t in j.tasks.values())


def test_task_status_and_creation_default() -> None:
    objs = [queue("q1"), podgroup("pg"), pod("a", group="pg"), pod("b", group="pg", node_name="n9")]
    c = build_cluster(objs, now=NOW)
    tasks = {t.name: t for t in c.jobs["ns1/pg"].tasks.values()}  # type: ignore[index]
    assert tasks["a"].status == PENDING and tasks["b"].status == BOUND
    assert tasks["a"].creation == NOW


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "Node", "metadata": {}},
        {"kind": "Pod", "metadata": {"name": "x", "labels": ["a"]}},
        {"kind": "PodGroup", "metadata": {"name": "x"}, "spec": {"minMember": "two"}},
        {"metadata": {"name": "x"}},
        "not a mapping",
    ],
)
def test_malformed_objects_raise_one_line_errors(bad: object) -> None:
    with pytest.raises(SnapshotError) as e:
        build_cluster([bad], now=NOW)  # type: ignore[list-item]
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        (pod("p", cpu="lots"), "Pod ns1/p"),
        (node("n", cpu="many"), "Node n"),
        (queue("q", capability={"cpu": "x"}), "Queue q"),
        (podgroup("pg", minResources={"memory": "?"}), "PodGroup ns1/pg"),
    ],
)
def test_bad_quantities_are_errors_naming_the_object(obj: dict, where: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(SnapshotError, match=where):
        build_cluster([obj], now=NOW)
