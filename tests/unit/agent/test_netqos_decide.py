"""Network QoS decisions (pure): thresholds, online traffic, hysteresis per direction, the split, unshaped pods."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.config import Bandwidth, NetworkQosConfig, load_config, parse_bandwidth
from agent.decide.netqos import (
    MIN_POD_BPS,
    DirectionState,
    NetState,
    Thresholds,
    decide_netqos,
    online_rate,
    resolve,
    split,
    step,
)
from agent.model import NetPod, NetSnapshot

G = 10**9
M = 10**6
ON = NetworkQosConfig(enabled=True)  # 40 % / 10 % / 80 % / 50 % of the NIC
T = Thresholds(limit=400 * M, minimum=100 * M, high=800 * M, low=500 * M)


def pod(name: str, offline: bool = True, veth: str | None = "veth", rx: float = 0.0, tx: float = 0.0) -> NetPod:
    return NetPod(
        uid=f"uid-{name}",
        key=f"ns/{name}",
        offline=offline,
        veth=None if veth is None else f"{veth}{name}",
        veth_index=7,
        rx_bps=rx,
        tx_bps=tx,
    )


def snap(
    t: float, rx: float | None, tx: float | None, pods: tuple[NetPod, ...] = (), speed: int | None = G
) -> NetSnapshot:
    return NetSnapshot(time=t, nic="eth0", nic_speed_bps=speed, nic_rx_bps=rx, nic_tx_bps=tx, pods=pods)


# --- settings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("40%", Bandwidth(percent=40.0)),
        ("12.5 %", Bandwidth(percent=12.5)),
        ("100M", Bandwidth(bits=100 * M)),
        ("100Mbit", Bandwidth(bits=100 * M)),
        ("1.5Gbit", Bandwidth(bits=1_500_000_000)),
        ("500kbit/s", Bandwidth(bits=500_000)),
        ("800000", Bandwidth(bits=800_000)),
        (800000, Bandwidth(bits=800_000)),
    ],
)
def test_bandwidth_parses(raw: object, expected: Bandwidth) -> None:
    assert parse_bandwidth(raw) == expected


@pytest.mark.parametrize("raw", ["0%", "101%", "0", 0, -5, True, None, "fast", "10MB", "1e9", "٣M", 1.5, "-3M"])
def test_bandwidth_rejects(raw: object) -> None:
    assert parse_bandwidth(raw) is None


def test_network_qos_is_off_by_default_and_keys_parse() -> None:
    config, problems = load_config({})
    assert config.network_qos.enabled is False and problems == ()
    config, problems = load_config(
        {
            "networkQoS": {
                "enabled": True,
                "interface": "eth1",
                "nicSpeed": "10G",
                "offlineLimit": "300M",
                "offlineMin": "20M",
                "onlineHighWatermark": "70%",
                "onlineLowWatermark": "40%",
                "consecutive": 2,
                "period": "500ms",
            }
        }
    )
    assert problems == ()
    net = config.network_qos
    assert (net.enabled, net.interface, net.nic_speed, net.consecutive, net.period) == (True, "eth1", 10 * G, 2, 0.5)
    assert net.offline_limit == Bandwidth(bits=300 * M) and net.offline_min == Bandwidth(bits=20 * M)
    assert net.online_high == Bandwidth(percent=70.0) and net.online_low == Bandwidth(percent=40.0)


def test_bad_network_values_fall_back_with_their_paths() -> None:
    config, problems = load_config(
        {"networkQoS": {"offlineLimit": "lots", "interface": "x" * 16, "nicSpeed": "50%", "consecutive": 0}}
    )
    paths = sorted(p.path for p in problems)
    assert paths == [
        "networkQoS.consecutive",
        "networkQoS.interface",
        "networkQoS.nicSpeed",
        "networkQoS.offlineLimit",
    ]
    assert config.network_qos == NetworkQosConfig()


def test_order_checks_in_the_same_unit() -> None:
    config, problems = load_config({"networkQoS": {"offlineLimit": "10M", "offlineMin": "20M"}})
    assert [p.path for p in problems] == ["networkQoS.offlineMin"]
    assert config.network_qos.offline_min == Bandwidth(bits=10 * M)
    config, problems = load_config({"networkQoS": {"onlineHighWatermark": "50%", "onlineLowWatermark": "50%"}})
    assert [p.path for p in problems] == ["networkQoS.onlineLowWatermark"]
    assert config.network_qos.online_high == Bandwidth(percent=80.0)
    assert config.network_qos.online_low == Bandwidth(percent=50.0)
    # mixed units cannot be compared before the NIC speed is known: accepted, checked per decision
    config, problems = load_config({"networkQoS": {"onlineHighWatermark": "500M", "onlineLowWatermark": "60%"}})
    assert problems == ()


def test_resolve_percent_needs_a_speed() -> None:
    assert resolve(ON, G) == (T, "")
    thresholds, why = resolve(ON, None)
    assert thresholds is None and "nicSpeed" in why
    # the configured speed wins over the link's
    assert resolve(replace(ON, nic_speed=2 * G), G)[0] == Thresholds(800 * M, 200 * M, 1600 * M, 1000 * M)
    absolute = replace(
        ON,
        offline_limit=Bandwidth(bits=50 * M),
        offline_min=Bandwidth(bits=5 * M),
        online_high=Bandwidth(bits=80 * M),
        online_low=Bandwidth(bits=40 * M),
    )
    assert resolve(absolute, None) == (Thresholds(50 * M, 5 * M, 80 * M, 40 * M), "")


def test_resolve_mixed_units_checked_per_decision() -> None:
    bad = replace(ON, online_high=Bandwidth(bits=400 * M), online_low=Bandwidth(percent=50.0))
    thresholds, why = resolve(bad, G)
    assert thresholds is None and "below onlineHighWatermark" in why
    over = replace(ON, offline_min=Bandwidth(bits=900 * M))
    thresholds, why = resolve(over, G)
    assert thresholds == Thresholds(400 * M, 400 * M, 800 * M, 500 * M) and "exceeds offlineLimit" in why


# --- online traffic and hysteresis ----------------------------------------------------------------------


def test_online_is_nic_minus_offline_veths_never_negative() -> None:
    assert online_rate(900.0, [100.0, None, 50.0]) == 750.0
    assert online_rate(100.0, [300.0]) == 0.0  # pod-to-pod traffic crosses veths, not the NIC
    assert online_rate(None, [1.0]) is None


def run(rates: list[float | None], n: int = 3, start: DirectionState | None = None) -> list[DirectionState]:
    s = start or DirectionState()
    out = []
    for r in rates:
        s = step(s, r, T, n)
        out.append(s)
    return out


def test_n_consecutive_samples_past_high_lower_the_ceiling() -> None:
    states = run([900 * M, 800 * M, 700 * M, 850 * M, 900 * M, 1000 * M])
    assert [s.limited for s in states] == [False, False, False, False, False, True]
    assert states[1].over == 2 and states[2].over == 0


def test_n_consecutive_samples_under_low_restore_it() -> None:
    start = DirectionState(limited=True)
    states = run([500 * M, 400 * M, 600 * M, 100 * M, 0.0, 500 * M], start=start)
    assert [s.limited for s in states] == [True, True, True, True, True, False]


def test_between_the_watermarks_nothing_moves() -> None:
    for limited in (False, True):
        states = run([600 * M] * 10, start=DirectionState(limited=limited))
        assert all(s.limited == limited for s in states)


def test_unknown_rate_resets_both_counts() -> None:
    states = run([900 * M, 900 * M, None, 900 * M, 900 * M])
    assert not any(s.limited for s in states)
    states = run([100 * M, 100 * M, None, 100 * M], start=DirectionState(limited=True))
    assert all(s.limited for s in states)


@given(st.lists(st.floats(min_value=0, max_value=2e9), max_size=40), st.integers(min_value=1, max_value=5))
def test_hysteresis_properties(rates: list[float], n: int) -> None:
    s = DirectionState()
    history: list[float] = []
    for r in rates:
        prev = s
        s = step(s, r, T, n)
        history.append(r)
        if s.limited and not prev.limited:
            assert all(x >= T.high for x in history[-n:]) and len(history) >= n
        if prev.limited and not s.limited:
            assert all(x <= T.low for x in history[-n:]) and len(history) >= n
        if T.low < r < T.high:
            assert s.limited == prev.limited


# --- the plan ----------------------------------------------------------------------------------------


def test_off_shapes_nothing() -> None:
    plan = decide_netqos(snap(0, 0, 0, (pod("a"),)), NetworkQosConfig(), NetState(), 0)
    assert not plan.enabled and plan.shapes == () and "off" in plan.explanations[0]


def test_no_sample_yet_keeps_state() -> None:
    state = NetState(DirectionState(limited=True))
    plan = decide_netqos(None, ON, state, 0)
    assert plan.enabled and plan.shapes == () and plan.next_state == state


def test_calm_node_gives_offline_limit_split_evenly() -> None:
    pods = (pod("b"), pod("a"), pod("web", offline=False), pod("c"), pod("d"))
    plan = decide_netqos(snap(10, 100 * M, 100 * M, pods), ON, NetState(), 10)
    assert [s.key for s in plan.shapes] == ["ns/a", "ns/b", "ns/c", "ns/d"]  # online pods never shaped
    assert {s.download_bps for s in plan.shapes} == {100 * M}
    assert {s.upload_bps for s in plan.shapes} == {100 * M}
    assert (plan.ceiling_download_bps, plan.ceiling_upload_bps) == (400 * M, 400 * M)


def test_each_direction_has_its_own_hysteresis() -> None:
    # download: NIC rx 950M, offline veths tx 100M -> online 850M (past 800M); upload: NIC tx 300M -> calm
    pods = (pod("a", tx=100 * M, rx=50 * M),)
    state = NetState()
    for t in range(3):
        plan = decide_netqos(snap(t, 950 * M, 300 * M, pods), ON, state, t)
        state = plan.next_state
    assert state.download.limited and not state.upload.limited
    assert plan.shapes[0].download_bps == 100 * M and plan.shapes[0].upload_bps == 400 * M
    assert plan.online_download_bps == 850 * M and plan.online_upload_bps == 250 * M
    assert any("lowered to 100 Mbit/s" in e for e in plan.explanations)
    # recovers after N samples under the low watermark
    for t in range(3, 6):
        plan = decide_netqos(snap(t, 200 * M, 300 * M, pods), ON, state, t)
        state = plan.next_state
    assert not state.download.limited and plan.shapes[0].download_bps == 400 * M
    assert any("restored to 400 Mbit/s" in e for e in plan.explanations)


def test_offline_traffic_alone_never_lowers_the_ceiling() -> None:
    pods = (pod("a", tx=900 * M), pod("b", tx=90 * M))
    state = NetState()
    for t in range(10):
        state = decide_netqos(snap(t, 1000 * M, 0, pods), ON, state, t).next_state
    assert not state.download.limited


def test_host_network_and_missing_veth_are_reported_unshaped() -> None:
    pods = (
        replace(pod("h"), host_network=True, veth=None),
        pod("x", veth=None),
        pod("a"),
        pod("web", offline=False, veth=None),
    )
    plan = decide_netqos(snap(0, 0, 0, pods), ON, NetState(), 0)
    assert [s.key for s in plan.shapes] == ["ns/a"]
    assert [(u.key, u.reason) for u in plan.unshaped] == [("ns/h", "hostNetwork"), ("ns/x", "NoVeth")]
    assert plan.shapes[0].download_bps == 400 * M  # the only shaped pod gets the whole ceiling
    assert any("host network" in e for e in plan.explanations)
    body = plan.to_json()
    assert body["unshaped"] == [{"pod": "ns/h", "reason": "hostNetwork"}, {"pod": "ns/x", "reason": "NoVeth"}]
    assert body["shaped"] == [{"pod": "ns/a", "veth": "vetha", "download_bps": 400 * M, "upload_bps": 400 * M}]


def test_no_offline_pods_no_ceiling() -> None:
    plan = decide_netqos(snap(0, 0, 0, (pod("web", offline=False),)), ON, NetState(), 0)
    assert plan.shapes == () and plan.ceiling_download_bps == 0


def test_split_keeps_a_floor_per_pod() -> None:
    assert split(400 * M, 4) == 100 * M
    assert split(400, 4) == MIN_POD_BPS
    assert split(400 * M, 0) == 0
    pods = tuple(pod(f"p{i}") for i in range(8000))
    plan = decide_netqos(snap(0, 0, 0, pods), ON, NetState(), 0)
    assert {s.download_bps for s in plan.shapes} == {MIN_POD_BPS}
    assert any("at least 100 kbit/s" in e for e in plan.explanations)


def test_unknown_speed_shapes_nothing_and_says_why() -> None:
    plan = decide_netqos(snap(0, 0, 0, (pod("a"),), speed=None), ON, NetState(DirectionState(True)), 0)
    assert plan.shapes == () and plan.next_state == NetState()
    assert any("nicSpeed" in e for e in plan.explanations)
    fixed = decide_netqos(snap(0, 0, 0, (pod("a"),), speed=None), replace(ON, nic_speed=G), NetState(), 0)
    assert fixed.shapes and fixed.nic_speed_bps == G


def test_stale_sample_keeps_the_state() -> None:
    limited = NetState(DirectionState(limited=True, clear=2), DirectionState())
    plan = decide_netqos(snap(0, 0, 0, (pod("a"),)), ON, limited, now=3.5)
    assert plan.next_state == limited and plan.shapes[0].download_bps == 100 * M
    assert any("old" in e for e in plan.explanations)
    fresh = decide_netqos(snap(0, 0, 0, (pod("a"),)), ON, limited, now=3.0)
    assert not fresh.next_state.download.limited


def test_unknown_nic_rate_holds_the_state() -> None:
    state = NetState(DirectionState(limited=True, clear=2))
    plan = decide_netqos(snap(0, None, None, (pod("a"),)), ON, state, 0)
    assert plan.next_state.download.limited and plan.online_download_bps is None
    assert any("unknown" in e for e in plan.explanations)


@given(
    st.lists(st.tuples(st.booleans(), st.booleans(), st.floats(0, 1e9), st.floats(0, 1e9)), max_size=12),
    st.floats(0, 2e9),
    st.floats(0, 2e9),
)
def test_plan_properties(specs: list[tuple[bool, bool, float, float]], rx: float, tx: float) -> None:
    pods = tuple(
        replace(pod(f"p{i}", offline=off, rx=r, tx=t), host_network=hn) for i, (off, hn, r, t) in enumerate(specs)
    )
    plan = decide_netqos(snap(0, rx, tx, pods), ON, NetState(), 0)
    shaped = {s.key for s in plan.shapes}
    assert shaped == {p.key for p in pods if p.offline and not p.host_network}
    assert {u.key for u in plan.unshaped} == {p.key for p in pods if p.offline and p.host_network}
    for s in plan.shapes:
        assert s.download_bps >= MIN_POD_BPS and s.upload_bps >= MIN_POD_BPS
        assert s.download_bps * len(plan.shapes) <= max(plan.ceiling_download_bps, MIN_POD_BPS * len(plan.shapes))
    assert plan == decide_netqos(snap(0, rx, tx, pods), ON, NetState(), 0)  # same input, same output
