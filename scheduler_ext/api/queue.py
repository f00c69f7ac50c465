"""QueueInfo (Volcano's api/queue_info.go) with the Queue spec fields plugins read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from scheduler_ext.api.resource import Resource
from scheduler_ext.api.types import QueueID

QUEUE_OPEN: Final = "Open"
QUEUE_CLOSED: Final = "Closed"
QUEUE_CLOSING: Final = "Closing"
HIERARCHY_ANNOTATION: Final = "volcano.sh/hierarchy"
HIERARCHY_WEIGHT_ANNOTATION: Final = "volcano.sh/hierarchy-weights"


class QueueInfo:
    """A Queue; `state` is Open when the object's status.state is empty (the queue controller's default)."""

    __slots__ = (
        "annotations",
        "capability",
        "capability_raw",
        "creation",
        "deserved",
        "deserved_raw",
        "guarantee",
        "guarantee_raw",
        "hierarchy",
        "implicit",
        "name",
        "obj",
        "parent",
        "priority",
        "reclaimable",
        "state",
        "uid",
        "weight",
        "weights",
    )

    def __init__(self, obj: Mapping[str, Any], *, creation: float = 0.0, implicit: bool = False) -> None:
        md = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        self.obj = obj
        self.name: str = str(md.get("name") or "")
        self.uid = QueueID(self.name)
        self.annotations: Mapping[str, Any] = md.get("annotations") or {}
        w = spec.get("weight")
        self.weight: int = int(w) if isinstance(w, int | float) and not isinstance(w, bool) else 0
        self.hierarchy: str = str(self.annotations.get(HIERARCHY_ANNOTATION, ""))
        self.weights: str = str(self.annotations.get(HIERARCHY_WEIGHT_ANNOTATION, ""))
        self.capability_raw: Mapping[str, Any] = spec.get("capability") or {}
        self.deserved_raw: Mapping[str, Any] = spec.get("deserved") or {}
        guarantee = spec.get("guarantee") or {}
        self.guarantee_raw: Mapping[str, Any] = (
            (guarantee.get("resource") or {}) if isinstance(guarantee, Mapping) else {}
        )
        self.capability = Resource.from_resource_list(self.capability_raw)
        self.deserved = Resource.from_resource_list(self.deserved_raw)
        self.guarantee = Resource.from_resource_list(self.guarantee_raw)
        self.parent: str = str(spec.get("parent") or "")
        p = spec.get("priority")
        self.priority: int = int(p) if isinstance(p, int) and not isinstance(p, bool) else 0
        rec = spec.get("reclaimable")
        self.reclaimable: bool = True if rec is None else bool(rec)
        self.state: str = str(status.get("state") or QUEUE_OPEN)
        self.creation = creation
        self.implicit = implicit

    def __repr__(self) -> str:
        return f"Queue({self.name}, weight {self.weight}, state {self.state})"

    def is_open(self) -> bool:
        return self.state == QUEUE_OPEN
