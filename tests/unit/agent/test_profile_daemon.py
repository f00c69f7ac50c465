"""The usage profiles in the daemon: folded from its samples, checkpointed to the state dir, loaded at start, so a
restart does not drop the published capacity to a cold start; a corrupt checkpoint is a log line and a cold start.

Fakes as in daemon_helpers.py (a fake kubelet tree, an in-memory cluster, a fake clock)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.act.statedir import PROFILES
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.daemon_helpers import Harness, make_harness, pod_obj

Tree = Callable[..., KubeletCgroupTree]
CONFIG = "sampler: {period: 10s, window: 60s}\ncapacity: {policy: profile, period: 10s, profile: {checkpoint: 60s}}\n"


def cid(uid: str) -> str:
    return f"containerd://{uid.replace('-', '')[:12]:0<64}"


WALL = 1_700_000_000.0  # the harness's FakeClock: 2023-11-14 22:13:20 UTC


def history(tmp_path: Path, days: int = 2) -> None:
    """profiles.json as after `days` quiet days (web at 0.2 core): the profile is read once it spans a day."""
    from agent.act.statedir import ProfileCheckpoint
    from agent.config_profile import ProfileConfig
    from agent.decide import profile as pf
    from agent.model import ProfileState
    from tests.unit.agent.helpers import pod, sample

    state, cfg = ProfileState(), ProfileConfig()
    web = pod("u-web", created=WALL - 10 * 86400, cpu=1000)
    for hour in range(days * 24, 0, -1):
        t0 = WALL - hour * 3600.0
        samples = [sample(t0 + m * 60, 200.0, node_cpu=200.0, node_mem=2**30, pods={"u-web": (200.0, 2**29)},
                          elapsed=60.0) for m in range(1, 61)]  # fmt: skip
        state = pf.fold(state, samples, (web,), cfg, t0 + 3600)
    (tmp_path / "state").mkdir(exist_ok=True)
    ProfileCheckpoint(str(tmp_path / "state" / PROFILES), fsync=False).save(state)


def start(tree: KubeletCgroupTree, tmp_path: Path, config: str = CONFIG) -> Harness:
    pods = [pod_obj("u-web", "web", qos_class="Burstable", requests={"cpu": "1"}, created="2020-01-01T00:00:00Z")]
    return make_harness(tree, tmp_path, pods=pods, config_text=config)


def fresh_tree(kubelet_cgroup_tree: Tree) -> KubeletCgroupTree:
    tree = kubelet_cgroup_tree("v1", "cgroupfs")
    tree.add_pod("u-web", "Burstable", {"c": cid("u-web")}, cpu_request_milli=1000)
    return tree


def batch_cpu(h: Harness) -> int:
    return int(h.node()["status"]["allocatable"]["kubernetes.io/batch-cpu"])


def busy_then_quiet(h: Harness) -> None:
    """After two quiet days (`history`): 50 quiet minutes, 20 with web at 2 cores, then 3 quiet ones: the window
    forgets the busy part, the profile not (the busy minutes weigh most in the current hour, 23:xx)."""
    h.cores = {"u-web": 0.2}
    h.tick(300)
    h.cores = {"u-web": 2.0}
    h.tick(120)
    h.cores = {"u-web": 0.2}
    h.tick(18)


def test_the_profile_holds_capacity_for_the_busy_hour(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    history(tmp_path)
    h = start(fresh_tree(kubelet_cgroup_tree), tmp_path)
    busy_then_quiet(h)
    plan = h.agent.cycle.last_plan
    assert plan is not None and plan.capacity.policy == "profile"
    # window U_non is about 0.2 core; the profile's p95 x 1.1 of this hour about 2.2 cores, less the headroom
    # (high watermark 80 % - ratio 70 %) x 4 cores = 0.4: U_non about 1.8, B = 4 x 0.7 - 1.8
    assert plan.usage.non_offline.cpu < 400
    assert 1700 <= plan.capacity.u_non.cpu <= 2100
    assert batch_cpu(h) == plan.capacity.published_batch.cpu
    assert 700 <= batch_cpu(h) <= 1100
    assert any("capacity policy profile" in e for e in plan.explanations)


def test_a_restart_keeps_the_profile_and_the_capacity(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    tree = fresh_tree(kubelet_cgroup_tree)
    history(tmp_path)
    h = start(tree, tmp_path)
    busy_then_quiet(h)
    before = batch_cpu(h)
    h.agent.shutdown()
    assert h.state is not None
    h.state.unlock()
    saved = json.loads((Path(h.state.path) / PROFILES).read_text())
    assert saved["kind"] == "tidemark-usage-profiles" and "u-web" in saved["pods"]
    # the same node, a new agent process: the window is empty, the profile is not
    h2 = start(tree, tmp_path)
    h2.cores = {"u-web": 0.2}
    h2.tick(6)
    assert h2.agent.state_dir is not None and "pod profile" in h2.agent.state_dir.profiles.loaded
    plan = h2.agent.cycle.last_plan
    assert plan is not None and plan.capacity.u_non.cpu >= 1600
    assert abs(batch_cpu(h2) - before) <= 100
    # without the checkpoint the same restart starts cold: B from the quiet window alone
    h2.agent.shutdown()
    assert h2.state is not None
    h2.state.unlock()
    (Path(h2.state.path) / PROFILES).unlink()
    h3 = start(tree, tmp_path)
    h3.cores = {"u-web": 0.2}
    h3.tick(6)
    assert batch_cpu(h3) >= before + 1000


def test_a_corrupt_checkpoint_is_one_log_line_and_a_cold_start(
    kubelet_cgroup_tree: Tree, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / PROFILES).write_text('{"kind": "tidemark-usage-profiles", "version": 1, "node": 7')
    with caplog.at_level(logging.ERROR, logger="agent.act.statedir"):
        h = start(fresh_tree(kubelet_cgroup_tree), tmp_path)
    lines = [r.getMessage() for r in caplog.records if "usage profiles" in r.getMessage()]
    assert len(lines) == 1 and "unusable" in lines[0] and "start cold" in lines[0]
    assert not (state / PROFILES).exists() and list(state.glob(f"{PROFILES}.corrupt-*"))
    h.cores = {"u-web": 0.5}
    h.tick(12)
    plan = h.agent.cycle.last_plan
    assert plan is not None and batch_cpu(h) > 0
    # a valid JSON that is not a profile document: the same
    h.agent.shutdown()
    assert h.state is not None
    h.state.unlock()
    (state / PROFILES).write_text(json.dumps({"kind": "tidemark-usage-profiles", "version": 1, "half_life": "x"}))
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="agent.act.statedir"):
        start(h.tree, tmp_path)
    assert any("half_life: not an object" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("[" * 200_000, "recursion"),  # nested past the JSON parser's recursion limit
        (None, "ahead of this clock"),  # a reference ten years ahead: written under a wrong clock
    ],
)
def test_a_checkpoint_that_would_break_every_cycle_is_set_aside(
    kubelet_cgroup_tree: Tree, tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str | None, why: str
) -> None:
    """Before: '[' x 200000 raised RecursionError out of the start, and a reference far ahead passed the load and
    then made every decision raise OverflowError (a red /healthz, the same file again after a restart)."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    if content is None:
        history(tmp_path)  # two quiet days, then the node's hourly slots moved ten years ahead, one left empty
        doc = json.loads((state / PROFILES).read_text())
        for slot in doc["node"]["cpu"]:
            slot["reference"] = WALL + 10 * 365 * 86400.0
        doc["node"]["cpu"][5]["buckets"] = {}
        content = json.dumps(doc)
    (state / PROFILES).write_text(content)
    with caplog.at_level(logging.ERROR, logger="agent.act.statedir"):
        h = start(fresh_tree(kubelet_cgroup_tree), tmp_path)
    lines = [r.getMessage() for r in caplog.records if "usage profiles" in r.getMessage()]
    assert len(lines) == 1 and why in lines[0].lower() and "start cold" in lines[0], lines
    assert list(state.glob(f"{PROFILES}.corrupt-*"))
    h.cores = {"u-web": 0.5}
    h.tick(12)
    assert h.agent.cycle.last_plan is not None and batch_cpu(h) > 0


