"""The agent's /metrics as the live view reads them (localcluster/view.py): where the node's agent serves them, one
GET with a short timeout, and the offline tier's gauges parsed from the exposition text. Pure but for `http_get`
(tests/unit/localcluster/test_view.py)."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

#: the agent's gauges the view shows (agent/daemon/metrics.py, `_tier_cpu_gauges`) and where it serves them
TIER_CEILING: Final = "tidemark_agent_tier_cpu_ceiling_cores"
ONLINE_WAIT: Final = "tidemark_agent_online_cpu_wait_ratio"
ONLINE_WAIT_BASE: Final = "tidemark_agent_online_cpu_wait_baseline_ratio"
#: the worst online pod's run delay per slice and its baseline (seconds; the `slice` signal)
ONLINE_DELAY: Final = "tidemark_agent_online_cpu_delay_per_slice_seconds"
ONLINE_DELAY_BASE: Final = "tidemark_agent_online_cpu_delay_baseline_seconds"
#: the I/O controller's (agent/daemon/metrics.py `_tier_memory_io_gauges`): its signal and its limit (0: none)
ONLINE_IO_WAIT: Final = "tidemark_agent_online_io_wait_ratio"
OFFLINE_IO_LIMIT: Final = "tidemark_agent_offline_io_limit_bytes_per_second"
AGENT_NAMESPACE: Final = "tidemark-system"
AGENT_NAME_LABEL: Final = "tidemark-agent"  # app.kubernetes.io/name
AGENT_METRICS_PORT: Final = 9102
SCRAPE_TIMEOUT: Final = 0.3  # a frame every half second: a hung agent must not stall the view


@dataclass(frozen=True)
class AgentReading:
    """What one scrape of the agent's /metrics gave: `scraped` False when it failed (shown as '?'); a gauge
    None when the agent does not publish it (the tier off, or no decision yet)."""

    scraped: bool = False
    ceiling: float | None = None  # cores
    online_wait: float | None = None  # fraction of the period
    online_delay_ms: float | None = None  # the worst online pod's run delay per run slice (the shipped signal)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus exposition text -> {name or name{labels}: value}; comments, blank and bad lines skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        cut = line.rfind("}") + 1 if "{" in line else line.find(" ")  # labels may hold spaces
        if cut <= 0:
            continue
        name, rest = line[:cut].strip(), line[cut:].split()  # `value` or `value timestamp`
        with contextlib.suppress(ValueError):
            if name and rest:
                out[name] = float(rest[0])
    return out


def reading_of(text: str | None) -> AgentReading:
    """The tier's gauges from one scrape (None: the scrape failed)."""
    if text is None:
        return AgentReading()
    m = parse_metrics(text)
    delay = m.get(ONLINE_DELAY)
    return AgentReading(True, m.get(TIER_CEILING), m.get(ONLINE_WAIT), None if delay is None else delay * 1000.0)


def agent_metrics_url(pods: Sequence[Mapping[str, Any]], node_name: str) -> str | None:
    """The /metrics address of the node's running agent pod (its pod IP: the host routes the pod network)."""
    for p in pods:
        md, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
        labels = md.get("labels") or {}
        if (
            labels.get("app.kubernetes.io/name") == AGENT_NAME_LABEL
            and not md.get("deletionTimestamp")
            and spec.get("nodeName") in (None, node_name)
            and status.get("phase") == "Running"
            and status.get("podIP")
        ):
            return f"http://{status['podIP']}:{AGENT_METRICS_PORT}/metrics"
    return None


def http_get(url: str) -> str:
    """One GET, no proxy (the pod network is this machine's), a short timeout."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=SCRAPE_TIMEOUT) as r:
        return str(r.read().decode())
