"""Pods as kubelet and Volcano count them: effective requests and limits, the QoS class, and which pods the
agent must never evict (mirror, DaemonSet, system-critical).

Part of the shared vocabulary (tidemark/apis.py re-exports every public name): pure, over plain mappings in the
Kubernetes JSON shape; a malformed resource is dropped and reported in `problems`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from tidemark.quantities import RES_CPU, RES_MEMORY, RESOURCES, Resources, parse_resource_list

# --- Pod request arithmetic --------------------------------------------------------------------


def _add(into: Resources, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max(into: Resources, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def _container_requests(container: Mapping[str, Any], problems: list[str] | None) -> Resources:
    res = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(res, Mapping):
        return {}
    requests = res.get("requests")
    if requests is None:
        # Kubernetes defaults requests to limits when only limits are given.
        requests = res.get("limits")
    return parse_resource_list(requests, problems)


def _containers(spec: Mapping[str, Any], key: str) -> Iterable[Mapping[str, Any]]:
    items = spec.get(key) if isinstance(spec, Mapping) else None
    if not isinstance(items, list):
        return ()
    return [c for c in items if isinstance(c, Mapping)]


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _init_requests(spec: Mapping[str, Any], sum_into: Resources, problems: list[str] | None) -> Resources:
    """The init-container maximum, sidecars (restartPolicy Always) accumulating as kubelet does."""
    sidecars: Resources = {}
    init_max: Resources = {}
    for c in _containers(spec, "initContainers"):
        req = _container_requests(c, problems)
        if _is_sidecar(c):
            _add(sum_into, req)
            _add(sidecars, req)
            step = dict(sidecars)
        else:
            step = dict(req)
            _add(step, sidecars)
        _max(init_max, step)
    return init_max


def _pod_spec(pod_or_spec: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod_or_spec.get("spec") if "spec" in pod_or_spec else pod_or_spec
    return spec if isinstance(spec, Mapping) else {}


def pod_requests(pod_or_spec: Mapping[str, Any], problems: list[str] | None = None) -> Resources:
    """kubelet's effective request: containers + sidecars, max with init containers, + overhead.

    Pod-level `spec.resources.requests` (Kubernetes >= 1.32) override cpu/memory when set.
    """
    spec = _pod_spec(pod_or_spec)
    total: Resources = {}
    for c in _containers(spec, "containers"):
        _add(total, _container_requests(c, problems))
    _max(total, _init_requests(spec, total, problems))
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping):
        for k, v in parse_resource_list(pod_level.get("requests"), problems).items():
            if k in (RES_CPU, RES_MEMORY):
                total[k] = v
    _add(total, parse_resource_list(spec.get("overhead"), problems))
    return total


def volcano_requests(pod_or_spec: Mapping[str, Any], problems: list[str] | None = None) -> tuple[Resources, Resources]:
    """Volcano's (resreq, initResreq): accounting request without init containers, and the fit request with them."""
    spec = _pod_spec(pod_or_spec)
    overhead = parse_resource_list(spec.get("overhead"), problems)
    resreq: Resources = {}
    for c in _containers(spec, "containers"):
        _add(resreq, _container_requests(c, problems))
    init_total = dict(resreq)
    _max(init_total, _init_requests(spec, init_total, problems))
    _add(resreq, overhead)
    _add(init_total, overhead)
    return resreq, init_total


def pod_limits(pod_or_spec: Mapping[str, Any], problems: list[str] | None = None) -> Resources:
    """Sum of container limits; a resource is absent when any container leaves it unlimited."""
    spec = _pod_spec(pod_or_spec)
    per_container = []
    for c in _containers(spec, "containers"):
        res = c.get("resources")
        per_container.append(parse_resource_list(res.get("limits") if isinstance(res, Mapping) else None, problems))
    total: Resources = {}
    for limits in per_container:
        _add(total, limits)
    return {k: v for k, v in total.items() if all(k in limits for limits in per_container)}


