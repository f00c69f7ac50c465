"""ColocationProfile (`colocationprofiles.colocation.tidemark.io`): namespaces or workloads offline, pods unedited.

A cluster-scoped object (daemonset/crds/colocationprofiles.yaml; docs/colocation-profiles.md) that says which
pods (`namespaceSelector`, `selector`: LabelSelectors; `probability`: 0-100 percent of the workloads) get what
(`qosLevel`, `schedulerName`, `priorityClassName`, `labels`, `annotations`, `batchResources`). The webhook
applies the matching profiles to a pod at CREATE (never on update); `tidemark-scheduler simulate` and
`tidemark-agent plan` apply the profiles of a cluster file the same way. Pure: no I/O, so both programs use it.

Decisions, each with its reason:

- probability: a pod is in when `bucket(pod) < probability`, the bucket a SHA-256 of
  `namespace/<workload key>` modulo 100, where the workload key is the controller owner's `kind/name`
  (a ReplicaSet, a Job, a Spark driver pod), else `generateName`, else the pod's name. Deterministic: the same
  pod (or a pod its controller recreates) always lands in the same bucket, so its class never changes on
  re-admission; and all pods of one workload land together (half a gang offline is worse than none).
- order: matching profiles are applied in order of name. A field two profiles set differently is a conflict:
  the first profile (by name) keeps it, and the pod carries `ANN_CONFLICTS` naming the field and the
  profiles (never silently merged). `ANN_PROFILE` lists the profiles applied (comma-separated, in order).
- batchResources: `cpu` and `memory` in the requests and limits of every container and init container become
  `kubernetes.io/batch-cpu` (milli-cores) and `kubernetes.io/batch-memory` (bytes); a batch amount the
  container already names is kept (its `cpu`/`memory` is dropped); a container without requests gets none.
- priorityClassName: set together with `spec.priority` (the class's value, looked up by the caller) and
  `spec.preemptionPolicy` (the class's): the API server resolved both before the webhook ran, and a pod whose
  priority or preemption policy does not match its class is refused when the Priority plugin runs again (a
  class with `preemptionPolicy: Never` refused every selected pod). A class that does not exist is not set (a
  warning says so).
- labels: added, never overwritten: a label the pod already has with another value is kept (a warning says
  so), since the pod's controller may select on it (an overwritten selector label made the ReplicaSet release
  the pod and create another, in a loop).
- validation: a stored profile is checked once per (uid, resourceVersion), not once per pod (`is_valid`).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tidemark.apis import (
    ANN_QOS_LEVEL,
    QOS_MAX,
    QOS_MIN,
    QOS_NAMED,
    RES_BATCH_CPU,
    RES_BATCH_MEMORY,
    RES_CPU,
    RES_MEMORY,
    dns1123_subdomain_problem,
    quantity_to_int,
    quantity_to_milli,
    short_repr,
)
from tidemark.shapes import shape_problems

GROUP: Final = "colocation.tidemark.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "colocationprofiles"
KIND: Final = "ColocationProfile"
#: on a mutated pod: the profiles applied, comma-separated, in the order applied
ANN_PROFILE: Final = "tidemark.io/colocation-profile"
#: on a mutated pod when two profiles set one field differently: `field: first (kept), second; ...`
ANN_CONFLICTS: Final = "tidemark.io/colocation-profile-conflicts"
#: the annotations a profile may not set through `annotations` (they have their own fields, or are the webhook's)
RESERVED_ANNOTATIONS: Final = frozenset({ANN_QOS_LEVEL, ANN_PROFILE, ANN_CONFLICTS})
SPEC_FIELDS: Final = frozenset({
    "namespaceSelector", "selector", "probability", "qosLevel", "schedulerName", "priorityClassName", "labels",
    "annotations", "batchResources",
})
OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
#: matched with fullmatch, never match: `$` also matches before a trailing newline, which the API server refuses
_NAME_RE: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_INT_RE: Final = re.compile(r"[+-]?[0-9]{1,2}")
MAX_ENTRIES: Final = 64
#: a PriorityClass's preemptionPolicy values (NonPreemptingPriority, beta and on since 1.19)
PREEMPTION_POLICIES: Final = frozenset({"PreemptLowerPriority", "Never"})

PriorityLookup = Callable[[str], int | None]
#: a PriorityClass's `preemptionPolicy` (None: the class or the field is absent)
PolicyLookup = Callable[[str], str | None]


# --- names and selectors --------------------------------------------------------------------------


def qualified_name_problem(key: object) -> str | None:
    """Kubernetes' qualified name (a label or annotation key): `[prefix/]name`, name <= 63 characters."""
    if not isinstance(key, str) or not key:
        return "must be a non-empty string"
    prefix, _, name = key.rpartition("/")
    if "/" in key and (why := dns1123_subdomain_problem(prefix)):
        return f"prefix {short_repr(prefix)}: {why}"
    if len(name) > 63 or not _NAME_RE.fullmatch(name):
        return "must be 63 characters or fewer, alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    return None


