"""Configuration: the defaults of docs/agent.md, "Configuration reference", one documented table, every problem
at once, never raising."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.config import (
    DEFAULT_CONFIG,
    FIELDS,
    AgentConfig,
    errors,
    field_doc,
    load_config,
    load_config_file,
    load_config_text,
    parse_duration,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "agent-config.yaml"


def test_defaults_per_design() -> None:
    c = AgentConfig()
    assert (c.capacity.ratio_cpu, c.capacity.ratio_memory) == (0.70, 0.50)
    assert (c.capacity.reserve_cpu, c.capacity.reserve_memory) == (0, 0)
    assert (c.sampler.period, c.sampler.window, c.sampler.smoothing) == (1.0, 60.0, "mean")
    assert c.capacity.period == 10.0 and c.capacity.resync == 60.0 and c.capacity.publish_threshold == 0.10
    assert c.capacity.stale_periods == 3
    assert c.eviction.consecutive == 3 and c.eviction.terminating_slack == 10.0 and c.eviction.admission_hold == 600.0
    assert c.eviction.taint is False and c.eviction.grace_period is None
    assert c.qos.cpu_burst is False and c.qos.min_offline_quota == 20 and c.qos.oom_score_adj == 1000
    assert c.qos.reconcile == 10.0
    assert load_config(None) == (DEFAULT_CONFIG, ())
    assert load_config({}) == (DEFAULT_CONFIG, ())


def test_every_field_is_in_the_table_and_documented() -> None:
    mapped = {(f.section, f.attr) for f in FIELDS}
    for section in fields(AgentConfig):
        for f in fields(getattr(DEFAULT_CONFIG, section.name)):
            assert (section.name, f.name) in mapped, f"{section.name}.{f.name} has no YAML key"
            assert len(str(f.metadata.get("doc", ""))) > 20, f"{section.name}.{f.name} is undocumented"
    assert len({f.key for f in FIELDS}) == len(FIELDS)
    assert all(field_doc(f) for f in FIELDS)


def test_values_are_parsed() -> None:
    config, problems = load_config(
        {
            "sampler": {"period": "500ms", "window": "2m", "smoothing": "p95"},
            "capacity": {
                "ratio": {"cpu": 0.6, "memory": "0.4"},
                "reserve": {"cpu": "500m", "memory": "1Gi"},
                "publish": {
                    "threshold": 0.2,
                    "resync": "1m30s",
                    "stale_periods": 5,
                    "extended_resources": "false",
                    "annotations": True,
                },
            },
            "eviction": {
                "consecutive": 5,
                "grace_period": "30s",
                "max_per_cycle": 2,
                "taint": "true",
                "admission_hold": 300,
            },
            "qos": {"min_offline_quota": "50m", "cpu_burst": {"enabled": True, "percent": 50}},
            "memoryQoS": {"enabled": "false", "minRatio": 0.5, "minReserve": "1Gi", "releaseSamples": "5"},
        }
    )
    assert problems == ()
    assert config.sampler.period == 0.5 and config.sampler.window == 120 and config.sampler.smoothing == "p95"
    assert config.capacity.ratio_cpu == 0.6 and config.capacity.ratio_memory == 0.4
    assert config.capacity.reserve_cpu == 500 and config.capacity.reserve_memory == 2**30
    assert config.capacity.resync == 90 and config.capacity.extended_resources is False
    assert config.eviction.consecutive == 5 and config.eviction.grace_period == 30 and config.eviction.taint
    assert config.qos.min_offline_quota == 50 and config.qos.cpu_burst and config.qos.cpu_burst_percent == 50
    m = config.memory_qos
    assert not m.enabled and m.min_ratio == 0.5 and m.min_reserve == 2**30 and m.release_samples == 5


def test_every_problem_at_once_with_its_path_and_defaults_kept() -> None:
    config, problems = load_config(
        {
            "capacity": {"ratio": {"cpu": 0, "memory": 1.5}, "reserve": {"cpu": "lots"}},
            "sampler": {"period": -1, "smoothing": "median"},
            "eviction": {"consecutive": 0, "taint": "maybe"},
            "qos": {"cpu_burst": {"percent": 101}, "oom_score_adj": 5000},
            "bogus": 1,
            "qos_typo": {"x": 1},
        }
    )
    by_path = {p.path: p for p in problems}
    assert str(by_path["capacity.ratio.cpu"]).startswith("capacity.ratio.cpu: must be in (0, 1]")
    assert "capacity.ratio.memory" in by_path and "capacity.reserve.cpu" in by_path
    assert {
        "sampler.period",
        "sampler.smoothing",
        "eviction.consecutive",
        "eviction.taint",
        "qos.cpu_burst.percent",
        "qos.oom_score_adj",
    } <= set(by_path)
    assert by_path["bogus"].severity == "warning" and by_path["qos_typo"].severity == "warning"
    assert len(errors(problems)) == 9
    assert config == DEFAULT_CONFIG  # every bad value kept its documented default


def test_section_must_be_a_mapping() -> None:
    config, problems = load_config({"capacity": 5, "sampler": None})
    assert config == DEFAULT_CONFIG
    assert [str(p) for p in problems] == ["capacity: must be a mapping, got 5; using the defaults"]
    assert load_config([1, 2])[1][0].message.startswith("the configuration must be a mapping")


def test_window_not_shorter_than_period() -> None:
    config, problems = load_config({"sampler": {"period": 5, "window": 2}})
    assert config.sampler.window == 5 and problems[0].path == "sampler.window"


def test_starvation_window_not_longer_than_the_sampler_window() -> None:
    config, problems = load_config({"sampler": {"window": "20s"}, "eviction": {"cpu": {"window": "45s"}}})
    assert config.eviction_cpu.window == 20 and [p.path for p in problems] == ["eviction.cpu.window"]
    assert "sampler.window (20 s)" in problems[0].message
    config, problems = load_config({"eviction": {"cpu": {"window": "0"}}})
    assert config.eviction_cpu.window == 0 and not problems
    config, problems = load_config({"sampler": {"window": "5s"}})  # the default follows a short sampler window
    assert config.eviction_cpu.window == 5 and not problems


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        (1, 1.0),
        (2.5, 2.5),
        ("10", 10.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("1h", 3600.0),
        ("250us", 0.00025),
        ("", None),
        ("5x", None),
        ("٣", None),
        ("٣s", None),
        ("²", None),
        ("-1s", None),
        (-3, None),
        (True, None),
        (None, None),
        ([1], None),
        ("1s5", None),
    ],
)
def test_parse_duration(raw: object, seconds: float | None) -> None:
    assert parse_duration(raw) == seconds


def test_text_and_file(tmp_path: Path) -> None:
    assert load_config_text("")[0] == DEFAULT_CONFIG
    assert load_config_text("capacity: [")[1][0].message.startswith("not valid YAML")
    assert load_config_file(str(tmp_path / "absent.yaml"))[1][0].message.startswith("cannot read")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    assert load_config_file(str(tmp_path / "bin.yaml"))[1]


def test_example_file_is_the_defaults() -> None:
    config, problems = load_config_file(str(EXAMPLE))
    assert problems == () and config == DEFAULT_CONFIG


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)
known_keys = st.sampled_from([f.key for f in FIELDS])


@given(st.dictionaries(known_keys, yaml_values, max_size=6))
def test_malformed_values_never_raise(flat: dict[str, object]) -> None:
    nested: dict[str, object] = {}
    for key, value in flat.items():
        cursor = nested
        *parents, leaf = key.split(".")
        for part in parents:
            cursor = cursor.setdefault(part, {})  # type: ignore[assignment]
        cursor[leaf] = value
    config, _problems = load_config(nested)
    assert isinstance(config, AgentConfig)
    assert 0 < config.capacity.ratio_cpu <= 1 and config.eviction.consecutive >= 1
    assert config.sampler.window >= config.sampler.period > 0


@given(yaml_values)
def test_any_document_never_raises(data: object) -> None:
    load_config(data)


@given(st.text(max_size=200))
def test_any_text_never_raises(text: str) -> None:
    load_config_text(text)


def test_docs_reference_every_key() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "agent.md").read_text()
    missing = [f.key for f in FIELDS if f"`{f.key}`" not in text]
    assert missing == []


# --- per-node overrides ------------------------------------------------------------------------------------

OVERRIDES = """
eviction: {consecutive: 4, taint: false}
overrides:
- name: gold
  nodeSelector:
    matchLabels: {tier: gold}
  config:
    eviction: {taint: true}
