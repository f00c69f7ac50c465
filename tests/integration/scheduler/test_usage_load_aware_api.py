"""The shipped conf's `usage` plugin (issue 34 item 1) against a real kube-apiserver: the scheduler, as
shipped (scheduler_ext/volcano-scheduler.conf, RBAC as the manifest), reads `tidemark.io/node-usage` as
the agent writes it (mean, p95, latest) from its Node watch and places by it.

The test plays the agent: it writes and changes the annotation, and each step waits for the scheduler's
reaction. Filter: the peak (max of p95 and latest) against 85/90 for online pods, 70/50 for offline
ones; score: the p95; usage older than 5 minutes is not trusted (the node passes and scores 0).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler_ext.run import Scheduler
from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    create_node,
    create_pod,
    node_of,
    pods,
    running_scheduler,
    scheduler_name,
    wait_for,
)
from tidemark.apis import ANN_NODE_USAGE
from tidemark.kube.client import request_json
from tidemark.kube.resources import NODES

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

SHIPPED = (Path(__file__).resolve().parents[3] / "scheduler_ext" / "volcano-scheduler.conf").read_text()
OFFLINE = {"volcano.sh/qos-level": "-1"}
CPU_REASON = "the CPU load of the node exceeds the upper limit."


def usage(mean: float, p95: float, latest: float, age: float = 0.0, online: float | None = None) -> str:
    """The annotation as the agent publishes it (memory calm everywhere: this test is about cpu); `online`: the
    online pods' part of the mean (default: all of it)."""
    stamp = datetime.fromtimestamp(time.time() - age, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"cpu": mean, "memory": 10.0, "window": "60s", "time": stamp,
                       "latest": {"cpu": latest, "memory": 10.0}, "p95": {"cpu": p95, "memory": 10.0},
                       "online": {"cpu": mean if online is None else online, "memory": 10.0}})


def publish(admin: Any, sched: Scheduler, node: str, value: str) -> None:
    """Write the annotation, and wait until the scheduler's Node watch shows it (the next session reads it)."""
    request_json(admin, "PATCH", NODES.object_path(node), body={"metadata": {"annotations": {ANN_NODE_USAGE: value}}},
                 content_type="application/merge-patch+json")
    store = sched.cache.watch.reflectors["nodes"].store

    def seen() -> bool:
        obj = store.get_object(node) or {}
        return bool((obj.get("metadata") or {}).get("annotations", {}).get(ANN_NODE_USAGE) == value)

    wait_for(seen, f"the scheduler sees {node}'s new usage")


def scheduled_message(admin: Any, ns: str, pod: str) -> str:
    for c in pods(admin, ns)[pod].get("status", {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c.get("message") or "")
    return ""


def test_the_shipped_conf_places_by_the_agents_usage(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    assert "- name: usage" in SHIPPED
    # hot: a calm mean hides a p95 of 92 (spiky); warm: p95 65 but the newest sample is 75; cool: idle
    hot = create_node(admin, kube, "hot", annotations={ANN_NODE_USAGE: usage(40, 92, 50)})
    warm = create_node(admin, kube, "warm", annotations={ANN_NODE_USAGE: usage(60, 65, 75)})
    cool = create_node(admin, kube, "cool", annotations={ANN_NODE_USAGE: usage(5, 8, 5)})
    name = scheduler_name(kube)
    with running_scheduler(kube, conf=SHIPPED, tmp_path=tmp_path) as sched:
        # score: the least used node by its p95 (all three are empty, so no other plugin tells them apart)
        create_pod(admin, kube, "web-0", name, cpu="500m", memory="512Mi")
        assert wait_for(lambda: node_of(admin, kube.name).get("web-0"), "web-0 bound") == cool
        # the cool node bursts: now every node is past the offline thresholds (70 % cpu)
        publish(admin, sched, cool, usage(80, 95, 90))
        create_pod(admin, kube, "batch-0", name, cpu="500m", memory="512Mi", annotations=OFFLINE)
        msg = wait_for(lambda: scheduled_message(admin, kube.name, "batch-0"), "batch-0 unschedulable, with why")
        assert CPU_REASON in msg, msg
        # an online pod still fits the warm node: its peak (75) is under the online threshold (85)
        create_pod(admin, kube, "web-1", name, cpu="500m", memory="512Mi")
        assert wait_for(lambda: node_of(admin, kube.name).get("web-1"), "web-1 bound") == warm
        assert node_of(admin, kube.name)["batch-0"] == ""
        # the warm node calms down (the agent republishes): the offline pod goes there
        publish(admin, sched, warm, usage(25, 30, 28))
        assert wait_for(lambda: node_of(admin, kube.name).get("batch-0"), "batch-0 bound") == warm
        # the stale-metric guard: warm turns hot again, and hot's agent stops publishing (10 minutes old):
        # only the node without fresh usage is left for an offline pod
        publish(admin, sched, warm, usage(85, 95, 90))
        publish(admin, sched, hot, usage(40, 92, 50, age=600))
        create_pod(admin, kube, "batch-1", name, cpu="500m", memory="512Mi", annotations=OFFLINE)
        assert wait_for(lambda: node_of(admin, kube.name).get("batch-1"), "batch-1 bound") == hot
        # offline work soaks the cool node's idle CPU (peak 95, of which the online pods' part is 10 of a mean of
        # 90): an online pod is placed there all the same, the offline tier yields that CPU; the other two are hot
        # by their online pods' own usage (before, all three refused it: "the CPU load ... exceeds the upper limit")
        publish(admin, sched, hot, usage(40, 92, 50))
        publish(admin, sched, cool, usage(90, 95, 95, online=10))
        create_pod(admin, kube, "web-2", name, cpu="500m", memory="512Mi")
        assert wait_for(lambda: node_of(admin, kube.name).get("web-2"), "web-2 bound") == cool
