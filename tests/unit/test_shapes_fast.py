"""shape_problems' fast path (`_shape_ok`) agrees with the full check on objects built from the shapes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark import shapes

_WRONG = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=3),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
_LEAF = {
    "str": st.text(max_size=3),
    "int": st.integers(-(2**64), 2**64),
    "bool": st.booleans(),
    "num": st.one_of(st.integers(-5, 5), st.floats()),
    "map": st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    "strmap": st.dictionaries(st.text(max_size=2), st.one_of(st.text(max_size=2), st.none(), st.integers(),
                                                             st.lists(st.integers(), max_size=1)), max_size=2),
}


def _value(shape: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Mostly well-typed values for `shape`, sometimes a wrong type anywhere."""
    if isinstance(shape, dict):
        if depth > 6:
            return st.none()
        good = st.fixed_dictionaries({}, optional={k: _value(v, depth + 1) for k, v in shape.items()}).map(
            lambda d: {**d, "extra": 1}
        )
    elif isinstance(shape, tuple):
        good = st.lists(st.one_of(st.none(), _value(shape[1], depth + 1)), max_size=3)
    else:
        good = _LEAF[shape]
    return st.one_of(good, good, good, _WRONG)


@settings(max_examples=400)
@given(st.sampled_from(sorted(shapes.SHAPES)).flatmap(lambda kind: _value(shapes.SHAPES[kind]).map(
    lambda obj: {**obj, "kind": kind} if isinstance(obj, dict) else {"kind": kind, "metadata": obj})))
def test_fast_check_agrees_with_full_check(obj: dict[str, Any]) -> None:
    shape = shapes.SHAPES[obj["kind"]]
    full: list[str] = []
    shapes._check_shape(obj, shape, "", full)
    assert shapes._shape_ok(obj, shape) == (not full)
    assert shapes.shape_problems(obj) == full


def test_fast_check_finds_a_deep_problem() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": []}}]}}
    assert not shapes._shape_ok(pod, shapes.POD_SHAPE)
    assert shapes.shape_problems(pod) == ["spec.containers[0].resources.requests must be a mapping, not a list []"]
