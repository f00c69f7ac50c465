"""`tidemark-agent plan` on malformed input: it decides, or exits 2 saying what is wrong, never crashes.

A 400-digit `volcano.sh/oversubscription-cpu` is cut in the explanation, not echoed; the corpus files that
once crashed a command (`tests.fuzz.corpus.ONCE_CRASHED`) end in exit 2 with the path, or 0 where the bad
object is not this node's business; a malformed field of the node's own pod is named; without `/proc`
inputs the capacity cannot be computed and `plan` fails closed (exit 2) instead of offering A x ratio.
The scheduler's side of the same files: tests/unit/scheduler/test_malformed_objects.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli import main as agent_main
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tests.fuzz.corpus import CASES, ONCE_CRASHED
from tidemark.clock import FakeClock

NOW = 1_700_000_000.0


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


def test_plan_decides_with_a_400_digit_annotation(tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _plan(tree, CASES / "annotations" / "node-x-cpu-400-digits.yaml", capsys)
    assert rc == 0, err
    plan = json.loads(out)
    assert any("oversubscription-cpu" in e and "out of range" in e for e in plan["explanations"])
    assert max(len(e) for e in plan["explanations"]) < 400  # the value is cut, not echoed


@pytest.mark.parametrize("case", ONCE_CRASHED)
def test_plan_exits_2_with_the_path_of_a_malformed_file(
    case: str, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _plan(tree, CASES / case, capsys)
    if case.startswith("shapes/") or case.startswith("quantities/"):
        # a pending pod of another node is not the agent's business: only the node and its pods are checked
        assert rc in (0, 2), err
    else:
        assert rc == 2, err
        assert str(CASES / case) in err
    assert "internal error" not in err


def test_plan_names_the_field_of_its_own_pod(tree: KubeletCgroupTree, tmp_path: Path,
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


@pytest.mark.parametrize("missing", ["stat", "meminfo", "both"])
def test_plan_without_proc_inputs_exits_2(
    tree: KubeletCgroupTree, tmp_path: Path, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    """`plan --proc-root /nonexistent` once exited 0 with B = A x ratio (U_non read as 0): it fails closed."""
    args = tree.cli_args()
    proc_root = Path(args[args.index("--proc-root") + 1])
    for name in (["stat", "meminfo"] if missing == "both" else [missing]):
        (proc_root / name).unlink()
    rc, out, err = _plan(tree, CASES / "lists" / "list-valid.yaml", capsys)
    assert rc == 2 and out == ""
    assert f"--proc-root {proc_root}: cannot read" in err and "U_non" in err


def test_plan_with_a_nonexistent_proc_root_exits_2(tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--node-name", "n1", "--cluster", str(CASES / "lists" / "list-valid.yaml"), *tree.cli_args()]
    argv[argv.index("--proc-root") + 1] = "/nonexistent"
    assert agent_main(argv, FakeClock(wall=NOW)) == 2
    assert "--proc-root /nonexistent: cannot read stat, meminfo" in capsys.readouterr().err
