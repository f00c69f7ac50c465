"""YAML as both programs read it: safe, as strict as Kubernetes about keys, and bounded whatever a file holds.

One loader for every YAML input a user hands either program (cluster files, the scheduler conf, the
agent configuration); each failure is a `YamlError` with a one-line message and, when known, the line
and column, never another exception:

- The C SafeLoader (plain data only: no Python objects).
- **Duplicate mapping keys** are an error naming the key, where it is (`document 3:
  metadata.annotations`) and both lines. PyYAML keeps the last one silently; Kubernetes' decoder
  (sigs.k8s.io/yaml, strict) refuses the object. Keys a merge (`<<: *base`) brings in may be
  overridden, as YAML's merge says.
- **Aliases** may add at most `MAX_ALIAS_NODES` nodes to a file, or as many as the file has itself when
  that is more (a file's cost is then at most twice its own size, whoever walks it), and no alias may
  contain itself. PyYAML shares an aliased value rather than copying it, so loading a "billion laughs"
  costs nothing; everything that walks the value afterwards (shape checks, problem messages, JSON) pays
  the expanded size: 9 levels of 9 aliases, 3 KB of text, are 387 million strings.
- Nesting too deep for Python's recursion, and integers beyond Python's 4300-digit conversion limit,
  are errors too.

Measured on the 3 KB bomb: the check refuses it in under a millisecond (the walk visits each node once,
however often it is aliased); a file without `*` pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

#: the nodes aliases may add to a file beyond the nodes it has (whichever of the two is more)
MAX_ALIAS_NODES: Final = 10_000
_MERGE_TAG: Final = "tag:yaml.org,2002:merge"
_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlError(ValueError):
    """The text is not YAML this project reads; `line`/`column` (1-based) when the place is known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column

    @property
    def where(self) -> str:
        """` (line L, column C)`, or '' when the place is unknown."""
        if self.line is None:
            return ""
        return f" (line {self.line}, column {self.column})" if self.column is not None else f" (line {self.line})"


class _Duplicate(Exception):
    def __init__(self, mapping: MappingNode, first: Node, second: Node) -> None:
        super().__init__("duplicate key")
        self.mapping, self.first, self.second = mapping, first, second


class _Loader(_BASE):  # type: ignore[misc,valid-type]
    """The C SafeLoader whose mappings refuse a key given twice (explicitly: merged keys may be overridden)."""

    def construct_mapping(self, node: Node, deep: bool = False) -> Any:
        explicit = [k for k, _ in node.value if k.tag != _MERGE_TAG] if isinstance(node, MappingNode) else []
        mapping = super().construct_mapping(node, deep=deep)
        if len(explicit) > 1:
            seen: dict[Any, Node] = {}
            for key_node in explicit:
                key = self.construct_object(key_node, deep=True)  # already built: the constructor's memo
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # unhashable: the base constructor has refused it already
                    continue
                if first is not key_node:
                    assert isinstance(node, MappingNode)
                    raise _Duplicate(node, first, key_node)
        return mapping


def _mark(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


Path = tuple[Any, ...]  # (parent path, component) pairs, built only when a message needs them


def _path_text(path: Path | None) -> str:
    parts: list[str] = []
    while path:
        path, part = path
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(reversed(parts)).lstrip(".")


def _at(label: str, path: Path | None) -> str:
    """`document 2: spec.containers[0]` (the label alone at a document's top level)."""
    text = _path_text(path)
    return f"{label}: {text}" if text else label


def _key_text(node: Node) -> str:
    return str(node.value) if isinstance(node, ScalarNode) else "<key>"


def _children(node: Node, path: Path | None) -> Iterator[tuple[Node, Path | None]]:
    if isinstance(node, SequenceNode):
        for i, child in enumerate(node.value):
            yield child, (path, i)
    elif isinstance(node, MappingNode):
        for key, value in node.value:
            yield key, path
            yield value, (path, _key_text(key))


class _Aliases:
    """The file-wide alias budget: every node is visited once, an alias use adds its subtree's size."""

    def __init__(self) -> None:
        self.distinct = 0
        self.added = 0

    def check(self, root: Node, label: str) -> None:
        sizes: dict[int, int] = {}
        visiting: set[int] = set()

        def size(node: Node, path: Path | None) -> int:
            ident = id(node)
            visiting.add(ident)
            total = 1
            for child, child_path in _children(node, path):
                known = sizes.get(id(child))
                if known is None and id(child) in visiting:
                    line, column = _mark(node)
                    raise YamlError(f"{_at(label, child_path)}: an alias refers to a node that contains it", line,
                                    column)
                if known is None:
                    total += size(child, child_path)
                    continue
                self.added += known  # a node met again is an alias of it: its whole subtree, again
                budget = max(MAX_ALIAS_NODES, self.distinct)
                if self.added > budget:
                    line, column = _mark(node)  # the mapping or list holding the alias
                    raise YamlError(
                        f"{_at(label, child_path)}: aliases add more than {budget} nodes to the file (at most "
                        f"{MAX_ALIAS_NODES} or as many as it has): refused (a 'billion laughs'?)", line, column)
                total += known
            visiting.discard(ident)
            sizes[ident] = total
            self.distinct += 1
            return total

        size(root, None)


def _find(root: Node, target: Node) -> Path | None:
    """The path of `target` below `root` (depth first, each node once): for a message only."""
    stack: list[tuple[Node, Path | None]] = [(root, None)]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(_children(node, path))
    return None


def load_all(text: str) -> list[Any]:
    """Every document of `text` (empty ones as None); YamlError for anything this module refuses."""
    loader = _Loader(text)
    aliases = _Aliases() if "*" in text else None  # an alias needs a '*': a file without one pays nothing
    docs: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            label = f"document {len(docs) + 1}"
            if aliases is not None and node is not None:
                aliases.check(node, label)
            try:
                docs.append(loader.construct_document(node))
            except _Duplicate as dup:
                line, column = _mark(dup.second)
                raise YamlError(
                    f"{_at(label, _find(node, dup.mapping))}: duplicate key "
                    f"{_key_text(dup.second)!r} (first at line {_mark(dup.first)[0]})", line, column) from None
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        mark = getattr(e, "problem_mark", None)
        raise YamlError(first, mark.line + 1 if mark else None, mark.column + 1 if mark else None) from None
    except (RecursionError, MemoryError):
        raise YamlError("nested too deeply") from None
    except ValueError as e:  # int() of a number beyond Python's digit limit, in the constructor
        if isinstance(e, YamlError):
            raise
        raise YamlError(f"a value cannot be read: {str(e)[:120]}") from None
    finally:
        loader.dispose()
    return docs


def load(text: str) -> Any:
    """The one document of `text` (None when empty); YamlError for more than one, or anything load_all refuses."""
    docs = load_all(text)
    if len(docs) > 1:
        raise YamlError(f"expected one document, found {len(docs)}")
    return docs[0] if docs else None
