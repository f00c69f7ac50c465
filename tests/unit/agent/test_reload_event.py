"""`ConfigApplied` on the Node: every new configuration generation but the one of the Node first seen.

(It used to count on the Node first seen always making generation 2, so the first label change that moved
the configuration on a node whose labels match no override at start-up went unannounced.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.daemon_helpers import Harness, make_harness, node_obj

Tree = Callable[..., KubeletCgroupTree]
CONFIG = """
qos:
  reconcile: 5s
overrides:
- name: slow
  nodeSelector: {matchLabels: {example.com/slow: "true"}}
  config: {qos: {reconcile: 120s}}
"""


def relabel(h: Harness, labels: dict[str, str], rv: int) -> None:
    node = copy.deepcopy(h.node())
    node["metadata"]["labels"].update(labels)
    node["metadata"]["resourceVersion"] = str(rv)
    h.cluster.set_node(node)


def test_the_first_label_change_that_moves_the_configuration_is_announced(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    h = make_harness(kubelet_cgroup_tree(), tmp_path, config_text=CONFIG)
    h.tick(2)
    assert h.agent.keeper.config.qos.reconcile == 5.0 and "ConfigApplied" not in h.events.reasons()
    relabel(h, {"example.com/slow": "true"}, 50)
    h.tick(1)
    assert h.agent.keeper.config.qos.reconcile == 120.0 and h.agent.keeper.applied_overrides == ("slow",)
    assert h.events.reasons().count("ConfigApplied") == 1
    relabel(h, {"example.com/other": "x"}, 51)  # labels moved, the configuration did not: nothing to announce
    h.tick(1)
    assert h.events.reasons().count("ConfigApplied") == 1


def test_the_node_first_seen_with_a_matching_override_is_not_announced(
    kubelet_cgroup_tree: Tree, tmp_path: Path
) -> None:
    labels = {"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "true", "example.com/slow": "true"}
    h = make_harness(kubelet_cgroup_tree(), tmp_path, config_text=CONFIG, node=node_obj(labels=labels))
    h.tick(2)
    assert h.agent.keeper.config.qos.reconcile == 120.0 and "ConfigApplied" not in h.events.reasons()
