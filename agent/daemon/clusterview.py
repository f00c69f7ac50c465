"""The Node and its Pods as the decision sees them, kept from the reflectors and our own API results.

- the Node: the newest object (by resourceVersion) from the reflector or from the answer to our own
  patch, parsed once per version (`agent.sense.snapshot.node_view`); invalid annotations are reported once;
- the pods: parsed by `PodCache` only when they change; annotation problems become Pod events;
- our evictions: a pod we evicted shows as terminating until the API shows it so (grace period +
  `overlay_slack`), a pod whose eviction was refused is skipped as a victim for `refused_retry`, and
  a terminating pod that left the API stays as a "ghost" while the sample window still holds its
  usage, so nothing is evicted twice for the same pressure;
- the eviction cool-downs' history (`agent.decide.cooldown`): when the Eviction API last said yes on this node and
  for each workload, kept only as long as a cool-down needs it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agent.act.evictor import EvictResult
from agent.act.statedir import StateDir
from agent.config import AgentConfig
from agent.daemon import wording
from agent.daemon.apiworker import EventSink
from agent.daemon.cluster import ClusterSource
from agent.daemon.metrics import Stats
from agent.daemon.podcache import PodCache
from agent.decide import cooldown
from agent.decide.coexistence import foreign_writers
from agent.model import EvictionHistory, NodeView, PodView
from agent.sense.snapshot import node_view
from tidemark.apis import PodUID
from tidemark.clock import Clock

log = logging.getLogger(__name__)


def _rv_int(obj: Mapping[str, Any] | None) -> int | None:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
    except ValueError:
        return None


def _cooldowns(config: AgentConfig) -> cooldown.Cooldowns:
    return cooldown.Cooldowns(config.eviction.cooldown_node, config.eviction.cooldown_workload)


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A newer Node was taken: whether it is the first one seen and whether its labels changed."""

    first: bool
    labels_changed: bool


@dataclass(frozen=True, slots=True)
class PodsChange:
    """What a refresh of the pods found: pods to sense afresh, pods gone."""

    added: frozenset[PodUID] = frozenset()
    removed: frozenset[PodUID] = frozenset()


