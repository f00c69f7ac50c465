"""Small builders for Kubernetes objects (plain dicts) used by the scheduler's unit tests."""

from __future__ import annotations

from typing import Any

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.api.cluster import ClusterInfo
from scheduler_ext.framework.conf import SchedulerConf, parse_conf
from scheduler_ext.framework.session import Session, close_session, open_session
from scheduler_ext.model.snapshot import build_cluster
from scheduler_ext.plugins.registry import PLUGINS


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110", **extra: Any) -> dict[str, Any]:
    labels = extra.pop("labels", {})
    annotations = extra.pop("annotations", {})
    res = {"cpu": cpu, "memory": memory, "pods": pods, **extra.pop("resources", {})}
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {},
        "status": {"capacity": dict(res), "allocatable": dict(res)},
    }
    if "taints" in extra:
        obj["spec"]["taints"] = extra.pop("taints")
    if extra.pop("unschedulable", False):
        obj["spec"]["unschedulable"] = True
    if "conditions" in extra:
        obj["status"]["conditions"] = extra.pop("conditions")
    return obj


def pod(
    name: str,
    ns: str = "ns1",
    *,
    group: str | None = None,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    node_name: str = "",
    phase: str = "Pending",
    scheduler: str = "volcano",
    **extra: Any,
) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    ann = dict(extra.pop("annotations", {}))
    if group:
        ann["scheduling.k8s.io/group-name"] = group
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "resources": {"requests": requests}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    spec.update(extra.pop("spec", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"{ns}-{name}",
            "annotations": ann,
            "labels": extra.pop("labels", {}),
            **extra.pop("metadata", {}),
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def podgroup(
    name: str, ns: str = "ns1", *, queue: str = "q1", min_member: int = 1, phase: str = "Inqueue", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"queue": queue, "minMember": min_member, **spec},
        "status": {"phase": phase},
    }


def queue(name: str, weight: int = 1, **spec: Any) -> dict[str, Any]:
    state = spec.pop("state", "Open")
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": weight, **spec},
        "status": {"state": state},
    }


def conf(text: str) -> SchedulerConf:
    c, _ = parse_conf(text, ACTIONS, PLUGINS)
    return c


def session(objects: list[dict[str, Any]], conf_text: str, now: float = 1_700_000_000.0) -> Session:
    cluster: ClusterInfo = build_cluster(objects, now=now)
    return open_session(cluster, conf(conf_text), PLUGINS)


def run(objects: list[dict[str, Any]], conf_text: str) -> Session:
    """Open a session, run the conf's actions, close it; returns the closed session."""
    c = conf(conf_text)
    ssn = open_session(build_cluster(objects, now=1_700_000_000.0), c, PLUGINS)
    for name in c.actions:
        ACTIONS[name].build().execute(ssn)
    close_session(ssn)
    return ssn
