"""`run` against a real kube-apiserver 1.20 (RBAC; the scheduler holds exactly the manifest's rules).

Each test runs an in-process Scheduler (scheduler_ext.run.Scheduler, what `tidemark-scheduler run`
runs) under its own scheduler name, on nodes labelled for the test. A lone apiserver has no kubelet:
bound pods stay Pending unless a test plays kubelet, and evicted pods stay Terminating until the
test deletes them with grace 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler_ext.metrics import VOLCANO_METRIC_NAMES
from tests.fixtures.kubeapi import KubeNamespace
from tests.integration.scheduler.helpers import (
    create_node,
    create_pod,
    create_podgroup,
    create_queue,
    events,
    http_status,
    metric,
    node_of,
    pods,
    running_scheduler,
    scheduler_name,
    scrape,
    set_phase,
    wait_for,
)
from tidemark.kube.client import request_json
from tidemark.kube.resources import PODGROUPS, QUEUES

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def test_pending_pods_are_bound_with_events_metrics_and_probes(
    skube: KubeNamespace, admin: Any, tmp_path: Path
) -> None:
    kube = skube
    nodes = {create_node(admin, kube, cpu="4"), create_node(admin, kube, cpu="4")}
    name = scheduler_name(kube)
    with running_scheduler(kube, tmp_path=tmp_path) as sched:
        base = f"http://127.0.0.1:{sched.port}"
        wait_for(lambda: http_status(f"{base}/readyz") == 200, "/readyz 200 (caches synced, API reached)")
        assert http_status(f"{base}/healthz") == 200
        for i in range(6):
            create_pod(admin, kube, f"web-{i}", name, cpu="1")
        create_pod(admin, kube, "other-scheduler", "default-scheduler", cpu="1")
        bound = wait_for(
            lambda: (m := node_of(admin, kube.name)) and all(m[f"web-{i}"] for i in range(6)) and m,
            "all six pods bound",
        )
        assert {bound[f"web-{i}"] for i in range(6)} <= nodes
        assert bound["other-scheduler"] == "", "a pod of another scheduler is left alone"
        per_node: dict[str, int] = {}
        for i in range(6):
            per_node[bound[f"web-{i}"]] = per_node.get(bound[f"web-{i}"], 0) + 1
        assert max(per_node.values()) <= 4, "never more than a node's cpu"
        msgs = wait_for(
            lambda: (e := events(admin, kube.name, "Scheduled")) and len(e) >= 6 and e, "Scheduled events"
        )
        assert any(f"Successfully assigned {kube.name}/web-0 to {bound['web-0']}" == e["message"] for e in msgs)
        wait_for(lambda: metric(sched, "tidemark_scheduler_binds_total", {"result": "bound"}) >= 6, "bind metric")
        samples = scrape(f"{base}/metrics")
        for series in ("volcano_e2e_scheduling_latency_milliseconds_count",
                       "volcano_action_scheduling_latency_microseconds_count",
                       "volcano_plugin_scheduling_latency_microseconds_count",
                       "volcano_task_scheduling_latency_milliseconds_count",
                       "volcano_schedule_attempts_total", "volcano_total_preemption_attempts",
                       "volcano_unschedule_job_count", "volcano_pod_preemption_victims",
                       "tidemark_scheduler_sessions_total", "tidemark_scheduler_snapshot_build_seconds_count",
                       "tidemark_scheduler_leader", "tidemark_scheduler_conf_generation"):
            assert series in samples, f"{series} missing from /metrics"
        assert samples["volcano_schedule_attempts_total"][(("result", "scheduled"),)] >= 6
        assert samples["tidemark_scheduler_leader"][()] == 1.0
        text = __import__("urllib.request").request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        for vname in VOLCANO_METRIC_NAMES:
            assert f"# HELP {vname}" in text or f"# HELP {vname.removesuffix('_total')}" in text, vname
        # the default queue exists, open
        q = wait_for(
            lambda: (q := request_json(admin, "GET", QUEUES.object_path("default"))).get("status", {}).get("state")
            == "Open" and q,
            "default queue Open",
        )
        assert q["spec"]["weight"] == 1


def test_gang_is_bound_all_or_nothing(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    create_node(admin, kube, cpu="2")
    create_node(admin, kube, cpu="2")
    name = scheduler_name(kube)
    create_podgroup(admin, kube, "fits", 3)
    for i in range(3):
        create_pod(admin, kube, f"fits-{i}", name, cpu="1", group="fits")
    with running_scheduler(kube, tmp_path=tmp_path) as sched:
        wait_for(lambda: all(node_of(admin, kube.name).values()), "the fitting gang bound")
        # 1 cpu left: a second 3-pod gang cannot run, so none of it is bound
        create_podgroup(admin, kube, "toobig", 3)
        for i in range(3):
            create_pod(admin, kube, f"toobig-{i}", name, cpu="1", group="toobig")
        pg = wait_for(
            lambda: (g := request_json(admin, "GET", PODGROUPS.object_path("toobig", kube.name)))
            .get("status", {}).get("conditions") and g,
            "the unschedulable gang's condition",
        )
        sessions = sched.sessions
        wait_for(lambda: sched.sessions >= sessions + 3, "three more sessions")
        placed = node_of(admin, kube.name)
        assert [placed[f"toobig-{i}"] for i in range(3)] == ["", "", ""], placed
        cond = {c["type"]: c for c in pg["status"]["conditions"]}
        assert cond["Unschedulable"]["status"] == "True"
        assert cond["Unschedulable"]["reason"] == "NotEnoughResources"
        assert "tasks in gang unschedulable" in cond["Unschedulable"]["message"]
        assert pg["status"]["phase"] in ("Pending", "Inqueue")
        # each member says why on its PodScheduled condition (Volcano's TaskSchedulingReason)
        reasons = wait_for(
            lambda: (r := [
                next((c["reason"] for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"),
                     None)
                for n, p in pods(admin, kube.name).items() if n.startswith("toobig-")
            ]) and all(r) and r,
            "PodScheduled=False on the gang's pods",
        )
        assert set(reasons) <= {"Unschedulable", "Schedulable"} and "Unschedulable" in reasons


def test_unschedulable_pod_gets_condition_and_event(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    create_node(admin, kube, cpu="2")
    create_node(admin, kube, cpu="2")
    with running_scheduler(kube, tmp_path=tmp_path) as sched:
        # 3 cpu: the cluster has room (4), no node has (2 each): enqueued, then every node refuses it
        create_pod(admin, kube, "huge", scheduler_name(kube), cpu="3")

        def condition() -> dict[str, Any] | None:
            for c in pods(admin, kube.name)["huge"].get("status", {}).get("conditions") or []:
                if c["type"] == "PodScheduled":
                    return dict(c)
            return None

        cond = wait_for(condition, "PodScheduled condition on the pod")
        assert cond["status"] == "False"
        assert cond["reason"] == "Unschedulable"
        assert cond["message"] == "0/2 nodes are unavailable: 2 Insufficient cpu."
        ev = wait_for(lambda: events(admin, kube.name, "FailedScheduling"), "FailedScheduling event")
        assert ev[0]["type"] == "Warning" and ev[0]["message"] == cond["message"]
        assert ev[0]["involvedObject"]["name"] == "huge"
        # nothing changes: the condition is not rewritten every session
        rv = pods(admin, kube.name)["huge"]["metadata"]["resourceVersion"]
        sessions = sched.sessions
        wait_for(lambda: sched.sessions >= sessions + 3, "three more sessions")
        assert pods(admin, kube.name)["huge"]["metadata"]["resourceVersion"] == rv
        assert metric(sched, "volcano_schedule_attempts_total", {"result": "unschedulable"}) >= 1


def test_podgroup_status_follows_its_pods(skube: KubeNamespace, admin: Any, tmp_path: Path) -> None:
    kube = skube
    create_node(admin, kube, cpu="4")
    name = scheduler_name(kube)
    create_podgroup(admin, kube, "job", 2)
    for i in range(2):
        create_pod(admin, kube, f"job-{i}", name, cpu="1", group="job")

    def pg_status() -> dict[str, Any]:
        return dict(request_json(admin, "GET", PODGROUPS.object_path("job", kube.name)).get("status") or {})

    with running_scheduler(kube, tmp_path=tmp_path):
        wait_for(lambda: all(node_of(admin, kube.name).values()), "the gang bound")
        st = wait_for(lambda: (s := pg_status()).get("phase") == "Running" and s, "phase Running")
        cond = {c["type"]: c for c in st["conditions"]}
        assert cond["Scheduled"]["status"] == "True"
        assert "running" not in st, "no pod runs yet (no kubelet): the count is omitted as Volcano does"
        for i in range(2):  # play kubelet
            set_phase(admin, kube.name, f"job-{i}", "Running")
        wait_for(lambda: pg_status().get("running") == 2, "status.running == 2")
        for i in range(2):
            set_phase(admin, kube.name, f"job-{i}", "Succeeded")
        st = wait_for(lambda: (s := pg_status()).get("phase") == "Completed" and s, "phase Completed")
        assert st.get("succeeded") == 2 and "running" not in st
        ev = events(admin, kube.name, "Scheduled")
        assert any(e["involvedObject"]["kind"] == "PodGroup" for e in ev)


def test_queue_proportion_and_capability_hold_across_two_queues(
    skube: KubeNamespace, admin: Any, tmp_path: Path
) -> None:
    kube = skube
    create_node(admin, kube, cpu="4", memory="16Gi")
    capped = create_queue(admin, kube, "capped", capability={"cpu": "1"})
    open_q = create_queue(admin, kube, "open")
    name = scheduler_name(kube)
    for i in range(4):
        create_pod(admin, kube, f"a-{i}", name, cpu="1", memory="1Gi", queue=capped)
        create_pod(admin, kube, f"b-{i}", name, cpu="1", memory="1Gi", queue=open_q)
    with running_scheduler(kube, tmp_path=tmp_path) as sched:
        wait_for(lambda: sum(1 for n, v in node_of(admin, kube.name).items() if v and n.startswith("b-")) == 3,
                 "three pods of the open queue bound")
        sessions = sched.sessions
        wait_for(lambda: sched.sessions >= sessions + 3, "three more sessions")
        placed = node_of(admin, kube.name)
        assert sum(1 for n, v in placed.items() if v and n.startswith("a-")) == 1, placed
        assert sum(1 for n, v in placed.items() if v and n.startswith("b-")) == 3, placed
        qs = request_json(admin, "GET", QUEUES.object_path(capped))
        assert qs["status"]["state"] == "Open", "a queue with an empty state is opened"
        # per-phase PodGroup counts in the queue's status (implicit groups: one per pod)
        wait_for(lambda: request_json(admin, "GET", QUEUES.object_path(open_q))["status"].get("running") == 3,
                 "status.running == 3 on the open queue")
        wait_for(lambda: request_json(admin, "GET", QUEUES.object_path(capped))["status"].get("running") == 1,
                 "status.running == 1 on the capped queue")
