"""usage: keep pods off busy nodes and prefer idle ones (Volcano's usage plugin, usage.go + estimator.go).

Volcano reads node usage from a metrics source (Prometheus, ...); Tidemark reads what its agent
publishes on each Node, `tidemark.io/node-usage` = `{"cpu": <percent>, "memory": <percent>,
"window": "<seconds>s", "time": "<RFC3339>"}`: smoothed usage in percent of allocatable. The value is
stale when `time` is more than 5 minutes before the session's `now` (Volcano's MetricsActiveTime);
a malformed annotation is ignored with a warning. A node without fresh usage passes the predicate
and scores 0, as in Volcano.

- Predicate (enablePredicate): a node whose cpu usage is above `thresholds.cpu` (default 80), or
  whose memory usage is above `thresholds.mem` (default 80), is UnschedulableAndUnresolvable.
  Strictly above: a node at exactly the threshold passes. Computed once per session for all nodes.
- Score (enableNodeOrder): with composite utilisation per resource
  `U = clamp(usage% / 100 + shadow / allocatable, 0, 1)`,
  `score = ((1 - U_cpu) * cpu.weight + (1 - U_mem) * memory.weight) / (cpu.weight + memory.weight)
  * 100 * usage.weight` (defaults 5, 1, 1), so lower usage scores higher.
- Shadow load (Volcano's estimator): pods the published usage cannot show yet. Pods placed during the
  session (allocate/pipeline events; deallocate events take back exactly what was added), and pods
  already on a node that are Allocated/Binding/Bound, or Running for less than the metrics delay
  (`metrics.interval` of the conf, default 30s; no startTime counts as recent). Estimate per pod:
  `(request * request_ratio + (limit - request) * burst_ratio) * risk`, clamped to [0, limit]
  (limit = request when absent or smaller); BestEffort pods `be_cpu` / `be_mem` * risk; `risk` =
  `risk_factor` once the node's weighted composite load reaches `risk_threshold`, else 1
  (`estimator:` request_ratio 0.7, burst_ratio 0, risk_threshold 0.6, risk_factor 1.2, be_cpu 250m,
  be_mem 200Mi). Without it every pod of a session would pile onto the one least-used node.

Aggregates and pod classes (Koordinator's LoadAware, pkg/scheduler/plugins/loadaware: load_aware.go
Filter/Score, helper.go usageThresholdsFilterProfile): the annotation may also carry `"latest": {"cpu",
"memory"}` (the newest sample) and `"p95": {"cpu", "memory"}` (the window's 95th percentile); `aggregation:
{filter: <how>, score: <how>}` picks `mean` (default: Volcano's behaviour), `latest`, `p95` or `peak`
(the larger of p95 and latest) for each, an absent or malformed aggregate falling back to the mean.
`thresholds` apply to every pod unless `offline.thresholds` is set: then offline pods
(volcano.sh/qos-level < 0) are filtered against it instead (Koordinator's prodUsageThresholds, the
other way round: there the latency-sensitive class gets its own thresholds). CPU is filtered, for both classes,
by the usage without the offline pods' own (the aggregate minus the window mean's offline part, `cpu` - `online`,
when the annotation carries `online`): the same U_non as the agent's B, so neither a node busy with offline work
that is leaving keeps the next offline pods off it, nor a node whose idle CPU offline pods soak (which the offline
tier yields) refuses online pods. Memory: offline pods by the usage without theirs, online pods by the whole usage
(offline pages are not given back at once).

Departures: usage percent and shadow load are relative to allocatable (the agent publishes percent of
allocatable; Volcano divides shadow load by capacity); staleness is measured against the session's
`now`, not the wall clock, so simulations are reproducible.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.resource import quantity_milli, quantity_value
from scheduler_ext.api.task import TaskInfo, parse_time
from scheduler_ext.api.types import ALLOCATED, BINDING, BOUND, RUNNING, FitError, Status, StatusCode, TaskID
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.session_plugins import BatchPredicateResult, Event, EventHandler
from tidemark.apis import (
    ANN_NODE_USAGE,
    NODE_USAGE_FUTURE_SECONDS,
    NODE_USAGE_STALE_SECONDS,
    json_annotation,
    parse_go_duration,
    parse_resource_list,
    rfc3339_seconds,
    short_repr,
)

log = logging.getLogger(__name__)

USAGE_WEIGHT: Final = "usage.weight"
CPU_WEIGHT: Final = "cpu.weight"
MEMORY_WEIGHT: Final = "memory.weight"
THRESHOLDS: Final = "thresholds"
ESTIMATOR: Final = "estimator"
OFFLINE_THRESHOLDS: Final = "offline.thresholds"
AGGREGATION: Final = "aggregation"
#: how a node's usage is read from the annotation: the window mean, the newest sample, the window's p95,
#: or the larger of p95 and the newest sample (a node that just turned hot, or one that spikes)
AGGREGATES: Final = ("mean", "latest", "p95", "peak")
NODE_USAGE_CPU_EXTEND: Final = "the CPU load of the node exceeds the upper limit."
NODE_USAGE_MEMORY_EXTEND: Final = "the memory load of the node exceeds the upper limit."
MAX_NODE_SCORE: Final = 100.0
DEFAULT_METRICS_INTERVAL: Final = 30.0

#: malformed annotation values already warned about (a scheduler opens a session every second)
_WARNED: set[tuple[str, str]] = set()
_WARNED_MAX: Final = 10_000


def _warn_once(node: str, raw: str, why: str) -> None:
    # remembered and logged by a bounded excerpt: anyone who may annotate a Node can write up to 256 KiB here
    key = (node, hashlib.sha256(raw.encode(errors="replace")).hexdigest())
    if key in _WARNED:
        return
    if len(_WARNED) >= _WARNED_MAX:
        _WARNED.clear()
    _WARNED.add(key)
    log.warning("usage: node %s: %s=%s is malformed (%s); ignored", node, ANN_NODE_USAGE, short_repr(raw, 120), why)


def _percent(doc: Mapping[str, Any], key: str) -> float | None:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    if not math.isfinite(f) or f < 0:
        return None
    return f


def parse_node_usage(raw: object) -> tuple[float, float, float] | str:
    """(cpu %, memory %, time as epoch seconds) from the annotation, or why it is malformed."""
    if not isinstance(raw, str):
        return "not a string"
    doc = json_annotation(raw)
    if doc is None:
        return "not a JSON object (or longer than any the agent writes)"
    cpu = _percent(doc, "cpu")
    mem = _percent(doc, "memory")
    if cpu is None or mem is None:
        return "cpu and memory must be non-negative numbers"
    t_raw = doc.get("time")
    if not isinstance(t_raw, str) or not t_raw.strip():
        return "time must be an RFC3339 string"
    t = rfc3339_seconds(t_raw)
    if t is None:
        return "time must be an RFC3339 timestamp with a zone"
    window = doc.get("window")
    if window is not None and not isinstance(window, str):
        return "window must be a string such as 60s"
    return cpu, mem, t


def _pair(doc: Mapping[str, Any], key: str) -> tuple[float, float] | str | None:
    """An optional {"cpu": %, "memory": %} member: the pair, None when absent, or why it is malformed."""
    v = doc.get(key)
    if v is None:
        return None
    if not isinstance(v, Mapping):
        return f"{key} must be an object {{cpu, memory}}"
    cpu, mem = _percent(v, "cpu"), _percent(v, "memory")
    if cpu is None or mem is None:
        return f"{key}.cpu and {key}.memory must be non-negative numbers"
    return cpu, mem


def parse_usage_aggregates(raw: object) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """The optional `latest` and `p95` pairs of a well-formed annotation, and why any was ignored.

    The contract's extension (docs/design.md): an agent that does not write them, or writes a bad one,
    leaves the reader on the window mean.
    """
    doc = json_annotation(raw)
    found: dict[str, tuple[float, float]] = {}
    why: list[str] = []
    if doc is None:
        return found, why
    for key in ("latest", "p95", "online"):
        got = _pair(doc, key)
        if isinstance(got, str):
            why.append(got)
        elif got is not None:
            found[key] = got
    return found, why


def _int_arg(args: Mapping[str, Any], key: str) -> int | None:
    v = args.get(key)
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _float_arg(args: Mapping[str, Any], key: str) -> float | None:
    v = args.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _quantity_arg(raw: object, default: float, *, milli: bool, int_unit: float) -> float:
    """Volcano's parseBestEffortCPU/Memory: an int (milli-cpu / MiB) or a quantity string."""
    if isinstance(raw, bool) or raw is None:
        return default
    if isinstance(raw, int):
        return default if raw < 0 else float(raw) * int_unit
    if isinstance(raw, str):
        v = quantity_milli(raw) if milli else quantity_value(raw)
        return default if v is None or v < 0 else v
    return default


