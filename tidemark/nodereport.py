"""NodeReport (`nodereports.colocation.tidemark.io`): what an agent wants on its own Node, and how it is applied.

Why: an agent's token must not be able to write Nodes (hardening round 2, item 3; docs/security.md, "The
agent's writes"). RBAC cannot say "only your own Node", and an admission webhook that scopes Node writes
cannot fail closed without also stopping kubelet's status updates and the node controllers' taints while
it is down. So the agent writes one object of a kind nobody else writes, named after its node; the
webhook judges those writes with `failurePolicy: Fail` (only agents are affected by an outage), and a
controller in the webhook's pods (`scheduler_ext.controller.nodereport`) copies them onto the Node:

- `spec.annotations`: the Node annotations the agent owns (`REPORT_ANNOTATIONS`, each with a length cap):
  present here = set on the Node, absent = removed from it;
- `spec.resources`: `kubernetes.io/batch-cpu`/`batch-memory`, set in the Node's capacity and allocatable
  (absent: left as they are; the agent publishes "0", never removes);
- `spec.evictingTaint`: true = the Node carries exactly one taint with the evicting key, `TAINT` (the key,
  value and effect pinned here: never NoExecute), false = none with that key, absent = left alone.

`ReportSpec` is the agent's side: what one decision wants (`agent.decide.plan` builds it, the API worker
writes it as a merge patch of the report, or, with `--node-writes direct`, straight to the Node through
`node_changes`). `node_changes` is the one definition of "applied": the controller writes what it returns,
and the agent waits until it returns nothing for the Node as read (`agent.act.report_writer`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tidemark.apis import (
    ANN_NODE_USAGE,
    ANN_OFFLINE_JOB_EVICTING,
    ANN_OVERSUBSCRIPTION_CPU,
    ANN_OVERSUBSCRIPTION_MEMORY,
    RES_BATCH_CPU,
    RES_BATCH_MEMORY,
    TAINT_OFFLINE_JOB_EVICTING,
    amount_problem,
    json_annotation,
    parse_bool,
    parse_quantity,
    short_repr,
)

GROUP: Final = "colocation.tidemark.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "nodereports"
KIND: Final = "NodeReport"
API_VERSION: Final = f"{GROUP}/{VERSION}"

#: the Node annotations an agent owns, with the longest value accepted (the agent writes far less: X as an
#: integer, "true"/"false", the usage document of about 100 bytes); the CRD schema carries the same caps
REPORT_ANNOTATIONS: Final[Mapping[str, int]] = {
    ANN_OVERSUBSCRIPTION_CPU: 32,
    ANN_OVERSUBSCRIPTION_MEMORY: 32,
    ANN_OFFLINE_JOB_EVICTING: 8,
    ANN_NODE_USAGE: 1024,
}
#: the extended resources an agent publishes in the Node's capacity and allocatable
REPORT_RESOURCES: Final = (RES_BATCH_CPU, RES_BATCH_MEMORY)
MAX_QUANTITY: Final = 32
#: the only taint ever written for an agent: NoSchedule (NoExecute would empty the node past PDBs)
TAINT: Final[Mapping[str, str]] = {"key": TAINT_OFFLINE_JOB_EVICTING, "value": "true", "effect": "NoSchedule"}
SPEC_FIELDS: Final = frozenset({"annotations", "resources", "evictingTaint"})


@dataclass(frozen=True, slots=True)
class ReportSpec:
    """What a decision wants on its Node, in the NodeReport's terms (a JSON merge patch of `spec`).

    `annotations`: keys of `REPORT_ANNOTATIONS` to set, None to remove; `resources`: `REPORT_RESOURCES` to
    set; `evicting_taint`: True/False to add/remove the pinned taint, None to leave it."""

    annotations: Mapping[str, str | None] = field(default_factory=dict)
    resources: Mapping[str, str] = field(default_factory=dict)
    evicting_taint: bool | None = None

    def empty(self) -> bool:
        return not self.annotations and not self.resources and self.evicting_taint is None

    def patch(self) -> dict[str, Any]:
        """The merge patch of the report's spec (the fields this decision sets, no others)."""
        spec: dict[str, Any] = {}
        if self.annotations:
            spec["annotations"] = dict(self.annotations)
        if self.resources:
            spec["resources"] = dict(self.resources)
        if self.evicting_taint is not None:
            spec["evictingTaint"] = self.evicting_taint
        return spec

    def merged(self, newer: ReportSpec) -> ReportSpec:
        """This intent superseded by a newer one not written yet: the newer value of each key wins."""
        taint = newer.evicting_taint if newer.evicting_taint is not None else self.evicting_taint
        return ReportSpec({**self.annotations, **newer.annotations}, {**self.resources, **newer.resources}, taint)

    def marks_evicting(self) -> bool | None:
        """True/False when it sets/removes the evicting annotation, None when it leaves it."""
        if ANN_OFFLINE_JOB_EVICTING not in self.annotations:
            return None
        return self.annotations[ANN_OFFLINE_JOB_EVICTING] is not None


