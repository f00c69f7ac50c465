"""Kubernetes quantities as both programs read them: resource names, apimachinery's quantity grammar, canonical
amounts (milli-cores, bytes, counts), ResourceLists, and the bounded repr a malformed value is reported with.

Part of the shared vocabulary (tidemark/apis.py re-exports every public name): pure, and never raises on
malformed input; a bad amount is dropped with a reason naming the rule it breaks.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal

# --- Extended resources published by the agent -------------------------------------------------
RES_CPU: Final = "cpu"
RES_MEMORY: Final = "memory"
RES_PODS: Final = "pods"
RES_BATCH_CPU: Final = "kubernetes.io/batch-cpu"
RES_BATCH_MEMORY: Final = "kubernetes.io/batch-memory"
#: plain resource -> its batch twin
BATCH_RESOURCE: Final[Mapping[str, str]] = {RES_CPU: RES_BATCH_CPU, RES_MEMORY: RES_BATCH_MEMORY}

Resource = Literal["cpu", "memory"]
RESOURCES: Final[tuple[Resource, ...]] = ("cpu", "memory")


# --- Quantities --------------------------------------------------------------------------------

#: The largest amount in canonical units (milli-cores, bytes, counts) either program accepts: 2^53,
#: about 9.0e15 (8 PiB of memory, 9e12 cores). Every such amount is exact as a float64, and sums of
#: a thousand of them still fit an int64, so no arithmetic downstream can overflow or lose a unit.
#: Larger (or non-finite) quantities are malformed input: the field is dropped with a reason.
MAX_AMOUNT: Final = 2**53
_MAX_AMOUNT_DEC: Final = Decimal(MAX_AMOUNT)


def parse_quantity(raw: object) -> Decimal | None:
    """A Kubernetes quantity as a finite Decimal, or None when malformed (never raises).

    The value may still be absurdly large; the conversions below (quantity_to_milli, ...) bound it.
    """
    if isinstance(raw, str):
        return _parse_quantity_text(raw)
    return _parse_quantity(raw)


@functools.lru_cache(maxsize=4096)
def _parse_quantity_text(raw: str) -> Decimal | None:
    """Quantity strings repeat across thousands of pods (scheduler snapshots): parse each once."""
    return _parse_quantity(raw)


#: apimachinery's resource.Quantity grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go), as its
#: parser accepts it: an optional sign, ASCII digits with an optional fraction, then a binary SI suffix,
#: a decimal SI suffix (n u m k M G T P E) or an e/E exponent that is an integer. Nothing else: no
#: spaces, no `_` separators, no full-width or other Unicode digits (Python's Decimal takes all three:
#: `Decimal("８")` is 8, `Decimal("1_000")` 1000), no `Infinity`/`NaN`, no `1e5Ki`.
_QUANTITY_RE: Final = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([KMGTPE]i)|([numkMGTPE])|[eE]([+-]?[0-9]{1,18}))?"
)
_BINARY_SI: Final[Mapping[str, int]] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SI: Final[Mapping[str, int]] = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _parse_quantity(raw: object) -> Decimal | None:
    if raw is None or isinstance(raw, bool):
        return None
    if isinstance(raw, Decimal):
        return raw if raw.is_finite() else None
    if isinstance(raw, int | float):
        try:
            text = repr(raw)  # a JSON/YAML number is a quantity as its text (Kubernetes reads 0.5 as "0.5")
        except ValueError:  # an integer beyond Python's 4300-digit conversion limit
            return None
    elif isinstance(raw, str):
        text = raw
    else:
        return None
    m = _QUANTITY_RE.fullmatch(text)
    if m is None:
        return None
    sign, number, binary, decimal, exponent = m.groups()
    try:
        if binary:
            return Decimal(sign + number) * _BINARY_SI[binary]
        shift = _DECIMAL_SI[decimal] if decimal else int(exponent or 0)
        return Decimal(f"{sign}{number}e{shift}")
    except (InvalidOperation, ArithmeticError, ValueError):
        return None


def _bounded_int(value: Decimal) -> int | None:
    """ceil(value) when |value| <= MAX_AMOUNT, else None (compared before any arithmetic: a quantity
    such as `1e999999999` must not become a billion-digit integer)."""
    if value.copy_abs() > _MAX_AMOUNT_DEC:
        return None
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def quantity_to_milli(raw: object) -> int | None:
    """Milli-units, rounded up as Kubernetes' MilliValue(); None when malformed or beyond +-MAX_AMOUNT."""
    q = parse_quantity(raw)
    if q is None or q.copy_abs() > _MAX_AMOUNT_DEC:
        return None
    return _bounded_int(q * 1000)