def pod_limits(pod: Mapping[str, Any]) -> tuple[float, float]:
    """(cpu milli, memory bytes) limits as Volcano's GetPodResourceLimit: containers summed, the
    init-container maximum (sidecars accumulating), pod-level limits, plus overhead where a limit is set;
    a missing limit counts 0."""
    spec = pod.get("spec") or {}

    def lim(c: Mapping[str, Any]) -> dict[str, int]:
        res = c.get("resources") or {}
        return parse_resource_list(res.get("limits") if isinstance(res, Mapping) else None)

    total = {"cpu": 0.0, "memory": 0.0}
    for c in spec.get("containers") or []:
        if isinstance(c, Mapping):
            for k, v in lim(c).items():
                if k in total:
                    total[k] += v
    sidecars = {"cpu": 0.0, "memory": 0.0}
    init_max = {"cpu": 0.0, "memory": 0.0}
    for c in spec.get("initContainers") or []:
        if not isinstance(c, Mapping):
            continue
        cl = lim(c)
        if c.get("restartPolicy") == "Always":
            for k in total:
                total[k] += cl.get(k, 0)
                sidecars[k] += cl.get(k, 0)
            step = dict(sidecars)
        else:
            step = {k: cl.get(k, 0) + sidecars[k] for k in total}
        for k in total:
            init_max[k] = max(init_max[k], step[k])
    for k in total:
        total[k] = max(total[k], init_max[k])
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping):
        for k, v in parse_resource_list(pod_level.get("limits")).items():
            if k in total:
                total[k] = float(v)
    for k, v in parse_resource_list(spec.get("overhead")).items():
        if k in total and total[k] > 0:
            total[k] += v
    return total["cpu"], total["memory"]


