"""The shared vocabulary (docs/design.md, "Vocabulary and object contracts"): every rule pinned."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark import apis

# --- booleans ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_parse_bool_true_spellings(text: str) -> None:
    assert apis.parse_bool(text) == apis.Parsed(True)


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_parse_bool_false_spellings(text: str) -> None:
    assert apis.parse_bool(text) == apis.Parsed(False)


@pytest.mark.parametrize("text", ["yes", "on", "tRUE", " true", "2", ""])
def test_parse_bool_malformed_is_false_with_warning(text: str) -> None:
    got = apis.parse_bool(text, key="k")
    assert got.value is False
    assert got.warning is not None and "k=" in got.warning


def test_parse_bool_absent_is_false_without_warning() -> None:
    assert apis.parse_bool(None) == apis.Parsed(False)


def test_label_enabled() -> None:
    assert apis.label_enabled({apis.LABEL_OVERSUBSCRIPTION: "true"}, apis.LABEL_OVERSUBSCRIPTION).value
    assert not apis.label_enabled({}, apis.LABEL_OVERSUBSCRIPTION).value
    bad = apis.label_enabled({apis.LABEL_OVERSUBSCRIPTION: "yes"}, apis.LABEL_OVERSUBSCRIPTION)
    assert not bad.value and bad.warning


# --- qos-level -----------------------------------------------------------------------------------


def _qos(value: Any) -> apis.QosLevel:
    return apis.parse_qos_level({apis.ANN_QOS_LEVEL: value})


@pytest.mark.parametrize(
    ("value", "level"),
    [("LC", 2), ("HLS", 2), ("LS", 1), ("BE", -1), (" BE ", -1), ("-7", -7), ("-1", -1), ("0", 0),
     ("+3", 3), ("7", 7), ("007", 7), ("-07", -7)],
)
def test_qos_level_valid(value: str, level: int) -> None:
    got = _qos(value)
    assert got.level == level
    assert got.reason is None


@pytest.mark.parametrize("value", ["-7", "-6", "-5", "-4", "-3", "-2", "-1", "BE"])
def test_offline_iff_level_in_minus7_to_minus1(value: str) -> None:
    assert _qos(value).offline


@pytest.mark.parametrize("value", ["0", "1", "7", "LC", "HLS", "LS"])
def test_online_levels(value: str) -> None:
    assert _qos(value).online


@pytest.mark.parametrize("value", ["be", "Be", "lc", "-8", "8", "1.5", "-1e0", "", " ", "offline", "- 1", "0x1"])
def test_qos_level_malformed_is_online_with_reason(value: str) -> None:
    got = _qos(value)
    assert got.online and got.level == 0
    assert got.reason and apis.ANN_QOS_LEVEL in got.reason


def test_qos_level_absent_is_online_without_reason() -> None:
    assert apis.parse_qos_level(None) == apis.QosLevel(0)
    assert apis.parse_qos_level({}) == apis.QosLevel(0)


def test_is_offline_reads_pod_annotations() -> None:
    assert apis.is_offline({"metadata": {"annotations": {apis.ANN_QOS_LEVEL: "-1"}}})
    assert not apis.is_offline({"metadata": {"annotations": {apis.ANN_QOS_LEVEL: "1"}}})
    assert not apis.is_offline({"metadata": None})
    assert not apis.is_offline({})


@given(st.one_of(st.text(), st.integers(), st.floats(), st.none(), st.booleans(), st.lists(st.integers())))
def test_qos_level_never_raises(value: Any) -> None:
    got = apis.parse_qos_level({apis.ANN_QOS_LEVEL: value})
    assert apis.QOS_MIN <= got.level <= apis.QOS_MAX


# --- quantities ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "raw", "want"),
    [("cpu", "1", 1000), ("cpu", "500m", 500), ("cpu", "0.1m", 1), ("cpu", 2, 2000), ("cpu", "1.5", 1500),
     ("memory", "1Gi", 1 << 30), ("memory", "1G", 10**9), ("memory", "1.5Ki", 1536), ("memory", "100m", 1),
     ("pods", "110", 110), (apis.RES_BATCH_CPU, "1500", 1500), (apis.RES_BATCH_MEMORY, "2Gi", 2 << 30),
     ("memory", "1e3", 1000)],
)
def test_canonical_amount(resource: str, raw: object, want: int) -> None:
    assert apis.canonical_amount(resource, raw) == want


@pytest.mark.parametrize("raw", ["abc", "1Q", "", None, True, "--1", "1.2.3"])
def test_malformed_quantity_is_none(raw: object) -> None:
    assert apis.parse_quantity(raw) is None
    assert apis.canonical_amount("cpu", raw) is None


def test_parse_quantity_uses_kubernetes_rules() -> None:
    assert apis.parse_quantity("1Ki") == Decimal(1024)
    assert apis.parse_quantity("250m") == Decimal("0.25")


@given(st.one_of(st.text(max_size=20), st.integers(), st.floats(allow_nan=True), st.none(), st.binary(max_size=8)))
def test_quantity_never_raises(raw: Any) -> None:
    apis.parse_quantity(raw)
    apis.canonical_amount("cpu", raw)
    apis.canonical_amount("memory", raw)


def test_parse_resource_list_drops_bad_and_negative() -> None:
    problems: list[str] = []
    got = apis.parse_resource_list({"cpu": "1", "memory": "bad", "x/y": "-1"}, problems)
    assert got == {"cpu": 1000}
    assert len(problems) == 2


def test_format_cpu() -> None:
    assert apis.format_cpu(2000) == "2"
    assert apis.format_cpu(1500) == "1500m"


# --- pod requests --------------------------------------------------------------------------------


def _c(
    cpu: str | None = None, mem: str | None = None, *, sidecar: bool = False, limits: bool = False
) -> dict[str, Any]:
    rl = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    c: dict[str, Any] = {"name": "c", "resources": {"limits" if limits else "requests": rl}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def test_pod_requests_sums_containers() -> None:
    pod = {"spec": {"containers": [_c("500m", "1Gi"), _c("250m", "512Mi")]}}
    assert apis.pod_requests(pod) == {"cpu": 750, "memory": (1 << 30) + (512 << 20)}


def test_pod_requests_takes_max_with_init_containers() -> None:
    pod = {"spec": {"containers": [_c("500m", "1Gi")], "initContainers": [_c("2", "100Mi")]}}
    assert apis.pod_requests(pod) == {"cpu": 2000, "memory": 1 << 30}


def test_pod_requests_sidecars_add_to_containers_and_to_later_init_containers() -> None:
    pod = {"spec": {
        "containers": [_c("500m")],
        "initContainers": [_c("100m", sidecar=True), _c("1")],
    }}
    # containers 500 + sidecar 100 = 600; the later init container runs beside the sidecar: 1000 + 100
    assert apis.pod_requests(pod) == {"cpu": 1100}


def test_pod_requests_sidecar_before_regular_init() -> None:
    pod = {"spec": {"containers": [_c("2")], "initContainers": [_c("300m"), _c("100m", sidecar=True)]}}
    assert apis.pod_requests(pod) == {"cpu": 2100}


def test_pod_requests_overhead_and_limits_default() -> None:
    pod = {"spec": {"containers": [_c("1", "1Gi", limits=True)], "overhead": {"cpu": "10m"}}}
    assert apis.pod_requests(pod) == {"cpu": 1010, "memory": 1 << 30}


def test_pod_requests_pod_level_resources_override_cpu_memory() -> None:
    pod = {"spec": {"containers": [_c("1", "1Gi")], "resources": {"requests": {"cpu": "3"}}}}
    assert apis.pod_requests(pod) == {"cpu": 3000, "memory": 1 << 30}


def test_pod_requests_accepts_bare_spec_and_batch_resources() -> None:
    spec = {"containers": [{"resources": {"requests": {apis.RES_BATCH_CPU: "1000", apis.RES_BATCH_MEMORY: "1Gi"}}}]}
    assert apis.pod_requests(spec) == {apis.RES_BATCH_CPU: 1000, apis.RES_BATCH_MEMORY: 1 << 30}


def test_volcano_requests_split() -> None:
    pod = {"spec": {"containers": [_c("500m", "1Gi")], "initContainers": [_c("2", "100Mi")],
                    "overhead": {"cpu": "100m"}}}
    resreq, init = apis.volcano_requests(pod)
    assert resreq == {"cpu": 600, "memory": 1 << 30}
    assert init == {"cpu": 2100, "memory": 1 << 30}


def test_volcano_requests_sidecars_count_in_both() -> None:
    pod = {"spec": {"containers": [_c("500m")], "initContainers": [_c("100m", sidecar=True), _c("1")]}}
    resreq, init = apis.volcano_requests(pod)
    assert resreq == {"cpu": 500}
    assert init == {"cpu": 1100}


def test_pod_limits_absent_when_any_container_unlimited() -> None:
    pod = {"spec": {"containers": [_c("1", "1Gi", limits=True), _c("1", limits=True)]}}
    assert apis.pod_limits(pod) == {"cpu": 2000}


_junk = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
        ["spec", "containers", "initContainers", "resources", "requests", "limits", "cpu", "memory",
         "overhead", "restartPolicy", "metadata", "annotations", "status", "qosClass"]), inner, max_size=4)),
    max_leaves=20,
)


@given(_junk)
def test_pod_arithmetic_never_raises(obj: Any) -> None:
    if not isinstance(obj, dict):
        obj = {"spec": obj}
    apis.pod_requests(obj)
    apis.volcano_requests(obj)
    apis.pod_limits(obj)
    apis.qos_class(obj)
    apis.is_offline(obj)
    apis.is_mirror_pod(obj)
    apis.node_oversubscription(obj)
    apis.node_is_evicting(obj)


# --- QoS class -----------------------------------------------------------------------------------


def test_qos_class_from_status_wins() -> None:
    assert apis.qos_class({"status": {"qosClass": "Burstable"}, "spec": {"containers": []}}) == "Burstable"


def test_qos_class_computed() -> None:
    assert apis.qos_class({"spec": {"containers": [{"name": "c"}]}}) == "BestEffort"
    assert apis.qos_class({"spec": {"containers": [_c("1", "1Gi", limits=True)]}}) == "Guaranteed"
    assert apis.qos_class({"spec": {"containers": [_c("1", "1Gi")]}}) == "Burstable"
    batch = {"spec": {"containers": [{"resources": {"requests": {apis.RES_BATCH_CPU: "1000"}}}]}}
    assert apis.qos_class(batch) == "BestEffort"


def test_mirror_pod() -> None:
    assert apis.is_mirror_pod({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}})
    assert apis.is_mirror_pod({"metadata": {"ownerReferences": [{"kind": "Node", "name": "n"}]}})
    assert not apis.is_mirror_pod({"metadata": {"ownerReferences": [{"kind": "ReplicaSet"}]}})


# --- watermarks ----------------------------------------------------------------------------------


def test_watermark_defaults() -> None:
    w = apis.parse_watermarks({})
    assert (w.cpu, w.memory, w.warnings) == ((80, 30), (60, 30), ())
    assert apis.DEFAULT_WATERMARKS == {"cpu": (80, 30), "memory": (60, 30)}


def test_watermark_keys() -> None:
    assert apis.watermark_key("cpu", "high") == "volcano.sh/evicting-cpu-high-watermark"
    assert apis.watermark_key("memory", "low") == "volcano.sh/evicting-memory-low-watermark"
    assert apis.legacy_watermark_key("cpu", "high") == "volcano.sh/oversubscription-evicting-cpu-high-watermark"


def test_watermarks_valid_pair_and_legacy_fallback() -> None:
    ann = {
        apis.watermark_key("cpu", "high"): "70", apis.watermark_key("cpu", "low"): "20",
        apis.legacy_watermark_key("memory", "high"): "90", apis.legacy_watermark_key("memory", "low"): "50",
        apis.legacy_watermark_key("cpu", "high"): "10",  # ignored: the new key is present
    }
    w = apis.parse_watermarks(ann)
    assert (w.cpu, w.memory, w.warnings) == ((70, 20), (90, 50), ())
    assert w.high("cpu") == 70 and w.low("memory") == 50


def test_watermark_one_side_given_keeps_other_default() -> None:
    w = apis.parse_watermarks({apis.watermark_key("cpu", "high"): "90"})
    assert w.cpu == (90, 30) and not w.warnings


@pytest.mark.parametrize(
    ("high", "low"),
    [("30", "30"), ("20", "30"), ("101", "30"), ("80", "-1"), ("8O", "30"), ("80.5", "30"), ("", "30")],
)
def test_invalid_pair_falls_back_whole(high: str, low: str) -> None:
    ann = {apis.watermark_key("cpu", "high"): high, apis.watermark_key("cpu", "low"): low,
           apis.watermark_key("memory", "high"): "50", apis.watermark_key("memory", "low"): "10"}
    w = apis.parse_watermarks(ann)
    assert w.cpu == (80, 30)
    assert w.memory == (50, 10)
    assert len(w.warnings) == 1 and "cpu" in w.warnings[0]


def test_watermark_edge_values_valid() -> None:
    w = apis.parse_watermarks({apis.watermark_key("cpu", "high"): "100", apis.watermark_key("cpu", "low"): "0"})
    assert w.cpu == (100, 0)


_WM_KEYS = [apis.watermark_key(r, lv) for r in ("cpu", "memory") for lv in ("high", "low")]


@given(st.dictionaries(st.sampled_from(_WM_KEYS), st.one_of(st.text(max_size=5), st.integers(), st.none())))
def test_watermarks_never_raise_and_always_valid(ann: dict[str, Any]) -> None:
    w = apis.parse_watermarks(ann)
    for pair in (w.cpu, w.memory):
        assert 0 <= pair[1] < pair[0] <= 100


# --- oversubscription annotations ----------------------------------------------------------------


def test_oversubscription_types() -> None:
    assert apis.parse_oversubscription_types({}).value == ("cpu", "memory")
    assert apis.parse_oversubscription_types({apis.ANN_OVERSUBSCRIPTION_TYPES: "cpu"}).value == ("cpu",)
    got = apis.parse_oversubscription_types({apis.ANN_OVERSUBSCRIPTION_TYPES: "memory, gpu"})
    assert got.value == ("memory",) and got.warning and "gpu" in got.warning


def _node(labels: dict[str, str], ann: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels, "annotations": ann}}


def test_node_oversubscription_needs_label() -> None:
    ann = {apis.ANN_OVERSUBSCRIPTION_CPU: "1500", apis.ANN_OVERSUBSCRIPTION_MEMORY: "1073741824"}
    assert apis.node_oversubscription(_node({}, ann))[0] == {"cpu": 0, "memory": 0}
    got, warnings = apis.node_oversubscription(_node({apis.LABEL_OVERSUBSCRIPTION: "true"}, ann))
    assert got == {"cpu": 1500, "memory": 1 << 30} and not warnings


@pytest.mark.parametrize("raw", ["-1", "1.5", "1k", "abc", "", "1e3"])
def test_node_oversubscription_malformed_is_zero_with_warning(raw: str) -> None:
    node = _node({apis.LABEL_OVERSUBSCRIPTION: "true"}, {apis.ANN_OVERSUBSCRIPTION_CPU: raw})
    got, warnings = apis.node_oversubscription(node)
    assert got["cpu"] == 0 and warnings


def test_node_is_evicting() -> None:
    assert apis.node_is_evicting(_node({}, {apis.ANN_OFFLINE_JOB_EVICTING: "true"}))
    assert not apis.node_is_evicting(_node({}, {apis.ANN_OFFLINE_JOB_EVICTING: "false"}))
    tainted = {"metadata": {}, "spec": {"taints": [{"key": apis.TAINT_OFFLINE_JOB_EVICTING, "effect": "NoSchedule"}]}}
    assert apis.node_is_evicting(tainted)


def test_percent() -> None:
    assert apis.percent(500, 1000) == 50.0
    assert apis.percent(1, 0) == 0.0


# --- Go durations (the one parser every conf, annotation and flag uses) ----------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("1s", 1.0), ("500ms", 0.5), ("1m30s", 90.0), ("1h30m", 5400.0), ("1.5h", 5400.0),
     ("-1.5s", -1.5), ("+2m", 120.0), ("100us", 1e-4), ("100µs", 1e-4), ("10ns", 1e-8), (" 3m ", 180.0),
     (".5s", 0.5)],
)
def test_parse_go_duration(text: str, seconds: float) -> None:
    got = apis.parse_go_duration(text)
    assert got is not None and abs(got - seconds) < 1e-12


@pytest.mark.parametrize("text", ["", "1", "1x", "s", "1.s2", "1 s", "--1s", "1d", ".s", 5, None])
def test_parse_go_duration_malformed_is_none(text: object) -> None:
    assert apis.parse_go_duration(text) is None


@given(st.text(max_size=12))
def test_parse_go_duration_never_raises(text: str) -> None:
    apis.parse_go_duration(text)


# --- eviction exemptions (issue #13) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        ({"metadata": {"namespace": "kube-system"}}, "in kube-system"),
        ({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}, "a mirror/static pod"),
        ({"metadata": {"ownerReferences": [{"kind": "DaemonSet", "name": "ds", "controller": True}]}},
         "owned by a DaemonSet"),
        ({"spec": {"priorityClassName": "system-node-critical"}}, "at system-critical priority"),
        ({"spec": {"priorityClassName": "system-cluster-critical"}}, "at system-critical priority"),
        ({"spec": {"priority": 2_000_001_000}}, "at system-critical priority"),
        ({"metadata": {"ownerReferences": [{"kind": "ReplicaSet"}]}, "spec": {"priority": 1000}}, None),
        ({"metadata": {"ownerReferences": "DaemonSet"}, "spec": {"priority": True}}, None),
    ],
)
def test_eviction_exemption(pod: dict[str, Any], why: str | None) -> None:
    assert apis.eviction_exemption(pod) == why
