"""The agent daemon under bad input and failing cycles (fake cgroup/proc trees, fake clock, the real Agent):

- a 400-digit `volcano.sh/oversubscription-cpu` does not make every decision raise;
- liveness: N failing cycles in a row turn /healthz red, saying why, and one good cycle clears it;
- without /proc the capacity fails closed (B and X publish 0, with the reason).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cgroups import KubeletCgroupTree

from .daemon_helpers import Harness, make_harness, node_obj, pod_obj

Tree = Callable[..., KubeletCgroupTree]
X_CPU = "volcano.sh/oversubscription-cpu"
LABELS = {"volcano.sh/colocation": "true", "volcano.sh/oversubscription": "true"}


def _harness(kubelet_cgroup_tree: Tree, tmp_path: Path, **kw: Any) -> Harness:
    tree = kubelet_cgroup_tree("v1", "cgroupfs")
    return make_harness(tree, tmp_path, **kw)


def test_a_400_digit_annotation_does_not_stop_decisions(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    node = node_obj(labels=LABELS, annotations={X_CPU: "9" * 400})
    h = _harness(kubelet_cgroup_tree, tmp_path, node=node)
    h.tick(12, seconds=1.0)
    assert h.agent.stats.decision_failures == 0 and h.agent.failing == 0
    assert h.agent.healthy()[0]
    assert h.annotations()[X_CPU].isdigit() and len(h.annotations()[X_CPU]) < 20  # replaced by the real X


def test_failing_cycles_turn_healthz_red_with_why(
    kubelet_cgroup_tree: Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = _harness(kubelet_cgroup_tree, tmp_path)
    good_step = h.agent.step

    def broken(*, once: bool = False) -> None:
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(h.agent, "step", broken)
    n = h.agent.options.failing_cycles
    for _ in range(n - 1):
        assert not h.agent.run_cycle()
    assert h.agent.healthy()[0]  # a few failures are retried quietly
    assert not h.agent.run_cycle()
    ok, why = h.agent.healthy()
    assert not ok and f"the last {n} cycles failed" in why and "OverflowError: int too large" in why
    monkeypatch.setattr(h.agent, "step", good_step)
    assert h.agent.run_cycle() and h.agent.healthy()[0]


def test_capacity_fails_closed_without_proc(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = _harness(
        kubelet_cgroup_tree,
        tmp_path,
        node=node_obj(labels=LABELS),
        pods=[pod_obj("on-1", "web", requests={"cpu": "1"}, qos_class="Burstable")],
    )
    h.tick(12, seconds=1.0)
    assert int(h.annotations()[X_CPU]) >= 0
    published = h.node()["status"]["capacity"]["kubernetes.io/batch-cpu"]
    assert published != "0"  # with /proc: a real budget
    for name in ("stat", "meminfo"):
        (Path(h.tree.proc_root) / name).unlink()
    h.tick(70, seconds=1.0)  # the window forgets the last /proc readings; the 60 s refresh publishes
    assert h.annotations()[X_CPU] == "0"
    assert h.node()["status"]["capacity"]["kubernetes.io/batch-cpu"] == "0"
    plan = h.agent.cycle.last_plan
    assert plan is not None and any("U_non is unknown" in e for e in plan.explanations)
