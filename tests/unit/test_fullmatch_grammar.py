"""Issue 33 item 5: every regex that judges input matches the whole text (`fullmatch`).

Python's `$` also matches before a trailing newline, so `re.match(r"^...$")` let `"app\\n"` through as a
label key; the API server then refuses every pod such a profile selects. Each grammar below once used
`match` with `$`; each must now refuse the value with a newline after it.
"""

from __future__ import annotations

import pytest

from agent.knobs import is_device
from scheduler_ext.api.task import go_parse_int
from scheduler_ext.plugins.tdm import parse_int_or_percent, zone_window
from tidemark.apis import parse_oversubscription_amount, parse_qos_level
from tidemark.profiles import label_value_problem, profile_problems, qos_level_problem, qualified_name_problem


def _profile(**spec: object) -> dict[str, object]:
    return {"apiVersion": "colocation.tidemark.io/v1alpha1", "kind": "ColocationProfile",
            "metadata": {"name": "p"}, "spec": {"qosLevel": "BE", **spec}}


@pytest.mark.parametrize("key", ["app\n", "example.com/app\n", "a\n"])
def test_label_and_annotation_keys_with_a_trailing_newline_are_refused(key: str) -> None:
    assert qualified_name_problem(key) is not None
    assert profile_problems(_profile(labels={key: "v"}))
    assert profile_problems(_profile(annotations={key: "v"}))
    assert profile_problems(_profile(selector={"matchLabels": {key: "v"}}))


def test_label_values_with_a_trailing_newline_are_refused() -> None:
    assert label_value_problem("v\n") is not None
    assert profile_problems(_profile(labels={"app": "v\n"}))
    assert profile_problems(_profile(selector={"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["v\n"]}]}))
    assert label_value_problem("v") is None  # the grammar itself still holds


def test_qos_level_with_a_trailing_newline_is_refused_by_the_profile_grammar() -> None:
    assert qos_level_problem("-1\n") is not None
    assert qos_level_problem("-1") is None


def test_scheduler_int_grammars_refuse_a_trailing_newline() -> None:
    assert go_parse_int("5\n") is None  # strconv.Atoi refuses it
    assert go_parse_int("5") == 5
    assert parse_int_or_percent("3\n", 10) == 0
    assert parse_int_or_percent("30%", 10) == 3
    with pytest.raises(ValueError):
        zone_window("10:00\n-11:00", 0.0)


def test_knob_device_grammar_refuses_a_trailing_newline() -> None:
    assert not is_device("8:0\n")
    assert is_device("8:0")


def test_annotation_readers_still_strip_but_never_match_half() -> None:
    assert parse_qos_level({"volcano.sh/qos-level": "-1"}).offline
    assert parse_oversubscription_amount("12", "k").value == 12
    assert parse_oversubscription_amount("12\nx", "k").value == 0
