"""The import contracts (docs/design.md, "Import contracts") hold, and would catch a breach.

`make lint` runs lint-imports over the real tree; here the same contracts also run over a copy of
the tree with one forbidden import planted, to prove each contract is live (a contract that
cannot fail is a defect).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("tidemark", "agent", "scheduler_ext", "localcluster")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (.[test] extra)")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")],
        cwd=root, capture_output=True, text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "COLUMNS": "400"},
    )


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_real_tree_keeps_every_contract() -> None:
    r = _lint(REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


INDEPENDENT = "agent and scheduler_ext never import each other"
PURE = "decision modules import no kubernetes"


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("scheduler_ext/plugins/gang.py", "import agent.config", INDEPENDENT),
        ("agent/decide/capacity.py", "import scheduler_ext.api.resource", INDEPENDENT),
        ("tidemark/clock.py", "import agent.model", "tidemark imports neither program"),
        ("agent/cli.py", "import localcluster.cli", "no shipped package imports localcluster"),
        ("agent/decide/capacity.py", "import kubernetes.client", PURE),
        ("scheduler_ext/plugins/gang.py", "import pyroute2", PURE),
        ("scheduler_ext/actions/allocate.py", "import scheduler_ext.cache.executor", PURE),
        ("agent/decide/plan.py", "import agent.act.cgroup_writer", PURE),
        ("scheduler_ext/framework/session.py", "import scheduler_ext.plugins.gang",
         "the scheduler framework imports no plugin"),
    ],
)
def test_planted_import_breaks_its_contract(tree_copy: Path, module: str, planted: str, contract: str) -> None:
    target = tree_copy / module
    original = target.read_text()
    target.write_text(original + f"\n{planted}  # planted by the test\n")
    try:
        r = _lint(tree_copy)
    finally:
        target.write_text(original)
    assert r.returncode != 0, r.stdout
    text = " ".join(r.stdout.split())  # the report wraps long contract names
    verdict = re.search(re.escape(contract) + r".*? (KEPT|BROKEN)\b", text)
    assert verdict is not None and verdict.group(1) == "BROKEN", r.stdout
