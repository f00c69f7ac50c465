"""Issue #13 D1/D2 on the live scheduler: one tenant's absurd object stops nobody.

A node annotated `volcano.sh/oversubscription-cpu` with 400 digits and a PodGroup whose
`minResources.cpu` is `1e400` (both pass the API server's schemas: the annotation is a string, the
CRD's quantity pattern admits the exponent) used to make every session raise. Now the PodGroup is
left out with a warning and a Warning Event on it naming the field (once per resourceVersion, through
the scheduler's event recorder), the node's X reads as 0, and everyone else is scheduled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler_ext.run.scheduler import SKIPPED_REASON
from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    create_node,
    create_pod,
    create_podgroup,
    events,
    node_of,
    running_scheduler,
    scheduler_name,
    wait_for,
)
from tidemark.kube.client import request_json
from tidemark.kube.resources import PODGROUPS

pytestmark = pytest.mark.kube


def skipped_events(admin: Any, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events(admin, namespace, SKIPPED_REASON)
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
    ]


def occurrences(evs: list[dict[str, Any]]) -> int:
    return sum(int(e.get("count") or 1) for e in evs)


def test_absurd_quantities_stop_nobody(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    name = scheduler_name(kube)
    create_node(admin, kube, cpu="4", labels={"volcano.sh/oversubscription": "true"},
                annotations={"volcano.sh/oversubscription-cpu": "9" * 400})
    create_podgroup(admin, kube, "evil", 1, minResources={"cpu": "1e400"})
    create_pod(admin, kube, "evil-0", name, cpu="1", group="evil")
    create_podgroup(admin, kube, "good", 2)
    for i in range(2):
        create_pod(admin, kube, f"good-{i}", name, cpu="1", group="good")
    create_pod(admin, kube, "solo", name, cpu="1")
    create_pod(admin, kube, "evil-pod", name, cpu="1e400")  # the API server keeps it (as "10e399")
    with running_scheduler(kube, tmp_path=tmp_path) as sched:
        placed = wait_for(
            lambda: (p := node_of(admin, kube.name)) and all(p[n] for n in ("good-0", "good-1", "solo")) and p,
            "the good gang and the solo pod bound",
        )
        sessions = sched.sessions
        wait_for(lambda: sched.sessions >= sessions + 3, "three more sessions")
        assert node_of(admin, kube.name)["evil-0"] == ""  # its PodGroup is left out, not the session
        # One Warning Event on the PodGroup, naming the field, however many sessions left it out.
        evs = wait_for(lambda: skipped_events(admin, kube.name, "PodGroup", "evil"), "the PodGroup's Warning Event")
        assert evs[0]["type"] == "Warning" and "spec.minResources" in evs[0]["message"], evs
        assert evs[0]["involvedObject"]["apiVersion"] == PODGROUPS.api_version
        sessions = sched.sessions
        wait_for(lambda: sched.sessions >= sessions + 5, "five more sessions")
        assert occurrences(skipped_events(admin, kube.name, "PodGroup", "evil")) == 1
        # A new version of the object, still bad: reported once more.
        request_json(admin, "PATCH", PODGROUPS.object_path("evil", kube.name),
                     body={"metadata": {"labels": {"v": "2"}}}, content_type="application/merge-patch+json")
        wait_for(lambda: occurrences(skipped_events(admin, kube.name, "PodGroup", "evil")) == 2,
                 "the new version reported")
        sessions = sched.sessions
        wait_for(lambda: sched.sessions >= sessions + 5, "five more sessions")
        assert occurrences(skipped_events(admin, kube.name, "PodGroup", "evil")) == 2
        assert not skipped_events(admin, kube.name, "PodGroup", "good")
        # The pod with the absurd request: left out, one Warning Event on it naming the container's field.
        pod_evs = skipped_events(admin, kube.name, "Pod", "evil-pod")
        assert occurrences(pod_evs) == 1, pod_evs
        assert "spec.containers[0].resources.requests: resource cpu=" in pod_evs[0]["message"], pod_evs
        assert node_of(admin, kube.name)["evil-pod"] == ""
        assert not skipped_events(admin, kube.name, "Pod", "solo")
    assert placed["solo"]
