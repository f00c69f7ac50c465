"""Network QoS (docs/design.md, "Network QoS"): the offline ceiling and its split, a pure function.

`decide_netqos(snapshot, config, state, now) -> NetPlan`. Per direction (download = traffic into
pods, upload = traffic out of pods; a full-duplex NIC carries them independently):

- online traffic = the node NIC's rate minus the offline pods' veth rates, at least 0 (pod-to-pod
  traffic on the node crosses veths but not the NIC, so the difference can dip below zero);
- hysteresis as the CPU/memory watermarks: online >= `onlineHighWatermark` for N consecutive
  samples lowers the offline ceiling from `offlineLimit` to `offlineMin` (Volcano 1.11's rule);
  online <= `onlineLowWatermark` for N consecutive samples restores `offlineLimit`;
- the ceiling is split evenly among the shaped offline pods (each veth has its own HTB, so there is
  no shared parent to borrow from), at least `MIN_POD_BPS` each so a pod still makes progress;
- hostNetwork offline pods and offline pods whose veth was not found are reported unshaped;
- percent settings need the NIC speed; without it (and without absolute settings) nothing is
  shaped and the plan says why; a stale sample (older than 3 periods) keeps the state as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from agent.config import NetworkQosConfig
from agent.model import NetPod, NetSnapshot

Direction = Literal["download", "upload"]
DIRECTIONS: Final[tuple[Direction, ...]] = ("download", "upload")
#: the least ceiling one offline pod is left (bits/s), as the CPU quota's 20m floor
MIN_POD_BPS: Final = 100_000
STALE_PERIODS: Final = 3


@dataclass(frozen=True, slots=True)
class DirectionState:
    """Hysteresis of one direction: `limited` = the ceiling is at offlineMin."""

    limited: bool = False
    over: int = 0
    clear: int = 0


@dataclass(frozen=True, slots=True)
class NetState:
    download: DirectionState = field(default_factory=DirectionState)
    upload: DirectionState = field(default_factory=DirectionState)

    def of(self, d: Direction) -> DirectionState:
        return self.download if d == "download" else self.upload


@dataclass(frozen=True, slots=True)
class Shape:
    """HTB for one offline pod: `download_bps` on its veth's egress, `upload_bps` on the IFB its ingress feeds."""

    uid: str
    key: str
    veth: str
    veth_index: int | None
    download_bps: int
    upload_bps: int


