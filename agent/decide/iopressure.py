"""Offline pods' disk bandwidth by the online pods' I/O wait (docs/agent.md, "The I/O controller"): a pure fold
(previous limit, online I/O wait, the offline pods' fastest rate, config) -> limit, every `tier.period`.

Why: a constant per-pod limit is wrong both ways: too low on a fast, idle disk (offline work starves for
nothing) and too high on a slow, busy one (the online pods wait behind offline writes). The online pods' own
wait says which it is. The rule is TCP's AIMD, on bytes per second per offline pod per managed disk:

- the online I/O wait (the worst online pod's fraction of the period with some task waiting on I/O:
  `agent.sense.iowait`) above `tier.io.onlineWaitTarget`: the limit is multiplied by `tier.io.decrease`
  (0.5) at once, from the limit in force, or, while there was none, from the fastest offline pod's rate of the
  last period; never under `tier.io.minBps` (an offline pod holding a lock must progress);
- at or under the target: the limit rises by `tier.io.raiseStep` per period, up to `tier.io.maxBps`; with
  `maxBps` 0 the limit goes away entirely once it no longer binds (the fastest offline pod moved less than half
  of it in the last period): a calm node runs offline I/O unthrottled;
- no reading of the wait: the limit holds.

The limit applies to both read and write bytes per second (`io.max` rbps/wbps; v1 `blkio.throttle.*_bps_device`);
a static `io_qos.offline_read_bps` / `offline_write_bps` above 0 stays a ceiling over it (`effective`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agent.config_ioqos import IoQosConfig, TierIoConfig
from agent.model import TierSense

__all__ = ["IoLimit", "IoSignal", "decide_io", "effective", "initial", "step"]

#: a limit counts as binding while the fastest offline pod moved at least this fraction of it
BINDS = 0.5


@dataclass(frozen=True, slots=True)
class IoSignal:
    """One period's observation (`agent.sense.iowait`)."""

    #: the worst online pod's I/O wait fraction (None: not readable this period)
    wait: float | None
    #: which pod, or `node`/the disk for v1, and how it was read (words)
    source: str = ""
    #: the fastest offline pod's bytes per second on a managed disk, reads or writes (None: unknown)
    offline_peak: float | None = None


@dataclass(frozen=True, slots=True)
class IoLimit:
    """The controller's state and decision: bytes per second per offline pod per disk (None: no limit)."""

    bps: int | None = None
    rule: str = "start: no limit while the online pods do not wait"


def _mi(v: float) -> str:
    return f"{v / 2**20:.1f}Mi/s"


def initial(cfg: TierIoConfig) -> IoLimit:
    """The first state: no limit (or `maxBps` when one is set)."""
    if cfg.max_bps > 0:
        top = _bounded(cfg.max_bps, cfg)
        return IoLimit(top, f"start: tier.io.maxBps {_mi(top)}")
    return IoLimit()


def _bounded(v: float, cfg: TierIoConfig) -> int:
    out = max(float(max(1, cfg.min_bps)), v)
    if cfg.max_bps > 0:
        out = min(out, float(max(cfg.max_bps, cfg.min_bps)))
    return int(out)


def step(state: IoLimit, signal: IoSignal, cfg: TierIoConfig) -> IoLimit:
    """The next limit (module docstring)."""
    if not cfg.enabled:
        return IoLimit(None, "tier.io.enabled is false: no adaptive limit")
    if signal.wait is None:
        return replace(state, rule="no reading of the online I/O wait this period: the limit holds")
    words = f"online I/O wait {signal.wait:.3f} ({signal.source or 'online pods'})"
    if signal.wait > cfg.online_wait_target:
        if state.bps is not None:
            base, origin = float(state.bps), "the limit"
        elif signal.offline_peak:
            base, origin = signal.offline_peak, "the fastest offline pod's rate"
        else:
            base, origin = float(cfg.min_bps), "tier.io.minBps (no offline rate read)"
        new = _bounded(base * cfg.decrease, cfg)
        return IoLimit(
            new,
            f"{words} > tier.io.onlineWaitTarget {cfg.online_wait_target:g}: {origin} {_mi(base)} x "
            f"tier.io.decrease {cfg.decrease:g} = {_mi(new)} (at least tier.io.minBps {_mi(cfg.min_bps)})",
        )
    calm = f"{words} <= tier.io.onlineWaitTarget {cfg.online_wait_target:g}"
    if state.bps is None:
        if cfg.max_bps > 0:
            top = _bounded(cfg.max_bps, cfg)
            return IoLimit(top, f"{calm}: tier.io.maxBps {_mi(top)}")
        return IoLimit(None, f"{calm}: no limit")
    if cfg.max_bps <= 0 and signal.offline_peak is not None and signal.offline_peak < state.bps * BINDS:
        return IoLimit(
            None,
            f"{calm} and the fastest offline pod moved {_mi(signal.offline_peak)}, under half the limit "
            f"{_mi(state.bps)}: the limit is lifted (tier.io.maxBps 0)",
        )
    new = _bounded(state.bps + cfg.raise_step, cfg)
    capped = f", at most tier.io.maxBps {_mi(cfg.max_bps)}" if cfg.max_bps > 0 else ""
    return IoLimit(new, f"{calm}: {_mi(state.bps)} + tier.io.raiseStep {_mi(cfg.raise_step)} = {_mi(new)}{capped}")


def _combine(static: int, adaptive: int | None) -> int:
    if adaptive is None:
        return static
    return adaptive if static <= 0 else min(static, adaptive)


def effective(io: IoQosConfig, limit: IoLimit | None) -> IoQosConfig:
    """The I/O QoS settings in force: the static bytes-per-second limits (0: none) capped by the controller's."""
    if limit is None or limit.bps is None:
        return io
    return replace(
        io,
        offline_read_bps=_combine(io.offline_read_bps, limit.bps),
        offline_write_bps=_combine(io.offline_write_bps, limit.bps),
    )


def decide_io(
    previous: int | None, folded: float | None, sense: TierSense | None, io: IoQosConfig, cfg: TierIoConfig
) -> tuple[IoQosConfig, int | None, float | None, str]:
    """This decision's I/O settings, the controller's next state (bytes per second, the reading folded) and why.

    One step per tier reading (`TierSense.time`): decisions between two readings keep the limit."""
    if not cfg.enabled:
        return io, None, None, "I/O controller: tier.io.enabled is false: only the static io_qos limits"
    state = IoLimit(previous, "the limit in force") if folded is not None else initial(cfg)
    if sense is not None and sense.time != folded:
        signal = IoSignal(sense.io_wait, sense.io_wait_source, sense.offline_peak)
        state = step(state, signal, cfg)
        folded = sense.time
    limit = "no limit" if state.bps is None else _mi(state.bps)
    return effective(io, state), state.bps, folded, f"I/O controller: each offline pod {limit} per disk: {state.rule}"
