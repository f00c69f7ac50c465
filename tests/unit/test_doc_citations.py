"""Every repository path, dotted module and doc section that a doc, docstring or comment cites exists.

Scanned: the shipped packages, tests/, benchmarks/, hack/, docs/, daemonset/, systemd/, examples/, .ci/
and the top-level README.md, pyproject.toml, Makefile and Containerfile: every text file among them
(CHANGELOG.md is history: it names paths as they were). What counts as a citation:

- a repository path: a top-level directory name followed by `/` (`agent/sense/knobs.py`, `docs/agent.md`,
  `tests/unit/`), not inside a longer path (`/host/sys/fs/cgroup/...`, `~/.cache/tidemark/` are runtime
  paths and do not match); it must exist relative to the repository root or to the citing file (a README
  in a subdirectory names its own files); a pattern (`tests/integration/realnode_*`) must match something;
- an upper-case Markdown name (`README.md`, `CHANGELOG.md`): at the root or beside the citing file, so a
  bare name of a file the repository does not have (the old top-level design file: the design is
  docs/design.md) fails;
- a relative link in Markdown, and in prose a `../` path into a top-level directory or into `shared/`
  (the seed material beside the repository, not part of it): inside the repository and existing;
- a dotted module (`agent.sense.knobs`, `scheduler_ext.framework.cycle.run_session`): the longest prefix
  must be a module or package here, and what follows must be defined in it (a class's members are looked
  up in the class). In Python files only comments and docstrings are read for these: code is checked by
  the interpreter, and an attribute of a variable named like a package is code, not a citation;
- a section: `docs/<page>.md, "Title"` must name a heading of that page (numbering and backquotes
  ignored) or a bold run-in heading (`**Title.**`).

Runtime strings that have the shape of a repository path are handled by name, below, each with its reason.
The failure message lists file:line, the citation and what is wrong with it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: what is scanned (directories recursively)
SCANNED = (
    "agent", "scheduler_ext", "tidemark", "localcluster", "tests", "benchmarks", "hack", "docs", "daemonset",
    "systemd", "examples", ".ci", "README.md", "pyproject.toml", "Makefile", "Containerfile",
)
TEXT_SUFFIXES = frozenset({".py", ".md", ".toml", ".sh", ".yaml", ".yml", ".conf", ".service", ".env", ".go", ".txt"})
TEXT_NAMES = frozenset({"Makefile", "Containerfile", "run"})

#: the repository's top-level directories: a path starting with one of them is a repository path
#: (build/, dist/ and *.egg-info are ignored build output, .venv the environment)
TOP_DIRS = tuple(sorted(
    p.name for p in ROOT.iterdir()
    if p.is_dir() and (not p.name.startswith(".") or p.name == ".ci")
    and p.name not in {"build", "dist"} and not p.name.endswith(".egg-info")
))
#: the importable top-level packages (dotted citations start with one of them)
PACKAGES = tuple(d for d in TOP_DIRS if (ROOT / d / "__init__.py").is_file())

_NOT_BEFORE = r"(?<![\w.~$/@-])"  # a citation does not continue a longer word, path or domain
PATH_RE = re.compile(_NOT_BEFORE + "(?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/[\w./-]*")
UPPER_MD_RE = re.compile(_NOT_BEFORE + r"[A-Z][A-Z0-9_-]*\.md\b")
#: `../` then a top-level directory (a page citing a sibling tree), or `shared/`: the seed material that
#: lives beside the repository, which a citation from inside it must not lean on
PARENT_RE = re.compile(
    _NOT_BEFORE + r"(?:\.\./)+(?:" + "|".join(map(re.escape, (*TOP_DIRS, "shared"))) + r")/[\w./-]*"
)
MODULE_RE = re.compile(_NOT_BEFORE + "(?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+(?![\w/-])")
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
SECTION_RE = re.compile(r"(docs/[\w.-]+\.md),? \(?\"([^\"]+)\"")
#: a dotted token ending in one of these is a file name (`agent.md`, `agent.yaml`), not a module
FILE_SUFFIX_WORDS = frozenset({"md", "py", "yaml", "yml", "json", "sh", "txt", "toml", "conf", "log", "png", "env"})
#: a path right after one of these options is a file the command is told to write: it need not exist yet
OUTPUT_OPTION_RE = re.compile(r"--(?:json|out|output|junitxml)[ =]$")

#: Runtime strings that have the shape of a repository path, by name:
RUNTIME_NOT_PATHS = {
    # the image's repository name (`tidemark/tidemark:<version>` in the manifests and hack/image.sh)
    "tidemark/tidemark": "the container image's name",
    # prose, not a path: what a slim image leaves out (docs, man pages, locales)
    "docs/man/locales": "three words",
}
#: kubectl's TYPE/NAME for the objects the install creates (`kubectl rollout status daemonset/tidemark-agent`)
KUBECTL_OBJECT_RE = re.compile(r"daemonset/tidemark-[\w-]*$")


@dataclass(frozen=True)
class Citation:
    file: str
    line: int
    kind: str  # path | markdown | link | parent | module | section
    text: str
    after: str = ""  # the character right after the citation ("" at the end of the text)
    before: str = ""  # the text before it on its line


def scanned_files() -> Iterator[Path]:
    for name in SCANNED:
        top = ROOT / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in candidates:
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
                yield path


TRIPLE_QUOTED_RE = re.compile(r'"""(?:.|\n)*?"""|\'\'\'(?:.|\n)*?\'\'\'')


def _in_comment(before: str) -> bool:
    """Whether a `#` outside quotes starts a comment in `before` (the line up to a match)."""
    quote = ""
    for ch in before:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return True
    return False


def _prose_matches(rel: str, text: str, pattern: re.Pattern[str]) -> Iterator[tuple[int, str, re.Match[str]]]:
    """(line, line text, match) of `pattern` where a file speaks in words: a Python file's comments and
    triple-quoted strings (docstrings), a Markdown page outside its fenced code blocks. A regex pass,
    not the tokenizer: fast, and a file someone is halfway through editing does not stop the scan."""
    lines = text.splitlines(keepends=True)
    if rel.endswith(".py"):
        spans = [(m.start(), m.end()) for m in TRIPLE_QUOTED_RE.finditer(text)]
        offset = 0
        for no, line in enumerate(lines, 1):
            for m in pattern.finditer(line):
                if any(a <= offset + m.start() < b for a, b in spans) or _in_comment(line[:m.start()]):
                    yield no, line, m
            offset += len(line)
        return
    fenced = False
    for no, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            for m in pattern.finditer(line):
                yield no, line, m


def citations_in(rel: str, text: str) -> Iterator[Citation]:
    """Every citation in one file's text (`rel` decides how it is read: Python, Markdown or other)."""
    lines = text.splitlines()
    for no, line in enumerate(lines, 1):
        for m in PATH_RE.finditer(line):
            yield Citation(rel, no, "path", m.group(0), line[m.end():m.end() + 1], line[:m.start()])
        for m in UPPER_MD_RE.finditer(line):
            yield Citation(rel, no, "markdown", m.group(0))
        for m in SECTION_RE.finditer(line):
            yield Citation(rel, no, "section", f"{m.group(1)}\0{m.group(2)}")
        if rel.endswith(".md"):
            for m in LINK_RE.finditer(line):
                yield Citation(rel, no, "link", m.group(1))
    # `../` paths in code and code blocks are runtime paths (path-traversal tests, a user's kustomization
    # beside a checkout of this repository): only prose cites files that way
    if rel.endswith((".py", ".md")):
        for no, line, m in _prose_matches(rel, text, PARENT_RE):
            yield Citation(rel, no, "parent", m.group(0), line[m.end():m.end() + 1])
    # a dotted name in Python code is code (the interpreter checks it), not a citation
    modules = _prose_matches(rel, text, MODULE_RE) if rel.endswith(".py") else (
        (no, line, m) for no, line in enumerate(lines, 1) for m in MODULE_RE.finditer(line)
    )
    for no, line, m in modules:
        if m.group(0).rsplit(".", 1)[1] not in FILE_SUFFIX_WORDS:
            yield Citation(rel, no, "module", m.group(0), line[m.end():m.end() + 1])


