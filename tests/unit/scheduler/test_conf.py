"""Conf parsing: Volcano's format, defaults and validation messages with paths."""

from __future__ import annotations

import pytest

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.framework.conf import ConfError, ConfProblem, SchedulerConf, parse_conf
from scheduler_ext.plugins.registry import PLUGINS

README_KEYS = (
    "enableBestNode",
    "enableHierarchy",
    "enableJobEnqueued",
    "enableJobOrder",
    "enableJobPipelined",
    "enableJobReady",
    "enableJobStarving",
    "enableNodeOrder",
    "enablePredicate",
    "enablePreemptable",
    "enablePreemptive",
    "enableQueueOrder",
    "enableReclaimable",
    "enableReservedNodes",
    "enableTargetJob",
    "enableTaskOrder",
    "enabledAllocatable",
    "enabledHyperNodeGradient",
    "enabledHyperNodeOrder",
    "enabledOverused",
    "enabledSubJobOrder",
    "enabledSubJobPipelined",
    "enabledSubJobReady",
    "enabledVictim",
)


def parse(text: str) -> tuple[SchedulerConf, list[ConfProblem]]:
    return parse_conf(text, ACTIONS, PLUGINS)


def test_defaults_true_except_hierarchy() -> None:
    conf, warnings = parse('actions: "enqueue, allocate, backfill"\ntiers:\n- plugins:\n  - name: gang\n')
    assert conf.actions == ("enqueue", "allocate", "backfill")
    gang = conf.tiers[0].plugins[0]
    assert gang.job_order and gang.job_ready and gang.preemptable and gang.victim
    assert not gang.hierarchy and not gang.cluster_order
    assert warnings == []


def test_all_volcano_option_keys_are_accepted() -> None:
    flags = "".join(f"\n    {k}: false" for k in README_KEYS)
    conf, warnings = parse(f"actions: allocate\ntiers:\n- plugins:\n  - name: drf{flags}\n")
    assert warnings == []
    drf = conf.tiers[0].plugins[0]
    assert not drf.job_order and not drf.victim and not drf.sub_job_order


def test_unknown_action_is_an_error_with_its_position() -> None:
    with pytest.raises(ConfError) as e:
        parse("actions: allocate, bogus\ntiers: []\n")
    assert any(p.path == "actions[1]" and "bogus" in p.message for p in e.value.problems)


def test_unknown_and_unsupported_plugins_warn_and_are_skipped() -> None:
    conf, warnings = parse("actions: allocate\ntiers:\n- plugins:\n  - name: nosuch\n  - name: pdb\n  - name: gang\n")
    assert [p.name for p in conf.tiers[0].plugins] == ["gang"]
    msgs = {w.path: w.message for w in warnings}
    assert "unknown plugin" in msgs["tiers[0].plugins[0].name"]
    assert "not yet supported" in msgs["tiers[0].plugins[1].name"]


def test_unknown_option_and_argument_keys_warn() -> None:
    _, warnings = parse(
        "actions: allocate\ntiers:\n- plugins:\n  - name: nodeorder\n    enableFoo: true\n"
        "    arguments: {nosuch.weight: 3}\n"
    )
    paths = {w.path for w in warnings}
    assert "tiers[0].plugins[0].enableFoo" in paths
    assert "tiers[0].plugins[0].arguments.nosuch.weight" in paths


def test_bad_values_are_errors_naming_their_paths_all_at_once() -> None:
    with pytest.raises(ConfError) as e:
        parse(
            "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enableJobOrder: maybe\n"
            "- plugins:\n  - name: nodeorder\n    arguments: {nodeaffinity.weight: high}\n"
            "  - name: overcommit\n    arguments: {overcommit-factor: [1]}\n"
        )
    paths = {p.path for p in e.value.problems if p.severity == "error"}
    assert paths == {
        "tiers[0].plugins[0].enableJobOrder",
        "tiers[1].plugins[0].arguments.nodeaffinity.weight",
        "tiers[1].plugins[1].arguments.overcommit-factor",
    }


def test_drf_hierarchy_with_proportion_conflicts() -> None:
    with pytest.raises(ConfError, match="conflicts"):
        parse("actions: allocate\ntiers:\n- plugins:\n  - name: drf\n    enableHierarchy: true\n  - name: proportion\n")


def test_metrics_and_configurations_accepted() -> None:
    conf, warnings = parse(
        "actions: allocate\ntiers: []\nmetrics: {address: x}\n"
        "configurations:\n- name: allocate\n  arguments: {predicateErrorCacheEnable: false}\n"
    )
    assert warnings == []
    assert conf.action_arguments("allocate").get_bool("predicateErrorCacheEnable", True) is False


def test_prefix_arguments_match() -> None:
    conf, warnings = parse(
        "actions: allocate\ntiers:\n- plugins:\n  - name: binpack\n    arguments:\n"
        "      binpack.resources: nvidia.com/gpu\n      binpack.resources.nvidia.com/gpu: 5\n"
    )
    assert warnings == []
    assert conf.tiers[0].plugins[0].arguments["binpack.resources.nvidia.com/gpu"] == 5
