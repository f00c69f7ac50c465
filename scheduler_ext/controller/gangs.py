"""The gang rule of the agents' evictions (issue 34, "gangs are one unit"): an ask that would leave a running gang
below its PodGroup's minMember takes the whole gang, or is denied so that the agent takes another victim.

Why: evicting one member of a gang that runs at minMember frees that member's resources and strands the rest: the
members that keep running hold theirs and cannot make progress (Volcano's job controller restarts such a job
anyway). The scheduler's preempt and reclaim keep the same rule (`scheduler_ext/framework/victims.py`, `GangRule`);
this is its half for the evictions an agent asks for, decided where the whole gang is visible (the agent sees only
its node's pods, and not the PodGroup).

- a pod in no PodGroup (`scheduling.k8s.io/group-name`), a PodGroup gone or with minMember <= 1, or a gang that
  keeps minMember running members without it: the pod alone;
- otherwise the whole gang: every running member, on any node, when each of them may be evicted for an agent
  (offline by its qos-level, none the agent must never evict: `tidemark.evictionasks` judges the asked pod itself);
- otherwise (a member that may not be evicted, an online one say) nothing: the ask is denied with why, and the agent
  picks its next victim at once (a Denied answer is "blocked" to it).
Pure: the controller reads the PodGroup and the namespace's pods (scheduler_ext/controller/evictions.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tidemark.apis import ANN_GROUP_NAME, is_offline
from tidemark.pods import eviction_exemption

#: the PodGroup condition a whole-gang eviction sets, as the scheduler's preempt and reclaim do
PG_COND_EVICTED: Final = "Evicted"
GANG_EVICTED: Final = "GangEvicted"


@dataclass(frozen=True, slots=True)
class GangVerdict:
    """`members`: the pods to evict (the asked one first); empty = deny the ask with `why`. `gang`: the PodGroup's
    name when the whole gang goes (its condition and Event), else ""."""

    members: tuple[Mapping[str, Any], ...]
    why: str = ""
    gang: str = ""
    min_member: int = 0


def group_of(pod: Mapping[str, Any]) -> str:
    """The pod's PodGroup name ("" when none)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(ANN_GROUP_NAME) if isinstance(annotations, Mapping) else None
    return name if isinstance(name, str) else ""


def min_member(podgroup: Mapping[str, Any] | None) -> int:
    spec = podgroup.get("spec") if isinstance(podgroup, Mapping) else None
    value = spec.get("minMember") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def running(pod: Mapping[str, Any]) -> bool:
    """A member that counts toward minMember: Running and not being deleted."""
    md = pod.get("metadata") or {}
    return (pod.get("status") or {}).get("phase") == "Running" and not md.get("deletionTimestamp")


def _ref(pod: Mapping[str, Any]) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


def gang_verdict(pod: Mapping[str, Any], podgroup: Mapping[str, Any] | None,
                 pods: Iterable[Mapping[str, Any]]) -> GangVerdict:  # fmt: skip
    """What evicting `pod` takes (the module docstring): `podgroup` its PodGroup (None when it has none or it is
    gone), `pods` the pods of its namespace."""
    group = group_of(pod)
    minimum = min_member(podgroup)
    if not group or minimum <= 1:
        return GangVerdict((pod,))
    uid = (pod.get("metadata") or {}).get("uid")
    members = [p for p in pods if group_of(p) == group and running(p)]
    others = [p for p in members if (p.get("metadata") or {}).get("uid") != uid]
    if len(others) >= minimum or len(others) + 1 < minimum:
        # keeps minMember without it, or already below minMember (nothing left to protect: the job restarts anyway)
        return GangVerdict((pod,))
    for p in others:
        if not is_offline(p):
            return GangVerdict((), f"evicting {_ref(pod)} alone would leave gang {group} below minMember {minimum}, "
                                   f"and its member {_ref(p)} is not offline: not evicted; the agent takes another "
                                   "victim")  # fmt: skip
        if (why := eviction_exemption(p)) is not None:
            return GangVerdict((), f"evicting {_ref(pod)} alone would leave gang {group} below minMember {minimum}, "
                                   f"and its member {_ref(p)} is {why}: not evicted; the agent takes another victim")
    ordered = sorted(others, key=lambda p: _ref(p))
    return GangVerdict((pod, *ordered), gang=group, min_member=minimum)


def gang_message(verdict: GangVerdict, asked: str) -> str:
    """The PodGroup condition's and Event's message for a whole-gang eviction."""
    names = sorted(_ref(p) for p in verdict.members)
    return (f"the agent's eviction of {asked} took the whole gang ({len(names)} running: {', '.join(names)}): "
            f"evicting it alone would have left the gang below minMember {verdict.min_member}")
