"""Resource arithmetic and Volcano's epsilon compares."""

from __future__ import annotations

import pytest

from scheduler_ext.api.resource import (
    INFINITY,
    MIN_RESOURCE,
    ZERO,
    Resource,
    exceeded_part,
    res_max,
    res_min,
    share,
)


def r(cpu: float = 0, mem: float = 0, **scalars: float) -> Resource:
    return Resource(cpu, mem, {k.replace("_", "/"): v for k, v in scalars.items()} or None)


def test_from_resource_list_uses_volcano_units() -> None:
    res = Resource.from_resource_list(
        {"cpu": "1500m", "memory": "1Gi", "pods": "110", "nvidia.com/gpu": "2", "foo": "3"}
    )
    assert res.milli_cpu == 1500
    assert res.memory == 1024**3
    assert res.get("pods") == 110 and res.max_task_num == 110
    assert res.get("nvidia.com/gpu") == 2000  # scalars in milli units
    assert res.get("foo") == 0  # not a scalar resource name: ignored


def test_add_sub_multi_clone_are_independent() -> None:
    a = r(1000, 10, nvidia_gpu=1000)
    b = a.clone().add(r(500, 5, nvidia_gpu=1000))
    assert (a.milli_cpu, a.get("nvidia/gpu")) == (1000, 1000)
    assert (b.milli_cpu, b.memory, b.get("nvidia/gpu")) == (1500, 15, 2000)
    b.sub(r(1500, 15)).multi(2)
    assert (b.milli_cpu, b.memory, b.get("nvidia/gpu")) == (0, 0, 4000)


def test_less_equal_tolerance() -> None:
    assert r(1000.05).less_equal(r(1000), ZERO)  # within 0.1
    assert not r(1000.2).less_equal(r(1000), ZERO)
    assert r(MIN_RESOURCE / 2).is_empty()


def test_less_equal_missing_scalar_zero_vs_infinity() -> None:
    req = r(1, 1, nvidia_gpu=1000)
    node = r(10, 10)
    assert not req.less_equal(node, ZERO)  # missing on the right counts as 0
    assert req.less_equal(node, INFINITY)  # missing on the right counts as unlimited
    # Infinity: a scalar on the right missing on the left fails
    assert not r(1, 1).less_equal(r(10, 10, x_y=5), INFINITY)


def test_less_equal_with_resources_name_lists_short_dimensions() -> None:
    ok, names = r(3000, 10, nvidia_gpu=2000).less_equal_with_resources_name(r(2000, 20, nvidia_gpu=1000), ZERO)
    assert not ok and names == ["cpu", "nvidia/gpu"]


def test_less_equal_with_dimension_only_checks_requested_dims() -> None:
    used = r(5000, 1)
    deserved = r(4000, 10)
    ok, names = used.less_equal_with_dimension_and_resources_name(deserved, r(0, 1))
    assert ok and names == []  # cpu over deserved but the request asks only memory
    ok, names = used.less_equal_with_dimension_and_resources_name(deserved, r(1, 1))
    assert not ok and names == ["cpu"]


def test_diff_and_exceeded_part() -> None:
    inc, dec = r(3, 1).diff(r(1, 4), ZERO)
    assert (inc.milli_cpu, inc.memory, dec.milli_cpu, dec.memory) == (2, 0, 0, 3)
    assert exceeded_part(r(5, 5), r(3, 7)).milli_cpu == 2
    assert exceeded_part(r(5, 5), r(3, 7)).memory == 0


def test_min_dimension_and_helpers() -> None:
    a = r(10, 10, x_y=5)
    a.min_dimension_resource(r(4, 20), INFINITY)
    assert (a.milli_cpu, a.memory, a.get("x/y")) == (4, 10, 5)
    a.min_dimension_resource(r(4, 20), ZERO)
    assert a.get("x/y") == 0
    assert res_min(r(1, 5), r(3, 2)).memory == 2
    assert res_max(r(1, 5), r(3, 2)).milli_cpu == 3


@pytest.mark.parametrize(("alloc", "total", "want"), [(0, 0, 0.0), (1, 0, 1.0), (1, 4, 0.25)])
def test_share(alloc: float, total: float, want: float) -> None:
    assert share(alloc, total) == want
