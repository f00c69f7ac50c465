"""The shipped conf's `rescheduling` plugin (issue 34 item 2, rebalance before evicting) against a real
kube-apiserver: the scheduler, as shipped (scheduler_ext/volcano-scheduler.conf with `shuffle` and
`rescheduling`; only the interval shortened from 30s to 1s), reads `tidemark.io/node-usage` from its Node
watch and evicts a Running offline pod of a ReplicaSet off a hot node when a cool node has room for it,
through the Eviction API, with the reason `Rebalanced: ...` on its Evict Event; with both nodes cool it
evicts nothing. The test plays the agent (the annotation) and kubelet (the Running phase).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler_ext.plugins import rescheduling
from scheduler_ext.run import Scheduler
from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    create_node,
    events,
    metric,
    pod_body,
    pods,
    running_scheduler,
    scheduler_name,
    wait_for,
)
from tidemark.apis import ANN_NODE_USAGE
from tidemark.kube.client import request_json
from tidemark.kube.resources import NODES, PODS

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

SHIPPED = (Path(__file__).resolve().parents[3] / "scheduler_ext" / "volcano-scheduler.conf").read_text()
#: the shipped conf, its rebalancing run every second instead of every 30 s (the test waits for two runs)
CONF = SHIPPED.replace("interval: 30s", "interval: 1s")


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """The plugin's clock and cool-downs are process-wide (a fresh scheduler process has none)."""
    rescheduling.reset_state()
    yield
    rescheduling.reset_state()


def usage(cpu: float) -> str:
    """The annotation as the agent publishes it: a calm mean and newest sample, the window's p95 `cpu`."""
    stamp = datetime.fromtimestamp(time.time(), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"cpu": cpu / 2, "memory": 10.0, "window": "60s", "time": stamp,
                       "latest": {"cpu": cpu / 2, "memory": 10.0}, "p95": {"cpu": cpu, "memory": 10.0}})


def publish(admin: Any, sched: Scheduler, node: str, value: str) -> None:
    """Write the annotation and wait until the scheduler's Node watch shows it."""
    request_json(admin, "PATCH", NODES.object_path(node), body={"metadata": {"annotations": {ANN_NODE_USAGE: value}}},
                 content_type="application/merge-patch+json")
    store = sched.cache.watch.reflectors["nodes"].store

    def seen() -> bool:
        obj = store.get_object(node) or {}
        return bool((obj.get("metadata") or {}).get("annotations", {}).get(ANN_NODE_USAGE) == value)

    wait_for(seen, f"the scheduler sees {node}'s new usage")


def running_offline_pod(admin: Any, kube: KubeNamespace, name: str, node: str) -> None:
    """A batch pod of a ReplicaSet, already on `node` and Running (kubelet's part played here)."""
    body = pod_body(kube, name, scheduler_name(kube), cpu="500m", memory="512Mi",
                    annotations={"volcano.sh/qos-level": "-1"})
    body["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "batch",
                                            "uid": "0b0b0b0b-0000-4000-8000-000000000001", "controller": True}]
    body["spec"]["nodeName"] = node
    request_json(admin, "POST", PODS.collection_path(kube.name), body=body)
    stamp = datetime.fromtimestamp(time.time(), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    request_json(admin, "PATCH", PODS.object_path(name, kube.name, "status"),
                 body={"status": {"phase": "Running", "startTime": stamp}},
                 content_type="application/merge-patch+json")


def terminating(admin: Any, ns: str, name: str) -> bool:
    p = pods(admin, ns).get(name)
    return p is None or bool(p["metadata"].get("deletionTimestamp"))


def test_the_shipped_conf_moves_an_offline_pod_off_a_hot_node(skube: KubeNamespace, admin: Any,
                                                              tmp_path: Path) -> None:
    kube = skube
    assert "- name: rescheduling" in SHIPPED and "shuffle" in SHIPPED.split("actions:")[1].split("\n")[0]
    busy = create_node(admin, kube, "busy", annotations={ANN_NODE_USAGE: usage(30)})
    create_node(admin, kube, "idle", annotations={ANN_NODE_USAGE: usage(5)})
    running_offline_pod(admin, kube, "batch-0", busy)
    with running_scheduler(kube, conf=CONF, tmp_path=tmp_path) as sched:
        # both nodes cool: a rebalancing run (the first session's) and two more seconds of sessions move nothing
        wait_for(lambda: rescheduling._State.last_run is not None, "a rebalancing run")
        first = rescheduling._State.last_run
        wait_for(lambda: (rescheduling._State.last_run or 0) > (first or 0), "a second rebalancing run")
        assert metric(sched, "tidemark_scheduler_evictions_total", {"result": "evicted"}) == 0
        assert not terminating(admin, kube.name, "batch-0")
        # the runs are counted (scheduler_ext/metrics.py, fed from the plugin's report): two cool nodes, no move
        assert metric(sched, "tidemark_scheduler_rebalance_cool_nodes") == 2
        assert metric(sched, "tidemark_scheduler_rebalance_hot_nodes") == 0
        assert metric(sched, "tidemark_scheduler_rebalance_moves_total", {"resource": "cpu"}) == 0
        # the busy node runs hot (p95 83 % cpu, over 70): its offline pod is moved, the idle node has room
        publish(admin, sched, busy, usage(83))
        wait_for(lambda: terminating(admin, kube.name, "batch-0"), "batch-0 evicted (Terminating)")
        ev = wait_for(lambda: [e for e in events(admin, kube.name, "Evict")
                               if e["involvedObject"]["name"] == "batch-0"], "the Evict event of batch-0")
        msg = ev[0]["message"]
        assert f"Rebalanced: node {busy} cpu 83% over 70%; cool nodes: " in msg, msg
        assert metric(sched, "tidemark_scheduler_evictions_total", {"result": "evicted"}) == 1
        # the move is counted once, by the resource that made the node hot
        wait_for(lambda: metric(sched, "tidemark_scheduler_rebalance_moves_total", {"resource": "cpu"}) == 1,
                 "the move counted")
        assert metric(sched, "tidemark_scheduler_rebalance_hot_nodes") == 1
        assert metric(sched, "tidemark_scheduler_rebalance_moves_total", {"resource": "memory"}) == 0
