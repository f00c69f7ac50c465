"""The value parsers of the agent's configuration table (raw YAML value -> (value, None) or (None, message)),
the one value type they build that is not a plain number (Bandwidth), and the `Problem` a bad value becomes.
Pure; used by agent.config and agent.config_overrides.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from tidemark.apis import parse_bool, parse_go_duration, quantity_to_int, quantity_to_milli

_MAX_AMOUNT: Final = 2**63 - 1
Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Problem:
    """A configuration value that was not taken (error: its default stays) or not understood (warning)."""

    path: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """A bandwidth setting: an absolute rate in bits/s, or a percent of the node NIC's speed."""

    bits: int | None = None
    percent: float | None = None

    def resolve(self, nic_bps: int | None) -> int | None:
        """Bits/s; None when it is a percent and the NIC speed is unknown."""
        if self.bits is not None:
            return self.bits
        if self.percent is None or not nic_bps or nic_bps <= 0:
            return None
        return int(nic_bps * self.percent / 100)

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else f"{self.bits}bit"


# --- value parsers: raw YAML value -> (value, None) or (None, message) --------------------------

Parser = Callable[[object], tuple[Any, str | None]]


def _show(raw: object) -> str:
    """A raw value for a problem message, cut short."""
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_duration(raw: object) -> float | None:
    """Seconds from a number or a Go duration string (`500ms`, `1m30s`); None when malformed or negative."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        if not text.replace("µ", "u").isascii():
            return None
        try:
            value = float(text)
        except ValueError:
            parsed = parse_go_duration(text)
            if parsed is None:
                return None
            value = parsed
    else:
        return None
    if value != value or value < 0 or value == float("inf"):
        return None
    return value


def _duration(minimum: float = 0.0, exclusive: bool = True) -> Parser:
    def parse(raw: object) -> tuple[Any, str | None]:
        value = parse_duration(raw)
        if value is None:
            return None, f"must be a duration (seconds or e.g. 500ms, 10s, 1m), got {_show(raw)}"
        if (exclusive and value <= minimum) or value < minimum:
            return None, f"must be {'>' if exclusive else '>='} {minimum:g} s, got {_show(raw)}"
        return value, None

    return parse


def _optional_seconds(raw: object) -> tuple[Any, str | None]:
    if raw is None:
        return None, None
    value = parse_duration(raw)
    if value is None:
        return None, f"must be null or a non-negative duration, got {_show(raw)}"
    return round(value), None


def _fraction(low: float, high: float, low_open: bool) -> Parser:
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"

    def parse(raw: object) -> tuple[Any, str | None]:
        if (
            isinstance(raw, bool)
            or not isinstance(raw, int | float | str)
            or (isinstance(raw, str) and not raw.isascii())
        ):
            return None, f"must be a number in {interval}, got {_show(raw)}"
        try:
            value = float(raw)
        except ValueError:
            return None, f"must be a number in {interval}, got {_show(raw)}"
        if value != value or value > high or value < low or (low_open and value == low):
            return None, f"must be in {interval}, got {_show(raw)}"
        return value, None

    return parse


def _integer(low: int, high: int | None = None) -> Parser:
    def parse(raw: object) -> tuple[Any, str | None]:
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        if isinstance(raw, bool):
            return None, f"must be an integer {bounds}, got {_show(raw)}"
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str) and re.fullmatch(r"[+-]?[0-9]{1,19}", raw.strip()):
            value = int(raw.strip())
        else:
            return None, f"must be an integer {bounds}, got {_show(raw)}"
        if value < low or (high is not None and value > high) or value > _MAX_AMOUNT:
            return None, f"must be an integer {bounds}, got {_show(raw)}"
        return value, None

    return parse


def _boolean(raw: object) -> tuple[Any, str | None]:
    if isinstance(raw, bool):
        return raw, None
    if raw is None:
        return None, "must be true or false, got null"
    parsed = parse_bool(raw)
    if parsed.warning:
        return None, f"must be true or false, got {_show(raw)}"
    return parsed.value, None


def _choice(*options: str) -> Parser:
    def parse(raw: object) -> tuple[Any, str | None]:
        if isinstance(raw, str) and raw.strip() in options:
            return raw.strip(), None
        return None, f"must be one of {', '.join(options)}, got {_show(raw)}"

    return parse


def _cpu_quantity(minimum: int) -> Parser:
    def parse(raw: object) -> tuple[Any, str | None]:
        value = None if isinstance(raw, bool) or not isinstance(raw, int | float | str) else quantity_to_milli(raw)
        if value is None or value < minimum or value > _MAX_AMOUNT:
            return None, f"must be a CPU quantity >= {minimum}m (e.g. 500m, 1), got {_show(raw)}"
        return value, None

    return parse


def _memory_quantity(raw: object) -> tuple[Any, str | None]:
    value = None if isinstance(raw, bool) or not isinstance(raw, int | float | str) else quantity_to_int(raw)
    if value is None or value < 0 or value > _MAX_AMOUNT:
        return None, f"must be a non-negative memory quantity (e.g. 512Mi, 1Gi), got {_show(raw)}"
    return value, None


_BANDWIDTH_UNITS: Final = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_bandwidth(raw: object) -> Bandwidth | None:
    """`50%`, `100M`, `100Mbit`, `1.5Gbit`, `800000` (bits/s, decimal SI prefixes); None when malformed."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return Bandwidth(bits=raw) if 0 < raw <= _MAX_AMOUNT else None
    if not isinstance(raw, str) or not raw.isascii():
        return None
    text = raw.strip()
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*%", text)
    if m:
        pct = float(m.group(1))
        return Bandwidth(percent=pct) if 0 < pct <= 100 else None
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)(?:bit|bit/s)?", text)
    if not m:
        return None
    bits = int(float(m.group(1)) * _BANDWIDTH_UNITS[m.group(2).lower()])
    return Bandwidth(bits=bits) if 0 < bits <= _MAX_AMOUNT else None


