"""A gang is one unit in preempt's victim search (issue 34 item 3), against a real kube-apiserver: with the
gang plugin's own Preemptable verdict off (as in the shipped conf), a preemptor that needs one gang member's
room takes the whole gang through the Eviction API, and the PodGroup's status says why
(`Evicted=True`, reason `GangEvicted`, with a Warning event).

A lone apiserver has no kubelet: the test plays it (phases Running, deletes the Terminating victims).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    create_node,
    create_pod,
    create_podgroup,
    create_priority_class,
    create_queue,
    events,
    node_of,
    pods,
    running_scheduler,
    scheduler_name,
    set_phase,
    wait_for,
)
from tidemark.kube.client import request_json
from tidemark.kube.resources import PODGROUPS

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

CONF = """
actions: "enqueue, allocate, preempt, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def _terminating(admin: Any, ns: str) -> list[str]:
    return sorted(n for n, p in pods(admin, ns).items() if p["metadata"].get("deletionTimestamp"))


def test_preempt_takes_the_whole_gang_and_says_so(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    create_node(admin, kube, "a", cpu="1", memory="8Gi")
    create_node(admin, kube, "b", cpu="1", memory="8Gi")
    queue = create_queue(admin, kube, "gang")
    low = create_priority_class(admin, kube, "low", 100)
    high = create_priority_class(admin, kube, "high", 10000)
    name = scheduler_name(kube)
    create_podgroup(admin, kube, "train", 2, queue=queue, priorityClassName=low)
    for i in range(2):
        create_pod(admin, kube, f"train-{i}", name, cpu="1", group="train", priority_class=low)
    with running_scheduler(kube, conf=CONF, tmp_path=tmp_path):
        wait_for(lambda: all(node_of(admin, kube.name).values()), "the gang bound, one member per node")
        for i in range(2):
            set_phase(admin, kube.name, f"train-{i}", "Running")
        create_podgroup(admin, kube, "serve", 1, queue=queue, priorityClassName=high)
        create_pod(admin, kube, "serve-0", name, cpu="1", group="serve", priority_class=high)
        # one member's room would do; evicting it alone would leave train at 1 of minMember 2
        victims = wait_for(lambda: len(_terminating(admin, kube.name)) == 2 and _terminating(admin, kube.name),
                           "both gang members evicted")
        assert victims == ["train-0", "train-1"]
        evict_events = wait_for(
            lambda: len(e := events(admin, kube.name, "Evict")) >= 2 and e, "an Evict event per member"
        )
        assert all("GangEvicted" in e["message"] for e in evict_events), [e["message"] for e in evict_events]
        pg = wait_for(
            lambda: (g := request_json(admin, "GET", PODGROUPS.object_path("train", kube.name)))
            and any(c.get("type") == "Evicted" for c in g.get("status", {}).get("conditions") or []) and g,
            "the PodGroup's Evicted condition",
        )
        cond = next(c for c in pg["status"]["conditions"] if c["type"] == "Evicted")
        assert cond["status"] == "True" and cond["reason"] == "GangEvicted", cond
        assert "minMember 2" in cond["message"], cond
        ev = wait_for(lambda: events(admin, kube.name, "GangEvicted"), "a GangEvicted event on the PodGroup")
        assert ev[0]["involvedObject"]["kind"] == "PodGroup" and ev[0]["involvedObject"]["name"] == "train"


def test_a_conflicting_write_keeps_the_one_time_condition(skube: KubeNamespace, admin: Any) -> None:
    """The session that evicted a gang is the only one that sets Evicted=True: when its status write meets a newer
    PodGroup (409, another session's write landed first), the executor writes the condition onto that newer
    status (and records the event) instead of dropping it; the rest of the stale status is not written."""
    from prometheus_client import CollectorRegistry

    from scheduler_ext.cache.executor import Executor
    from scheduler_ext.cache.live import LiveCache
    from scheduler_ext.metrics import SchedulerMetrics
    from scheduler_ext.model.plan import Plan, PodGroupStatusOp
    from tidemark.kube.events import EventRecorder

    kube = skube
    stale_rv = create_podgroup(admin, kube, "train", 2)["metadata"]["resourceVersion"]
    path = PODGROUPS.object_path("train", kube.name, "status")
    newer = {"type": "Unschedulable", "status": "True", "transitionID": "later", "reason": "NotEnoughResources"}
    request_json(admin, "PATCH", path, body={"status": {"phase": "Pending", "conditions": [newer]}},
                 content_type="application/merge-patch+json")
    evicted = {"type": "Evicted", "status": "True", "transitionID": "s1", "reason": "GangEvicted",
               "message": "preempt evicted the whole gang", "lastTransitionTime": "2026-11-29T10:00:00Z"}
    op = PodGroupStatusOp(kube.name, "train", stale_rv, {"phase": "Running", "conditions": [evicted]},
                          ("Warning", "GangEvicted", "preempt evicted the whole gang"), kept_conditions=(evicted,))
    cache = LiveCache(None, scheduler_name="volcano")
    ex = Executor(admin, cache, EventRecorder(admin, "tidemark-scheduler"), SchedulerMetrics(CollectorRegistry()))
    try:
        ex.apply(Plan(podgroups=(op,)))
        assert ex.wait_idle(30)
    finally:
        ex.stop()
    pg = request_json(admin, "GET", PODGROUPS.object_path("train", kube.name))
    conds = {c["type"]: c for c in pg["status"]["conditions"]}
    assert conds["Evicted"]["reason"] == "GangEvicted" and conds["Evicted"]["transitionID"] == "s1", conds
    assert conds["Unschedulable"]["transitionID"] == "later", "the newer status's own conditions stay"
    assert pg["status"]["phase"] == "Pending", "the stale rest of the status is not written over the newer one"
    ev = wait_for(lambda: events(admin, kube.name, "GangEvicted"), "the GangEvicted event")
    assert ev[0]["involvedObject"]["name"] == "train"
