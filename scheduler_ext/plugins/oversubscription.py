"""oversubscription: offline pods on `allocatable + X` of labelled nodes (docs/design.md, "The oversubscription
plugin").

Volcano has no such plugin; the seed docs' provider ships one. Tidemark's rules, on a node labelled
`volcano.sh/oversubscription=true` whose agent publishes X (`volcano.sh/oversubscription-cpu/-memory`,
`NodeInfo.oversubscription_resource`, 0 when absent or invalid):

- an offline pod (qos-level -7..-1, `TaskInfo.offline`) fits iff
  `sum(requests of all pods) + new <= allocatable + X`, per resource;
- an online pod fits iff `sum(requests of online pods) + new <= allocatable`: offline pods never
  block online ones (if the node then holds more than `allocatable + X`, the agent's admission guard
  evicts offline pods);
- a node annotated or tainted `volcano.sh/offline-job-evicting` takes no offline pod, whatever the
  pod's tolerations (checked on every node, labelled or not: the agent marks any node it evicts on);
- offline pods prefer oversubscribed nodes: 100 * `oversubscription.weight` on them, 0 elsewhere;
  online pods get no preference;
- job order: a job is offline iff it has tasks and all of them are offline; otherwise equal jobs
  (same priority: the plugins before this one in the tiers decide first) go online first.
Unlabelled nodes keep the usual fit for every pod. Requests of `kubernetes.io/batch-*` are plain
scalar resources on every node (the agent folds them into X, so both kinds share one budget).

How the rules map onto the framework (all vectorised, no per-node Python on the hot path):
- Resource fit: allocate checks `init_resreq <= idle (or future idle) + headroom`. The plugin's
  `add_fit_headroom_fn` grants an offline task X (cpu and memory columns) on labelled nodes, and an
  online task the cpu/memory requests of the offline pods accounted on labelled nodes, which is
  exactly `allocatable - sum(online requests)` against idle. Only cpu and memory are oversubscribed
  (X exists for nothing else): the pod count and every scalar resource count all pods, as kubelet does.
  The offline-request rows are recomputed only for labelled nodes whose table generation moved.
- Evicting nodes: a (batch) predicate, UnschedulableAndUnresolvable for offline tasks.
- Preference: a vector node-order fn over a per-session array.
- Job order: a JobOrderFn with its key fn.

"Oversubscribed node" (the score) = labelled, X > 0 in cpu or memory, and not evicting: a labelled
node whose agent publishes X = 0 has nothing to offer beyond allocatable, so offline pods are not
steered to it.

Queue-level capacity: the queue plugins (proportion, drf, capacity) share `Session.total_resource`,
the sum of allocatable. When the session opens the plugin adds, per labelled node, max(X, offline
requests there): queue shares and enqueue checks see the capacity offline pods may use (as the
provider's Volcano does, which folds X into node allocatable), and offline work never takes queue
capacity from online work (online pods may use allocatable - online requests of a labelled
node). This only works when the plugin is opened before
those plugins, i.e. listed before them in the tiers (as in examples/volcano-scheduler.conf); a warning
is logged otherwise.

Known approximation (docs/scheduler-oversubscription.md): one headroom serves both the idle and the
future-idle checks, so for an online task an offline pod that is *pipelined* on a labelled node still
reserves its request in the future-idle check, and a *releasing* offline pod is counted free twice
there. Binding (the idle check) is exact; only pipelining decisions can differ.
"""

from __future__ import annotations

import logging
from typing import Final

import numpy as np

from scheduler_ext.api.job import JobInfo
from scheduler_ext.api.node import NodeInfo
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import PIPELINED, FitError, JobID, Status, StatusCode
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.session_plugins import BatchPredicateResult

log = logging.getLogger(__name__)

WEIGHT: Final = "oversubscription.weight"
DEFAULT_WEIGHT: Final = 20
MAX_NODE_SCORE: Final = 100.0
REASON_EVICTING: Final = "node(s) were evicting offline jobs (volcano.sh/offline-job-evicting)"
#: plugins that read Session.total_resource when they open
QUEUE_PLUGINS: Final = ("proportion", "drf", "capacity", "overcommit")
_CPU: Final = 0
_MEM: Final = 1
_EVICTING_STATUS: Final = Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_EVICTING, "oversubscription")


