"""OBJECTS.yaml, the cluster file of `tidemark-scheduler simulate` and `tidemark-agent plan`: one loader.

Multi-document YAML, or `kind: List` (and `kind: <X>List` with items), loaded by `tidemark.yamlsafe`
(the C SafeLoader; duplicate keys and alias bombs refused). Whatever the file holds, the result is
either a list of mappings or `ObjectsError` with one line naming the file and what is wrong with it
(bytes that are not UTF-8, YAML syntax, a key given twice, aliases beyond the budget, a document
that is not an object, `items` that is not a list): the programs turn it into exit 2, never a
traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: documents nested deeper than this (Lists of Lists) are refused rather than recursed into
MAX_LIST_DEPTH = 8


class ObjectsError(Exception):
    """The file cannot be read or is not a list of Kubernetes objects (one-line message)."""


def load_objects(path: str | Path) -> list[dict[str, Any]]:
    """Every object in the file, List items flattened; empty documents skipped."""
    from tidemark.yamlsafe import YamlError, load_all

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ObjectsError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ObjectsError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from e
    try:
        docs = load_all(text)
    except YamlError as e:
        raise ObjectsError(f"{path} is not valid YAML{e.where}: {e.message}") from e
    return flatten(docs, str(path))


def flatten(docs: list[Any], origin: str = "objects") -> list[dict[str, Any]]:
    """Documents -> objects; a List's items are flattened in place (Lists nest up to MAX_LIST_DEPTH)."""
    out: list[dict[str, Any]] = []
    _flatten(docs, origin, "document", 0, out)
    return out


def _flatten(docs: list[Any], origin: str, label: str, depth: int, out: list[dict[str, Any]]) -> None:
    if depth > MAX_LIST_DEPTH:
        raise ObjectsError(f"{origin}: Lists nested more than {MAX_LIST_DEPTH} deep")
    for i, doc in enumerate(docs):
        where = f"{label} {i + 1}" if label == "document" else f"{label}[{i}]"
        if doc is None:
            continue
        if isinstance(doc, list):
            _flatten(doc, origin, f"{where}", depth + 1, out)
            continue
        if not isinstance(doc, Mapping):
            raise ObjectsError(f"{origin}: {where} is not an object (got {type(doc).__name__})")
        kind = doc.get("kind")
        if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in doc):
            items = doc.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                raise ObjectsError(f"{origin}: {where}: items must be a list, not {type(items).__name__}")
            _flatten(items, origin, f"{where}.items", depth + 1, out)
            continue
        out.append(dict(doc))
