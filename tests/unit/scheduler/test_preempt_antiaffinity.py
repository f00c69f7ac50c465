"""Volcano's predicates_test.go TestPodAntiAffinity, case "pod-anti-affinity", in Tidemark terms.

n1 (12 cpu, 12G, 2 pods) runs worker-1 (high priority, role=worker, required anti-affinity to
role=worker per hostname) and worker-2 (low priority). worker-3 (high priority, role=worker, the same
anti-affinity) is pending. Topology-aware preemption could free the pod slot by evicting worker-2,
but worker-3 still could not run there (worker-1 stays and repels it), so nothing may be evicted
and nothing pipelined: preemption must check the predicates on the node as it would be without the
victims, not only the resources.

Volcano's test builds its tiers in Go, not from YAML: a PluginOption flag left unset is nil, which
Volcano's session reads as disabled (isEnabled(nil) == false; only the YAML loader applies
ApplyPluginConfDefaults). So predicates there has enablePredicate alone, and its SimulateRemoveTask /
SimulateAddTask (gated by enablePreemptable or enabledAllocatable) never run: the dry run's inter-pod
affinity state keeps worker-1 on the node whichever victims it removes, no victim set makes room,
nothing is evicted. GO_TIERS_CONF is that conf written out. With a YAML conf (every flag defaulted
on) the simulation does see the removals, and Volcano, like Tidemark, evicts worker-1 (CONF below).
"""

from __future__ import annotations

from typing import Any

from scheduler_ext.framework.conf import DEFAULT_FALSE, OPTION_KEYS
from scheduler_ext.framework.session import Session

from .helpers import node, pod, podgroup, queue, run

CONF = """
actions: "allocate, preempt"
tiers:
- plugins:
  - name: predicates
  - name: priority
    enablePreemptable: true
    enableJobStarving: true
configurations:
- name: preempt
  arguments:
    enableTopologyAwarePreemption: true
"""


def _go_tier_flags(enabled: set[str]) -> str:
    """Every PluginOption flag Volcano reads, false unless named (a Go-built conf.PluginOption)."""
    off = [k for k, v in OPTION_KEYS.items() if v not in DEFAULT_FALSE]
    return "\n".join(f"    {k}: {'true' if k in enabled else 'false'}" for k in off)


#: TestPodAntiAffinity's tiers exactly: predicates{EnabledPredicate}, priority{EnabledPreemptable,
#: EnabledJobStarving}, every other flag nil (off)
GO_TIERS_CONF = f"""
actions: "allocate, preempt"
tiers:
- plugins:
  - name: predicates
{_go_tier_flags({"enablePredicate"})}
  - name: priority
{_go_tier_flags({"enablePreemptable", "enableJobStarving"})}
configurations:
- name: preempt
  arguments:
    enableTopologyAwarePreemption: true
"""

ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["worker"]}]},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}


def worker(name: str, node_name: str, group: str, prio: str, value: int, role: bool, anti: bool) -> dict[str, Any]:
    p = pod(name, group=group, cpu="3", memory="3G", node_name=node_name,
            phase="Running" if node_name else "Pending", labels={"role": "worker"} if role else {})
    p["spec"]["priorityClassName"] = prio
    p["spec"]["priority"] = value
    if anti:
        p["spec"]["affinity"] = ANTI_AFFINITY
    return p


def cluster(pods: str = "2") -> list[dict[str, Any]]:
    n1 = node("n1", cpu="12", memory="12G", pods=pods, labels={"kubernetes.io/hostname": "node1"})
    return [
        {"kind": "PriorityClass", "metadata": {"name": "high-priority"}, "value": 100000},
        {"kind": "PriorityClass", "metadata": {"name": "low-priority"}, "value": 10},
        queue("q1", weight=0, capability={"cpu": "9", "memory": "9G"}),
        n1,
        podgroup("pg1", min_member=0, phase="Running", priorityClassName="low-priority"),
        podgroup("pg2", min_member=1, phase="Inqueue", priorityClassName="high-priority"),
        worker("worker-1", "n1", "pg1", "high-priority", 100000, role=True, anti=True),
        worker("worker-2", "n1", "pg1", "low-priority", 10, role=False, anti=False),
        worker("worker-3", "", "pg2", "high-priority", 100000, role=True, anti=True),
    ]


