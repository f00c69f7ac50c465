"""EventRecorder against a real kube-apiserver: the bodies are accepted, repeats aggregate into `count`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.kube.helpers import admin_api, create_node, create_pod, delete
from tidemark.kube.events import EventRecorder
from tidemark.kube.resources import EVENTS, NODES

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def events_about(api: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    from tidemark.kube.client import request_json

    body = request_json(
        api, "GET", EVENTS.collection_path(namespace), query={"fieldSelector": f"involvedObject.name={name}"}
    )
    return sorted(body.get("items") or [], key=lambda e: (e["reason"], e["message"]))


def test_pod_events_are_created_then_aggregated(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    pod = create_pod(api, kube.name, "victim")
    rec = EventRecorder(api, "tidemark-agent", host="node-a")
    try:
        rec.warning(pod, "CPUHighWatermark", "cpu 91% >= 80% for 3 samples")
        assert rec.flush(10)
        for _ in range(3):
            rec.warning(pod, "CPUHighWatermark", "cpu 91% >= 80% for 3 samples")
            assert rec.flush(10)
        rec.normal(pod, "Evicted", "evicted to relieve cpu")
        assert rec.flush(10)
        events = events_about(api, kube.name, "victim")
        assert [(e["reason"], e["count"], e["type"]) for e in events] == [
            ("CPUHighWatermark", 4, "Warning"),
            ("Evicted", 1, "Normal"),
        ]
        first = events[0]
        assert first["involvedObject"]["uid"] == pod["metadata"]["uid"]
        assert first["involvedObject"]["kind"] == "Pod" and first["involvedObject"]["namespace"] == kube.name
        assert first["source"] == {"component": "tidemark-agent", "host": "node-a"}
        assert first["reportingComponent"] == "tidemark-agent" and first["reportingInstance"] == "node-a"
        assert first["firstTimestamp"] <= first["lastTimestamp"]
        assert (rec.created, rec.patched, rec.failed, rec.dropped) == (2, 3, 0, 0)
    finally:
        rec.stop()


def test_node_events_go_to_the_default_namespace(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    name = create_node(api, kube, "n")
    from tidemark.kube.client import request_json

    node = request_json(api, "GET", NODES.object_path(name))
    rec = EventRecorder(api, "tidemark-agent")
    try:
        rec.warning(node, "InvalidWatermarks", "cpu high 20 <= low 30; using defaults 80/30")
        assert rec.flush(10)
        events = events_about(api, "default", name)
        for e in events:
            path = EVENTS.object_path(e["metadata"]["name"], "default")
            kube.defer(lambda path=path: delete(api, path))  # type: ignore[misc]
        assert len(events) == 1 and events[0]["involvedObject"]["kind"] == "Node"
        assert "namespace" not in events[0]["involvedObject"]
    finally:
        rec.stop()
