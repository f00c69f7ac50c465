"""Network QoS benchmark: online request/response latency with and without offline bulk traffic, shaping off vs on.

Usage (root, iperf3): python benchmarks/bench_netqos.py [--seconds 8] [--rounds 3] [--out FILE.json]

The node is the test suite's namespace node (tests/fixtures/netns.py): a 200 Mbit/s wire (TBF, 20 ms
of queue, as a NIC's ring and qdisc) to a remote namespace, an online and an offline pod behind veths.
Online: a request/response loop (64-byte request, 64-byte reply, TCP_NODELAY, one every 2 ms) from
the online pod to an echo server on the remote, timing every round trip. Offline: two iperf3 bulk
TCP flows from the offline pod, one download and one upload, for the whole round.
Scenarios: idle (no offline traffic), bulk with shaping off, bulk with shaping on (the agent's own
sensing, decision and executor every second with the default settings and `nicSpeed: 200M`: offline
ceiling 40 % = 80 Mbit/s per direction), and idle with shaping on. Writes the JSON and a PNG plot
(matplotlib, the `bench` extra; without it the plot is skipped with a message).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

from agent.act.tc_writer import TcJournal, TcWriter  # noqa: E402
from agent.config import NetworkQosConfig  # noqa: E402
from agent.decide.netqos import NetState, decide_netqos  # noqa: E402
from agent.sense.network import NetSensor, PodNet  # noqa: E402
from tests.fixtures.netns import Node, skip_reason  # noqa: E402

ECHO_PORT = 7000
SERVER = f"""
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.1.2", {ECHO_PORT})); s.listen(8)
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(64)
        if not d: return
        c.sendall(d)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"""
CLIENT = f"""
import json, socket, sys, time
seconds, gap = float(sys.argv[1]), float(sys.argv[2])
c = socket.create_connection(("198.18.1.2", {ECHO_PORT}), timeout=5)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
msg, rtts, end = b"x" * 64, [], time.monotonic() + seconds
while time.monotonic() < end:
    t0 = time.perf_counter(); c.sendall(msg); got = 0
    while got < 64:
        got += len(c.recv(64 - got))
    rtts.append(time.perf_counter() - t0)
    time.sleep(gap)
print(json.dumps(rtts))
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Agent(threading.Thread):
    """The agent's network loop: sense, decide, apply, every `period` (as the daemon runs it)."""

    def __init__(self, node: Node, config: NetworkQosConfig, journal: str) -> None:
        super().__init__(daemon=True)
        from pyroute2 import IPRoute

        self.node, self.config = node, config
        self.sensor = NetSensor(node_netns=node.node)
        self.writer = TcWriter(TcJournal(journal, fsync=False), ipr=lambda: IPRoute(netns=node.node))
        self.stop = threading.Event()
        self.ceilings: list[int] = []
        self.pods = [
            PodNet("uid-on", "default/web", offline=False, pid=node.pids["on"]),
            PodNet("uid-off", "batch/bulk", offline=True, pid=node.pids["off"]),
        ]

    def step(self, state: NetState) -> NetState:
        now = time.monotonic()
        plan = decide_netqos(self.sensor.sample(now, self.pods), self.config, state, now)
        for o in self.writer.apply(plan.shapes):
            if not o.ok:
                print(f"  agent: {o.veth}: {o.error}", file=sys.stderr)
        self.ceilings.append(plan.ceiling_download_bps)
        return plan.next_state

    def run(self) -> None:
        state = self.step(NetState())
        while not self.stop.wait(self.config.period):
            state = self.step(state)

    def finish(self) -> None:
        self.stop.set()
        self.join()
        self.writer.restore()