class ClusterView:
    def __init__(
        self,
        cluster: ClusterSource,
        pods: PodCache,
        events: EventSink,
        clock: Clock,
        stats: Stats,
        state_dir: StateDir | None,
        overlay_slack: float,
    ) -> None:
        self.cluster = cluster
        self.pods = pods
        self.events = events
        self.clock = clock
        self.stats = stats
        self.state_dir = state_dir
        self.overlay_slack = overlay_slack
        self.node_obj: dict[str, Any] | None = None
        self.node: NodeView | None = None
        self.labels: Mapping[str, str] | None = None
        self._node_rv: str | None = None
        self._generation: tuple[int, int] = (-1, -1)
        self._reported_node_warnings: set[str] = set()
        self._reported_writers: set[str] = set()
        self._synced_once = False
        #: pods whose eviction was refused: not a victim until this monotonic time
        self.blocked: dict[PodUID, float] = {}
        #: pods we evicted: terminating (deletion at this wall time) until the API shows it
        self.overlay: dict[PodUID, float] = {}
        self._ghosts: dict[PodUID, tuple[PodView, float]] = {}
        #: the evictions issued (the cool-downs' input): updated only when the Eviction API said yes
        self.evicted = EvictionHistory()
        self._last_views: tuple[PodView, ...] = ()

    def node_ref(self, node_name: str) -> Mapping[str, Any]:
        return self.node_obj or {"kind": "Node", "apiVersion": "v1", "metadata": {"name": node_name}}

    # --- the Node ------------------------------------------------------------------------------------------

    def take_node(self, obj: dict[str, Any]) -> NodeChange | None:
        """A newer Node (from the reflector or the answer to our own patch) becomes the view."""
        new_rv, old_rv = _rv_int(obj), _rv_int(self.node_obj)
        if self.node_obj is not None and new_rv is not None and old_rv is not None and new_rv < old_rv:
            return None
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if rv and rv == self._node_rv:
            return None
        self.node_obj, self._node_rv = obj, rv
        view = node_view(obj)
        first = self.node is None
        self.node = view
        for w in view.warnings:
            if w not in self._reported_node_warnings:
                self._reported_node_warnings.add(w)
                log.warning("%s", w)
                said = wording.invalid_annotation(w)
                self.events.event(obj, said.type, said.reason, said.message)
        self._report_foreign_writers(obj)
        labels_changed = view.labels != self.labels
        if labels_changed:
            self.labels = dict(view.labels)
        return NodeChange(first, labels_changed)

    def _report_foreign_writers(self, obj: dict[str, Any]) -> None:
        """Another agent (volcano-agent, koordlet) writing our keys: said once per writer while it lasts."""
        writers = foreign_writers(obj)
        for manager, keys in sorted(writers.items()):
            if manager not in self._reported_writers:
                said = wording.foreign_writer(manager, keys)
                log.warning("%s", said.message)
                self.events.event(obj, said.type, said.reason, said.message)
        self._reported_writers = set(writers)

    # --- the pods ------------------------------------------------------------------------------------------

    def refresh_node(self) -> tuple[bool, NodeChange | None]:
        """(anything new in the reflectors, the Node change when a newer Node was taken)."""
        gen = self.cluster.generation()
        if gen == self._generation:
            return False, None
        node_gen_changed = gen[0] != self._generation[0]
        self._generation = gen
        if node_gen_changed:
            obj = self.cluster.node()
            if obj is not None:
                return True, self.take_node(obj)
        return True, None

    def refresh_pods(self, config: AgentConfig) -> PodsChange:
        """Take the pods as the reflector has them (parsed only where they changed); after `refresh_node`."""
        t0 = time.perf_counter()
        update = self.pods.update(self.cluster.pods(), self.clock.wall())
        if update.removed:
            self._keep_ghosts(update.removed, config)
        for uid in update.removed:
            self.overlay.pop(uid, None)
            self.blocked.pop(uid, None)
        for n in update.notices:
            log.warning("%s", n.message if n.message.startswith("pod ") else f"pod {n.namespace}/{n.name}: {n.message}")
            said = wording.pod_notice(n.reason, n.message)
            self.events.event(wording.pod_ref_of(n.namespace, n.name, n.uid), said.type, said.reason, said.message)
        if self.cluster.synced() and not self._synced_once:
            self._synced_once = True
            forgotten = self.pods.forget_unknown_classes()
            if forgotten:
                log.info("forgot the first-seen qos-level of %d pod(s) no longer on the node", forgotten)
        if update.parsed or update.removed:
            self.save_qos_classes()
            self.stats.loop("pods", time.perf_counter() - t0)
        return PodsChange(frozenset(update.added), frozenset(update.removed))

    def save_qos_classes(self) -> None:
        if self.state_dir is None:
            return
        try:
            self.state_dir.qos.save()
        except OSError as e:
            log.error("cannot save the first-seen qos-levels: %s", e.strerror or e)

    # --- our evictions -------------------------------------------------------------------------------------

    def eviction_result(
        self, uid: PodUID, grace: int | None, result: EvictResult, at: float, config: AgentConfig, workload: str = ""
    ) -> bool:
        """Fold an eviction's outcome into the views (an eviction issued starts the cool-downs of the node and of
        `workload`); True when the decision should run again at once."""
        if result.outcome == "evicted":
            self.evicted = cooldown.record(self.evicted, workload or str(uid), at, _cooldowns(config))
        if result.outcome in ("evicted", "gone"):
            view = next((p for p in self.pods.views if p.uid == uid), None)
            seconds = float(grace if grace is not None else (view.grace_seconds if view else 30.0))
            self.overlay[uid] = at + (seconds if result.outcome == "evicted" else 0.0)
            self.blocked.pop(uid, None)
        elif result.outcome == "blocked":
            retry = config.eviction.refused_retry
            if result.retry_after:
                retry = max(retry, result.retry_after)
            self.blocked[uid] = self.clock.monotonic() + retry
            return True
        return False

    def eviction_history(self, now: float, config: AgentConfig) -> EvictionHistory:
        """The evictions a cool-down still needs (older entries are dropped here: the history stays bounded)."""
        self.evicted = cooldown.expire(self.evicted, _cooldowns(config), now)
        return self.evicted

    def unevictable(self) -> frozenset[PodUID]:
        """Pods whose eviction was refused recently (the victim order moves on to the next pod)."""
        mono = self.clock.monotonic()
        self.blocked = {uid: t for uid, t in self.blocked.items() if t > mono}
        return frozenset(self.blocked)

    def _keep_ghosts(self, removed: frozenset[PodUID], config: AgentConfig) -> None:
        """A terminating pod that left the API stays visible (as terminating) until the samples forget it.

        kubelet frees the memory and CPU of a pod before it deletes the Pod object, but the watermark
        check averages the last N samples: without the ghost, the usage still in that window would no
        longer count as released and a second victim would go for the same pressure.
        """
        c = config
        lifetime = (c.eviction.consecutive + 2) * max(c.sampler.period, c.eviction.period)
        expires = self.clock.monotonic() + lifetime
        for view in self._last_views:
            if view.uid in removed and (view.deletion is not None or view.uid in self.overlay):
                deletion = view.deletion if view.deletion is not None else self.overlay[view.uid]
                self._ghosts[view.uid] = (replace(view, deletion=deletion), expires)

    def pod_views(self, now: float, config: AgentConfig) -> tuple[PodView, ...]:
        """The parsed pods, with our own evictions shown as terminating until the API shows them, and ghosts."""
        views = self.pods.views
        self._last_views = self._overlaid(views, now, config)
        if not self._ghosts:
            return self._last_views
        mono = self.clock.monotonic()
        self._ghosts = {uid: g for uid, g in self._ghosts.items() if g[1] > mono}
        live = {p.uid for p in views}
        return self._last_views + tuple(g[0] for uid, g in self._ghosts.items() if uid not in live)

    def _overlaid(self, views: tuple[PodView, ...], now: float, config: AgentConfig) -> tuple[PodView, ...]:
        if not self.overlay:
            return views
        slack = config.eviction.terminating_slack + self.overlay_slack
        out: list[PodView] = []
        for p in views:
            until = self.overlay.get(p.uid)
            if until is not None:
                if p.deletion is not None or now > until + slack:
                    del self.overlay[p.uid]
                else:
                    p = replace(p, deletion=until)
            out.append(p)
        return tuple(out)
