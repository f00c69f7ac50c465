"""`capacity.policy` and `capacity.profile.*` as configuration: each key validated (a bad value names its path and
keeps the default) and hot-reloaded by the running daemon (the next capacity decision uses the new value; a
rejected file leaves the last good one in force). Issue #23: "config keys (documented, validated,
hot-reloadable)"; the documentation is checked for every key by test_config.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.config import DEFAULT_CONFIG, load_config
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.test_profile_daemon import CONFIG, batch_cpu, busy_then_quiet, fresh_tree, history, start

Tree = Callable[..., KubeletCgroupTree]


def test_profile_keys_are_parsed() -> None:
    config, problems = load_config(
        {
            "capacity": {
                "policy": "window",
                "profile": {
                    "percentile": {"cpu": 0.99, "memory": "0.9"},
                    "margin": 1.2,
                    "half_life": {"cpu": "6h", "memory": "48h"},
                    "horizon": "2h",
                    "cold_start": "24h",
                    "checkpoint": "1m",
                },
            }
        }
    )
    assert problems == ()
    p = config.profile
    assert config.capacity.policy == "window"
    assert (p.percentile_cpu, p.percentile_memory, p.margin) == (0.99, 0.9, 1.2)
    assert (p.half_life_cpu, p.half_life_memory) == (6 * 3600, 2 * 86400)
    assert (p.horizon, p.cold_start, p.checkpoint) == (7200, 86400, 60)


def test_bad_profile_keys_name_their_path_and_keep_the_defaults() -> None:
    config, problems = load_config(
        {
            "capacity": {
                "policy": "median",
                "profile": {
                    "percentile": {"cpu": 1.5, "memory": 0},
                    "margin": 0.9,
                    "half_life": {"cpu": "30s", "memory": "800h"},
                    "horizon": "25h",
                    "cold_start": "-1s",
                    "checkpoint": "1s",
                },
            }
        }
    )
    paths = {p.path for p in problems}
    assert paths == {
        "capacity.policy",
        "capacity.profile.percentile.cpu",
        "capacity.profile.percentile.memory",
        "capacity.profile.margin",
        "capacity.profile.half_life.cpu",
        "capacity.profile.half_life.memory",
        "capacity.profile.horizon",
        "capacity.profile.cold_start",
        "capacity.profile.checkpoint",
    }
    assert all(p.severity == "error" for p in problems)
    assert config == DEFAULT_CONFIG


def test_policy_and_profile_keys_are_hot_reloaded(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    history(tmp_path)
    h = start(fresh_tree(kubelet_cgroup_tree), tmp_path)
    busy_then_quiet(h)
    plan = h.agent.cycle.last_plan
    assert plan is not None and plan.capacity.policy == "profile" and plan.capacity.u_non.cpu >= 1700
    profile_b = batch_cpu(h)
    # capacity.policy: window, written to the running agent's file: the next decision subtracts the window alone
    (tmp_path / "agent.yaml").write_text(CONFIG.replace("policy: profile", "policy: window"))
    h.tick(2)
    assert h.agent.keeper.config.capacity.policy == "window" and h.agent.config_source.ok
    plan = h.agent.cycle.last_plan
    assert plan is not None and plan.capacity.policy == "window" and plan.capacity.u_non.cpu < 400
    # computed at once; published on the next resync (an increase waits capacity.publish.min_interval)
    assert plan.capacity.published_batch.cpu >= profile_b + 1000
    # a bad value is rejected as a whole: the window stays in force
    (tmp_path / "agent.yaml").write_text(CONFIG.replace("checkpoint: 60s", "checkpoint: 60s, margin: 9"))
    h.tick(2)
    assert not h.agent.config_source.ok and "ConfigRejected" in h.events.reasons()
    assert h.agent.keeper.config.capacity.policy == "window"
    # back to profile with a larger margin: the profile's figure grows with it at once
    (tmp_path / "agent.yaml").write_text(CONFIG.replace("checkpoint: 60s", "checkpoint: 60s, margin: 1.5"))
    h.tick(2)
    assert h.agent.config_source.ok and h.agent.keeper.config.profile.margin == 1.5
    plan = h.agent.cycle.last_plan
    assert plan is not None and plan.capacity.policy == "profile"
    assert plan.capacity.u_non.cpu >= 2500  # about 1.5 x 2 cores - 0.4 headroom, against about 1.8 at x 1.1
    assert any("x 1.5 of" in e for e in plan.explanations)
