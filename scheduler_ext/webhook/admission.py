"""The admission decisions of `tidemark-scheduler webhook` (docs/design.md, "Admission webhook" and "Rights").

Pure functions from an AdmissionReview `request` to a `Verdict`; the only outside knowledge comes
through the injected `Lookups` (which node a pod is on, a Queue by name), so every rule is tested
without a server. What is decided:

- Queues (mutate, as Volcano's vc-webhook-manager): `spec.weight` 1 when unset or 0,
  `spec.reclaimable` true when unset, `status.state` Open when unset.
  (validate) weight >= 1, capability/deserved/guarantee quantities finite and >= 0, the parent
  chain (`spec.parent`) acyclic.
- PodGroups (mutate) `spec.queue` "default" when unset; (validate) minMember >= 0, minResources
  finite and >= 0, on CREATE the queue exists and is Open.
- Pods (validate UPDATE, of the pod and of its status subresource, which can rewrite annotations
  too): a pod's `volcano.sh/qos-level` may not move across the online/offline line, bound or pending
  (the class is fixed when the pod is created, by the pod or a ColocationProfile: a lost agent state
  file cannot turn an online pod into an eviction victim, nor a tenant a profile's offline pod online).
- NodeReports (validate, `failurePolicy: Fail`: only agents write them): every writer's spec is one
  the controller applies (`tidemark.nodereport.spec_problems`: Tidemark's keys, capped lengths,
  valid quantities); an agent creates and updates only the report of its own node and deletes none.
- Evictions: none judged. An agent holds no eviction right: it asks in its NodeReport, and the NodeReport
  controller evicts only offline pods bound to that node (scheduler_ext/controller/evictions.py), so no hook
  stands in front of everyone's evictions (`kubectl drain` never waits for the webhook).
  An agent is the DaemonSet's ServiceAccount, whose node is the node of the pod its token is bound
  to (the `authentication.kubernetes.io/pod-name`/`pod-uid` extra), or a node-bound user
  `tidemark:agent:<node>` in the group `tidemark:agents` (a systemd agent's client certificate). Any other
  member of that group (the group is what the agent role is bound to) is judged as an agent and, naming no
  node, refused.
  Agents hold no Node rights at all (docs/security.md, "The agent's writes"). Every other user passes
  the agent rules untouched: RBAC decides for them.
- Pods (mutate CREATE only, `failurePolicy: Ignore`): the matching ColocationProfiles
  (`tidemark.profiles.apply_profiles`), read from the injected `ProfileSource` (a watch cache); pods in
  `Settings.profile_exempt_namespaces` (the webhook's and the agent's) are left alone.
- ColocationProfiles (validate CREATE/UPDATE): `tidemark.profiles.profile_problems`, each naming its field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tidemark.apis import (
    DEFAULT_QUEUE,
    amount_problem,
    dns1123_label_problem,
    dns1123_subdomain_problem,
    parse_qos_level,
    short_repr,
)
from tidemark.nodereport import GROUP as REPORT_GROUP
from tidemark.nodereport import PLURAL as REPORT_PLURAL
from tidemark.nodereport import bound_problems, publishes_amounts, spec_problems
from tidemark.profiles import DEFAULT_EXEMPT_NAMESPACES, apply_profiles, profile_problems
from tidemark.profiles import GROUP as PROFILE_GROUP
from tidemark.profiles import PLURAL as PROFILE_PLURAL

POD_NAME_EXTRA: Final = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA: Final = "authentication.kubernetes.io/pod-uid"
#: a node-bound agent identity (a systemd agent's client certificate): user `tidemark:agent:<node>` ...
AGENT_USER_PREFIX: Final = "tidemark:agent:"
#: ... in this group (the group the agent ClusterRoleBinding names)
AGENT_GROUP: Final = "tidemark:agents"
QUEUE_OPEN: Final = "Open"

JSONPatch = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to one AdmissionReview request."""

    allowed: bool
    message: str = ""
    patch: JSONPatch = field(default_factory=list)
    #: HTTP-like code in the Status of a denial (403: forbidden for this user; 400: invalid object)
    code: int = 200
    warnings: tuple[str, ...] = ()


ALLOW: Final = Verdict(True)