def spec_problems(spec: object) -> list[str]:
    """Why a report's spec may not be applied (empty: it may): unknown fields, wrong types, values too long,
    quantities that are no non-negative Kubernetes quantity, an evicting mark that is no boolean, a usage
    annotation that is no JSON object."""
    if spec is None:
        return []
    if not isinstance(spec, Mapping):
        return ["spec must be an object"]
    out = [f"spec.{short_repr(k)} is not a field of a NodeReport" for k in spec if k not in SPEC_FIELDS]
    ann = spec.get("annotations")
    if ann is not None and not isinstance(ann, Mapping):
        out.append("spec.annotations must be an object")
    elif ann:
        for key, value in ann.items():
            cap = REPORT_ANNOTATIONS.get(key)
            where = f"spec.annotations[{short_repr(key)}]"
            if cap is None:
                out.append(f"{where}: the agent may publish only {', '.join(REPORT_ANNOTATIONS)}")
            elif not isinstance(value, str):
                out.append(f"{where} must be a string")
            elif len(value) > cap:
                out.append(f"{where} is {len(value)} characters long (at most {cap})")
            elif key == ANN_OFFLINE_JOB_EVICTING and parse_bool(value).warning:
                out.append(f"{where}={short_repr(value)} is not a boolean")
            elif key == ANN_NODE_USAGE and json_annotation(value) is None:
                out.append(f"{where} is not a JSON object")
            elif key in (ANN_OVERSUBSCRIPTION_CPU, ANN_OVERSUBSCRIPTION_MEMORY) and not value.isdigit():
                out.append(f"{where}={short_repr(value)} is not a non-negative integer")
    res = spec.get("resources")
    if res is not None and not isinstance(res, Mapping):
        out.append("spec.resources must be an object")
    elif res:
        for key, value in res.items():
            where = f"spec.resources[{short_repr(key)}]"
            if key not in REPORT_RESOURCES:
                out.append(f"{where}: the agent may publish only {', '.join(REPORT_RESOURCES)}")
            elif not isinstance(value, str) or len(value) > MAX_QUANTITY:
                out.append(f"{where} must be a quantity string of at most {MAX_QUANTITY} characters")
            elif (why := amount_problem(key, value)[1]) is not None:
                out.append(f"{where}={short_repr(value)} {why}")
    taint = spec.get("evictingTaint")
    if taint is not None and not isinstance(taint, bool):
        out.append("spec.evictingTaint must be a boolean")
    return out


def with_taint(taints: list[Any], want: bool) -> list[Any] | None:
    """The taint list with exactly `TAINT` for the evicting key (want) or none with that key; None when it
    already is so. Other taints are kept as they are, in their order."""
    ours = [t for t in taints if isinstance(t, Mapping) and t.get("key") == TAINT_OFFLINE_JOB_EVICTING]
    others = [t for t in taints if not (isinstance(t, Mapping) and t.get("key") == TAINT_OFFLINE_JOB_EVICTING)]
    if want:
        return None if ours == [dict(TAINT)] else [*others, dict(TAINT)]
    return None if not ours else others


@dataclass(frozen=True, slots=True)
class NodeChanges:
    """What a Node lacks of a report: a merge patch of the Node's annotations, one of its status, the taint."""

    annotations: dict[str, str | None]
    status: dict[str, Any]
    taint: bool | None

    def empty(self) -> bool:
        return not self.annotations and not self.status and self.taint is None


def _mapping(obj: object, *keys: str) -> Mapping[str, Any]:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj if isinstance(obj, Mapping) else {}


def node_changes(spec: Mapping[str, Any], node: Mapping[str, Any]) -> NodeChanges:
    """The writes that make `node` carry `spec` (a valid spec: `spec_problems` is empty)."""
    want_ann = _mapping(spec, "annotations")
    have_ann = _mapping(node, "metadata", "annotations")
    annotations: dict[str, str | None] = {}
    for key in REPORT_ANNOTATIONS:
        want = want_ann.get(key)
        if want != have_ann.get(key):
            annotations[key] = want if isinstance(want, str) else None
    status: dict[str, Any] = {}
    for part in ("capacity", "allocatable"):
        have = _mapping(node, "status", part)
        diff = {
            r: v
            for r, v in _mapping(spec, "resources").items()
            if r in REPORT_RESOURCES and not _same_quantity(have.get(r), v)
        }
        if diff:
            status[part] = diff
    want_taint = spec.get("evictingTaint")
    taints = _mapping(node, "spec").get("taints")
    taint: bool | None = None
    current = list(taints) if isinstance(taints, list) else []
    if isinstance(want_taint, bool) and with_taint(current, want_taint) is not None:
        taint = want_taint
    return NodeChanges(annotations, {"status": status} if status else {}, taint)


def _same_quantity(have: object, want: object) -> bool:
    """The Node holds the reported amount: the API server stores a quantity in its canonical form
    (`1424896000` reads back as `1424896k`), so amounts compare by value, anything else as it is."""
    if have == want:
        return True
    a, b = parse_quantity(have), parse_quantity(want)
    return a is not None and b is not None and a == b


def report_object(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A new NodeReport for node `name` (null values of a merge patch left out)."""
    clean: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, Mapping):
            clean[key] = {k: v for k, v in value.items() if v is not None}
        elif value is not None:
            clean[key] = value
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": clean}
