"""Inter-pod (anti-)affinity and pod topology spread, as kube-scheduler's plugins evaluate them.

Pods are seen through TaskInfo (namespace, labels, pod spec, node) and nodes through their labels;
"existing pods" are the pods of kube-scheduler's node view (NodeTable.kube_pods).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_ext.affinity.labels import match_label_selector
from scheduler_ext.api.task import TaskInfo


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A PodAffinityTerm: which pods (namespaces + selector) and the topology key; weight for preferred."""

    namespaces: frozenset[str] | None  # None = all namespaces
    selector: Mapping[str, Any] | None
    topology_key: str
    weight: int = 0

    def matches(self, namespace: str, labels: Mapping[str, Any]) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return match_label_selector(self.selector, labels)


def _term(raw: Mapping[str, Any], own_ns: str, weight: int = 0) -> AffinityTerm:
    nss = [str(n) for n in raw.get("namespaces") or []]
    ns_sel = raw.get("namespaceSelector")
    namespaces: frozenset[str] | None
    if ns_sel is not None and not (ns_sel.get("matchLabels") or ns_sel.get("matchExpressions")):
        namespaces = None  # {} selects every namespace
    elif not nss and ns_sel is None:
        namespaces = frozenset({own_ns})
    else:
        # namespace labels are not known here: a non-empty namespaceSelector adds no namespace
        namespaces = frozenset(nss)
    return AffinityTerm(namespaces, raw.get("labelSelector"), str(raw.get("topologyKey") or ""), weight)


@dataclass(frozen=True, slots=True)
class PodAffinity:
    required_affinity: tuple[AffinityTerm, ...]
    required_anti_affinity: tuple[AffinityTerm, ...]
    preferred_affinity: tuple[AffinityTerm, ...]
    preferred_anti_affinity: tuple[AffinityTerm, ...]

    def empty(self) -> bool:
        return not (
            self.required_affinity
            or self.required_anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )


_EMPTY = PodAffinity((), (), (), ())


def pod_affinity(task: TaskInfo) -> PodAffinity:
    """The task's parsed pod (anti-)affinity terms, cached on the task."""
    hit = task.cache.get("pod_affinity")
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    aff = (task.pod.get("spec") or {}).get("affinity") or {}
    pa = aff.get("podAffinity") or {}
    paa = aff.get("podAntiAffinity") or {}
    if not pa and not paa:
        task.cache["pod_affinity"] = _EMPTY
        return _EMPTY
    ns = task.namespace

    def req(block: Mapping[str, Any]) -> tuple[AffinityTerm, ...]:
        return tuple(_term(t, ns) for t in block.get("requiredDuringSchedulingIgnoredDuringExecution") or [])

    def pref(block: Mapping[str, Any]) -> tuple[AffinityTerm, ...]:
        return tuple(
            _term(w.get("podAffinityTerm") or {}, ns, int(w.get("weight") or 0))
            for w in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        )

    result = PodAffinity(req(pa), req(paa), pref(pa), pref(paa))
    task.cache["pod_affinity"] = result
    return result


def _terminating(task: TaskInfo) -> bool:
    return bool((task.pod.get("metadata") or {}).get("deletionTimestamp"))


# --- filter ------------------------------------------------------------------------------------

AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"


def _domains(
    terms: Sequence[AffinityTerm],
    node_labels: Sequence[Mapping[str, Any]],
    pods_by_node: Sequence[Mapping[Any, TaskInfo]],
    exclude: TaskInfo,
) -> list[dict[str, int]]:
    """Per term: topology value -> number of existing pods matching the term in that domain."""
    out: list[dict[str, int]] = [{} for _ in terms]
    for i, pods in enumerate(pods_by_node):
        if not pods:
            continue
        labels = node_labels[i]
        for t in pods.values():
            if t.uid == exclude.uid:
                continue
            for k, term in enumerate(terms):
                if term.topology_key in labels and term.matches(t.namespace, t.labels):
                    v = str(labels[term.topology_key])
                    out[k][v] = out[k].get(v, 0) + 1
    return out


def existing_anti_affinity_domains(
    task: TaskInfo,
    node_labels: Sequence[Mapping[str, Any]],
    anti_pods: Iterable[tuple[int, TaskInfo]],
) -> set[tuple[str, str]]:
    """(topology key, value) pairs where an existing pod's required anti-affinity rejects `task`."""
    out: set[tuple[str, str]] = set()
    for node_idx, other in anti_pods:
        if other.uid == task.uid:
            continue
        labels = node_labels[node_idx]
        for term in pod_affinity(other).required_anti_affinity:
            if term.topology_key in labels and term.matches(task.namespace, task.labels):
                out.add((term.topology_key, str(labels[term.topology_key])))
    return out


