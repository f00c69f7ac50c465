"""Another agent writing our Node keys (volcano-agent, koordlet): who, from the Node's managedFields.

Two writers of `kubernetes.io/batch-*` (or of the oversubscription annotations) on one Node fight:
each overwrites the other's figures every cycle and schedulers see capacity flap. The API server
records every writer per field (`metadata.managedFields`, field tracking is on by default since
Kubernetes 1.18), so the agent can name the other writer instead of guessing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidemark.apis import ANN_OVERSUBSCRIPTION_CPU, ANN_OVERSUBSCRIPTION_MEMORY, RES_BATCH_CPU, RES_BATCH_MEMORY

#: The field manager of Tidemark's agent (the API server takes it from the User-Agent, "tidemark-agent/<node>").
OWN_MANAGER = "tidemark-agent"
_STATUS_KEYS = tuple(f"f:{r}" for r in (RES_BATCH_CPU, RES_BATCH_MEMORY))
_ANNOTATION_KEYS = tuple(f"f:{a}" for a in (ANN_OVERSUBSCRIPTION_CPU, ANN_OVERSUBSCRIPTION_MEMORY))


def _child(fields: Any, *path: str) -> Mapping[str, Any]:
    for key in path:
        fields = fields.get(key) if isinstance(fields, Mapping) else None
    return fields if isinstance(fields, Mapping) else {}


def _owned_keys(fields_v1: Any) -> list[str]:
    """Which of Tidemark's keys a managedFields entry holds."""
    held = []
    for section in ("f:capacity", "f:allocatable"):
        held += [k[2:] for k in _STATUS_KEYS if k in _child(fields_v1, "f:status", section)]
    held += [k[2:] for k in _ANNOTATION_KEYS if k in _child(fields_v1, "f:metadata", "f:annotations")]
    return sorted(set(held))


def foreign_writers(node: Mapping[str, Any], own_manager: str = OWN_MANAGER) -> dict[str, list[str]]:
    """Manager name -> the Tidemark keys it wrote on this Node, for every manager that is not us."""
    metadata = node.get("metadata")
    entries = metadata.get("managedFields") if isinstance(metadata, Mapping) else None
    out: dict[str, list[str]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        manager = entry.get("manager")
        if not isinstance(manager, str) or manager == own_manager or manager.startswith(own_manager + "/"):
            continue
        keys = _owned_keys(entry.get("fieldsV1"))
        if keys:
            out[manager] = sorted(set(out.get(manager, [])) | set(keys))
    return out
