"""Eviction asks in the NodeReport: the agent asks, the NodeReport controller evicts (issue 33, "evictions that do
not wait for the webhook").

Why: an agent that evicted through the Eviction API itself needed a `pods/eviction` hook with failurePolicy Fail
to keep it to its own node, and while no webhook pod answered every API eviction in the cluster waited (`kubectl
drain`, an autoscaler's scale-down). Now the agent holds no eviction right: it writes the pods it wants evicted in
its own NodeReport (`spec.evictions`, the newest decision's list), and the controller in the webhook's pods
evicts each one that is bound to that node and offline, through the Eviction API (PodDisruptionBudgets honoured),
and records the outcome in the report's status (`status.evictions`), where the agent reads it.

- an ask: `uid`, `namespace`, `name`, `reason` (the agent's eviction reason, an Event reason), `message`,
  `askedAt` (the agent's time of the ask: an ask is answered once; the same pod asked again later is a new ask),
  optional `gracePeriodSeconds`;
- an outcome: `uid`, `askedAt` (the ask it answers), `outcome` (`OUTCOMES`), `message`, `time`.
Outcomes are kept only while their ask is in the spec (pruned with it), so both lists stay within `MAX_ASKS`.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidemark.apis import dns1123_label_problem, dns1123_subdomain_problem, is_offline, short_repr
from tidemark.pods import eviction_exemption

#: at most this many asks in one report (the agent asks for one decision's victims; it evicts far fewer)
MAX_ASKS: Final = 32
MAX_MESSAGE: Final = 1024
MAX_UID: Final = 64
MAX_ASKED_AT: Final = 40
#: the longest grace period an agent may ask for (a day; the pod's own when absent)
MAX_GRACE: Final = 86400
ASK_FIELDS: Final = frozenset({"uid", "namespace", "name", "reason", "message", "askedAt", "gracePeriodSeconds"})
#: an Event reason: UpperCamelCase, as the agent's eviction reasons are
_REASON_RE: Final = re.compile(r"[A-Z][A-Za-z0-9]{0,63}")

EVICTED: Final = "Evicted"
#: 429: a PodDisruptionBudget (or API throttling) refused it
REFUSED: Final = "Refused"
#: the pod (that uid) is gone
NOT_FOUND: Final = "NotFound"
#: the controller does not evict it: not bound to the report's node, not offline, or exempt
DENIED: Final = "Denied"
#: another error of the Eviction API
FAILED: Final = "Failed"
#: claimed by one controller replica, not answered yet (two replicas never evict the same ask)
EVICTING: Final = "Evicting"
OUTCOMES: Final = (EVICTED, REFUSED, NOT_FOUND, DENIED, FAILED, EVICTING)


@dataclass(frozen=True, slots=True)
class Ask:
    uid: str
    namespace: str
    name: str
    reason: str
    message: str
    asked_at: str
    grace_seconds: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.uid, self.asked_at)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"uid": self.uid, "namespace": self.namespace, "name": self.name, "reason": self.reason,
                               "message": self.message[:MAX_MESSAGE], "askedAt": self.asked_at}  # fmt: skip
        if self.grace_seconds is not None:
            out["gracePeriodSeconds"] = self.grace_seconds
        return out

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Ask:
        grace = raw.get("gracePeriodSeconds")
        return Ask(str(raw.get("uid") or ""), str(raw.get("namespace") or ""), str(raw.get("name") or ""),
                   str(raw.get("reason") or ""), str(raw.get("message") or ""), str(raw.get("askedAt") or ""),
                   grace if isinstance(grace, int) and not isinstance(grace, bool) else None)  # fmt: skip


def _str_problem(raw: Mapping[str, Any], key: str, cap: int) -> str | None:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        return f"{key} must be a non-empty string"
    if len(value) > cap:
        return f"{key} is {len(value)} characters long (at most {cap})"
    return None


def _ask_problems(raw: object) -> list[str]:
    if not isinstance(raw, Mapping):
        return ["must be an object"]
    out = [f"{short_repr(k)} is not a field of an eviction ask" for k in raw if k not in ASK_FIELDS]
    out += [p for k, cap in (("uid", MAX_UID), ("askedAt", MAX_ASKED_AT)) if (p := _str_problem(raw, k, cap))]
    if (why := dns1123_label_problem(raw.get("namespace"))) is not None:
        out.append(f"namespace: {why}")
    if (why := dns1123_subdomain_problem(raw.get("name"))) is not None:
        out.append(f"name: {why}")
    reason = raw.get("reason")
    if not isinstance(reason, str) or not _REASON_RE.fullmatch(reason):
        out.append(f"reason={short_repr(reason)} is no Event reason (UpperCamelCase, at most 64 characters)")
    message = raw.get("message", "")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE:
        out.append(f"message must be a string of at most {MAX_MESSAGE} characters")
    grace = raw.get("gracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace <= MAX_GRACE):
        out.append(f"gracePeriodSeconds={short_repr(grace)} is no integer in 0..{MAX_GRACE}")
    return out


def asks_problems(value: object) -> list[str]:
    """Why `spec.evictions` may not be applied (empty: it may): not a list, more than MAX_ASKS, a malformed ask,
    the same pod twice."""
    if value is None:
        return []
    if not isinstance(value, list):
        return ["spec.evictions must be a list"]
    if len(value) > MAX_ASKS:
        return [f"spec.evictions has {len(value)} asks (at most {MAX_ASKS})"]
    out = [f"spec.evictions[{i}]: {p}" for i, raw in enumerate(value) for p in _ask_problems(raw)]
    uids = [raw.get("uid") for raw in value if isinstance(raw, Mapping)]
    if len(set(map(str, uids))) != len(uids):
        out.append("spec.evictions names a pod twice")
    return out


def asks_of(spec: Mapping[str, Any]) -> list[Ask]:
    raw = spec.get("evictions")
    return [Ask.from_json(a) for a in raw if isinstance(a, Mapping)] if isinstance(raw, list) else []


def outcomes_of(status: object) -> list[dict[str, Any]]:
    raw = status.get("evictions") if isinstance(status, Mapping) else None
    return [dict(o) for o in raw if isinstance(o, Mapping)] if isinstance(raw, list) else []


def _key(outcome: Mapping[str, Any]) -> tuple[str, str]:
    return (str(outcome.get("uid") or ""), str(outcome.get("askedAt") or ""))


def pending(asks: Iterable[Ask], outcomes: Iterable[Mapping[str, Any]]) -> list[Ask]:
    """The asks no outcome answers yet (none claimed either)."""
    answered = {_key(o) for o in outcomes}
    return [a for a in asks if a.key not in answered]


def outcome(ask: Ask, what: str, message: str, at: str) -> dict[str, Any]:
    """An answer; an empty message is left out (a merge patch of the 1.20 API server turns "" in a list into null)."""
    out = {"uid": ask.uid, "askedAt": ask.asked_at, "outcome": what, "time": at}
    return {**out, "message": message[:MAX_MESSAGE]} if message else out


def merged(asks: Sequence[Ask], old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]) -> list[Any]:
    """The status list: the old outcomes updated by the new ones (by uid and askedAt), only those of asks still in
    the spec (an ask gone takes its outcome with it), in the asks' order."""
    by_key = {_key(o): dict(o) for o in old}
    by_key.update({_key(o): dict(o) for o in new})
    return [by_key[a.key] for a in asks if a.key in by_key]