def label_value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if value and (len(value) > 63 or not _NAME_RE.fullmatch(value)):
        return "must be empty or 63 characters or fewer, alphanumerics, '-', '_' or '.', alphanumeric at both ends"
    return None


def selector_problems(where: str, sel: object) -> list[str]:
    """The problems of a LabelSelector at `where` (`spec.selector`), each naming its field."""
    if sel is None:
        return []
    if not isinstance(sel, Mapping):
        return [f"{where} must be a LabelSelector (matchLabels, matchExpressions)"]
    out = [f"{where}.{k}: unknown field" for k in sel if k not in ("matchLabels", "matchExpressions")]
    labels = sel.get("matchLabels")
    if labels is not None and not isinstance(labels, Mapping):
        out.append(f"{where}.matchLabels must be a mapping of label keys to values")
    for k, v in (labels or {}).items() if isinstance(labels, Mapping) else ():
        if why := qualified_name_problem(k):
            out.append(f"{where}.matchLabels: key {short_repr(k)} {why}")
        if why := label_value_problem(v):
            out.append(f"{where}.matchLabels[{k}]={short_repr(v)} {why}")
    exprs = sel.get("matchExpressions")
    if exprs is not None and not isinstance(exprs, list):
        return [*out, f"{where}.matchExpressions must be a list"]
    for i, e in enumerate(exprs or []):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(e, Mapping):
            out.append(f"{at} must be a mapping (key, operator, values)")
            continue
        if why := qualified_name_problem(e.get("key")):
            out.append(f"{at}.key={short_repr(e.get('key'))} {why}")
        op, values = e.get("operator"), e.get("values")
        if op not in OPERATORS:
            out.append(f"{at}.operator={short_repr(op)} must be one of In, NotIn, Exists, DoesNotExist")
        elif op in ("In", "NotIn") and (not isinstance(values, list) or not values):
            out.append(f"{at}.values must be a non-empty list for operator {op}")
        elif op in ("Exists", "DoesNotExist") and values:
            out.append(f"{at}.values must be empty for operator {op}")
        for j, v in enumerate(values if isinstance(values, list) else []):
            if why := label_value_problem(v):
                out.append(f"{at}.values[{j}]={short_repr(v)} {why}")
    return out


def selector_matches(sel: Mapping[str, Any] | None, labels: Mapping[str, Any] | None) -> bool:
    """LabelSelector semantics: absent or empty matches everything; every term must hold (valid selectors only)."""
    labels = labels or {}
    if not sel:
        return True
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


# --- the profile itself -----------------------------------------------------------------------------


def qos_level_problem(raw: object) -> str | None:
    """None for a qos-level value (LC, HLS, LS, BE or an integer -7..7, as a string)."""
    if isinstance(raw, str) and (raw in QOS_NAMED or (_INT_RE.fullmatch(raw) and QOS_MIN <= int(raw) <= QOS_MAX)):
        return None
    return f"must be LC, HLS, LS, BE or an integer {QOS_MIN}..{QOS_MAX} as a string (offline: BE or -7..-1)"


