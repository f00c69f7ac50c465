"""TaskInfo: one pod as the scheduler sees it (Volcano's api/job_info.go TaskInfo, NewTaskInfo)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

import numpy as np

from scheduler_ext.api.resource import (
    RES_CPU,
    RES_EPHEMERAL_STORAGE,
    RES_MEMORY,
    RES_PODS,
    Resource,
    is_scalar_resource_name,
    quantity_milli,
    quantity_value,
)
from scheduler_ext.api.types import (
    BOUND,
    FAILED,
    PENDING,
    RELEASING,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    JobID,
    TaskID,
    TaskStatus,
)
from tidemark.apis import ANN_GROUP_NAME, is_offline, parse_bool, volcano_requests

TASK_SPEC_KEY: Final = "volcano.sh/task-spec"
POD_PREEMPTABLE: Final = "volcano.sh/preemptable"
REVOCABLE_ZONE: Final = "volcano.sh/revocable-zone"
TASK_PRIORITY_ANNOTATION: Final = "volcano.sh/task-priority"
#: kube-scheduler's defaults for containers that state no request (scoring only)
DEFAULT_MILLI_CPU_REQUEST: Final = 100.0
DEFAULT_MEMORY_REQUEST: Final = 200.0 * 1024 * 1024

_INT_RE: Final = re.compile(r"[+-]?[0-9]+")  # fullmatch: Go refuses "5\n"


def parse_time(raw: object) -> float | None:
    """RFC3339 timestamp -> epoch seconds; None when absent or malformed."""
    if not raw:
        return None
    text = str(raw).strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def go_parse_int(text: str) -> int | None:
    """strconv.Atoi / ParseInt(…, 10, 32)."""
    return int(text) if _INT_RE.fullmatch(text) else None


def pod_index(name: str) -> int | None:
    """The numeric last '-' field of names with at least 3 fields (Volcano's GetPodIndexUnderTask)."""
    parts = name.split("-")
    if len(parts) < 3:
        return None
    return go_parse_int(parts[-1])


def _canonical_to_resource(canonical: Mapping[str, int]) -> Resource:
    """tidemark.apis canonical units (cpu milli, others whole) -> Volcano units (scalars in milli)."""
    r = Resource()
    for name, v in canonical.items():
        if name == RES_CPU:
            r.milli_cpu += v
        elif name == RES_MEMORY:
            r.memory += v
        elif name == RES_PODS:
            r.max_task_num += v
            r.add_scalar(name, float(v))
        elif name == RES_EPHEMERAL_STORAGE or is_scalar_resource_name(name):
            r.add_scalar(name, float(v) * 1000.0)
    return r


def task_status_of(pod: Mapping[str, Any]) -> TaskStatus:
    """Volcano's getTaskStatus from the pod phase, deletionTimestamp and nodeName."""
    md = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    phase = status.get("phase") or "Pending"
    deleting = bool(md.get("deletionTimestamp"))
    if phase == "Running":
        return RELEASING if deleting else RUNNING
    if phase == "Pending":
        if deleting:
            return RELEASING
        return BOUND if spec.get("nodeName") else PENDING
    if phase == "Succeeded":
        return SUCCEEDED
    if phase == "Failed":
        return FAILED
    return UNKNOWN


#: the vectors of a task not yet bound to a table (shared: empty, never written)
_NO_VALUES: Final = np.zeros(0)
_NO_COLS: Final = np.zeros(0, dtype=np.intp)


def _kube_requests(spec: Mapping[str, Any]) -> tuple[dict[str, float], float, float]:
    """The pod's request as kube-scheduler's NodeInfo counts it, plus its non-zero cpu/memory for scoring."""

    def container_req(c: Mapping[str, Any]) -> tuple[dict[str, float], float, float]:
        res = c.get("resources") or {}
        reqs = res.get("requests")
        if reqs is None:
            reqs = res.get("limits") or {}
        out: dict[str, float] = {}
        for name, raw in (reqs or {}).items():
            v = quantity_milli(raw) if name == RES_CPU or is_scalar_resource_name(name) else quantity_value(raw)
            if v is not None:
                out[str(name)] = v
        nz_cpu = out.get(RES_CPU, DEFAULT_MILLI_CPU_REQUEST) if RES_CPU in (reqs or {}) else DEFAULT_MILLI_CPU_REQUEST
        nz_mem = out.get(RES_MEMORY, DEFAULT_MEMORY_REQUEST) if RES_MEMORY in (reqs or {}) else DEFAULT_MEMORY_REQUEST
        return out, nz_cpu, nz_mem

    total: dict[str, float] = {}
    nz_cpu = nz_mem = 0.0
    for c in spec.get("containers") or []:
        if not isinstance(c, Mapping):
            continue
        r, a, b = container_req(c)
        for k, v in r.items():
            total[k] = total.get(k, 0.0) + v
        nz_cpu += a
        nz_mem += b
    side: dict[str, float] = {}
    side_cpu = side_mem = 0.0
    init_max: dict[str, float] = {}
    init_cpu = init_mem = 0.0
    for c in spec.get("initContainers") or []:
        if not isinstance(c, Mapping):
            continue
        r, a, b = container_req(c)
        if c.get("restartPolicy") == "Always":
            for k, v in r.items():
                total[k] = total.get(k, 0.0) + v
                side[k] = side.get(k, 0.0) + v
            nz_cpu += a
            nz_mem += b
            side_cpu += a
            side_mem += b
            step, scpu, smem = dict(side), side_cpu, side_mem
        else:
            step = dict(r)
            for k, v in side.items():
                step[k] = step.get(k, 0.0) + v
            scpu, smem = a + side_cpu, b + side_mem
        for k, v in step.items():
            if v > init_max.get(k, 0.0):
                init_max[k] = v
        init_cpu = max(init_cpu, scpu)
        init_mem = max(init_mem, smem)
    for k, v in init_max.items():
        if v > total.get(k, 0.0):
            total[k] = v
    nz_cpu = max(nz_cpu, init_cpu)
    nz_mem = max(nz_mem, init_mem)
    for name, raw in (spec.get("overhead") or {}).items():
        ov = quantity_milli(raw) if name == RES_CPU or is_scalar_resource_name(name) else quantity_value(raw)
        if ov is not None:
            total[str(name)] = total.get(str(name), 0.0) + ov
            if name == RES_CPU:
                nz_cpu += ov
            elif name == RES_MEMORY:
                nz_mem += ov
    return total, nz_cpu, nz_mem


class TaskInfo:
    """A pod in the session. Mutable: status and node change as actions run (and roll back)."""

    __slots__ = (
        "best_effort",
        "cache",
        "creation",
        "eviction_occurred",
        "has_pod_affinity",
        "has_restartable_init_container",
        "index",
        "init_check_cols",
        "init_resreq",
        "init_vec",
        "job",
        "kube_nonzero",
        "kube_req",
        "kube_vec",
        "labels",
        "last_transaction",
        "name",
        "namespace",
        "node_name",
        "offline",
        "pod",
        "preemptable",
        "priority",
        "resreq",
        "resreq_vec",
        "revocable_zone",
        "sch_gated",
        "scheduler_name",
        "status",
        "task_role",
        "uid",
    )

    def __init__(
        self, pod: Mapping[str, Any], *, default_creation: float = 0.0, problems: list[str] | None = None
    ) -> None:
        md = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        ann = md.get("annotations") or {}
        labels = md.get("labels") or {}
        self.pod = pod
        self.name: str = str(md.get("name") or "")
        self.namespace: str = str(md.get("namespace") or "default")
        self.uid = TaskID(str(md.get("uid") or f"{self.namespace}/{self.name}"))
        group = ann.get(ANN_GROUP_NAME)
        self.job = JobID(f"{self.namespace}/{group}") if group else JobID("")
        self.task_role: str = str(ann.get(TASK_SPEC_KEY) or labels.get(TASK_SPEC_KEY) or "")
        self.labels: Mapping[str, str] = labels
        self.scheduler_name: str = str(spec.get("schedulerName") or "default-scheduler")

        resreq_c, init_c = volcano_requests(pod, problems)
        self.resreq = _canonical_to_resource(resreq_c)
        self.init_resreq = _canonical_to_resource(init_c)
        # Volcano counts the pod itself as one unit of the `pods` resource
        self.resreq.add_scalar(RES_PODS, 1.0)
        self.init_resreq.add_scalar(RES_PODS, 1.0)
        self.best_effort = self.init_resreq.is_empty()
        self.kube_req, nz_cpu, nz_mem = _kube_requests(spec)
        self.kube_nonzero = (nz_cpu, nz_mem)

        self.node_name: str = str(spec.get("nodeName") or "")
        self.status: TaskStatus = task_status_of(pod)
        prio = spec.get("priority")
        self.priority: int = int(prio) if isinstance(prio, int) and not isinstance(prio, bool) else 1
        tp = ann.get(TASK_PRIORITY_ANNOTATION)
        if tp is not None and (v := go_parse_int(str(tp))) is not None:
            self.priority = v
        self.preemptable = _pod_preemptable(ann, labels)
        self.revocable_zone = revocable_zone_of(ann)
        gates = spec.get("schedulingGates")
        self.sch_gated = bool(gates)
        self.has_restartable_init_container = any(
            isinstance(c, Mapping) and c.get("restartPolicy") == "Always" for c in spec.get("initContainers") or []
        )
        self.offline = is_offline(pod)
        aff = spec.get("affinity") or {}
        self.has_pod_affinity = bool(aff.get("podAffinity") or aff.get("podAntiAffinity"))
        created = parse_time(md.get("creationTimestamp"))
        self.creation: float = created if created is not None else default_creation
        self.index = pod_index(self.name)
        self.last_transaction: tuple[str, TaskStatus] | None = None
        self.eviction_occurred = False
        # filled in by NodeTable.bind_task once the session's resource dimensions are known
        self.resreq_vec: np.ndarray = _NO_VALUES
        self.init_vec: np.ndarray = _NO_VALUES
        self.init_check_cols: np.ndarray = _NO_COLS
        self.kube_vec: np.ndarray = _NO_VALUES
        #: per-session scratch space for plugins (e.g. a predicate "shape" key)
        self.cache: dict[str, Any] = {}

    @property
    def key(self) -> str:
        """`namespace/name`, the pod's key in outputs."""
        return f"{self.namespace}/{self.name}"

    def generate_last_tx_context(self) -> None:
        self.last_transaction = (self.node_name, self.status)

    def clear_last_tx_context(self) -> None:
        self.last_transaction = None

    def __repr__(self) -> str:
        return (
            f"Task({self.uid}:{self.namespace}/{self.name}, job {self.job}, node {self.node_name!r}, "
            f"status {self.status}, pri {self.priority}, resreq <{self.resreq}>)"
        )


def _pod_preemptable(ann: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    for src in (ann, labels):
        if POD_PREEMPTABLE in src:
            p = parse_bool(src[POD_PREEMPTABLE])
            return p.value if p.warning is None else False
    return True


def revocable_zone_of(ann: Mapping[str, Any]) -> str:
    """`*` when a pod's or PodGroup's annotations put it in every revocable zone (Volcano's rule)."""
    if REVOCABLE_ZONE in ann:
        return "*" if ann[REVOCABLE_ZONE] == "*" else ""
    if POD_PREEMPTABLE in ann:
        p = parse_bool(ann[POD_PREEMPTABLE])
        if p.warning is None and p.value:
            return "*"
    return ""


def compare_task(lv: TaskInfo, rv: TaskInfo) -> bool:
    """Volcano's fallback task order: pod-name index, then creation time, then UID."""
    li, ri = lv.index, rv.index
    if li is None or ri is None or li == ri:
        if lv.creation == rv.creation:
            return lv.uid < rv.uid
        return lv.creation < rv.creation
    return li < ri