def _thresholds(raw: object, name: str, default: tuple[float, float]) -> tuple[float, float]:
    """{cpu, mem} integer percents in 0..100; a bad or missing value keeps its default (said once)."""
    out = list(default)
    if isinstance(raw, Mapping):
        for i, key in enumerate(("cpu", "mem")):
            v = _int_arg(raw, key)
            if v is not None and 0 <= v <= 100:
                out[i] = float(v)
            elif key in raw:
                log.warning("usage: %s.%s=%r is not an integer in 0..100; using %g", name, key, raw[key], out[i])
    elif raw is not None:
        log.warning("usage: %s must be a mapping {cpu, mem}; using %g/%g", name, *default)
    return out[0], out[1]


def _aggregation(raw: object) -> tuple[str, str]:
    """(filter, score) aggregates, each one of AGGREGATES; `mean` (Volcano's reading) where unset or bad."""
    out = ["mean", "mean"]
    if isinstance(raw, Mapping):
        for i, key in enumerate(("filter", "score")):
            v = raw.get(key)
            if v in AGGREGATES:
                out[i] = str(v)
            elif v is not None:
                log.warning("usage: %s.%s=%r is not one of %s; using mean", AGGREGATION, key, v, ", ".join(AGGREGATES))
    elif raw is not None:
        log.warning("usage: %s must be a mapping {filter, score}; using mean for both", AGGREGATION)
    return out[0], out[1]


def estimate_pod_resource(request: float, limit: float, request_weight: float, burst_weight: float,
                          risk: float) -> float:
    """Volcano's EstimatePodResource: (request*rw + (limit-request)*bw) * risk, clamped to [0, limit]."""
    request = max(request, 0.0)
    effective = limit if limit > 0 and limit >= request else request
    burst = max(effective - request, 0.0)
    est = (request * request_weight + burst * burst_weight) * risk
    return min(max(est, 0.0), effective)


