"""The webhook's ColocationProfile rules (scheduler_ext.webhook.admission): pod CREATE only, exempt namespaces,
the profile check; the AdmissionReview carries the patch."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_ext.webhook.admission import Settings, mutate, review_response, validate
from scheduler_ext.webhook.server import configurations
from tidemark.profiles import ANN_PROFILE


class Source:
    def __init__(self, *profiles: dict[str, Any], labels: Mapping[str, Any] | None = None) -> None:
        self._profiles = list(profiles)
        self._labels = labels if labels is not None else {"team": "spark"}

    def profiles(self) -> Sequence[Mapping[str, Any]]:
        return self._profiles

    def namespace_labels(self, namespace: str) -> Mapping[str, Any] | None:
        return self._labels

    def priority_value(self, name: str) -> int | None:
        return None


OFFLINE: dict[str, Any] = {"apiVersion": "colocation.tidemark.io/v1alpha1", "kind": "ColocationProfile",
           "metadata": {"name": "spark-offline"},
           "spec": {"namespaceSelector": {"matchLabels": {"team": "spark"}}, "qosLevel": "BE",
                    "schedulerName": "volcano", "batchResources": True}}


def pod_request(operation: str = "CREATE", namespace: str = "spark") -> dict[str, Any]:
    obj = {"metadata": {"generateName": "exec-", "namespace": namespace},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    return {"uid": "u1", "operation": operation, "namespace": namespace,
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "object": obj, "oldObject": obj}


def test_a_created_pod_gets_the_profile() -> None:
    verdict = mutate(pod_request(), Source(OFFLINE))
    paths = {op["path"]: op["value"] for op in verdict.patch}
    assert paths["/metadata/annotations"] == {"volcano.sh/qos-level": "BE", ANN_PROFILE: "spark-offline"}
    assert paths["/spec/schedulerName"] == "volcano"
    assert paths["/spec/containers/0/resources"] == {"requests": {"kubernetes.io/batch-cpu": "1000"}}
    reply = review_response({"apiVersion": "admission.k8s.io/v1", "request": pod_request()},
                            lambda r: mutate(r, Source(OFFLINE)))["response"]
    assert reply["patchType"] == "JSONPatch" and json.loads(base64.b64decode(reply["patch"])) == verdict.patch


def test_updates_exempt_namespaces_and_no_source_are_left_alone() -> None:
    assert mutate(pod_request("UPDATE"), Source(OFFLINE)).patch == []
    assert mutate(pod_request(namespace="tidemark-system"), Source(OFFLINE)).patch == []
    mine = Settings(profile_exempt_namespaces=frozenset({"mine"}))
    assert mutate(pod_request(namespace="mine"), Source(OFFLINE), mine).patch == []
    assert mutate(pod_request()).patch == []
    assert mutate(pod_request(), Source()).patch == []
    assert mutate(pod_request(), Source(OFFLINE, labels={"team": "web"})).patch == []


def test_a_bad_profile_is_refused_naming_the_field() -> None:
    bad = {**OFFLINE, "spec": {**OFFLINE["spec"], "probability": 150, "qosLevel": "offline"}}
    req = {"uid": "u", "operation": "CREATE", "name": "spark-offline",
           "resource": {"group": "colocation.tidemark.io", "version": "v1alpha1", "resource": "colocationprofiles"},
           "object": bad}
    verdict = validate(req, None, Settings())  # type: ignore[arg-type]
    assert not verdict.allowed and verdict.code == 400
    assert "spec.probability=150" in verdict.message and "spec.qosLevel='offline'" in verdict.message
    assert validate({**req, "object": OFFLINE}, None, Settings()).allowed  # type: ignore[arg-type]


def test_the_pod_hook_is_create_only_and_ignores_failures() -> None:
    mutating, validating = configurations({"url": "https://x"}, failure_policy="Fail")
    (pods,) = [h for h in mutating["webhooks"] if h["name"] == "pods.mutate.tidemark.io"]
    assert pods["failurePolicy"] == "Ignore" and pods["rules"][0]["operations"] == ["CREATE"]
    assert pods["rules"][0]["resources"] == ["pods"]
    (prof,) = [h for h in validating["webhooks"] if h["name"] == "colocationprofiles.validate.tidemark.io"]
    assert prof["failurePolicy"] == "Fail"


def test_a_failure_in_the_profiles_admits_the_pod_unchanged() -> None:
    broken = Source(OFFLINE, labels="not labels")  # type: ignore[arg-type]
    verdict = mutate(pod_request(), broken)
    assert verdict.allowed and verdict.patch == [] and "not applied: AttributeError" in verdict.warnings[0]