@dataclass(frozen=True, slots=True)
class Unshaped:
    uid: str
    key: str
    reason: Literal["hostNetwork", "NoVeth"]


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The four settings resolved to bits/s."""

    limit: int
    minimum: int
    high: int
    low: int


@dataclass(frozen=True, slots=True)
class NetPlan:
    enabled: bool
    nic: str = ""
    nic_speed_bps: int | None = None
    thresholds: Thresholds | None = None
    #: per direction: the offline ceiling of all offline pods together (bits/s), 0 when nothing is shaped
    ceiling_download_bps: int = 0
    ceiling_upload_bps: int = 0
    online_download_bps: float | None = None
    online_upload_bps: float | None = None
    shapes: tuple[Shape, ...] = ()
    unshaped: tuple[Unshaped, ...] = ()
    explanations: tuple[str, ...] = ()
    next_state: NetState = field(default_factory=NetState)

    def ceiling(self, d: Direction) -> int:
        return self.ceiling_download_bps if d == "download" else self.ceiling_upload_bps

    def to_json(self) -> dict[str, object]:
        """The `network` section of `plan -o json`."""
        return {
            "enabled": self.enabled,
            "nic": self.nic,
            "nic_speed_bps": self.nic_speed_bps,
            "ceiling_bps": {"download": self.ceiling_download_bps, "upload": self.ceiling_upload_bps},
            "online_bps": {"download": self.online_download_bps, "upload": self.online_upload_bps},
            "limited": {"download": self.next_state.download.limited, "upload": self.next_state.upload.limited},
            "shaped": [
                {"pod": s.key, "veth": s.veth, "download_bps": s.download_bps, "upload_bps": s.upload_bps}
                for s in self.shapes
            ],
            "unshaped": [{"pod": u.key, "reason": u.reason} for u in self.unshaped],
            "explanations": list(self.explanations),
        }


def resolve(config: NetworkQosConfig, nic_speed_bps: int | None) -> tuple[Thresholds | None, str]:
    """The settings in bits/s, or None and the reason (a percent without a NIC speed, or a bad order)."""
    speed = config.nic_speed or nic_speed_bps
    values = [
        b.resolve(speed) for b in (config.offline_limit, config.offline_min, config.online_high, config.online_low)
    ]
    limit, minimum, high, low = values
    if limit is None or minimum is None or high is None or low is None:
        return None, (
            "network QoS: a percent setting needs the NIC speed, which the link does not report; "
            "set networkQoS.nicSpeed or absolute values"
        )
    if minimum > limit:
        return Thresholds(limit, limit, high, low), (
            f"network QoS: offlineMin ({fmt_bps(minimum)}) exceeds offlineLimit ({fmt_bps(limit)}); using the limit"
        )
    if low >= high:
        return None, (
            f"network QoS: onlineLowWatermark ({fmt_bps(low)}) must be below onlineHighWatermark ({fmt_bps(high)})"
        )
    return Thresholds(limit, minimum, high, low), ""


def online_rate(nic_bps: float | None, offline_bps: Sequence[float | None]) -> float | None:
    """NIC minus the offline veths, never below 0; None when the NIC rate is unknown."""
    if nic_bps is None:
        return None
    return max(0.0, nic_bps - sum(v for v in offline_bps if v is not None))


def step(state: DirectionState, online_bps: float | None, t: Thresholds, n: int) -> DirectionState:
    """Fold one sample of one direction into its hysteresis state (an unknown rate counts for neither side)."""
    if online_bps is None:
        return DirectionState(state.limited, 0, 0)
    over = state.over + 1 if online_bps >= t.high else 0
    clear = state.clear + 1 if online_bps <= t.low else 0
    limited = state.limited
    if not limited and over >= n:
        limited = True
    elif limited and clear >= n:
        limited = False
    return DirectionState(limited, over, clear)


def split(ceiling: int, count: int) -> int:
    """One pod's share of `ceiling` among `count` pods, at least MIN_POD_BPS."""
    if count <= 0:
        return 0
    return max(MIN_POD_BPS, ceiling // count)


def fmt_bps(bps: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.0f} bit/s"


def decide_netqos(snapshot: NetSnapshot | None, config: NetworkQosConfig, state: NetState, now: float) -> NetPlan:
    """The network plan: which offline pods get which ceilings, and the next hysteresis state."""
    if not config.enabled:
        return NetPlan(enabled=False, explanations=("network QoS is off (networkQoS.enabled): nothing is shaped",))
    if snapshot is None:
        return NetPlan(
            enabled=True, next_state=state, explanations=("network QoS: no network sample yet; nothing changes",)
        )
    explanations: list[str] = []
    offline = [p for p in snapshot.pods if p.offline]
    unshaped: list[Unshaped] = []
    shaped: list[NetPod] = []
    for p in sorted(offline, key=lambda p: (p.key, p.uid)):
        if p.host_network:
            unshaped.append(Unshaped(p.uid, p.key, "hostNetwork"))
            explanations.append(f"{p.key}: offline pod on the host network; its traffic is not shaped")
        elif not p.veth:
            unshaped.append(Unshaped(p.uid, p.key, "NoVeth"))
            explanations.append(f"{p.key}: offline pod whose host-side veth was not found; not shaped this cycle")
        else:
            shaped.append(p)
    thresholds, why = resolve(config, snapshot.nic_speed_bps)
    if why:
        explanations.append(why)
    online_dl = online_rate(snapshot.nic_rx_bps, [p.tx_bps for p in offline if not p.host_network])
    online_ul = online_rate(snapshot.nic_tx_bps, [p.rx_bps for p in offline if not p.host_network])
    base = NetPlan(
        enabled=True,
        nic=snapshot.nic,
        nic_speed_bps=config.nic_speed or snapshot.nic_speed_bps,
        thresholds=thresholds,
        online_download_bps=online_dl,
        online_upload_bps=online_ul,
        unshaped=tuple(unshaped),
        next_state=state,
    )
    if thresholds is None:
        if shaped:
            explanations.append(f"network QoS: {len(shaped)} offline pod(s) left unshaped until the settings resolve")
        return _with(base, explanations, shaped=(), unshaped=tuple(unshaped), state=NetState())
    stale = now - snapshot.time > STALE_PERIODS * config.period
    if stale:
        explanations.append(
            f"network QoS: the newest network sample is {now - snapshot.time:.1f} s old; the ceilings stay as they were"
        )
        next_state = state
    else:
        next_state = NetState(
            step(state.download, online_dl, thresholds, config.consecutive),
            step(state.upload, online_ul, thresholds, config.consecutive),
        )
    ceilings: dict[Direction, int] = {}
    pairs: tuple[tuple[Direction, float | None], ...] = (("download", online_dl), ("upload", online_ul))
    for d, online in pairs:
        s = next_state.of(d)
        ceilings[d] = thresholds.minimum if s.limited else thresholds.limit
        shown = "unknown" if online is None else fmt_bps(online)
        if s.limited and not state.of(d).limited:
            explanations.append(
                f"network QoS {d}: online traffic {shown} at or past the high watermark "
                f"{fmt_bps(thresholds.high)} for {config.consecutive} samples; offline ceiling lowered to "
                f"{fmt_bps(thresholds.minimum)}"
            )
        elif not s.limited and state.of(d).limited:
            explanations.append(
                f"network QoS {d}: online traffic {shown} at or under the low watermark {fmt_bps(thresholds.low)} "
                f"for {config.consecutive} samples; offline ceiling restored to {fmt_bps(thresholds.limit)}"
            )
        elif s.limited:
            explanations.append(
                f"network QoS {d}: online traffic {shown} has not stayed under the low watermark "
                f"{fmt_bps(thresholds.low)}; offline ceiling held at {fmt_bps(thresholds.minimum)}"
            )
    n = len(shaped)
    shapes = tuple(
        Shape(p.uid, p.key, p.veth or "", p.veth_index, split(ceilings["download"], n), split(ceilings["upload"], n))
        for p in shaped
    )
    if n:
        explanations.append(
            f"network QoS: {n} offline pod(s) shaped, ceiling download {fmt_bps(ceilings['download'])} / upload "
            f"{fmt_bps(ceilings['upload'])} split evenly"
        )
        if ceilings["download"] // n < MIN_POD_BPS or ceilings["upload"] // n < MIN_POD_BPS:
            explanations.append(
                f"network QoS: each pod keeps at least {fmt_bps(MIN_POD_BPS)}, "
                "so the pods together may pass the ceiling"
            )
    return _with(
        base,
        explanations,
        shaped=shapes,
        unshaped=tuple(unshaped),
        state=next_state,
        ceilings=(ceilings["download"] if n else 0, ceilings["upload"] if n else 0),
    )


def _with(
    base: NetPlan,
    explanations: list[str],
    shaped: tuple[Shape, ...],
    unshaped: tuple[Unshaped, ...],
    state: NetState,
    ceilings: tuple[int, int] = (0, 0),
) -> NetPlan:
    return NetPlan(
        enabled=base.enabled,
        nic=base.nic,
        nic_speed_bps=base.nic_speed_bps,
        thresholds=base.thresholds,
        ceiling_download_bps=ceilings[0],
        ceiling_upload_bps=ceilings[1],
        online_download_bps=base.online_download_bps,
        online_upload_bps=base.online_upload_bps,
        shapes=shaped,
        unshaped=unshaped,
        explanations=tuple(explanations),
        next_state=state,
    )
