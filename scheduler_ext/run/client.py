"""The scheduler's API client: built from --kubeconfig (or in-cluster) with the scheduler's QPS and
burst, and one patch of the official client's per-request behaviour.

The patch (`throttle_refresh_hook`) exists because a kubeconfig- or in-cluster-loaded
`kubernetes.client.Configuration` carries a `refresh_api_key_hook` that re-applies the whole
kubeconfig before EVERY request, re-reading the proxy environment too: about a third of a bind's
client-side CPU at the bind rates `run` reaches (docs/benchmarks-e2e.md). The client offers no
option for it, so the hook is wrapped to run at most once per second; credentials are still
refreshed (exec plugins, rotated service-account tokens), at most a second late. It applies to every
client the Scheduler uses, an injected one included (tests measure what `run` does).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from scheduler_ext.run.options import RunOptions
from tidemark.kube.client import new_api_client

log = logging.getLogger(__name__)


def scheduler_api_client(options: RunOptions) -> Any:
    """A client as `run` uses it; KubeError when no kubeconfig or in-cluster config can be loaded."""
    return new_api_client(
        options.kubeconfig,
        qps=options.qps,
        burst=options.burst,
        pool_size=64,
        user_agent=f"tidemark-scheduler/{options.scheduler_name}",
    )


def throttle_refresh_hook(api_client: Any, interval: float = 1.0) -> None:
    """Run the client's credential refresh hook at most once per `interval` seconds (see the module doc)."""
    cfg = getattr(api_client, "configuration", None)
    hook = getattr(cfg, "refresh_api_key_hook", None)
    if cfg is None or hook is None:
        return
    lock = threading.Lock()
    last = [float("-inf")]
    inner = [hook]

    def throttled(configuration: Any) -> None:
        now = time.monotonic()
        with lock:
            if now - last[0] < interval:
                return
            last[0] = now
        inner[0](configuration)
        # The kubeconfig loader's hook re-installs itself on every call (kube_config._set_config
        # assigns refresh_api_key_hook again): keep the newest one as the inner hook and put the
        # throttle back, or only the first refresh would be throttled.
        current = getattr(configuration, "refresh_api_key_hook", None)
        if current is not throttled and current is not None:
            inner[0] = current
            configuration.refresh_api_key_hook = throttled

    cfg.refresh_api_key_hook = throttled


def warn_if_insecure(api_client: Any) -> None:
    """One warning line when TLS verification is off (insecure-skip-tls-verify), instead of
    urllib3's warning on every request."""
    if getattr(api_client.configuration, "verify_ssl", True) is False:
        import urllib3

        log.warning("TLS verification of the API server is off (insecure-skip-tls-verify)")
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
