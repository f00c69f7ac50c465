"""amount_problem's memo for quantity strings answers exactly as the computation does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemark import quantities as apis  # the memo lives with the quantities (tidemark/quantities.py)

_TEXT = st.one_of(st.from_regex(r"\A[+-]?[0-9]{0,25}(\.[0-9]{0,6})?([eE][+-]?[0-9]{1,3}|[numkMGTPE]i?|Ki)?\Z"),
                  st.text(max_size=8))


@given(st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu"]), _TEXT)
def test_memo_agrees_with_the_computation(resource: str, raw: str) -> None:
    first = apis.amount_problem(resource, raw)
    assert first == apis._amount_problem(resource, raw)
    assert apis.amount_problem(resource, raw) == first  # the memo's answer


def test_memo_is_bounded_and_keeps_answering() -> None:
    for i in range(apis._AMOUNTS_MAX + 10):
        assert apis.amount_problem("cpu", f"{i}m") == (i, None)
    assert len(apis._AMOUNTS) <= apis._AMOUNTS_MAX
    assert apis.amount_problem("memory", "-1") == (None, "is negative")
