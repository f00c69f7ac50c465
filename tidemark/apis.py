"""The vocabulary both programs share: label/annotation keys, their parsers, quantities, pod requests.

Everything here is pure and never raises on malformed input: a bad value gives the documented
default plus a human-readable reason, so a daemon can log/event it and carry on (docs/design.md,
"Vocabulary and object contracts"). Objects are plain mappings in the Kubernetes JSON shape
(camelCase keys), as read from YAML files or API responses.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Generic, Literal, NewType, TypeVar

PodUID = NewType("PodUID", str)
NodeName = NewType("NodeName", str)


# --- Node labels (written by the user) ---------------------------------------------------------
LABEL_COLOCATION: Final = "volcano.sh/colocation"
LABEL_OVERSUBSCRIPTION: Final = "volcano.sh/oversubscription"

# --- Node annotations --------------------------------------------------------------------------
ANN_OVERSUBSCRIPTION_CPU: Final = "volcano.sh/oversubscription-cpu"
ANN_OVERSUBSCRIPTION_MEMORY: Final = "volcano.sh/oversubscription-memory"
ANN_OVERSUBSCRIPTION_TYPES: Final = "volcano.sh/oversubscription-types"
ANN_OFFLINE_JOB_EVICTING: Final = "volcano.sh/offline-job-evicting"
TAINT_OFFLINE_JOB_EVICTING: Final = ANN_OFFLINE_JOB_EVICTING
ANN_NODE_USAGE: Final = "tidemark.io/node-usage"
NODE_USAGE_STALE_SECONDS: Final = 300.0
#: a node-usage time further ahead of the reader's clock than this is stale (with a warning), never fresh
#: for ever: the allowance is for clock skew between the agent's node and the reader
NODE_USAGE_FUTURE_SECONDS: Final = 30.0

# --- Pod annotations ---------------------------------------------------------------------------
ANN_QOS_LEVEL: Final = "volcano.sh/qos-level"
ANN_GROUP_NAME: Final = "scheduling.k8s.io/group-name"
ANN_QUEUE_NAME: Final = "scheduling.volcano.sh/queue-name"
#: Volcano's per-pod CPU burst (pkg/agent/events/handlers/cpuburst): a boolean, and the burst in microseconds
ANN_ENABLE_QUOTA_BURST: Final = "volcano.sh/enable-quota-burst"
ANN_QUOTA_BURST_TIME: Final = "volcano.sh/quota-burst-time"

# --- Extended resources published by the agent -------------------------------------------------
RES_CPU: Final = "cpu"
RES_MEMORY: Final = "memory"
RES_PODS: Final = "pods"
RES_BATCH_CPU: Final = "kubernetes.io/batch-cpu"
RES_BATCH_MEMORY: Final = "kubernetes.io/batch-memory"
#: plain resource -> its batch twin
BATCH_RESOURCE: Final[Mapping[str, str]] = {RES_CPU: RES_BATCH_CPU, RES_MEMORY: RES_BATCH_MEMORY}

Resource = Literal["cpu", "memory"]
RESOURCES: Final[tuple[Resource, ...]] = ("cpu", "memory")

# --- Queues ------------------------------------------------------------------------------------
DEFAULT_QUEUE: Final = "default"
DEFAULT_SCHEDULER_NAME: Final = "volcano"

# --- Watermarks --------------------------------------------------------------------------------
WatermarkLevel = Literal["high", "low"]


def watermark_key(resource: Resource, level: WatermarkLevel) -> str:
    """`volcano.sh/evicting-cpu-high-watermark` and friends."""
    return f"volcano.sh/evicting-{resource}-{level}-watermark"


def legacy_watermark_key(resource: Resource, level: WatermarkLevel) -> str:
    """The older `volcano.sh/oversubscription-evicting-*` spelling, read when the new key is absent."""
    return f"volcano.sh/oversubscription-evicting-{resource}-{level}-watermark"


#: (high, low) percent of allocatable, from the seed docs
DEFAULT_WATERMARKS: Final[Mapping[Resource, tuple[int, int]]] = {"cpu": (80, 30), "memory": (60, 30)}
DEFAULT_OVERSUBSCRIPTION_TYPES: Final[tuple[Resource, ...]] = ("cpu", "memory")

# --- Booleans (Go's strconv.ParseBool) ---------------------------------------------------------
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Parsed(Generic[T]):
    """A parsed value and, when the input was malformed and a default was used, why."""

    value: T
    warning: str | None = None


def parse_bool(raw: object, *, key: str = "value") -> Parsed[bool]:
    """Go's strconv.ParseBool; anything else (or absent) is false, malformed adds a warning."""
    if raw is None:
        return Parsed(False)
    if isinstance(raw, bool):
        return Parsed(raw)
    text = str(raw)
    if text in _TRUE:
        return Parsed(True)
    if text in _FALSE:
        return Parsed(False)
    return Parsed(False, f"{key}={short_repr(text)} is not a boolean (expected true/false/1/0/t/f); treated as false")