def deny(message: str, code: int = 400) -> Verdict:
    return Verdict(False, message, code=code)


class Lookups(Protocol):
    def pod_node(self, namespace: str, name: str, uid: str | None) -> str | None:
        """spec.nodeName of the pod (None: no such pod, other uid, or not bound)."""
        ...

    def queue(self, name: str) -> Mapping[str, Any] | None:
        """The Queue object, None when absent."""
        ...

    def current(self, path: str) -> Mapping[str, Any] | None:
        """The stored object at an API path (`/api/v1/nodes/n1`), None when absent."""
        ...


def _core_path(plural: str, name: object, namespace: object = None) -> str | None:
    """`/api/v1/[namespaces/NS/]PLURAL/NAME`, or None when the names cannot be an object's (nothing to read).

    Names are checked as Kubernetes checks them (a DNS-1123 subdomain, a label for the namespace), so
    what reaches a path is a plain segment: never `..`, `/`, `?` or `%`.
    """
    if dns1123_subdomain_problem(name) or (namespace is not None and dns1123_label_problem(namespace)):
        return None
    return f"/api/v1/namespaces/{namespace}/{plural}/{name}" if namespace is not None else f"/api/v1/{plural}/{name}"


def _old_object(request: Mapping[str, Any], path: str | None, lookups: Lookups) -> Mapping[str, Any]:
    """The object as stored before this update.

    `oldObject` of the request, except when it equals `object`: then the stored object is read
    from the API. That costs a GET only for no-op updates on a correct API server, and it keeps
    the rules right on servers that hand webhooks the patched object as `oldObject` (seen on the
    Debian-built 1.20 apiserver of the tests, for merge, strategic and JSON patches alike). A
    validating webhook runs before the write, so the GET returns the state this update replaces.
    """
    old = _mapping(request, "oldObject")
    if (old and old != _mapping(request, "object")) or path is None:
        return old
    stored = lookups.current(path)
    return stored if stored is not None else old


class ProfileSource(Protocol):
    """The ColocationProfiles and what a pod's mutation needs to know, from caches (no GET per pod)."""

    def profiles(self) -> Sequence[Mapping[str, Any]]:
        """Every ColocationProfile stored."""
        ...

    def namespace_labels(self, namespace: str) -> Mapping[str, Any] | None:
        """The namespace's labels (None: unknown)."""
        ...

    def priority_value(self, name: str) -> int | None:
        """The value of a PriorityClass, None when absent."""
        ...

    def preemption_policy(self, name: str) -> str | None:
        """The preemptionPolicy of a PriorityClass, None when absent."""
        ...


@dataclass(frozen=True, slots=True)
class Settings:
    """Who an agent is: `system:serviceaccount:<namespace>:<name>` of the DaemonSet's ServiceAccount (its node is
    its pod's), or a user `tidemark:agent:<node>` in one of `agent_groups` (a systemd agent's certificate)."""

    agent_users: frozenset[str] = frozenset({"system:serviceaccount:tidemark-system:tidemark-agent"})
    agent_groups: frozenset[str] = frozenset({AGENT_GROUP})
    #: namespaces whose pods no ColocationProfile changes: the webhook's and the agent's own, and kube-system
    profile_exempt_namespaces: frozenset[str] = DEFAULT_EXEMPT_NAMESPACES


# --- helpers ---------------------------------------------------------------------------------------


def _mapping(obj: object, key: str) -> Mapping[str, Any]:
    v = obj.get(key) if isinstance(obj, Mapping) else None
    return v if isinstance(v, Mapping) else {}


def _escape(key: str) -> str:
    """A JSON-pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _resource(request: Mapping[str, Any]) -> tuple[str, str, str]:
    res = _mapping(request, "resource")
    return str(res.get("group") or ""), str(res.get("resource") or ""), str(request.get("subResource") or "")


# --- Queues ------------------------------------------------------------------------------------------


def mutate_queue(obj: Mapping[str, Any]) -> JSONPatch:
    """Volcano's defaults for a new or updated Queue."""
    patch: JSONPatch = []
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        patch.append({"op": "add", "path": "/spec", "value": {}})
        spec = {}
    weight = spec.get("weight")
    if weight is None or weight == 0:
        patch.append({"op": "add", "path": "/spec/weight", "value": 1})
    if spec.get("reclaimable") is None:
        patch.append({"op": "add", "path": "/spec/reclaimable", "value": True})
    status = obj.get("status")
    if not isinstance(status, Mapping):
        patch.append({"op": "add", "path": "/status", "value": {"state": QUEUE_OPEN}})
    elif not status.get("state"):
        patch.append({"op": "add", "path": "/status/state", "value": QUEUE_OPEN})
    return patch


