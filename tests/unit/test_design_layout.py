"""Every module of the shipped packages has its line in docs/design.md's "Layout" (the "layout" issue).

A newcomer finds a module from the picture; a module the picture does not name is a room nobody shows them.
The Layout section lists each package in a code block of entries: an entry starts at column 0 with a path
(`agent/sense/`, `agent/config.py`) and goes on over the indented lines below it. A module is named when:
- its path from the repository root stands anywhere in the Layout section (`scheduler_ext/vcflags.py`), or
- an entry headed by one of its directories, or by a module in that directory, names its path relative to
  that directory (`cgroups.py` in `agent/sense/`'s entry, `config_memqos.py` in `agent/config.py`'s,
  `capacity/queues.py` in `scheduler_ext/plugins/`'s), or, in the entry of its own subpackage, its bare name as
  a word (`watermarks` in `agent/decide/`'s list "capacity, profile, watermarks, ..."), or
- its directory's entry says "one module per conf name" and the directory's registry.py imports it (Volcano's
  factory.go: the registry is the list).
Checked: every .py under agent/, scheduler_ext/ and tidemark/ except an `__init__.py` holding only a docstring,
imports and dunder names (`__all__`, `__version__`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the packages pyproject.toml ships ([tool.setuptools.packages.find])
PACKAGES = ("agent", "scheduler_ext", "tidemark")
PER_CONF_NAME = "one module per conf name"
_HEAD = re.compile(r"^([A-Za-z_][\w./-]*/[\w./-]*)")


def layout_section(design: str) -> str:
    """The text of design.md from "## Layout" to the next second-level heading."""
    start = design.index("\n## Layout\n")
    end = design.find("\n## ", start + 1)
    return design[start : end if end != -1 else len(design)]


def _entries(section: str) -> dict[str, str]:
    """head path -> the entry's text (its first line and the indented lines below it), over every code block."""
    entries: dict[str, str] = {}
    head = ""
    in_block = False
    for line in section.splitlines():
        if line.startswith("```"):
            in_block, head = not in_block, ""
            continue
        if not in_block:
            continue
        m = _HEAD.match(line)
        if m:
            head = m.group(1)
            entries[head] = entries.get(head, "") + "\n" + line[len(head) :]
        elif head and line.startswith(" "):
            entries[head] += "\n" + line
    return entries


def _has_logic(path: Path) -> bool:
    """More than a docstring, imports and dunder names such as `__all__` and `__version__` (an `__init__.py` that
    is a front door only is not a module of its own)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) and t.id.startswith("__") and t.id.endswith("__") for t in targets):
                continue
        return True
    return False


def _registered(directory: Path, root: Path) -> set[str]:
    """The module names `directory/registry.py` imports from its own package."""
    registry = directory / "registry.py"
    if not registry.is_file():
        return set()
    package = ".".join(directory.relative_to(root).parts)
    names: set[str] = set()
    for node in ast.walk(ast.parse(registry.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            names.update(a.name for a in node.names)
    return names


def _named(rel: str, section: str, entries: dict[str, str], root: Path) -> bool:
    if rel in section:
        return True
    parts = rel.split("/")
    stem = parts[-1].removesuffix(".py")
    for depth in range(len(parts) - 1, 0, -1):
        directory = "/".join(parts[:depth]) + "/"
        below = "/".join(parts[depth:])
        own = depth == len(parts) - 1
        for head, text in entries.items():
            if not (head == directory or (head.startswith(directory) and "/" not in head[len(directory) :])):
                continue
            if re.search(rf"(?<![\w/.]){re.escape(below)}(?!\w)", text):
                return True
            # a bare name only in a subpackage's list: `agent/`'s entry in "The repository" is prose
            listed = own and head == directory and directory.count("/") >= 2
            if listed and re.search(rf"(?<![\w/.-]){re.escape(stem)}(?![\w/.-])", text):
                return True
            if own and head == directory and PER_CONF_NAME in text and stem in _registered(root / directory, root):
                return True
    return False


def missing_modules(root: Path, design: str, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """The modules under `root`'s `packages` that design.md's Layout section does not name."""
    section = layout_section(design)
    entries = _entries(section)
    missing = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            if path.name == "__init__.py" and not _has_logic(path):
                continue
            rel = path.relative_to(root).as_posix()
            if not _named(rel, section, entries, root):
                missing.append(rel)
    return missing


def test_every_module_is_in_the_layout() -> None:
    missing = missing_modules(REPO, (REPO / "docs" / "design.md").read_text(encoding="utf-8"))
    assert not missing, "modules docs/design.md's Layout does not name (add each to its package's list):\n" + "\n".join(
        missing
    )


def test_the_check_sees_a_module_the_layout_misses(tmp_path: Path) -> None:
    # the check is live: each way of naming a module counts, and a module named no way is reported
    files = {
        "pkg/__init__.py": '"""front door"""\nfrom pkg.a import x\n__all__ = ["x"]\n__version__ = "1"\n',
        "pkg/below.py": "",
        "pkg/a.py": "x = 1\n",
        "pkg/sub/__init__.py": "x = 1\n",
        "pkg/sub/b.py": "",
        "pkg/sub/c.py": "",
        "pkg/sub/d.py": "",
        "pkg/sub/deep/e.py": "",
        "pkg/plug/registry.py": "from pkg.plug import one\n",
        "pkg/plug/one.py": "",
        "pkg/plug/two.py": "",
        "pkg/other/b.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    design = (
        "# t\n\n## Layout\n\n```\npkg/          the package (below)\n"
        "pkg/a.py      the a; pkg/plug/registry.py the registry\n"
        "pkg/sub/      b.py (the b), c, deep/e.py\npkg/plug/     one module per conf name\n```\n\n"
        "## Next\n\npkg/other/b.py pkg/sub/d.py\n"
    )
    assert missing_modules(tmp_path, design, ("pkg",)) == [
        "pkg/below.py",  # a word of the top-level entry's prose is not a listed name
        "pkg/other/b.py",  # named only outside the Layout section
        "pkg/plug/two.py",  # not in the registry
        "pkg/sub/__init__.py",  # an __init__ with logic
        "pkg/sub/d.py",
    ]