def _inside(path: Path) -> bool:
    resolved = path.resolve()
    return resolved == ROOT or ROOT in resolved.parents


def _path_exists(rel: str, target: str) -> bool:
    """Whether `target` names something in the repository, from its root or from the citing file's directory."""
    return any(p.exists() and _inside(p) for p in (ROOT / target, (ROOT / rel).parent / target))


def _pattern_matches(rel: str, prefix: str) -> bool:
    return any(ROOT.glob(prefix + "*")) or any((ROOT / rel).parent.glob(prefix + "*"))


@cache
def _module_names(path: Path) -> dict[str, ast.AST | str | None]:
    """Top-level names a module defines: a class as its node (to look its members up), a name imported
    from another module as that module's dotted name, anything else as None."""
    names: dict[str, ast.AST | str | None] = {}
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:  # someone is halfway through editing it: nothing can be said
        return {"*": None}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[stmt.name] = None
        elif isinstance(stmt, ast.ClassDef):
            names[stmt.name] = stmt
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                names[alias.asname or alias.name] = stmt.module
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
        else:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names[node.id] = None
    return names


def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _has_member(path: Path, cls: ast.ClassDef, name: str, depth: int = 0) -> bool:
    """Whether a class, or a base class found in this repository, defines `name` (self.x included)."""
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            return True
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr == name:
            return True
    for base in cls.bases:
        if not isinstance(base, ast.Name) or depth > 5:
            return True  # a base this check cannot follow: give it the benefit of the doubt
        origin = _module_names(path).get(base.id)
        if isinstance(origin, ast.ClassDef):
            if _has_member(path, origin, name, depth + 1):
                return True
        elif isinstance(origin, str):
            other = _module_file(origin)
            if other is None:
                return True  # a class from outside the repository (a library's)
            found = _module_names(other).get(base.id)
            if not isinstance(found, ast.ClassDef) or _has_member(other, found, name, depth + 1):
                return True
    return False


