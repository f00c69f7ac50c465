"""Pod objects -> PodViews, parsed once per (UID, resourceVersion), with the first-seen qos-level applied.

Per-cycle work stays proportional to what changed: a pod whose resourceVersion did not move keeps its
parsed view, and the whole tuple is reused while the store's generation stands still. The qos-level of
a pod is fixed at first sight (docs/design.md, "Vocabulary and object contracts"): the first level seen is
stored in the state dir
(`agent.act.statedir.QosClasses`) and wins over later edits of the annotation, which are reported
once per new value (a Warning event `QosLevelChangeIgnored`). A malformed annotation makes the pod
online, also reported once (`InvalidQosLevel`); a malformed `volcano.sh/enable-quota-burst` or
`volcano.sh/quota-burst-time` once per value (`InvalidQuotaBurst`, with the default the agent uses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.act.statedir import QosClasses
from agent.model import PodView
from agent.sense.snapshot import pod_view
from tidemark.apis import ANN_ENABLE_QUOTA_BURST, ANN_QOS_LEVEL, ANN_QUOTA_BURST_TIME, PodUID

JSON = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Notice:
    """Something about a pod worth an event: (reason, message) on the pod."""

    uid: PodUID
    namespace: str
    name: str
    reason: str
    message: str


@dataclass(slots=True)
class _Entry:
    rv: str
    view: PodView
    warnings: list[str]
    reported: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class PodUpdate:
    views: tuple[PodView, ...]
    added: frozenset[PodUID]
    changed: frozenset[PodUID]
    removed: frozenset[PodUID]
    notices: tuple[Notice, ...]
    parsed: int


def _active(pod: JSON) -> bool:
    status = pod.get("status")
    return not (isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed"))


class PodCache:
    """See the module docstring. `qos` None keeps first-seen levels in memory only (dry-run)."""

    def __init__(self, qos: QosClasses | None = None) -> None:
        self.qos = qos if qos is not None else QosClasses(None)
        self._entries: dict[str, _Entry] = {}
        self._views: tuple[PodView, ...] = ()
        self.parsed_total = 0

    @property
    def views(self) -> tuple[PodView, ...]:
        return self._views

    def warnings(self) -> list[str]:
        return [w for e in self._entries.values() for w in e.warnings]

    def update(self, objects: Iterable[JSON], now: float) -> PodUpdate:
        seen: set[str] = set()
        added: set[PodUID] = set()
        changed: set[PodUID] = set()
        notices: list[Notice] = []
        parsed = 0
        for obj in objects:
            if not _active(obj):
                continue
            md = obj.get("metadata")
            if not isinstance(md, Mapping):
                continue
            uid = str(md.get("uid") or f"{md.get('namespace')}/{md.get('name')}")
            rv = str(md.get("resourceVersion") or "")
            seen.add(uid)
            entry = self._entries.get(uid)
            if entry is not None and entry.rv == rv and rv:
                continue
            view, warnings = pod_view(obj, now)
            parsed += 1
            first = self.qos.first(view.uid, view.qos_level, view.key, now)
            if entry is None:
                entry = self._entries[uid] = _Entry(rv, view, warnings)
                added.add(view.uid)
            else:
                entry.rv = rv
                changed.add(view.uid)
            if first != view.qos_level:
                raw = (md.get("annotations") or {}).get(ANN_QOS_LEVEL)
                message = (
                    f"{ANN_QOS_LEVEL} is now {raw!r} (level {view.qos_level}) but the pod was first seen at level "
                    f"{first}; the class of a pod is fixed at first sight, the edit is ignored"
                )
                warnings = [*warnings, f"pod {view.key}: {message}"]
                view = replace(view, qos_level=first)
                key = f"QosLevelChangeIgnored:{raw}"
                if key not in entry.reported:
                    entry.reported.add(key)
                    notices.append(Notice(view.uid, view.namespace, view.name, "QosLevelChangeIgnored", message))
            for w in warnings:
                if ANN_QOS_LEVEL in w and "treated as online" in w and f"InvalidQosLevel:{w}" not in entry.reported:
                    entry.reported.add(f"InvalidQosLevel:{w}")
                    notices.append(Notice(view.uid, view.namespace, view.name, "InvalidQosLevel", w))
                burst = ANN_QUOTA_BURST_TIME in w or ANN_ENABLE_QUOTA_BURST in w
                if burst and f"InvalidQuotaBurst:{w}" not in entry.reported:
                    entry.reported.add(f"InvalidQuotaBurst:{w}")
                    notices.append(Notice(view.uid, view.namespace, view.name, "InvalidQuotaBurst", w))
            entry.view = view
            entry.warnings = warnings
        removed = {PodUID(u) for u in self._entries if u not in seen}
        for uid in removed:
            del self._entries[uid]
        if parsed or removed or added:
            self._views = tuple(e.view for e in self._entries.values())
        self.parsed_total += parsed
        return PodUpdate(self._views, frozenset(added), frozenset(changed), frozenset(removed), tuple(notices), parsed)

    def forget_unknown_classes(self) -> int:
        """Drop first-seen levels of pods no longer on the node (call after a full sync)."""
        return self.qos.forget_except(set(self._entries))
