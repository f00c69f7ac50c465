"""Watermark hysteresis: N consecutive samples over high to start, N at/under every low to clear."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.decide.watermarks import all_under_low, mode_for, over_resources, step
from agent.model import Amounts, WatermarkState
from tidemark.apis import Watermarks, parse_watermarks

MARKS = Watermarks((80, 30), (60, 30))
A = Amounts(1000, 1000)
FIT = Amounts(500, 500)  # requests within allocatable
OVER = Amounts(1500, 1500)  # requests over allocatable


def run(
    pcts: list[tuple[float, float]],
    mode: str = "usage",
    n: int = 3,
    requests: Amounts = FIT,
    start: WatermarkState | None = None,
) -> list[WatermarkState]:
    state = start or WatermarkState()
    out = []
    for cpu, mem in pcts:
        state = step(state, Amounts(cpu, mem), requests, A, MARKS, mode, n)  # type: ignore[arg-type]
        out.append(state)
    return out


def test_mode_per_label_table() -> None:
    assert mode_for(False, False) == "off"
    assert mode_for(True, False) == "usage"
    assert mode_for(True, True) == "usage"
    assert mode_for(False, True) == "usage_and_requests"


def test_over_is_at_or_past_high() -> None:
    assert over_resources(Amounts(80, 59.9), FIT, A, MARKS, "usage") == ("cpu",)
    assert over_resources(Amounts(79.9, 60), FIT, A, MARKS, "usage") == ("memory",)
    assert over_resources(Amounts(100, 100), FIT, A, MARKS, "off") == ()


def test_oversubscription_only_needs_requests_over_allocatable() -> None:
    assert over_resources(Amounts(90, 90), FIT, A, MARKS, "usage_and_requests") == ()
    assert over_resources(Amounts(90, 90), OVER, A, MARKS, "usage_and_requests") == ("cpu", "memory")
    assert over_resources(Amounts(90, 90), Amounts(1000, 1001), A, MARKS, "usage_and_requests") == ("memory",)
    states = run([(95, 0)] * 5, mode="usage_and_requests", requests=FIT)
    assert not any(s.evicting for s in states)
    states = run([(95, 0)] * 3, mode="usage_and_requests", requests=OVER)
    assert states[-1].evicting


def test_n_consecutive_samples_to_start() -> None:
    states = run([(85, 0), (85, 0), (79, 0), (85, 0), (85, 0), (85, 0)])
    assert [s.evicting for s in states] == [False, False, False, False, False, True]
    assert states[2].over_cpu == 0 and states[-1].over_cpu == 3


def test_streaks_are_per_resource() -> None:
    states = run([(85, 0), (0, 65), (85, 0), (0, 65)])
    assert not any(s.evicting for s in states)
    assert run([(85, 65), (85, 65), (85, 65)])[-1].evicting


def test_clears_after_n_under_every_low() -> None:
    evicting = WatermarkState(evicting=True)
    states = run([(50, 0), (30, 30), (30, 10), (31, 10), (20, 20), (20, 20), (20, 20)], start=evicting)
    # between low and high the node stays evicting (closed to offline work)
    assert [s.evicting for s in states] == [True, True, True, True, True, True, False]
    assert states[2].clear == 2 and states[3].clear == 0


def test_off_mode_resets() -> None:
    assert run([(99, 99)], mode="off", start=WatermarkState(evicting=True, over_cpu=5))[-1] == WatermarkState()


def test_n_one() -> None:
    assert run([(80, 0)], n=1)[-1].evicting
    assert not run([(10, 10)], n=1, start=WatermarkState(evicting=True))[-1].evicting


def test_all_under_low() -> None:
    assert all_under_low(Amounts(30, 30), MARKS)
    assert not all_under_low(Amounts(30, 30.1), MARKS)


def test_annotated_watermarks_drive_the_state() -> None:
    marks = parse_watermarks(
        {"volcano.sh/evicting-cpu-high-watermark": "40", "volcano.sh/evicting-cpu-low-watermark": "10"}
    )
    s = WatermarkState()
    for _ in range(3):
        s = step(s, Amounts(45, 0), FIT, A, marks, "usage", 3)
    assert s.evicting


@given(st.lists(st.tuples(st.floats(0, 200), st.floats(0, 200)), max_size=40), st.integers(1, 5))
def test_invariants(pcts: list[tuple[float, float]], n: int) -> None:
    state = WatermarkState()
    for cpu, mem in pcts:
        before = state
        state = step(state, Amounts(cpu, mem), FIT, A, MARKS, "usage", n)
        if state.evicting and not before.evicting:
            assert max(state.over_cpu, state.over_memory) >= n
        if before.evicting and not state.evicting:
            assert state.clear >= n and cpu <= 30 and mem <= 30


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_exactly_n(n: int) -> None:
    states = run([(99, 0)] * n, n=n)
    assert [s.evicting for s in states] == [False] * (n - 1) + [True]