def _quantity_problems(where: str, rl: object) -> list[str]:
    if rl is None:
        return []
    if not isinstance(rl, Mapping):
        return [f"{where} must be a mapping of quantities"]
    out = []
    for name, raw in rl.items():
        why = amount_problem(str(name), raw)[1]
        if why:
            out.append(f"{where}.{name}={short_repr(raw)} {why}")
    return out


def validate_queue(obj: Mapping[str, Any], lookups: Lookups) -> Verdict:
    spec = _mapping(obj, "spec")
    name = str(_mapping(obj, "metadata").get("name") or "")
    problems: list[str] = []
    weight = spec.get("weight")
    if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 2**31 - 1:
        problems.append(f"spec.weight={short_repr(weight)} must be an integer >= 1")
    problems += _quantity_problems("spec.capability", spec.get("capability"))
    problems += _quantity_problems("spec.deserved", spec.get("deserved"))
    problems += _quantity_problems("spec.guarantee.resource", _mapping(spec, "guarantee").get("resource"))
    parent = spec.get("parent")
    if parent is not None and not isinstance(parent, str):
        problems.append("spec.parent must be a string")
    elif parent and (why := dns1123_subdomain_problem(parent)):
        problems.append(f"spec.parent: {short_repr(parent)} is not a valid Queue name: {why}")
    elif parent:
        seen = [name]
        current: str | None = str(parent)
        while current:
            if current in seen:
                problems.append(f"spec.parent makes a cycle: {' -> '.join([*seen, current])}")
                break
            seen.append(current)
            q = lookups.queue(current)
            nxt = _mapping(q, "spec").get("parent") if q is not None else None
            # a stored parent that is no Queue name (stored before this check) ends the chain unread
            current = nxt if isinstance(nxt, str) and nxt and not dns1123_subdomain_problem(nxt) else None
            if len(seen) > 64:
                problems.append("spec.parent chain is longer than 64 queues")
                break
    return deny("; ".join(problems)) if problems else ALLOW


# --- PodGroups ---------------------------------------------------------------------------------------


def mutate_podgroup(obj: Mapping[str, Any]) -> JSONPatch:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [{"op": "add", "path": "/spec", "value": {"queue": DEFAULT_QUEUE}}]
    if not spec.get("queue"):
        return [{"op": "add", "path": "/spec/queue", "value": DEFAULT_QUEUE}]
    return []


def validate_podgroup(obj: Mapping[str, Any], operation: str, lookups: Lookups) -> Verdict:
    spec = _mapping(obj, "spec")
    problems: list[str] = []
    mm = spec.get("minMember", 0)
    if not isinstance(mm, int) or isinstance(mm, bool) or not 0 <= mm <= 2**31 - 1:
        problems.append(f"spec.minMember={short_repr(mm)} must be an integer >= 0")
    problems += _quantity_problems("spec.minResources", spec.get("minResources"))
    if operation == "CREATE":
        queue = spec.get("queue") or DEFAULT_QUEUE
        # checked before the lookup: a tenant's string reaches no URL unless it can name a Queue
        why = dns1123_subdomain_problem(queue)
        q = lookups.queue(queue) if why is None else None
        if why is not None:
            problems.append(f"spec.queue: {short_repr(queue)} is not a valid Queue name: {why}")
        elif q is None:
            problems.append(f"spec.queue: queue {queue!r} does not exist")
        elif str(_mapping(q, "status").get("state") or QUEUE_OPEN) != QUEUE_OPEN:
            problems.append(f"spec.queue: queue {queue!r} is not Open")
    return deny("; ".join(problems)) if problems else ALLOW


# --- Pods: the class is fixed ---------------------------------------------------------------------


