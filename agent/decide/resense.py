"""When to look again for the cgroups of a pod that a pod event did not find (pure; the cycle senses).

kubelet (1.20's `syncPod`) publishes a new pod's status (Pending, ContainerCreating) before it creates
the pod's cgroup, and it starts the containers before the API says so (its PLEG relists every second):
the pod event can find no pod cgroup, and the next event (Running) comes only after the containers
already run, at full weight. So a pod that a pod event finds *waiting* (no pod cgroup yet, or a
container without an id or without its cgroup) is sensed again on a short backoff, `first` seconds
doubling up to `most`, until its pod cgroup and every container's cgroup are found, for at most
`give_up` seconds after the event (a pod that stays waiting longer, e.g. on an image pull, is found
by its next pod event or the reconcile). A pod cgroup is found only once kubelet has finished writing
it, i.e. it holds a child directory, the sandbox's (`agent.sense.snapshot.resolve_pod_cgroups`): a knob
written between kubelet's mkdir and its own writes fails kubelet's `cpu.shares` (EINVAL); while a
pod cgroup is there without the sandbox's, the pod is looked at every `first` seconds (no doubling). The
pod-level knobs (`cpu.idle`, the pod's CFS quota) are thus written about `first` seconds after the
sandbox's cgroup appears, before the containers start; the container-level ones when the API names
the containers.

Each retry reads only the waiting pods (a stat per controller and a scandir of a pod cgroup without
containers found, their knob files once found), so the work stays proportional to the pods that are
starting. Terminating pods are never chased.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from agent.model import PodCgroups, PodView
from tidemark.apis import PodUID


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The backoff of the re-senses (seconds)."""

    first: float = 0.1
    most: float = 2.0
    give_up: float = 30.0


DEFAULT_POLICY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class Retry:
    """A waiting pod: the pod event that started its schedule, when to look next, the last delay (monotonic s)."""

    since: float
    due: float
    delay: float


def waiting(pod: PodView, cgroups: PodCgroups | None) -> bool:
    """Whether kubelet has more cgroups to create for `pod` than were found (never for a terminating pod)."""
    if pod.terminating:
        return False
    if cgroups is None:
        return True
    return any(c.container_id is None or c.name not in cgroups.containers for c in pod.containers)


def due(retries: Mapping[PodUID, Retry], now: float) -> frozenset[PodUID]:
    """The pods to sense again now."""
    return frozenset(uid for uid, r in retries.items() if r.due <= now)


def next_due(retries: Mapping[PodUID, Retry]) -> float | None:
    return min((r.due for r in retries.values()), default=None)


def reschedule(
    retries: Mapping[PodUID, Retry],
    sensed: Mapping[PodUID, bool],
    events: Iterable[PodUID],
    now: float,
    policy: RetryPolicy = DEFAULT_POLICY,
    soon: Collection[PodUID] = (),
) -> dict[PodUID, Retry]:
    """The schedule after a sense: `sensed` maps each pod just read to whether it is still `waiting`.

    A pod found complete leaves the schedule. A waiting pod with a pod event (`events`) starts over at
    `policy.first`; one whose retry was due waits twice as long as last time (at most `policy.most`)
    unless that passes `policy.give_up` after its event, and then leaves. A pod in `soon` (its pod cgroup
    is there but kubelet has not made the sandbox in it yet: that takes a fraction of a second) is looked
    at again every `policy.first` instead of doubling, within the same `give_up`. A waiting pod read by a
    reconcile without an event is not added, and a retry not yet due keeps its time.
    """
    event_set = frozenset(events)
    out = dict(retries)
    for uid, still in sensed.items():
        current = out.get(uid)
        if not still:
            out.pop(uid, None)
        elif uid in event_set:
            out[uid] = Retry(now, now + policy.first, policy.first)
        elif current is not None and current.due <= now:
            delay = policy.first if uid in soon else min(current.delay * 2, policy.most)
            if now + delay > current.since + policy.give_up:
                del out[uid]
            else:
                out[uid] = Retry(current.since, now + delay, delay)
    return out


def forget(retries: Mapping[PodUID, Retry], removed: Iterable[PodUID]) -> dict[PodUID, Retry]:
    gone = frozenset(removed)
    return {uid: r for uid, r in retries.items() if uid not in gone}
