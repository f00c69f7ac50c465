"""The live snapshot re-derives only what changed: unchanged pods are not parsed again, unchanged
nodes not re-read, and a pod's table rows are reused (counted calls, no timing); the result is the
same cluster a build from scratch gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler_ext.api.node import NodeTable
from scheduler_ext.cache import builder
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.model import snapshot
from scheduler_ext.model.snapshot import build_cluster

from .helpers import node, pod

NOW = 1_700_000_000.0


def _cluster() -> tuple[LiveCache, list[dict[str, Any]], list[dict[str, Any]]]:
    cache = LiveCache(None, scheduler_name="volcano")
    nodes = [node(f"n{i}", cpu="8", memory="16Gi", resources={"nvidia.com/gpu": "2"} if i == 0 else {})
             for i in range(3)]
    for n in nodes:
        n["metadata"]["resourceVersion"] = "1"
        cache.reflectors["nodes"].store.put(n)
    pods = []
    for i in range(6):
        p = pod(f"p{i}", cpu="500m", memory="1Gi", node_name=f"n{i % 3}" if i < 3 else "",
                phase="Running" if i < 3 else "Pending")
        p["metadata"].update(uid=f"uid-{i}", resourceVersion="1")
        cache.watch.on_pod("ADDED", None, p)
        pods.append(p)
    return cache, nodes, pods


class _Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.parsed = self.nodes = self.vectors = self.checked = 0
        task_cls, parse_node, bind_task = builder.TaskInfo, snapshot._parse_node, NodeTable.bind_task
        meta = snapshot._meta

        def counting_meta(obj: Any, where: str) -> Any:
            self.checked += 1
            return meta(obj, where)

        def counting_task(*a: Any, **kw: Any) -> Any:
            self.parsed += 1
            return task_cls(*a, **kw)

        def counting_node(n: Any) -> Any:
            self.nodes += 1
            return parse_node(n)

        def counting_bind(table: NodeTable, task: Any) -> None:
            self.vectors += 1
            bind_task(table, task)

        monkeypatch.setattr(builder, "TaskInfo", counting_task)
        monkeypatch.setattr(snapshot, "_parse_node", counting_node)
        monkeypatch.setattr(NodeTable, "bind_task", counting_bind)
        monkeypatch.setattr(snapshot, "_meta", counting_meta)

    def take(self) -> tuple[int, int, int]:
        got = (self.parsed, self.nodes, self.vectors)
        self.parsed = self.nodes = self.vectors = 0
        return got

    def take_checked(self) -> int:
        got, self.checked = self.checked, 0
        return got


def _same(a: Any, b: Any) -> None:
    assert a.table.dims == b.table.dims
    for attr in ("allocatable", "capacity", "idle", "used", "future_idle", "kube_requested"):
        assert np.array_equal(getattr(a.table, attr), getattr(b.table, attr)), attr
    ta = {t.uid: t for j in a.jobs.values() for t in j.tasks.values()}
    tb = {t.uid: t for j in b.jobs.values() for t in j.tasks.values()}
    assert ta.keys() == tb.keys()
    for uid, t in ta.items():
        u = tb[uid]
        assert (t.status, t.node_name) == (u.status, u.node_name)
        for v in ("resreq_vec", "init_vec", "init_check_cols", "kube_vec"):
            assert np.array_equal(getattr(t, v), getattr(u, v)), (uid, v)
    assert [(n.name, n.oversubscription_node) for n in a.node_list] == [(n.name, n.oversubscription_node)
                                                                         for n in b.node_list]


def test_unchanged_objects_are_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    cache, nodes, pods = _cluster()
    counts = _Counts(monkeypatch)
    cache.snapshot(NOW)
    assert counts.take() == (6, 3, 6)  # the first session derives everything
    assert counts.take_checked() == 9  # every object's metadata checked (3 nodes, 6 pods)
    second = cache.snapshot(NOW)
    assert counts.take() == (0, 0, 0)  # nothing changed: nothing parsed, read or computed again
    assert counts.take_checked() == 0
    _same(second.cluster, build_cluster([*nodes, *pods], now=NOW))

    # one pod's spec changes (parsed again), one node's allocatable (read again)
    p = pods[4]
    c = {**p["spec"]["containers"][0], "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
    pods[4] = {**p, "metadata": {**p["metadata"], "resourceVersion": "2"}, "spec": {**p["spec"], "containers": [c]}}
    cache.watch.on_pod("MODIFIED", p, pods[4])
    n = nodes[2]
    res = {"cpu": "16", "memory": "16Gi", "pods": "110"}
    nodes[2] = {**n, "metadata": {**n["metadata"], "resourceVersion": "2"},
                "status": {"capacity": res, "allocatable": res}}
    cache.reflectors["nodes"].store.put(nodes[2])
    counts.take()  # (the builds from scratch that _same compares with count too)
    counts.take_checked()
    third = cache.snapshot(NOW)
    assert counts.take() == (1, 1, 1)
    assert counts.take_checked() == 2
    _same(third.cluster, build_cluster([*nodes, *pods], now=NOW))
    assert third.cluster.table.allocatable[2, 0] == 16000


def test_a_bind_reuses_the_parse_and_a_new_dimension_recomputes_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    cache, nodes, pods = _cluster()
    counts = _Counts(monkeypatch)
    cache.snapshot(NOW)
    counts.take()
    p = pods[5]  # bound by the scheduler: a new version whose spec differs only in nodeName
    pods[5] = {**p, "metadata": {**p["metadata"], "resourceVersion": "2"},
               "spec": {**p["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
    cache.watch.on_pod("MODIFIED", p, pods[5])
    snap = cache.snapshot(NOW)
    assert counts.take() == (0, 0, 1)  # rebased, not parsed; its rows follow the new pod object
    _same(snap.cluster, build_cluster([*nodes, *pods], now=NOW))
    # a node with a new resource adds a table dimension: every pod's rows are computed again
    n = nodes[1]
    res = {"cpu": "8", "memory": "16Gi", "pods": "110", "example.com/fpga": "1"}
    nodes[1] = {**n, "metadata": {**n["metadata"], "resourceVersion": "2"},
                "status": {"capacity": res, "allocatable": res}}
    cache.reflectors["nodes"].store.put(nodes[1])
    counts.take()
    snap = cache.snapshot(NOW)
    assert counts.take() == (0, 1, 6)
    _same(snap.cluster, build_cluster([*nodes, *pods], now=NOW))
