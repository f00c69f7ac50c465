"""Statement: operations change the session at once; commit makes them real, discard undoes them."""

from __future__ import annotations

import numpy as np

from scheduler_ext.api.types import ALLOCATED, BINDING, PENDING, PIPELINED, RELEASING, RUNNING

from .helpers import node, pod, podgroup, queue, session

CONF = "actions: allocate\ntiers:\n- plugins:\n  - name: drf\n"


def _objs() -> list[dict]:  # type: ignore[type-arg]
    return [
        queue("q1"),
        node("n1", cpu="4", memory="8Gi"),
        podgroup("pg", min_member=1),
        pod("p-0", group="pg", cpu="1", memory="1Gi"),
        pod("r-0", group="pg", cpu="2", memory="2Gi", node_name="n1", phase="Running"),
    ]


def test_allocate_discard_restores_node_and_job() -> None:
    ssn = session(_objs(), CONF)
    node1 = ssn.nodes["n1"]
    task = ssn.jobs["ns1/pg"].tasks["ns1-p-0"]  # type: ignore[index]
    before = ssn.table.idle[node1.index].copy()
    stmt = ssn.statement()
    stmt.allocate(task, node1)
    assert task.status == ALLOCATED and task.node_name == "n1"
    assert node1.idle.milli_cpu == 1000
    assert ssn.table.pod_count[node1.index] == 2
    stmt.discard()
    assert task.status == PENDING and task.node_name == ""
    assert np.array_equal(ssn.table.idle[node1.index], before)
    assert ssn.table.pod_count[node1.index] == 1
    assert task.last_transaction == ("n1", ALLOCATED)
    assert ssn.binds == []


def test_commit_records_binds_and_evictions() -> None:
    ssn = session(_objs(), CONF)
    node1 = ssn.nodes["n1"]
    job = ssn.jobs["ns1/pg"]  # type: ignore[index]
    task = job.tasks["ns1-p-0"]  # type: ignore[index]
    running = job.tasks["ns1-r-0"]  # type: ignore[index]
    stmt = ssn.statement()
    stmt.evict(running, "preempt")
    assert running.status == RELEASING
    assert node1.releasing.milli_cpu == 2000 and node1.future_idle().milli_cpu == 4000
    stmt.allocate(task, node1)
    stmt.commit()
    assert task.status == BINDING
    assert [(b.task.key, b.node) for b in ssn.binds] == [("ns1/p-0", "n1")]
    assert [(e.task.key, e.reason) for e in ssn.evictions] == [("ns1/r-0", "preempt")]


def test_pipeline_and_unevict_on_discard() -> None:
    ssn = session(_objs(), CONF)
    node1 = ssn.nodes["n1"]
    job = ssn.jobs["ns1/pg"]  # type: ignore[index]
    running = job.tasks["ns1-r-0"]  # type: ignore[index]
    task = job.tasks["ns1-p-0"]  # type: ignore[index]
    stmt = ssn.statement()
    stmt.evict(running, "reclaim")
    stmt.pipeline(task, "n1")
    assert task.status == PIPELINED and node1.pipelined.milli_cpu == 1000
    stmt.discard()
    assert running.status == RUNNING and task.status == PENDING
    assert node1.releasing.milli_cpu == 0 and node1.pipelined.milli_cpu == 0
    assert node1.idle.milli_cpu == 2000
    assert ssn.evictions == []