def round_trip_times(node: Node, seconds: float, bulk: bool) -> tuple[list[float], float, float]:
    flows = []
    if bulk:
        flows = [
            node.flow("off", 5202, seconds + 2, download=True),
            node.flow("off", 5203, seconds + 2, download=False),
        ]
        time.sleep(1.0)  # let the bulk flows fill the queues first
    client = subprocess.run(
        node.exec(node.pod("on"), sys.executable, "-c", CLIENT, str(seconds), "0.002"),
        capture_output=True,
        text=True,
        check=True,
    )
    rates = []
    for f in flows:
        out, _ = f.communicate(timeout=60)
        rates.append(float(json.loads(out)["end"]["sum_received"]["bits_per_second"]))
    return json.loads(client.stdout), rates[0] if rates else 0.0, rates[1] if rates else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "netqos-latency.json"))
    ns = ap.parse_args()
    why = skip_reason()
    if why:
        print(f"skipped: {why}")
        return 0
    node = Node(prefix=f"tqb{os.getpid() % 10000}", wire_bps=200_000_000)
    config = replace(NetworkQosConfig(enabled=True, interface="nic0"), nic_speed=node.wire_bps)
    journal = f"/tmp/{node.prefix}-netqos-journal.json"
    scenarios = [
        ("idle, shaping off", False, False),
        ("bulk, shaping off", True, False),
        ("bulk, shaping on", True, True),
        ("idle, shaping on", False, True),
    ]
    results: list[dict[str, Any]] = []
    try:
        node.up()
        server = subprocess.Popen(node.exec(node.remote, sys.executable, "-c", SERVER))
        node.procs.append(server)
        for port in (5202, 5203):
            node.server(port)
        time.sleep(0.3)
        for name, bulk, shaped in scenarios:
            rtts: list[float] = []
            p99s: list[float] = []
            down: list[float] = []
            up: list[float] = []
            for _ in range(ns.rounds):
                agent = Agent(node, config, journal) if shaped else None
                if agent:
                    agent.start()
                    time.sleep(1.5)
                try:
                    r, d, u = round_trip_times(node, ns.seconds, bulk)
                finally:
                    if agent:
                        agent.finish()
                rtts += r
                p99s.append(pct(r, 0.99))
                down.append(d)
                up.append(u)
            row = {
                "scenario": name,
                "samples": len(rtts),
                "p50_ms": round(pct(rtts, 0.50) * 1e3, 3),
                "p99_ms": round(pct(rtts, 0.99) * 1e3, 3),
                "p999_ms": round(pct(rtts, 0.999) * 1e3, 3),
                "max_ms": round(max(rtts) * 1e3, 3),
                "p99_ms_per_round": [round(v * 1e3, 3) for v in p99s],
                "offline_download_mbps": round(statistics.mean(down) / 1e6, 1),
                "offline_upload_mbps": round(statistics.mean(up) / 1e6, 1),
            }
            results.append(row)
            print(
                f"{name:<20} p50 {row['p50_ms']:7.2f} ms  p99 {row['p99_ms']:7.2f} ms  "
                f"(rounds {row['p99_ms_per_round']})  max {row['max_ms']:7.2f} ms  "
                f"offline down {row['offline_download_mbps']} / up {row['offline_upload_mbps']} Mbit/s"
            )
    finally:
        node.down()
        if os.path.exists(journal):
            os.unlink(journal)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "network QoS: online request/response latency vs offline bulk traffic",
        "wire_mbps": node.wire_bps / 1e6,
        "offline_ceiling_mbps": config.offline_limit.resolve(node.wire_bps) / 1e6,  # type: ignore[operator]
        "seconds_per_round": ns.seconds,
        "rounds": ns.rounds,
        "machine": {
            "python": platform.python_version(),
            "kernel": platform.release(),
            "cores": os.cpu_count(),
            "loadavg": os.getloadavg(),
        },
        "results": results,
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    plot(results, out.with_suffix(".png"))
    return 0


def plot(results: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing (pip install -e '.[bench]'): no plot")
        return
    names = [r["scenario"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [r["p50_ms"] for r in results], width=0.4, label="p50")
    ax.bar([i + 0.2 for i in x], [r["p99_ms"] for r in results], width=0.4, label="p99")
    for i, r in enumerate(results):
        ax.annotate(f"{r['p99_ms']:.2f}", (i + 0.2, r["p99_ms"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("online round trip (ms, log)")
    ax.set_title("Online request/response latency, 200 Mbit/s NIC, offline bulk down+up")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
