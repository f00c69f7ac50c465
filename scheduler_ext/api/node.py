"""NodeInfo and the per-session NodeTable: node resources as numpy rows, so fit checks and
resource scores run over all nodes at once.

NodeTable holds, for N nodes and D resource dimensions (`dims`: cpu, memory, then scalars in
sorted order, `pods` among them), the arrays Volcano keeps per node as Resources: allocatable,
capacity, idle, used, releasing, pipelined, and future_idle (= idle + releasing - pipelined, kept
up to date incrementally). It also keeps kube-scheduler's view of each node (the pods on it, their
requested and non-zero requested resources), which the predicates and nodeorder plugins read.
NodeInfo is the per-node object actions and plugins hold; its Resource properties are read from
the table rows, and add_task/remove_task update the rows with Volcano's status accounting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np

from scheduler_ext.api.resource import (
    MIN_RESOURCE,
    RES_CPU,
    RES_MEMORY,
    RES_PODS,
    Resource,
)
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import BINDING, PIPELINED, RELEASING, TaskID, TaskStatus

NODE_READY: Final = "Ready"
NODE_NOT_READY: Final = "NotReady"


_NO_ROWS = np.zeros(0, dtype=np.intp)


class NodeTable:
    """Resource rows for every node of a session, indexed by NodeInfo.index."""

    def __init__(self, dims: Sequence[str], n: int) -> None:
        self.dims: tuple[str, ...] = tuple(dims)
        self.dim_index: dict[str, int] = {d: i for i, d in enumerate(self.dims)}
        d = len(self.dims)
        self.n = n
        self.names: list[str] = [""] * n
        self.allocatable = np.zeros((n, d))
        self.capacity = np.zeros((n, d))
        self.idle = np.zeros((n, d))
        self.used = np.zeros((n, d))
        self.releasing = np.zeros((n, d))
        self.pipelined = np.zeros((n, d))
        self.future_idle = np.zeros((n, d))
        #: kube-scheduler's NodeInfo view: requested (real) and non-zero requested cpu/memory, pod count
        self.kube_requested = np.zeros((n, d))
        self.kube_nonzero = np.zeros((n, 2))
        self.pod_count = np.zeros(n, dtype=np.int64)
        self.max_pods = np.zeros(n, dtype=np.int64)
        self.kube_pods: list[dict[TaskID, TaskInfo]] = [{} for _ in range(n)]
        #: node labels by index (filled by the snapshot builder)
        self.labels: list[Mapping[str, Any]] = [{} for _ in range(n)]
        #: pods in the kube view that carry pod (anti-)affinity terms: uid -> (node index, task)
        self.affinity_pods: dict[TaskID, tuple[int, TaskInfo]] = {}
        #: bumped on every change of a row, so per-node caches can tell when they are stale
        self.generation = np.zeros(n, dtype=np.int64)
        #: the rows changed, in order (one entry per bump): caches ask what changed since a position
        #: in time proportional to the changes, not to the number of nodes
        self.change_log: list[int] = []

    def bump(self, i: int) -> None:
        """Mark row i changed."""
        self.generation[i] += 1
        self.change_log.append(i)

    def changed_since(self, pos: int) -> np.ndarray:
        """The distinct rows changed after change-log position `pos` (sorted)."""
        log = self.change_log
        if len(log) == pos:
            return _NO_ROWS
        tail = log[pos:]
        if len(tail) == 1:
            return np.array(tail, dtype=np.intp)
        # a handful of rows per task: a Python set is several times cheaper than np.unique here
        return np.array(sorted(set(tail)), dtype=np.intp)

    # --- vectors -----------------------------------------------------------------------------
    def vector(self, r: Resource) -> np.ndarray:
        v = np.zeros(len(self.dims))
        v[0] = r.milli_cpu
        v[1] = r.memory
        for name, q in (r.scalar_resources or {}).items():
            i = self.dim_index.get(name)
            if i is not None:
                v[i] = q
        return v

    def resource(self, row: np.ndarray, *, max_task_num: int = 0) -> Resource:
        """A Resource from a row (scalars present only where non-zero, plus `pods`)."""
        r = Resource(float(row[0]), float(row[1]), None, max_task_num)
        for i in range(2, len(self.dims)):
            v = float(row[i])
            if v != 0.0 or self.dims[i] == RES_PODS:
                r.set_scalar(self.dims[i], v)
        return r

    def check_cols(self, r: Resource) -> np.ndarray:
        """Dimensions Volcano's LessEqual compares for request r: cpu, memory and r's scalar keys."""
        cols = [0, 1]
        for name in r.scalar_resources or {}:
            i = self.dim_index.get(name)
            if i is not None:
                cols.append(i)
        return np.array(cols, dtype=np.intp)

    def bind_task(self, task: TaskInfo) -> None:
        """Compute the task's vectors over this table's dimensions."""
        task.resreq_vec = self.vector(task.resreq)
        task.init_vec = self.vector(task.init_resreq)
        task.init_check_cols = self.check_cols(task.init_resreq)
        kv = np.zeros(len(self.dims))
        for name, q in task.kube_req.items():
            i = self.dim_index.get(name)
            if i is not None and name != RES_PODS:
                kv[i] = q
        task.kube_vec = kv

    # --- fit ---------------------------------------------------------------------------------
    def fits(self, task: TaskInfo, rows: np.ndarray, base: np.ndarray) -> np.ndarray:
        """Volcano's `task.InitResreq.LessEqual(base, Zero)` for the given node rows (bool mask)."""
        cols = task.init_check_cols
        req = task.init_vec[cols]
        avail = base[np.ix_(rows, cols)] if rows.dtype != np.bool_ else base[rows][:, cols]
        ok = (req < avail) | (np.abs(req - avail) < MIN_RESOURCE)
        return np.asarray(ok.all(axis=1))

    def insufficient(self, task: TaskInfo, row: int, base: np.ndarray) -> list[str]:
        """Names of the dimensions short on one node, in Volcano's order (cpu, memory, scalars)."""
        names = []
        for c in task.init_check_cols:
            req = task.init_vec[c]
            avail = base[row, c]
            if not (req < avail or abs(req - avail) < MIN_RESOURCE):
                names.append(self.dims[c])
        return names

    # --- kube view ---------------------------------------------------------------------------
    def kube_add(self, i: int, task: TaskInfo) -> None:
        if task.uid in self.kube_pods[i]:
            return
        self.kube_pods[i][task.uid] = task
        if task.has_pod_affinity:
            self.affinity_pods[task.uid] = (i, task)
        self.kube_requested[i] += task.kube_vec
        self.kube_nonzero[i, 0] += task.kube_nonzero[0]
        self.kube_nonzero[i, 1] += task.kube_nonzero[1]
        self.pod_count[i] += 1
        self.bump(i)

    def kube_remove(self, i: int, task: TaskInfo) -> None:
        if self.kube_pods[i].pop(task.uid, None) is None:
            return
        self.affinity_pods.pop(task.uid, None)
        self.kube_requested[i] -= task.kube_vec
        self.kube_nonzero[i, 0] -= task.kube_nonzero[0]
        self.kube_nonzero[i, 1] -= task.kube_nonzero[1]
        self.pod_count[i] -= 1
        self.bump(i)