def label_enabled(labels: Mapping[str, str] | None, key: str) -> Parsed[bool]:
    """Whether a boolean node label such as volcano.sh/oversubscription is on."""
    if not labels or key not in labels:
        return Parsed(False)
    return parse_bool(labels.get(key), key=key)


# --- qos-level ---------------------------------------------------------------------------------
QOS_NAMED: Final[Mapping[str, int]] = {"LC": 2, "HLS": 2, "LS": 1, "BE": -1}
QOS_MIN: Final = -7
QOS_MAX: Final = 7
_INT_RE: Final = re.compile(r"^[+-]?[0-9]+$")


@dataclass(frozen=True, slots=True)
class QosLevel:
    """A pod's qos-level; offline iff level in -7..-1. `reason` is set when the annotation was malformed."""

    level: int
    reason: str | None = None

    @property
    def offline(self) -> bool:
        return QOS_MIN <= self.level <= -1

    @property
    def online(self) -> bool:
        return not self.offline


ONLINE_DEFAULT: Final = QosLevel(0)


def parse_qos_level(annotations: Mapping[str, Any] | None) -> QosLevel:
    """docs/design.md, "Vocabulary and object contracts": strip; LC/HLS->2, LS->1, BE->-1 (case-sensitive);
    integers -7..7; else online."""
    if not annotations:
        return ONLINE_DEFAULT
    raw = annotations.get(ANN_QOS_LEVEL)
    if raw is None:
        return ONLINE_DEFAULT
    text = str(raw).strip()
    if text in QOS_NAMED:
        return QosLevel(QOS_NAMED[text])
    if _INT_RE.match(text):
        level = _small_int(text)
        if level is not None and QOS_MIN <= level <= QOS_MAX:
            return QosLevel(level)
        return QosLevel(0, f"{ANN_QOS_LEVEL}={short_repr(raw)} is outside {QOS_MIN}..{QOS_MAX}; treated as online")
    return QosLevel(0, f"{ANN_QOS_LEVEL}={short_repr(raw)} is not an integer or LC/HLS/LS/BE; treated as online")


def parse_quota_burst(annotations: Mapping[str, Any] | None) -> Parsed[int | None]:
    """Volcano's per-pod CPU burst, as its cpuburst handler reads it: None unless `volcano.sh/enable-quota-burst`
    is true (Go's ParseBool; anything else is false, with a warning); then `volcano.sh/quota-burst-time` in
    microseconds, a positive integer, or 0 (absent, or malformed with a warning: each container's quota is its
    burst, Volcano's default)."""
    if not annotations or annotations.get(ANN_ENABLE_QUOTA_BURST) is None:
        return Parsed(None)
    enabled = parse_bool(annotations.get(ANN_ENABLE_QUOTA_BURST), key=ANN_ENABLE_QUOTA_BURST)
    if not enabled.value:
        return Parsed(None, enabled.warning)
    raw = annotations.get(ANN_QUOTA_BURST_TIME)
    if raw is None:
        return Parsed(0)
    text = str(raw).strip()
    value = _small_int(text) if _INT_RE.match(text) else None
    if value is None or value <= 0:
        return Parsed(
            0,
            f"{ANN_QUOTA_BURST_TIME}={short_repr(raw)} is not a positive integer of microseconds; each container's "
            "CFS quota is used as its burst (Volcano's default)",
        )
    return Parsed(value)


def _small_int(text: str) -> int | None:
    """int(text) for a string matching _INT_RE with at most 18 significant digits, else None."""
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > _MAX_INT_DIGITS:
        return None
    return sign * int(digits or "0")