def profile_problems(obj: Mapping[str, Any]) -> list[str]:
    """Every problem of a ColocationProfile, each naming its field; [] for a valid one."""
    md = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    out: list[str] = []
    if why := dns1123_subdomain_problem((md or {}).get("name")):
        out.append(f"metadata.name: {why}")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [*out, "spec must be a mapping"]
    out += [f"spec.{k}: unknown field" for k in spec if k not in SPEC_FIELDS]
    out += selector_problems("spec.namespaceSelector", spec.get("namespaceSelector"))
    out += selector_problems("spec.selector", spec.get("selector"))
    p = spec.get("probability")
    if p is not None and (not isinstance(p, int) or isinstance(p, bool) or not 0 <= p <= 100):
        out.append(f"spec.probability={short_repr(p)} must be an integer 0..100 (percent)")
    if "qosLevel" in spec and (why := qos_level_problem(spec["qosLevel"])):
        out.append(f"spec.qosLevel={short_repr(spec['qosLevel'])} {why}")
    for name in ("schedulerName", "priorityClassName"):
        if name in spec and (why := dns1123_subdomain_problem(spec[name])):
            out.append(f"spec.{name}={short_repr(spec[name])}: {why}")
    b = spec.get("batchResources")
    if b is not None and not isinstance(b, bool):
        out.append(f"spec.batchResources={short_repr(b)} must be true or false")
    out += _map_problems("spec.labels", spec.get("labels"), label_value_problem)
    out += _map_problems("spec.annotations", spec.get("annotations"), _annotation_value_problem)
    for k in spec.get("annotations") or {} if isinstance(spec.get("annotations"), Mapping) else ():
        if k in RESERVED_ANNOTATIONS:
            use = "spec.qosLevel" if k == ANN_QOS_LEVEL else "nothing: the webhook writes it"
            out.append(f"spec.annotations: {k} is reserved (use {use})")
    return out


def _annotation_value_problem(value: object) -> str | None:
    return None if isinstance(value, str) and len(value) <= 4096 else "must be a string of at most 4096 characters"


def _map_problems(where: str, raw: object, value_problem: Callable[[object], str | None]) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        return [f"{where} must be a mapping of keys to strings"]
    out = [f"{where} has {len(raw)} entries, more than {MAX_ENTRIES}"] if len(raw) > MAX_ENTRIES else []
    for k, v in raw.items():
        if why := qualified_name_problem(k):
            out.append(f"{where}: key {short_repr(k)} {why}")
        if why := value_problem(v):
            out.append(f"{where}[{k}]={short_repr(v)} {why}")
    return out


# --- which profiles a pod gets ----------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = obj.get("metadata")
    return md if isinstance(md, Mapping) else {}


def workload_key(pod: Mapping[str, Any]) -> str:
    """The controller owner's `kind/name`, else `generateName`, else the pod's name (see the module docstring)."""
    md = _meta(pod)
    for ref in md.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return str(md.get("generateName") or md.get("name") or "")


