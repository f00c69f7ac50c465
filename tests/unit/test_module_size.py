"""No module of the shipped packages or of localcluster/ is longer than MAX_LINES (the "layout" issue).

A module that long holds several jobs; each job is a module with its own name and docstring (the way
tidemark/apis.py became apis.py, quantities.py and pods.py). The length of a module is its number of lines.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the packages pyproject.toml ships ([tool.setuptools.packages.find]), and the local cluster of `make run`
PACKAGES = ("agent", "scheduler_ext", "tidemark", "localcluster")
MAX_LINES = 700


def _long_modules(root: Path, base: Path) -> list[str]:
    """`path (N lines)` (path relative to `base`) of every module under `root` over MAX_LINES."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(base)} ({lines} lines)")
    return found


def test_no_module_is_longer_than_the_limit() -> None:
    long = [m for pkg in PACKAGES for m in _long_modules(REPO / pkg, REPO)]
    assert not long, f"modules over {MAX_LINES} lines (split them into cohesive modules):\n" + "\n".join(long)


def test_the_check_sees_a_long_module(tmp_path: Path) -> None:
    # the check is live: a module one line over the limit is reported, one at the limit is not
    (tmp_path / "at_limit.py").write_text("x = 0\n" * MAX_LINES)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "over.py").write_text("x = 0\n" * (MAX_LINES + 1))
    assert _long_modules(tmp_path, tmp_path) == [f"sub/over.py ({MAX_LINES + 1} lines)"]