#: what a NodeInfo reads from its Node object: name, labels, annotations, taints, unschedulable
NodeStatic = tuple[str, Mapping[str, str], Mapping[str, str], tuple[Mapping[str, Any], ...], bool]


def node_static(node: Mapping[str, Any]) -> NodeStatic:
    """The read-only part of a NodeInfo, derived from the Node object alone."""
    md = node.get("metadata") or {}
    spec = node.get("spec") or {}
    return (str(md.get("name") or ""), md.get("labels") or {}, md.get("annotations") or {},
            tuple(t for t in spec.get("taints") or [] if isinstance(t, Mapping)), bool(spec.get("unschedulable")))


class NodeInfo:
    """One node. Resource accounting lives in the session's NodeTable row `index`."""

    __slots__ = (
        "_accounted",
        "annotations",
        "index",
        "labels",
        "name",
        "node",
        "offline_job_evicting",
        "oversubscription_node",
        "oversubscription_resource",
        "revocable_zone",
        "state",
        "state_reason",
        "table",
        "taints",
        "tasks",
        "unschedulable",
    )

    def __init__(self, node: Mapping[str, Any], table: NodeTable, index: int,
                 static: NodeStatic | None = None) -> None:
        """`static` is what node_static(node) returned for this very object (a memo of an earlier session)."""
        self.node = node
        name, labels, annotations, taints, unschedulable = static if static is not None else node_static(node)
        self.name: str = name
        self.table = table
        self.index = index
        self.labels: Mapping[str, str] = labels
        self.annotations: Mapping[str, str] = annotations
        #: a fresh list per session (the Node object's taints themselves are shared, read-only)
        self.taints: list[Mapping[str, Any]] = list(taints)
        self.unschedulable: bool = unschedulable
        self.tasks: dict[TaskID, TaskInfo] = {}
        #: the status each task had when this node accounted for it (Volcano keeps a clone)
        self._accounted: dict[TaskID, TaskStatus] = {}
        self.state = NODE_READY
        self.state_reason = ""
        self.revocable_zone: str = str(self.labels.get("volcano.sh/revocable-zone", ""))
        self.oversubscription_node = False
        self.offline_job_evicting = False
        self.oversubscription_resource = Resource()

    def __repr__(self) -> str:
        return f"Node({self.name}: allocatable <{self.allocatable}>, idle <{self.idle}>, used <{self.used}>)"

    # --- resource views (copies) -------------------------------------------------------------
    @property
    def allocatable(self) -> Resource:
        row = self.table.allocatable[self.index]
        return self.table.resource(row, max_task_num=int(self.table.max_pods[self.index]))

    @property
    def capacity(self) -> Resource:
        return self.table.resource(self.table.capacity[self.index])

    @property
    def idle(self) -> Resource:
        return self.table.resource(self.table.idle[self.index])

    @property
    def used(self) -> Resource:
        return self.table.resource(self.table.used[self.index])

    @property
    def releasing(self) -> Resource:
        return self.table.resource(self.table.releasing[self.index])

    @property
    def pipelined(self) -> Resource:
        return self.table.resource(self.table.pipelined[self.index])

    def future_idle(self) -> Resource:
        """idle + releasing - pipelined."""
        return self.table.resource(self.table.future_idle[self.index])

    def ready(self) -> bool:
        return self.state == NODE_READY

    def pods(self) -> list[Mapping[str, Any]]:
        return [t.pod for t in self.tasks.values()]

    # --- accounting (Volcano's AddTask / RemoveTask / UpdateTask) ------------------------------
    def add_task(self, task: TaskInfo) -> None:
        if task.node_name and self.name and task.node_name != self.name:
            raise ValueError(f"task <{task.namespace}/{task.name}> already on different node <{task.node_name}>")
        if task.uid in self.tasks:
            raise ValueError(f"task <{task.namespace}/{task.name}> already on node <{self.name}>")
        t = self.table
        i = self.index
        r = task.resreq_vec
        status = task.status
        if status == RELEASING:
            t.idle[i] -= r
            t.releasing[i] += r
            t.used[i] += r
        elif status == PIPELINED:
            t.pipelined[i] += r
            t.future_idle[i] -= r
        else:
            if status == BINDING:
                cols = t.check_cols(task.resreq)
                avail = t.idle[i, cols]
                req = r[cols]
                if not bool(np.all((req < avail) | (np.abs(req - avail) < MIN_RESOURCE))):
                    raise ValueError(f"node {self.name} resources are not enough to put task <{task.key}>")
            t.idle[i] -= r
            t.used[i] += r
            t.future_idle[i] -= r
        t.bump(i)
        task.node_name = self.name
        self.tasks[task.uid] = task
        self._accounted[task.uid] = status

    def remove_task(self, task: TaskInfo) -> None:
        status = self._accounted.pop(task.uid, None)
        if status is None:
            return
        known = self.tasks.pop(task.uid)
        t = self.table
        i = self.index
        r = known.resreq_vec
        if status == RELEASING:
            t.releasing[i] -= r
            t.idle[i] += r
            t.used[i] -= r
        elif status == PIPELINED:
            t.pipelined[i] -= r
            t.future_idle[i] += r
        else:
            t.idle[i] += r
            t.used[i] -= r
            t.future_idle[i] += r
        t.bump(i)

    def update_task(self, task: TaskInfo) -> None:
        self.remove_task(task)
        self.add_task(task)

    def accounted_status(self, uid: TaskID) -> TaskStatus | None:
        return self._accounted.get(uid)


def build_table(dims: Iterable[str], nodes: Sequence[Mapping[str, Any]]) -> NodeTable:
    """An empty table for these nodes; resources are filled by the snapshot builder."""
    ordered = [RES_CPU, RES_MEMORY, *sorted(d for d in set(dims) if d not in (RES_CPU, RES_MEMORY))]
    return NodeTable(ordered, len(nodes))
