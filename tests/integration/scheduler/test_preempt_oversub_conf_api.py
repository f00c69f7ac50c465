"""Preemption through the Eviction API (PDB refusals counted), oversubscription, and conf hot reload,
against a real kube-apiserver 1.20 with RBAC (the scheduler holds exactly the manifest's rules).

A lone apiserver has no kubelet and no disruption controller: an evicted pod stays Terminating (the
test plays kubelet and deletes it with grace 0), and any eviction of a pod covered by a
PodDisruptionBudget is refused with 429 (no PDB status is ever computed), which is how the refusal
path is tested.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.plugins.registry import PLUGINS
from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    create_node,
    create_pod,
    create_podgroup,
    create_priority_class,
    create_queue,
    delete,
    events,
    metric,
    node_of,
    pods,
    running_scheduler,
    scheduler_name,
    set_phase,
    wait_for,
)
from tidemark.kube.client import request_json
from tidemark.kube.resources import PODS

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

PREEMPT_CONF = """
actions: "enqueue, allocate, preempt, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def _terminating(admin: Any, ns: str) -> list[str]:
    return [n for n, p in pods(admin, ns).items() if p["metadata"].get("deletionTimestamp")]


@pytest.mark.skipif("preempt" not in ACTIONS, reason="the preempt action is not registered yet")
def test_higher_priority_job_preempts_through_the_eviction_api(
    skube: KubeNamespace, admin: Any, tmp_path: Path
) -> None:
    kube = skube
    create_node(admin, kube, cpu="2", memory="8Gi")
    queue = create_queue(admin, kube, "prio")
    low = create_priority_class(admin, kube, "low", 100)
    high = create_priority_class(admin, kube, "high", 10000)
    name = scheduler_name(kube)
    # the victim job may lose one of its two pods (minMember 1: gang allows it)
    create_podgroup(admin, kube, "low", 1, queue=queue, priorityClassName=low)
    for i in range(2):
        create_pod(admin, kube, f"low-{i}", name, cpu="1", group="low", priority_class=low)
    # a PodDisruptionBudget covers the victims: a lone apiserver refuses every such eviction (429)
    pdb_path = f"/apis/policy/v1beta1/namespaces/{kube.name}/poddisruptionbudgets"
    request_json(admin, "POST", pdb_path, body={
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "protect"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "low"}}},
    })
    for i in range(2):
        request_json(admin, "PATCH", PODS.object_path(f"low-{i}", kube.name),
                     body={"metadata": {"labels": {"app": "low"}}}, content_type="application/merge-patch+json")
    with running_scheduler(kube, conf=PREEMPT_CONF, tmp_path=tmp_path) as sched:
        wait_for(lambda: all(node_of(admin, kube.name).values()), "the low-priority job bound")
        for i in range(2):  # play kubelet (the apiserver ignores PDBs when evicting Pending pods)
            set_phase(admin, kube.name, f"low-{i}", "Running")
        create_podgroup(admin, kube, "high", 1, queue=queue, priorityClassName=high)
        create_pod(admin, kube, "high-0", name, cpu="1", group="high", priority_class=high)
        wait_for(lambda: metric(sched, "tidemark_scheduler_evictions_total", {"result": "blocked"}) >= 1,
                 "an eviction refused by the PodDisruptionBudget (429)")
        assert not _terminating(admin, kube.name), "a refused eviction removes nothing"
        assert node_of(admin, kube.name)["high-0"] == ""
        # without the PDB the eviction goes through
        delete(admin, f"{pdb_path}/protect")
        victims = wait_for(lambda: _terminating(admin, kube.name), "a victim evicted (Terminating)")
        assert len(victims) == 1 and victims[0].startswith("low-"), victims
        ev = wait_for(lambda: events(admin, kube.name, "Evict"), "Evict event on the victim")
        assert ev[0]["involvedObject"]["name"] == victims[0]
        assert node_of(admin, kube.name)["high-0"] == "", "the preemptor waits for the victim to go"
        delete(admin, PODS.object_path(victims[0], kube.name))  # play kubelet: the pod is gone
        wait_for(lambda: node_of(admin, kube.name).get("high-0"), "the preemptor bound")
        assert metric(sched, "tidemark_scheduler_evictions_total", {"result": "evicted"}) == 1
        assert metric(sched, "volcano_total_preemption_attempts") >= 1
        survivors = [n for n, v in node_of(admin, kube.name).items() if v and n.startswith("low-")]
        assert len(survivors) == 1


def _oversubscribed_cluster(admin: Any, kube: KubeNamespace) -> tuple[str, str]:
    """A labelled node (allocatable 2 cpu, X = 2 cpu) and a plain node (2 cpu)."""
    over = create_node(
        admin, kube, "over", cpu="2", memory="8Gi",
        labels={"volcano.sh/oversubscription": "true"},
        annotations={"volcano.sh/oversubscription-cpu": "2000", "volcano.sh/oversubscription-memory": str(8 << 30)},
    )
    return over, create_node(admin, kube, "plain", cpu="2", memory="8Gi")


DEFAULT_CONF = (Path(__file__).resolve().parents[3] / "examples" / "volcano-scheduler.conf").read_text()
OFFLINE = {"volcano.sh/qos-level": "-1"}


