"""Proves the `kube_apiserver`/`kube` fixtures against the real server (no mocks): the calls the
scheduler and the agent make (watch, binding, eviction, custom objects with /status) and that RBAC
is enforced, so later tests can prove the shipped ClusterRoles are sufficient."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from tests.fixtures.kubeapi import (
    MERGE_PATCH,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    KubeAPIServer,
    KubeNamespace,
    bind_pod,
    evict,
    eviction_body,
)

pytestmark = pytest.mark.kube

TIMEOUT = 10.0


class PodWatch:
    """Streams pod events of one namespace into a queue from a background thread."""

    def __init__(self, kube: KubeNamespace) -> None:
        from kubernetes import client, watch

        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._watch = watch.Watch()  # type: ignore[no-untyped-call,unused-ignore]
        core = client.CoreV1Api(kube.server.admin_client())
        self._thread = threading.Thread(target=self._run, args=(core, kube.name), daemon=True)
        self._thread.start()

    def _run(self, core: Any, namespace: str) -> None:
        stream = self._watch.stream(core.list_namespaced_pod, namespace, timeout_seconds=30)  # type: ignore[no-untyped-call,unused-ignore]
        for ev in stream:
            self._events.put((ev["type"], ev["object"]))
            if ev["type"] == "DELETED":
                break

    def wait(self, event_type: str, pred: Callable[[Any], bool] = lambda _: True) -> Any:
        """Returns the first pod of an `event_type` event matching `pred`, skipping others."""
        deadline = time.monotonic() + TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            try:
                typ, pod = self._events.get(timeout=left)
            except queue.Empty:
                break
            if typ == event_type and pred(pod):
                return pod
        raise AssertionError(f"no {event_type} pod event matching the condition within {TIMEOUT}s")

    def stop(self) -> None:
        self._watch.stop()  # type: ignore[no-untyped-call,unused-ignore]
        self._thread.join(timeout=TIMEOUT)


def _node(name: str) -> Any:
    from kubernetes import client

    res = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name}),
        status=client.V1NodeStatus(
            capacity=res,
            allocatable=res,
            conditions=[client.V1NodeCondition(type="Ready", status="True")],
        ),
    )


def _pod(name: str) -> Any:
    from kubernetes import client

    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={"volcano.sh/qos-level": "BE"}),
        spec=client.V1PodSpec(
            scheduler_name="volcano",
            containers=[
                client.V1Container(
                    name="main",
                    image="registry.invalid/pause:3.9",  # never pulled: there is no kubelet
                    resources=client.V1ResourceRequirements(requests={"cpu": "500m", "memory": "256Mi"}),
                )
            ],
        ),
    )


def test_watch_bind_evict(kube: KubeNamespace) -> None:
    """A pod is seen ADDED by a watch, bound through the binding subresource (nodeName seen via the
    watch), then evicted through the Eviction API in the version the server serves."""
    node = kube.unique("node")
    created: Any = kube.core.create_node(_node(node))
    kube.defer(lambda: kube.core.delete_node(node))
    assert created.status.allocatable["cpu"] == "4"  # a Node may carry status on create
    assert not created.spec.taints  # TaintNodesByCondition is disabled

    w = PodWatch(kube)
    try:
        kube.core.create_namespaced_pod(kube.name, _pod("p1"))
        added = w.wait("ADDED", lambda p: p.metadata.name == "p1")
        assert added.spec.scheduler_name == "volcano"
        assert added.spec.node_name is None
        assert added.status.phase == "Pending"

        bind_pod(kube.api, kube.name, "p1", node)
        bound = w.wait("MODIFIED", lambda p: p.spec.node_name == node)
        assert bound.metadata.name == "p1"

        assert eviction_body(kube.api, kube.name, "p1")["apiVersion"] in ("policy/v1beta1", "policy/v1")
        assert evict(kube.api, kube.name, "p1") == 201
        # Bound, so it waits for a kubelet for its grace period: Terminating, not gone.
        evicted = w.wait("MODIFIED", lambda p: p.metadata.deletion_timestamp is not None)
        assert evicted.spec.node_name == node

        kube.core.delete_namespaced_pod("p1", kube.name, grace_period_seconds=0)
        w.wait("DELETED", lambda p: p.metadata.name == "p1")
    finally:
        w.stop()


def test_eviction_body_version(kube: KubeNamespace) -> None:
    """1.20 serves Eviction only as policy/v1beta1; a policy/v1 body (client 37's V1Eviction) is refused."""
    from kubernetes import client

    info = client.VersionApi(kube.api).get_code()
    kube.core.create_namespaced_pod(kube.name, _pod("p2"))
    if (int(info.major), int(info.minor.rstrip("+"))) < (1, 22):
        assert eviction_body(kube.api, kube.name, "p2")["apiVersion"] == "policy/v1beta1"
        v1 = client.V1Eviction(
            api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name="p2", namespace=kube.name)
        )
        with pytest.raises(client.ApiException) as err:
            kube.core.create_namespaced_pod_eviction("p2", kube.name, v1, _preload_content=False)
        assert err.value.status == 400
    assert evict(kube.api, kube.name, "p2", grace_period_seconds=0) == 201
    # An unbound pod evicted with grace 0 is deleted at once.
    with pytest.raises(client.ApiException) as gone:
        kube.core.read_namespaced_pod("p2", kube.name)
    assert gone.value.status == 404