def filter_pod_affinity(
    task: TaskInfo,
    candidates: Sequence[int],
    node_labels: Sequence[Mapping[str, Any]],
    pods_by_node: Sequence[Mapping[Any, TaskInfo]],
    anti_pods: Iterable[tuple[int, TaskInfo]],
) -> dict[int, tuple[str, bool]]:
    """Failing candidates -> (reason, unresolvable) for kube-scheduler's InterPodAffinity filter."""
    aff = pod_affinity(task)
    failures: dict[int, tuple[str, bool]] = {}
    forbidden: dict[str, set[str]] = {}  # topology key -> values: one lookup per key, not per pair
    for fk, fv in existing_anti_affinity_domains(task, node_labels, anti_pods):
        forbidden.setdefault(fk, set()).add(fv)
    req_aff, req_anti = aff.required_affinity, aff.required_anti_affinity
    aff_domains = _domains(req_aff, node_labels, pods_by_node, task) if req_aff else []
    anti_domains = _domains(req_anti, node_labels, pods_by_node, task) if req_anti else []
    no_affinity_pods = all(not d for d in aff_domains)
    self_match = all(t.matches(task.namespace, task.labels) for t in req_aff)
    for i in candidates:
        labels = node_labels[i]
        if forbidden and any(labels.get(k) is not None and str(labels[k]) in vs for k, vs in forbidden.items()):
            failures[i] = (EXISTING_ANTI_AFFINITY_NOT_MATCH, False)
            continue
        if req_anti and any(
            t.topology_key in labels and anti_domains[k].get(str(labels[t.topology_key]), 0) > 0
            for k, t in enumerate(req_anti)
        ):
            failures[i] = (ANTI_AFFINITY_RULES_NOT_MATCH, False)
            continue
        if req_aff:
            ok = all(
                t.topology_key in labels and aff_domains[k].get(str(labels[t.topology_key]), 0) > 0
                for k, t in enumerate(req_aff)
            )
            # the first pod of a group that selects itself may go anywhere with the topology keys
            first_of_group = no_affinity_pods and self_match and all(t.topology_key in labels for t in req_aff)
            if not ok and not first_of_group:
                failures[i] = (AFFINITY_RULES_NOT_MATCH, True)
    return failures


# --- scores ------------------------------------------------------------------------------------


def score_pod_affinity(
    task: TaskInfo,
    candidates: Sequence[int],
    node_labels: Sequence[Mapping[str, Any]],
    pods_by_node: Sequence[Mapping[Any, TaskInfo]],
    affinity_pods: Iterable[tuple[int, TaskInfo]],
    hard_pod_affinity_weight: int = 1,
) -> list[float] | None:
    """Raw InterPodAffinity scores (None when the plugin skips: no affinity anywhere).

    The incoming pod's preferred terms are matched against every existing pod; existing pods' terms
    come only from `affinity_pods` (the pods that have any), which keeps the common case cheap.
    """
    aff = pod_affinity(task)
    existing = [(i, o) for i, o in affinity_pods if o.uid != task.uid]
    if not aff.preferred_affinity and not aff.preferred_anti_affinity and not existing:
        return None
    topology_score: dict[tuple[str, str], float] = {}

    def add(term: AffinityTerm, labels: Mapping[str, Any], w: float) -> None:
        if term.topology_key in labels:
            key = (term.topology_key, str(labels[term.topology_key]))
            topology_score[key] = topology_score.get(key, 0.0) + w

    if aff.preferred_affinity or aff.preferred_anti_affinity:
        for i, pods in enumerate(pods_by_node):
            if not pods:
                continue
            labels = node_labels[i]
            for other in pods.values():
                if other.uid == task.uid:
                    continue
                for t in aff.preferred_affinity:
                    if t.matches(other.namespace, other.labels):
                        add(t, labels, t.weight)
                for t in aff.preferred_anti_affinity:
                    if t.matches(other.namespace, other.labels):
                        add(t, labels, -t.weight)
    for i, other in existing:
        labels = node_labels[i]
        oa = pod_affinity(other)
        if hard_pod_affinity_weight > 0:
            for t in oa.required_affinity:
                if t.matches(task.namespace, task.labels):
                    add(t, labels, hard_pod_affinity_weight)
        for t in oa.preferred_affinity:
            if t.matches(task.namespace, task.labels):
                add(t, labels, t.weight)
        for t in oa.preferred_anti_affinity:
            if t.matches(task.namespace, task.labels):
                add(t, labels, -t.weight)
    if not topology_score:
        return [0.0] * len(candidates)
    out = []
    for i in candidates:
        labels = node_labels[i]
        s = 0.0
        for (k, v), w in topology_score.items():
            if k in labels and str(labels[k]) == v:
                s += w
        out.append(float(int(s)))
    return out


def normalize_min_max(scores: list[float]) -> list[float]:
    """InterPodAffinity NormalizeScore: 100 * (s - min) / (max - min), 0 when all equal."""
    if not scores:
        return scores
    lo, hi = min(scores), max(scores)
    diff = hi - lo
    return [float(int(100.0 * (s - lo) / diff)) if diff > 0 else 0.0 for s in scores]