def is_offline(pod: Mapping[str, Any]) -> bool:
    """Offline iff the pod's qos-level is in -7..-1."""
    return parse_qos_level(_annotations(pod)).offline


# --- Names -------------------------------------------------------------------------------------
#: Kubernetes' name grammars (k8s.io/apimachinery/pkg/util/validation): a DNS-1123 label names a
#: namespace; a DNS-1123 subdomain names a Pod, a Node, a PodGroup or a Queue (custom resources too)
_DNS1123_LABEL: Final = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_RE: Final = re.compile(_DNS1123_LABEL)
_DNS1123_SUBDOMAIN_RE: Final = re.compile(rf"{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*")
DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253


def dns1123_subdomain_problem(name: object) -> str | None:
    """None when `name` is a DNS-1123 subdomain (IsDNS1123Subdomain), else why not (Kubernetes' words)."""
    if not isinstance(name, str):
        return f"must be a string, not {type(name).__name__}"
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    if _DNS1123_SUBDOMAIN_RE.fullmatch(name) is None:
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character")
    return None


def dns1123_label_problem(name: object) -> str | None:
    """None when `name` is a DNS-1123 label (IsDNS1123Label: a namespace), else why not."""
    if not isinstance(name, str):
        return f"must be a string, not {type(name).__name__}"
    if len(name) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters"
    if _DNS1123_LABEL_RE.fullmatch(name) is None:
        return ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                "and must start and end with an alphanumeric character")
    return None


# --- Quantities --------------------------------------------------------------------------------

#: The largest amount in canonical units (milli-cores, bytes, counts) either program accepts: 2^53,
#: about 9.0e15 (8 PiB of memory, 9e12 cores). Every such amount is exact as a float64, and sums of
#: a thousand of them still fit an int64, so no arithmetic downstream can overflow or lose a unit.
#: Larger (or non-finite) quantities are malformed input: the field is dropped with a reason.
MAX_AMOUNT: Final = 2**53
_MAX_AMOUNT_DEC: Final = Decimal(MAX_AMOUNT)
#: the most digits an integer annotation may have before it is rejected unread (int() of a huge
#: string is slow, and Python refuses more than 4300 digits)
_MAX_INT_DIGITS: Final = 18


def parse_quantity(raw: object) -> Decimal | None:
    """A Kubernetes quantity as a finite Decimal, or None when malformed (never raises).

    The value may still be absurdly large; the conversions below (quantity_to_milli, ...) bound it.
    """
    if isinstance(raw, str):
        return _parse_quantity_text(raw)
    return _parse_quantity(raw)


@functools.lru_cache(maxsize=4096)
def _parse_quantity_text(raw: str) -> Decimal | None:
    """Quantity strings repeat across thousands of pods (scheduler snapshots): parse each once."""
    return _parse_quantity(raw)


#: apimachinery's resource.Quantity grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go), as its
#: parser accepts it: an optional sign, ASCII digits with an optional fraction, then a binary SI suffix,
#: a decimal SI suffix (n u m k M G T P E) or an e/E exponent that is an integer. Nothing else: no
#: spaces, no `_` separators, no full-width or other Unicode digits (Python's Decimal takes all three:
#: `Decimal("８")` is 8, `Decimal("1_000")` 1000), no `Infinity`/`NaN`, no `1e5Ki`.
_QUANTITY_RE: Final = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([KMGTPE]i)|([numkMGTPE])|[eE]([+-]?[0-9]{1,18}))?"
)
_BINARY_SI: Final[Mapping[str, int]] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SI: Final[Mapping[str, int]] = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _parse_quantity(raw: object) -> Decimal | None:
    if raw is None or isinstance(raw, bool):
        return None
    if isinstance(raw, Decimal):
        return raw if raw.is_finite() else None
    if isinstance(raw, int | float):
        try:
            text = repr(raw)  # a JSON/YAML number is a quantity as its text (Kubernetes reads 0.5 as "0.5")
        except ValueError:  # an integer beyond Python's 4300-digit conversion limit
            return None
    elif isinstance(raw, str):
        text = raw
    else:
        return None
    m = _QUANTITY_RE.fullmatch(text)
    if m is None:
        return None
    sign, number, binary, decimal, exponent = m.groups()
    try:
        if binary:
            return Decimal(sign + number) * _BINARY_SI[binary]
        shift = _DECIMAL_SI[decimal] if decimal else int(exponent or 0)
        return Decimal(f"{sign}{number}e{shift}")
    except (InvalidOperation, ArithmeticError, ValueError):
        return None


