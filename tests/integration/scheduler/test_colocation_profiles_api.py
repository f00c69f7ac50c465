"""ColocationProfiles behind the real kube-apiserver 1.20: the webhook applies them to pods at CREATE.

The webhook runs in-process as in test_webhook_api.py (its certificates, its configurations with selectors for
this test's objects), with the `ProfileCache` the command runs (profiles and namespaces watched). The Pod hook is
registered as shipped, `failurePolicy: Ignore`; the other hooks `Fail`, so a profile check that is not reached
fails the test. Measured: a plain Deployment-like pod (a ReplicaSet owner, cpu/memory requests, the default
scheduler) in a selected namespace is stored offline, with batch resources, the scheduler, the profile's
PriorityClass and its priority, and the annotation; a pod the selector does not match is stored as sent; a
malformed profile is refused with its field named; with the webhook stopped, a matching pod is created unchanged.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.test_webhook_api import certs  # noqa: F401  (a fixture)
from tidemark.apis import quantity_to_int
from tidemark.profiles import ANN_PROFILE, GROUP, PLURAL, VERSION

pytestmark = pytest.mark.kube

LABEL = "tidemark-webhook-test"


def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Env:
    def __init__(self, kube: KubeNamespace, label: str, server: Any, cache: Any) -> None:
        self.kube, self.label, self.server, self.cache = kube, label, server, cache
        self.priority_class = kube.unique("batch-low")

    def profile(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ColocationProfile",
                "metadata": {"name": name, "labels": {LABEL: self.label}}, "spec": spec}
        created: dict[str, Any] = self.kube.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        self.kube.defer(lambda: self.kube.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name))
        return created

    def pod(self, prefix: str, labels: dict[str, str]) -> dict[str, Any]:
        """A pod as a ReplicaSet controller creates it: generateName, a controller owner, cpu/memory requests."""
        rs = f"{prefix}-7d9f8"
        body = {
            "metadata": {"generateName": f"{rs}-", "labels": labels, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                 "uid": "0b3c2a9e-0000-4000-8000-000000000001", "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"containers": [{"name": "app", "image": "busybox", "resources": {
                "requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}}],
                "initContainers": [{"name": "init", "image": "busybox",
                                    "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}]},
        }
        created = self.kube.core.create_namespaced_pod(self.kube.name, body)
        out: dict[str, Any] = self.kube.api.sanitize_for_serialization(created)
        return out


@pytest.fixture
def env(kube: KubeNamespace, certs: Path) -> Iterator[Env]:  # noqa: F811  (the imported fixture)
    from kubernetes import client

    from scheduler_ext.webhook.admission import Settings
    from scheduler_ext.webhook.server import ApiLookups, ProfileCache, WebhookServer, configurations, tls_context

    label = f"p{secrets.token_hex(4)}"
    kube.core.patch_namespace(kube.name, {"metadata": {"labels": {LABEL: label, "team": label}}})
    cache = ProfileCache(kube.api).start()
    kube.defer(cache.stop)
    assert cache.wait_for_sync(30)
    server = WebhookServer("127.0.0.1:0", tls_context(str(certs / "tls.crt"), str(certs / "tls.key")),
                           ApiLookups(kube.api), Settings(), profiles=cache).start()
    e = Env(kube, label, server, cache)
    scheduling = client.SchedulingV1Api(kube.api)
    scheduling.create_priority_class({"metadata": {"name": e.priority_class}, "value": -10})
    kube.defer(lambda: scheduling.delete_priority_class(e.priority_class))

    selector = {"matchLabels": {LABEL: label}}
    mutating, validating = configurations(
        {"url": f"https://127.0.0.1:{server.port}",
         "caBundle": base64.b64encode((certs / "ca.crt").read_bytes()).decode()},
        failure_policy="Fail", object_selector=selector, namespace_selector=selector,
    )
    name = f"tidemark-test-{label}"
    mutating["metadata"]["name"] = validating["metadata"]["name"] = name
    adm = client.AdmissionregistrationV1Api(kube.api)
    adm.create_mutating_webhook_configuration(mutating)
    kube.defer(lambda: adm.delete_mutating_webhook_configuration(name))
    adm.create_validating_webhook_configuration(validating)
    kube.defer(lambda: adm.delete_validating_webhook_configuration(name))
    try:
        yield e
    finally:
        server.stop()


def _offline_profile(env: Env) -> dict[str, Any]:
    return env.profile(env.kube.unique("offline"), {
        "namespaceSelector": {"matchLabels": {"team": env.label}},
        "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["etl", "spark"]}]},
        "qosLevel": "BE", "schedulerName": "volcano", "priorityClassName": env.priority_class,
        "batchResources": True, "labels": {"tier": "offline"},
    })


def _wait_mutating(env: Env, profile: str) -> None:
    """Until a matching pod comes back mutated: the cache has the profile and the API server calls the hook."""
    def mutated() -> bool:
        probe = env.pod("probe", {"app": "etl"})
        env.kube.core.delete_namespaced_pod(probe["metadata"]["name"], env.kube.name, grace_period_seconds=0)
        return bool((probe["metadata"].get("annotations") or {}).get(ANN_PROFILE) == profile)

    _until(mutated, "the webhook to apply the profile")


def _amounts(resources: dict[str, dict[str, str]]) -> dict[str, dict[str, int | None]]:
    return {part: {k: quantity_to_int(v) for k, v in rl.items()} for part, rl in resources.items()}


def test_a_plain_pod_in_a_selected_namespace_comes_up_offline(env: Env) -> None:
    profile = _offline_profile(env)["metadata"]["name"]
    _wait_mutating(env, profile)

    pod = env.pod("etl", {"app": "etl"})
    md, spec = pod["metadata"], pod["spec"]
    assert md["annotations"] == {ANN_PROFILE: profile, "volcano.sh/qos-level": "BE"}
    assert md["labels"] == {"app": "etl", "tier": "offline"}
    assert spec["schedulerName"] == "volcano"
    assert spec["priorityClassName"] == env.priority_class and spec["priority"] == -10
    # the API server stores quantities canonically ("1000" comes back "1k")
    assert _amounts(spec["containers"][0]["resources"]) == {
        "requests": {"kubernetes.io/batch-cpu": 250, "kubernetes.io/batch-memory": 64 * 2**20},
        "limits": {"kubernetes.io/batch-cpu": 1000, "kubernetes.io/batch-memory": 128 * 2**20},
    }
    assert _amounts(spec["initContainers"][0]["resources"]) == {
        "requests": {"kubernetes.io/batch-cpu": 100, "kubernetes.io/batch-memory": 32 * 2**20}}
    # stored as admitted: a GET shows the same
    stored = env.kube.api.sanitize_for_serialization(env.kube.core.read_namespaced_pod(md["name"], env.kube.name))
    assert stored["metadata"]["annotations"][ANN_PROFILE] == profile

    # an update is never mutated: a label change leaves the rest as it is
    patched = env.kube.core.patch_namespaced_pod(md["name"], env.kube.name, {"metadata": {"labels": {"x": "1"}}})
    assert patched.metadata.annotations == md["annotations"]

    # a pod the selector does not match is stored as sent
    web = env.pod("web", {"app": "web"})
    assert not web["metadata"].get("annotations")
    assert web["spec"]["schedulerName"] == "default-scheduler" and "priorityClassName" not in web["spec"]
    assert web["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "250m", "memory": "64Mi"}


def test_a_malformed_profile_is_refused_naming_the_field(env: Env) -> None:
    from kubernetes import client

    for spec, field in (
        ({"qosLevel": "-9"}, "spec.qosLevel='-9' must be LC, HLS, LS, BE"),  # the schema passes 3 characters
        ({"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}},
         "spec.selector.matchExpressions[0].values must be a non-empty list"),
        ({"labels": {"bad key!": "x"}}, "spec.labels: key 'bad key!'"),
        ({"probability": 150}, "spec.probability"),  # the schema's own check names it too
    ):
        with pytest.raises(client.ApiException) as refused:
            env.profile(env.kube.unique("bad"), spec)
        assert refused.value.status in (400, 422) and field in str(refused.value.body), refused.value.body


def test_with_the_webhook_down_pods_are_created_unchanged(env: Env) -> None:
    profile = _offline_profile(env)["metadata"]["name"]
    _wait_mutating(env, profile)
    env.server.stop()
    pod = env.pod("etl", {"app": "etl"})  # failurePolicy Ignore: admitted without the hook
    assert not pod["metadata"].get("annotations")
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "250m", "memory": "64Mi"}
