"""Hardening round 2, item 10: no silent reinterpretation of what a file or an annotation says.

Before, each of these was accepted without a word: a duplicate mapping key (the last one won: an
offline pod whose annotations said `qos-level: BE` and then `qos-level: "2"` became online), YAML 1.1
octal and hex in annotation values (`010` became a watermark of 8, `0x50` one of 80), non-string
annotation values, full-width and underscored digits in quantities (`８` was 8 cores, `1_000m` one),
and a node-usage time in the future (fresh for ever). Now files follow Kubernetes' grammar: duplicate
keys are refused with their path, annotations are strings, quantities match apimachinery's grammar,
a future usage time is stale (with a warning), and `tidemark-agent plan` exits 2 on malformed objects
as `simulate` does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from agent.config import CapacityConfig
from agent.decide.capacity import publication
from agent.decide.ops import CapacityView, UsageView
from agent.model import Amounts
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tests.fuzz.corpus import base_cluster, dump
from tests.fuzz.test_corpus import CONF, _plan, _simulate
from tests.unit.agent.helpers import node as agent_node
from tidemark.apis import amount_problem, parse_quantity

Tree = Callable[..., KubeletCgroupTree]
NOW = 1_700_000_000.0
WEB_CPU = "cpu: '2'\n        memory: 4Gi"  # the online pod web's request, on n1


@pytest.fixture
def tree(kubelet_cgroup_tree: Tree) -> KubeletCgroupTree:
    t = kubelet_cgroup_tree("v2", "cgroupfs")
    t.add_pod("on-1", "Burstable", {"app": "containerd://aaa"}, cpu_request_milli=2000)
    t.add_pod("off-1", "BestEffort", {"job": "containerd://bbb"})
    t.set_memory("on-1", 3 * GiB, inactive_file=GiB)
    t.set_memory("off-1", GiB)
    return t


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _cluster(tmp_path: Path, edit: Callable[[str], str]) -> Path:
    text = dump(base_cluster()).decode()
    edited = edit(text)
    assert edited != text, "the edit did not apply"
    path = tmp_path / "cluster.yaml"
    path.write_text(edited)
    return path


def _both(path: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]) -> list[tuple[int, str]]:
    return [_simulate(path, CONF, capsys), _plan(tree, path, capsys)]


# --- duplicate keys ------------------------------------------------------------------------------------


def test_a_duplicate_annotation_key_is_refused_with_its_path(
    tmp_path: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    """The offline pod crunch says BE, then "2": last-one-wins made it online, its knobs dropped."""
    path = _cluster(tmp_path, lambda t: t.replace("    volcano.sh/qos-level: BE\n",
                                                  "    volcano.sh/qos-level: BE\n    volcano.sh/qos-level: '2'\n", 1))
    for rc, err in _both(path, tree, capsys):
        assert rc == 2, err
        assert "duplicate key 'volcano.sh/qos-level'" in err, err
        assert "metadata.annotations" in err and "line" in err, err


def test_a_duplicate_top_level_key_is_refused(
    tmp_path: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    path = _cluster(tmp_path, lambda t: t.replace("kind: Node\n", "kind: Node\nkind: Pod\n", 1))
    for rc, err in _both(path, tree, capsys):
        assert rc == 2 and "duplicate key 'kind'" in err and "document 1" in err, err


def test_duplicate_keys_in_the_agent_config_and_the_scheduler_conf_are_refused(
    tmp_path: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    cluster = _cluster(tmp_path, lambda t: t.replace("kind: Node\n", "kind: Node\n", 1) + "\n")
    config = tmp_path / "agent.yaml"
    config.write_text("sampler:\n  period: 1s\nsampler:\n  period: 5s\n")
    rc, err = _plan(tree, cluster, capsys, "--config", str(config))
    assert rc == 2 and "duplicate key 'sampler'" in err, err
    conf = tmp_path / "scheduler.conf"
    conf.write_text(CONF.read_text() + "\nactions: \"allocate\"\n")
    rc, err = _simulate(cluster, conf, capsys)
    assert rc == 2 and "duplicate key 'actions'" in err, err


# --- annotations are strings ----------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "yaml11"), [("010", 8), ("0x50", 80), ("0o17", None), ("1_0", 10), ("true", True),
                                              ("-1", -1), ("1.5", 1.5)])
def test_an_unquoted_annotation_value_is_refused(
    raw: str, yaml11: object, tmp_path: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str],
    quiet_logs: None,
) -> None:
    """Kubernetes decodes annotations into map[string]string: a number or a boolean is an error there."""
    key = "volcano.sh/evicting-cpu-high-watermark"
    anchor = "    volcano.sh/oversubscription-memory: '0'\n"
    path = _cluster(tmp_path, lambda t: t.replace(anchor, f"{anchor}    {key}: {raw}\n", 1))
    if yaml11 is None:  # YAML 1.1 has no 0o: a string, which is fine (and an invalid watermark, with a warning)
        assert _plan(tree, path, capsys)[0] == 0
        return
    rc, err = _plan(tree, path, capsys)
    assert rc == 2, err
    assert f"metadata.annotations.{key} must be a string" in err, err
    rc, err = _simulate(path, CONF, capsys)
    assert rc == 2 and "must be a string" in err, err


# --- quantities ------------------------------------------------------------------------------------------

#: apimachinery's resource.Quantity grammar (quantity.go): ASCII digits, one optional sign, an optional
#: fraction, then a binary or decimal SI suffix or an e/E integer exponent
VALID = {
    "1": Decimal(1), "+1": Decimal(1), "-1": Decimal(-1), ".5": Decimal("0.5"), "5.": Decimal(5),
    "1.5e3": Decimal(1500), "1e-3": Decimal("0.001"), "1E+3": Decimal(1000), "100m": Decimal("0.1"),
    "1n": Decimal("1e-9"), "1u": Decimal("1e-6"), "1k": Decimal(1000), "1M": Decimal(10**6), "1G": Decimal(10**9),
    "1T": Decimal(10**12), "1P": Decimal(10**15), "1E": Decimal(10**18), "1Ki": Decimal(1024),
    "1.5Gi": Decimal(3 * 2**29), "1Ei": Decimal(2**60), "0": Decimal(0), "007": Decimal(7),
}
INVALID = ["８", "1_000m", "1_000", "١", "²", " 1", "1 ", "1\n", "1e5Ki", "1.5.5", "Infinity", "inf", "NaN", "+-1",
           "1e", "e3", "1ki", "1mi", "0x10", "1E3.5", "1e+", "", ".", "-", "1 Gi", "1K", "1b", "1e99999999999999999999"]


@pytest.mark.parametrize(("text", "value"), VALID.items())
def test_quantities_kubernetes_accepts(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", INVALID)
def test_quantities_kubernetes_refuses(text: str) -> None:
    assert parse_quantity(text) is None
    assert amount_problem("cpu", text)[1] == "is not a valid quantity"


def test_numbers_are_quantities_as_their_json_text() -> None:
    assert parse_quantity(2) == Decimal(2) and parse_quantity(0.5) == Decimal("0.5")
    assert parse_quantity(float("inf")) is None and parse_quantity(True) is None


def test_a_full_width_request_is_refused_by_both_programs(
    tmp_path: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    """`cpu: "８"` was 8 cores to both programs; the API server refuses it."""
    path = _cluster(tmp_path, lambda t: t.replace(WEB_CPU, WEB_CPU.replace("'2'", "'８'"), 1))
    for rc, err in _both(path, tree, capsys):
        assert rc == 2 and "is not a valid quantity" in err, err


# --- plan exits 2 on malformed objects --------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "says"), [
    ("cpu: '4'\n", "cpu: 1e400\n", "status.allocatable"),
    ("memory: 4Gi", "memory: lots", "resources"),
    (WEB_CPU, WEB_CPU.replace("'2'", "'1_000m'"), "resources"),
])
def test_plan_exits_2_on_malformed_quantities_of_its_node_and_pods(
    old: str, new: str, says: str, tmp_path: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str],
    quiet_logs: None,
) -> None:
    """docs/security.md: `tidemark-agent plan` exits 2 with `FILE: Kind ns/name: field: why`, as simulate."""
    path = _cluster(tmp_path, lambda t: t.replace(old, new, 1))
    rc, err = _plan(tree, path, capsys)
    assert rc == 2, err
    assert f"{path}: " in err and says in err and ("Node n1" in err or "Pod shop/web" in err), err


# --- usage times in the future ---------------------------------------------------------------------------


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_future_usage_time_is_stale_for_the_scheduler(caplog: pytest.LogCaptureFixture) -> None:
    """A node claiming 99 % cpu 'a day from now' kept the usage predicate failing for ever (never stale)."""
    from tests.unit.scheduler.helpers import node, pod, session
    from tests.unit.scheduler.test_usage import only_task, plugin_of, usage_conf

    doc = {"cpu": 99, "memory": 99, "window": "60s", "time": _stamp(NOW + 86400)}
    skew = {"cpu": 99, "memory": 99, "window": "60s", "time": _stamp(NOW + 5)}  # a few seconds: clock skew
    objs = [node("far", cpu="4", memory="8Gi", pods="10", annotations={"tidemark.io/node-usage": json.dumps(doc)}),
            node("near", cpu="4", memory="8Gi", pods="10", annotations={"tidemark.io/node-usage": json.dumps(skew)}),
            pod("p1")]
    with caplog.at_level(logging.WARNING, logger="scheduler_ext.plugins.usage"):
        ssn = session(objs, usage_conf())
    plugin = plugin_of(ssn)
    assert plugin.fresh.tolist() == [False, True]
    assert plugin.batch_predicate(only_task(ssn), ssn.all_nodes).passed.tolist() == [True, False]
    assert any("in the future" in r.message and "far" in r.message for r in caplog.records)


def test_a_future_usage_time_is_republished_by_the_agent() -> None:
    """The agent re-publishes tidemark.io/node-usage when it is older than resync: a future time never was."""
    cfg = CapacityConfig()
    usage = UsageView(percent=Amounts(41.0, 12.5), samples=3, window_seconds=2.5)
    future = agent_node(oversubscription=False, annotations={"tidemark.io/node-usage": "{}"}, last_publish=NOW + 86400)
    pub = publication(future, CapacityView(), usage, cfg, NOW, stale=False)
    assert "tidemark.io/node-usage" in pub.annotations
    assert any("future" in r for r in pub.reasons), pub.reasons
    skew = agent_node(oversubscription=False, annotations={"tidemark.io/node-usage": "{}"}, last_publish=NOW + 5)
    assert not publication(skew, CapacityView(), usage, cfg, NOW, stale=False).annotations
