"""The pure pieces of `run` (no API server): flag parsing, conf reload, the plan's status diffs,
the snapshot's parse cache and assumed decisions, and the metric names on the wire."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.cache.builder import clone_task
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.cli import _build_parser
from scheduler_ext.framework.conf import parse_conf
from scheduler_ext.framework.cycle import run_session
from scheduler_ext.metrics import VOLCANO_METRIC_NAMES, SchedulerMetrics
from scheduler_ext.model.plan import build_plan, merge_conditions, podgroup_status_changed
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.run import ConfSource, default_conf_text, options_from_args, parse_go_duration
from tests.integration.scheduler.helpers import CONF

REPO = Path(__file__).resolve().parents[3]


def _run_args(*argv: str) -> argparse.Namespace:
    return _build_parser().parse_args(["run", *argv])


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("500ms", 0.5), ("1m30s", 90.0), ("0", 0.0),
                                               ("1.5s", 1.5), ("250us", 0.00025)])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["1", "s", "1 s", "1d", ""])
def test_bad_go_durations(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(bad)


def test_run_flags_defaults_and_values() -> None:
    o = options_from_args(_run_args(), environ={})
    assert (o.scheduler_name, o.schedule_period, o.listen_address, o.leader_elect, o.lock_namespace) == (
        "volcano", 1.0, ":8080", False, "kube-system")
    assert (o.qps, o.burst) == (2000.0, 2000)
    o = options_from_args(_run_args("--leader-elect", "--schedule-period=500ms", "--kube-api-qps=10",
                                    "--kube-api-burst=20", "--leader-elect-lease-duration=3s",
                                    "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=500ms"),
                          environ={"POD_NAME": "s-0", "POD_NAMESPACE": "kube-system"})
    assert o.leader_elect and o.schedule_period == 0.5 and (o.qps, o.burst) == (10.0, 20)
    assert (o.leader_election.lease_duration, o.leader_election.renew_deadline) == (3.0, 2.0)
    assert (o.pod_name, o.pod_namespace) == ("s-0", "kube-system")
    assert not options_from_args(_run_args("--leader-elect=false"), environ={}).leader_elect
    for bad in (["--schedule-period=1"], ["--leader-elect=maybe"], ["--listen-address=nope"],
                ["--leader-elect-lease-duration=1s"]):
        with pytest.raises(ValueError):
            options_from_args(_run_args(*bad), environ={})


def test_the_built_in_conf_is_the_example_and_the_configmap(tmp_path: Path) -> None:
    import yaml

    example = (REPO / "examples" / "volcano-scheduler.conf").read_text()
    assert default_conf_text() == example
    cm = yaml.safe_load((REPO / "daemonset" / "scheduler" / "configmap.yaml").read_text())
    assert cm["data"]["volcano-scheduler.conf"] == example


def test_conf_source_reports_a_bad_content_once_and_keeps_the_old_conf(tmp_path: Path) -> None:
    path = tmp_path / "conf"
    path.write_text(CONF)
    src = ConfSource(str(path))
    assert src.load().generation == 1
    assert src.poll() == (None, None)
    path.write_text('actions: "enqueue, nosuch"\n')
    new, error = src.poll()
    assert new is None and error is not None and "nosuch" in error
    assert src.poll() == (None, None), "reported once"
    assert src.current is not None and src.current.generation == 1
    path.unlink()
    new, error = src.poll()
    assert new is None and error is not None and "cannot read" in error
    path.write_text(CONF.replace("binpack", "binpack\n    arguments: {binpack.weight: 2}"))
    new, error = src.poll()
    assert error is None and new is not None and new.generation == 2


def test_metric_names_on_the_wire_are_volcanos() -> None:
    m = SchedulerMetrics(CollectorRegistry())
    m.exact.inc_preemption_attempts()
    m.set_unschedulable({"job-a": 2})
    m.schedule_attempts.labels("scheduled").inc()
    text = generate_latest(m.registry).decode()
    om = generate_openmetrics(m.registry).decode()
    for name in VOLCANO_METRIC_NAMES:
        assert f"# TYPE {name} " in text or f"# TYPE {name.removesuffix('_total')} " in om, name
    assert "\nvolcano_total_preemption_attempts 1.0" in text
    assert '\nvolcano_job_retry_counts{job_id="job-a"} 1.0' in text
    assert "volcano_total_preemption_attempts_total" not in text + om
    assert 'volcano_schedule_attempts_total{result="scheduled"} 1.0' in text
    m.set_unschedulable({})
    m.forget_jobs([])
    assert "job-a" not in generate_latest(m.registry).decode()


def test_conditions_merge_by_type_and_unchanged_verdicts_are_not_changes() -> None:
    old = [{"type": "Unschedulable", "status": "True", "reason": "r", "message": "m", "transitionID": "s1",
            "lastTransitionTime": "T1"}]
    same = merge_conditions(old, [{"type": "Unschedulable", "status": "True", "reason": "r", "message": "m",
                                   "transitionID": "s2"}], "T2")
    assert same == old
    assert not podgroup_status_changed({"phase": "Pending", "conditions": same}, {"phase": "Pending",
                                                                                  "conditions": old})
    both = merge_conditions(old, [{"type": "Scheduled", "status": "True", "reason": "ok", "message": "",
                                   "transitionID": "s3"}], "T3")
    assert [c["type"] for c in both] == ["Unschedulable", "Scheduled"]
    assert "message" not in both[1], "empty strings are omitted (Volcano's omitempty)"
    assert podgroup_status_changed({"phase": "Running", "conditions": both}, {"phase": "Pending",
                                                                              "conditions": old})


def _node(name: str, cpu: str = "4") -> dict[str, Any]:
    res = {"cpu": cpu, "memory": "8Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": "1"},
            "status": {"allocatable": res, "capacity": res}}


def _pod(name: str, rv: str = "1", node: str = "", cpu: str = "1", scheduler: str = "volcano") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": scheduler, "nodeName": node,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Running" if node else "Pending"}}


def _cache() -> LiveCache:
    c = LiveCache(None, scheduler_name="volcano")
    c.watch.pdb_discovered.set()
    return c


def test_snapshot_parses_only_new_versions_and_overlays_assumed_binds() -> None:
    cache = _cache()
    cache.reflectors["nodes"].store.put(_node("n1", cpu="2"))
    for p in (_pod("a"), _pod("b"), _pod("c", node="n1", scheduler="default-scheduler"),
              _pod("d", scheduler="default-scheduler")):
        cache.watch.on_pod("ADDED", None, p)
    snap = cache.snapshot(0.0)
    assert (snap.stats.pods, snap.stats.parsed) == (3, 3), "a pending pod of another scheduler is left out"
    assert cache.snapshot(0.0).stats.parsed == 0
    changed = _pod("a", rv="2")
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    cache.watch.on_pod("MODIFIED", _pod("a"), changed)
    assert cache.snapshot(0.0).stats.parsed == 1
    status_only = {**changed, "metadata": {**changed["metadata"], "resourceVersion": "2b"},
                   "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}}
    cache.watch.on_pod("MODIFIED", changed, status_only)
    stats = cache.snapshot(0.0).stats
    assert (stats.parsed, stats.rebased) == (0, 1), "a status-only change reuses the parse"
    cache.watch.on_pod("MODIFIED", status_only, _pod("a", rv="2c"))
    assert cache.snapshot(0.0).stats.parsed == 1
    # a bind issued but not yet seen by the watch: the pod counts on its node
    cache.decisions.assume_bound("uid-a", "n1")
    node = cache.snapshot(0.0).cluster.nodes["n1"]
    assert node.used.milli_cpu == 2000 and "uid-a" in node.tasks
    cache.watch.on_pod("MODIFIED", _pod("a", rv="2c"), _pod("a", rv="3", node="n1"))
    assert cache.decisions.assumed() == ({}, set()), "the watch confirmed it"
    snap = cache.snapshot(0.0)
    assert snap.stats.rebased == 1 and snap.stats.parsed == 0, "a bind reuses the parse"
    task = next(t for j in snap.cluster.jobs.values() for t in j.tasks.values() if t.name == "a")
    assert (task.node_name, str(task.status)) == ("n1", "Running")
    cache.decisions.assume_bound("uid-b", "n1")
    cache.decisions.bind_failed("uid-b")
    assert "uid-b" not in cache.snapshot(0.0).cluster.nodes["n1"].tasks
    # a bad pod is left out, the others are scheduled
    bad = _pod("e", cpu="lots")
    cache.watch.on_pod("ADDED", None, bad)
    snap = cache.snapshot(0.0)
    assert snap.stats.excluded == 1 and snap.stats.pods == 3


def test_clone_task_shares_the_parse_and_nothing_the_session_mutates() -> None:
    cache = _cache()
    cache.reflectors["nodes"].store.put(_node("n1"))
    cache.watch.on_pod("ADDED", None, _pod("a"))
    t1 = cache.snapshot(0.0).cluster.jobs
    task1 = next(iter(next(iter(t1.values())).tasks.values()))
    copy = clone_task(task1)
    assert copy.pod is task1.pod and copy.resreq is not task1.resreq and copy.cache is not task1.cache
    copy.resreq.add(copy.resreq)
    assert task1.resreq.milli_cpu == 1000


def test_plan_after_a_session_binds_and_explains(tmp_path: Path) -> None:
    conf, _ = parse_conf(CONF, ACTIONS, PLUGINS)
    cache = _cache()
    cache.reflectors["nodes"].store.put(_node("n1", cpu="2"))
    cache.reflectors["nodes"].store.put(_node("n2", cpu="2"))
    for p in (_pod("small"), _pod("big", cpu="3")):
        cache.watch.on_pod("ADDED", None, p)
    snap = cache.snapshot(0.0)
    ssn = run_session(snap.cluster, conf, PLUGINS, [ACTIONS[a].build() for a in conf.actions], implicit_phases={})
    plan = build_plan(ssn, pod_groups=snap.pod_groups, queues=snap.queues, now_iso="2026-01-01T00:00:00Z")
    assert [(b.name, b.node in ("n1", "n2")) for b in plan.binds] == [("small", True)]
    (cond,) = plan.pod_conditions
    assert (cond.name, cond.reason, cond.message) == ("big", "Unschedulable",
                                                      "0/2 nodes are unavailable: 2 Insufficient cpu.")


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, ref: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((ref.name, type_, reason, message))

    def normal(self, ref: Any, reason: str, message: str) -> None:
        self.event(ref, "Normal", reason, message)

    def warning(self, ref: Any, reason: str, message: str) -> None:
        self.event(ref, "Warning", reason, message)


def test_executor_outcomes_of_binds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mocked transport (the real API paths are in the kube tests): refused, unanswered, fenced binds."""
    from scheduler_ext.cache import executor as ex
    from scheduler_ext.model.plan import BindOp, Plan
    from tidemark.kube.eviction import BindOutcome, BindResult

    outcomes = {
        "refused": BindResult(BindOutcome.ERROR, "forbidden", 403),
        "lost": BindResult(BindOutcome.ERROR, "connection reset"),
        "ok": BindResult(BindOutcome.BOUND, "", 201),
        "taken": BindResult(BindOutcome.CONFLICT, "already assigned", 409),
    }
    monkeypatch.setattr(ex, "bind", lambda _api, _ns, name, _uid, _node: outcomes[name])
    cache = _cache()
    rec = _Recorder()
    metrics = SchedulerMetrics(CollectorRegistry())
    fenced = [False]
    e = ex.Executor(None, cache, rec, metrics, fence=lambda: not fenced[0])  # type: ignore[arg-type]

    def op(name: str) -> BindOp:
        return BindOp(f"uid-{name}", "ns", name, "n1", 0.0, "", "ns", "default")

    e.apply(Plan(binds=tuple(op(n) for n in outcomes)))
    assert e.wait_idle(5)
    binds, _ = cache.decisions.assumed()
    assert set(binds) == {"uid-lost", "uid-ok"}, "refused and taken go back to pending; the unanswered stays"
    assert ("refused", "Warning", "FailedScheduling", "Binding rejected: forbidden") in rec.events
    assert ("ok", "Normal", "Scheduled", "Successfully assigned ns/ok to n1") in rec.events
    assert metrics.registry.get_sample_value("tidemark_scheduler_binds_total", {"result": "conflict"}) == 1
    fenced[0] = True
    e.apply(Plan(binds=(op("ok"),)))
    assert e.wait_idle(5)
    assert metrics.registry.get_sample_value("tidemark_scheduler_binds_total", {"result": "fenced"}) == 1
    e.stop()


