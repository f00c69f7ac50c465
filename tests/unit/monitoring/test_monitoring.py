"""The monitoring bundle (daemonset/overlays/monitoring): alerts that fire when they should, dashboards
whose queries parse and name metrics the programs really export.

promtool (Debian's prometheus 2.42) checks and unit-tests the alert rules; the dashboards' queries are
checked by promtool as recording rules (syntax), and every metric they or the alerts name is looked up
in what the agent's collector and the scheduler's registry produce (a renamed metric fails here).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from agent.daemon.metrics import AgentCollector, Stats, Status
from scheduler_ext.metrics import SchedulerMetrics
from tests.fixtures.debian_tools import require_tool

REPO = Path(__file__).resolve().parents[3]
BUNDLE = REPO / "daemonset" / "overlays" / "monitoring"
HERE = Path(__file__).parent
# Metrics other components export (Prometheus itself, kube-state-metrics), not ours.
FOREIGN = {"up"}
# Metrics named by alerts ahead of the series existing under every configuration (documented in
# docs/monitoring.md); each must still be exported by the agent or the scheduler.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "by", "on", "or", "and", "unless", "rate", "increase", "deriv", "absent",
    "histogram_quantile", "le", "without", "group_left", "count",
}


def _rule_groups() -> list[dict[str, Any]]:
    rule = yaml.safe_load((BUNDLE / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted((BUNDLE / "dashboards").glob("*.json"))}


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for d in _dashboards().values() for panel in d["panels"] for t in panel["targets"]]


@pytest.fixture(scope="module")
def promtool() -> str:
    return require_tool("promtool", "prometheus")


def _promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_alert_rules_check(promtool: str, tmp_path: Path) -> None:
    (tmp_path / "tidemark-rules.yaml").write_text(yaml.safe_dump({"groups": _rule_groups()}))
    r = _promtool(promtool, "check", "rules", "tidemark-rules.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def _render(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def _with_annotations(tests: dict[str, Any]) -> dict[str, Any]:
    """Each expected alert's annotations, rendered from the rule (promtool compares them exactly)."""
    rules = {r["alert"]: r for g in _rule_groups() for r in g["rules"]}
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                if "exp_annotations" not in alert:
                    labels = {k: str(v) for k, v in alert["exp_labels"].items()}
                    annotations = rules[check["alertname"]]["annotations"]
                    alert["exp_annotations"] = {k: _render(v, labels) for k, v in annotations.items()}
    return tests


def test_alert_rules_fire_when_they_should(promtool: str, tmp_path: Path) -> None:
    (tmp_path / "tidemark-rules.yaml").write_text(yaml.safe_dump({"groups": _rule_groups()}))
    tests = _with_annotations(yaml.safe_load((HERE / "alerts_test.yaml").read_text()))
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(tests, width=1000))
    r = _promtool(promtool, "test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    tested = set(re.findall(r"alertname: (\w+)", (HERE / "alerts_test.yaml").read_text()))
    defined = {rule["alert"] for g in _rule_groups() for rule in g["rules"]}
    assert tested == defined, f"alerts without a unit test: {sorted(defined - tested)}"


def test_dashboard_queries_parse(promtool: str, tmp_path: Path) -> None:
    exprs = [e.replace("$node", ".*") for e in _dashboard_exprs()]
    rules = [{"record": f"dashboard:query{i}", "expr": e} for i, e in enumerate(exprs)]
    (tmp_path / "dashboards.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = _promtool(promtool, "check", "rules", "dashboards.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


class _IdleCycle:
    status = Status()


class _IdleAgent:
    cycle = _IdleCycle()
    stats = Stats()

    def info(self) -> dict[str, float]:
        return {}


def _exported() -> set[str]:
    names: set[str] = set()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(_IdleAgent()))
    for reg in (registry, SchedulerMetrics().registry):
        for family in reg.collect():
            names.add(family.name)
            names.update(s.name for s in family.samples)
    return {re.sub(r"_(bucket|sum|count|total|created)$", "", n) for n in names}


def _named(expr: str) -> set[str]:
    expr = re.sub(r"\{[^}]*\}", "", expr)          # label matchers
    expr = re.sub(r"\[[^]]*\]", "", expr)          # ranges and subqueries
    expr = re.sub(r"\bby \([^)]*\)", "", expr)     # grouping labels
    words = set(re.findall(r"[a-z_][a-z0-9_]*", expr))
    return {w for w in words if w not in PROMQL_WORDS and not re.fullmatch(r"\d.*", w)}


def test_every_metric_named_is_exported() -> None:
    exported = _exported()
    exprs = _dashboard_exprs() + [r["expr"] for g in _rule_groups() for r in g["rules"]]
    missing = {
        name for e in exprs for name in _named(e)
        if name not in FOREIGN and re.sub(r"_(bucket|sum|count|total)$", "", name) not in exported
    }
    assert not missing, f"named in dashboards/alerts but exported by neither program: {sorted(missing)}"


def test_dashboards_are_grafana_json_for_the_sidecar() -> None:
    kust = yaml.safe_load((BUNDLE / "kustomization.yaml").read_text())
    assert kust["generatorOptions"]["labels"]["grafana_dashboard"] == "1"
    files = {Path(f).name for gen in kust["configMapGenerator"] for f in gen["files"]}
    assert files == set(_dashboards())
    for name, d in _dashboards().items():
        assert d["uid"] and d["title"].startswith("Tidemark"), name
        assert all(t["expr"] for p in d["panels"] for t in p["targets"]), name