def _bounded_int(value: Decimal) -> int | None:
    """ceil(value) when |value| <= MAX_AMOUNT, else None (compared before any arithmetic: a quantity
    such as `1e999999999` must not become a billion-digit integer)."""
    if value.copy_abs() > _MAX_AMOUNT_DEC:
        return None
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def quantity_to_milli(raw: object) -> int | None:
    """Milli-units, rounded up as Kubernetes' MilliValue(); None when malformed or beyond +-MAX_AMOUNT."""
    q = parse_quantity(raw)
    if q is None or q.copy_abs() > _MAX_AMOUNT_DEC:
        return None
    return _bounded_int(q * 1000)


def quantity_to_int(raw: object) -> int | None:
    """Whole units, rounded up as Kubernetes' Value(); None when malformed or beyond +-MAX_AMOUNT."""
    q = parse_quantity(raw)
    return None if q is None else _bounded_int(q)


def canonical_amount(resource: str, raw: object) -> int | None:
    """cpu in milli-cores, everything else (memory bytes, pods, batch-cpu milli-cores) in whole units."""
    return quantity_to_milli(raw) if resource == RES_CPU else quantity_to_int(raw)


#: amount_problem's answers for quantity strings (a pure function; the same few strings repeat
#: across thousands of pods): (resource, text) -> answer, cleared when it grows past the bound
_AMOUNTS: dict[tuple[str, str], tuple[int | None, str | None]] = {}
_AMOUNTS_MAX: Final = 4096


def amount_problem(resource: str, raw: object) -> tuple[int | None, str | None]:
    """(amount, None) for a valid non-negative quantity, else (None, why) naming the rule it breaks."""
    if type(raw) is str:
        key = (resource, raw)
        hit = _AMOUNTS.get(key)
        if hit is None:
            if len(_AMOUNTS) >= _AMOUNTS_MAX:
                _AMOUNTS.clear()
            hit = _AMOUNTS[key] = _amount_problem(resource, raw)
        return hit
    return _amount_problem(resource, raw)


def _amount_problem(resource: str, raw: object) -> tuple[int | None, str | None]:
    amount = canonical_amount(resource, raw)
    if amount is not None:
        if amount < 0:
            return None, "is negative"
        return amount, None
    if parse_quantity(raw) is None:
        return None, "is not a valid quantity"
    return None, f"is out of range (the limit is {MAX_AMOUNT} {'milli-units' if resource == RES_CPU else 'units'})"


Resources = dict[str, int]


def parse_resource_list(rl: Mapping[str, Any] | None, problems: list[str] | None = None) -> Resources:
    """A ResourceList in canonical units; malformed, absurd or negative entries are dropped (reported in problems)."""
    out: Resources = {}
    if not rl or not isinstance(rl, Mapping):
        if rl is not None and not isinstance(rl, Mapping) and problems is not None:
            problems.append(f"resources {short_repr(rl)} is not a mapping of quantities; ignored")
        return out
    for name, raw in rl.items():
        amount, why = amount_problem(str(name), raw)
        if amount is None:
            if problems is not None:
                problems.append(f"resource {name}={short_repr(raw)} {why}; ignored")
            continue
        out[str(name)] = amount
    return out


def short_repr(raw: object, limit: int = 40) -> str:
    """repr of a value, cut to `limit` characters (a 400-digit annotation must not flood a log line).

    Built from a bounded excerpt, never from the whole value: a YAML alias bomb is a few shared lists
    that expand to hundreds of millions of strings, and repr() of it never ends.
    """
    text = _bounded_repr(raw, limit + 1)
    if len(text) <= limit:
        return text
    if isinstance(raw, str | bytes | list | tuple | dict | set | frozenset):
        size = f"{len(raw)} {'chars' if isinstance(raw, str | bytes) else 'items'}"
    elif isinstance(raw, int):
        size = f"{raw.bit_length()} bits"
    else:
        size = "cut"
    return f"{text[: limit - 12]}...({size})"