def _bandwidth(raw: object) -> tuple[Any, str | None]:
    value = parse_bandwidth(raw)
    if value is None:
        return None, (
            f"must be a bandwidth > 0 in bits/s (e.g. 100M, 1Gbit) or a percent of the NIC (e.g. 40%), got {_show(raw)}"
        )
    return value, None


def _interface_name(raw: object) -> tuple[Any, str | None]:
    if raw is None:
        return "", None
    if isinstance(raw, str) and (raw == "" or re.fullmatch(r"[A-Za-z0-9_.:@-]{1,15}", raw)):
        return raw, None
    return None, f"must be an interface name (at most 15 characters) or empty, got {_show(raw)}"


def _count_per_second(what: str, example: str) -> Parser:
    """A rate as a Kubernetes quantity (`50Mi`, `100M`, `1k`, `2000`), >= 0; 0 = no limit."""

    def parse(raw: object) -> tuple[Any, str | None]:
        value = None if isinstance(raw, bool) or not isinstance(raw, int | str) else quantity_to_int(raw)
        if value is None or value < 0 or value > _MAX_AMOUNT:
            return (
                None,
                f"must be {what} per second as a quantity >= 0 (e.g. {example}; 0 = no limit), got {_show(raw)}",
            )
        return value, None

    return parse


#: a device entry of `io_qos.devices`: `auto`, `MAJ:MIN`, `/dev/<name>`, or a /sys/class/block name
_DEVICE_ENTRY: Final = re.compile(
    r"auto|[0-9]{1,7}:[0-9]{1,7}|/dev/[A-Za-z0-9_.+-][A-Za-z0-9_.+/-]{0,126}|[A-Za-z0-9_.+-]{1,64}"
)


def _device_list(raw: object) -> tuple[Any, str | None]:
    """`io_qos.devices`: a list of device entries; null or [] = automatic."""
    if raw is None:
        return (), None
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or len(items) > 64:
        return None, f"must be a list of devices (MAJ:MIN, /dev/<name>, a name, or auto), got {_show(raw)}"
    out: list[str] = []
    for item in items:
        text = item.strip() if isinstance(item, str) else None
        if text is None or not _DEVICE_ENTRY.fullmatch(text) or "/../" in text + "/" or text in (".", ".."):
            return (
                None,
                f"each device must be MAJ:MIN, /dev/<name>, a name in /sys/class/block or auto, got {_show(item)}",
            )
        if text not in out:
            out.append(text)
    return tuple(out), None


def _bits_per_second(raw: object) -> tuple[Any, str | None]:
    if raw in (0, "0"):
        return 0, None
    value = parse_bandwidth(raw)
    if value is None or value.bits is None:
        return None, f"must be 0 (read from the link) or a speed in bits/s (e.g. 10G), got {_show(raw)}"
    return value.bits, None
