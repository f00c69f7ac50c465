"""Network QoS for real: namespaces + veth + IFB + HTB through pyroute2, traffic from iperf3 (docs/testing.md,
"Network namespaces").

The node is a namespace of its own (tests/fixtures/netns.py): a 200 Mbit/s wire to a remote namespace,
an online and an offline pod namespace behind veths. The agent's sensing, pure decision and executor
run against it as they run on a node; only the addresses and the wire are the test's.
Throughputs are asserted as ratios of the configured rates, never as absolute timings.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.act.tc_writer import IFB_PREFIX, TcJournal, TcWriter
from agent.config import Bandwidth, NetworkQosConfig
from agent.daemon.netqos import NetworkQos
from agent.decide.netqos import NetState, Shape, decide_netqos
from agent.sense.network import NetSensor, PodNet
from tests.fixtures.netns import Node, result_bps

pytestmark = [pytest.mark.netns, pytest.mark.slow]

M = 1_000_000
CONFIG = NetworkQosConfig(
    enabled=True,
    interface="nic0",
    nic_speed=200 * M,
    offline_limit=Bandwidth(bits=50 * M),
    offline_min=Bandwidth(bits=10 * M),
    online_high=Bandwidth(bits=100 * M),
    online_low=Bandwidth(bits=40 * M),
    consecutive=2,
    period=0.5,
)


def _ipr(node: Node) -> Callable[[], Any]:
    from pyroute2 import IPRoute

    return lambda: IPRoute(netns=node.node)


def _pods(node: Node) -> list[PodNet]:
    return [
        PodNet("uid-on", "default/web", offline=False, pid=node.pids["on"]),
        PodNet("uid-off", "batch/job-0", offline=True, pid=node.pids["off"]),
    ]


def _agent(node: Node, tmp_path: Path) -> tuple[NetSensor, TcWriter]:
    sensor = NetSensor(node_netns=node.node)
    writer = TcWriter(TcJournal(str(tmp_path / "netqos-journal.json"), fsync=False), ipr=_ipr(node))
    return sensor, writer


def _assert_clean(node: Node, tmp_path: Path) -> None:
    for dev in ("veth-off", "veth-on"):
        shown = node.qdiscs(dev)
        assert "htb" not in shown and "ingress" not in shown, shown
    assert IFB_PREFIX not in node.links()
    journal = TcJournal(str(tmp_path / "netqos-journal.json"))
    journal.load()
    assert journal.links == {}


def test_sensing_finds_each_pods_veth(netns_node: Node, tmp_path: Path) -> None:
    sensor, _ = _agent(netns_node, tmp_path)
    first = sensor.sample(time.monotonic(), _pods(netns_node))
    assert first.nic == "nic0" and first.nic_rx_bps is None  # no rate before two samples
    assert [(p.key, p.veth, p.host_network) for p in first.pods] == [
        ("default/web", "veth-on", False),
        ("batch/job-0", "veth-off", False),
    ]
    # the default route's interface is found when none is configured
    second = sensor.sample(time.monotonic() + 0.5, _pods(netns_node), interface="")
    assert second.nic == "nic0" and second.nic_rx_bps is not None and second.pods[1].tx_bps is not None
    # a process in the node's own namespace is on the host network: no veth
    sleeper = subprocess.Popen(netns_node.exec(netns_node.node, "sleep", "30"))
    try:
        deadline = time.monotonic() + 5
        while sensor.on_host_network(sleeper.pid) is not True and time.monotonic() < deadline:
            time.sleep(0.02)
        snap = sensor.sample(time.monotonic() + 1, [PodNet("uid-h", "batch/hostnet", True, pid=sleeper.pid)])
        assert snap.pods[0].host_network and snap.pods[0].veth is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_one_broken_interface_never_stops_the_rest(netns_node: Node, tmp_path: Path) -> None:
    _, writer = _agent(netns_node, tmp_path)
    # someone else's root qdisc on the online veth (e.g. the CNI bandwidth plugin): left alone
    subprocess.run(
        [
            "tc",
            "-n",
            netns_node.node,
            "qdisc",
            "add",
            "dev",
            "veth-on",
            "root",
            "tbf",
            "rate",
            "1gbit",
            "burst",
            "64kb",
            "latency",
            "20ms",
        ],
        check=True,
    )
    shapes = [
        Shape("a", "ns/gone", "veth-gone", None, 10 * M, 10 * M),
        Shape("b", "ns/foreign", "veth-on", None, 10 * M, 10 * M),
        Shape("c", "ns/job", "veth-off", None, 20 * M, 30 * M),
    ]
    outcomes = {o.veth: o for o in writer.apply(shapes)}
    assert not outcomes["veth-gone"].ok and "not found" in outcomes["veth-gone"].error
    assert not outcomes["veth-on"].ok and "someone else" in outcomes["veth-on"].error
    assert outcomes["veth-off"].ok and outcomes["veth-off"].action == "shape"
    assert "tbf" in netns_node.qdiscs("veth-on") and "htb" not in netns_node.qdiscs("veth-on")
    assert "htb 7464:" in netns_node.qdiscs("veth-off") and "ingress" in netns_node.qdiscs("veth-off")
    # the same plan again is a no-op; a new ceiling changes the class in place
    again = {o.veth: o for o in writer.apply(shapes)}
    assert again["veth-off"].action == "unchanged"
    changed = {o.veth: o for o in writer.apply([Shape("c", "ns/job", "veth-off", None, 25 * M, 30 * M)])}
    assert changed["veth-off"].action == "shape"
    classes = subprocess.run(
        ["tc", "-n", netns_node.node, "class", "show", "dev", "veth-off"], capture_output=True, text=True, check=True
    ).stdout
    assert "rate 25Mbit" in classes, classes
    # a fresh writer (a restarted agent) restores from the journal alone
    _, fresh = _agent(netns_node, tmp_path)
    fresh.journal.load()
    assert [o.ok for o in fresh.restore()] == [True]
    _assert_clean(netns_node, tmp_path)
    assert "tbf" in netns_node.qdiscs("veth-on")  # never the agent's, never removed


def _flows(node: Node, download: bool, seconds: float = 4) -> tuple[float, float]:
    on = node.flow("on", 5201, seconds, download=download)
    off = node.flow("off", 5202, seconds, download=download)
    return result_bps(on), result_bps(off)


def test_offline_held_online_protected_watermarks_and_restore(netns_node: Node, tmp_path: Path) -> None:
    node = netns_node
    sensor, writer = _agent(node, tmp_path)
    node.server(5201)
    node.server(5202)
    wire = node.wire_bps

    # unshaped: the offline flow alone takes nearly the whole wire, far more than the ceiling below.
    # Alone, because two unshaped TCP flows through one bottleneck need not split it evenly: measured here,
    # the offline one of a pair got 38-52 Mbit/s in 3 of 12 runs (a CI run failed on three such in a row)
    # while alone it got 187-190 Mbit/s in all 5.
    off_free = result_bps(node.flow("off", 5202, 2, download=True))
    assert off_free > 2 * 50 * M, off_free
    print(f"unshaped: offline {off_free / M:.1f} Mbit/s")

    state = NetState()
    t0 = time.monotonic()
    sensor.sample(t0, _pods(node))
    plan = decide_netqos(sensor.sample(t0 + 0.01, _pods(node)), CONFIG, state, t0 + 0.01)
    assert [(s.veth, s.download_bps, s.upload_bps) for s in plan.shapes] == [("veth-off", 50 * M, 50 * M)]
    assert all(o.ok for o in writer.apply(plan.shapes))
    state = plan.next_state

    # download and upload: the offline flow is held near its ceiling, the online flow keeps the rest
    for download in (True, False):
        for _ in range(3):
            on_bps, off_bps = _flows(node, download=download)
            print(
                f"shaped {'download' if download else 'upload'}: online {on_bps / M:.1f} Mbit/s, "
                f"offline {off_bps / M:.1f}"
            )
            # held at its ceiling (the isolation), on every try
            assert off_bps < 1.15 * 50 * M, (download, on_bps, off_bps)
            assert on_bps > 0.7 * (wire - 50 * M), (download, on_bps, off_bps)
            # not starved below it: the online flow may still win more than its share of the wire for a while
            # (the shaped offline flow got 25-48 Mbit/s over 11 runs here), so up to three tries
            if off_bps > 0.2 * 50 * M:
                break
        assert off_bps > 0.2 * 50 * M, (download, on_bps, off_bps)

    # watermarks: online download past 100M lowers the ceiling to 10M; it comes back after online stops
    on = node.flow("on", 5201, 5, download=True)
    off = node.flow("off", 5202, 14, download=True)
    limited_at = restored_at = None
    off_rates: list[tuple[bool, float]] = []
    reasons: list[str] = []
    qos = NetworkQos(sensor, writer)  # the daemon's cycle: sense -> decide -> act, with its events
    qos.state = state
    start = time.monotonic()
    while time.monotonic() - start < 13.5:
        time.sleep(CONFIG.period)
        now = time.monotonic()
        before = qos.state
        plan, events = qos.tick(CONFIG, _pods(node), now)
        reasons += [e.reason for e in events]
        assert plan.enabled and qos.last is plan, plan.explanations
        if plan.next_state.download.limited and not before.download.limited:
            limited_at = now - start
        if before.download.limited and not plan.next_state.download.limited:
            restored_at = now - start
        assert qos.last_snapshot is not None
        rate = qos.last_snapshot.pods[1].tx_bps
        if rate is not None:
            off_rates.append((plan.next_state.download.limited, rate))
    state = qos.state
    snap = qos.last_snapshot
    result_bps(on)
    result_bps(off)
    print(f"limited at {limited_at} s, restored at {restored_at} s; offline rates (limited, Mbit/s):")
    print([(lim, round(r / M, 1)) for lim, r in off_rates])
    assert limited_at is not None and limited_at < 5, off_rates
    assert restored_at is not None and restored_at > limited_at, off_rates
    held = [r for lim, r in off_rates if lim][2:]  # a second to settle after the class changed
    free = [r for lim, r in off_rates[-6:] if not lim]
    assert held and statistics.median(held) < 1.5 * 10 * M, off_rates
    assert free and statistics.median(free) > 0.3 * 50 * M, off_rates  # back above offlineMin
    assert max(r for _, r in off_rates[-4:]) < 1.15 * 50 * M, off_rates
    assert reasons == ["NetworkCeilingLowered", "NetworkCeilingRestored"], reasons
    assert qos.stats.operations[("shape", "failed")] == 0

    # disable (restore) leaves no qdisc and no IFB behind
    assert all(o.ok for o in writer.apply(decide_netqos(snap, NetworkQosConfig(), state, now).shapes))
    _assert_clean(node, tmp_path)


def test_a_lost_ifb_is_made_anew_with_its_redirect(netns_node: Node, tmp_path: Path) -> None:
    _, writer = _agent(netns_node, tmp_path)
    shape = Shape("c", "ns/job", "veth-off", None, 20 * M, 30 * M)
    (first,) = writer.apply([shape])
    ifb = writer.journal.links["veth-off"].ifb
    subprocess.run(["ip", "-n", netns_node.node, "link", "del", ifb], check=True)
    (again,) = writer.apply([shape])
    assert first.ok and again.ok and again.action == "shape"
    filters = subprocess.run(
        ["tc", "-n", netns_node.node, "filter", "show", "dev", "veth-off", "ingress"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"to device {ifb}" in filters, filters
    assert "rate 30Mbit" in subprocess.run(
        ["tc", "-n", netns_node.node, "class", "show", "dev", ifb], capture_output=True, text=True, check=True
    ).stdout
    assert all(o.ok for o in writer.restore())
    _assert_clean(netns_node, tmp_path)
