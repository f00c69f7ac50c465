"""Builders for the frozen model, so decision tests read as tables of plain numbers."""

from __future__ import annotations

from collections.abc import Mapping

from agent.model import Amounts, ContainerView, NodeView, PodView, Sample
from tidemark.apis import NodeName, PodUID, Resource, parse_watermarks

GiB = 2**30
MiB = 2**20


def pod(
    uid: str,
    *,
    level: int = 0,
    qos: str = "Burstable",
    ns: str = "default",
    name: str | None = None,
    priority: int = 0,
    created: float = 0.0,
    deletion: float | None = None,
    cpu: float = 0,
    mem: float = 0,
    bcpu: float = 0,
    bmem: float = 0,
    cpu_limit: int | None = None,
    containers: tuple[ContainerView, ...] = (),
    mirror: bool = False,
    grace: float = 30.0,
    quota_burst: int | None = None,
    component: bool = False,
) -> PodView:
    return PodView(
        uid=PodUID(uid),
        namespace=ns,
        name=name or uid,
        qos_level=level,
        qos_class=qos,  # type: ignore[arg-type]
        priority=priority,
        created=created,
        deletion=deletion,
        grace_seconds=grace,
        requests=Amounts(cpu, mem),
        batch_requests=Amounts(bcpu, bmem),
        cpu_limit=cpu_limit,
        containers=containers,
        mirror=mirror,
        quota_burst=quota_burst,
        component=component,
    )


def node(
    *,
    colocation: bool = True,
    oversubscription: bool = True,
    cpu: float = 4000,
    mem: float = 16 * GiB,
    annotations: Mapping[str, str] | None = None,
    types: tuple[Resource, ...] = ("cpu", "memory"),
    published_x: Mapping[Resource, int | None] | None = None,
    published_batch: Mapping[Resource, int | None] | None = None,
    evicting: bool = False,
    last_publish: float | None = None,
    taints: tuple[Mapping[str, object], ...] = (),
) -> NodeView:
    ann = dict(annotations or {})
    labels = {}
    if colocation:
        labels["volcano.sh/colocation"] = "true"
    if oversubscription:
        labels["volcano.sh/oversubscription"] = "true"
    return NodeView(
        name=NodeName("n1"),
        allocatable=Amounts(cpu, mem),
        labels=labels,
        annotations=ann,
        colocation=colocation,
        oversubscription=oversubscription,
        watermarks=parse_watermarks(ann),
        types=types,
        published_x=dict(published_x or {"cpu": None, "memory": None}),
        published_batch=dict(published_batch or {"cpu": None, "memory": None}),
        evicting_annotation=evicting,
        taints=taints,
        last_publish=last_publish,
    )


def sample(
    t: float,
    kube_cpu: float,
    kube_mem: float = 0.0,
    *,
    node_cpu: float | None = None,
    node_mem: float | None = None,
    pods: Mapping[str, tuple[float, float]] | None = None,
    elapsed: float = 1.0,
) -> Sample:
    node_amounts = Amounts(kube_cpu if node_cpu is None else node_cpu, kube_mem if node_mem is None else node_mem)
    return Sample(
        time=t,
        elapsed=elapsed,
        node=node_amounts,
        kubepods=Amounts(kube_cpu, kube_mem),
        pods={PodUID(u): Amounts(c, m) for u, (c, m) in (pods or {}).items()},
    )
