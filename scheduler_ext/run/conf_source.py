"""The scheduler conf of `run`: where it comes from, and its hot reload.

The conf is loaded at start (an error there is fatal: exit 2), then re-read at most once a period
(a ConfigMap mount swaps a symlink). A good new content is installed (the actions rebuilt, the
generation metric bumped); a bad one keeps the previous conf, and is logged, counted and reported
once as a Warning event on the scheduler's own Pod when POD_NAME/POD_NAMESPACE are set.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Final

from scheduler_ext.actions.registry import ACTIONS
from scheduler_ext.framework.conf import ConfError, SchedulerConf, parse_conf
from scheduler_ext.framework.interface import ActionSpec, PluginSpec
from scheduler_ext.metrics import SchedulerMetrics
from scheduler_ext.plugins.registry import PLUGINS
from tidemark.kube.events import EventRecorder, ObjectRef

log = logging.getLogger(__name__)

DEFAULT_CONF_RESOURCE: Final = "volcano-scheduler.conf"


def default_conf_text() -> str:
    """The conf used without --scheduler-conf: the one in examples/ (shipped inside the package)."""
    return resources.files("scheduler_ext").joinpath(DEFAULT_CONF_RESOURCE).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class LoadedConf:
    conf: SchedulerConf
    digest: str
    generation: int


class ConfSource:
    """The scheduler conf: loaded at start (an error there is fatal), then re-read on `poll()`.

    The file is read whole every poll (it is small): a ConfigMap volume swaps its `..data` symlink,
    so neither inotify on the file nor an mtime check on the link is reliable, the content is.
    A new content is parsed; on error the previous conf stays and the error is reported once.
    """

    def __init__(
        self,
        path: str | None,
        actions: Mapping[str, ActionSpec] = ACTIONS,
        plugins: Mapping[str, PluginSpec] = PLUGINS,
    ) -> None:
        self.path = path
        self.actions = actions
        self.plugins = plugins
        self.current: LoadedConf | None = None
        self._failed_digest = ""

    @property
    def name(self) -> str:
        return self.path or f"(built-in {DEFAULT_CONF_RESOURCE})"

    def _read(self) -> str:
        if self.path is None:
            return default_conf_text()
        with open(self.path, encoding="utf-8") as f:
            return f.read()

    def _parse(self, text: str) -> SchedulerConf:
        conf, warnings = parse_conf(text, self.actions, self.plugins)
        for w in warnings:
            log.warning("conf %s: %s", self.name, w)
        return conf

    def load(self) -> LoadedConf:
        """The first load; raises ConfError (or OSError) when the conf cannot be used."""
        text = self._read()
        conf = self._parse(text)
        self.current = LoadedConf(conf, hashlib.sha256(text.encode()).hexdigest(), 1)
        return self.current

    def poll(self) -> tuple[LoadedConf | None, str | None]:
        """(new conf, None) when the content changed and parses; (None, error) once per bad content."""
        assert self.current is not None, "load() first"
        try:
            text = self._read()
        except OSError as exc:
            digest, error = f"unreadable:{exc}", f"cannot read {self.path}: {exc.strerror or exc}"
        else:
            digest = hashlib.sha256(text.encode()).hexdigest()
            if digest == self.current.digest:
                self._failed_digest = ""
                return None, None
            try:
                conf = self._parse(text)
            except ConfError as exc:
                error = str(exc)
            else:
                self.current = LoadedConf(conf, digest, self.current.generation + 1)
                self._failed_digest = ""
                return self.current, None
        if digest == self._failed_digest:
            return None, None
        self._failed_digest = digest
        return None, error


class ConfReloader:
    """Hot reload of a ConfSource: `load()` once, then `maybe_reload()` every loop iteration.

    `install` receives each conf to use (the first and every good new one); re-reads happen at most
    once per `min(1 s, period)`, so early (event-triggered) wake-ups do not re-read the file.
    """

    def __init__(
        self,
        source: ConfSource,
        install: Callable[[SchedulerConf], None],
        metrics: SchedulerMetrics,
        recorder: EventRecorder,
        *,
        period: float,
        pod: ObjectRef | None,
        clock: Callable[[], float],
    ) -> None:
        self.source = source
        self._install = install
        self._metrics = metrics
        self._recorder = recorder
        self._period = period
        self._pod = pod
        self._clock = clock
        self._last_poll = float("-inf")

    def load(self) -> LoadedConf:
        """The first load and install; ConfError/OSError propagate (fatal at start)."""
        loaded = self.source.load()
        self._install(loaded.conf)
        self._metrics.conf_generation.set(loaded.generation)
        log.info("scheduler conf %s loaded: actions %s", self.source.name, ", ".join(loaded.conf.actions))
        return loaded

    def maybe_reload(self) -> None:
        now = self._clock()
        if now - self._last_poll < min(1.0, self._period):
            return
        self._last_poll = now
        new, error = self.source.poll()
        if new is not None:
            self._install(new.conf)
            self._metrics.conf_generation.set(new.generation)
            log.info("scheduler conf %s reloaded (generation %d)", self.source.name, new.generation)
        elif error is not None:
            cur = self.source.current
            gen = cur.generation if cur else 0
            message = f"{self.source.name}: {error}; keeping the previous conf (generation {gen})"
            log.error("bad scheduler conf: %s", message)
            self._metrics.conf_reload_errors.inc()
            if self._pod is not None:
                self._recorder.warning(self._pod, "InvalidSchedulerConf", message)
