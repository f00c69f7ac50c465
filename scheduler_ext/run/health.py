"""Health, readiness and serving of `run`: /metrics, /healthz, /readyz on `--listen-address`.

- /healthz `loop`: the scheduling loop thread is alive and iterating (a session may take up to
  300 s; between sessions an iteration is due within max(60 s, 10 periods)). It never depends on the
  API server, so an outage does not get the scheduler killed.
- /readyz `informers` (watch caches synced), `api` (the API server answered within
  `api_stale_after`: a watch event, an executor write, or the loop's own GET /version probe, sent
  only after API_PROBE_AFTER seconds without any other answer), `conf` (a conf is loaded).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from prometheus_client import CollectorRegistry

from scheduler_ext.cache.executor import Executor
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.run.conf_source import ConfSource
from scheduler_ext.run.options import RunOptions
from tidemark.kube.client import KubeError, request_json
from tidemark.serving import CheckResult, ServingServer

log = logging.getLogger(__name__)

#: with nothing else heard for this long, the loop asks GET /version
API_PROBE_AFTER: Final = 10.0
#: a session running longer than this makes /healthz fail
SESSION_STUCK_AFTER: Final = 300.0


class Health:
    """The loop's heartbeat, the API contact, the checks, and the server that serves them."""

    def __init__(
        self,
        api_client: Any,
        options: RunOptions,
        registry: CollectorRegistry,
        *,
        cache: LiveCache,
        executor: Executor,
        conf_source: ConfSource,
        loop_alive: Callable[[], bool],
        clock: Callable[[], float],
    ) -> None:
        self._api = api_client
        self._options = options
        self._cache = cache
        self._executor = executor
        self._conf_source = conf_source
        self._loop_alive = loop_alive
        self._clock = clock
        self._heartbeat = clock()
        self._session_started: float | None = None
        self._probe_ok: float | None = None
        self._last_probe = float("-inf")
        self.server = ServingServer(
            options.listen_address,
            registry,
            healthz={"loop": self.check_loop},
            readyz={"informers": self.check_synced, "api": self.check_api, "conf": self.check_conf},
        )
        #: vc-scheduler's --enable-healthz listener (default :11251, where Volcano's liveness probe
        #: looks): the same checks on a second address; None when not asked for
        self.healthz_server: ServingServer | None = None
        if options.healthz_address is not None and options.healthz_address != options.listen_address:
            self.healthz_server = ServingServer(
                options.healthz_address,
                registry,
                healthz={"loop": self.check_loop},
                readyz={"informers": self.check_synced, "api": self.check_api, "conf": self.check_conf},
            )

    # --- what the loop reports ---------------------------------------------------------------------------
    def beat(self) -> None:
        """A loop iteration starts."""
        self._heartbeat = self._clock()

    def session_started(self) -> None:
        self._session_started = self._clock()

    def session_ended(self) -> None:
        self._session_started = None

    def api_contact(self) -> float | None:
        """When the API server last answered (clock seconds), or None."""
        seen = [t for t in (self._cache.last_contact(), self._executor.last_success, self._probe_ok) if t is not None]
        return max(seen) if seen else None

    def maybe_probe_api(self) -> None:
        """GET /version when nothing was heard from the API server for API_PROBE_AFTER seconds."""
        now = self._clock()
        contact = self.api_contact()
        if (contact is not None and now - contact < API_PROBE_AFTER) or now - self._last_probe < API_PROBE_AFTER:
            return
        self._last_probe = now
        try:
            request_json(self._api, "GET", "/version", timeout=(2.0, 2.0))
        except KubeError as exc:
            log.debug("API probe: %s", exc)
            return
        self._probe_ok = self._clock()

    # --- checks ------------------------------------------------------------------------------------------
    def check_loop(self) -> CheckResult:
        if not self._loop_alive():
            return False, "the scheduling loop is not running"
        now = self._clock()
        started = self._session_started
        if started is not None:
            return (now - started < SESSION_STUCK_AFTER), f"in a session for {now - started:.0f}s"
        quiet = now - self._heartbeat
        limit = max(60.0, 10 * self._options.schedule_period)
        return quiet < limit, f"last loop iteration {quiet:.1f}s ago"

    def check_synced(self) -> CheckResult:
        synced = self._cache.synced()
        return synced, "watch caches synced" if synced else "watch caches not synced yet"

    def check_api(self) -> CheckResult:
        contact = self.api_contact()
        if contact is None:
            return False, "the API server has not answered yet"
        age = self._clock() - contact
        return age < self._options.api_stale_after, f"API server last answered {age:.1f}s ago"

    def check_conf(self) -> CheckResult:
        cur = self._conf_source.current
        return cur is not None, f"generation {cur.generation}" if cur else "no conf"
