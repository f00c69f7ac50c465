"""predicates: kube-scheduler's filters for a task on a node (Volcano's predicates.go).

In Volcano's order: the node's pod count (allocatable pods), then the "stable" filters
(NodeUnschedulable, NodeAffinity incl. nodeSelector, TaintToleration), then NodePorts,
InterPodAffinity and PodTopologySpread. The stable filters depend only on the pod's spec and the
node, so their verdict over all nodes is computed once per pod "shape" (nodeSelector, required node
affinity, tolerations) and shared by every pod of that shape in the session. The dynamic filters run
only for pods that need them (host ports, pod (anti-)affinity or spread constraints, or when some
placed pod has a required anti-affinity). Volume filters are not implemented (no volumes in the
snapshot); their enable arguments are accepted.

Simulation (topology-aware preemption's dry run, Volcano's SimulateRemoveTask / SimulateAddTask /
SimulatePredicate): the tasks the dry run removes from a node are kept in the preemptor's cycle state,
and the simulated predicate runs every filter above on the node as it would be without them (they
leave kube-scheduler's node view for the check and come back at once). So a victim whose eviction
would not let the preemptor in, e.g. because another pod's anti-affinity still repels it, is never
chosen. The simulate callbacks run only for a predicates entry with enablePreemptable or
enabledAllocatable on (Volcano's gating): a conf that turns both off, as Volcano's Go-built test tiers
do (TestPodAntiAffinity "pod-anti-affinity"), leaves the removals unseen, so the remaining anti-affinity
keeps the node useless and nothing is evicted, as Volcano expects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from scheduler_ext.affinity.labels import (
    UNSCHEDULABLE_TAINT_KEY,
    first_untolerated_taint,
    host_ports,
    node_matches_pod_affinity_selector,
    pod_tolerations,
    ports_conflict,
    required_node_affinity,
    shape_key,
    tolerates_taint,
)
from scheduler_ext.affinity.podaffinity import filter_pod_affinity, filter_topology_spread, pod_affinity
from scheduler_ext.api.node import NodeInfo, NodeTable
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.api.types import (
    NODE_POD_NUMBER_EXCEEDED,
    FitError,
    Status,
    StatusCode,
)
from scheduler_ext.framework.interface import ArgSpec, Arguments, Plugin, PluginSpec
from scheduler_ext.framework.session import Session
from scheduler_ext.framework.session_plugins import BatchPredicateResult

NODE_AFFINITY_ENABLE: Final = "predicate.NodeAffinityEnable"
NODE_PORTS_ENABLE: Final = "predicate.NodePortsEnable"
TAINT_TOLERATION_ENABLE: Final = "predicate.TaintTolerationEnable"
POD_AFFINITY_ENABLE: Final = "predicate.PodAffinityEnable"
NODE_VOLUME_LIMITS_ENABLE: Final = "predicate.NodeVolumeLimitsEnable"
VOLUME_ZONE_ENABLE: Final = "predicate.VolumeZoneEnable"
POD_TOPOLOGY_SPREAD_ENABLE: Final = "predicate.PodTopologySpreadEnable"
VOLUME_BINDING_ENABLE: Final = "predicate.VolumeBindingEnable"
DRA_ENABLE: Final = "predicate.DynamicResourceAllocationEnable"
CACHE_ENABLE: Final = "predicate.CacheEnable"

REASON_UNSCHEDULABLE: Final = "node(s) were unschedulable"
REASON_NODE_AFFINITY: Final = "node(s) didn't match Pod's node affinity/selector"
REASON_PORTS: Final = "node(s) didn't have free ports for the requested pod ports"

#: cycle-state key of the tasks a preemption dry run removed, per node index
SIM_REMOVED: Final = "predicates.simulate-removed"

_UNRESOLVABLE = StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE


class SimulatedRemovals:
    """Tasks removed by a dry run, per node index (cloned with the cycle state, tasks shared)."""

    __slots__ = ("by_node",)

    def __init__(self, by_node: dict[int, dict[str, TaskInfo]] | None = None) -> None:
        self.by_node: dict[int, dict[str, TaskInfo]] = by_node or {}

    def clone(self) -> SimulatedRemovals:
        return SimulatedRemovals({i: dict(tasks) for i, tasks in self.by_node.items()})
_POD_COUNT_STATUS = Status(StatusCode.UNSCHEDULABLE, NODE_POD_NUMBER_EXCEEDED, "predicates")


class PredicatesPlugin(Plugin):
    name = "predicates"

    def __init__(self, arguments: Arguments) -> None:
        self.node_affinity = arguments.get_bool(NODE_AFFINITY_ENABLE, True)
        self.node_ports = arguments.get_bool(NODE_PORTS_ENABLE, True)
        self.taint_toleration = arguments.get_bool(TAINT_TOLERATION_ENABLE, True)
        self.pod_affinity = arguments.get_bool(POD_AFFINITY_ENABLE, True)
        self.topology_spread = arguments.get_bool(POD_TOPOLOGY_SPREAD_ENABLE, True)
        self._static: dict[str, tuple[np.ndarray, list[Status | None]]] = {}

    # --- stable filters ------------------------------------------------------------------------
    def _static_verdict(self, ssn: Session, task: TaskInfo) -> tuple[np.ndarray, list[Status | None]]:
        """(pass mask over all nodes, first failing status per node), shared per pod shape."""
        key = task.cache.get("predicates.shape")
        if key is None:
            spec = task.pod.get("spec") or {}
            key = shape_key(
                spec.get("nodeSelector"),
                required_node_affinity(spec),
                spec.get("tolerations"),
            )
            task.cache["predicates.shape"] = key
        hit = self._static.get(key)
        if hit is not None:
            return hit
        spec = task.pod.get("spec") or {}
        tolerations = pod_tolerations(spec)
        tolerates_unschedulable = tolerates_taint(tolerations, {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"})
        has_selector = bool(spec.get("nodeSelector")) or required_node_affinity(spec) is not None
        statuses: list[Status | None] = []
        for node in ssn.node_list:
            statuses.append(self._stable_status(node, spec, tolerations, tolerates_unschedulable, has_selector))
        mask = np.fromiter((s is None for s in statuses), dtype=bool, count=len(statuses))
        self._static[key] = (mask, statuses)
        return mask, statuses

    def _stable_status(
        self,
        node: NodeInfo,
        spec: Mapping[str, Any],
        tolerations: list[Mapping[str, Any]],
        tolerates_unschedulable: bool,
        has_selector: bool,
    ) -> Status | None:
        if node.unschedulable and not tolerates_unschedulable:
            return Status(_UNRESOLVABLE, REASON_UNSCHEDULABLE, "NodeUnschedulable")
        if (
            self.node_affinity
            and has_selector
            and not node_matches_pod_affinity_selector(spec, node.labels, node.name)
        ):
            return Status(_UNRESOLVABLE, REASON_NODE_AFFINITY, "NodeAffinity")
        if self.taint_toleration and node.taints:
            taint = first_untolerated_taint(node.taints, tolerations, ("NoSchedule", "NoExecute"))
            if taint is not None:
                return Status(
                    _UNRESOLVABLE,
                    f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '') or ''}}}",
                    "TaintToleration",
                )
        return None

    # --- the whole predicate over many nodes -----------------------------------------------------
    def _needs_dynamic(self, ssn: Session, task: TaskInfo) -> bool:
        spec = task.pod.get("spec") or {}
        return bool(
            (self.node_ports and host_ports(spec))
            or (self.pod_affinity and (task.has_pod_affinity or ssn.table.affinity_pods))
            or (self.topology_spread and spec.get("topologySpreadConstraints"))
        )

    def batch(self, ssn: Session, task: TaskInfo, nodes: np.ndarray) -> BatchPredicateResult:
        table = ssn.table
        static_mask, static_statuses = self._static_verdict(ssn, task)
        if not self._needs_dynamic(ssn, task):
            # node-local: pod count + stable filters, cached per shape and refreshed on changed nodes
            shape = task.cache["predicates.shape"]
            full = ssn.node_cache.get(
                ("predicates", shape),
                lambda idx: static_mask[idx] & (table.max_pods[idx] > table.pod_count[idx]),
            )
            if nodes is ssn.all_nodes:
                passed = full
            elif full.all():  # (cheaper than indexing 5000 rows to find the same)
                return BatchPredicateResult(np.ones(len(nodes), dtype=bool))
            else:
                passed = full[nodes]
            if passed.all():
                return BatchPredicateResult(passed)
            failing = nodes[~passed]
            return BatchPredicateResult(
                passed, failures_fn=lambda: self._failures(table, failing, static_statuses, {})
            )
        pod_full = table.max_pods[nodes] <= table.pod_count[nodes]
        stable_ok = static_mask[nodes]
        dynamic = self._dynamic(ssn, task, nodes[stable_ok]) if stable_ok.any() else {}
        failed = pod_full | ~stable_ok
        if dynamic:
            failed |= np.isin(nodes, np.fromiter(dynamic, dtype=np.intp, count=len(dynamic)))
        if not failed.any():
            return BatchPredicateResult(~failed)
        failing = nodes[failed]
        return BatchPredicateResult(~failed, failures=self._failures(table, failing, static_statuses, dynamic))

    @staticmethod
    def _failures(
        table: NodeTable,
        failing: np.ndarray,
        static_statuses: list[Status | None],
        dynamic: dict[int, Status],
    ) -> list[tuple[np.ndarray, tuple[Status, ...]]]:
        groups: dict[tuple[Status, ...], list[int]] = {}
        for i in failing:
            ii = int(i)
            sts: list[Status] = []
            if table.max_pods[ii] <= table.pod_count[ii]:
                sts.append(_POD_COUNT_STATUS)
            st = static_statuses[ii]
            if st is not None:
                sts.append(st)
            elif ii in dynamic:
                sts.append(dynamic[ii])
            groups.setdefault(tuple(sts), []).append(ii)
        return [(np.array(idx, dtype=np.intp), sts) for sts, idx in groups.items()]

    def _dynamic(self, ssn: Session, task: TaskInfo, nodes: np.ndarray) -> dict[int, Status]:
        out: dict[int, Status] = {}
        table = ssn.table
        spec = task.pod.get("spec") or {}
        if self.node_ports:
            want = host_ports(spec)
            if want:
                for i in nodes:
                    used: list[tuple[str, str, int]] = []
                    for other in table.kube_pods[int(i)].values():
                        if other.uid != task.uid:
                            used.extend(host_ports(other.pod.get("spec") or {}))
                    if ports_conflict(want, used):
                        out[int(i)] = Status(StatusCode.UNSCHEDULABLE, REASON_PORTS, "NodePorts")
        node_labels = table.labels
        if self.pod_affinity and (task.has_pod_affinity or table.affinity_pods):
            aff = pod_affinity(task)
            if aff.required_affinity or aff.required_anti_affinity or table.affinity_pods:
                rest = [int(i) for i in nodes if int(i) not in out]
                fails = filter_pod_affinity(task, rest, node_labels, table.kube_pods, table.affinity_pods.values())
                for i, (reason, unresolvable) in fails.items():
                    out[i] = Status(
                        _UNRESOLVABLE if unresolvable else StatusCode.UNSCHEDULABLE, reason, "InterPodAffinity"
                    )
        if self.topology_spread and spec.get("topologySpreadConstraints"):
            rest = [int(i) for i in nodes if int(i) not in out]
            eligible = [
                n.index
                for n in ssn.node_list
                if node_matches_pod_affinity_selector(spec, n.labels, n.name)
            ]
            fails = filter_topology_spread(task, rest, eligible, node_labels, table.kube_pods)
            for i, (reason, unresolvable) in fails.items():
                code = _UNRESOLVABLE if unresolvable else StatusCode.UNSCHEDULABLE
                out[i] = Status(code, reason, "PodTopologySpread")
        return out

    # --- registration ------------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        ssn.add_pre_predicate_fn(self.name, lambda _task: None)

        def predicate(task: TaskInfo, node: NodeInfo) -> FitError | None:
            res = self.batch(ssn, task, np.array([node.index], dtype=np.intp))
            if bool(res.passed[0]):
                return None
            return FitError(task.namespace, task.name, node.name, res.all_failures()[0][1])

        ssn.add_predicate_fn(self.name, predicate)
        ssn.add_batch_predicate_fn(self.name, lambda task, nodes: self.batch(ssn, task, nodes))

        def removals(state: dict[str, Any]) -> SimulatedRemovals:
            r = state.get(SIM_REMOVED)
            if not isinstance(r, SimulatedRemovals):
                r = state[SIM_REMOVED] = SimulatedRemovals()
            return r

        def simulate_remove(state: dict[str, Any], _to_schedule: TaskInfo, to_remove: TaskInfo,
                            node: NodeInfo) -> Exception | None:
            removals(state).by_node.setdefault(node.index, {})[to_remove.uid] = to_remove
            return None

        def simulate_add(state: dict[str, Any], _to_schedule: TaskInfo, to_add: TaskInfo,
                         node: NodeInfo) -> Exception | None:
            removals(state).by_node.get(node.index, {}).pop(to_add.uid, None)
            return None

        def simulate_predicate(state: dict[str, Any], task: TaskInfo, node: NodeInfo) -> Exception | None:
            gone = [t for t in removals(state).by_node.get(node.index, {}).values()
                    if t.uid in ssn.table.kube_pods[node.index]]
            for t in gone:
                ssn.table.kube_remove(node.index, t)
            try:
                return predicate(task, node)
            finally:
                for t in gone:
                    ssn.table.kube_add(node.index, t)

        ssn.add_simulate_remove_task_fn(self.name, simulate_remove)
        ssn.add_simulate_add_task_fn(self.name, simulate_add)
        ssn.add_simulate_predicate_fn(self.name, simulate_predicate)

    def on_session_close(self, ssn: Session) -> None:
        self._static = {}


SPEC = PluginSpec(
    name="predicates",
    build=PredicatesPlugin,
    arguments=(
        ArgSpec(NODE_AFFINITY_ENABLE, "bool", True, "nodeSelector and required node affinity"),
        ArgSpec(NODE_PORTS_ENABLE, "bool", True, "host port conflicts"),
        ArgSpec(TAINT_TOLERATION_ENABLE, "bool", True, "NoSchedule/NoExecute taints"),
        ArgSpec(POD_AFFINITY_ENABLE, "bool", True, "required inter-pod (anti-)affinity"),
        ArgSpec(NODE_VOLUME_LIMITS_ENABLE, "bool", True, "accepted; volumes are not modelled"),
        ArgSpec(VOLUME_ZONE_ENABLE, "bool", True, "accepted; volumes are not modelled"),
        ArgSpec(POD_TOPOLOGY_SPREAD_ENABLE, "bool", True, "DoNotSchedule topology spread constraints"),
        ArgSpec(VOLUME_BINDING_ENABLE, "bool", True, "accepted; volumes are not modelled"),
        ArgSpec(DRA_ENABLE, "bool", False, "accepted; dynamic resource allocation is not modelled"),
        ArgSpec(CACHE_ENABLE, "bool", False, "accepted; stable filters are always cached per pod shape"),
        ArgSpec("volumebinding.", "any", None, "accepted; volumes are not modelled", prefix=True),
        ArgSpec("dynamicresources.", "any", None, "accepted; DRA is not modelled", prefix=True),
    ),
    doc="kube-scheduler filters: pod count, unschedulable, node affinity, taints, ports, pod affinity, spread.",
)