def job_is_offline(job: JobInfo) -> bool:
    """A job is offline iff it has tasks and every one of them is offline."""
    return bool(job.tasks) and all(t.offline for t in job.tasks.values())


class OversubscriptionPlugin(Plugin):
    name = "oversubscription"

    def __init__(self, arguments: Arguments) -> None:
        self.weight = arguments.get_int(WEIGHT, DEFAULT_WEIGHT)
        if self.weight < 0:
            log.warning("%s=%d is negative; using %d", WEIGHT, self.weight, DEFAULT_WEIGHT)
            self.weight = DEFAULT_WEIGHT
        self._offline_jobs: dict[JobID, bool] = {}

    def on_session_open(self, ssn: Session) -> None:
        table = ssn.table
        n = table.n
        nodes = ssn.node_list
        labelled = np.fromiter((nd.oversubscription_node for nd in nodes), dtype=bool, count=n)
        evicting = np.fromiter((nd.offline_job_evicting for nd in nodes), dtype=bool, count=n)
        x = np.zeros((n, len(table.dims)))
        for nd in nodes:
            if nd.oversubscription_node and not nd.offline_job_evicting:
                xr = nd.oversubscription_resource
                x[nd.index, _CPU] = max(0.0, xr.milli_cpu)
                x[nd.index, _MEM] = max(0.0, xr.memory)
        #: X granted to offline tasks (labelled, non-evicting nodes; cpu/memory columns)
        self.x = x
        self.any_x = bool(x.any())
        self.evicting = evicting
        self.any_evicting = bool(evicting.any())
        oversubscribed = labelled & ~evicting & (x[:, :2] > 0).any(axis=1)
        self.preference = np.where(oversubscribed, MAX_NODE_SCORE * self.weight, 0.0)
        self.any_preference = bool(self.preference.any())
        #: labelled node indices and the offline cpu/memory requests accounted on each (non-pipelined)
        self.labelled_idx = np.flatnonzero(labelled)
        self.offline_used = np.zeros((n, len(table.dims)))
        self._seen = np.full(n, -1, dtype=np.int64)
        self._any_offline_used = False
        self._refresh_offline_used(ssn)

        self._offline_jobs = {uid: job_is_offline(job) for uid, job in ssn.jobs.items()}
        self._grant_queue_capacity(ssn)

        # node-local: two fixed arrays (X, offline requests) whose rows change only with the node's row
        ssn.add_fit_headroom_fn(self.name, lambda task, idx: self.headroom(ssn, task, idx), node_local=True)

        def predicate(task: TaskInfo, node: NodeInfo) -> FitError | None:
            if task.offline and node.offline_job_evicting:
                return FitError(task.namespace, task.name, node.name, (self._evicting_status(),))
            return None

        ssn.add_predicate_fn(self.name, predicate)
        ssn.add_batch_predicate_fn(self.name, self.batch_predicate)
        ssn.add_vector_node_order_fn(self.name, self.score)
        ssn.add_job_order_fn(self.name, self.job_order)
        ssn.add_job_order_key_fn(self.name, self.job_order_key)

    def on_session_close(self, ssn: Session) -> None:
        self._offline_jobs = {}

    # --- queue capacity -------------------------------------------------------------------------
    def _grant_queue_capacity(self, ssn: Session) -> None:
        """Add, per labelled node, max(X, offline requests there) to the cluster total the queues share.

        Offline jobs then see allocatable + X at queue level too, and offline work on a labelled node
        never takes queue capacity from online work: the total minus everything allocated is at least
        sum(allocatable - online requests), which is what online pods may use (docs/design.md, "The
        oversubscription plugin": offline pods never block online ones; the agent's admission guard evicts the
        overflow).
        """
        lab = self.labelled_idx
        if len(lab) == 0:
            return
        grant = np.maximum(self.x[lab, :2], self.offline_used[lab, :2]).sum(axis=0)
        if not grant.any():
            return
        opened = [p for p in QUEUE_PLUGINS if p in ssn.plugins and p != self.name]
        if opened:
            log.warning(
                "oversubscription: listed after %s, which already read the cluster total; list it before "
                "them so queues can use the oversubscribed capacity",
                ", ".join(opened),
            )
        total = ssn.total_resource
        total.milli_cpu += float(grant[_CPU])
        total.memory += float(grant[_MEM])

    # --- resource fit -----------------------------------------------------------------------------
    def _refresh_offline_used(self, ssn: Session) -> None:
        """Recompute the offline requests of labelled nodes whose table row changed since last time."""
        lab = self.labelled_idx
        if len(lab) == 0:
            return
        gen = ssn.table.generation
        stale = lab[gen[lab] != self._seen[lab]]
        if len(stale) == 0:
            return
        used = self.offline_used
        node_list = ssn.node_list
        for i in stale:
            ii = int(i)
            node = node_list[ii]
            cpu = mem = 0.0
            for uid, t in node.tasks.items():
                if t.offline and node.accounted_status(uid) != PIPELINED:
                    vec = t.resreq_vec
                    cpu += vec[_CPU]
                    mem += vec[_MEM]
            used[ii, _CPU] = cpu
            used[ii, _MEM] = mem
            self._seen[ii] = gen[ii]
        self._any_offline_used = bool(used[lab, :2].any())

    def headroom(self, ssn: Session, task: TaskInfo, nodes: np.ndarray) -> np.ndarray | None:
        """Extra room over idle/future idle: X for offline tasks, offline requests for online ones.

        Over all nodes (allocate's call) it returns one of two long-lived arrays, whose rows change
        only when the node's table generation does: the framework's node-local headroom contract,
        which lets allocate cache the fit checks. A subset of nodes gets a fresh copy of the rows.
        """
        if task.offline:
            if not self.any_x:
                return None
            room = self.x
        else:
            self._refresh_offline_used(ssn)
            if not self._any_offline_used:
                return None
            room = self.offline_used
        return room if nodes is ssn.all_nodes else room[nodes]

    # --- evicting nodes ---------------------------------------------------------------------------
    def _evicting_status(self) -> Status:
        return _EVICTING_STATUS

    def batch_predicate(self, task: TaskInfo, nodes: np.ndarray) -> BatchPredicateResult:
        if not task.offline or not self.any_evicting:
            return BatchPredicateResult(np.ones(len(nodes), dtype=bool))
        bad = self.evicting[nodes]
        if not bad.any():
            return BatchPredicateResult(~bad)
        failing = nodes[bad]
        return BatchPredicateResult(~bad, failures_fn=lambda: [(failing, (_EVICTING_STATUS,))])

    # --- node order -------------------------------------------------------------------------------
    def score(self, task: TaskInfo, nodes: np.ndarray) -> np.ndarray:
        if not task.offline or not self.any_preference:
            return np.zeros(len(nodes))
        return np.asarray(self.preference[nodes])

    # --- job order --------------------------------------------------------------------------------
    def _is_offline(self, job: JobInfo) -> bool:
        v = self._offline_jobs.get(job.uid)
        if v is None:
            v = self._offline_jobs[job.uid] = job_is_offline(job)
        return v

    def job_order(self, lv: JobInfo, rv: JobInfo) -> int:
        lo, ro = self._is_offline(lv), self._is_offline(rv)
        if lo == ro:
            return 0
        return 1 if lo else -1

    def job_order_key(self, job: JobInfo) -> int:
        return 1 if self._is_offline(job) else 0


SPEC = PluginSpec(
    name="oversubscription",
    build=OversubscriptionPlugin,
    arguments=(
        ArgSpec(
            WEIGHT,
            "int",
            DEFAULT_WEIGHT,
            "weight of the offline preference for oversubscribed nodes (score 100 * weight); the default 20 "
            "outweighs the default nodeorder and binpack scores together",
        ),
    ),
    doc="Offline pods on allocatable + X of labelled nodes; online pods ignore offline requests there.",
)
