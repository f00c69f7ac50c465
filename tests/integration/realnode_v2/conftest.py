"""The pods the systemd actions and the uninstall share (test_v2node_systemd.py, then test_v2node_unit.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster.v2node import V2Node
from tests.fixtures.realnode import namespace_on
from tests.integration.realnode_v2.common import KnobPods, start_pods


@pytest.fixture(scope="session")
def knob_pods(v2_node: V2Node) -> Iterator[KnobPods]:
    """One pair of pods for the three systemd actions (each keeps the pods in their containers, which it asserts)
    and then the uninstall and the systemd unit (the last in the lane): a pod start under TCG is about a minute
    (the first systemd test's set-up, 68 s in the CI run of 2026-12-02), and the lane is the suite's longest."""
    with namespace_on(v2_node) as ns:
        start_pods(ns)
        yield KnobPods(ns)
