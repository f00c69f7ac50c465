"""Decision modules never import kubernetes, pyroute2, executors or the sensing layer (house style 12)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DECISION_MODULES = [
    "agent.model",
    "agent.config",
    "agent.decide",
    "agent.decide.ops",
    "agent.decide.usage",
    "agent.decide.capacity",
    "agent.decide.watermarks",
    "agent.decide.eviction",
    "agent.decide.admission",
    "agent.decide.qos",
    "agent.decide.plan",
]
FORBIDDEN = (
    "kubernetes",
    "pyroute2",
    "agent.executor",
    "agent.act",
    "agent.daemon",
    "agent.sensing",
    "agent.sampler",
    "agent.cgroups.fs",
    "agent.procfs",
    "agent.kube",
    "yaml",
)


@pytest.mark.parametrize("module", DECISION_MODULES)
def test_decision_module_imports(module: str) -> None:
    script = (
        f"import sys, {module}\n"
        f"bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"{module} pulls in {r.stdout.strip()}"