def judge(ask: Ask, pod: Mapping[str, Any] | None, node: str) -> tuple[str, str] | None:
    """(outcome, why) when the controller must not evict the pod an agent asked for; None when it may: the pod (that
    uid) exists, is bound to the report's node, is offline by its qos-level (`tidemark.apis.is_offline`, the
    agent's classification) and is none the agent must never evict (`tidemark.pods.eviction_exemption`)."""
    md = pod.get("metadata") if isinstance(pod, Mapping) else None
    if pod is None or not isinstance(md, Mapping) or md.get("uid") != ask.uid:
        return NOT_FOUND, f"pod {ask.namespace}/{ask.name} with uid {ask.uid} is gone"
    spec = pod.get("spec")
    bound = spec.get("nodeName") if isinstance(spec, Mapping) else None
    if bound != node:
        where = f"node {bound}" if bound else "no node"
        return DENIED, f"the agent of node {node} may not evict pod {ask.namespace}/{ask.name} (on {where})"
    if not is_offline(pod):
        return DENIED, f"pod {ask.namespace}/{ask.name} is not offline (volcano.sh/qos-level): not evicted for agents"
    if (why := eviction_exemption(pod)) is not None:
        return DENIED, f"pod {ask.namespace}/{ask.name} is {why}: never evicted for an agent"
    return None