def validate_pod_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> Verdict:
    """A pod keeps its side of the online/offline line from creation (`old` = the stored pod), bound or pending:
    a pending pod's class moved back to online kept the batch resources a profile gave it (issue 33, item 3)."""
    before = parse_qos_level(_mapping(_mapping(old, "metadata"), "annotations"))
    after = parse_qos_level(_mapping(_mapping(new, "metadata"), "annotations"))
    if before.offline != after.offline:
        was, now = ("offline", "online") if before.offline else ("online", "offline")
        return deny(
            f"volcano.sh/qos-level of a pod cannot move from {was} to {now} "
            "(a pod's class is fixed when it is created; recreate the pod instead)",
            code=403,
        )
    return ALLOW


# --- the agent: its own NodeReport (its eviction asks too) -------------------------------------------


def agent_identity(user: Mapping[str, Any], settings: Settings) -> bool:
    """An agent: the DaemonSet's ServiceAccount, or ANY member of an agent group whatever its name: the group is
    what the agent ClusterRoleBinding grants, so everyone holding those rights is judged by the agent rules (a
    member not named `tidemark:agent:<node>`, a certificate `CN=node-a`, names no node and is refused)."""
    username = str(user.get("username") or "")
    if username in settings.agent_users:
        return True
    groups = user.get("groups")
    return isinstance(groups, list) and any(g in settings.agent_groups for g in groups)


def _agent_node(user: Mapping[str, Any], lookups: Lookups) -> tuple[str | None, str]:
    """The agent's node: named by a node-bound user (`tidemark:agent:<node>`, the systemd install), else the
    node of the pod its token is bound to (the pod extra of a projected ServiceAccount token); (None, why)."""
    username = str(user.get("username") or "")
    if username.startswith(AGENT_USER_PREFIX):
        named = username[len(AGENT_USER_PREFIX) :]
        if dns1123_subdomain_problem(named):
            return None, f"{short_repr(username)} does not name a node"
        return named, ""
    extra = _mapping(user, "extra")
    names = extra.get(POD_NAME_EXTRA)
    uids = extra.get(POD_UID_EXTRA)
    name = names[0] if isinstance(names, list) and names else None
    uid = uids[0] if isinstance(uids, list) and uids else None
    parts = username.split(":")
    if not username.startswith("system:serviceaccount:") or len(parts) != 4:
        return None, (f"{short_repr(username)} is in an agent group but names no node (an agent is "
                      f"{AGENT_USER_PREFIX}<node> or a ServiceAccount token bound to a pod)")
    if not name:
        return None, "the agent's token is not bound to a pod (use a projected ServiceAccount token)"
    node = lookups.pod_node(parts[2], str(name), str(uid) if uid else None)
    if not node:
        return None, f"the agent's pod {parts[2]}/{name} is not found or not bound to a node"
    return node, ""


def validate_report(request: Mapping[str, Any], lookups: Lookups, settings: Settings) -> Verdict:
    """A NodeReport write: every writer's spec must be one the controller applies (`tidemark.nodereport`);
    an agent may create and update only its own node's report, and delete none."""
    operation = str(request.get("operation") or "")
    name = str(request.get("name") or "")
    user = _mapping(request, "userInfo")
    if agent_identity(user, settings):
        if operation not in ("CREATE", "UPDATE"):
            return deny(f"the agent may not {operation.lower()} NodeReports", code=403)
        node, why = _agent_node(user, lookups)
        if node is None:
            return deny(why, code=403)
        if name != node:
            return deny(f"the agent of node {node} may not write the NodeReport of node {short_repr(name)}", code=403)
    if operation in ("CREATE", "UPDATE"):
        spec = _mapping(request, "object").get("spec")
        problems = spec_problems(spec)
        if not problems and publishes_amounts(spec) and (path := _core_path("nodes", name)) is not None:
            # X and batch-* are parts of what the node has: bounded by its capacity (issue 33, item 4)
            stored = lookups.current(path)
            problems = bound_problems(spec, stored) if stored is not None else []
        if problems:
            return deny("; ".join(problems[:5]))
    return ALLOW


# --- dispatch ---------------------------------------------------------------------------------------

VOLCANO_GROUP: Final = "scheduling.volcano.sh"


