"""ColocationProfiles (tidemark/profiles.py): validation, selection, probability, the mutation and its conflicts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tidemark.profiles import (
    ANN_CONFLICTS,
    ANN_PROFILE,
    apply_profiles,
    batch_resources,
    bucket,
    profile_problems,
    profiles_in,
    selector_matches,
    workload_key,
)


def profile(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "colocation.tidemark.io/v1alpha1", "kind": "ColocationProfile",
            "metadata": {"name": name}, "spec": spec}


def pod(name: str = "p", labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    containers = extra.pop("containers", [{"name": "c", "image": "x",
                                           "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                         "limits": {"cpu": "2", "memory": "2Gi"}}}])
    p: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": "spark", "labels": labels or {}, **extra},
                         "spec": {"containers": containers}}
    return p


OFFLINE = {"qosLevel": "BE", "schedulerName": "volcano", "batchResources": True}
SPARK_NS = {"namespaceSelector": {"matchLabels": {"team": "spark"}}}


# --- validation -------------------------------------------------------------------------------------------


def test_a_full_profile_is_valid() -> None:
    p = profile("spark", **SPARK_NS, selector={"matchExpressions": [{"key": "spark-role", "operator": "In",
                                                                      "values": ["executor", "driver"]}]},
                probability=50, priorityClassName="batch", labels={"tier": "offline"},
                annotations={"example.com/owner": "data"}, **OFFLINE)
    assert profile_problems(p) == []


@pytest.mark.parametrize(("spec", "field"), [
    ({"probability": 101}, "spec.probability=101"),
    ({"probability": -1}, "spec.probability=-1"),
    ({"probability": True}, "spec.probability=True"),
    ({"qosLevel": "offline"}, "spec.qosLevel='offline'"),
    ({"qosLevel": "-8"}, "spec.qosLevel='-8'"),
    ({"qosLevel": -1}, "spec.qosLevel=-1"),
    ({"schedulerName": "Volcano!"}, "spec.schedulerName='Volcano!'"),
    ({"priorityClassName": ""}, "spec.priorityClassName=''"),
    ({"batchResources": "yes"}, "spec.batchResources='yes'"),
    ({"selector": {"matchLabels": {"bad key!": "x"}}}, "spec.selector.matchLabels: key 'bad key!'"),
    ({"selector": {"matchLabels": {"a": "bad value!"}}}, "spec.selector.matchLabels[a]='bad value!'"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
     "spec.namespaceSelector.matchExpressions[0].operator='Near'"),
    ({"selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}},
     "spec.selector.matchExpressions[0].values must be a non-empty list"),
    ({"selector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
     "spec.selector.matchExpressions[0].values must be empty"),
    ({"selector": {"matchExpressions": "a"}}, "spec.selector.matchExpressions must be a list"),
    ({"selector": {"matchLabel": {}}}, "spec.selector.matchLabel: unknown field"),
    ({"selector": "app=x"}, "spec.selector must be a LabelSelector"),
    ({"labels": {"a/b/c": "x"}}, "spec.labels: key 'a/b/c'"),
    ({"labels": {"a": 1}}, "spec.labels[a]=1"),
    ({"annotations": {"volcano.sh/qos-level": "BE"}}, "use spec.qosLevel"),
    ({"annotations": {ANN_PROFILE: "x"}}, "is reserved"),
    ({"qos": "BE"}, "spec.qos: unknown field"),
])
def test_bad_profiles_name_the_field(spec: dict[str, Any], field: str) -> None:
    problems = profile_problems(profile("p", **spec))
    assert any(field in p for p in problems), problems


def test_a_profile_without_spec_or_name() -> None:
    assert profile_problems({"metadata": {"name": "Bad_Name"}}) == [
        "metadata.name: " + profile_problems({"metadata": {"name": "Bad_Name"}, "spec": {}})[0].split(": ", 1)[1],
        "spec must be a mapping"]


@pytest.mark.parametrize("level", ["LC", "HLS", "LS", "BE", "-7", "-1", "0", "7"])
def test_every_qos_level_is_accepted(level: str) -> None:
    assert profile_problems(profile("p", qosLevel=level)) == []


# --- selectors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sel", "labels", "want"), [
    (None, {}, True),
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchLabels": {"a": "1"}}, None, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "x"}, False),
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
])
def test_selector_matching(sel: dict[str, Any] | None, labels: dict[str, str] | None, want: bool) -> None:
    assert selector_matches(sel, labels) is want


def test_namespace_and_pod_selectors_both_hold() -> None:
    p = profile("p", **SPARK_NS, selector={"matchLabels": {"spark-role": "executor"}}, **OFFLINE)
    exec_pod = pod(labels={"spark-role": "executor"})
    assert apply_profiles(exec_pod, "spark", {"team": "spark"}, [p]).profiles == ("p",)
    assert apply_profiles(exec_pod, "web", {"team": "web"}, [p]).profiles == ()
    assert apply_profiles(exec_pod, "spark", None, [p]).profiles == ()  # an unknown namespace matches no labels
    assert apply_profiles(pod(labels={"spark-role": "driver"}), "spark", {"team": "spark"}, [p]).profiles == ()


def test_an_invalid_stored_profile_is_skipped() -> None:
    bad = profile("bad", probability=500, **OFFLINE)
    assert apply_profiles(pod(), "spark", {}, [bad]).patch == []


# --- probability --------------------------------------------------------------------------------------------


def test_the_workload_key_is_owner_then_generate_name_then_name() -> None:
    owned = pod(ownerReferences=[{"kind": "ReplicaSet", "name": "web-5d4f", "controller": True, "uid": "u"}],
                generateName="web-5d4f-")
    assert workload_key(owned) == "ReplicaSet/web-5d4f"
    assert workload_key(pod(generateName="job-")) == "job-"
    assert workload_key(pod("solo")) == "solo"
    not_controller = pod("x", ownerReferences=[{"kind": "ConfigMap", "name": "c", "controller": False}])
    assert workload_key(not_controller) == "x"


def test_probability_is_deterministic_and_per_workload() -> None:
    owner = [{"kind": "Job", "name": "etl", "controller": True}]
    a, b = pod("etl-abc", ownerReferences=owner), pod("etl-xyz", ownerReferences=owner)
    assert bucket(a, "spark") == bucket(b, "spark") == bucket(copy.deepcopy(a), "spark")
    p = profile("half", probability=50, **OFFLINE)
    first = apply_profiles(a, "spark", {}, [p])
    assert all(apply_profiles(a, "spark", {}, [p]).patch == first.patch for _ in range(5))
    assert apply_profiles(b, "spark", {}, [p]).profiles == first.profiles


def test_probability_splits_workloads_about_as_asked() -> None:
    p = profile("third", probability=30, **OFFLINE)
    chosen = sum(bool(apply_profiles(pod(f"w{i}"), "ns", {}, [p]).profiles) for i in range(2000))
    assert 500 < chosen < 700
    assert not any(apply_profiles(pod(f"w{i}"), "ns", {}, [profile("z", probability=0, **OFFLINE)]).profiles
                   for i in range(200))
    assert all(apply_profiles(pod(f"w{i}"), "ns", {}, [profile("a", probability=100, **OFFLINE)]).profiles
               for i in range(200))


# --- the mutation -------------------------------------------------------------------------------------------


def _patched(p: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add` (the only op the profiles emit), as the API server applies it."""
    out = copy.deepcopy(p)
    for op in patch:
        assert op["op"] == "add"
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        target: Any = out
        for t in parents:
            target = target[int(t)] if isinstance(target, list) else target[t]
        target[last] = copy.deepcopy(op["value"])
    return out