def default_normalize(scores: list[float], reverse: bool, max_priority: float = 100.0) -> list[float]:
    """kube-scheduler's DefaultNormalizeScore (integer arithmetic)."""
    hi = max(scores) if scores else 0.0
    if hi == 0:
        return [max_priority] * len(scores) if reverse else list(scores)
    out = []
    for s in scores:
        v = float(int(max_priority * s // hi))
        out.append(max_priority - v if reverse else v)
    return out


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: Mapping[str, Any] | None
    min_domains: int | None


def spread_constraints(task: TaskInfo, when: str) -> list[SpreadConstraint]:
    out = []
    for c in (task.pod.get("spec") or {}).get("topologySpreadConstraints") or []:
        if (c.get("whenUnsatisfiable") or "DoNotSchedule") != when:
            continue
        md = c.get("minDomains")
        out.append(
            SpreadConstraint(
                int(c.get("maxSkew") or 1),
                str(c.get("topologyKey") or ""),
                when,
                c.get("labelSelector"),
                int(md) if isinstance(md, int) else None,
            )
        )
    return out


def _spread_counts(
    task: TaskInfo,
    constraints: Sequence[SpreadConstraint],
    eligible: Sequence[int],
    node_labels: Sequence[Mapping[str, Any]],
    pods_by_node: Sequence[Mapping[Any, TaskInfo]],
) -> list[dict[str, int]]:
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for i in eligible:
        labels = node_labels[i]
        if not all(c.topology_key in labels for c in constraints):
            continue
        for k, c in enumerate(constraints):
            v = str(labels[c.topology_key])
            n = 0
            for other in pods_by_node[i].values():
                if other.uid == task.uid or other.namespace != task.namespace or _terminating(other):
                    continue
                if match_label_selector(c.selector, other.labels):
                    n += 1
            counts[k][v] = counts[k].get(v, 0) + n
    return counts


MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"


def filter_topology_spread(
    task: TaskInfo,
    candidates: Sequence[int],
    eligible: Sequence[int],
    node_labels: Sequence[Mapping[str, Any]],
    pods_by_node: Sequence[Mapping[Any, TaskInfo]],
) -> dict[int, tuple[str, bool]]:
    """PodTopologySpread filter for DoNotSchedule constraints; eligible = nodes passing node affinity."""
    constraints = spread_constraints(task, "DoNotSchedule")
    if not constraints:
        return {}
    counts = _spread_counts(task, constraints, eligible, node_labels, pods_by_node)
    failures: dict[int, tuple[str, bool]] = {}
    for i in candidates:
        labels = node_labels[i]
        for k, c in enumerate(constraints):
            if c.topology_key not in labels:
                failures[i] = (MISSING_LABEL, True)
                break
            domain_counts = counts[k]
            min_match = min(domain_counts.values()) if domain_counts else 0
            if c.min_domains is not None and len(domain_counts) < c.min_domains:
                min_match = 0
            self_match = 1 if match_label_selector(c.selector, task.labels) else 0
            cnt = domain_counts.get(str(labels[c.topology_key]), 0)
            if cnt + self_match - min_match > c.max_skew:
                failures[i] = (CONSTRAINTS_NOT_MATCH, False)
                break
    return failures


def score_topology_spread(
    task: TaskInfo,
    candidates: Sequence[int],
    eligible: Sequence[int],
    node_labels: Sequence[Mapping[str, Any]],
    pods_by_node: Sequence[Mapping[Any, TaskInfo]],
) -> list[float] | None:
    """PodTopologySpread score (already normalized) for ScheduleAnyway constraints; None = skip."""
    constraints = spread_constraints(task, "ScheduleAnyway")
    if not constraints:
        return None
    counts = _spread_counts(task, constraints, eligible, node_labels, pods_by_node)
    weights = []
    for c in constraints:
        values = {str(node_labels[i][c.topology_key]) for i in candidates if c.topology_key in node_labels[i]}
        weights.append(math.log(len(values) + 2))
    raw: list[float | None] = []
    for i in candidates:
        labels = node_labels[i]
        if not all(c.topology_key in labels for c in constraints):
            raw.append(None)
            continue
        s = 0.0
        for k, c in enumerate(constraints):
            cnt = counts[k].get(str(labels[c.topology_key]), 0)
            s += cnt * weights[k] + (c.max_skew - 1)
        raw.append(float(math.floor(s + 0.5)))
    present = [s for s in raw if s is not None]
    if not present:
        return [0.0] * len(candidates)
    hi, lo = max(present), min(present)
    out = []
    for rs in raw:
        if rs is None:
            out.append(0.0)
        elif hi == 0:
            out.append(100.0)
        else:
            out.append(float(int(100.0 * (hi + lo - rs) / hi)))
    return out