class UsagePlugin(Plugin):
    name = "usage"

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.usage_weight = self._weight(arguments, USAGE_WEIGHT, 5)
        self.cpu_weight = self._weight(arguments, CPU_WEIGHT, 1)
        self.memory_weight = self._weight(arguments, MEMORY_WEIGHT, 1)
        self.cpu_threshold, self.mem_threshold = _thresholds(arguments.get(THRESHOLDS), THRESHOLDS, (80.0, 80.0))
        #: offline pods' thresholds; the online ones (Volcano's `thresholds`) when not configured
        self.offline_cpu_threshold, self.offline_mem_threshold = _thresholds(
            arguments.get(OFFLINE_THRESHOLDS), OFFLINE_THRESHOLDS, (self.cpu_threshold, self.mem_threshold)
        )
        self.filter_by, self.score_by = _aggregation(arguments.get(AGGREGATION))
        self.request_ratio = 0.7
        self.burst_ratio = 0.0
        self.risk_threshold = 0.6
        self.risk_factor = 1.2
        self.be_cpu = 250.0
        self.be_memory = float(200 * 1024 * 1024)
        est = arguments.get(ESTIMATOR)
        if isinstance(est, Mapping):
            rr = _float_arg(est, "request_ratio")
            if rr is not None and 0 <= rr <= 1:
                self.request_ratio = rr
            br = _float_arg(est, "burst_ratio")
            if br is not None and 0 <= br <= 1:
                self.burst_ratio = br
            rt = _float_arg(est, "risk_threshold")
            if rt is not None and 0 <= rt <= 1:
                self.risk_threshold = rt
            rf = _float_arg(est, "risk_factor")
            if rf is not None and rf >= 1:
                self.risk_factor = rf
            self.be_cpu = _quantity_arg(est.get("be_cpu"), self.be_cpu, milli=True, int_unit=1.0)
            self.be_memory = _quantity_arg(est.get("be_mem"), self.be_memory, milli=False, int_unit=1024.0 * 1024)
        elif est is not None:
            log.warning("usage: %s must be a mapping; using the defaults", ESTIMATOR)
        self.metrics_interval = DEFAULT_METRICS_INTERVAL
        # per-session state
        self.cpu = np.zeros(0)
        self.mem = np.zeros(0)
        self.fresh = np.zeros(0, dtype=bool)
        self.over = np.zeros(0, dtype=bool)
        self.over_cpu = np.zeros(0, dtype=bool)
        self.over_offline = np.zeros(0, dtype=bool)
        self.over_offline_cpu = np.zeros(0, dtype=bool)
        self.shadow_cpu = np.zeros(0)
        self.shadow_mem = np.zeros(0)
        self.alloc_cpu = np.zeros(0)
        self.alloc_mem = np.zeros(0)
        self.snapshots: dict[TaskID, tuple[int, float, float]] = {}

    @staticmethod
    def _weight(arguments: Arguments, key: str, default: int) -> int:
        v = arguments.get_int(key, default)
        return default if v < 0 else v

    # --- session ------------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        interval = ssn.conf.metrics.get("interval") if isinstance(ssn.conf.metrics, Mapping) else None
        if isinstance(interval, str):
            d = parse_go_duration(interval)
            if d is not None and d > 0:
                self.metrics_interval = d
        table = ssn.table
        n = table.n
        self.cpu = np.zeros(n)
        self.mem = np.zeros(n)
        self.fresh = np.zeros(n, dtype=bool)
        #: per aggregate, (cpu %, memory %) per node; the mean where the annotation lacks that aggregate
        levels = {how: (np.zeros(n), np.zeros(n)) for how in AGGREGATES}
        #: the window mean of the offline pods' own usage (mean - online), taken off what offline pods are filtered by
        off_cpu, off_mem = np.zeros(n), np.zeros(n)
        for node in ssn.node_list:
            raw = node.annotations.get(ANN_NODE_USAGE)
            if raw is None:
                continue
            parsed = parse_node_usage(raw)
            if isinstance(parsed, str):
                _warn_once(node.name, str(raw), parsed)
                continue
            cpu, mem, t = parsed
            if t - ssn.now > NODE_USAGE_FUTURE_SECONDS:  # never "fresh for ever": stale, and said once
                _warn_once(node.name, str(raw), f"its time is {t - ssn.now:.0f} s in the future, beyond "
                           f"{NODE_USAGE_FUTURE_SECONDS:g} s of clock skew: stale")
                continue
            if ssn.now - t > NODE_USAGE_STALE_SECONDS:
                log.debug("usage: node %s: usage from %s is stale; ignored", node.name, t)
                continue
            self.fresh[node.index] = True
            aggregates, why = parse_usage_aggregates(raw)
            for reason in why:
                _warn_once(node.name, str(raw), reason + "; the window mean is used instead")
            if "online" in aggregates:
                off_cpu[node.index] = max(0.0, cpu - aggregates["online"][0])
                off_mem[node.index] = max(0.0, mem - aggregates["online"][1])
            latest = aggregates.get("latest", (cpu, mem))
            p95 = aggregates.get("p95", (cpu, mem))
            peak = (max(latest[0], p95[0]), max(latest[1], p95[1]))
            for how, (c, m) in (("mean", (cpu, mem)), ("latest", latest), ("p95", p95), ("peak", peak)):
                levels[how][0][node.index] = c
                levels[how][1][node.index] = m
        self.cpu, self.mem = levels[self.score_by]
        f_cpu, f_mem = levels[self.filter_by]
        # CPU, both classes, by the same usage as the agent's B (A x ratio - U_non): without the offline pods' own,
        # which the offline tier yields (cpu.idle, the tier's ceiling) and shares. Offline pods: a node whose offline
        # job just ended kept the next job's pods off for a window (the colocation benchmark's two-thirds cells after
        # a cell at 80 % node CPU). Online pods: a node whose idle CPU offline work soaked refused them ("the CPU load
        # of the node exceeds the upper limit"), the very node colocation makes; Koordinator's LoadAware filters its
        # Prod pods by the Prod pods' usage the same way (prodUsageThresholds). Memory stays the whole usage for
        # online pods: offline pages are not given back at once, and an online pod would meet direct reclaim.
        non_offline_cpu = np.maximum(0.0, f_cpu - off_cpu)
        self.over_cpu = self.fresh & (non_offline_cpu > self.cpu_threshold)
        self.over = self.over_cpu | (self.fresh & (f_mem > self.mem_threshold))
        self.over_offline_cpu = self.fresh & (non_offline_cpu > self.offline_cpu_threshold)
        self.over_offline = self.over_offline_cpu | (
            self.fresh & (np.maximum(0.0, f_mem - off_mem) > self.offline_mem_threshold))
        self.alloc_cpu = table.allocatable[:, 0].copy()
        self.alloc_mem = table.allocatable[:, 1].copy()
        self.shadow_cpu = np.zeros(n)
        self.shadow_mem = np.zeros(n)
        self.snapshots = {}
        self._warm_up(ssn)

        ssn.add_event_handler(EventHandler(self._on_allocate(ssn), self._on_deallocate))

        def predicate(task: TaskInfo, node: NodeInfo) -> FitError | None:
            st = self._status(node.index, task.offline)
            return None if st is None else FitError(task.namespace, task.name, node.name, (st,))

        ssn.add_predicate_fn(self.name, predicate)
        ssn.add_batch_predicate_fn(self.name, self.batch_predicate)
        ssn.add_vector_node_order_fn(self.name, self.score)

    def on_session_close(self, ssn: Session) -> None:
        self.snapshots = {}

    # --- shadow load ----------------------------------------------------------------------------
    def _shadow(self, ssn: Session, task: TaskInfo) -> bool:
        """Volcano's shouldAddToShadowCache: placed, but not yet visible in the published usage."""
        if not task.node_name:
            return False
        if task.status in (ALLOCATED, BINDING, BOUND):
            return True
        if task.status == RUNNING:
            started = parse_time((task.pod.get("status") or {}).get("startTime"))
            return started is None or ssn.now - started < self.metrics_interval
        return False

    def _warm_up(self, ssn: Session) -> None:
        for node in ssn.node_list:
            for task in node.tasks.values():
                if self._shadow(ssn, task):
                    self._add(node.index, task)

    def composite(self, idx: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        """Composite cpu and memory utilisation (0..1) of the given nodes."""
        def comp(pct: np.ndarray, shadow: np.ndarray, alloc: np.ndarray) -> np.ndarray:
            a = alloc[idx]
            safe = np.where(a > 0, a, 1.0)
            real = np.where(self.fresh[idx], pct[idx], 0.0) / 100.0
            return np.asarray(np.where(a > 0, np.clip(real + shadow[idx] / safe, 0.0, 1.0), 0.0))

        return comp(self.cpu, self.shadow_cpu, self.alloc_cpu), comp(self.mem, self.shadow_mem, self.alloc_mem)

    def _risk(self, i: int) -> float:
        if self.risk_factor < 1.0:
            return 1.0
        cw, mw = self.cpu_weight, self.memory_weight
        if cw + mw == 0:
            load = 0.0
        else:
            c, m = self.composite(i)
            load = (float(c) * cw + float(m) * mw) / (cw + mw)
        return self.risk_factor if load >= self.risk_threshold else 1.0

    def estimate(self, task: TaskInfo, risk: float) -> tuple[float, float]:
        if task.best_effort:
            return max(self.be_cpu, 0.0) * risk, max(self.be_memory, 0.0) * risk
        cached = task.cache.get("usage.limits")
        if cached is None:
            cached = task.cache["usage.limits"] = pod_limits(task.pod)
        cpu_lim, mem_lim = cached
        req = task.init_resreq
        return (
            estimate_pod_resource(req.milli_cpu, cpu_lim, self.request_ratio, self.burst_ratio, risk),
            estimate_pod_resource(req.memory, mem_lim, self.request_ratio, self.burst_ratio, risk),
        )

    def _add(self, i: int, task: TaskInfo) -> None:
        self._sub(task.uid)
        cpu, mem = self.estimate(task, self._risk(i))
        self.shadow_cpu[i] += cpu
        self.shadow_mem[i] += mem
        self.snapshots[task.uid] = (i, cpu, mem)

    def _sub(self, uid: TaskID) -> None:
        snap = self.snapshots.pop(uid, None)
        if snap is None:
            return
        i, cpu, mem = snap
        self.shadow_cpu[i] = max(0.0, self.shadow_cpu[i] - cpu)
        self.shadow_mem[i] = max(0.0, self.shadow_mem[i] - mem)

    def _on_allocate(self, ssn: Session) -> Any:
        def handler(ev: Event) -> None:
            node = ssn.nodes.get(ev.task.node_name)
            if node is not None:
                self._add(node.index, ev.task)

        return handler

    def _on_deallocate(self, ev: Event) -> None:
        self._sub(ev.task.uid)

    # --- predicate ------------------------------------------------------------------------------
    def _over(self, offline: bool) -> tuple[np.ndarray, np.ndarray]:
        """(over any threshold, over the cpu one) per node for the pod's class."""
        return (self.over_offline, self.over_offline_cpu) if offline else (self.over, self.over_cpu)

    def _status(self, i: int, offline: bool = False) -> Status | None:
        over, over_cpu = self._over(offline)
        if not over[i]:
            return None
        reason = NODE_USAGE_CPU_EXTEND if over_cpu[i] else NODE_USAGE_MEMORY_EXTEND
        return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, reason, self.name)

    def batch_predicate(self, task: TaskInfo, nodes: np.ndarray) -> BatchPredicateResult:
        over, over_cpu = self._over(task.offline)
        bad = over[nodes]
        if not bad.any():
            return BatchPredicateResult(~bad)
        failing = nodes[bad]
        cpu = over_cpu[failing]
        failures: list[tuple[np.ndarray, tuple[Status, ...]]] = []
        for mask, reason in ((cpu, NODE_USAGE_CPU_EXTEND), (~cpu, NODE_USAGE_MEMORY_EXTEND)):
            if mask.any():
                failures.append(
                    (failing[mask], (Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, reason, self.name),))
                )
        return BatchPredicateResult(~bad, failures=failures)

    # --- score ----------------------------------------------------------------------------------
    def score(self, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
        cw, mw = self.cpu_weight, self.memory_weight
        if cw + mw == 0:
            return np.zeros(len(nodes))
        c, m = self.composite(nodes)
        s = ((1.0 - c) * cw + (1.0 - m) * mw) / (cw + mw) * MAX_NODE_SCORE * self.usage_weight
        return np.asarray(np.where(self.fresh[nodes], s, 0.0))


SPEC = PluginSpec(
    name="usage",
    build=UsagePlugin,
    arguments=(
        ArgSpec(USAGE_WEIGHT, "int", 5, "weight of the usage score (score 0..100 * usage.weight)"),
        ArgSpec(CPU_WEIGHT, "int", 1, "weight of cpu within the usage score"),
        ArgSpec(MEMORY_WEIGHT, "int", 1, "weight of memory within the usage score"),
        ArgSpec(THRESHOLDS, "any", None, "{cpu: percent, mem: percent} (default 80/80): nodes above are filtered"),
        ArgSpec(OFFLINE_THRESHOLDS, "any", None, "{cpu: percent, mem: percent}: offline pods' thresholds "
                "(default: thresholds)"),
        ArgSpec(AGGREGATION, "any", None, "{filter: how, score: how}, how in mean (default), latest, p95, peak "
                "(max of p95 and latest)"),
        ArgSpec(ESTIMATOR, "any", None, "shadow-load estimator: request_ratio, burst_ratio, risk_threshold, "
                "risk_factor, be_cpu, be_mem (Volcano's defaults 0.7, 0, 0.6, 1.2, 250m, 200Mi)"),
    ),
    doc="Filter nodes over usage thresholds and prefer less used nodes (agent-published usage).",
)
