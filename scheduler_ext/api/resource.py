"""Volcano's Resource vector: milli-cpu, memory bytes, scalar resources, with its epsilon compares.

Units follow Volcano's `NewResource`: cpu in milli-cores, memory in bytes, `pods` as a count (also
kept in `max_task_num`), every other scalar resource (extended resources, hugepages,
ephemeral-storage) in *milli* units. The compare helpers keep Volcano's tolerance `MIN_RESOURCE`
(0.1) and its `Zero` / `Infinity` defaults for dimensions missing on one side, because conformance
with Volcano's decisions depends on them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping
from enum import IntEnum
from functools import lru_cache
from typing import Any, Final

from tidemark.apis import amount_problem, quantity_to_int, quantity_to_milli, short_repr

MIN_RESOURCE: Final = 0.1
RES_CPU: Final = "cpu"
RES_MEMORY: Final = "memory"
RES_PODS: Final = "pods"
RES_EPHEMERAL_STORAGE: Final = "ephemeral-storage"
GPU_RESOURCE_NAME: Final = "nvidia.com/gpu"
#: scalar resources most compares skip (Volcano's ignoredScalarResources)
IGNORED_SCALAR_RESOURCES: Final = frozenset({RES_PODS})
MAX_FLOAT: Final = 1.7976931348623157e308


class DimensionDefault(IntEnum):
    """What a dimension missing on one side counts as (Volcano's DimensionDefaultValue)."""

    ZERO = 0
    INFINITY = -1


ZERO: Final = DimensionDefault.ZERO
INFINITY: Final = DimensionDefault.INFINITY


def is_count_quota(name: str) -> bool:
    return name.startswith("count/")


def is_scalar_resource_name(name: str) -> bool:
    """kube-scheduler's IsScalarResourceName: extended, hugepages, prefixed native, attachable volumes."""
    if name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    if "kubernetes.io/" in name:
        return True
    return "/" in name and not name.startswith("requests.")


@lru_cache(maxsize=8192)
def _milli(raw: str) -> float | None:
    v = quantity_to_milli(raw)
    return None if v is None or v < 0 else float(v)


@lru_cache(maxsize=8192)
def _whole(raw: str) -> float | None:
    v = quantity_to_int(raw)
    return None if v is None or v < 0 else float(v)


def quantity_milli(raw: object) -> float | None:
    """A quantity in milli-units (cached by its text: the same strings repeat across thousands of pods)."""
    if raw is None or isinstance(raw, bool):
        return None
    return _milli(str(raw))


def quantity_value(raw: object) -> float | None:
    """A quantity in whole units, rounded up like Kubernetes' Value()."""
    if raw is None or isinstance(raw, bool):
        return None
    return _whole(str(raw))


_new_object: Final = object.__new__


class Resource:
    """A mutable resource vector; methods mutate in place and return self, as Volcano's do."""

    __slots__ = ("max_task_num", "memory", "milli_cpu", "scalar_resources")

    def __init__(
        self,
        milli_cpu: float = 0.0,
        memory: float = 0.0,
        scalar_resources: dict[str, float] | None = None,
        max_task_num: int = 0,
    ) -> None:
        self.milli_cpu = float(milli_cpu)
        self.memory = float(memory)
        self.scalar_resources = scalar_resources
        self.max_task_num = max_task_num

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def empty(cls) -> Resource:
        return cls()

    @classmethod
    def infinite(cls) -> Resource:
        return cls(MAX_FLOAT, MAX_FLOAT, None, 2**63 - 1)

    @classmethod
    def from_resource_list(cls, rl: Mapping[str, Any] | None, problems: list[str] | None = None) -> Resource:
        """Volcano's NewResource over a Kubernetes ResourceList (quantity strings or numbers)."""
        r = cls()
        if not rl:
            return r
        for name, raw in rl.items():
            name = str(name)
            if name == RES_CPU:
                v = quantity_milli(raw)
                if v is not None:
                    r.milli_cpu += v
            elif name == RES_MEMORY:
                v = quantity_value(raw)
                if v is not None:
                    r.memory += v
            elif name == RES_PODS:
                v = quantity_value(raw)
                if v is not None:
                    r.max_task_num += int(v)
                    r.add_scalar(name, v)
            elif name == RES_EPHEMERAL_STORAGE:
                v = quantity_milli(raw)
                if v is not None:
                    r.add_scalar(name, v)
            else:
                if is_count_quota(name) or not is_scalar_resource_name(name):
                    continue
                v = quantity_milli(raw)
                if v is not None:
                    r.add_scalar(name, v)
                    continue
            if v is None and problems is not None:
                why = amount_problem(name, raw)[1] or "is not a valid quantity"
                problems.append(f"resource {name}={short_repr(raw)} {why}; ignored")
        return r

    def clone(self) -> Resource:
        # what Resource(...) does, without the call of __init__ (a snapshot clones two per task)
        r = _new_object(Resource)
        r.milli_cpu = float(self.milli_cpu)
        r.memory = float(self.memory)
        sr = self.scalar_resources
        r.scalar_resources = dict(sr) if sr is not None else None
        r.max_task_num = self.max_task_num
        return r

    def __repr__(self) -> str:
        def fmt(v: float) -> str:
            if v == MAX_FLOAT:
                return "maxFloat"
            return f"{v:0.2f}"

        parts = [f"cpu {fmt(self.milli_cpu)}", f"memory {fmt(self.memory)}"]
        for name in sorted(self.scalar_resources or {}):
            parts.append(f"{name} {fmt((self.scalar_resources or {})[name])}")
        return ", ".join(parts)

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        """Exact (DeepEqual-like) equality, used where Volcano compares with equality.Semantic."""
        if not isinstance(other, Resource):
            return NotImplemented
        return (
            self.milli_cpu == other.milli_cpu
            and self.memory == other.memory
            and (self.scalar_resources or None) == (other.scalar_resources or None)
            and self.max_task_num == other.max_task_num
        )

    __hash__ = None  # type: ignore[assignment]

    # --- accessors ---------------------------------------------------------------------------
    def get(self, name: str) -> float:
        if name == RES_CPU:
            return self.milli_cpu
        if name == RES_MEMORY:
            return self.memory
        if self.scalar_resources is None:
            return 0.0
        return self.scalar_resources.get(name, 0.0)

    def resource_names(self) -> list[str]:
        """Dimensions with a value of at least MIN_RESOURCE."""
        names: list[str] = []
        if self.milli_cpu >= MIN_RESOURCE:
            names.append(RES_CPU)
        if self.memory >= MIN_RESOURCE:
            names.append(RES_MEMORY)
        for name, v in (self.scalar_resources or {}).items():
            if v >= MIN_RESOURCE:
                names.append(name)
        return names

    def is_empty(self) -> bool:
        if not (self.milli_cpu < MIN_RESOURCE and self.memory < MIN_RESOURCE):
            return False
        for name, v in (self.scalar_resources or {}).items():
            if name in IGNORED_SCALAR_RESOURCES:
                continue
            if v >= MIN_RESOURCE:
                return False
        return True

    def is_zero(self, name: str) -> bool:
        if name == RES_CPU:
            return self.milli_cpu < MIN_RESOURCE
        if name == RES_MEMORY:
            return self.memory < MIN_RESOURCE
        if self.scalar_resources is None:
            return True
        return self.scalar_resources.get(name, 0.0) < MIN_RESOURCE

    # --- arithmetic --------------------------------------------------------------------------
    def add(self, rr: Resource) -> Resource:
        self.milli_cpu += rr.milli_cpu
        self.memory += rr.memory
        if rr.scalar_resources:
            if self.scalar_resources is None:
                self.scalar_resources = {}
            sr = self.scalar_resources
            for name, v in rr.scalar_resources.items():
                sr[name] = sr.get(name, 0.0) + v
        return self

    def sub(self, rr: Resource) -> Resource:
        """Subtract; Volcano asserts sufficiency here, we subtract regardless (as a non-panicking build)."""
        return self._sub(rr)

    def sub_without_assert(self, rr: Resource) -> Resource:
        return self._sub(rr)

    def _sub(self, rr: Resource) -> Resource:
        self.milli_cpu -= rr.milli_cpu
        self.memory -= rr.memory
        if self.scalar_resources is None:
            return self
        sr = self.scalar_resources
        for name, v in (rr.scalar_resources or {}).items():
            sr[name] = sr.get(name, 0.0) - v
        return self

    def multi(self, ratio: float) -> Resource:
        self.milli_cpu *= ratio
        self.memory *= ratio
        if self.scalar_resources:
            for name in self.scalar_resources:
                self.scalar_resources[name] *= ratio
        return self

    def set_max_resource(self, rr: Resource | None) -> None:
        if rr is None:
            return
        if rr.milli_cpu > self.milli_cpu:
            self.milli_cpu = rr.milli_cpu
        if rr.memory > self.memory:
            self.memory = rr.memory
        for name, v in (rr.scalar_resources or {}).items():
            if self.scalar_resources is None:
                self.scalar_resources = dict(rr.scalar_resources or {})
                return
            if name not in self.scalar_resources or v > self.scalar_resources[name]:
                self.scalar_resources[name] = v

    def fit_delta(self, rr: Resource) -> Resource:
        if rr.milli_cpu > 0:
            self.milli_cpu -= rr.milli_cpu + MIN_RESOURCE
        if rr.memory > 0:
            self.memory -= rr.memory + MIN_RESOURCE
        if self.scalar_resources is None:
            self.scalar_resources = {}
        for name, v in (rr.scalar_resources or {}).items():
            if v > 0:
                self.scalar_resources[name] = self.scalar_resources.get(name, 0.0) - (v + MIN_RESOURCE)
        return self

    def add_scalar(self, name: str, quantity: float) -> None:
        self.set_scalar(name, (self.scalar_resources or {}).get(name, 0.0) + quantity)

    def set_scalar(self, name: str, quantity: float) -> None:
        if self.scalar_resources is None:
            self.scalar_resources = {}
        self.scalar_resources[name] = quantity

    def min_dimension_resource(self, rr: Resource, default: DimensionDefault) -> Resource:
        if rr.milli_cpu < self.milli_cpu:
            self.milli_cpu = rr.milli_cpu
        if rr.memory < self.memory:
            self.memory = rr.memory
        if self.scalar_resources is None:
            return self
        if rr.scalar_resources is None:
            if default == INFINITY:
                return self
            for name in self.scalar_resources:
                self.scalar_resources[name] = 0.0
            return self
        for name, v in self.scalar_resources.items():
            if name in rr.scalar_resources:
                self.scalar_resources[name] = min(v, rr.scalar_resources[name])
            elif default != INFINITY:
                self.scalar_resources[name] = 0.0
        return self

    def diff(self, rr: Resource, default: DimensionDefault) -> tuple[Resource, Resource]:
        """(increased, decreased) of self relative to rr, dimension by dimension."""
        left = self.clone()
        right = rr.clone()
        _set_default_value(left, right, default)
        inc = Resource(scalar_resources={})
        dec = Resource(scalar_resources={})
        if left.milli_cpu > right.milli_cpu:
            inc.milli_cpu = left.milli_cpu - right.milli_cpu
        else:
            dec.milli_cpu = right.milli_cpu - left.milli_cpu
        if left.memory > right.memory:
            inc.memory = left.memory - right.memory
        else:
            dec.memory = right.memory - left.memory
        assert inc.scalar_resources is not None and dec.scalar_resources is not None
        for name, lq in (left.scalar_resources or {}).items():
            rq = (right.scalar_resources or {}).get(name, 0.0)
            if lq == float(INFINITY):
                inc.scalar_resources[name] = lq
                continue
            if rq == float(INFINITY):
                dec.scalar_resources[name] = rq
                continue
            if lq > rq:
                inc.scalar_resources[name] = lq - rq
            else:
                dec.scalar_resources[name] = rq - lq
        return inc, dec

    # --- compares ----------------------------------------------------------------------------
    def less(self, rr: Resource, default: DimensionDefault) -> bool:
        if not self.milli_cpu < rr.milli_cpu or not self.memory < rr.memory:
            return False
        rs = rr.scalar_resources or {}
        ls = self.scalar_resources or {}
        if default == INFINITY:
            for name in rs:
                if name not in ls:
                    return False
        for name, lv in ls.items():
            if name not in rs and default == INFINITY:
                continue
            if not lv < rs.get(name, 0.0):
                return False
        return True

    def less_equal(self, rr: Resource, default: DimensionDefault) -> bool:
        if not _le(self.milli_cpu, rr.milli_cpu) or not _le(self.memory, rr.memory):
            return False
        rs = rr.scalar_resources or {}
        ls = self.scalar_resources or {}
        if default == INFINITY:
            for name in rs:
                if name not in ls:
                    return False
        for name, lv in ls.items():
            if name not in rs:
                if default == INFINITY:
                    continue
                if not _le(lv, 0.0):
                    return False
                continue
            if not _le(lv, rs[name]):
                return False
        return True

    def less_equal_with_resources_name(self, rr: Resource, default: DimensionDefault) -> tuple[bool, list[str]]:
        names: list[str] = []
        if not _le(self.milli_cpu, rr.milli_cpu):
            names.append(RES_CPU)
        if not _le(self.memory, rr.memory):
            names.append(RES_MEMORY)
        rs = rr.scalar_resources or {}
        for name, lv in (self.scalar_resources or {}).items():
            if name not in rs and default == INFINITY:
                continue
            if not _le(lv, rs.get(name, 0.0)):
                names.append(name)
        return (not names), names

    def less_equal_with_dimension_and_resources_name(
        self, rr: Resource | None, req: Resource | None
    ) -> tuple[bool, list[str]]:
        """Compare only the dimensions `req` asks for (strictly, no tolerance), as Volcano does."""
        if rr is None:
            return False, list(self.resource_names())
        if req is None:
            return self.less_equal_with_resources_name(rr, ZERO)
        names: list[str] = []
        if req.milli_cpu > 0 and self.milli_cpu > rr.milli_cpu:
            names.append(RES_CPU)
        if req.memory > 0 and self.memory > rr.memory:
            names.append(RES_MEMORY)
        if self.scalar_resources is None:
            return (not names), names
        rs = rr.scalar_resources or {}
        for name, q in (req.scalar_resources or {}).items():
            if name in IGNORED_SCALAR_RESOURCES:
                continue
            if q > 0 and self.scalar_resources.get(name, 0.0) > rs.get(name, 0.0):
                names.append(name)
        return (not names), names

    def less_partly(self, rr: Resource, default: DimensionDefault) -> bool:
        """Some dimension is strictly less than rr's (a dimension missing on one side per `default`)."""
        return self._partly(rr, default, operator.lt)

    def less_equal_partly(self, rr: Resource, default: DimensionDefault) -> bool:
        """Some dimension is less than or equal to rr's, within Volcano's tolerance."""
        return self._partly(rr, default, _le)

    def _partly(self, rr: Resource, default: DimensionDefault, cmp: Callable[[float, float], bool]) -> bool:
        if cmp(self.milli_cpu, rr.milli_cpu) or cmp(self.memory, rr.memory):
            return True
        rs = rr.scalar_resources or {}
        ls = self.scalar_resources or {}
        if default == ZERO and any(name not in ls for name in rs):
            return True
        for name, lv in ls.items():
            if name not in rs and default == INFINITY:
                return True
            if cmp(lv, rs.get(name, 0.0)):
                return True
        return False

    def less_equal_partly_with_dimension(self, rr: Resource, req: Resource | None) -> tuple[bool, list[str]]:
        names: list[str] = []
        if req is None:
            return False, names
        if req.milli_cpu > 0 and _le(self.milli_cpu, rr.milli_cpu):
            names.append(RES_CPU)
        if req.memory > 0 and _le(self.memory, rr.memory):
            names.append(RES_MEMORY)
        for name, q in (req.scalar_resources or {}).items():
            if name in IGNORED_SCALAR_RESOURCES:
                continue
            if q > 0 and _le(self.get(name), rr.get(name)):
                names.append(name)
        return bool(names), names

    def equal(self, rr: Resource, default: DimensionDefault) -> bool:
        def eq(a: float, b: float) -> bool:
            return a == b or abs(a - b) < MIN_RESOURCE

        if not eq(self.milli_cpu, rr.milli_cpu) or not eq(self.memory, rr.memory):
            return False
        rs = rr.scalar_resources or {}
        return all(eq(lv, rs.get(name, 0.0)) for name, lv in (self.scalar_resources or {}).items())

    def greater_partly(self, rr: Resource, default: DimensionDefault) -> tuple[bool, list[str]]:
        ok, names = self.less_equal_with_resources_name(rr, default)
        return (not ok), names

    def greater_partly_with_dimension(self, rr: Resource | None, req: Resource | None) -> tuple[bool, list[str]]:
        names: list[str] = []
        if req is None:
            return False, names
        rr = rr if rr is not None else Resource()
        if req.milli_cpu > 0 and self.milli_cpu > rr.milli_cpu:
            names.append(RES_CPU)
        if req.memory > 0 and self.memory > rr.memory:
            names.append(RES_MEMORY)
        for name, q in (req.scalar_resources or {}).items():
            if name in IGNORED_SCALAR_RESOURCES:
                continue
            if q > 0 and self.get(name) > rr.get(name):
                names.append(name)
        return bool(names), names


def _le(left: float, right: float) -> bool:
    return left < right or abs(left - right) < MIN_RESOURCE


def _set_default_value(left: Resource, right: Resource, default: DimensionDefault) -> None:
    if left.scalar_resources is None:
        left.scalar_resources = {}
    if right.scalar_resources is None:
        right.scalar_resources = {}
    for name in list(left.scalar_resources):
        if name not in right.scalar_resources:
            right.scalar_resources[name] = float(default)
    for name in list(right.scalar_resources):
        if name not in left.scalar_resources:
            left.scalar_resources[name] = float(default)


def exceeded_part(left: Resource | None, right: Resource | None) -> Resource:
    """The part of `left` above `right`, per dimension (Volcano's ExceededPart)."""
    if right is None:
        return left if left is not None else Resource()
    if left is None:
        return Resource()
    inc, _ = left.diff(right, ZERO)
    return inc


def res_min(left: Resource, right: Resource) -> Resource:
    """helpers.Min."""
    res = Resource(min(left.milli_cpu, right.milli_cpu), min(left.memory, right.memory))
    if left.scalar_resources is None or right.scalar_resources is None:
        return res
    res.scalar_resources = {n: min(v, right.scalar_resources.get(n, 0.0)) for n, v in left.scalar_resources.items()}
    return res


def res_max(left: Resource, right: Resource) -> Resource:
    """helpers.Max (negative scalars dropped, as Volcano)."""
    res = Resource(max(left.milli_cpu, right.milli_cpu), max(left.memory, right.memory))
    if left.scalar_resources is None and right.scalar_resources is None:
        return res
    sr: dict[str, float] = {}
    for n, v in (left.scalar_resources or {}).items():
        if v >= 0:
            sr[n] = v
    for n, v in (right.scalar_resources or {}).items():
        if v >= 0:
            sr[n] = max(v, sr.get(n, 0.0))
    res.scalar_resources = sr
    return res


def share(allocated: float, total: float) -> float:
    """helpers.Share: allocated/total; 1 when total is 0 but something is allocated."""
    if total == 0:
        return 0.0 if allocated == 0 else 1.0
    return allocated / total


def sum_resources(items: Iterable[Resource]) -> Resource:
    out = Resource()
    for r in items:
        out.add(r)
    return out


def is_finite(v: float) -> bool:
    return math.isfinite(v) and v != MAX_FLOAT