@pytest.mark.skipif("oversubscription" not in PLUGINS, reason="the oversubscription plugin is not registered yet")
def test_offline_pods_land_on_the_oversubscribed_node(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    over, _plain = _oversubscribed_cluster(admin, kube)
    name = scheduler_name(kube)
    with running_scheduler(kube, conf=DEFAULT_CONF, tmp_path=tmp_path) as sched:
        for i in range(4):
            create_pod(admin, kube, f"off-{i}", name, cpu="1", memory="1Gi", annotations=OFFLINE)
        placed = wait_for(
            lambda: (m := node_of(admin, kube.name)) and all(m[f"off-{i}"] for i in range(4)) and m,
            "the offline pods bound",
        )
        assert {placed[f"off-{i}"] for i in range(4)} == {over}, "allocatable 2 + X 2 on the labelled node"
        create_pod(admin, kube, "off-4", name, cpu="1", memory="1Gi", annotations=OFFLINE)
        nxt = wait_for(lambda: node_of(admin, kube.name).get("off-4"), "a fifth offline pod bound")
        assert nxt != over, "the labelled node is full at allocatable + X"
        assert metric(sched, "tidemark_scheduler_binds_total", {"result": "bound"}) == 5


@pytest.mark.skipif("oversubscription" not in PLUGINS, reason="the oversubscription plugin is not registered yet")
def test_online_pods_never_count_on_the_oversubscribed_part(
    skube: KubeNamespace, admin: Any, tmp_path: Path
) -> None:
    kube = skube
    over, plain = _oversubscribed_cluster(admin, kube)
    name = scheduler_name(kube)
    with running_scheduler(kube, conf=DEFAULT_CONF, tmp_path=tmp_path) as sched:
        for i in range(4):
            create_pod(admin, kube, f"off-{i}", name, cpu="1", memory="1Gi", annotations=OFFLINE)
        wait_for(lambda: sum(1 for v in node_of(admin, kube.name).values() if v == over) == 4, "offline pods bound")
        for i in range(3):
            create_pod(admin, kube, f"on-{i}", name, cpu="1", memory="1Gi")
        wait_for(lambda: sum(1 for v in node_of(admin, kube.name).values() if v == plain) == 2,
                 "two online pods on the plain node")
        sessions = sched.sessions
        wait_for(lambda: sched.sessions >= sessions + 5, "five more sessions")
        placed = node_of(admin, kube.name)
        assert sum(1 for i in range(3) if placed[f"on-{i}"] == over) <= 2, "online requests <= allocatable"
        # docs/design.md, "The oversubscription plugin": offline pods never block online ones, so the third
        # online pod fits the labelled node's allocatable (its online requests are 0 there).
        third = next(f"on-{i}" for i in range(3) if placed[f"on-{i}"] != plain)
        wait_for(lambda: bool(node_of(admin, kube.name)[third]), "the third online pod bound")
        assert node_of(admin, kube.name)[third] == over


def _write_configmap_volume(volume: Path, version: str, conf: str) -> Path:
    """Lay out a ConfigMap volume as the kubelet does: ..<version>/file, ..data -> ..<version>, file -> ..data/file."""
    data_dir = volume / f"..{version}"
    data_dir.mkdir(parents=True)
    (data_dir / "volcano-scheduler.conf").write_text(conf)
    tmp_link = volume / "..data_tmp"
    tmp_link.symlink_to(data_dir.name)
    os.replace(tmp_link, volume / "..data")  # the atomic swap
    target = volume / "volcano-scheduler.conf"
    if not target.is_symlink():
        target.symlink_to("..data/volcano-scheduler.conf")
    return target


def test_conf_hot_reload_keeps_the_old_conf_on_errors(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    create_node(admin, kube, cpu="4")
    name = scheduler_name(kube)
    # the scheduler's own Pod (downward API in the Deployment): where the Warning event goes
    create_pod(admin, kube, "tidemark-scheduler-0", "default-scheduler", cpu="100m")
    volume = tmp_path / "conf"
    good = PREEMPT_CONF.replace('"enqueue, allocate, preempt, backfill"', '"enqueue, allocate, backfill"')
    conf_path = _write_configmap_volume(volume, "v1", good)
    (tmp_path / "volcano-scheduler.conf").symlink_to(conf_path)
    with running_scheduler(
        kube, tmp_path=tmp_path, pod_name="tidemark-scheduler-0", pod_namespace=kube.name
    ) as sched:
        assert metric(sched, "tidemark_scheduler_conf_generation") == 1
        bad = good.replace("  - name: binpack\n", "  - name: binpack\n    arguments: {binpack.weight: heavy}\n")
        _write_configmap_volume(volume, "v2", bad)
        wait_for(lambda: metric(sched, "tidemark_scheduler_conf_reload_errors_total") == 1, "the reload error counted")
        ev = wait_for(lambda: events(admin, kube.name, "InvalidSchedulerConf"), "a Warning event on the scheduler Pod")
        assert ev[0]["type"] == "Warning" and ev[0]["involvedObject"]["name"] == "tidemark-scheduler-0"
        assert "tiers[1].plugins[4].arguments.binpack.weight" in ev[0]["message"], ev[0]["message"]
        assert "keeping the previous conf (generation 1)" in ev[0]["message"]
        # still scheduling with the old conf
        create_pod(admin, kube, "after-bad", name, cpu="1")
        wait_for(lambda: node_of(admin, kube.name).get("after-bad"), "a pod bound after the bad conf")
        assert metric(sched, "tidemark_scheduler_conf_generation") == 1
        sessions = sched.sessions
        wait_for(lambda: sched.sessions >= sessions + 3, "three more sessions")
        assert metric(sched, "tidemark_scheduler_conf_reload_errors_total") == 1, "a bad content is reported once"
        _write_configmap_volume(volume, "v3", PREEMPT_CONF)
        wait_for(lambda: metric(sched, "tidemark_scheduler_conf_generation") == 2, "the good conf loaded")
        wait_for(lambda: metric(sched, "volcano_action_scheduling_latency_microseconds_count",
                                {"action": "preempt"}) >= 1, "the new conf's preempt action running")
