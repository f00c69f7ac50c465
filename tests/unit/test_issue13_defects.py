"""Issue #13's defects D1, D2, D5, D7 and D8, each reproduced as reported and now passing.

(D3, `restore` validation, is tested by its owner in tests/unit/agent; D4 and D6 have their own
modules: tests/unit/agent/test_fail_closed.py, tests/unit/test_serving_bounds.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli import main as agent_main
from scheduler_ext.api.task import TaskInfo
from scheduler_ext.cache.live import LiveCache
from scheduler_ext.cli import main as scheduler_main
from scheduler_ext.model.snapshot import SnapshotError, build_cluster
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tests.fuzz.corpus import CASES
from tests.unit.scheduler.helpers import node, pod, podgroup, queue, run
from tidemark import apis
from tidemark.clock import FakeClock

NOW = 1_700_000_000.0
HUGE = "9" * 400
CONF = Path(__file__).resolve().parents[1] / "fuzz" / "full.conf"
GANG_CONF = """
actions: "enqueue, allocate"
tiers:
- plugins: [{name: priority}, {name: gang}]
- plugins: [{name: drf}, {name: predicates}, {name: proportion}, {name: nodeorder}]
"""


def _live_build(objects: list[dict[str, Any]]) -> Any:
    """LiveCache's own snapshot step (leave out what cannot be parsed), without watches."""

    def factory(p: Any, now: float, problems: list[str]) -> TaskInfo:
        return TaskInfo(p, default_creation=now, problems=problems)

    return LiveCache(None, scheduler_name="volcano")._build(objects, NOW, factory)


def _plan(tree: KubeletCgroupTree, cluster: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    clock = FakeClock(wall=NOW)
    clock.hooks.append(tree.hook({"on-1": 1.2, "off-1": 0.6}, other_cores=0.3))
    rc = agent_main(["plan", "--node-name", "n1", "--cluster", str(cluster), *tree.cli_args(), "-o", "json"], clock)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def tree(kubelet_cgroup_tree: Any) -> KubeletCgroupTree:
    t: KubeletCgroupTree = kubelet_cgroup_tree("v1", "cgroupfs")
    t.add_pod("on-1", "Burstable", {"app": "containerd://aaa"}, cpu_request_milli=2000)
    t.add_pod("off-1", "BestEffort", {"job": "containerd://bbb"})
    t.set_memory("on-1", 3 * GiB, inactive_file=GiB)
    t.set_memory("off-1", GiB)
    return t


# --- D1: a 400-digit volcano.sh/oversubscription-cpu --------------------------------------------


def test_d1_agent_decides_with_a_400_digit_annotation(
    tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = _plan(tree, CASES / "annotations" / "node-x-cpu-400-digits.yaml", capsys)
    assert rc == 0, err
    plan = json.loads(out)
    assert any("oversubscription-cpu" in e and "out of range" in e for e in plan["explanations"])
    assert max(len(e) for e in plan["explanations"]) < 400  # the value is cut, not echoed


def test_d1_scheduler_snapshot_reads_x_as_0_and_schedules() -> None:
    n = node("n1", labels={apis.LABEL_OVERSUBSCRIPTION: "true"}, annotations={apis.ANN_OVERSUBSCRIPTION_CPU: HUGE})
    c = build_cluster([n, queue("q1"), podgroup("pg"), pod("p", group="pg")], now=NOW)
    assert c.nodes["n1"].oversubscription_resource.milli_cpu == 0
    assert any("out of range" in w for w in c.warnings)
    ssn = run([n, queue("q1"), podgroup("pg"), pod("p", group="pg")], GANG_CONF)
    assert ssn.jobs["ns1/pg"].tasks["ns1-p"].node_name == "n1"  # type: ignore[index]


# --- D2: minResources / capability of 1e400 -------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        podgroup("evil", minResources={"cpu": "1e400"}),
        queue("evil-q", capability={"cpu": "1e400"}),
        queue("evil-q2", deserved={"memory": HUGE}),
    ],
    ids=["podgroup-minResources", "queue-capability", "queue-deserved"],
)
def test_d2_one_tenants_absurd_quantity_stops_nobody(bad: dict[str, Any]) -> None:
    good = [node("n1"), queue("q1"), podgroup("pg"), pod("p", group="pg")]
    with pytest.raises(SnapshotError, match=r"spec\.(minResources|capability|deserved)"):
        build_cluster([*good, bad], now=NOW)  # simulate: exit 2 naming the field
    cluster = _live_build([*good, bad])  # run: the object is left out, the rest is scheduled
    assert "ns1/pg" in cluster.jobs and "ns1/evil" not in cluster.jobs
    assert "evil-q" not in cluster.queues


def test_d2_simulate_exit_2_names_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES / "quantities" / "podgroup-minresources-1e400.yaml"
    assert scheduler_main(["simulate", "--conf", str(CONF), "--cluster", str(case)]) == 2
    err = capsys.readouterr().err
    assert "PodGroup batch/gang: spec.minResources: resource cpu='1e400' is out of range" in err


# --- D5: malformed files end in exit 2 with the path, never "internal error" ----------------------

D5_CASES = [
    "encodings/binary-random.yaml",  # UnicodeDecodeError
    "encodings/latin1.yaml",
    "encodings/utf16.yaml",
    "quantities/pod-request-cpu-1e400.yaml",  # OverflowError
    "quantities/pod-request-cpu-number-huge.yaml",
    "shapes/pod-spec-containers-0-str.yaml",  # AttributeError on mis-shaped containers
    "shapes/pod-spec-containers-0-resources-list.yaml",
    "shapes/pod-spec-affinity-list.yaml",
    "shapes/pod-spec-affinity-nodeAffinity-preferredDuringSchedulingIgnoredDuringExecution-0-int.yaml",
    "shapes/pod-spec-nodeSelector-list.yaml",
    "shapes/pod-spec-nodeSelector-dict.yaml",
    "lists/list-items-int.yaml",  # the agent iterated over 5
    "lists/podlist-items-int.yaml",
    "lists/list-nested-items-int.yaml",
]