def test_the_offline_profile_rewrites_the_pod() -> None:
    original = pod(labels={"app": "x"}, annotations={"keep": "me"})
    before = copy.deepcopy(original)
    done = apply_profiles(original, "spark", {"team": "spark"}, [profile("spark", **SPARK_NS, **OFFLINE,
                                                                          labels={"tier": "offline"})])
    assert original == before  # the input is not changed
    new = _patched(original, done.patch)
    assert new == done.pod
    md, spec = new["metadata"], new["spec"]
    assert md["annotations"] == {"keep": "me", "volcano.sh/qos-level": "BE", ANN_PROFILE: "spark"}
    assert md["labels"] == {"app": "x", "tier": "offline"}
    assert spec["schedulerName"] == "volcano"
    assert spec["containers"][0]["resources"] == {
        "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": str(2**30)},
        "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": str(2 * 2**30)},
    }
    assert done.describe() == "pod spark/p: colocation profile spark applied"


def test_batch_resources_cover_init_containers_limits_and_missing_requests() -> None:
    containers = [
        {"name": "only-limits", "resources": {"limits": {"cpu": "1", "memory": "100Mi"}}},
        {"name": "none"},
        {"name": "empty", "resources": {}},
        {"name": "gpu", "resources": {"requests": {"cpu": "250m", "nvidia.com/gpu": "1"},
                                      "limits": {"nvidia.com/gpu": "1"}}},
    ]
    p = pod(containers=containers)
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"memory": "1.5Gi"}}}]
    done = apply_profiles(p, "ns", {}, [profile("b", batchResources=True)])
    spec = _patched(p, done.patch)["spec"]
    assert spec["initContainers"][0]["resources"] == {"requests": {"kubernetes.io/batch-memory": str(3 * 2**29)}}
    c = spec["containers"]
    assert c[0]["resources"] == {"limits": {"kubernetes.io/batch-cpu": "1000",
                                            "kubernetes.io/batch-memory": str(100 * 2**20)}}
    assert "resources" not in c[1] and c[2]["resources"] == {}
    assert c[3]["resources"] == {"requests": {"nvidia.com/gpu": "1", "kubernetes.io/batch-cpu": "250"},
                                 "limits": {"nvidia.com/gpu": "1"}}
    paths = [op["path"] for op in done.patch if "resources" in op["path"]]
    assert paths == ["/spec/initContainers/0/resources", "/spec/containers/0/resources",
                     "/spec/containers/3/resources"]