def quantity_to_int(raw: object) -> int | None:
    """Whole units, rounded up as Kubernetes' Value(); None when malformed or beyond +-MAX_AMOUNT."""
    q = parse_quantity(raw)
    return None if q is None else _bounded_int(q)


def canonical_amount(resource: str, raw: object) -> int | None:
    """cpu in milli-cores, everything else (memory bytes, pods, batch-cpu milli-cores) in whole units."""
    return quantity_to_milli(raw) if resource == RES_CPU else quantity_to_int(raw)


#: amount_problem's answers for quantity strings (a pure function; the same few strings repeat
#: across thousands of pods): (resource, text) -> answer, cleared when it grows past the bound
_AMOUNTS: dict[tuple[str, str], tuple[int | None, str | None]] = {}
_AMOUNTS_MAX: Final = 4096


def amount_problem(resource: str, raw: object) -> tuple[int | None, str | None]:
    """(amount, None) for a valid non-negative quantity, else (None, why) naming the rule it breaks."""
    if type(raw) is str:
        key = (resource, raw)
        hit = _AMOUNTS.get(key)
        if hit is None:
            if len(_AMOUNTS) >= _AMOUNTS_MAX:
                _AMOUNTS.clear()
            hit = _AMOUNTS[key] = _amount_problem(resource, raw)
        return hit
    return _amount_problem(resource, raw)


def _amount_problem(resource: str, raw: object) -> tuple[int | None, str | None]:
    amount = canonical_amount(resource, raw)
    if amount is not None:
        if amount < 0:
            return None, "is negative"
        return amount, None
    if parse_quantity(raw) is None:
        return None, "is not a valid quantity"
    return None, f"is out of range (the limit is {MAX_AMOUNT} {'milli-units' if resource == RES_CPU else 'units'})"


# --- Published values: one grammar for the NodeReport gate and every reader -------------------------

#: the longest published value (X, batch-*) accepted anywhere: the CRD schema, the webhook, the controller
#: and every reader share it
MAX_PUBLISHED_CHARS: Final = 32
#: the largest batch-* amount (milli-cores, bytes): the scheduler reads extended resources in milli-units,
#: as Volcano does, so an amount times 1000 must stay within MAX_AMOUNT: 2^53 / 1000, about 9.0e12 (8 TiB)
MAX_BATCH_AMOUNT: Final = MAX_AMOUNT // 1000
#: X: ASCII digits only (`str.isdigit` takes "²", which int() refuses, and "١٢٣", which int() reads as 123);
#: 16 digits hold MAX_AMOUNT
_DIGITS_RE: Final = re.compile(r"[0-9]+")