@pytest.mark.parametrize("case", D5_CASES)
def test_d5_simulate_exit_2_with_path(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = scheduler_main(["simulate", "--conf", str(CONF), "--cluster", str(CASES / case)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert str(CASES / case) in err and "internal error" not in err


@pytest.mark.parametrize("case", D5_CASES)
def test_d5_plan_exit_2_with_path(case: str, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _plan(tree, CASES / case, capsys)
    if case.startswith("shapes/") or case.startswith("quantities/"):
        # a pending pod of another node is not the agent's business: only the node and its pods are checked
        assert rc in (0, 2), err
    else:
        assert rc == 2, err
        assert str(CASES / case) in err
    assert "internal error" not in err


def test_d5_plan_names_the_field_of_its_own_pod(tree: KubeletCgroupTree, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    docs = list(yaml.safe_load_all((CASES / "lists" / "list-valid.yaml").read_text()))
    objs = docs[0]["items"]
    web = next(o for o in objs if o["kind"] == "Pod" and o["metadata"]["name"] == "web")
    web["spec"]["containers"][0]["resources"] = ["cpu"]
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    rc, _, err = _plan(tree, f, capsys)
    assert rc == 2
    assert f"{f}: Pod shop/web: spec.containers[0].resources must be a mapping, not a list" in err


# --- D7: Queue weight --------------------------------------------------------------------------------


def test_d7_queue_without_weight_gets_1_and_schedules() -> None:
    q = queue("q1")
    del q["spec"]["weight"]
    c = build_cluster([node("n1"), q], now=NOW)
    assert c.queues["q1"].weight == 1  # type: ignore[index]
    ssn = run([node("n1"), q, podgroup("pg"), pod("p", group="pg")], GANG_CONF)
    assert ssn.jobs["ns1/pg"].tasks["ns1-p"].node_name == "n1"  # type: ignore[index]


@pytest.mark.parametrize("weight", ["heavy", -4, 2.5, 10**30, True])
def test_d7_malformed_weight_warns_and_defaults(weight: Any) -> None:
    q = queue("q1")
    q["spec"]["weight"] = weight
    c = build_cluster([q], now=NOW)
    assert c.queues["q1"].weight == 1  # type: ignore[index]
    assert any(w.startswith("Queue q1: spec.weight=") for w in c.warnings)


# --- D8: missing PodGroup, duplicates, minMember < 0, negative allocatable ----------------------------


def test_d8_pod_of_a_missing_podgroup_is_reported() -> None:
    c = build_cluster([node("n1"), queue("q1"), pod("p", group="ghost")], now=NOW)
    assert any("Pod ns1/p" in w and "ns1/ghost" in w and "does not exist" in w for w in c.warnings)


@pytest.mark.parametrize("make", [lambda: pod("p", group="pg"), lambda: queue("q1"), lambda: podgroup("pg")])
def test_d8_duplicates_are_reported_and_the_first_wins(make: Any) -> None:
    second = make()
    if second["kind"] == "Queue":
        second["spec"]["weight"] = 7
    c = build_cluster([node("n1"), queue("q1"), podgroup("pg"), pod("p", group="pg"), second], now=NOW)
    assert any("defined twice" in w for w in c.warnings)
    assert c.queues["q1"].weight == 1  # type: ignore[index]


def test_d8_negative_min_member_is_refused() -> None:
    bad = podgroup("pg", min_member=-3)
    with pytest.raises(SnapshotError, match=r"PodGroup ns1/pg: spec.minMember=-3 must be >= 0"):
        build_cluster([queue("q1"), bad], now=NOW)
    cluster = _live_build([node("n1"), queue("q1"), bad, podgroup("ok"), pod("p", group="ok")])
    assert "ns1/pg" not in cluster.jobs and "ns1/ok" in cluster.jobs


def test_d8_negative_allocatable_is_refused() -> None:
    bad = node("n1", cpu="-4")
    with pytest.raises(SnapshotError, match=r"Node n1: resource cpu='-4' is negative"):
        build_cluster([bad], now=NOW)
    cluster = _live_build([bad, node("n2")])
    assert list(cluster.nodes) == ["n2"]


# --- D4 (plan): no /proc, no capacity --------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["stat", "meminfo", "both"])
def test_d4_plan_without_proc_inputs_exits_2(
    tree: KubeletCgroupTree, tmp_path: Path, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    """`plan --proc-root /nonexistent` exited 0 with B = A x ratio (U_non read as 0): it fails closed now."""
    args = tree.cli_args()
    proc_root = Path(args[args.index("--proc-root") + 1])
    for name in (["stat", "meminfo"] if missing == "both" else [missing]):
        (proc_root / name).unlink()
    rc, out, err = _plan(tree, CASES / "lists" / "list-valid.yaml", capsys)
    assert rc == 2 and out == ""
    assert f"--proc-root {proc_root}: cannot read" in err and "U_non" in err


def test_d4_plan_with_a_nonexistent_proc_root(tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--node-name", "n1", "--cluster", str(CASES / "lists" / "list-valid.yaml"), *tree.cli_args()]
    argv[argv.index("--proc-root") + 1] = "/nonexistent"
    assert agent_main(argv, FakeClock(wall=NOW)) == 2
    assert "--proc-root /nonexistent: cannot read stat, meminfo" in capsys.readouterr().err