def _module_problem(dotted: str) -> str | None:
    """None when `dotted` is a module or package, optionally followed by what it defines."""
    parts = dotted.split(".")
    path = ROOT / parts[0]
    i = 1
    while i < len(parts):
        nxt = path / parts[i]
        if (nxt / "__init__.py").is_file() or (nxt.is_dir() and any(nxt.glob("*.py"))):
            path = nxt
        elif nxt.with_suffix(".py").is_file():
            path = nxt.with_suffix(".py")
            i += 1
            break
        else:
            break
        i += 1
    rest = parts[i:]
    if not rest:
        return None
    source = path / "__init__.py" if path.is_dir() else path
    if not source.is_file():
        return f"no module {'.'.join(parts[:i + 1])}"
    names = _module_names(source)
    if "*" in names:
        return None
    if rest[0] not in names:
        return f"{'.'.join(parts[:i])} has no module or name {rest[0]!r}"
    cls = names[rest[0]]
    if len(rest) > 1 and isinstance(cls, ast.ClassDef) and not _has_member(source, cls, rest[1]):
        return f"{'.'.join(parts[:i + 1])} has no member {rest[1]!r}"
    return None


@cache
def _headings(page: str) -> frozenset[str]:
    text = (ROOT / page).read_text()
    titles = {re.sub(r"^\d+[a-z]?\.\s*", "", m.group(1)).replace("`", "").strip()
              for m in re.finditer(r"^#+\s+(.+)$", text, re.M)}
    titles |= {m.group(1).strip() for m in re.finditer(r"\*\*([^*]+?)\.?\*\*", text)}
    return frozenset(titles)


def problem(c: Citation) -> str | None:
    """Why a citation points at nothing (None: it resolves, or it is not a repository citation)."""
    if c.kind == "path":
        target = c.text.rstrip(".,-")
        if target in RUNTIME_NOT_PATHS or KUBECTL_OBJECT_RE.match(c.text) or OUTPUT_OPTION_RE.search(c.before):
            return None
        if target.startswith("benchmarks/results/") and "." in target.rsplit("/", 1)[-1]:
            return None  # a benchmark's output file: written by its run (make bench*), absent until then
        if c.after and c.after in "*<{$[%":  # a pattern or a template: its fixed prefix must match something
            return None if _pattern_matches(c.file, target) else "nothing matches this pattern"
        return None if _path_exists(c.file, target) else "no such path"
    if c.kind == "link":  # Markdown resolves a link against the page's own directory
        if re.match(r"^[a-z]+:", c.text) or c.text.startswith("#"):
            return None  # a URL, or an anchor on the same page
        linked = (ROOT / c.file).parent / c.text.split("#", 1)[0]
        return None if linked.exists() and _inside(linked) else "no such path in the repository"
    if c.kind in ("markdown", "parent"):
        target = c.text.rstrip(".,")
        if c.after and c.after in "*<{$":
            return None if _pattern_matches(c.file, target) else "nothing matches this pattern"
        return None if _path_exists(c.file, target) else "no such path in the repository"
    if c.kind == "module":
        return _module_problem(c.text)
    if c.kind == "section":
        page, title = c.text.split("\0")
        if not (ROOT / page).is_file():
            return "no such page"
        title = title.replace("`", "")
        # the title, or the start of a longer one ("Benchmark" for "Benchmark: one session at ...")
        if any(h == title or (h.startswith(title) and not h[len(title)].isalnum()) for h in _headings(page)):
            return None
        return f"{page} has no section {title!r}"
    raise AssertionError(c.kind)