# --- Pod identity helpers ------------------------------------------------------------------------


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    ann = md.get("annotations") if isinstance(md, Mapping) else None
    return ann if isinstance(ann, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = md.get("labels") if isinstance(md, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


annotations_of = _annotations
labels_of = _labels


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    """Static/mirror pods: kubelet owns them; the agent never evicts them."""
    ann = _annotations(pod)
    if "kubernetes.io/config.mirror" in ann or ann.get("kubernetes.io/config.source", "api") != "api":
        return True
    md = pod.get("metadata") if isinstance(pod, Mapping) else None
    owners = md.get("ownerReferences") if isinstance(md, Mapping) else None
    if isinstance(owners, list):
        return any(isinstance(o, Mapping) and o.get("kind") == "Node" for o in owners)
    return False


#: kubelet's critical priority classes and the threshold of their values (scheduling.SystemCriticalPriority)
SYSTEM_CRITICAL_CLASSES: Final = frozenset({"system-node-critical", "system-cluster-critical"})
SYSTEM_CRITICAL_PRIORITY: Final = 2_000_000_000


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    """Owned by a DaemonSet (its controller would put it straight back: evicting it loops)."""
    md = pod.get("metadata") if isinstance(pod, Mapping) else None
    owners = md.get("ownerReferences") if isinstance(md, Mapping) else None
    return isinstance(owners, list) and any(isinstance(o, Mapping) and o.get("kind") == "DaemonSet" for o in owners)


def is_system_critical(pod: Mapping[str, Any]) -> bool:
    """At system-node-critical or system-cluster-critical priority (kubelet never evicts those either)."""
    spec = _pod_spec(pod)
    if spec.get("priorityClassName") in SYSTEM_CRITICAL_CLASSES:
        return True
    prio = spec.get("priority")
    return isinstance(prio, int) and not isinstance(prio, bool) and prio >= SYSTEM_CRITICAL_PRIORITY


def eviction_exemption(pod: Mapping[str, Any]) -> str | None:
    """Why the agent must never evict this pod, whatever its qos-level says (None: it may be a victim).

    docs/design.md, "Watermarks and eviction": never a pod in kube-system, a mirror/static pod, a DaemonSet-owned pod,
    or a pod at system-node-critical or system-cluster-critical priority.
    """
    md = pod.get("metadata") if isinstance(pod, Mapping) else None
    if isinstance(md, Mapping) and md.get("namespace") == "kube-system":
        return "in kube-system"
    if is_mirror_pod(pod):
        return "a mirror/static pod"
    if is_daemonset_pod(pod):
        return "owned by a DaemonSet"
    if is_system_critical(pod):
        return "at system-critical priority"
    return None


# --- QoS class (kubelet's computation) -----------------------------------------------------------
QosClass = Literal["Guaranteed", "Burstable", "BestEffort"]


def qos_class(pod: Mapping[str, Any]) -> QosClass:
    """`status.qosClass` when present, else computed as kubelet does (cpu and memory only)."""
    status = pod.get("status") if isinstance(pod, Mapping) else None
    given = status.get("qosClass") if isinstance(status, Mapping) else None
    if given in ("Guaranteed", "Burstable", "BestEffort"):
        return given  # type: ignore[no-any-return]
    spec = _pod_spec(pod)
    containers = list(_containers(spec, "containers")) + list(_containers(spec, "initContainers"))
    requests: Resources = {}
    limits: Resources = {}
    all_guaranteed = True
    for c in containers:
        raw_res = c.get("resources")
        res: Mapping[str, Any] = raw_res if isinstance(raw_res, Mapping) else {}
        req: Resources = {k: v for k, v in parse_resource_list(res.get("requests")).items() if k in RESOURCES and v > 0}
        lim: Resources = {k: v for k, v in parse_resource_list(res.get("limits")).items() if k in RESOURCES and v > 0}
        if res.get("requests") is None:
            req = dict(lim)  # requests default to limits
        _add(requests, req)
        _add(limits, lim)
        if set(lim) != set(RESOURCES) or any(req.get(k, lim[k]) != lim[k] for k in RESOURCES):
            all_guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if all_guaranteed and set(limits) == set(RESOURCES) and requests == limits:
        return "Guaranteed"
    return "Burstable"