def test_plan_creates_the_default_queue_only_while_it_is_absent() -> None:
    """`run` creates the `default` Queue through the plan and the executor, never directly."""
    from scheduler_ext.run.scheduler import REQUIRED_QUEUES

    conf, _ = parse_conf(CONF, ACTIONS, PLUGINS)
    cache = _cache()
    cache.reflectors["nodes"].store.put(_node("n1"))
    snap = cache.snapshot(0.0)
    ssn = run_session(snap.cluster, conf, PLUGINS, [ACTIONS[a].build() for a in conf.actions], implicit_phases={})
    plan = build_plan(ssn, pod_groups=snap.pod_groups, queues=snap.queues, now_iso="2026-01-01T00:00:00Z",
                      required_queues=REQUIRED_QUEUES)
    assert [(q.name, dict(q.spec)) for q in plan.queues_to_create] == [("default", {"weight": 1, "reclaimable": True})]
    cache.reflectors["queues"].store.put({"metadata": {"name": "default", "resourceVersion": "1"},
                                          "spec": {"weight": 1, "reclaimable": True}})
    snap = cache.snapshot(0.0)
    ssn = run_session(snap.cluster, conf, PLUGINS, [ACTIONS[a].build() for a in conf.actions], implicit_phases={})
    plan = build_plan(ssn, pod_groups=snap.pod_groups, queues=snap.queues, now_iso="2026-01-01T00:00:00Z",
                      required_queues=REQUIRED_QUEUES)
    assert plan.queues_to_create == ()
    # the new Queue's empty state is opened by a status write, as for any queue
    assert [(q.name, q.status["state"]) for q in plan.queues] == [("default", "Open")]
