"""Load Kubernetes objects from an OBJECTS.yaml file: multi-document YAML or a `kind: List`.

The loader is shared with `tidemark-agent plan` (tidemark.objects); this module keeps the
scheduler's names for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tidemark.objects import ObjectsError
from tidemark.objects import flatten as _flatten
from tidemark.objects import load_objects as _load_objects

#: the scheduler's name for tidemark.objects.ObjectsError
SourceError = ObjectsError


def load_objects(path: str | Path) -> list[dict[str, Any]]:
    """Every object in the file, `kind: List` items flattened; empty documents skipped."""
    return _load_objects(path)


def flatten(docs: list[Any], origin: str = "objects") -> list[dict[str, Any]]:
    return _flatten(docs, origin)