def test_rbac_is_enforced(kube: KubeNamespace, kube_apiserver: KubeAPIServer) -> None:
    """A component token without a binding gets 403; a ClusterRole + binding for that user opens it."""
    from kubernetes import client

    user = "tester-1"
    as_user = client.CoreV1Api(kube_apiserver.client_for(user))
    with pytest.raises(client.ApiException) as err:
        as_user.list_node()
    assert err.value.status == 403

    rbac = client.RbacAuthorizationV1Api(kube.api)
    role = kube.unique("node-reader")
    rbac.create_cluster_role(
        client.V1ClusterRole(
            metadata=client.V1ObjectMeta(name=role),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"])],
        )
    )
    kube.defer(lambda: rbac.delete_cluster_role(role))
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=role),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
            subjects=[client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=user)],
        )
    )
    kube.defer(lambda: rbac.delete_cluster_role_binding(role))

    # The authorizer reads roles from its informer cache: poll until the binding is visible.
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            as_user.list_node()
            break
        except client.ApiException as e:
            if e.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    # Still nothing beyond the role: pods stay forbidden.
    with pytest.raises(client.ApiException) as err:
        as_user.list_namespaced_pod(kube.name)
    assert err.value.status == 403


def test_volcano_crds(kube: KubeNamespace) -> None:
    """PodGroup and Queue are served as Volcano's (names, scope, short names), typed, with /status."""
    from kubernetes import client

    discovery = kube.custom.get_api_resources(VOLCANO_GROUP, VOLCANO_VERSION)
    resources = {r.name: r for r in discovery.resources}
    assert resources["podgroups"].namespaced is True
    assert resources["podgroups"].kind == "PodGroup"
    assert set(resources["podgroups"].short_names or []) == {"pg", "podgroup-v1beta1"}
    assert resources["queues"].namespaced is False
    assert set(resources["queues"].short_names or []) == {"q", "queue-v1beta1"}
    assert {"podgroups/status", "queues/status"} <= set(resources)

    custom = kube.custom
    q = kube.unique("queue")
    custom.create_cluster_custom_object(
        VOLCANO_GROUP,
        VOLCANO_VERSION,
        "queues",
        {
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
            "kind": "Queue",
            "metadata": {"name": q},
            "spec": {"weight": 2, "reclaimable": True, "capability": {"cpu": "8", "memory": "16Gi"}},
        },
    )
    kube.defer(lambda: custom.delete_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", q))
    custom.patch_cluster_custom_object_status(
        VOLCANO_GROUP, VOLCANO_VERSION, "queues", q, {"status": {"state": "Open"}}, _content_type=MERGE_PATCH
    )
    queue_obj = cast(dict[str, Any], custom.get_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", q))
    assert queue_obj["status"]["state"] == "Open"
    assert queue_obj["spec"]["capability"] == {"cpu": "8", "memory": "16Gi"}

    pg: dict[str, Any] = {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "pg1"},
        "spec": {"minMember": 2, "queue": q, "minResources": {"cpu": "1", "memory": "1Gi"}, "futureField": "x"},
    }
    custom.create_namespaced_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, kube.name, "podgroups", pg)
    status = {"phase": "Inqueue", "running": 0, "conditions": [{"type": "Scheduled", "status": "False"}]}
    custom.patch_namespaced_custom_object_status(
        VOLCANO_GROUP, VOLCANO_VERSION, kube.name, "podgroups", "pg1", {"status": status}, _content_type=MERGE_PATCH
    )
    # With a status subresource, status written through the main resource is ignored.
    custom.patch_namespaced_custom_object(
        VOLCANO_GROUP,
        VOLCANO_VERSION,
        kube.name,
        "podgroups",
        "pg1",
        {"status": {"phase": "Running"}},
        _content_type=MERGE_PATCH,
    )
    got = cast(
        dict[str, Any],
        custom.get_namespaced_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, kube.name, "podgroups", "pg1"),
    )
    assert got["status"]["phase"] == "Inqueue"
    assert got["spec"]["futureField"] == "x"  # unknown fields are preserved

    # Typed fields are validated by the server.
    bad = {**pg, "metadata": {"name": "pg-bad"}, "spec": {"minMember": "two"}}
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, kube.name, "podgroups", bad)
    assert err.value.status == 422
