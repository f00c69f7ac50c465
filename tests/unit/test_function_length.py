"""No function in the shipped packages, localcluster/ or benchmarks/ is longer than MAX_LINES (the "layout" issue).

A function that long mixes several steps; each step is a helper with its own name and docstring. The
length of a function is `end_lineno - lineno + 1` of its `def` (decorators excluded; a nested
function counts in its enclosing function and on its own).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the packages pyproject.toml ships ([tool.setuptools.packages.find]), the local cluster of `make run` and the
#: benchmarks: code a newcomer reads as much as the daemons'
PACKAGES = ("agent", "scheduler_ext", "tidemark", "localcluster", "benchmarks")
MAX_LINES = 120


def _long_functions(root: Path, base: Path) -> list[str]:
    """`path:line name (N lines)` (path relative to `base`) of every function under `root` over MAX_LINES."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    found.append(f"{path.relative_to(base)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    long = [f for pkg in PACKAGES for f in _long_functions(REPO / pkg, REPO)]
    assert not long, f"functions over {MAX_LINES} lines (split them into named helpers):\n" + "\n".join(long)


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    # the check is live: a function one line over the limit is reported, one at the limit is not
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    (tmp_path / "mod.py").write_text(f"def at_limit():\n{body}\n\n\ndef over():\n{body}\n    return x0\n")
    assert _long_functions(tmp_path, tmp_path) == [f"mod.py:{MAX_LINES + 3} over ({MAX_LINES + 1} lines)"]