def bucket(pod: Mapping[str, Any], namespace: str) -> int:
    """0..99, the same for every pod of one workload and for every admission of one pod."""
    digest = hashlib.sha256(f"{namespace}/{workload_key(pod)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100


def matches(profile: Mapping[str, Any], pod: Mapping[str, Any], namespace: str,
            namespace_labels: Mapping[str, Any] | None) -> bool:
    """Whether a valid profile selects this pod (namespace, pod labels, probability)."""
    spec = profile.get("spec") or {}
    if not selector_matches(spec.get("namespaceSelector"), namespace_labels):
        return False
    if not selector_matches(spec.get("selector"), _meta(pod).get("labels")):
        return False
    probability = spec.get("probability")
    return probability is None or bucket(pod, namespace) < int(probability)


def _mapping_or_empty(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _name(profile: Mapping[str, Any]) -> str:
    return str(_meta(profile).get("name") or "")


# --- the mutation -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Mutation:
    """What the matching profiles do to one pod: the JSON patch, the pod after it, and why."""

    pod: dict[str, Any]
    patch: list[dict[str, Any]] = field(default_factory=list)
    profiles: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: which profiles changed the pod (empty when none did)."""
        if not self.profiles:
            return ""
        md = _meta(self.pod)
        where = f"{md.get('namespace') or ''}/{md.get('name') or md.get('generateName') or ''}"
        line = f"pod {where}: colocation profile {', '.join(self.profiles)} applied"
        if self.conflicts:
            line += f" (conflicts: {'; '.join(self.conflicts)})"
        return line


class _Wants:
    """Each field's value and the profile that set it first; later different values are conflicts."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[Any, str]] = {}
        self.conflicts: dict[str, list[str]] = {}

    def set(self, key: str, value: Any, profile: str) -> None:
        if key not in self.values:
            self.values[key] = (value, profile)
        elif self.values[key][0] != value:
            self.conflicts.setdefault(key, [self.values[key][1]]).append(profile)

    def get(self, key: str) -> Any:
        return self.values[key][0] if key in self.values else None


def _collect(profiles: Sequence[Mapping[str, Any]]) -> _Wants:
    wants = _Wants()
    for p in profiles:
        spec, name = p.get("spec") or {}, _name(p)
        for key in ("qosLevel", "schedulerName", "priorityClassName"):
            if spec.get(key):
                wants.set(key, spec[key], name)
        if spec.get("batchResources"):
            wants.set("batchResources", True, name)
        for kind in ("labels", "annotations"):
            for k, v in (spec.get(kind) or {}).items():
                wants.set(f"{kind}[{k}]", v, name)
    return wants


#: (uid, resourceVersion) -> valid: a stored profile is validated once per version, not once per pod (400
#: maximum-size profiles cost 1.0 s per pod CREATE when each admission validated all of them)
_CHECKED: dict[tuple[str, str], bool] = {}
_CHECKED_MAX: Final = 4096


def is_valid(profile: Mapping[str, Any]) -> bool:
    """`not profile_problems(profile)`, remembered per (uid, resourceVersion) when the object has both (an object
    from the API server: one version is one content); objects without them (a cluster file) are checked each time."""
    md = _meta(profile)
    uid, rv = md.get("uid"), md.get("resourceVersion")
    if not (isinstance(uid, str) and uid and isinstance(rv, str) and rv):
        return not profile_problems(profile)
    got = _CHECKED.get((uid, rv))
    if got is None:
        got = not profile_problems(profile)
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[(uid, rv)] = got
    return got


def select(profiles: Iterable[Mapping[str, Any]], pod: Mapping[str, Any], namespace: str,
           namespace_labels: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The valid profiles selecting the pod, in order of name (invalid ones, stored while unchecked, are skipped)."""
    chosen = [p for p in profiles if matches_valid(p, pod, namespace, namespace_labels)]
    return sorted(chosen, key=_name)


def matches_valid(profile: Mapping[str, Any], pod: Mapping[str, Any], namespace: str,
                  namespace_labels: Mapping[str, Any] | None) -> bool:
    """Whether a profile is valid (`is_valid`) and selects the pod; the cheap selector test first."""
    return _selects_cheaply(profile, pod, namespace_labels) and is_valid(profile) and matches(
        profile, pod, namespace, namespace_labels)


def _selects_cheaply(profile: Mapping[str, Any], pod: Mapping[str, Any],
                     namespace_labels: Mapping[str, Any] | None) -> bool:
    """A pre-check that never raises on an invalid profile: its matchLabels against the pod's and the namespace's
    labels (a profile that fails here cannot select the pod, valid or not)."""
    spec = profile.get("spec")
    if not isinstance(spec, Mapping):
        return True
    for key, labels in (("namespaceSelector", namespace_labels), ("selector", _meta(pod).get("labels"))):
        sel = spec.get(key)
        ml = sel.get("matchLabels") if isinstance(sel, Mapping) else None
        if isinstance(ml, Mapping) and isinstance(labels, Mapping | None):
            have = labels or {}
            if any(have.get(k) != v for k, v in ml.items()):
                return False
    return True


def apply_profiles(
    pod: Mapping[str, Any],
    namespace: str,
    namespace_labels: Mapping[str, Any] | None,
    profiles: Iterable[Mapping[str, Any]],
    priority_value: PriorityLookup | None = None,
    preemption_policy: PolicyLookup | None = None,
) -> Mutation:
    """The profiles' mutation of a pod being created in `namespace` (pure; `priority_value` names a class's value,
    `preemption_policy` its preemptionPolicy)."""
    chosen = select(profiles, pod, namespace, namespace_labels)
    new = copy.deepcopy(dict(pod))
    if not chosen:
        return Mutation(new)
    wants = _collect(chosen)
    names = tuple(_name(p) for p in chosen)
    md = new.setdefault("metadata", {})
    spec = new.setdefault("spec", {})
    patch: list[dict[str, Any]] = []
    warnings: list[str] = []
    annotations = dict(md.get("annotations") or {})
    labels = dict(md.get("labels") or {})
    for key, (value, who) in wants.values.items():
        if key.startswith("labels["):
            name = key[7:-1]
            if name in labels and labels[name] != value:  # its controller may select on it (issue 33, item 11)
                warnings.append(f"colocation profile {who}: label {name} kept as the pod's {short_repr(labels[name])} "
                                f"(a profile adds labels, never overwrites one: the pod's owner may select on it)")
            else:
                labels[name] = value
        elif key.startswith("annotations["):
            annotations[key[12:-1]] = value
    if (qos := wants.get("qosLevel")) is not None:
        annotations[ANN_QOS_LEVEL] = qos
    annotations[ANN_PROFILE] = ",".join(names)
    conflicts = tuple(f"{k}: {', '.join(v)}" for k, v in sorted(wants.conflicts.items()))
    if conflicts:
        annotations[ANN_CONFLICTS] = "; ".join(conflicts)
    if labels != (md.get("labels") or {}):
        md["labels"] = labels
        patch.append({"op": "add", "path": "/metadata/labels", "value": labels})
    md["annotations"] = annotations
    patch.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
    if (scheduler := wants.get("schedulerName")) is not None and spec.get("schedulerName") != scheduler:
        spec["schedulerName"] = scheduler
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler})
    if (pc := wants.get("priorityClassName")) is not None and spec.get("priorityClassName") != pc:
        value = priority_value(pc) if priority_value is not None else None
        if value is None:
            warnings.append(f"colocation profile {wants.values['priorityClassName'][1]}: PriorityClass {pc} "
                            "does not exist; priorityClassName left as it was")
        else:
            spec["priorityClassName"], spec["priority"] = pc, value
            patch.append({"op": "add", "path": "/spec/priorityClassName", "value": pc})
            patch.append({"op": "add", "path": "/spec/priority", "value": value})
            policy = preemption_policy(pc) if preemption_policy is not None else None
            if policy is not None and spec.get("preemptionPolicy") != policy:
                spec["preemptionPolicy"] = policy  # as the Priority admission sets it, or it refuses the pod
                patch.append({"op": "add", "path": "/spec/preemptionPolicy", "value": policy})
    if wants.get("batchResources"):
        patch += _batch_patch(spec)
    return Mutation(new, patch, names, conflicts, tuple(warnings))


def batch_resources(resources: Mapping[str, Any]) -> dict[str, Any]:
    """A container's `resources` with cpu/memory requests and limits as batch-cpu (milli) / batch-memory (bytes)."""
    out = dict(resources)
    for part in ("requests", "limits"):
        rl = resources.get(part)
        if not isinstance(rl, Mapping):
            continue
        new = {k: v for k, v in rl.items() if k not in (RES_CPU, RES_MEMORY)}
        if RES_CPU in rl and RES_BATCH_CPU not in rl and (milli := quantity_to_milli(rl[RES_CPU])) is not None:
            new[RES_BATCH_CPU] = str(milli)
        if RES_MEMORY in rl and RES_BATCH_MEMORY not in rl and (b := quantity_to_int(rl[RES_MEMORY])) is not None:
            new[RES_BATCH_MEMORY] = str(b)
        out[part] = new
    return out


def _batch_patch(spec: dict[str, Any]) -> list[dict[str, Any]]:
    patch: list[dict[str, Any]] = []
    for kind in ("initContainers", "containers"):
        containers = spec.get(kind)
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, Mapping):
                continue
            new = batch_resources(res)
            if new != res:
                c["resources"] = new
                patch.append({"op": "add", "path": f"/spec/{kind}/{i}/resources", "value": new})
    return patch


def profiles_in(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The ColocationProfile objects of a cluster file."""
    return [o for o in objects if o.get("kind") == KIND]


#: the namespaces whose pods no profile changes, unless told otherwise (the webhook's and the agent's, kube-system)
DEFAULT_EXEMPT_NAMESPACES: Final = frozenset({"tidemark-system", "kube-system"})


def apply_to_objects(
    objects: Sequence[Mapping[str, Any]], exempt: frozenset[str] = DEFAULT_EXEMPT_NAMESPACES
) -> tuple[list[dict[str, Any]], list[str]]:
    """A cluster file as the webhook would have admitted its pods: (the objects, one line per change or problem).

    For `simulate` and `plan`: the file's ColocationProfiles are applied to every Pod outside `exempt`, as the
    webhook applies them whatever the pod carries (`ANN_PROFILE` included, which any tenant can set at creation:
    skipping such pods predicted online for a pod the cluster makes offline); a pod the webhook already mutated
    comes out unchanged and is not reported. A namespace's
    labels come from the file's Namespace objects (none: no labels), a PriorityClass's value from its
    PriorityClass objects. An invalid profile is named with its problems and skipped, as the webhook skips it.
    """
    objects = [o for o in objects if isinstance(o, Mapping)]
    profiles = profiles_in(objects)
    out = [dict(o) for o in objects]
    if not profiles:
        return out, []
    lines = [f"colocation profile {_name(p)} is invalid and skipped: {'; '.join(probs[:3])}"
             for p in profiles if (probs := profile_problems(p))]
    ns_labels = {str(_meta(o).get("name")): _mapping_or_empty(_meta(o).get("labels"))
                 for o in objects if o.get("kind") == "Namespace"}
    classes = {str(_meta(o).get("name")): o for o in objects if o.get("kind") == "PriorityClass"}

    def priority(name: str) -> int | None:
        v = classes.get(name, {}).get("value")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def policy(name: str) -> str | None:
        v = classes.get(name, {}).get("preemptionPolicy")
        return v if isinstance(v, str) and v in PREEMPTION_POLICIES else None

    for i, obj in enumerate(out):
        md = _meta(obj)
        if not isinstance(md.get("namespace") or "", str):
            continue
        namespace = str(md.get("namespace") or "default")
        if obj.get("kind") != "Pod" or namespace in exempt:
            continue
        if shape_problems(obj):
            continue  # a misshapen pod is the reader's to report (simulate, plan), not to mutate
        done = apply_profiles(obj, namespace, ns_labels.get(namespace, {}), profiles, priority, policy)
        if done.profiles and done.pod != obj:
            done.pod.setdefault("metadata", {}).setdefault("namespace", namespace)
            out[i] = done.pod
            lines.append(done.describe())
        lines += list(done.warnings)
    return out, lines