def mutate_pod(request: Mapping[str, Any], source: ProfileSource, settings: Settings) -> Verdict:
    """The ColocationProfiles' changes to a pod being created (never on update: a pod's class is fixed)."""
    pod = _mapping(request, "object")
    namespace = str(request.get("namespace") or _mapping(pod, "metadata").get("namespace") or "")
    if not namespace or namespace in settings.profile_exempt_namespaces:
        return ALLOW
    profiles = source.profiles()
    if not profiles:
        return ALLOW
    try:
        done = apply_profiles(pod, namespace, source.namespace_labels(namespace), profiles, source.priority_value,
                              getattr(source, "preemption_policy", None))
    except Exception as exc:  # never a denial: a profile's bug must not stop a pod (the hook's policy is Ignore)
        return Verdict(True, warnings=(f"colocation profiles not applied: {type(exc).__name__}: {exc}",))
    return Verdict(True, patch=done.patch, warnings=done.warnings)


def validate_profile(obj: Mapping[str, Any]) -> Verdict:
    problems = profile_problems(obj)
    return deny("ColocationProfile: " + "; ".join(problems[:8])) if problems else ALLOW


def mutate(
    request: Mapping[str, Any], source: ProfileSource | None = None, settings: Settings | None = None
) -> Verdict:
    group, resource, sub = _resource(request)
    obj = _mapping(request, "object")
    if group == "" and resource == "pods" and not sub and request.get("operation") == "CREATE" and source is not None:
        return mutate_pod(request, source, settings or Settings())
    if group == VOLCANO_GROUP and resource == "queues" and not sub:
        return Verdict(True, patch=mutate_queue(obj))
    if group == VOLCANO_GROUP and resource == "podgroups" and not sub:
        return Verdict(True, patch=mutate_podgroup(obj))
    return ALLOW


def validate(request: Mapping[str, Any], lookups: Lookups, settings: Settings) -> Verdict:
    group, resource, sub = _resource(request)
    operation = str(request.get("operation") or "")
    obj = _mapping(request, "object")
    if group == VOLCANO_GROUP and resource == "queues" and not sub and operation in ("CREATE", "UPDATE"):
        return validate_queue(obj, lookups)
    if group == VOLCANO_GROUP and resource == "podgroups" and not sub and operation in ("CREATE", "UPDATE"):
        return validate_podgroup(obj, operation, lookups)
    if group == REPORT_GROUP and resource == REPORT_PLURAL and not sub:
        return validate_report(request, lookups, settings)
    if group == PROFILE_GROUP and resource == PROFILE_PLURAL and not sub and operation in ("CREATE", "UPDATE"):
        return validate_profile(obj)
    if group == "" and resource == "pods" and sub in ("", "status") and operation == "UPDATE":
        path = _core_path("pods", request.get("name"), request.get("namespace"))
        return validate_pod_update(_old_object(request, path, lookups), obj)
    return ALLOW


Handler = Callable[[Mapping[str, Any]], Verdict]


def review_response(review: Mapping[str, Any], decide: Handler) -> dict[str, Any]:
    """An AdmissionReview reply (same apiVersion as asked) for `decide(request)`; a malformed review is denied."""
    request = _mapping(review, "request")
    uid = request.get("uid")
    api_version = str(review.get("apiVersion") or "admission.k8s.io/v1")
    if not isinstance(uid, str) or not uid:
        verdict = deny("not an AdmissionReview with request.uid")
    else:
        try:
            verdict = decide(request)
        except Exception as exc:  # a rule bug must deny with a reason, not drop the connection
            verdict = deny(f"webhook error: {type(exc).__name__}: {exc}", code=500)
    response: dict[str, Any] = {"uid": uid or "", "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {"code": verdict.code, "message": verdict.message, "reason": _reason(verdict.code)}
    if verdict.patch:
        import base64
        import json

        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(verdict.patch).encode()).decode()
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def _reason(code: int) -> str:
    return {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}.get(code, "Forbidden")


def agent_users(service_accounts: Sequence[str]) -> frozenset[str]:
    """`namespace:name` pairs -> the usernames their tokens authenticate as."""
    out = set()
    for sa in service_accounts:
        ns, _, name = sa.partition(":")
        if not ns or not name:
            raise ValueError(f"bad service account {sa!r}: expected NAMESPACE:NAME")
        out.add(f"system:serviceaccount:{ns}:{name}")
    return frozenset(out)