def broken_citations() -> list[str]:
    out = []
    for path in scanned_files():
        rel = path.relative_to(ROOT).as_posix()
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for c in citations_in(rel, text):
            why = problem(c)
            if why is not None:
                out.append(f"{c.file}:{c.line}: {c.text.replace(chr(0), ', ')!r}: {why}")
    return out


def test_every_cited_path_module_and_section_exists() -> None:
    broken = broken_citations()
    assert not broken, "citations of things that do not exist:\n" + "\n".join(broken)


# The checker itself: each kind of bad citation is caught, and the runtime look-alikes are not. The bad
# examples are spelled apart (string concatenation) so that this file does not cite them itself.
_DESIGN = "DESIGN" + ".md"
_PAGE = "docs/" + "design.md"
_Q = chr(34)


@pytest.mark.parametrize(("rel", "text"), [
    ("agent/cli.py", f'"""Exit codes ({_DESIGN}, {_Q}Agent command line{_Q})."""\n'),
    ("docs/agent.md", "the sensor is `agent/" + "sensing.py`\n"),
    ("docs/agent.md", "see tests/unit/agent/" + "test_import_contract.py\n"),
    ("docs/agent.md", "`scheduler_ext/" + "simulate.run_session`\n"),
    ("agent/cli.py", "# the pure knob table is agent." + "cgroups.knobs\n"),
    ("agent/cli.py", '"""`scheduler_ext.framework.cycle.' + 'no_such_function` runs a session."""\n'),
    ("agent/cli.py", '"""`scheduler_ext.framework.session.Session.' + 'no_such_method`."""\n'),
    ("docs/agent.md", "the seed documents in .." + "/shared/reference/\n"),
    ("docs/agent.md", "[the design](" + "desing.md)\n"),
    ("agent/cli.py", f'"""({_PAGE}, {_Q}No such section{_Q})."""\n'),
    ("hack/run.sh", "# see " + "TESTING" + ".md section 3\n"),
])
def test_the_checker_catches(rel: str, text: str) -> None:
    found = [problem(c) for c in citations_in(rel, text)]
    assert any(found), (text, found)


@pytest.mark.parametrize(("rel", "text"), [
    ("docs/agent.md", f"{_PAGE}, {_Q}Capacity model{_Q} and agent/sense/knobs.py\n"),
    ("agent/cli.py", '"""`scheduler_ext.framework.cycle.run_session`, `agent.sense`, `tidemark.__version__`."""\n'),
    ("agent/cli.py", '"""`scheduler_ext.framework.session.Session.add_job_order_fn`."""\n'),
    ("agent/cli.py", "x = agent." + "step()  # code, not prose: `agent` here is a variable\n"),
    ("docs/agent.md", "image: tidemark/tidemark:0.1.0, `kubectl rollout status daemonset/tidemark-agent`\n"),
    ("docs/agent.md", "mounted at /host/sys/fs/cgroup/kubepods, state in /var/lib/tidemark/, ~/.cache/tidemark/\n"),
    ("docs/agent.md", "the annotation tidemark.io/node-usage; the files agent.md and agent.yaml\n"),
    ("docs/agent.md", "tests/integration/realnode_*, benchmarks/results/<run>/, --json benchmarks/results/new.json\n"),
    ("docs/agent.md", "[quickstart](quickstart.md), [tests](.." + "/tests/conformance/), [web](https://example.com/x)\n"),
])
def test_the_checker_passes(rel: str, text: str) -> None:
    found = [(c, problem(c)) for c in citations_in(rel, text)]
    assert not [f for f in found if f[1]], found
