"""The Resource compares the capacity plugin needs that the Resource class does not have (Volcano's api helpers).

Private to the plugin (scheduler_ext/plugins/capacity/plugin.py); nothing else in the scheduler
compares resources with these dimension filters.
"""

from __future__ import annotations

from scheduler_ext.api.resource import IGNORED_SCALAR_RESOURCES, MIN_RESOURCE, Resource


def intersection(r1: Resource, r2: Resource) -> list[str]:
    """Dimensions with a non-zero value in both (Volcano's api.Intersection)."""
    names = set(r1.resource_names())
    return [n for n in r2.resource_names() if n in names]


def intersection_without_ignored(r1: Resource, r2: Resource) -> list[str]:
    """api.IntersectionWithIgnoredScalarResources: as `intersection`, without `pods`."""
    return [n for n in intersection(r1, r2) if n not in IGNORED_SCALAR_RESOURCES]


def greater_partly_with_relevant_dimensions(r: Resource, rr: Resource | None, req: Resource) -> tuple[bool, list[str]]:
    """Whether r > rr on a dimension req asks for that rr actually has (cpu/memory >= 0.1, scalars present)."""
    rr = rr if rr is not None else Resource()
    filtered = Resource()
    if req.milli_cpu > 0 and not rr.milli_cpu < MIN_RESOURCE:
        filtered.milli_cpu = req.milli_cpu
    if req.memory > 0 and not rr.memory < MIN_RESOURCE:
        filtered.memory = req.memory
    if req.scalar_resources is not None:
        present = rr.scalar_resources or {}
        filtered.scalar_resources = {n: q for n, q in req.scalar_resources.items() if q > 0 and n in present}
    return r.greater_partly_with_dimension(rr, filtered)


def less_equal_partly_zero_filtered(r: Resource, rr: Resource, req: Resource) -> tuple[bool, list[str]]:
    """LessEqualPartlyWithDimensionZeroFiltered: dimensions zero on both sides are left out."""
    filtered = Resource()
    if req.milli_cpu > 0 and not (r.milli_cpu < MIN_RESOURCE and rr.milli_cpu < MIN_RESOURCE):
        filtered.milli_cpu = req.milli_cpu
    if req.memory > 0 and not (r.memory < MIN_RESOURCE and rr.memory < MIN_RESOURCE):
        filtered.memory = req.memory
    if req.scalar_resources is not None:
        filtered.scalar_resources = {
            n: q
            for n, q in req.scalar_resources.items()
            if q > 0 and not (r.get(n) < MIN_RESOURCE and rr.get(n) < MIN_RESOURCE)
        }
    return r.less_equal_partly_with_dimension(rr, filtered)