def _pipelined(ssn: Session) -> set[str]:
    return {t.key for j in ssn.jobs.values() for t in j.tasks.values() if t.status.name == "PIPELINED"}


def test_volcano_pod_anti_affinity_case_evicts_nothing() -> None:
    """Volcano's case as its Go test configures it: no eviction, nothing pipelined."""
    ssn = run(cluster(), GO_TIERS_CONF)
    assert [e.task.key for e in ssn.evictions] == []
    assert _pipelined(ssn) == set()


def test_the_go_tiers_case_is_kept_by_the_anti_affinity_alone() -> None:
    """With a free pod slot on n1 the verdict is the same (the anti-affinity, not the pod count,
    rules n1 out), and without the anti-affinity the same tiers do preempt: the case can fail."""
    ssn = run(cluster(pods="3"), GO_TIERS_CONF)
    assert ssn.evictions == []
    assert _pipelined(ssn) == set()
    objs = cluster()
    for o in objs:
        if o["kind"] == "Pod":
            o["spec"].pop("affinity", None)
    assert [e.task.key for e in run(objs, GO_TIERS_CONF).evictions] == ["ns1/worker-2"]
    assert [e.task.key for e in run(cluster(pods="3"), CONF).evictions] == ["ns1/worker-1"]


def test_no_victim_on_a_node_that_anti_affinity_keeps_useless() -> None:
    """The defect of issue #15: worker-2 was evicted although worker-1 still repels worker-3 there.

    Now the dry run re-runs the predicates on the node without its victims: evicting worker-2 alone
    never happens; the only eviction that makes the node usable (worker-1, of the lower-priority job)
    is the one taken, and the preemptor is pipelined there.
    """
    ssn = run(cluster(), CONF)
    pipelined = {t.key: t.node_name for j in ssn.jobs.values() for t in j.tasks.values()
                 if t.status.name == "PIPELINED"}
    assert [e.task.key for e in ssn.evictions] == ["ns1/worker-1"]
    assert pipelined == {"ns1/worker-3": "n1"}


def test_a_node_kept_useless_by_a_non_victim_is_left_alone() -> None:
    """worker-1 in a job of the preemptor's priority is no victim; worker-2 (its own low job) is one, but
    evicting it would not let worker-3 in: nothing is evicted (before the fix worker-2 was)."""
    objs = cluster()
    for o in objs:
        if o["kind"] == "PodGroup" and o["metadata"]["name"] == "pg1":
            o["spec"]["priorityClassName"] = "high-priority"
        if o["kind"] == "Pod" and o["metadata"]["name"] == "worker-2":
            o["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "pg3"
    objs.append(podgroup("pg3", min_member=0, phase="Running", priorityClassName="low-priority"))
    ssn = run(objs, CONF)
    assert ssn.evictions == []
    # the control: without worker-1's anti-affinity and label, evicting worker-2 alone makes room
    for o in objs:
        if o["kind"] == "Pod" and o["metadata"]["name"] == "worker-1":
            o["metadata"]["labels"] = {}
            o["spec"].pop("affinity")
    assert [e.task.key for e in run(objs, CONF).evictions] == ["ns1/worker-2"]


def test_the_same_cluster_without_the_anti_affinity_does_preempt() -> None:
    """The control: the case fails for the anti-affinity alone (worker-2 is a valid victim otherwise)."""
    objs = cluster()
    for o in objs:
        if o["kind"] == "Pod":
            o["spec"].pop("affinity", None)
    ssn = run(objs, CONF)
    assert [e.task.key for e in ssn.evictions] == ["ns1/worker-2"]
