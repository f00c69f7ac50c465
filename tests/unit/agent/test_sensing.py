"""The sensing boundary: Node and Pod objects into the model; malformed input never raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.model import Amounts
from agent.sense.snapshot import find_node, node_view, parse_time, pod_view, pods_on
from tidemark.apis import PodUID
from tidemark.objects import ObjectsError, load_objects

NOW = 1_700_000_000.0


def make_node(
    annotations: dict[str, Any] | None = None, labels: dict[str, Any] | None = None, **status: Any
) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}},
        "status": status or {"allocatable": {"cpu": "3500m", "memory": "8Gi", "pods": "110"}},
    }


def test_node_view_parses_labels_marks_and_published_values() -> None:
    n = make_node(
        annotations={
            "volcano.sh/evicting-cpu-high-watermark": "70",
            "volcano.sh/evicting-cpu-low-watermark": "20",
            "volcano.sh/oversubscription-memory-high-watermark": "x",
            "volcano.sh/oversubscription-types": "cpu",
            "volcano.sh/oversubscription-cpu": "1200",
            "volcano.sh/oversubscription-memory": "-5",
            "volcano.sh/offline-job-evicting": "true",
            "tidemark.io/node-usage": '{"cpu": 1, "memory": 2, "window": "60s", "time": "2023-11-14T22:13:00Z"}',
        },
        labels={"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "yes"},
        allocatable={"cpu": "3500m", "memory": "8Gi", "kubernetes.io/batch-cpu": "900"},
    )
    v = node_view(n)
    assert v.name == "n1" and v.allocatable == Amounts(3500, 8 * 2**30)
    assert v.colocation and not v.oversubscription  # "yes" is not a Go boolean
    assert v.watermarks.cpu == (70, 20) and v.watermarks.memory == (60, 30)
    assert v.types == ("cpu",)
    assert v.published_x == {"cpu": 1200, "memory": None}  # invalid -> treated as missing (rewritten)
    assert v.published_batch == {"cpu": 900, "memory": None}
    assert v.evicting_annotation and v.last_publish == NOW - 20
    joined = " ".join(v.warnings)
    assert "yes" in joined and "-5" in joined


def test_node_view_without_allocatable_and_bad_usage_time() -> None:
    v = node_view({"kind": "Node", "metadata": {"name": "x", "annotations": {"tidemark.io/node-usage": "nope"}}})
    assert v.allocatable == Amounts(0, 0)
    assert any("no allocatable" in w for w in v.warnings)
    assert v.last_publish is None and any("no readable time" in w for w in v.warnings)
    assert node_view(make_node(capacity={"cpu": "2", "memory": "1Gi"})).allocatable == Amounts(2000, 2**30)


def test_node_taints() -> None:
    n = make_node()
    n["spec"] = {"taints": [{"key": "volcano.sh/offline-job-evicting", "effect": "NoSchedule"}, "junk"]}
    v = node_view(n)
    assert v.evicting_taint and len(v.taints) == 1


def make_pod(**kw: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "batch",
            "uid": "u-1",
            "creationTimestamp": "2023-11-14T22:00:00Z",
            "annotations": {"volcano.sh/qos-level": "BE"},
        },
        "spec": {
            "nodeName": "n1",
            "priority": 5,
            "terminationGracePeriodSeconds": 45,
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "1"}}},
                {
                    "name": "b",
                    "resources": {
                        "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "2Gi"},
                        "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "3Gi"},
                    },
                },
            ],
        },
        "status": {"containerStatuses": [{"name": "a", "containerID": "containerd://aaa"}, {"name": "b"}]},
    }
    pod["metadata"].update(kw)
    return pod


def test_pod_view() -> None:
    v, warnings = pod_view(make_pod(), NOW)
    assert warnings == []
    assert v.uid == PodUID("u-1") and v.key == "batch/p" and v.offline and v.qos_level == -1
    assert v.qos_class == "Burstable" and v.priority == 5 and v.created == NOW - 800
    assert v.requests == Amounts(250, 2**30) and v.batch_requests == Amounts(500, 2 * 2**30)
    assert v.cpu_limit is None  # container b has no plain cpu limit
    assert v.grace_seconds == 45 and not v.terminating and not v.mirror
    a, b = v.containers
    assert a.container_id == "containerd://aaa" and b.container_id is None
    assert (b.batch_cpu_request, b.batch_cpu_limit, b.batch_memory_limit) == (500, 1000, 3 * 2**30)
    assert v.uses_batch


def test_pod_view_terminating_mirror_and_malformed() -> None:
    v, _ = pod_view(make_pod(deletionTimestamp="2023-11-14T22:13:30Z", deletionGracePeriodSeconds=20), NOW)
    assert v.deletion == NOW + 10 and v.grace_seconds == 20
    v, _ = pod_view(make_pod(annotations={"kubernetes.io/config.mirror": "x"}), NOW)
    assert v.mirror and not v.offline
    v, warnings = pod_view(make_pod(annotations={"volcano.sh/qos-level": "offline"}, uid=None), NOW)
    assert not v.offline and any("treated as online" in w for w in warnings)
    assert v.uid == "batch/p" and any("no metadata.uid" in w for w in warnings)
    odd = make_pod()
    odd["spec"]["priority"] = "²"
    odd["spec"]["terminationGracePeriodSeconds"] = "٣"
    v, _ = pod_view(odd, NOW)
    assert v.priority == 0 and v.grace_seconds == 30
    bad = make_pod()
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    v, warnings = pod_view(bad, NOW)
    assert v.requests.cpu == 0 and any("lots" in w for w in warnings)


def test_parse_time() -> None:
    assert parse_time("2023-11-14T22:13:20Z") == NOW
    assert parse_time("2023-11-14T22:13:20.5+00:00") == NOW + 0.5
    assert parse_time("2023-11-14T22:13:20") is None  # no zone: not RFC3339
    assert parse_time("garbage") is None and parse_time(None) is None and parse_time(5) is None


def test_load_objects_multi_doc_and_list(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "---\nkind: Node\nmetadata: {name: n1}\n---\n\n---\nkind: List\nitems:\n"
        "- {kind: Pod, metadata: {name: a}, spec: {nodeName: n1}}\n"
        "- {kind: Pod, metadata: {name: b}, spec: {nodeName: n2}}\n"
        "- {kind: Pod, metadata: {name: c}, spec: {nodeName: n1}, status: {phase: Succeeded}}\n"
        "---\nkind: PodList\nitems: [{kind: Pod, metadata: {name: d}, spec: {nodeName: n1}}]\n"
    )
    objects = load_objects(str(f))
    assert [o["metadata"]["name"] for o in objects] == ["n1", "a", "b", "c", "d"]
    assert find_node(objects, "n1") is not None and find_node(objects, "n9") is None
    assert [p["metadata"]["name"] for p in pods_on(objects, "n1")] == ["a", "d"]


def test_load_objects_errors(tmp_path: Path) -> None:
    with pytest.raises(ObjectsError, match="cannot read"):
        load_objects(str(tmp_path / "absent.yaml"))
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    with pytest.raises(ObjectsError, match="not valid YAML"):
        load_objects(str(tmp_path / "bad.yaml"))
    (tmp_path / "scalar.yaml").write_text("---\n- not a mapping\n")
    with pytest.raises(ObjectsError, match="is not an object"):
        load_objects(str(tmp_path / "scalar.yaml"))


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
ann_keys = st.sampled_from(
    [
        "volcano.sh/qos-level",
        "volcano.sh/evicting-cpu-high-watermark",
        "volcano.sh/evicting-cpu-low-watermark",
        "volcano.sh/evicting-memory-high-watermark",
        "volcano.sh/oversubscription-types",
        "volcano.sh/oversubscription-cpu",
        "volcano.sh/offline-job-evicting",
        "tidemark.io/node-usage",
        "kubernetes.io/config.source",
    ]
)


@given(
    st.dictionaries(ann_keys, values),
    st.dictionaries(st.sampled_from(["volcano.sh/colocation", "volcano.sh/oversubscription"]), values),
    st.dictionaries(st.sampled_from(["cpu", "memory", "kubernetes.io/batch-cpu"]), values),
)
def test_malformed_annotations_never_raise(ann: dict[str, Any], labels: dict[str, Any], alloc: dict[str, Any]) -> None:
    node_view(make_node(annotations=ann, labels=labels, allocatable=alloc))
    pod = make_pod(annotations=ann, creationTimestamp=ann.get("volcano.sh/qos-level"))
    pod["spec"]["priority"] = ann.get("volcano.sh/oversubscription-cpu")
    pod["spec"]["containers"][0]["resources"]["requests"] = alloc
    pod_view(pod, NOW)


@given(
    st.recursive(
        values,
        lambda c: (
            st.dictionaries(
                st.sampled_from(
                    ["metadata", "spec", "status", "containers", "resources", "requests", "name", "uid", "annotations"]
                ),
                c,
                max_size=4,
            )
            | st.lists(c, max_size=2)
        ),
        max_leaves=12,
    )
)
def test_arbitrary_objects_never_raise(obj: Any) -> None:
    if isinstance(obj, dict):
        node_view(obj)
        pod_view(obj, NOW)
