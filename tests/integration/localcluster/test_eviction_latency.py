"""How long an eviction takes on the real node, from the agent's decision to the Eviction API's yes (issue 33,
"evictions that do not wait for the webhook": the agent asks in its NodeReport, the controller evicts).

The figure is the agent's own: `tidemark_agent_reaction_latency_seconds{action="evict"}` (agent/daemon/apiworker.py,
`stats.react("evict", ...)`): from the sample that triggered the decision to the eviction accepted (directly by the
API server with `--node-writes direct` or before this change; answered Evicted in the NodeReport now). The test
starts once the agent pod is Ready and settled (a previous test's restart or rollout is over), then scrapes the
agent's /metrics every SCRAPE_S while it evicts, so each eviction's value is the sum's step (evictions answered
together share their mean; the figure is the agent's, so the scrape rate does not change it). The same file run
on the code before the change gives the "before" figure
(docs/security.md, "Evictions"). Asserted: every offline pod evicted, none online, each eviction within 5 s.
"""

from __future__ import annotations

import re
import statistics
import time
import urllib.request

import pytest

from localcluster.realnode import RealNode
from localcluster.view import agent_metrics_url
from tests.fixtures.realnode import RealNamespace, set_cpu_watermarks
from tests.integration.localcluster.test_realnode import OFFLINE, ONLINE, quiet_and_cleared

pytestmark = pytest.mark.slow

PODS = 3
#: between scrapes of the agent's /metrics (each costs the agent a render of every series, under its CPU limit)
SCRAPE_S = 0.2
_SERIES = re.compile(r'^tidemark_agent_reaction_latency_seconds_(sum|count)\{action="evict"\} (\S+)$', re.M)


def _evict_figure(url: str) -> tuple[float, float]:
    """(count, sum) of the agent's evict reaction latency."""
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    got = {k: float(v) for k, v in _SERIES.findall(text)}
    return got.get("count", 0.0), got.get("sum", 0.0)


def test_eviction_latency_from_decision_to_accepted(real_node: RealNode, real_ns: RealNamespace) -> None:
    real_ns.cleanups.append(lambda: quiet_and_cleared(real_node, real_ns))
    real_node.wait_tidemark()
    names = [f"offline-{i}" for i in range(PODS)]
    for name in names:
        real_ns.create(real_ns.pod(name, annotations=OFFLINE))
    for name in names:
        real_ns.wait_running(name)
    spin = "taskset -c 0 sh -c 'while :; do :; done'"
    real_ns.create(real_ns.pod("online-spike", spin, requests={"cpu": "200m", "memory": "16Mi"}, annotations=ONLINE))
    real_ns.wait_running("online-spike")
    pods = real_ns.core.list_namespaced_pod("tidemark-system").items
    url = agent_metrics_url([real_ns.core.api_client.sanitize_for_serialization(p) for p in pods],
                            real_node.node_name)  # fmt: skip
    assert url, "the agent pod's /metrics address"
    count, total = _evict_figure(url)
    seconds: list[float] = []
    set_cpu_watermarks(real_node, 10, 5)
    deadline = time.monotonic() + 240

    def left() -> set[str]:
        return {p.metadata.name for p in real_ns.core.list_namespaced_pod(real_ns.name).items} & set(names)

    while (left() or len(seconds) < PODS) and time.monotonic() < deadline:
        c, s = _evict_figure(url)
        if c > count:
            seconds += [(s - total) / (c - count)] * int(c - count)
            count, total = c, s
        time.sleep(SCRAPE_S)
    print(f"\nevict reaction latency (s), {len(seconds)} evictions: median {statistics.median(seconds or [0]):.3f}, "
          f"each {[round(x, 3) for x in seconds]}")  # fmt: skip
    assert not left(), "every offline pod evicted"
    assert real_ns.get("online-spike").status.phase == "Running"
    assert len(seconds) >= PODS and max(seconds) < 5.0, seconds
