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
  value and effect pinned here: never NoExecute), false = none with that key, absent = left alone;
- `spec.evictions`: the offline pods of this node the agent asks the controller to evict, and `status.evictions`
  the controller's answers (`tidemark.evictionasks`): the agent holds no eviction right.

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
    MAX_PUBLISHED_CHARS,
    RES_BATCH_CPU,
    RES_BATCH_MEMORY,
    RES_CPU,
    RES_MEMORY,
    TAINT_OFFLINE_JOB_EVICTING,
    json_annotation,
    parse_bool,
    parse_quantity,
    published_batch,
    published_x,
    quantity_to_int,
    quantity_to_milli,
    short_repr,
)
from tidemark.evictionasks import asks_problems

GROUP: Final = "colocation.tidemark.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "nodereports"
KIND: Final = "NodeReport"
API_VERSION: Final = f"{GROUP}/{VERSION}"

#: the Node annotations an agent owns, with the longest value accepted (the agent writes far less: X as an
#: integer, "true"/"false", the usage document of about 100 bytes); the CRD schema carries the same caps
REPORT_ANNOTATIONS: Final[Mapping[str, int]] = {
    ANN_OVERSUBSCRIPTION_CPU: MAX_PUBLISHED_CHARS,
    ANN_OVERSUBSCRIPTION_MEMORY: MAX_PUBLISHED_CHARS,
    ANN_OFFLINE_JOB_EVICTING: 8,
    ANN_NODE_USAGE: 1024,
}
#: the extended resources an agent publishes in the Node's capacity and allocatable
REPORT_RESOURCES: Final = (RES_BATCH_CPU, RES_BATCH_MEMORY)
MAX_QUANTITY: Final = MAX_PUBLISHED_CHARS
#: the published amounts (X, batch-*) and the node resource that bounds each: X and batch-* are parts of what the
#: node has (docs/design.md, "Capacity model"), so none may exceed the Node's capacity times
#: NODE_CEILING (issue 33, item 4: an agent published 9e12 cores on its own node)
BOUNDED_BY: Final[Mapping[str, str]] = {
    ANN_OVERSUBSCRIPTION_CPU: RES_CPU,
    ANN_OVERSUBSCRIPTION_MEMORY: RES_MEMORY,
    RES_BATCH_CPU: RES_CPU,
    RES_BATCH_MEMORY: RES_MEMORY,
}
NODE_CEILING: Final = 1
#: the only taint ever written for an agent: NoSchedule (NoExecute would empty the node past PDBs)
TAINT: Final[Mapping[str, str]] = {"key": TAINT_OFFLINE_JOB_EVICTING, "value": "true", "effect": "NoSchedule"}
SPEC_FIELDS: Final = frozenset({"annotations", "resources", "evictingTaint", "evictions"})


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
            elif key in (ANN_OVERSUBSCRIPTION_CPU, ANN_OVERSUBSCRIPTION_MEMORY) and (why := published_x(value)[1]):
                out.append(f"{where}={short_repr(value)} {why}")
    res = spec.get("resources")
    if res is not None and not isinstance(res, Mapping):
        out.append("spec.resources must be an object")
    elif res:
        for key, value in res.items():
            where = f"spec.resources[{short_repr(key)}]"
            if key not in REPORT_RESOURCES:
                out.append(f"{where}: the agent may publish only {', '.join(REPORT_RESOURCES)}")
            elif not isinstance(value, str):
                out.append(f"{where} must be a quantity string of at most {MAX_QUANTITY} characters")
            elif (why := published_batch(key, value)[1]) is not None:
                out.append(f"{where}={short_repr(value)} {why}")
    taint = spec.get("evictingTaint")
    if taint is not None and not isinstance(taint, bool):
        out.append("spec.evictingTaint must be a boolean")
    out += asks_problems(spec.get("evictions"))
    return out


def published_amount(key: str, value: object) -> int | None:
    """A published value in its unit (milli-cores, bytes), by the one grammar; None when malformed."""
    if key in REPORT_RESOURCES:
        return published_batch(key, value)[0]
    return published_x(value)[0]


