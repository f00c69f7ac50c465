"""The oversubscription plugin through real sessions (docs/design.md, "The oversubscription plugin")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler_ext.framework.session import Session
from scheduler_ext.plugins.oversubscription import OversubscriptionPlugin

from .helpers import node, pod, podgroup, queue, run, session

OFFLINE = {"volcano.sh/qos-level": "-1"}
LABEL = {"volcano.sh/oversubscription": "true"}

#: the example conf's plugins (tier 1 orders and gangs, tier 2 filters and scores)
CONF = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
  - name: oversubscription
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def binds(ssn: Session) -> dict[str, str]:
    return {b.task.key: b.node for b in ssn.binds}


def xnode(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    *,
    x_cpu: str | None = None,
    x_mem: str | None = None,
    labelled: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    ann = dict(extra.pop("annotations", {}))
    if x_cpu is not None:
        ann["volcano.sh/oversubscription-cpu"] = x_cpu
    if x_mem is not None:
        ann["volcano.sh/oversubscription-memory"] = x_mem
    labels = dict(LABEL) if labelled else {}
    labels.update(extra.pop("labels", {}))
    return node(name, cpu=cpu, memory=memory, labels=labels, annotations=ann, **extra)


def offline(name: str, cpu: str | None = "1", memory: str | None = "1Gi", **kw: Any) -> dict[str, Any]:
    ann = {**OFFLINE, **kw.pop("annotations", {})}
    return pod(name, cpu=cpu, memory=memory, annotations=ann, **kw)


def running(name: str, node_name: str, cpu: str, memory: str = "1Gi", *, off: bool = False) -> dict[str, Any]:
    ann = dict(OFFLINE) if off else {}
    return pod(name, cpu=cpu, memory=memory, node_name=node_name, phase="Running", annotations=ann)


# --- resource fit ----------------------------------------------------------------------------------


def test_offline_pod_fits_allocatable_plus_x_on_labelled_node() -> None:
    base = [xnode("n1", cpu="4", x_cpu="2000"), running("web", "n1", "3")]
    # 3 (online) + 3 <= 4 + 2
    assert binds(run([*base, offline("batch", cpu="3")], CONF)) == {"ns1/batch": "n1"}
    # 3 + 3.5 > 4 + 2
    assert binds(run([*base, offline("batch", cpu="3500m")], CONF)) == {}
    # the same pod online sees only allocatable: 3 + 3 > 4
    assert binds(run([*base, pod("svc", cpu="3")], CONF)) == {}


def test_x_counts_all_pods_including_offline_ones() -> None:
    objs = [
        xnode("n1", cpu="4", x_cpu="2000"),
        running("web", "n1", "2"),
        running("old-batch", "n1", "3", off=True),  # already over allocatable: 5 <= 6
        offline("batch", cpu="1"),
    ]
    assert binds(run(objs, CONF)) == {"ns1/batch": "n1"}  # 6 <= 6
    objs[-1] = offline("batch", cpu="1500m")
    assert binds(run(objs, CONF)) == {}  # 6.5 > 6


def test_memory_is_oversubscribed_too() -> None:
    objs = [
        xnode("n1", cpu="8", memory="4Gi", x_mem=str(2 * 1024**3)),
        running("web", "n1", "1", "3Gi"),
        offline("batch", cpu="1", memory="3Gi"),
    ]
    assert binds(run(objs, CONF)) == {"ns1/batch": "n1"}  # 6Gi <= 4Gi + 2Gi
    objs[-1] = offline("batch", cpu="1", memory="3500Mi")
    assert binds(run(objs, CONF)) == {}


def test_unlabelled_node_ignores_x_annotations() -> None:
    objs = [xnode("n1", cpu="4", x_cpu="8000", labelled=False), running("web", "n1", "3"), offline("batch", cpu="2")]
    assert binds(run(objs, CONF)) == {}
    # a label that is not true counts as absent
    objs[0] = xnode("n1", cpu="4", x_cpu="8000", labelled=False, labels={"volcano.sh/oversubscription": "yes"})
    assert binds(run(objs, CONF)) == {}


def test_invalid_x_is_zero() -> None:
    objs = [xnode("n1", cpu="4", x_cpu="2 cores"), running("web", "n1", "3"), offline("batch", cpu="2")]
    assert binds(run(objs, CONF)) == {}


def test_online_pod_ignores_offline_requests_on_labelled_node() -> None:
    objs = [xnode("n1", cpu="4", x_cpu="4000"), running("batch", "n1", "4", off=True), pod("svc", cpu="4")]
    assert binds(run(objs, CONF)) == {"ns1/svc": "n1"}
    # on an unlabelled node offline pods block as usual
    objs[0] = xnode("n1", cpu="4", labelled=False)
    assert binds(run(objs, CONF)) == {}


def test_online_pods_never_exceed_allocatable_even_with_x() -> None:
    objs = [xnode("n1", cpu="4", x_cpu="4000"), running("web", "n1", "3"), pod("svc", cpu="2")]
    assert binds(run(objs, CONF)) == {}


def test_offline_placed_in_the_same_session_does_not_block_online() -> None:
    """A higher-priority offline job is placed first; the online one still fits allocatable."""
    objs = [
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        queue("q1"),
        xnode("n1", cpu="4", x_cpu="4000"),
        podgroup("batch", priorityClassName="high"),
        podgroup("svc"),
        offline("batch-0", cpu="4", group="batch"),
        pod("svc-0", cpu="4", group="svc"),
    ]
    ssn = run(objs, CONF)
    assert binds(ssn) == {"ns1/batch-0": "n1", "ns1/svc-0": "n1"}
    assert [b.task.key for b in ssn.binds] == ["ns1/batch-0", "ns1/svc-0"]


def test_offline_gang_beyond_allocatable_plus_x_binds_nothing() -> None:
    objs = [queue("q1"), xnode("n1", cpu="4", x_cpu="2000"), podgroup("g", min_member=4)]
    objs += [offline(f"g-{i}", cpu="1500m", group="g") for i in range(4)]  # 4 x 1.5 = 6 <= 4 + 2
    assert len(binds(run(objs, CONF))) == 4
    objs[-1] = offline("g-3", cpu="1600m", group="g")
    assert binds(run(objs, CONF)) == {}


def test_batch_resources_are_plain_scalars_everywhere() -> None:
    batch = {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": str(4 * 1024**3)}

    def bpod(name: str) -> dict[str, Any]:
        p = offline(name, cpu=None, memory=None)
        p["spec"]["containers"][0]["resources"]["requests"] = {
            "kubernetes.io/batch-cpu": "1000",
            "kubernetes.io/batch-memory": str(1024**3),
        }
        return p

    for labelled in (True, False):
        objs = [
            xnode("n1", cpu="4", x_cpu="8000", labelled=labelled, resources=batch),
            bpod("b-0"),
            bpod("b-1"),
            bpod("b-2"),
        ]
        got = binds(run(objs, CONF))
        assert len(got) == 2, (labelled, got)  # X never stretches batch-cpu


# --- evicting nodes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("labelled", [True, False])
def test_evicting_node_takes_no_offline_pod(labelled: bool) -> None:
    n = xnode("n1", x_cpu="2000", labelled=labelled, annotations={"volcano.sh/offline-job-evicting": "true"})
    ssn = run([n, offline("batch"), pod("svc")], CONF)
    assert binds(ssn) == {"ns1/svc": "n1"}
    job = next(j for j in ssn.jobs.values() if "batch" in j.uid)
    assert "evicting offline jobs" in job.fit_error() or any(
        "evicting offline jobs" in fe.error() for fe in job.nodes_fit_errors.values()
    )


def test_evicting_taint_blocks_offline_pods_whatever_their_tolerations() -> None:
    taint = {"key": "volcano.sh/offline-job-evicting", "value": "true", "effect": "NoSchedule"}
    tol = [{"key": "volcano.sh/offline-job-evicting", "operator": "Exists"}]
    objs = [
        xnode("n1", x_cpu="2000", taints=[taint]),
        offline("batch", spec={"tolerations": tol}),
        pod("svc", spec={"tolerations": tol}),
    ]
    assert binds(run(objs, CONF)) == {"ns1/svc": "n1"}
    # "false" is not evicting
    objs[0] = xnode("n1", annotations={"volcano.sh/offline-job-evicting": "false"})
    assert binds(run(objs, CONF)) == {"ns1/batch": "n1", "ns1/svc": "n1"}


# --- preference -----------------------------------------------------------------------------------


def test_offline_pods_prefer_oversubscribed_nodes_online_pods_do_not() -> None:
    # n0 is empty and unlabelled; n1 is labelled with X but half full: least-requested favours n0
    objs = [xnode("n0", cpu="8", labelled=False), xnode("n1", cpu="8", x_cpu="2000"), running("web", "n1", "4", "4Gi")]
    assert binds(run([*objs, offline("batch")], CONF)) == {"ns1/batch": "n1"}
    assert binds(run([*objs, pod("svc")], CONF)) == {"ns1/svc": "n0"}
    # labelled but X = 0: nothing to offer, no preference
    objs[1] = xnode("n1", cpu="8", x_cpu="0", x_mem="0")
    assert binds(run([*objs, offline("batch")], CONF)) == {"ns1/batch": "n0"}
    # weight 0 turns the preference off
    conf0 = CONF.replace(
        "  - name: oversubscription\n", "  - name: oversubscription\n    arguments: {oversubscription.weight: 0}\n"
    )
    objs[1] = xnode("n1", cpu="8", x_cpu="2000")
    assert binds(run([*objs, offline("batch")], conf0)) == {"ns1/batch": "n0"}


def test_score_vector() -> None:
    objs = [
        xnode("a", x_cpu="1000"),
        xnode("b", labelled=False, x_cpu="1000"),
        xnode("c", x_mem="1"),
        xnode("d", x_cpu="5", annotations={"volcano.sh/offline-job-evicting": "true"}),
        xnode("e"),
        offline("batch"),
        pod("svc"),
    ]
    ssn = session(objs, CONF)
    plugin = ssn.plugins["oversubscription"]
    assert isinstance(plugin, OversubscriptionPlugin)
    tasks = {t.name: t for j in ssn.jobs.values() for t in j.tasks.values()}
    idx = ssn.node_indices()
    assert plugin.score(tasks["batch"], idx).tolist() == [2000.0, 0.0, 2000.0, 0.0, 0.0]
    assert plugin.score(tasks["svc"], idx).tolist() == [0.0] * 5


# --- job order ---------------------------------------------------------------------------------------


def _jobs(ssn: Session) -> dict[str, Any]:
    return {j.name: j for j in ssn.jobs.values()}


def test_online_jobs_first_at_equal_priority() -> None:
    objs = [
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        queue("q1"),
        xnode("n1", cpu="2", labelled=False),
        podgroup("a-batch"),  # sorts first by name/UID: the plugin must override that
        podgroup("b-svc"),
        podgroup("c-mixed"),
        podgroup("d-batch-high", priorityClassName="high"),
        offline("a-0", cpu="2", group="a-batch"),
        pod("b-0", cpu="2", group="b-svc"),
        offline("c-0", cpu="2", group="c-mixed"),
        pod("c-1", cpu="2", group="c-mixed"),
        offline("d-0", cpu="2", group="d-batch-high"),
    ]
    ssn = session(objs, CONF)
    jobs = _jobs(ssn)
    assert ssn.job_order_fn(jobs["b-svc"], jobs["a-batch"])
    assert not ssn.job_order_fn(jobs["a-batch"], jobs["b-svc"])
    assert ssn.job_order_fn(jobs["c-mixed"], jobs["a-batch"])  # a job with one online task is online
    assert ssn.job_order_fn(jobs["d-batch-high"], jobs["b-svc"])  # priority decides first
    key = ssn.job_order_key_fn()
    assert key is not None
    order = sorted(jobs.values(), key=key)
    assert [j.name for j in order] == ["d-batch-high", "b-svc", "c-mixed", "a-batch"]
    # and allocation follows: the high-priority offline job takes the only node
    assert binds(run(objs, CONF)) == {"ns1/d-0": "n1"}
    objs.pop()  # without it the online job wins over the older-named offline one
    assert binds(run(objs, CONF)) == {"ns1/b-0": "n1"}


def test_plugin_order_matters_for_job_order() -> None:
    """After priority and gang in tier 1 (as in the example conf), priority decides first."""
    objs = [
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        queue("q1"),
        xnode("n1", cpu="2", labelled=False),
        podgroup("svc"),
        podgroup("batch-high", priorityClassName="high"),
        pod("s-0", cpu="2", group="svc"),
        offline("b-0", cpu="2", group="batch-high"),
    ]
    first = CONF.replace(
        "  - name: priority\n  - name: gang\n  - name: conformance\n  - name: oversubscription\n",
        "  - name: oversubscription\n  - name: priority\n  - name: gang\n  - name: conformance\n",
    )
    assert binds(run(objs, CONF)) == {"ns1/b-0": "n1"}
    assert binds(run(objs, first)) == {"ns1/s-0": "n1"}


# --- queue capacity ------------------------------------------------------------------------------------


def test_x_is_added_to_the_queue_plugins_total() -> None:
    objs = [xnode("n1", cpu="4", memory="8Gi", x_cpu="4000", x_mem=str(8 * 1024**3)), xnode("n2", labelled=False)]
    objs += [offline(f"b-{i}", cpu="1", memory="1Gi") for i in range(12)]
    ssn = session(objs, CONF)
    assert ssn.total_resource.milli_cpu == 12000
    assert ssn.total_resource.memory == 24 * 1024**3
    # proportion's deserved includes X, so all 12 offline pods run (8 on n1, 4 on n2)
    got = binds(run(objs, CONF))
    assert len(got) == 12
    assert sum(1 for v in got.values() if v == "n1") == 8


def test_offline_work_never_takes_queue_capacity_from_online_work() -> None:
    """The cluster is full at queue level (offline pods fill allocatable + X of the labelled node, online
    pods the plain node), yet an online pod still fits the labelled node's allocatable: proportion must
    enqueue it (docs/design.md, "The oversubscription plugin": offline pods never block online ones)."""
    objs = [xnode("over", cpu="2", memory="8Gi", x_cpu="2000"), xnode("plain", cpu="2", memory="8Gi", labelled=False)]
    objs += [running(f"off-{i}", "over", "1", off=True) for i in range(4)]
    objs += [running(f"on-{i}", "plain", "1") for i in range(2)]
    objs += [pod("svc", cpu="1")]
    ssn = session(objs, CONF)
    # allocatable 4 cpu + per labelled node max(X 2, offline requests 4)
    assert ssn.total_resource.milli_cpu == 8000
    assert binds(run(objs, CONF)) == {"ns1/svc": "over"}
    # a further offline pod is enqueued at queue level but has no node: allocatable + X is full
    assert binds(run([*objs[:-1], offline("more")], CONF)) == {}


def test_headroom_refreshes_only_changed_nodes() -> None:
    objs = [xnode("n1", x_cpu="1000"), xnode("n2", x_cpu="1000"), running("b", "n1", "2", off=True), pod("svc")]
    ssn = session(objs, CONF)
    plugin = ssn.plugins["oversubscription"]
    assert isinstance(plugin, OversubscriptionPlugin)
    svc = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.name == "svc")
    room = plugin.headroom(ssn, svc, ssn.all_nodes)
    assert room is not None
    assert room[:, 0].tolist() == [2000.0, 0.0]
    # moving the offline pod changes n1's row generation; the headroom follows
    b = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.name == "b")
    ssn.nodes["n1"].remove_task(b)
    assert plugin.headroom(ssn, svc, ssn.all_nodes) is None
    assert np.all(plugin.offline_used == 0)


def test_pipelined_offline_pod_never_lets_online_pods_exceed_allocatable() -> None:
    """An offline pod pipelined onto resources being released is not room for online pods."""
    leaving = running("leaving", "n1", "2")
    leaving["metadata"]["deletionTimestamp"] = "2023-11-14T00:00:00Z"
    objs = [
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        queue("q1"),
        xnode("n1", cpu="4", x_cpu="0", x_mem="0", labels={"pin": "here"}),
        xnode("n2", cpu="16", labelled=False),  # room for the queues, but both pods are pinned to n1
        running("web", "n1", "2"),
        leaving,
        podgroup("batch", priorityClassName="high"),
        podgroup("svc"),
        offline("batch-0", cpu="2", group="batch", spec={"nodeSelector": {"pin": "here"}}),
        pod("svc-0", cpu="2", group="svc", spec={"nodeSelector": {"pin": "here"}}),
    ]
    ssn = run(objs, CONF)
    assert binds(ssn) == {}
    tasks = {t.name: t for j in ssn.jobs.values() for t in j.tasks.values()}
    assert tasks["batch-0"].node_name == "n1"  # pipelined there
    assert "Insufficient cpu" in ssn.jobs[tasks["svc-0"].job].fit_error() or any(
        "Insufficient cpu" in fe.error() for fe in ssn.jobs[tasks["svc-0"].job].nodes_fit_errors.values()
    )