def _bounded_repr(value: object, budget: int) -> str:
    """repr(value) when it is shorter than `budget`, else a prefix of it at least `budget` long (or all
    there is), computed from at most about `budget` characters' worth of the value."""
    if isinstance(value, str | bytes):
        return repr(value[:budget])
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 4 * budget:  # more digits than fit (and repr() refuses beyond 4300)
            return f"<an integer of {value.bit_length()} bits>"
        return repr(value)
    items: Iterable[Any]
    if isinstance(value, dict):
        opening, closing, items = "{", "}", value.items()
    elif isinstance(value, list):
        opening, closing, items = "[", "]", value
    elif isinstance(value, tuple):
        opening, closing, items = "(", ")" if len(value) != 1 else ",)", value
    elif isinstance(value, set | frozenset):
        if not value:
            return repr(value)
        opening, closing, items = "{", "}", value
    else:
        return repr(value)[:budget]
    out = [opening]
    used = 1
    for i, item in enumerate(items):
        if used >= budget:
            out.append("...")
            return "".join(out)
        if i:
            out.append(", ")
            used += 2
        if isinstance(item, tuple) and isinstance(value, dict):
            key = _bounded_repr(item[0], budget - used)
            part = key + ": " + _bounded_repr(item[1], budget - used - len(key) - 2)
        else:
            part = _bounded_repr(item, budget - used)
        out.append(part)
        used += len(part)
    out.append(closing)
    return "".join(out)


def format_cpu(milli: int) -> str:
    """Milli-cores as a quantity string (`1500m`, `2`)."""
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"


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


# --- Node-side parsers ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Watermarks:
    """(high, low) integer percents per resource, with why any pair fell back to its defaults."""

    cpu: tuple[int, int]
    memory: tuple[int, int]
    warnings: tuple[str, ...] = ()

    def high(self, resource: Resource) -> int:
        return self.cpu[0] if resource == "cpu" else self.memory[0]

    def low(self, resource: Resource) -> int:
        return self.cpu[1] if resource == "cpu" else self.memory[1]


def _strict_percent(raw: object) -> int | None:
    if raw is None:
        return None
    text = str(raw).strip()
    if not _INT_RE.match(text):
        return None
    return _small_int(text)


def parse_watermarks(annotations: Mapping[str, Any] | None) -> Watermarks:
    """Node watermark annotations; an invalid (high, low) pair falls back to that resource's defaults whole."""
    ann = annotations or {}
    pairs: dict[Resource, tuple[int, int]] = {}
    warnings: list[str] = []
    for r in RESOURCES:
        dh, dl = DEFAULT_WATERMARKS[r]
        raw: dict[WatermarkLevel, object] = {}
        for level in ("high", "low"):
            key = watermark_key(r, level)
            raw[level] = ann.get(key) if key in ann else ann.get(legacy_watermark_key(r, level))
        if raw["high"] is None and raw["low"] is None:
            pairs[r] = (dh, dl)
            continue
        high = dh if raw["high"] is None else _strict_percent(raw["high"])
        low = dl if raw["low"] is None else _strict_percent(raw["low"])
        if high is None or low is None or not (0 <= low < high <= 100):
            warnings.append(
                f"{r} watermarks high={short_repr(raw['high'])} low={short_repr(raw['low'])} are invalid "
                f"(integers 0..100 with high > low); using the defaults {dh}/{dl}"
            )
            pairs[r] = (dh, dl)
        else:
            pairs[r] = (high, low)
    return Watermarks(pairs["cpu"], pairs["memory"], tuple(warnings))


def parse_oversubscription_types(annotations: Mapping[str, Any] | None) -> Parsed[tuple[Resource, ...]]:
    """`volcano.sh/oversubscription-types` (default cpu,memory); unknown names are dropped with a warning."""
    ann = annotations or {}
    raw = ann.get(ANN_OVERSUBSCRIPTION_TYPES)
    if raw is None:
        return Parsed(DEFAULT_OVERSUBSCRIPTION_TYPES)
    names = [p.strip() for p in str(raw).split(",") if p.strip()]
    good = tuple(r for r in RESOURCES if r in names)
    bad = [n for n in names if n not in RESOURCES]
    warning = None
    if bad:
        unknown = short_repr(", ".join(bad), 80)
        warning = f"{ANN_OVERSUBSCRIPTION_TYPES}={short_repr(raw)}: unknown resource(s) {unknown} ignored"
    return Parsed(good, warning)


_NONNEG_INT_RE: Final = re.compile(r"^[0-9]+$")