def node_bounds(node: Mapping[str, Any]) -> dict[str, int]:
    """The largest value of each key of `BOUNDED_BY` on this Node: its capacity (milli-cores, bytes) times
    NODE_CEILING (its allocatable when it states no capacity, as the scheduler reads it). A resource the Node does
    not state (kubelet always does) bounds nothing beyond the grammar."""
    capacity = _mapping(node, "status", "capacity") or _mapping(node, "status", "allocatable")
    have = {
        RES_CPU: quantity_to_milli(capacity.get(RES_CPU)),
        RES_MEMORY: quantity_to_int(capacity.get(RES_MEMORY)),
    }
    return {key: max(0, v) * NODE_CEILING for key, r in BOUNDED_BY.items() if (v := have[r]) is not None}


def _published(spec: Mapping[str, Any]) -> dict[str, tuple[str, object]]:
    """key -> (where, value) of every bounded value the spec publishes."""
    out: dict[str, tuple[str, object]] = {}
    for part in ("annotations", "resources"):
        for key, value in _mapping(spec, part).items():
            if key in BOUNDED_BY and value is not None:
                out[key] = (f"spec.{part}[{key}]", value)
    return out


def publishes_amounts(spec: object) -> bool:
    """The spec publishes X or batch-* (the values `bound_problems` judges against the Node)."""
    return isinstance(spec, Mapping) and bool(_published(spec))


def bound_problems(spec: object, node: Mapping[str, Any]) -> list[str]:
    """The published values beyond what the Node has (`node_bounds`), each with the bound it breaks."""
    if not isinstance(spec, Mapping):
        return []
    bounds = node_bounds(node)
    out = []
    for key, (where, value) in _published(spec).items():
        amount = published_amount(key, value)
        if amount is not None and key in bounds and amount > bounds[key]:
            unit = "milli-cores" if BOUNDED_BY[key] == RES_CPU else "bytes"
            out.append(f"{where}={short_repr(value)} is more than the node has: at most {bounds[key]} ({unit}: "
                       f"the Node's capacity {BOUNDED_BY[key]} x {NODE_CEILING})")
    return out


def clamped(spec: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with every published value beyond the Node's bound lowered to it (the controller's last line,
    for a report no webhook judged)."""
    bounds = node_bounds(node)
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in spec.items()}
    for key in _published(spec):
        part = "resources" if key in REPORT_RESOURCES else "annotations"
        amount = published_amount(key, out[part][key])
        if amount is not None and key in bounds and amount > bounds[key]:
            out[part][key] = str(bounds[key])
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


# --- the report's Node: an ownerReference, so that a report dies with its Node (issue 33, item 10) ----------


def owner_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """The report's owner: its Node by uid. The garbage collector deletes the report with the Node; a Node
    registered again under the same name is another object (another uid), which the old report does not own."""
    md = _mapping(node, "metadata")
    return {"apiVersion": "v1", "kind": "Node", "name": md.get("name"), "uid": md.get("uid")}


def _node_owners(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    refs = _mapping(report, "metadata").get("ownerReferences")
    return [r for r in refs if isinstance(r, Mapping) and r.get("kind") == "Node"] if isinstance(refs, list) else []


def report_is_stale(report: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The report belongs to an earlier Node of the same name: it names another Node uid as its owner, or (a
    report without an owner, written before owners were set) it is older than the Node."""
    uid = _mapping(node, "metadata").get("uid")
    owners = _node_owners(report)
    if owners:
        return all(o.get("uid") != uid for o in owners)
    made = _mapping(report, "metadata").get("creationTimestamp")
    born = _mapping(node, "metadata").get("creationTimestamp")
    return isinstance(made, str) and isinstance(born, str) and made < born  # RFC 3339 in UTC: text order is time order


def report_is_owned(report: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    uid = _mapping(node, "metadata").get("uid")
    return any(o.get("uid") == uid for o in _node_owners(report))


def withdrawal(node: Mapping[str, Any]) -> NodeChanges:
    """The writes that remove every value an agent publishes from `node` (a Node registered again: what it
    carries of them came from the dead Node's report): the annotations, batch-* in capacity and allocatable,
    the evicting taint."""
    have_ann = _mapping(node, "metadata", "annotations")
    annotations: dict[str, str | None] = {k: None for k in REPORT_ANNOTATIONS if k in have_ann}
    status: dict[str, Any] = {}
    for part in ("capacity", "allocatable"):
        gone = {r: None for r in REPORT_RESOURCES if r in _mapping(node, "status", part)}
        if gone:
            status[part] = gone
    taints = _mapping(node, "spec").get("taints")
    taint = False if with_taint(list(taints) if isinstance(taints, list) else [], False) is not None else None
    return NodeChanges(annotations, {"status": status} if status else {}, taint)
