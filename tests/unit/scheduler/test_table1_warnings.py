"""The seed oversubscription guide's configuration constraints, as warnings (its Table 1)."""

from __future__ import annotations

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.framework.conf import cluster_warnings, parse_conf
from scheduler_ext.plugins.registry import PLUGINS
from scheduler_ext.simulate import simulate

from .helpers import conf, node

WITH_BOTH = """
actions: "allocate, backfill"
tiers:
- plugins:
  - name: gang
  - name: oversubscription
- plugins:
  - name: predicates
  - name: overcommit
"""

WITHOUT_OVERSUB = """
actions: "allocate, backfill"
tiers:
- plugins:
  - name: gang
- plugins:
  - name: predicates
"""


def test_overcommit_with_oversubscription_is_a_warning_naming_overcommit() -> None:
    _, problems = parse_conf(WITH_BOTH, ACTIONS, PLUGINS)
    warns = [p for p in problems if p.severity == "warning"]
    assert len(warns) == 1
    assert warns[0].path == "tiers[1].plugins[1].name"
    assert "overcommit and oversubscription are both enabled" in warns[0].message
    # either alone: no warning
    for drop in ("  - name: overcommit\n", "  - name: oversubscription\n"):
        text = WITH_BOTH.replace(drop, "")
        assert parse_conf(text, ACTIONS, PLUGINS)[1] == []


def test_labelled_nodes_without_the_plugin() -> None:
    labelled = [node(f"n{i}", labels={"volcano.sh/oversubscription": "true"}) for i in range(7)]
    other = [node("plain"), node("off", labels={"volcano.sh/oversubscription": "false"})]
    got = cluster_warnings(conf(WITHOUT_OVERSUB), [*labelled, *other])
    assert len(got) == 1
    assert got[0].startswith("7 node(s) labelled volcano.sh/oversubscription=true (n0, n1, n2, n3, n4, ...)")
    assert cluster_warnings(conf(WITHOUT_OVERSUB), other) == []
    assert cluster_warnings(conf(WITH_BOTH.replace("  - name: overcommit\n", "")), labelled) == []


def test_simulate_reports_the_cluster_warning() -> None:
    objs = [node("n1", labels={"volcano.sh/oversubscription": "true"})]
    res = simulate(objs, conf(WITHOUT_OVERSUB), ACTIONS, PLUGINS, now=0.0)
    assert any("no oversubscription plugin" in w for w in res.warnings)
