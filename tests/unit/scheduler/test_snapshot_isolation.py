"""A session never sees what an earlier session did to its model: the live cache reuses derivations of
unchanged objects across sessions (SnapshotMemo), so a first session that binds, evicts, changes
PodGroups and scribbles on every mutable part of its model must leave the next snapshot equal to a
build from scratch of the same objects."""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.api.types import RELEASING, RUNNING
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.cache.snapshot import build_cluster
from scheduler_ext.framework.session import close_session, open_session
from scheduler_ext.plugins.registry import PLUGINS

from .helpers import conf, node, pod, podgroup, queue

NOW = 1_700_000_000.0
CONF = """
actions: "allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def _objects() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [queue("q1")]
    for i in range(3):
        n = node(f"n{i}", cpu="4", memory="8Gi", resources={"nvidia.com/gpu": "1"} if i == 0 else {})
        n["spec"] = {"taints": [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]}
        objs.append(n)
    gang = podgroup("gang", min_member=2, minResources={"cpu": "2", "memory": "2Gi"}, minTaskMember={"w": 2})
    gang["metadata"]["creationTimestamp"] = "2023-11-14T22:00:00Z"  # (kept by the memo: a fixed creation)
    objs.append(gang)
    for i in range(2):
        objs.append(pod(f"g{i}", group="gang", cpu="1", memory="1Gi",
                        annotations={"volcano.sh/task-spec": "w", "scheduling.volcano.sh/queue-name": "q1"}))
    # implicit PodGroups: running pods (one to be evicted) and pending ones
    for i in range(2):
        objs.append(pod(f"run{i}", cpu="1", memory="1Gi", node_name=f"n{i}", phase="Running",
                        annotations={"scheduling.volcano.sh/queue-name": "q1"}))
    for i in range(3):
        objs.append(pod(f"p{i}", cpu="500m", memory="512Mi", annotations={"scheduling.volcano.sh/queue-name": "q1"}))
    for o in objs:
        o["metadata"]["resourceVersion"] = "1"
    return objs


def _live(objects: list[dict[str, Any]]) -> LiveCache:
    cache = LiveCache(None, scheduler_name="volcano")
    stores = {"Node": "nodes", "PodGroup": "podgroups", "Queue": "queues"}
    for o in objects:
        if o["kind"] == "Pod":
            cache._on_pod("ADDED", None, o)
        else:
            cache.reflectors[stores[o["kind"]]].store.put(o)
    return cache


def _state(c: ClusterInfo) -> dict[str, Any]:
    """Everything a session reads, as plain values."""
    t = c.table
    return {
        "dims": t.dims,
        "rows": {a: getattr(t, a).tolist() for a in ("allocatable", "capacity", "idle", "used", "releasing",
                                                      "pipelined", "future_idle", "kube_requested",
                                                      "kube_nonzero", "pod_count", "max_pods")},
        "nodes": [(n.name, sorted(n.tasks), [dict(x) for x in n.taints], n.unschedulable, dict(n.labels),
                   n.oversubscription_node, str(n.oversubscription_resource), n.state) for n in c.node_list],
        "jobs": {
            jid: (sorted((u, x.status, x.node_name, str(x.resreq), str(x.init_resreq), sorted(x.cache))
                         for u, x in j.tasks.items()),
                  {s: sorted(ix) for s, ix in j.task_status_index.items()},
                  str(j.total_request), str(j.allocated), j.min_available, dict(j.task_min_available), j.priority,
                  j.pod_group.phase, str(j.pod_group.min_resources), j.pod_group.conditions, j.pod_group.events,
                  dict(j.pod_group.min_task_member), sorted(j.nodes_fit_errors), j.job_fit_errors)
            for jid, j in c.jobs.items()
        },
        "queues": sorted(c.queues),
    }


def _scribble(c: ClusterInfo) -> None:
    """What no session should do, done anyway: every mutable part of the model changed in place."""
    for n in c.node_list:
        n.taints.append({"key": "scribbled", "effect": "NoSchedule"})
        n.unschedulable = True
    for j in c.jobs.values():
        j.pod_group.phase = "Scribbled"
        j.pod_group.min_task_member["w"] = 99
        if j.pod_group.min_resources is not None:
            j.pod_group.min_resources.milli_cpu += 12345
        j.pod_group.conditions.append({"type": "Scribbled"})
        j.min_available = 77
        for task in j.tasks.values():
            task.resreq.milli_cpu += 1
            task.init_resreq.memory += 1
            task.cache["scribbled"] = True


def test_a_second_session_sees_only_the_fresh_snapshot() -> None:
    objects = _objects()
    cache = _live(objects)
    fresh = _state(build_cluster(objects, now=NOW))

    first = cache.snapshot(NOW).cluster
    assert _state(first) == fresh
    c = conf(CONF)
    ssn = open_session(first, c, PLUGINS)
    for name in c.actions:
        ACTIONS[name].build().execute(ssn)
    assert ssn.binds  # the first session binds ...
    victim = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.status == RUNNING)
    ssn.evict(victim, "test")  # ... and evicts
    assert victim.status == RELEASING
    close_session(ssn)
    _scribble(first)
    assert _state(first) != fresh

    # nothing changed in the stores and nothing was assumed: the next session starts from the objects
    second = cache.snapshot(NOW).cluster
    assert _state(second) == fresh
    # and a third one after scribbling on the second
    _scribble(second)
    assert _state(cache.snapshot(NOW).cluster) == fresh
    assert np.array_equal(cache.snapshot(NOW).cluster.table.idle, build_cluster(objects, now=NOW).table.idle)