- nodeSelector:
    matchExpressions:
    - {key: zone, operator: In, values: [a, b]}
    - {key: spot, operator: DoesNotExist}
  config:
    eviction: {consecutive: 2}
    capacity: {ratio: {cpu: 0.6}}
"""


def test_overrides_apply_by_node_labels_in_file_order() -> None:
    import yaml

    from agent.config import parse_document

    doc, problems = parse_document(yaml.safe_load(OVERRIDES))
    assert problems == ()
    base, _, applied = doc.resolve({"tier": "silver"})
    assert (base.eviction.consecutive, base.eviction.taint, applied) == (4, False, ())
    gold, _, applied = doc.resolve({"tier": "gold", "zone": "b"})
    assert (gold.eviction.consecutive, gold.eviction.taint, gold.capacity.ratio_cpu) == (2, True, 0.6)
    assert applied == ("gold", "overrides[1]")
    spot, _, applied = doc.resolve({"zone": "a", "spot": "true"})
    assert applied == () and spot.eviction.consecutive == 4
    assert load_config(yaml.safe_load(OVERRIDES))[0].eviction.consecutive == 4  # no labels: no override
    assert load_config(yaml.safe_load(OVERRIDES), {"tier": "gold"})[0].eviction.taint is True


def test_override_problems_have_their_paths() -> None:
    import yaml

    bad = """
overrides:
- nodeSelector: {matchExpressions: [{key: zone, operator: Near, values: [a]}]}
  config: {eviction: {consecutive: 0}}
- nodeSelector: {matchLabels: {tier: gold}}
  config: {eviction: {consecutive: zero, bogus: 1}}
  extra: 1
- config: {}
"""
    config, problems = load_config(yaml.safe_load(bad), {"tier": "gold"})
    paths = {p.path: p.severity for p in problems}
    assert paths == {
        "overrides[0].nodeSelector.matchExpressions[0].operator": "error",
        "overrides[1].extra": "warning",
        "overrides[1].config.eviction.consecutive": "error",
        "overrides[1].config.eviction.bogus": "warning",
        "overrides[2].nodeSelector": "error",
    }
    assert config.eviction.consecutive == 3  # the bad override value falls back to the base (the default)
    assert load_config({"overrides": "x"})[1][0].path == "overrides"
