"""Hypothesis properties for every parser in tidemark.apis (issue #13): whatever the input, no parser
raises, and what it returns is in range (amounts within +-MAX_AMOUNT, durations finite, levels -7..7).

Inputs are JSON-like values (what YAML or the API can carry) plus hostile strings: huge digit runs,
exponents, unicode digits, NaN/Infinity spellings.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tidemark import apis, shapes

_HOSTILE_TEXT = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"\A[+-]?[0-9]{0,500}(\.[0-9]{0,20})?([eE][+-]?[0-9]{1,12})?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|E|P)?\Z"),
    st.sampled_from(["NaN", "nan", "Infinity", "-inf", "1e400", "1E+999999999", "9" * 5000, "0" * 5000 + "1",
                     "\u0661\u0662", "1e-400", "+", "-", ".", "0x10", "1_000", " 5 ", "5\n"]),
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True), _HOSTILE_TEXT,
)
_JSON: st.SearchStrategy[Any] = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20,
)
_KEYS = st.sampled_from(
    [apis.ANN_QOS_LEVEL, apis.ANN_OVERSUBSCRIPTION_CPU, apis.ANN_OVERSUBSCRIPTION_MEMORY,
     apis.ANN_OVERSUBSCRIPTION_TYPES, apis.ANN_OFFLINE_JOB_EVICTING, apis.ANN_NODE_USAGE,
     apis.watermark_key("cpu", "high"),
     apis.watermark_key("cpu", "low"), apis.legacy_watermark_key("memory", "high"), apis.LABEL_OVERSUBSCRIPTION]
)
_ANNOTATIONS = st.dictionaries(_KEYS, _SCALARS, max_size=6)
_RESOURCE_NAMES = st.sampled_from(
    ["cpu", "memory", "pods", apis.RES_BATCH_CPU, apis.RES_BATCH_MEMORY, "nvidia.com/gpu"]
)
_RESOURCE_LIST = st.one_of(_JSON, st.dictionaries(_RESOURCE_NAMES, _SCALARS, max_size=4))
_CONTAINER = st.one_of(
    _JSON,
    st.fixed_dictionaries({}, optional={"resources": st.one_of(_JSON, st.fixed_dictionaries(
        {}, optional={"requests": _RESOURCE_LIST, "limits": _RESOURCE_LIST})), "restartPolicy": _SCALARS}),
)
_POD = st.fixed_dictionaries(
    {"kind": st.just("Pod")},
    optional={
        "metadata": st.one_of(_JSON, st.fixed_dictionaries({}, optional={"annotations": _ANNOTATIONS,
                                                                         "ownerReferences": _JSON})),
        "spec": st.one_of(_JSON, st.fixed_dictionaries({}, optional={
            "containers": st.one_of(_JSON, st.lists(_CONTAINER, max_size=3)),
            "initContainers": st.one_of(_JSON, st.lists(_CONTAINER, max_size=3)),
            "overhead": _RESOURCE_LIST, "resources": _JSON, "affinity": _JSON, "nodeSelector": _JSON})),
        "status": _JSON,
    },
)
_NODE = st.fixed_dictionaries(
    {"kind": st.just("Node")},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={"annotations": _ANNOTATIONS, "labels": _ANNOTATIONS}),
        "spec": _JSON,
        "status": st.fixed_dictionaries({}, optional={"allocatable": _RESOURCE_LIST}),
    },
)


def _amount_ok(v: int | None) -> bool:
    return v is None or (isinstance(v, int) and -apis.MAX_AMOUNT <= v <= apis.MAX_AMOUNT)


def _resources_ok(r: dict[str, int]) -> bool:
    return all(isinstance(v, int) and v >= 0 for v in r.values())


@given(_SCALARS)
def test_parse_bool_total(raw: Any) -> None:
    got = apis.parse_bool(raw)
    assert isinstance(got.value, bool)
    assert got.warning is None or got.value is False


@given(_ANNOTATIONS)
def test_label_enabled_total(labels: dict[str, Any]) -> None:
    assert isinstance(apis.label_enabled(labels, apis.LABEL_OVERSUBSCRIPTION).value, bool)


@given(st.one_of(_ANNOTATIONS, st.none()))
def test_parse_qos_level_in_range(ann: dict[str, Any] | None) -> None:
    got = apis.parse_qos_level(ann)
    assert apis.QOS_MIN <= got.level <= apis.QOS_MAX
    assert got.reason is None or got.level == 0
    assert got.reason is None or len(got.reason) < 300  # a 5000-digit value is cut in messages


@given(_SCALARS)
def test_quantities_bounded(raw: Any) -> None:
    q = apis.parse_quantity(raw)
    assert q is None or (isinstance(q, Decimal) and q.is_finite())
    assert _amount_ok(apis.quantity_to_milli(raw))
    assert _amount_ok(apis.quantity_to_int(raw))
    for r in ("cpu", "memory"):
        amount, why = apis.amount_problem(r, raw)
        assert (amount is None) != (why is None)
        assert amount is None or 0 <= amount <= apis.MAX_AMOUNT


@given(_RESOURCE_LIST)
def test_parse_resource_list_drops_bad_entries(rl: Any) -> None:
    problems: list[str] = []
    got = apis.parse_resource_list(rl, problems)
    assert all(0 <= v <= apis.MAX_AMOUNT for v in got.values())
    if isinstance(rl, dict):
        assert len(got) + len(problems) == len(rl)


@given(_POD)
def test_pod_request_arithmetic_total(pod: dict[str, Any]) -> None:
    problems: list[str] = []
    assert _resources_ok(apis.pod_requests(pod, problems))
    resreq, init = apis.volcano_requests(pod, problems)
    assert _resources_ok(resreq) and _resources_ok(init)
    assert all(init.get(k, 0) >= v for k, v in resreq.items())  # the fit request covers the accounting one
    assert _resources_ok(apis.pod_limits(pod, problems))
    assert apis.qos_class(pod) in ("Guaranteed", "Burstable", "BestEffort")
    assert isinstance(apis.is_mirror_pod(pod), bool)
    assert isinstance(apis.is_offline(pod), bool)
    assert apis.eviction_exemption(pod) is None or isinstance(apis.eviction_exemption(pod), str)
    assert all(isinstance(p, str) for p in shapes.shape_problems(pod))


@given(_NODE)
def test_node_parsers_total(node: dict[str, Any]) -> None:
    ann = node.get("metadata", {}).get("annotations")
    marks = apis.parse_watermarks(ann)
    for r in apis.RESOURCES:
        assert 0 <= marks.low(r) < marks.high(r) <= 100
    types = apis.parse_oversubscription_types(ann)
    assert set(types.value) <= set(apis.RESOURCES)
    x, warnings = apis.node_oversubscription(node)
    assert all(0 <= v <= apis.MAX_AMOUNT for v in x.values())
    assert all(isinstance(w, str) and len(w) < 400 for w in warnings)
    assert isinstance(apis.node_is_evicting(node), bool)
    assert all(isinstance(p, str) for p in shapes.shape_problems(node))


@given(_SCALARS)
def test_parse_oversubscription_amount_bounded(raw: Any) -> None:
    got = apis.parse_oversubscription_amount(raw, "k")
    assert 0 <= got.value <= apis.MAX_AMOUNT
    assert got.warning is None or got.value == 0


@given(st.one_of(_SCALARS, st.from_regex(r"\A[+-]?([0-9]{0,400}(\.[0-9]*)?(ns|us|ms|s|m|h)){1,3}\Z")))
def test_parse_go_duration_finite(raw: Any) -> None:
    got = apis.parse_go_duration(raw)
    assert got is None or math.isfinite(got)


@given(st.one_of(_SCALARS, st.builds(lambda n: "[" * n + "]" * n, st.integers(0, 100_000))))
def test_json_annotation_total(raw: Any) -> None:
    got = apis.json_annotation(raw)
    assert got is None or isinstance(got, dict)


@given(st.one_of(_JSON, _POD, _NODE))
def test_shape_problems_total(obj: Any) -> None:
    if isinstance(obj, dict):
        assert all(isinstance(p, str) for p in shapes.shape_problems(obj))
