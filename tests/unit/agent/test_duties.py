"""The daemon's duty table (agent/daemon/cycle.py, agent/daemon/timing.py): its rows and what one more row takes."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

from agent.daemon.cycle import Cycle
from agent.daemon.timing import Duty
from tests.fixtures.cgroups import KubeletCgroupTree
from tests.unit.agent.daemon_helpers import make_harness, node_obj, pod_obj

Tree = Callable[..., KubeletCgroupTree]


def test_every_row_has_a_name_a_reason_and_a_way_to_be_due(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    h = make_harness(kubelet_cgroup_tree("v2", "systemd"), tmp_path, node=node_obj(), pods=[])
    names = [d.name for d in h.agent.cycle.duties]
    assert len(set(names)) == len(names)
    # the order is the contract: a later duty sees what an earlier one did in the same step
    assert names.index("cluster") < names.index("sample") < names.index("qos") < names.index("decide")
    for d in h.agent.cycle.duties:
        assert d.reason and (d.every is not None or d.when is not None), d.name


def test_a_new_periodic_duty_is_one_row(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    """A per-second duty added as one row runs on its own drift-free timer, behind its gate, in its place."""
    h = make_harness(kubelet_cgroup_tree("v2", "systemd"), tmp_path, node=node_obj(), pods=[pod_obj("u1", "web")])
    ran: list[float] = []

    class WithControl(Cycle):
        def _table(self) -> tuple[Duty, ...]:
            row = Duty("control", "a test's per-second duty", ran.append,
                       every=lambda: 1.0, gate=self._synced)  # fmt: skip
            rows = super()._table()
            at = [d.name for d in rows].index("decide")
            return (*rows[:at], row, *rows[at:])

    old = h.agent.cycle
    params = inspect.signature(Cycle.__init__).parameters
    h.agent.cycle = WithControl(**{name: getattr(old, name) for name in params if name != "self"})
    t0 = h.clock.monotonic()  # the timer starts due at construction, then keeps a one-second grid
    for _ in range(5):
        h.clock.sleep(0.5)
        h.agent.step()
    assert [t - t0 for t in ran] == [0.5, 1.0, 2.0]  # steps every 0.5 s: the row runs on its own timer
    assert [d.name for d in h.agent.cycle.duties][-2:] == ["control", "decide"]
