"""Configuration in force: the file polled for changes, resolved against the Node's labels (overrides).

A changed file that parses is a new base (its warnings become a `ConfigWarnings` event); one that does
not is rejected and the last good one stays (`ConfigRejected`). Either a new file or new Node labels
resolve the configuration again; a different result is a new generation, announced with a `ConfigApplied`
event on the Node unless it comes from the Node first seen (the start-up resolving against its labels).
The caller re-times its loops and re-applies the knobs when `resolve` reports a change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from agent.config import AgentConfig
from agent.daemon import wording
from agent.daemon.apiworker import EventSink
from agent.daemon.configsource import ConfigSource
from agent.daemon.metrics import Stats

log = logging.getLogger(__name__)


class ConfigKeeper:
    def __init__(self, source: ConfigSource, events: EventSink, stats: Stats) -> None:
        self.source = source
        self.events = events
        self.stats = stats
        self.config: AgentConfig = source.resolve(None)[0]
        self.generation = 1
        self.applied_overrides: tuple[str, ...] = ()

    def poll(self, labels: Mapping[str, str] | None, node_obj: Mapping[str, Any] | None) -> AgentConfig | None:
        """Look at the file; the previous configuration when a new one came into force, else None."""
        t0 = time.perf_counter()
        reload = self.source.poll()
        if reload is None:
            return None
        old = None
        if reload.accepted:
            self.stats.count(self.stats.config_reloads, "accepted")
            old = self.resolve(labels, "configuration file changed", node_obj)
            if node_obj is not None and reload.problems:
                said = wording.config_warnings(reload.describe())
                self.events.event(node_obj, said.type, said.reason, said.message)
        else:
            self.stats.count(self.stats.config_reloads, "rejected")
            if node_obj is not None:
                said = wording.config_rejected(self.source.path, self.source.last_rejection)
                self.events.event(node_obj, said.type, said.reason, said.message)
        self.stats.loop("config", time.perf_counter() - t0)
        return old

    def resolve(
        self, labels: Mapping[str, str] | None, why: str, node_obj: Mapping[str, Any] | None, *, announce: bool = True
    ) -> AgentConfig | None:
        """Resolve against `labels`; the previous configuration when the result differs, else None.

        A new generation is announced (`ConfigApplied` on `node_obj`) when `announce`: not for the Node first seen.
        """
        config, problems, applied = self.source.resolve(labels)
        for p in problems:
            log.warning("configuration: %s", p)
        if config == self.config and applied == self.applied_overrides:
            return None
        old = self.config
        self.config, self.applied_overrides = config, applied
        self.generation += 1
        log.info(
            "configuration generation %d in force (%s)%s",
            self.generation,
            why,
            f"; overrides: {', '.join(applied)}" if applied else "",
        )
        if node_obj is not None and announce:
            said = wording.config_applied(self.generation, why)
            self.events.event(node_obj, said.type, said.reason, said.message)
        return old
