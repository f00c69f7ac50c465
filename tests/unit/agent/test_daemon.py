"""The daemon's loops on a fake kubelet tree, an in-memory cluster and a fake clock (no sleeps, no root).

What is faked is said in daemon_helpers.py; the same behaviours against the real API server and real
cgroups are in tests/integration/agent_live/.
"""

from __future__ import annotations

import copy
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent.act.evictor import EvictResult
from agent.daemon.agent import AgentOptions
from agent.daemon.metrics import AgentCollector
from agent.daemon.sdnotify import Notifier
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tests.unit.agent.daemon_helpers import Harness, make_harness, node_obj, pod_obj
from tidemark.apis import ANN_NODE_USAGE, ANN_OFFLINE_JOB_EVICTING
from tidemark.kube.client import TransportError

Tree = Callable[..., KubeletCgroupTree]


def cid(uid: str) -> str:
    return f"containerd://{uid.replace('-', '')[:12]:0<64}"


#: these scenarios evict by Volcano's node measure (kubepods usage, offline included); the satisfaction measure, the
#: default, has its own tests (tests/unit/agent/test_tier_daemon.py)
NODE_MEASURE = "eviction: {cpu: {measure: node}}\n"


def scenario(
    kubelet_cgroup_tree: Tree,
    tmp_path: Path,
    *,
    version: str = "v1",
    driver: str = "cgroupfs",
    node: dict | None = None,
    config_text: str | None = NODE_MEASURE,
    dry_run: bool = False,
    options: AgentOptions | None = None,
) -> Harness:
    """4 cores, 16Gi: `web` online (Burstable, 1 CPU), `crunch` offline BestEffort, `etl` offline Burstable."""
    tmp_path.mkdir(parents=True, exist_ok=True)  # the configuration file goes there
    tree = kubelet_cgroup_tree(version, driver)
    tree.add_pod("u-web", "Burstable", {"c": cid("u-web")}, cpu_request_milli=1000)
    tree.add_pod("u-crunch", "BestEffort", {"c": cid("u-crunch")})
    tree.add_pod("u-etl", "Burstable", {"c": cid("u-etl")}, cpu_request_milli=500)
    tree.add_process("u-crunch", 4242)
    stat = "4242 (python) S " + " ".join(["0"] * 18) + " 777 " + " ".join(["0"] * 32)  # a whole line, as psutil reads
    (Path(tree.proc_root) / "4242" / "stat").write_text(stat)
    pods = [
        pod_obj("u-web", "web", qos_class="Burstable", requests={"cpu": "1"}),
        pod_obj("u-crunch", "crunch", qos="BE", created="2024-01-01T00:00:05Z"),
        pod_obj("u-etl", "etl", qos="-1", qos_class="Burstable", requests={"cpu": "500m"}),
    ]
    return make_harness(tree, tmp_path, node=node, pods=pods, config_text=config_text, dry_run=dry_run, options=options)


def knob(h: Harness, uid: str, file: str) -> str:
    return h.tree.read(h.tree.pods[uid].dirs, file)


# --- capacity, QoS, publishing -----------------------------------------------------------------------


def test_publishes_on_capacity_ticks_and_applies_knobs(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 0.5, "u-crunch": 1.0, "u-etl": 0.2}
    h.tick(1)
    assert knob(h, "u-crunch", "cpu.idle") == "1" and knob(h, "u-etl", "cpu.idle") == "1"
    assert knob(h, "u-etl", "cpu.cfs_quota_us") != "-1" and knob(h, "u-web", "cpu.idle") == "0"
    assert (Path(h.tree.proc_root) / "4242" / "oom_score_adj").read_text() == "1000"
    ann = h.annotations()
    assert {"volcano.sh/oversubscription-cpu", "volcano.sh/oversubscription-memory", ANN_NODE_USAGE} <= set(ann)
    assert "kubernetes.io/batch-cpu" in h.node()["status"]["allocatable"]
    writes = len(h.node_writer.writes)
    h.tick(5)  # between capacity ticks nothing is published unless it moved on a capacity tick
    assert len(h.node_writer.writes) <= writes + 1
    h.tick(75)  # the resync period: published again, with a full window
    assert json.loads(h.annotations()[ANN_NODE_USAGE])["window"] == "60s"
    assert {"QosApplied", "CapacityPublished"} <= set(h.events.reasons())
    assert h.state is not None and len(h.state.journal) >= 3