def published_x(raw: object) -> tuple[int | None, str | None]:
    """X as published (`volcano.sh/oversubscription-cpu`/`-memory`): (amount, None) for ASCII digits up to
    MAX_AMOUNT, else (None, why). The gate (tidemark/nodereport.py) and every reader use this one rule (a YAML
    integer of a cluster file is read as its text; the API and the CRD schema hold strings only)."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 and raw.bit_length() < 64:
        raw = str(raw)
    if not isinstance(raw, str) or _DIGITS_RE.fullmatch(raw) is None:
        return None, "is not a non-negative integer of ASCII digits"
    if len(raw) > 16 or (value := int(raw)) > MAX_AMOUNT:  # the length first: no int() of 400 digits
        return None, f"is out of range (the limit is {MAX_AMOUNT})"
    return value, None


def published_batch(resource: str, raw: object) -> tuple[int | None, str | None]:
    """A published `kubernetes.io/batch-*` amount (milli-cores / bytes, a whole quantity): (amount, None) for a
    non-negative whole quantity of at most MAX_PUBLISHED_CHARS characters and MAX_BATCH_AMOUNT, else (None, why)
    (a YAML integer of a cluster file is read as its text)."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 and raw.bit_length() < 64:
        raw = str(raw)
    if not isinstance(raw, str) or len(raw) > MAX_PUBLISHED_CHARS:
        return None, f"must be a quantity string of at most {MAX_PUBLISHED_CHARS} characters"
    q = parse_quantity(raw)
    if q is None:
        return None, "is not a valid quantity"
    if q < 0:
        return None, "is negative"
    if q > MAX_BATCH_AMOUNT:
        return None, f"is out of range (the limit is {MAX_BATCH_AMOUNT}: the scheduler reads it in milli-units)"
    if q != q.to_integral_value():
        return None, f"is not a whole number of {'milli-cores' if resource.endswith('cpu') else 'units'}"
    return int(q), None


Resources = dict[str, int]


def parse_resource_list(rl: Mapping[str, Any] | None, problems: list[str] | None = None) -> Resources:
    """A ResourceList in canonical units; malformed, absurd or negative entries are dropped (reported in problems)."""
    out: Resources = {}
    if not rl or not isinstance(rl, Mapping):
        if rl is not None and not isinstance(rl, Mapping) and problems is not None:
            problems.append(f"resources {short_repr(rl)} is not a mapping of quantities; ignored")
        return out
    for name, raw in rl.items():
        amount, why = amount_problem(str(name), raw)
        if amount is None:
            if problems is not None:
                problems.append(f"resource {name}={short_repr(raw)} {why}; ignored")
            continue
        out[str(name)] = amount
    return out


def short_repr(raw: object, limit: int = 40) -> str:
    """repr of a value, cut to `limit` characters (a 400-digit annotation must not flood a log line).

    Built from a bounded excerpt, never from the whole value: a YAML alias bomb is a few shared lists
    that expand to hundreds of millions of strings, and repr() of it never ends.
    """
    text = _bounded_repr(raw, limit + 1)
    if len(text) <= limit:
        return text
    if isinstance(raw, str | bytes | list | tuple | dict | set | frozenset):
        size = f"{len(raw)} {'chars' if isinstance(raw, str | bytes) else 'items'}"
    elif isinstance(raw, int):
        size = f"{raw.bit_length()} bits"
    else:
        size = "cut"
    return f"{text[: limit - 12]}...({size})"


def _bounded_repr(value: object, budget: int) -> str:
    """repr(value) when it is shorter than `budget`, else a prefix of it at least `budget` long (or all
    there is), computed from at most about `budget` characters' worth of the value."""
    if isinstance(value, str | bytes):
        return repr(value[:budget])
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 4 * budget:  # more digits than fit (and repr() refuses beyond 4300)
            return f"<an integer of {value.bit_length()} bits>"
        return repr(value)
    items: Iterable[Any]
    if isinstance(value, dict):
        opening, closing, items = "{", "}", value.items()
    elif isinstance(value, list):
        opening, closing, items = "[", "]", value
    elif isinstance(value, tuple):
        opening, closing, items = "(", ")" if len(value) != 1 else ",)", value
    elif isinstance(value, set | frozenset):
        if not value:
            return repr(value)
        opening, closing, items = "{", "}", value
    else:
        return repr(value)[:budget]
    out = [opening]
    used = 1
    for i, item in enumerate(items):
        if used >= budget:
            out.append("...")
            return "".join(out)
        if i:
            out.append(", ")
            used += 2
        if isinstance(item, tuple) and isinstance(value, dict):
            key = _bounded_repr(item[0], budget - used)
            part = key + ": " + _bounded_repr(item[1], budget - used - len(key) - 2)
        else:
            part = _bounded_repr(item, budget - used)
        out.append(part)
        used += len(part)
    out.append(closing)
    return "".join(out)


def format_cpu(milli: int) -> str:
    """Milli-cores as a quantity string (`1500m`, `2`)."""
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"