def parse_oversubscription_amount(raw: object, key: str) -> Parsed[int]:
    """An agent-written X: a non-negative integer string up to MAX_AMOUNT; anything else is 0 with a warning."""
    if raw is None:
        return Parsed(0)
    text = str(raw).strip()
    if _NONNEG_INT_RE.match(text):
        value = _small_int(text)
        if value is not None and value <= MAX_AMOUNT:
            return Parsed(value)
        return Parsed(0, f"{key}={short_repr(raw)} is out of range (the limit is {MAX_AMOUNT}); treated as 0")
    return Parsed(0, f"{key}={short_repr(raw)} is not a non-negative integer; treated as 0")


def node_oversubscription(node: Mapping[str, Any]) -> tuple[Resources, list[str]]:
    """X per resource as the scheduler reads it: 0 unless the node carries the oversubscription label."""
    warnings: list[str] = []
    enabled = label_enabled(_labels(node), LABEL_OVERSUBSCRIPTION)
    if enabled.warning:
        warnings.append(enabled.warning)
    if not enabled.value:
        return {RES_CPU: 0, RES_MEMORY: 0}, warnings
    ann = _annotations(node)
    cpu = parse_oversubscription_amount(ann.get(ANN_OVERSUBSCRIPTION_CPU), ANN_OVERSUBSCRIPTION_CPU)
    mem = parse_oversubscription_amount(ann.get(ANN_OVERSUBSCRIPTION_MEMORY), ANN_OVERSUBSCRIPTION_MEMORY)
    warnings.extend(w for w in (cpu.warning, mem.warning) if w)
    return {RES_CPU: cpu.value, RES_MEMORY: mem.value}, warnings


#: the node-usage annotation is a few dozen bytes; anything far longer is not ours
_MAX_JSON_ANNOTATION: Final = 4096


def json_annotation(raw: object) -> Mapping[str, Any] | None:
    """A JSON-object annotation (tidemark.io/node-usage) or None: not a string, too long, not JSON, not an object.

    Never raises: json.loads raises RecursionError (not ValueError) on deeply nested arrays.
    """
    if not isinstance(raw, str) or len(raw) > _MAX_JSON_ANNOTATION:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, Mapping) else None


def node_is_evicting(node: Mapping[str, Any]) -> bool:
    """The agent's evicting mark: the annotation (parsed as a boolean) or the optional taint."""
    if parse_bool(_annotations(node).get(ANN_OFFLINE_JOB_EVICTING)).value:
        return True
    spec = node.get("spec") if isinstance(node, Mapping) else None
    taints = spec.get("taints") if isinstance(spec, Mapping) else None
    if isinstance(taints, list):
        return any(isinstance(t, Mapping) and t.get("key") == TAINT_OFFLINE_JOB_EVICTING for t in taints)
    return False


def ceil_div(a: int, b: int) -> int:
    """Integer ceiling division for non-negative b."""
    return -(-a // b) if b else 0


def percent(used: float, total: float) -> float:
    """used/total in percent; 0 when total is not positive (an unknown allocatable never triggers)."""
    if total <= 0 or math.isnan(used):
        return 0.0
    return 100.0 * used / total


# --- Go durations ---------------------------------------------------------------------------------
_GO_DURATION_PART: Final = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")
_GO_DURATION_UNITS: Final[Mapping[str, float]] = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
}


def parse_go_duration(raw: object) -> float | None:
    """Go's time.ParseDuration in seconds (`1h30m`, `500ms`, `-1.5s`, `0`); None when malformed.

    The one parser for every duration in confs, annotations and flags (Volcano and kubelet write Go
    durations); callers add their own rules (positive only, numbers allowed, an error instead of None).
    """
    if not isinstance(raw, str):
        return None
    s = raw.strip()
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        return None
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _GO_DURATION_PART.match(s, pos)
        if m is None or m.group(1) in ("", "."):
            return None
        total += float(m.group(1)) * _GO_DURATION_UNITS[m.group(2)]
        pos = m.end()
    # Go's ParseDuration fails beyond int64 nanoseconds (about 292 years); so do we
    if not math.isfinite(total) or total > _MAX_GO_DURATION_SECONDS:
        return None
    return sign * total


_MAX_GO_DURATION_SECONDS: Final = (2**63 - 1) / 1e9
