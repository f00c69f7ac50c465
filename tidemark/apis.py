"""The vocabulary both programs share: label/annotation keys and their parsers; with tidemark/quantities.py
(quantities, resource names, ResourceLists) and tidemark/pods.py (pod requests, QoS class, eviction exemptions),
whose public names it re-exports, so `from tidemark.apis import X` and `apis.X` reach the whole vocabulary.

Everything here is pure and never raises on malformed input: a bad value gives the documented
default plus a human-readable reason, so a daemon can log/event it and carry on (docs/design.md,
"Vocabulary and object contracts"). Objects are plain mappings in the Kubernetes JSON shape
(camelCase keys), as read from YAML files or API responses.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, Literal, NewType, TypeVar

from tidemark.pods import (
    SYSTEM_CRITICAL_CLASSES,
    SYSTEM_CRITICAL_PRIORITY,
    QosClass,
    annotations_of,
    eviction_exemption,
    is_daemonset_pod,
    is_mirror_pod,
    is_system_critical,
    labels_of,
    pod_limits,
    pod_requests,
    qos_class,
    volcano_requests,
)
from tidemark.quantities import (
    BATCH_RESOURCE,
    MAX_AMOUNT,
    MAX_BATCH_AMOUNT,
    MAX_PUBLISHED_CHARS,
    RES_BATCH_CPU,
    RES_BATCH_MEMORY,
    RES_CPU,
    RES_MEMORY,
    RES_PODS,
    RESOURCES,
    Resource,
    Resources,
    amount_problem,
    canonical_amount,
    format_cpu,
    parse_quantity,
    parse_resource_list,
    published_batch,
    published_x,
    quantity_to_int,
    quantity_to_milli,
    short_repr,
)

PodUID = NewType("PodUID", str)
NodeName = NewType("NodeName", str)


# --- Node labels (written by the user) ---------------------------------------------------------
LABEL_COLOCATION: Final = "volcano.sh/colocation"
LABEL_OVERSUBSCRIPTION: Final = "volcano.sh/oversubscription"
#: on every object the shipped manifests install (daemonset/), value `PART_OF_TIDEMARK`: the agent tells its own pods
#: by it (`agent.model.PodView.component`)
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
PART_OF_TIDEMARK: Final = "tidemark"

# --- Node annotations --------------------------------------------------------------------------
ANN_OVERSUBSCRIPTION_CPU: Final = "volcano.sh/oversubscription-cpu"
ANN_OVERSUBSCRIPTION_MEMORY: Final = "volcano.sh/oversubscription-memory"
ANN_OVERSUBSCRIPTION_TYPES: Final = "volcano.sh/oversubscription-types"
ANN_OFFLINE_JOB_EVICTING: Final = "volcano.sh/offline-job-evicting"
TAINT_OFFLINE_JOB_EVICTING: Final = ANN_OFFLINE_JOB_EVICTING
#: {"cpu": %, "memory": %, "window": "<s>s", "time": RFC3339}: the agent's window mean of pod usage in percent of
#: allocatable; optionally also "latest": {"cpu", "memory"} (the newest sample) and "p95": {"cpu", "memory"} (the
#: window's 95th percentile), which the scheduler's usage plugin reads when present (else the mean)
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
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")  # fullmatch: `$` passes a trailing newline


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
    if _INT_RE.fullmatch(text):
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
    value = _small_int(text) if _INT_RE.fullmatch(text) else None
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
    return parse_qos_level(annotations_of(pod)).offline


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


#: the most digits an integer annotation may have before it is rejected unread (int() of a huge
#: string is slow, and Python refuses more than 4300 digits)
_MAX_INT_DIGITS: Final = 18
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
    if not _INT_RE.fullmatch(text):
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


def parse_oversubscription_amount(raw: object, key: str) -> Parsed[int]:
    """An agent-written X (`tidemark.quantities.published_x`, the NodeReport gate's own rule); anything else is 0
    with a warning."""
    if raw is None:
        return Parsed(0)
    value, why = published_x(raw)
    if value is None:
        return Parsed(0, f"{key}={short_repr(raw)} {why}; treated as 0")
    return Parsed(value)


def node_oversubscription(node: Mapping[str, Any]) -> tuple[Resources, list[str]]:
    """X per resource as the scheduler reads it: 0 unless the node carries the oversubscription label."""
    warnings: list[str] = []
    enabled = label_enabled(labels_of(node), LABEL_OVERSUBSCRIPTION)
    if enabled.warning:
        warnings.append(enabled.warning)
    if not enabled.value:
        return {RES_CPU: 0, RES_MEMORY: 0}, warnings
    ann = annotations_of(node)
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
    if parse_bool(annotations_of(node).get(ANN_OFFLINE_JOB_EVICTING)).value:
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


def rfc3339_seconds(raw: str) -> float | None:
    """An RFC3339 timestamp (a zone is required) as epoch seconds, else None: the `time` of tidemark.io/node-usage."""
    text = raw.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    return dt.timestamp()


def offline_starving(allowance: float, requests: float, satisfaction: float) -> bool:
    """The offline tier is starved by node-usage's `offline` measure: what the node leaves it (`allowance`, milli-cpu)
    is at most `satisfaction` of what its pods request (milli-cpu). One rule for the agent, which publishes and evicts
    by it, and the scheduler's rescheduling plugin, which moves by it."""
    return requests > 0 and allowance <= satisfaction * requests


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


#: the whole vocabulary, this module's names and those of quantities.py and pods.py it re-exports
__all__ = [
    "ANN_ENABLE_QUOTA_BURST", "ANN_GROUP_NAME", "ANN_NODE_USAGE", "ANN_OFFLINE_JOB_EVICTING",
    "ANN_OVERSUBSCRIPTION_CPU", "ANN_OVERSUBSCRIPTION_MEMORY", "ANN_OVERSUBSCRIPTION_TYPES", "ANN_QOS_LEVEL",
    "ANN_QUEUE_NAME", "ANN_QUOTA_BURST_TIME", "BATCH_RESOURCE", "DEFAULT_OVERSUBSCRIPTION_TYPES", "DEFAULT_QUEUE",
    "DEFAULT_SCHEDULER_NAME", "DEFAULT_WATERMARKS", "DNS1123_LABEL_MAX", "DNS1123_SUBDOMAIN_MAX",
    "LABEL_COLOCATION", "LABEL_OVERSUBSCRIPTION", "MAX_AMOUNT", "MAX_BATCH_AMOUNT", "MAX_PUBLISHED_CHARS",
    "NODE_USAGE_FUTURE_SECONDS",
    "NODE_USAGE_STALE_SECONDS", "ONLINE_DEFAULT", "QOS_MAX", "QOS_MIN", "QOS_NAMED", "RESOURCES", "RES_BATCH_CPU",
    "RES_BATCH_MEMORY", "RES_CPU", "RES_MEMORY", "RES_PODS", "SYSTEM_CRITICAL_CLASSES", "SYSTEM_CRITICAL_PRIORITY",
    "TAINT_OFFLINE_JOB_EVICTING", "NodeName", "Parsed", "PodUID", "QosClass", "QosLevel", "Resource", "Resources",
    "WatermarkLevel", "Watermarks", "amount_problem", "annotations_of", "canonical_amount", "ceil_div",
    "dns1123_label_problem", "dns1123_subdomain_problem", "eviction_exemption", "format_cpu", "is_daemonset_pod",
    "is_mirror_pod", "is_offline", "is_system_critical", "json_annotation", "label_enabled", "labels_of",
    "legacy_watermark_key", "node_is_evicting", "node_oversubscription", "parse_bool", "parse_go_duration",
    "parse_oversubscription_amount", "parse_oversubscription_types", "parse_qos_level", "parse_quantity",
    "parse_quota_burst", "parse_resource_list", "parse_watermarks", "percent", "pod_limits", "pod_requests",
    "published_batch", "published_x",
    "qos_class", "quantity_to_int", "quantity_to_milli", "short_repr", "volcano_requests", "watermark_key",
]
