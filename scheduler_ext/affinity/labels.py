"""Label selectors, node selectors and tolerations, as Kubernetes evaluates them (pure functions)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

UNSCHEDULABLE_TAINT_KEY: Final = "node.kubernetes.io/unschedulable"


_EMPTY_JSON: Final = {type(None): "null", list: "[]", dict: "{}"}


def shape_key(*parts: Any) -> str:
    """A canonical string for pod-spec fragments, used to share predicate results between pods."""
    if all(not p and type(p) in _EMPTY_JSON for p in parts):
        # the common pod (no selector, affinity or tolerations): json.dumps' own text, without json
        return "[" + ",".join(_EMPTY_JSON[type(p)] for p in parts) + "]"
    return json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)


def _as_str(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, Any]) -> bool:
    """metav1.LabelSelector: None matches nothing, {} matches everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if k not in labels or _as_str(labels[k]) != _as_str(v):
            return False
    for expr in selector.get("matchExpressions") or []:
        key = expr.get("key", "")
        op = expr.get("operator", "")
        values = [_as_str(v) for v in expr.get("values") or []]
        present = key in labels
        if op == "In":
            if not present or _as_str(labels[key]) not in values:
                return False
        elif op == "NotIn":
            if present and _as_str(labels[key]) in values:
                return False
        elif op == "Exists":
            if not present:
                return False
        elif op == "DoesNotExist":
            if present:
                return False
        else:
            return False
    return True


def _match_requirement(expr: Mapping[str, Any], value: str | None) -> bool:
    op = expr.get("operator", "")
    values = [_as_str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have = int(value)
            want = int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selector_term_matches(term: Mapping[str, Any], labels: Mapping[str, Any], node_name: str) -> bool:
    """A NodeSelectorTerm: matchExpressions on labels AND matchFields on metadata.name; empty matches nothing."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for expr in exprs:
        key = expr.get("key", "")
        if not _match_requirement(expr, _as_str(labels[key]) if key in labels else None):
            return False
    for f in fields:
        if f.get("key") != "metadata.name":
            return False
        if not _match_requirement(f, node_name):
            return False
    return True


def required_node_affinity(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The required NodeSelectorTerms, or None when the pod has no required node affinity."""
    aff = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if aff is None:
        return None
    return list(aff.get("nodeSelectorTerms") or [])


def preferred_node_affinity(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    aff = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    return list(aff.get("preferredDuringSchedulingIgnoredDuringExecution") or [])


def node_matches_pod_affinity_selector(pod_spec: Mapping[str, Any], labels: Mapping[str, Any], node_name: str) -> bool:
    """nodeSelector and required node affinity (kube-scheduler's NodeAffinity filter)."""
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if k not in labels or _as_str(labels[k]) != _as_str(v):
            return False
    terms = required_node_affinity(pod_spec)
    if terms is None:
        return True
    return any(node_selector_term_matches(t, labels, node_name) for t in terms)


def toleration_tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint."""
    effect = tol.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = tol.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return _as_str(tol.get("value") or "") == _as_str(taint.get("value") or "")
    return False


def tolerates_taint(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    return any(toleration_tolerates(t, taint) for t in tolerations)


def first_untolerated_taint(
    taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]], effects: tuple[str, ...]
) -> Mapping[str, Any] | None:
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not tolerates_taint(tolerations, taint):
            return taint
    return None


def pod_tolerations(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in pod_spec.get("tolerations") or [] if isinstance(t, Mapping)]


def host_ports(pod_spec: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(hostIP, protocol, hostPort) the pod asks for (containers and init containers)."""
    out: list[tuple[str, str, int]] = []
    for key in ("initContainers", "containers"):
        for c in pod_spec.get(key) or []:
            for p in (c or {}).get("ports") or []:
                hp = p.get("hostPort")
                if isinstance(hp, int) and hp > 0:
                    out.append((str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), hp))
    return out


def ports_conflict(want: Sequence[tuple[str, str, int]], used: Sequence[tuple[str, str, int]]) -> bool:
    for ip, proto, port in want:
        for uip, uproto, uport in used:
            if port == uport and proto == uproto and (ip == uip or ip == "0.0.0.0" or uip == "0.0.0.0"):
                return True
    return False
