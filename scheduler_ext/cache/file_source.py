"""Load Kubernetes objects from an OBJECTS.yaml file: multi-document YAML or a `kind: List`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

# the C loader is ~10x faster on clusters with thousands of pods
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SourceError(Exception):
    """The file cannot be read or is not a list of Kubernetes objects (one-line message)."""


def load_objects(path: str | Path) -> list[dict[str, Any]]:
    """Every object in the file, `kind: List` items flattened; empty documents skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            docs = list(yaml.load_all(f, Loader=_Loader))
    except OSError as e:
        raise SourceError(f"cannot read {path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise SourceError(f"{path}: invalid YAML: {str(e).splitlines()[0]}") from e
    return flatten(docs, str(path))


def flatten(docs: list[Any], origin: str = "objects") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if isinstance(doc, list):
            out.extend(flatten(doc, origin))
            continue
        if not isinstance(doc, Mapping):
            raise SourceError(f"{origin}: document {i + 1} is not a mapping (got {type(doc).__name__})")
        if doc.get("kind") == "List" or (str(doc.get("kind", "")).endswith("List") and "items" in doc):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise SourceError(f"{origin}: document {i + 1}: items of a List must be a list")
            out.extend(flatten(items, origin))
            continue
        out.append(dict(doc))
    return out
