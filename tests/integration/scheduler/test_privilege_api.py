"""The privilege action on a real kube-apiserver 1.20 (RBAC: the manifest's rules): delayed, job-level
preemption whose state lives on the PodGroups and survives a scheduler restart.

A low-priority preemptable job fills the node; a high-priority job arrives. The first scheduler marks
the preemptor `Privileged` and the victim `WillEvicted` (conditions + Events on the PodGroups) and
evicts nothing (its delay is 10 minutes); it is stopped; a second scheduler with a delay of 1 second,
which has only the PodGroups to go by, evicts the whole victim job through the Eviction API. A lone
apiserver keeps evicted pods Terminating: the test plays kubelet and deletes them, then the preemptor
is bound.
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
    delete,
    events,
    node_of,
    pods,
    running_scheduler,
    scheduler_name,
    set_phase,
    wait_for,
)
from tidemark.kube.client import request_json
from tidemark.kube.resources import PODGROUPS, PODS

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

CONF = """
actions: "enqueue, allocate, privilege, backfill"
configurations:
- name: privilege
  arguments:
    evictionDelay: 4s
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: predicates
  - name: nodeorder
"""


def condition(admin: Any, ns: str, pg: str, ctype: str) -> dict[str, Any] | None:
    obj = request_json(admin, "GET", PODGROUPS.object_path(pg, ns))
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def terminating(admin: Any, ns: str) -> list[str]:
    return sorted(n for n, p in pods(admin, ns).items() if p["metadata"].get("deletionTimestamp"))


def test_delayed_job_preemption_survives_a_restart(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    ns = kube.name
    name = scheduler_name(kube)
    create_node(admin, kube, cpu="2", memory="8Gi")
    queue = create_queue(admin, kube, "priv")
    low = create_priority_class(admin, kube, "low", 100)
    high = create_priority_class(admin, kube, "high", 10000)
    create_podgroup(admin, kube, "low", 2, queue=queue, priorityClassName=low)
    request_json(admin, "PATCH", PODGROUPS.object_path("low", ns),
                 body={"metadata": {"annotations": {"volcano.sh/preemptable": "true"}}},
                 content_type="application/merge-patch+json")
    for i in range(2):
        create_pod(admin, kube, f"low-{i}", name, cpu="1", group="low", priority_class=low)

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    # the first scheduler waits 10 minutes (it must never evict here, however slow the machine); the
    # second one 1 second, counted from the condition the first one wrote
    slow, quick = CONF.replace("evictionDelay: 4s", "evictionDelay: 10m"), CONF.replace("4s", "1s")
    with running_scheduler(kube, conf=slow, tmp_path=first):
        wait_for(lambda: all(node_of(admin, ns).values()), "the low-priority job bound")
        for i in range(2):
            set_phase(admin, ns, f"low-{i}", "Running")
        create_podgroup(admin, kube, "high", 1, queue=queue, priorityClassName=high)
        create_pod(admin, kube, "high-0", name, cpu="1", group="high", priority_class=high)
        marked = wait_for(lambda: (c := condition(admin, ns, "high", "Privileged")) and c["status"] == "True" and c,
                          "the preemptor Privileged")
        will = wait_for(lambda: (c := condition(admin, ns, "low", "WillEvicted")) and c["status"] == "True" and c,
                        "the victim WillEvicted")
        assert marked["message"].startswith(f"victims={ns}/low;"), marked
        assert will["message"].startswith(f"preemptor={ns}/high;"), will
        assert terminating(admin, ns) == [], "nothing is evicted before the delay"
        # Events are posted asynchronously after the status write: wait for them
        wait_for(lambda: {("PodGroup", "high"), ("PodGroup", "low")} <= {
            (e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events(admin, ns, "PreemptionDelayed")
        }, "the PreemptionDelayed events on both PodGroups")

    # a new scheduler: the state comes from the PodGroups only
    with running_scheduler(kube, conf=quick, tmp_path=second):
        victims = wait_for(lambda: len(t := terminating(admin, ns)) == 2 and t, "the whole victim job evicted")
        assert victims == ["low-0", "low-1"]
        assert wait_for(lambda: (c := condition(admin, ns, "low", "WillEvicted")) and c["reason"] == "Evicted" and c,
                        "the victim marked Evicted")["status"] == "False"
        after = wait_for(lambda: (c := condition(admin, ns, "high", "Privileged")) and c["status"] == "False" and c,
                         "the preemptor back to normal")
        assert after["reason"] == "VictimsEvicted"
        assert node_of(admin, ns)["high-0"] == ""
        for v in victims:  # play kubelet: the evicted pods are gone
            delete(admin, PODS.object_path(v, ns))
        wait_for(lambda: node_of(admin, ns).get("high-0"), "the preemptor bound")


def test_freed_resources_cancel_the_preemption(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    ns = kube.name
    name = scheduler_name(kube)
    create_node(admin, kube, cpu="2", memory="8Gi")
    queue = create_queue(admin, kube, "priv")
    low = create_priority_class(admin, kube, "low", 100)
    high = create_priority_class(admin, kube, "high", 10000)
    create_podgroup(admin, kube, "low", 1, queue=queue, priorityClassName=low)
    request_json(admin, "PATCH", PODGROUPS.object_path("low", ns),
                 body={"metadata": {"annotations": {"volcano.sh/preemptable": "true"}}},
                 content_type="application/merge-patch+json")
    create_podgroup(admin, kube, "other", 1, queue=queue, priorityClassName=low)
    create_pod(admin, kube, "low-0", name, cpu="1", group="low", priority_class=low)
    create_pod(admin, kube, "other-0", name, cpu="1", group="other", priority_class=low)
    conf = CONF.replace("evictionDelay: 4s", "evictionDelay: 10m")
    with running_scheduler(kube, conf=conf, tmp_path=tmp_path):
        wait_for(lambda: all(node_of(admin, ns).values()), "both jobs bound")
        for p in ("low-0", "other-0"):
            set_phase(admin, ns, p, "Running")
        create_podgroup(admin, kube, "high", 1, queue=queue, priorityClassName=high)
        create_pod(admin, kube, "high-0", name, cpu="1", group="high", priority_class=high)
        # both sides of the mark (two status writes: the preemptor's may land a session later)
        wait_for(lambda: (c := condition(admin, ns, "low", "WillEvicted")) and c["status"] == "True",
                 "the victim WillEvicted")
        wait_for(lambda: (c := condition(admin, ns, "high", "Privileged")) and c["status"] == "True",
                 "the preemptor Privileged")
        delete(admin, PODS.object_path("other-0", ns))  # 'other' finishes: room for the preemptor
        wait_for(lambda: node_of(admin, ns).get("high-0"), "the preemptor bound in the freed room")
        c = wait_for(lambda: (c := condition(admin, ns, "low", "WillEvicted")) and c["status"] == "False" and c,
                     "the victim back to normal")
        assert c["reason"] == "PreemptionCanceled"
        p = wait_for(lambda: (c := condition(admin, ns, "high", "Privileged")) and c["status"] == "False" and c,
                     "the preemptor back to normal")
        assert p["reason"] == "PreemptionCanceled"
        assert terminating(admin, ns) == []



def test_a_status_computed_from_an_older_read_does_not_overwrite_a_newer_one(skube: KubeNamespace, admin: Any) -> None:
    """A session that read a PodGroup before the previous session's write came back must not write its older
    conditions over it (the privilege action's Privileged=True was lost that way, and never undone)."""
    from prometheus_client import CollectorRegistry

    from scheduler_ext.cache.executor import Executor
    from scheduler_ext.metrics import SchedulerMetrics
    from scheduler_ext.model.plan import PodGroupStatusOp
    from tidemark.kube.events import EventRecorder

    kube = skube
    ns = kube.name
    pg = create_podgroup(admin, kube, "p", 1)
    read_rv = pg["metadata"]["resourceVersion"]  # what a session read
    marked = {"type": "Privileged", "status": "True", "reason": "PreemptionDelayed", "message": "victims=x"}
    request_json(admin, "PATCH", PODGROUPS.object_path("p", ns, "status"),  # the previous session's write
                 body={"status": {"phase": "Pending", "conditions": [marked]}},
                 content_type="application/merge-patch+json")
    metrics = SchedulerMetrics(CollectorRegistry())
    executor = Executor(admin, None, EventRecorder(admin, "t"), metrics)  # type: ignore[arg-type]
    stale = PodGroupStatusOp(namespace=ns, name="p", resource_version=read_rv,
                             status={"phase": "Pending", "conditions": []}, event=None)
    executor._write_podgroup(f"{ns}/p", stale)
    assert condition(admin, ns, "p", "Privileged") == marked
    assert metrics.status_writes.labels("podgroup", "conflict")._value.get() == 1
    fresh_rv = request_json(admin, "GET", PODGROUPS.object_path("p", ns))["metadata"]["resourceVersion"]
    executor._write_podgroup(f"{ns}/p", PodGroupStatusOp(namespace=ns, name="p", resource_version=fresh_rv,
                                                        status={"phase": "Inqueue", "conditions": []}, event=None))
    assert condition(admin, ns, "p", "Privileged") is None
    assert metrics.status_writes.labels("podgroup", "ok")._value.get() == 1
