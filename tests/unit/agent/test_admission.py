"""The admission guard: plain requests > A + X_hold for N cycles evicts plain offline pods, newest first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.decide import admission
from agent.model import AdmissionState, Amounts, PodView

from .helpers import pod

A = Amounts(4000, 4000)


def test_x_hold_is_the_largest_within_the_window() -> None:
    history = ((0.0, 900, 10), (500.0, 300, 50), (650.0, 100, 5))
    assert admission.x_hold(history, Amounts(200, 0), Amounts(100, 0), 700.0, 600.0) == Amounts(300, 50)
    assert admission.x_hold(history, Amounts(200, 0), Amounts(100, 0), 599.0, 600.0) == Amounts(900, 50)
    assert admission.x_hold((), Amounts(0, 7), Amounts(5, 0), 0.0, 600.0) == Amounts(5, 7)


def test_plain_requests_skip_terminating() -> None:
    pods = [pod("on", cpu=100), pod("off", level=-1, cpu=50, bcpu=999), pod("dying", level=-1, cpu=70, deletion=1)]
    total, online = admission.plain_requests(pods)
    assert total == Amounts(150, 0) and online == Amounts(100, 0)


def test_overflow_needs_strictly_more_and_the_type() -> None:
    hold = Amounts(500, 0)
    assert admission.overflowing(Amounts(4500, 4000), A, hold, ("cpu", "memory")) == ()
    assert admission.overflowing(Amounts(4501, 4001), A, hold, ("cpu", "memory")) == ("cpu", "memory")
    assert admission.overflowing(Amounts(4501, 4001), A, hold, ("memory",)) == ("memory",)


def test_n_consecutive_cycles_then_newest_plain_offline_first() -> None:
    pods = [
        pod("web", cpu=3000),
        pod("old", level=-1, cpu=800, created=1),
        pod("new", level=-1, cpu=800, created=3),
        pod("mid", level=-1, cpu=800, created=2),
        pod("batch", level=-1, qos="BestEffort", bcpu=5000, created=9),  # no plain request: never an admission victim
    ]
    hold = Amounts(500, 0)
    total, _ = admission.plain_requests(pods)
    assert total.cpu == 5400
    state = AdmissionState()
    for cycle in range(3):
        over = admission.overflowing(total, A, hold, ("cpu",))
        state = admission.step(state, over)
        found, _ = admission.victims(pods, state, 3, A, hold, ("cpu",))
        if cycle < 2:
            assert found == []
    # 5400 > 4500: "new" -> 4600 still over -> "mid" -> 3800 fits
    assert [v.pod.uid for v in found] == ["new", "mid"]
    assert all(v.reason == "AdmissionOverflow" for v in found)
    assert admission.step(state, ()) == AdmissionState()


def test_already_chosen_victims_count_as_released() -> None:
    pods = [pod("web", cpu=3500), pod("a", level=-1, cpu=800, created=1), pod("b", level=-1, cpu=800, created=2)]
    state = AdmissionState(overflow_cpu=3)
    found, _ = admission.victims(pods, state, 3, A, Amounts(0, 0), ("cpu",), already=["b"])
    assert [v.pod.uid for v in found] == ["a"]
    found, _ = admission.victims(pods, state, 3, A, Amounts(600, 0), ("cpu",), already=["b"])
    assert found == []


def test_online_only_overflow_is_reported_never_acted_on() -> None:
    pods = [pod("web", cpu=5000), pod("off", level=-1, cpu=100)]
    found, notes = admission.victims(pods, AdmissionState(overflow_cpu=5), 3, A, Amounts(0, 0), ("cpu",))
    assert found == [] and any("online-only overflow" in n for n in notes)


@given(
    st.lists(st.tuples(st.integers(-7, 7), st.integers(0, 3000), st.floats(0, 10)), max_size=12), st.integers(0, 3000)
)
def test_property_only_plain_offline_pods_and_it_then_holds(specs: list[tuple[int, int, float]], hold: int) -> None:
    pods: list[PodView] = [pod(f"p{i}", level=lv, cpu=c, created=t) for i, (lv, c, t) in enumerate(specs)]
    state = AdmissionState(overflow_cpu=3)
    found, _ = admission.victims(pods, state, 3, A, Amounts(hold, 0), ("cpu",))
    for v in found:
        assert v.pod.offline and v.pod.requests.cpu > 0
    total, online = admission.plain_requests(pods)
    released = sum(v.pod.requests.cpu for v in found)
    if online.cpu <= A.cpu + hold:
        assert total.cpu - released <= A.cpu + hold