def test_existing_batch_requests_are_kept() -> None:
    res = {"requests": {"cpu": "1", "kubernetes.io/batch-cpu": "300", "memory": "1Ki"},
           "limits": {"kubernetes.io/batch-memory": "4096"}}
    assert batch_resources(res) == {
        "requests": {"kubernetes.io/batch-cpu": "300", "kubernetes.io/batch-memory": "1024"},
        "limits": {"kubernetes.io/batch-memory": "4096"},
    }
    assert batch_resources({"requests": {"cpu": "1m"}}) == {"requests": {"kubernetes.io/batch-cpu": "1"}}


def test_no_matching_profile_no_patch() -> None:
    done = apply_profiles(pod(), "web", {"team": "web"}, [profile("spark", **SPARK_NS, **OFFLINE)])
    assert done.patch == [] and done.profiles == () and done.describe() == ""
    assert apply_profiles(pod(), "web", {}, []).patch == []


def test_priority_class_is_set_with_its_value_or_not_at_all() -> None:
    p = profile("pc", priorityClassName="batch-low")
    done = apply_profiles(pod(), "ns", {}, [p], {"batch-low": -10}.get)
    assert done.pod["spec"]["priorityClassName"] == "batch-low" and done.pod["spec"]["priority"] == -10
    none: dict[str, int] = {}
    missing = apply_profiles(pod(), "ns", {}, [p], none.get)
    assert "priorityClassName" not in missing.pod["spec"]
    assert missing.warnings and "PriorityClass batch-low does not exist" in missing.warnings[0]
    assert apply_profiles(pod(), "ns", {}, [p]).warnings  # no lookup: not set either


# --- several profiles ---------------------------------------------------------------------------------------


def test_profiles_apply_in_name_order_and_conflicts_are_annotated() -> None:
    b = profile("b-flink", qosLevel="-1", labels={"tier": "batch", "team": "flink"}, schedulerName="volcano")
    a = profile("a-all", qosLevel="BE", labels={"tier": "offline"}, batchResources=True)
    done = apply_profiles(pod(), "ns", {}, [b, a])
    ann = done.pod["metadata"]["annotations"]
    assert ann[ANN_PROFILE] == "a-all,b-flink"
    assert ann["volcano.sh/qos-level"] == "BE"  # the first by name keeps the field
    assert done.pod["metadata"]["labels"] == {"tier": "offline", "team": "flink"}
    assert ann[ANN_CONFLICTS] == "labels[tier]: a-all, b-flink; qosLevel: a-all, b-flink"
    assert done.conflicts == ("labels[tier]: a-all, b-flink", "qosLevel: a-all, b-flink")
    assert "conflicts: labels[tier]" in done.describe()
    # the same value twice is no conflict; the input order does not matter
    agree = apply_profiles(pod(), "ns", {}, [profile("y", qosLevel="BE"), profile("x", qosLevel="BE")])
    assert ANN_CONFLICTS not in agree.pod["metadata"]["annotations"]
    assert apply_profiles(pod(), "ns", {}, [a, b]).patch == done.patch


def test_profiles_in_a_cluster_file() -> None:
    objs = [pod(), profile("x"), {"kind": "Node"}]
    assert profiles_in(objs) == [objs[1]]


def test_misshapen_objects_are_left_to_their_readers() -> None:
    from tidemark.profiles import apply_to_objects

    offline = profile("all", qosLevel="BE")
    bad = [
        {"kind": "Pod", "metadata": "x"},
        {"kind": "Pod", "metadata": {"name": "p", "namespace": 3}},
        {"kind": "Pod", "metadata": {"name": "p", "annotations": ["x"], "labels": "y"}, "spec": []},
        {"kind": "Pod", "metadata": {"name": "q"}, "spec": {"containers": "c"}},
        {"kind": "Namespace", "metadata": {"name": "default", "labels": "z"}},
        "not an object",
    ]
    out, lines = apply_to_objects([*bad, offline])  # type: ignore[list-item]
    assert out[:5] == bad[:5] and lines == []
    good = pod("fine")
    good["metadata"]["namespace"] = "default"
    out, lines = apply_to_objects([*bad, good, offline])  # type: ignore[list-item]
    assert lines == ["pod default/fine: colocation profile all applied"]
