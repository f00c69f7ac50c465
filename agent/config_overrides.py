"""Per-node overrides of the agent's configuration: the `overrides` list, each a node selector and config values.

A Kubernetes label selector (`matchLabels` AND `matchExpressions`, operators In, NotIn, Exists,
DoesNotExist) picks the nodes an entry applies to; `agent.config.ConfigDocument.resolve` applies every
matching entry, in file order, on top of the base values. A malformed entry is skipped with a Problem
naming its path; overrides do not nest. Parsing only: the values themselves are parsed by the caller's
`values` (`agent.config`'s YAML table), so this module knows no configuration key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent.config_values import Problem, _show

OVERRIDES_KEY: Final = "overrides"
SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `matchExpressions` entry of a Kubernetes label selector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values  # NotIn


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A Kubernetes label selector (matchLabels AND matchExpressions); the empty selector matches every node."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True, slots=True)
class Override:
    """`overrides[i]`: the valid values of its `config`, applied on nodes its selector matches."""

    index: int
    name: str
    selector: NodeSelector
    values: Mapping[str, Any]


def _str_map(raw: object, path: str, problems: list[Problem]) -> tuple[tuple[str, str], ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        problems.append(Problem(path, f"must be a mapping of label to value, got {_show(raw)}; override skipped"))
        return None
    out = []
    for k, v in raw.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, str | int | float):
            problems.append(Problem(f"{path}.{k}", f"must be a string label value, got {_show(v)}; override skipped"))
            return None
        out.append((k, str(v)))
    return tuple(out)


def _requirements(raw: object, path: str, problems: list[Problem]) -> tuple[Requirement, ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(Problem(path, f"must be a list, got {_show(raw)}; override skipped"))
        return None
    out: list[Requirement] = []
    for i, item in enumerate(raw):
        at = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(Problem(at, f"must be a mapping with key, operator, values; got {_show(item)}"))
            return None
        key, op, values = item.get("key"), item.get("operator"), item.get("values")
        if not isinstance(key, str) or not key:
            problems.append(Problem(f"{at}.key", f"must be a label key, got {_show(key)}; override skipped"))
            return None
        if op not in SELECTOR_OPERATORS:
            problems.append(
                Problem(f"{at}.operator", f"must be one of {', '.join(SELECTOR_OPERATORS)}, got {_show(op)}")
            )
            return None
        if op in ("In", "NotIn"):
            if not isinstance(values, list) or not values or not all(isinstance(v, str | int) for v in values):
                problems.append(Problem(f"{at}.values", f"{op} needs a non-empty list of values, got {_show(values)}"))
                return None
            out.append(Requirement(key, op, tuple(str(v) for v in values)))
        else:
            if values:
                problems.append(Problem(f"{at}.values", f"{op} takes no values; ignored", "warning"))
            out.append(Requirement(key, op))
    return tuple(out)


#: the parser of an entry's `config` values: (raw mapping, problems, path prefix) -> values by key
ValuesParser = Callable[[Mapping[Any, Any], list[Problem], str], dict[str, Any]]


def parse_override(index: int, raw: object, problems: list[Problem], parse_values: ValuesParser) -> Override | None:
    """`overrides[index]`, or None (with a Problem) when it is malformed."""
    at = f"{OVERRIDES_KEY}[{index}]"
    if not isinstance(raw, Mapping):
        problems.append(Problem(at, f"must be a mapping with nodeSelector and config, got {_show(raw)}"))
        return None
    for key in raw:
        if key not in ("name", "nodeSelector", "config"):
            problems.append(Problem(f"{at}.{key}", "unknown key; ignored", "warning"))
    sel = raw.get("nodeSelector")
    if not isinstance(sel, Mapping):
        problems.append(Problem(f"{at}.nodeSelector", f"must be a label selector mapping, got {_show(sel)}"))
        return None
    for key in sel:
        if key not in ("matchLabels", "matchExpressions"):
            problems.append(Problem(f"{at}.nodeSelector.{key}", "unknown key; ignored", "warning"))
    labels = _str_map(sel.get("matchLabels"), f"{at}.nodeSelector.matchLabels", problems)
    exprs = _requirements(sel.get("matchExpressions"), f"{at}.nodeSelector.matchExpressions", problems)
    if labels is None or exprs is None:
        return None
    config = raw.get("config")
    if config is not None and not isinstance(config, Mapping):
        problems.append(Problem(f"{at}.config", f"must be a mapping, got {_show(config)}"))
        return None
    name = raw.get("name")
    name = str(name) if isinstance(name, str) and name else at
    values = parse_values(config or {}, problems, f"{at}.config.")
    if isinstance(config, Mapping) and OVERRIDES_KEY in config:
        problems.append(Problem(f"{at}.config.{OVERRIDES_KEY}", "overrides do not nest; ignored", "warning"))
    return Override(index, name, NodeSelector(labels, exprs), values)