def test_plan_reads_the_running_agents_profiles_read_only(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from agent.cli import main
    from tidemark.clock import FakeClock

    tree = fresh_tree(kubelet_cgroup_tree)
    history(tmp_path)
    h = start(tree, tmp_path)
    busy_then_quiet(h)
    h.agent.shutdown()
    assert h.state is not None
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([h.node(), *h.cluster.pods()]))
    config = tmp_path / "agent.yaml"
    config.write_text("capacity: {policy: profile}\n")
    clock = FakeClock(wall=h.clock.wall())
    clock.hooks.append(tree.hook({"u-web": 0.2}))
    argv = ["plan", "--node-name", "n1", "--cluster", str(cluster), *tree.cli_args(), "--config", str(config),
            "-o", "json"]  # fmt: skip
    saved = (Path(h.state.path) / PROFILES).read_bytes()
    assert main([*argv, "--state-dir", h.state.path], clock=clock) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["capacity"]["policy"] == "profile" and doc["capacity"]["u_non"]["cpu"] >= 1600
    assert any("usage profiles from" in e and "pod profile" in e for e in doc["explanations"])
    assert (Path(h.state.path) / PROFILES).read_bytes() == saved
    # without the state dir: no profile, the window decides
    assert main(argv, clock=clock) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["capacity"]["u_non"]["cpu"] < 1000
    # a corrupt file is reported and left where it is
    (Path(h.state.path) / PROFILES).write_text("{")
    assert main([*argv, "--state-dir", h.state.path], clock=clock) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("unusable" in e for e in doc["explanations"]) and (Path(h.state.path) / PROFILES).read_text() == "{"