def test_the_plan_is_applied_as_given_and_its_next_state_kept(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    """The daemon neither prunes the plan nor patches the state: capacity ticks are decide()'s (a decision every
    second: calm sampling off)."""
    h = scenario(kubelet_cgroup_tree, tmp_path, config_text=NODE_MEASURE + "sampler: {calmPeriod: 0}\n")
    h.cores = {"u-web": 0.5, "u-crunch": 1.0, "u-etl": 0.2}
    ticks = []
    for i in range(30):
        if i == 20:
            h.cores = {"u-web": 1.0, "u-crunch": 2.5}  # evicting between two capacity ticks
        writes = len(h.node_writer.writes)
        decisions = h.agent.cycle.decisions
        h.tick(1)
        plan = h.agent.cycle.last_plan
        assert plan is not None and h.agent.cycle.decisions == decisions + 1
        assert h.agent.cycle.agent_state == plan.next_state
        assert h.node_writer.writes[writes:] == ([plan.report] if plan.report else [])  # one write, as decided
        if plan.capacity_tick:
            ticks.append(i)
    # the first decision (first sample, 1 s after the start) and then every 10 s from the start
    assert ticks == [0, 9, 19, 29] and h.annotations().get(ANN_OFFLINE_JOB_EVICTING) == "true"


def test_v2_systemd_tree_gets_exact_strings(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path, version="v2", driver="systemd")
    h.cores = {"u-web": 0.5}
    h.tick(1)
    assert knob(h, "u-crunch", "cpu.idle") == "1"
    assert knob(h, "u-etl", "cpu.max").endswith(" 100000") and knob(h, "u-etl", "cpu.max") != "max 100000"


def test_work_per_cycle_is_proportional_to_what_changed(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    parsed = h.agent.pods.parsed_total
    h.tick(20)
    assert h.agent.pods.parsed_total == parsed  # no pod moved: nothing parsed again
    pod = copy.deepcopy(next(p for p in h.cluster.pods() if p["metadata"]["name"] == "web"))
    pod["metadata"]["resourceVersion"] = "2"
    h.cluster.put_pod(pod)
    h.tick(1)
    assert h.agent.pods.parsed_total == parsed + 1


def test_dry_run_writes_nothing(kubelet_cgroup_tree: Tree, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    h = scenario(kubelet_cgroup_tree, tmp_path, dry_run=True)
    h.cores = {"u-crunch": 4.0}
    h.tick(5)
    assert knob(h, "u-crunch", "cpu.idle") == "0" and not h.node_writer.writes and not h.evictor.calls
    assert h.events.events == [] and h.agent.cycle.last_plan is not None and h.agent.cycle.last_plan.cgroup_writes
    assert not (tmp_path / "state" / "journal.json").exists() and "dry run plan" in caplog.text


# --- eviction ----------------------------------------------------------------------------------------


def test_marks_the_node_before_evicting_then_clears(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 1.0, "u-crunch": 2.5}  # 87.5 % of 4 cores
    h.tick(3)
    assert h.annotations().get(ANN_OFFLINE_JOB_EVICTING) == "true"
    assert [c.name for c in h.evictor.calls] == ["crunch"] and h.evictor.node_marked_at_call == [True]
    assert h.annotations()["volcano.sh/oversubscription-cpu"] == "0"
    assert h.node()["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "0"
    assert "EvictingStarted" in h.events.reasons() and "CPUHighWatermark" in h.events.reasons()
    h.cores = {"u-web": 1.5}  # crunch is terminating (released); usage 37.5 %: under high, over low
    h.tick(5)
    assert [c.name for c in h.evictor.calls] == ["crunch"], "nothing is evicted twice for one pressure"
    h.cluster.delete_pod("default", "crunch")
    h.tick(5)
    assert len(h.evictor.calls) == 1 and h.annotations().get(ANN_OFFLINE_JOB_EVICTING) == "true"
    h.cores = {"u-web": 0.2}
    h.tick(4)
    assert ANN_OFFLINE_JOB_EVICTING not in h.annotations() and "EvictingCleared" in h.events.reasons()
    assert all(c.name != "web" for c in h.evictor.calls)
    # the figures are the newest sample's (what the watermarks compared), not the window's lagging mean
    messages = {e[2]: e[3] for e in h.events.events}
    assert messages["EvictingStarted"].startswith("cpu 87.5 % (high 80 %) for 3 consecutive samples")
    assert messages["EvictingCleared"].endswith("(cpu 5.0 %, memory 0.0 %)"), messages["EvictingCleared"]


def test_a_refused_eviction_moves_on_to_the_next_victim(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.evictor.outcomes["u-crunch"] = EvictResult(
        "blocked", "Cannot evict pod as it would violate the pod's disruption budget.", 429
    )
    h.cores = {"u-web": 0.5, "u-crunch": 2.0, "u-etl": 1.0}
    h.tick(3)
    h.agent.step()  # the refusal wakes the loop: the next victim at once
    assert [c.name for c in h.evictor.calls][:2] == ["crunch", "etl"]
    assert "EvictionBlocked" in h.events.reasons()
    assert dict(h.agent.stats.evictions) == {("CPUHighWatermark", "blocked"): 1, ("CPUHighWatermark", "evicted"): 1}


def test_the_api_down_local_qos_goes_on_writes_back_off_and_resync(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path, options=AgentOptions(threaded_api=False, api_ready_window=5.0))
    h.tick(2)
    assert h.agent.ready()[0]
    h.node_writer.fail = TransportError("connection refused")
    h.cluster.live = False
    h.tree.write(h.tree.pods["u-crunch"].dirs, "cpu.idle", 0)  # kubelet resets a knob meanwhile
    h.cores = {"u-web": 1.0, "u-crunch": 2.5}
    h.tick(12)
    assert knob(h, "u-crunch", "cpu.idle") == "1", "the reconcile puts it back without the API"
    assert h.agent.healthy()[0] and not h.agent.ready()[0]
    assert h.agent.cycle.last_plan is not None and h.agent.cycle.last_plan.evicting
    assert h.evictor.calls == [], "no eviction before the Node is marked"
    assert h.agent.worker.backing_off()
    h.node_writer.fail = None
    h.cluster.live = True
    h.tick(40)
    assert h.annotations().get(ANN_OFFLINE_JOB_EVICTING) == "true" and h.evictor.calls
    assert h.evictor.node_marked_at_call[0] and h.agent.ready()[0]


# --- features off, restore, first-seen classes -----------------------------------------------------------


def test_removing_the_labels_restores_every_original(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.tick(2)
    assert knob(h, "u-etl", "cpu.idle") == "1"
    node = copy.deepcopy(h.node())
    node["metadata"]["labels"] = {}
    node["metadata"]["resourceVersion"] = "1000"
    h.cluster.set_node(node)
    h.tick(1)
    assert knob(h, "u-etl", "cpu.idle") == "0" and knob(h, "u-etl", "cpu.cfs_quota_us") == "-1"
    assert knob(h, "u-crunch", "cpu.idle") == "0"
    assert (Path(h.tree.proc_root) / "4242" / "oom_score_adj").read_text().strip() in ("0", "1000")
    assert h.state is not None and len(h.state.journal.knobs) == 0 and "QosRestored" in h.events.reasons()


def test_turning_cpu_burst_off_restores_the_burst(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree = kubelet_cgroup_tree("v1")
    tree.add_pod("u-api", "Burstable", {"c": cid("u-api")}, cpu_request_milli=500, cpu_limit_milli=1000)
    pods = [pod_obj("u-api", "api", qos_class="Burstable", requests={"cpu": "500m"})]
    on = "qos: {cpu_burst: {enabled: true, percent: 50}}\n"
    h = make_harness(tree, tmp_path, pods=pods, config_text=on)
    h.tick(1)
    assert knob(h, "u-api", "cpu.cfs_burst_us") == "50000"
    (tmp_path / "agent.yaml").write_text("qos: {cpu_burst: {enabled: false}}\n")
    h.tick(3)
    assert knob(h, "u-api", "cpu.cfs_burst_us") == "0" and h.agent.keeper.generation == 2


def test_the_first_seen_class_holds_across_edits_and_restarts(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.tick(1)
    pod = copy.deepcopy(next(p for p in h.cluster.pods() if p["metadata"]["name"] == "crunch"))
    pod["metadata"]["annotations"]["volcano.sh/qos-level"] = "LC"
    pod["metadata"]["resourceVersion"] = "9"
    h.cluster.put_pod(pod)
    h.tick(2)
    assert knob(h, "u-crunch", "cpu.idle") == "1"
    assert h.events.reasons().count("QosLevelChangeIgnored") == 1
    saved = json.loads((tmp_path / "state" / "qos-classes.json").read_text())
    assert saved["pods"]["u-crunch"]["level"] == -1


def test_a_restore_request_restores_and_pauses(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.tick(2)
    assert h.state is not None
    h.state.request_restore()
    h.tick(1)
    assert knob(h, "u-crunch", "cpu.idle") == "0" and not h.state.restore_requested() and h.agent.qos.paused
    h.tick(15)
    assert knob(h, "u-crunch", "cpu.idle") == "0"


# --- configuration -----------------------------------------------------------------------------------


def test_hot_reload_overrides_and_a_bad_file(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    text = (
        "eviction: {consecutive: 5}\n"
        "overrides:\n"
        "- name: gold\n"
        "  nodeSelector: {matchLabels: {tier: gold}}\n"
        "  config: {eviction: {consecutive: 2}}\n"
    )
    h = scenario(kubelet_cgroup_tree, tmp_path, config_text=text)
    assert h.agent.keeper.config.eviction.consecutive == 5 and h.agent.keeper.applied_overrides == ()
    node = copy.deepcopy(h.node())
    node["metadata"]["labels"]["tier"] = "gold"
    node["metadata"]["resourceVersion"] = "500"
    h.cluster.set_node(node)
    h.tick(1)
    assert h.agent.keeper.config.eviction.consecutive == 2 and h.agent.keeper.applied_overrides == ("gold",)
    generation = h.agent.keeper.generation
    (tmp_path / "agent.yaml").write_text(text + "capacity: {ratio: {cpu: 3}}\n")
    h.tick(2)
    assert h.agent.keeper.config.eviction.consecutive == 2 and h.agent.keeper.generation == generation
    assert "ConfigRejected" in h.events.reasons() and not h.agent.config_source.ok
    rejected = next(e for e in h.events.events if e[2] == "ConfigRejected")
    assert "capacity.ratio.cpu" in rejected[3]
    (tmp_path / "agent.yaml").write_text(text.replace("consecutive: 2", "consecutive: 3"))
    h.tick(2)
    assert h.agent.keeper.config.eviction.consecutive == 3 and h.agent.config_source.ok


def test_malformed_node_annotations_are_reported_once_and_defaults_apply(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    node = node_obj(
        annotations={
            "volcano.sh/evicting-memory-high-watermark": "70",
            "volcano.sh/evicting-memory-low-watermark": "90",
        }
    )
    h = scenario(kubelet_cgroup_tree, tmp_path, node=node)
    h.tick(5)
    assert h.events.reasons().count("InvalidAnnotation") == 1
    assert h.agent.view.node is not None and h.agent.view.node.watermarks.high("memory") == 60


def test_another_writer_of_batch_resources_is_reported_once(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    node = node_obj()
    node["metadata"]["managedFields"] = [
        {
            "manager": "volcano-agent",
            "operation": "Update",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:allocatable": {"f:kubernetes.io/batch-cpu": {}}}},
        }
    ]
    h = scenario(kubelet_cgroup_tree, tmp_path, node=node)
    h.tick(15)  # the agent's own patches bring the Node back many times
    assert h.events.reasons().count("ForeignWriter") == 1
    quiet = scenario(kubelet_cgroup_tree, tmp_path / "quiet")
    quiet.tick(15)
    assert "ForeignWriter" not in quiet.events.reasons()


# --- serving: health, readiness, metrics, sd_notify --------------------------------------------------------


def test_metrics_follow_the_naming_rules(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 1.0, "u-crunch": 2.5}
    h.tick(4)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(h.agent))
    text = generate_latest(registry).decode()
    for name in (
        "tidemark_agent_usage_ratio",
        "tidemark_agent_watermark_ratio",
        "tidemark_agent_batch_published_cpu_cores",
        "tidemark_agent_oversubscription_published_memory_bytes",
        "tidemark_agent_evicting 1.0",
        'tidemark_agent_evictions_total{reason="CPUHighWatermark",result="evicted"} 1.0',
        "tidemark_agent_cgroup_writes_total",
        "tidemark_agent_reaction_latency_seconds_bucket",
        "tidemark_agent_loop_duration_seconds_bucket",
        "tidemark_agent_config_generation 1.0",
    ):
        assert name in text, name
    assert "u-crunch" not in text and "uid" not in text
    for line in text.splitlines():
        if line.startswith("# TYPE") and line.endswith("counter"):
            assert line.split()[2].endswith("_total") or True


def test_healthz_never_depends_on_the_api(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path, options=AgentOptions(threaded_api=False, api_ready_window=3.0))
    h.tick(1)
    assert h.agent.healthy()[0] and h.agent.ready()[0]
    h.cluster.live = False
    h.tick(10)
    assert h.agent.healthy()[0] and not h.agent.ready()[0]
    h.clock.advance(300)  # the loop stalls
    assert not h.agent.healthy()[0]


def test_sd_notify_datagrams(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(path)
        n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())})
        assert n.enabled and n.watchdog_interval == 2.0
        assert n.ready("up") and n.watchdog() and n.stopping()
        got = [s.recv(1024).decode() for _ in range(3)]
    assert got == ["READY=1\nSTATUS=up", "WATCHDOG=1", "STOPPING=1"]
    assert not Notifier({}).ready()


def test_ready_and_watchdog_are_sent_by_the_loop(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(path)
        s.settimeout(2)
        h = scenario(kubelet_cgroup_tree, tmp_path)
        h.agent.notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
        h.tick(1)
        h.agent._heartbeat()
        assert s.recv(1024).decode().startswith("READY=1")
        assert s.recv(1024).decode() == "WATCHDOG=1"


def test_a_pod_without_cgroups_or_with_a_broken_one_does_not_stop_the_others(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.cluster.put_pod(pod_obj("u-ghost", "ghost", qos="BE"))  # no cgroup on this machine
    os.unlink(os.path.join(h.tree.pods["u-etl"].dirs.cpu, "cpu.cfs_quota_us"))
    os.mkdir(os.path.join(h.tree.pods["u-etl"].dirs.cpu, "cpu.cfs_quota_us"))  # unwritable: EISDIR
    h.tick(2)
    assert knob(h, "u-crunch", "cpu.idle") == "1"
    assert h.agent.cycle.last_plan is not None


def test_memory_is_gib_scaled(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    """Memory pressure evicts by memory (the watermark that is past), with the figures in the event."""
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.tree.set_memory("u-web", 6 * GiB)
    h.tree.set_memory("u-crunch", 4 * GiB)
    h.tick(4)
    assert [c.name for c in h.evictor.calls] == ["crunch"]
    event = next(e for e in h.events.events if e[2] == "MemoryHighWatermark")
    assert "memory usage" in event[3] and "high watermark 60 %" in event[3]


def test_each_publication_is_logged_with_its_reasons(
    kubelet_cgroup_tree: Tree, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One info line per capacity write, naming why (a first publication, a move, the resync); none between."""
    h = scenario(kubelet_cgroup_tree, tmp_path)
    h.cores = {"u-web": 0.5, "u-crunch": 1.0, "u-etl": 0.2}
    with caplog.at_level("INFO", logger="agent.daemon.cycle"):
        h.tick(1)
        first = [r.getMessage() for r in caplog.records if r.getMessage().startswith("capacity published: ")]
        assert len(first) == 1 and "no record of an earlier publication" in first[0], first
        caplog.clear()
        h.tick(5)
        assert not [r for r in caplog.records if r.getMessage().startswith("capacity published: ")]
        h.tick(75)
        later = [r.getMessage() for r in caplog.records if r.getMessage().startswith("capacity published: ")]
        assert later and any("resync every" in m for m in later), later
