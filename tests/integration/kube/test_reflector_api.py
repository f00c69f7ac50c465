"""Reflectors against a real kube-apiserver 1.20: pods, nodes and PodGroups, resume, 410 relist, outage.

How each path is provoked (honestly):
- resume after a dropped watch: `timeout_seconds=1`, so the real server ends every watch after a
  second; changes made across several watches must all arrive with a single list;
- 410: the real server answers a PodGroup watch from resourceVersion "1" with an ERROR event,
  code 410 ("too old resource version"): the CRD's watch cache starts at its creation, long after
  revision 1. A wrapper forces that one stale watch; everything else is the real loop. (Core kinds
  cannot be provoked this way on a fresh server: their watch caches start at revision 1. The HTTP
  410 form is covered by the unit tests.)
- outage: the client points at a closed port (connection refused), then back at the server.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.kube.helpers import admin_api, closed_port, create_node, create_pod, delete, token_api, wait_for
from tidemark.kube.client import request_json
from tidemark.kube.reflector import ApiListerWatcher, BackoffPolicy, Reflector, WatchStream
from tidemark.kube.resources import NODES, PODGROUPS, PODS, PRIORITY_CLASSES, QUEUES, pdb_kind

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

MERGE = "application/merge-patch+json"


class Recorder:
    """Collects (type, name, resourceVersion) from a reflector's callback, thread-safely."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changes: list[tuple[str, str, str]] = []

    def __call__(self, etype: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        with self.lock:
            self.changes.append((etype, obj["metadata"]["name"], obj["metadata"].get("resourceVersion", "")))

    def seen(self, etype: str, name: str) -> bool:
        with self.lock:
            return any(t == etype and n == name for t, n, _ in self.changes)

    def names(self, etype: str) -> list[str]:
        with self.lock:
            return [n for t, n, _ in self.changes if t == etype]


def test_pods_by_label_are_listed_and_followed_through_create_update_delete(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    create_pod(api, kube.name, "before", {"app": "x"})
    create_pod(api, kube.name, "other", {"app": "y"})
    rec = Recorder()
    r = Reflector.for_resource(
        api, PODS, namespace=kube.name, label_selector="app=x", timeout_seconds=30, on_change=rec
    ).start()
    try:
        assert r.wait_for_sync(10)
        listed = r.store.get(f"{kube.name}/before")
        assert listed is not None and listed["kind"] == "Pod" and listed["apiVersion"] == "v1"
        assert r.store.keys() == [f"{kube.name}/before"]  # the selector applies
        contact = r.last_contact()
        assert contact is not None and time.monotonic() - contact < 10
        create_pod(api, kube.name, "after", {"app": "x"})
        wait_for(lambda: rec.seen("ADDED", "after"), "ADDED after")
        request_json(
            api,
            "PATCH",
            PODS.object_path("after", kube.name),
            body={"metadata": {"annotations": {"k": "v"}}},
            content_type=MERGE,
        )
        wait_for(lambda: rec.seen("MODIFIED", "after"), "MODIFIED after")
        got = r.store.get(f"{kube.name}/after")
        assert got is not None and got["metadata"]["annotations"] == {"k": "v"}
        delete(api, PODS.object_path("before", kube.name))
        wait_for(lambda: rec.seen("DELETED", "before"), "DELETED before")
        assert r.store.keys() == [f"{kube.name}/after"]
        assert "other" not in rec.names("ADDED")
        assert r.lists == 1 and r.errors == 0
    finally:
        r.stop()


def test_nodes_by_label_and_pods_by_node_name_field_selector(kube: KubeNamespace) -> None:
    """The agent's view: its own Node, and the pods bound to it (fieldSelector spec.nodeName)."""
    api = admin_api(kube)
    mark = {"tidemark-test": kube.name}
    node = create_node(api, kube, "n", mark)
    create_node(api, kube, "unlabelled")
    nodes, pods = Recorder(), Recorder()
    rn = Reflector.for_resource(api, NODES, label_selector=f"tidemark-test={kube.name}", on_change=nodes).start()
    rp = Reflector.for_resource(api, PODS, field_selector=f"spec.nodeName={node}", on_change=pods).start()
    try:
        assert rn.wait_for_sync(10) and rp.wait_for_sync(10)
        assert rn.store.keys() == [node]  # cluster-scoped: keyed by name alone
        request_json(
            api,
            "PATCH",
            NODES.object_path(node),
            body={"metadata": {"annotations": {"volcano.sh/oversubscription-cpu": "1500"}}},
            content_type=MERGE,
        )
        wait_for(lambda: nodes.seen("MODIFIED", node), "node MODIFIED")
        pod = create_pod(api, kube.name, "bound")
        assert rp.store.keys() == []
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "bound"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        request_json(api, "POST", PODS.object_path("bound", kube.name, "binding"), body=binding)
        wait_for(lambda: pods.seen("ADDED", "bound"), "the bound pod to appear on its node")
        stored = rp.store.get(f"{kube.name}/bound")
        assert stored is not None and stored["metadata"]["uid"] == pod["metadata"]["uid"]
        delete(api, NODES.object_path(node))
        wait_for(lambda: nodes.seen("DELETED", node), "node DELETED")
        assert len(rn.store) == 0
    finally:
        rn.stop()
        rp.stop()


def _podgroup(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": 2, "queue": "default"},
    }


def test_podgroups_custom_objects_with_status_updates(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    rec = Recorder()
    r = Reflector.for_resource(api, PODGROUPS, namespace=kube.name, on_change=rec).start()
    try:
        assert r.wait_for_sync(10)
        request_json(api, "POST", PODGROUPS.collection_path(kube.name), body=_podgroup("pg", kube.name))
        wait_for(lambda: rec.seen("ADDED", "pg"), "PodGroup ADDED")
        request_json(
            api,
            "PATCH",
            PODGROUPS.object_path("pg", kube.name, "status"),
            body={"status": {"phase": "Inqueue"}},
            content_type=MERGE,
        )

        def inqueue() -> bool:
            pg = r.store.get(f"{kube.name}/pg")
            return pg is not None and pg.get("status", {}).get("phase") == "Inqueue"

        wait_for(inqueue, "the PodGroup status in the store")
        delete(api, PODGROUPS.object_path("pg", kube.name))
        wait_for(lambda: rec.seen("DELETED", "pg"), "PodGroup DELETED")
    finally:
        r.stop()


def test_resumes_after_the_server_ends_each_watch_without_relisting(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    rec = Recorder()
    r = Reflector.for_resource(api, PODS, namespace=kube.name, timeout_seconds=1, on_change=rec).start()
    try:
        assert r.wait_for_sync(10)
        for i in range(3):
            start = r.watches

            def resumed(start: int = start) -> bool:
                return r.watches > start

            wait_for(resumed, "the server to end the watch and the reflector to resume")
            create_pod(api, kube.name, f"p{i}")
        wait_for(lambda: len(rec.names("ADDED")) == 3, "all three pods")
        assert rec.names("ADDED") == ["p0", "p1", "p2"]  # in order, none twice
        assert r.lists == 1 and r.watches >= 3 and r.errors == 0
    finally:
        r.stop()


class StaleFirstWatch(ApiListerWatcher):
    """Real list/watch, except that the first watch asks for resourceVersion "1" after a change was made.

    That stands for a reflector that was away long enough for its version to be compacted: the
    real server answers 410, and the change made meanwhile must come back through the relist.
    """

    def __init__(self, *args: Any, on_first_watch: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_first_watch = on_first_watch
        self.stale_done = False

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchStream:
        if not self.stale_done:
            self.stale_done = True
            self.on_first_watch()
            resource_version = "1"
        return super().watch(resource_version, timeout_seconds)


def test_relists_after_410_and_reports_what_changed_meanwhile(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    request_json(api, "POST", PODGROUPS.collection_path(kube.name), body=_podgroup("old", kube.name))

    def change_while_away() -> None:
        request_json(api, "POST", PODGROUPS.collection_path(kube.name), body=_podgroup("missed", kube.name))
        delete(api, PODGROUPS.object_path("old", kube.name))

    lw = StaleFirstWatch(api, PODGROUPS, namespace=kube.name, on_first_watch=change_while_away)
    rec = Recorder()
    r = Reflector(lw, on_change=rec).start()
    try:
        wait_for(lambda: r.lists >= 2, "a relist after the 410")
        wait_for(lambda: rec.seen("ADDED", "missed") and rec.seen("DELETED", "old"), "the relist's diff")
        assert r.store.keys() == [f"{kube.name}/missed"]
        request_json(api, "POST", PODGROUPS.collection_path(kube.name), body=_podgroup("later", kube.name))
        wait_for(lambda: rec.seen("ADDED", "later"), "the watch after the relist")
        assert r.lists == 2
    finally:
        r.stop()


def test_survives_an_api_outage_and_syncs_when_the_server_is_back(kube: KubeNamespace) -> None:
    api = token_api(kube)
    real_host = api.configuration.host
    api.configuration.host = f"https://127.0.0.1:{closed_port()}"
    r = Reflector.for_resource(api, PODS, namespace=kube.name, backoff=BackoffPolicy(initial=0.05, cap=0.2)).start()
    try:
        wait_for(lambda: r.errors >= 3, "several failed attempts")
        assert not r.has_synced() and r.last_contact() is None
        create_pod(admin_api(kube), kube.name, "during-outage")  # through a client that still works
        api.configuration.host = real_host
        assert r.wait_for_sync(10)
        assert r.store.keys() == [f"{kube.name}/during-outage"]
    finally:
        r.stop()


def test_stop_interrupts_a_quiet_long_watch(kube: KubeNamespace) -> None:
    api = admin_api(kube)
    r = Reflector.for_resource(api, PODS, namespace=kube.name, timeout_seconds=300).start()
    assert r.wait_for_sync(10)
    wait_for(lambda: r.watches >= 1, "the watch to open")
    started = time.monotonic()
    r.stop()
    assert time.monotonic() - started < 1.0


def test_the_schedulers_other_kinds_sync_pdbs_priorityclasses_and_queues(kube: KubeNamespace) -> None:
    """PDBs through the discovered version (v1beta1 on 1.20), and two cluster-scoped kinds."""
    api = admin_api(kube)
    pdbs_kind = pdb_kind(api)
    pdb = {
        "apiVersion": pdbs_kind.api_version,
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": kube.name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    request_json(api, "POST", pdbs_kind.collection_path(kube.name), body=pdb)
    pc_name, queue_name = kube.unique("pc"), kube.unique("q")
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": pc_name}, "value": 1000}
    request_json(api, "POST", PRIORITY_CLASSES.collection_path(), body=pc)
    kube.defer(lambda: delete(api, PRIORITY_CLASSES.object_path(pc_name)))
    reflectors = [
        Reflector.for_resource(api, pdbs_kind, namespace=kube.name).start(),
        Reflector.for_resource(api, PRIORITY_CLASSES).start(),
        Reflector.for_resource(api, QUEUES, on_change=(queues := Recorder())).start(),
    ]
    try:
        assert all(r.wait_for_sync(10) for r in reflectors)
        pdbs, pcs, _ = (r.store for r in reflectors)
        assert pdbs.keys() == [f"{kube.name}/db"]
        stored_pc = pcs.get(pc_name)
        assert stored_pc is not None and stored_pc["value"] == 1000 and stored_pc["kind"] == "PriorityClass"
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": queue_name},
            "spec": {"weight": 1},
        }
        request_json(api, "POST", QUEUES.collection_path(), body=queue)
        kube.defer(lambda: delete(api, QUEUES.object_path(queue_name)))
        wait_for(lambda: queues.seen("ADDED", queue_name), "Queue ADDED")
    finally:
        for r in reflectors:
            r.stop()
