"""A stock kubelet's pod admission (1.20 `GeneralPredicates`), as a pure function.

What a stock kubelet checks before it runs a pod bound to it, and what the local pod runner repeats:
- resources (`noderesources.Fits`): the pod count, then cpu (milli-cores), memory (bytes) and every
  other requested resource (`kubernetes.io/batch-cpu`, `batch-memory`, extended resources) must fit
  `allocatable - sum(requests of the pods already admitted and not terminated)`. A pod that requests
  nothing but the pod slot is checked for the pod count only. Extended resources (names outside the
  `kubernetes.io/` domain) that the node does not list at all are ignored (kubelet's
  `removeMissingExtendedResources`: cluster-level resources); `kubernetes.io/batch-*` is a prefixed
  native name, so a node without it rejects a pod requesting it (capacity 0).
- `spec.nodeSelector` against the node's labels (predicate NodeAffinity).

A rejection is reported as kubelet does: phase Failed, reason `OutOf<resource>` (`OutOfcpu`,
`OutOfmemory`, `OutOfpods`, `OutOfkubernetes.io/batch-cpu`) or `NodeAffinity`, message
`Pod Node didn't have enough resource: <name>, requested: <n>, used: <n>, capacity: <n>`; kubelet
reports only the first failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidemark.apis import RES_CPU, RES_MEMORY, RES_PODS, parse_resource_list, pod_requests

_NATIVE_DOMAIN: Final = "kubernetes.io/"
_ORDER: Final = (RES_CPU, RES_MEMORY, "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a pod was not admitted: the kubelet status reason and message."""

    reason: str
    message: str


def is_extended_resource(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: a domain-prefixed name outside `kubernetes.io/`, not `requests.*`."""
    return "/" in name and _NATIVE_DOMAIN not in name and not name.startswith("requests.")


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _node_selector_matches(pod: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    selector = _spec(pod).get("nodeSelector")
    if not isinstance(selector, Mapping):
        return True
    return all(labels.get(k) == v for k, v in selector.items())


def admit(
    pod: Mapping[str, Any],
    admitted: Sequence[Mapping[str, Any]],
    allocatable: Mapping[str, Any],
    node_labels: Mapping[str, Any] | None = None,
) -> Rejection | None:
    """None when kubelet would admit `pod` next to the `admitted` (active) pods, else the rejection."""
    alloc = parse_resource_list(allocatable)
    want = pod_requests(pod)
    want = {k: v for k, v in want.items() if not (is_extended_resource(k) and k not in alloc)}
    used: dict[str, int] = {}
    for other in admitted:
        for k, v in pod_requests(other).items():
            used[k] = used.get(k, 0) + v

    def insufficient(name: str, requested: int) -> Rejection:
        message = (
            f"Node didn't have enough resource: {name}, requested: {requested}, used: {used.get(name, 0)}, "
            f"capacity: {alloc.get(name, 0)}"
        )
        return Rejection(f"OutOf{name}", f"Pod {message}")

    allowed_pods = alloc.get(RES_PODS, 0)
    if len(admitted) + 1 > allowed_pods:
        return Rejection(
            f"OutOf{RES_PODS}",
            f"Pod Node didn't have enough resource: {RES_PODS}, requested: 1, used: {len(admitted)}, "
            f"capacity: {allowed_pods}",
        )
    names = [n for n in _ORDER if n in want] + sorted(n for n in want if n not in _ORDER and n != RES_PODS)
    for name in names:
        requested = want[name]
        if requested <= 0:
            continue
        if requested > alloc.get(name, 0) - used.get(name, 0):
            return insufficient(name, requested)
    if not _node_selector_matches(pod, node_labels or {}):
        return Rejection("NodeAffinity", "Pod Predicate NodeAffinity failed")
    return None
