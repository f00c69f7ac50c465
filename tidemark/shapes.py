"""Object shapes: the fields either program reads, with the JSON type Kubernetes' own decoder insists on.

A file or a watch event may hold anything; `shape_problems` names every field of the wrong type by its
path (`spec.containers[1].resources.requests`), so callers skip or refuse the object instead of failing
deep inside a plugin. Only what is read is checked: unknown fields pass, as the API server's do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from tidemark.apis import short_repr

_Shape = Any  # "str" | "int" | "bool" | "map" | "strmap" | "num" | ("list", _Shape) | dict[str, _Shape]


def _list(item: _Shape) -> tuple[str, _Shape]:
    return ("list", item)


_LABEL_SELECTOR: Final[Mapping[str, _Shape]] = {
    "matchLabels": "strmap",
    "matchExpressions": _list({"key": "str", "operator": "str", "values": _list("str")}),
}
_NODE_SELECTOR_TERM: Final[Mapping[str, _Shape]] = {
    "matchExpressions": _list({"key": "str", "operator": "str", "values": _list("str")}),
    "matchFields": _list({"key": "str", "operator": "str", "values": _list("str")}),
}
_POD_AFFINITY_TERM: Final[Mapping[str, _Shape]] = {
    "labelSelector": _LABEL_SELECTOR,
    "namespaceSelector": _LABEL_SELECTOR,
    "namespaces": _list("str"),
    "topologyKey": "str",
}
_POD_AFFINITY: Final[Mapping[str, _Shape]] = {
    "requiredDuringSchedulingIgnoredDuringExecution": _list(_POD_AFFINITY_TERM),
    "preferredDuringSchedulingIgnoredDuringExecution": _list({"weight": "int", "podAffinityTerm": _POD_AFFINITY_TERM}),
}
_RESOURCES: Final[Mapping[str, _Shape]] = {"requests": "map", "limits": "map"}
_CONTAINER: Final[Mapping[str, _Shape]] = {
    "name": "str",
    "resources": _RESOURCES,
    "restartPolicy": "str",
    "ports": _list({"hostPort": "int", "hostIP": "str", "protocol": "str", "containerPort": "int"}),
}
_METADATA: Final[Mapping[str, _Shape]] = {
    "name": "str",
    "namespace": "str",
    "uid": "str",
    "labels": "strmap",
    "annotations": "strmap",
    "ownerReferences": _list({"kind": "str", "uid": "str", "name": "str", "controller": "bool"}),
    "deletionGracePeriodSeconds": "int",
}
POD_SHAPE: Final[Mapping[str, _Shape]] = {
    "metadata": _METADATA,
    "spec": {
        "nodeName": "str",
        "schedulerName": "str",
        "priority": "int",
        "priorityClassName": "str",
        "terminationGracePeriodSeconds": "int",
        "containers": _list(_CONTAINER),
        "initContainers": _list(_CONTAINER),
        "overhead": "map",
        "resources": _RESOURCES,
        "nodeSelector": "strmap",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _list(_NODE_SELECTOR_TERM)},
                "preferredDuringSchedulingIgnoredDuringExecution": _list(
                    {"weight": "int", "preference": _NODE_SELECTOR_TERM}
                ),
            },
            "podAffinity": _POD_AFFINITY,
            "podAntiAffinity": _POD_AFFINITY,
        },
        "tolerations": _list({"key": "str", "operator": "str", "value": "str", "effect": "str"}),
        "topologySpreadConstraints": _list(
            {"maxSkew": "int", "minDomains": "int", "topologyKey": "str", "whenUnsatisfiable": "str",
             "labelSelector": _LABEL_SELECTOR}
        ),
        "schedulingGates": _list("map"),
    },
    "status": {
        "phase": "str",
        "qosClass": "str",
        "conditions": _list("map"),
        "containerStatuses": _list({"name": "str", "containerID": "str"}),
    },
}
NODE_SHAPE: Final[Mapping[str, _Shape]] = {
    "metadata": _METADATA,
    "spec": {"taints": _list({"key": "str", "value": "str", "effect": "str"}), "unschedulable": "bool"},
    "status": {"allocatable": "map", "capacity": "map", "conditions": _list({"type": "str", "status": "str"})},
}
PODGROUP_SHAPE: Final[Mapping[str, _Shape]] = {
    "metadata": _METADATA,
    "spec": {"minMember": "int", "queue": "str", "minResources": "map", "minTaskMember": "map",
             "priorityClassName": "str"},
    "status": {"phase": "str"},
}
QUEUE_SHAPE: Final[Mapping[str, _Shape]] = {
    "metadata": _METADATA,
    "spec": {"capability": "map", "deserved": "map", "guarantee": {"resource": "map"}, "parent": "str",
             "reclaimable": "bool"},
    "status": {"state": "str"},
}
SHAPES: Final[Mapping[str, Mapping[str, _Shape]]] = {
    "Pod": POD_SHAPE, "Node": NODE_SHAPE, "PodGroup": PODGROUP_SHAPE, "Queue": QUEUE_SHAPE,
}


def _quote_hint(value: object) -> str:
    """Why a YAML value the author meant as text is not one (YAML 1.1 reads `010` as 8, `0x50` as 80)."""
    if isinstance(value, bool | int | float):
        return " (quote it: YAML reads unquoted 010 as 8, 0x50 as 80, 1_0 as 10, yes as true)"
    return ""


def _type_name(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def _check_shape(value: object, shape: _Shape, path: str, out: list[str]) -> None:
    if value is None:
        return  # absent and null read the same everywhere (Kubernetes' omitempty)
    if isinstance(shape, Mapping):
        if not isinstance(value, Mapping):
            out.append(f"{path} must be a mapping, not {_type_name(value)}")
            return
        for key, sub in shape.items():
            _check_shape(value.get(key), sub, f"{path}.{key}" if path else key, out)
        return
    if isinstance(shape, tuple):
        if not isinstance(value, list):
            out.append(f"{path} must be a list, not {_type_name(value)}")
            return
        for i, item in enumerate(value):
            if item is None and shape[1] not in ("str", "int"):
                out.append(f"{path}[{i}] must not be null")
                continue
            _check_shape(item, shape[1], f"{path}[{i}]", out)
        return
    ok: bool
    if shape == "str":
        ok = isinstance(value, str)
    elif shape == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    elif shape == "bool":
        ok = isinstance(value, bool)
    elif shape == "num":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    elif shape == "map":
        ok = isinstance(value, Mapping)
    elif shape == "strmap":
        ok = isinstance(value, Mapping)
        if ok:
            assert isinstance(value, Mapping)
            for k, v in value.items():
                if not isinstance(k, str):
                    out.append(f"{path} must map strings to strings, not {_type_name(k)} key {short_repr(k)}")
                elif v is not None and not isinstance(v, str):
                    out.append(f"{path}.{k} must be a string, not {_type_name(v)} {short_repr(v)}{_quote_hint(v)}")
            return
    else:  # pragma: no cover - a typo in a shape table
        raise ValueError(f"unknown shape {shape!r}")
    if not ok:
        want = {"str": "a string", "int": "an integer", "bool": "a boolean", "num": "a finite number",
                "map": "a mapping", "strmap": "a mapping"}[shape]
        out.append(f"{path} must be {want}, not {_type_name(value)} {short_repr(value)}")


def _is_mapping(value: object) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # (the ABC check only for other types)


def _compile_ok(shape: _Shape) -> Callable[[object], bool]:
    """A checker for one shape: whether `_check_shape` would find nothing (value never None here).

    Built once per shape table, it walks the keys a value has rather than every key the shape names
    and builds no paths: the common case, an object without problems, costs a few calls per field.
    """
    if isinstance(shape, Mapping):
        subs = {key: _compile_ok(sub) for key, sub in shape.items()}

        def mapping_ok(value: object) -> bool:
            if not _is_mapping(value):
                return False
            assert isinstance(value, Mapping)
            for key, item in value.items():
                if item is not None:
                    check = subs.get(key)
                    if check is not None and not check(item):
                        return False
            return True

        return mapping_ok
    if isinstance(shape, tuple):
        item_ok = _compile_ok(shape[1])
        null_ok = shape[1] in ("str", "int")

        def list_ok(value: object) -> bool:
            if not isinstance(value, list):
                return False
            for item in value:
                if item is None:
                    if not null_ok:
                        return False
                elif not item_ok(item):
                    return False
            return True

        return list_ok
    if shape == "str":
        return lambda value: isinstance(value, str)
    if shape == "map":
        return _is_mapping
    if shape == "strmap":

        def strmap_ok(value: object) -> bool:
            return _is_mapping(value) and all(
                type(k) is str and (v is None or type(v) is str)
                for k, v in value.items()  # type: ignore[attr-defined]
            )

        return strmap_ok

    def leaf_ok(value: object, shape: _Shape = shape) -> bool:
        out: list[str] = []
        _check_shape(value, shape, "", out)
        return not out

    return leaf_ok


_CHECKERS: Final[Mapping[str, Callable[[object], bool]]] = {kind: _compile_ok(shape) for kind, shape in SHAPES.items()}


def _shape_ok(value: object, shape: _Shape) -> bool:
    """Whether `_check_shape` would find nothing (a compiled checker for the kinds' shapes)."""
    if value is None:
        return True
    for kind, known in SHAPES.items():
        if known is shape:
            return _CHECKERS[kind](value)
    return _compile_ok(shape)(value)


def shape_problems(obj: Mapping[str, Any]) -> list[str]:
    """Every read field of a Pod/Node/PodGroup/Queue with the wrong JSON type, by path; [] when fine."""
    shape = SHAPES.get(str(obj.get("kind"))) if isinstance(obj, Mapping) else None
    if shape is None:
        return []
    if _CHECKERS[str(obj.get("kind"))](obj):
        return []
    out: list[str] = []
    _check_shape(obj, shape, "", out)
    return out
