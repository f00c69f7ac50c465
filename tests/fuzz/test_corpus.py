"""Issue #13's fuzz corpus against both programs: 0 tracebacks, 0 exit-1, exit 2 names the problem.

Each cluster file (families quantities, annotations, shapes, encodings, lists) runs through
`tidemark-scheduler simulate` and `tidemark-agent plan` (on a fake kubelet cgroup tree, fake clock);
each conf runs through the program it configures. The programs run in-process through their `main`
(the console scripts call exactly that), so the ~280 runs take seconds; one subprocess test per
program proves the console scripts behave the same.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.cli import main as agent_main
from scheduler_ext.cli import main as scheduler_main
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tests.fuzz.corpus import CASES, all_cases
from tidemark.clock import FakeClock

HERE = Path(__file__).resolve().parent
CONF = HERE / "full.conf"
VALID_CLUSTER = CASES / "lists" / "list-valid.yaml"
CLUSTER_FAMILIES = ("quantities", "annotations", "shapes", "encodings", "lists", "profiles", "nodereports")

Tree = Callable[..., KubeletCgroupTree]


def _cases(families: tuple[str, ...], prefix: str = "") -> list[Path]:
    out = sorted(p for fam in families for p in (CASES / fam).glob(f"{prefix}*"))
    return out


CLUSTER_CASES = _cases(CLUSTER_FAMILIES)
SCHEDULER_CONFS = _cases(("confs",), "scheduler-")
AGENT_CONFIGS = _cases(("confs",), "agent-")
CHECKPOINTS = _cases(("checkpoints",))
TRACES = _cases(("traces",))


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.name}"


def _check(rc: int, err: str, what: str) -> None:
    assert "Traceback" not in err, f"{what}: traceback\n{err}"
    assert "internal error" not in err, f"{what}: {err}"
    assert rc in (0, 2), f"{what}: exit {rc}\n{err}"
    if rc == 2:
        assert err.strip(), f"{what}: exit 2 without saying why"


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    """simulate logs warnings through logging; keep them in stderr capture, not on the terminal."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture
def tree(kubelet_cgroup_tree: Tree) -> KubeletCgroupTree:
    t = kubelet_cgroup_tree("v2", "cgroupfs")
    t.add_pod("on-1", "Burstable", {"app": "containerd://aaa"}, cpu_request_milli=2000)
    t.add_pod("off-1", "BestEffort", {"job": "containerd://bbb"})
    t.set_memory("on-1", 3 * GiB, inactive_file=GiB)
    t.set_memory("off-1", GiB)
    return t


def _plan(tree: KubeletCgroupTree, cluster: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    clock = FakeClock(wall=1_700_000_000.0)
    clock.hooks.append(tree.hook({"on-1": 1.2, "off-1": 0.6}, other_cores=0.3))
    argv = ["plan", "--node-name", "n1", "--cluster", str(cluster), *tree.cli_args(), "-o", "json", *extra]
    rc = agent_main(argv, clock=clock)
    return rc, capsys.readouterr().err


def _simulate(cluster: Path, conf: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = scheduler_main(["simulate", "--conf", str(conf), "--cluster", str(cluster), "--cycles", "2",
                         "--now", "2026-11-24T00:00:00Z"])
    return rc, capsys.readouterr().err


def test_corpus_is_current_and_large_enough() -> None:
    """The committed files are what corpus.py generates (regenerate: python -m tests.fuzz.corpus)."""
    expected = {f"{fam}/{name}": data for fam, name, data in all_cases()}
    on_disk = {_id(p): p.read_bytes() for p in CASES.glob("*/*")}
    assert on_disk.keys() == expected.keys()
    assert [k for k in expected if on_disk[k] != expected[k]] == []
    assert len(expected) >= 135
    families = {k.split("/")[0] for k in expected}
    assert families == {*CLUSTER_FAMILIES, "confs", "checkpoints", "traces"}


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=_id)
def test_simulate_never_fails_internally(case: Path, capsys: pytest.CaptureFixture[str], quiet_logs: None) -> None:
    rc, err = _simulate(case, CONF, capsys)
    _check(rc, err, f"simulate {_id(case)}")


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=_id)
def test_plan_never_fails_internally(
    case: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    rc, err = _plan(tree, case, capsys)
    _check(rc, err, f"plan {_id(case)}")


@pytest.mark.parametrize("case", SCHEDULER_CONFS, ids=_id)
def test_bad_scheduler_confs(case: Path, capsys: pytest.CaptureFixture[str], quiet_logs: None) -> None:
    rc, err = _simulate(VALID_CLUSTER, case, capsys)
    _check(rc, err, f"simulate --conf {_id(case)}")


@pytest.mark.parametrize("case", AGENT_CONFIGS, ids=_id)
def test_bad_agent_configs(
    case: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    rc, err = _plan(tree, VALID_CLUSTER, capsys, "--config", str(case))
    _check(rc, err, f"plan --config {_id(case)}")


def test_valid_cluster_runs_both(tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]) -> None:
    """The base of every mutation is itself valid: exit 0 from both (so exit 2 above means the mutation)."""
    assert _simulate(VALID_CLUSTER, CONF, capsys)[0] == 0
    assert _plan(tree, VALID_CLUSTER, capsys)[0] == 0


#: hardening round 2 (docs/security.md): input classes both programs must refuse, not read differently
REFUSED_BY_BOTH = [
    "encodings/alias-bomb-pod.yaml", "encodings/alias-bomb-node.yaml", "encodings/alias-recursive.yaml",
    "encodings/duplicate-annotation-key.yaml", "encodings/duplicate-key-in-a-list-item.yaml",
    "encodings/duplicate-keys.yaml", "encodings/annotation-octal-unquoted.yaml",
    "encodings/annotation-hex-unquoted.yaml", "encodings/annotation-underscore-unquoted.yaml",
    "encodings/annotation-yes-unquoted.yaml", "quantities/pod-request-memory-full-width.yaml",
    "quantities/pod-request-memory-underscore.yaml",
]


@pytest.mark.parametrize("case", REFUSED_BY_BOTH)
def test_round2_input_classes_are_refused_by_both(
    case: str, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    for rc, err in (_simulate(CASES / case, CONF, capsys), _plan(tree, CASES / case, capsys)):
        assert rc == 2 and str(CASES / case) in err, f"{case}: exit {rc}\n{err}"


@pytest.mark.parametrize("case", sorted(f"quantities/{p.name}" for p in (CASES / "quantities").glob("pod-request-cpu-*")
                                        if p.stem.rsplit("-", 1)[-1] in ("width", "indic", "underscore", "space",
                                                                         "binary", "k")))
def test_round2_quantities_outside_the_grammar_are_refused(
    case: str, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    rc, err = _simulate(CASES / case, CONF, capsys)
    assert rc == 2 and "is not a valid quantity" in err, err


@pytest.mark.parametrize("conf", ["scheduler-alias-bomb.conf", "scheduler-duplicate-key.conf"])
def test_round2_confs_are_refused(conf: str, capsys: pytest.CaptureFixture[str], quiet_logs: None) -> None:
    rc, err = _simulate(VALID_CLUSTER, CASES / "confs" / conf, capsys)
    assert rc == 2 and ("alias" in err or "duplicate key" in err), err


@pytest.mark.parametrize("config", ["agent-alias-bomb.yaml", "agent-duplicate-key.yaml"])
def test_round2_agent_configs_are_refused(
    config: str, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None
) -> None:
    rc, err = _plan(tree, VALID_CLUSTER, capsys, "--config", str(CASES / "confs" / config))
    assert rc == 2 and ("alias" in err or "duplicate key" in err), err


def test_round2_anchors_within_the_budget_are_read(tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES / "encodings" / "aliases-within-budget.yaml"
    assert _simulate(case, CONF, capsys)[0] == 0
    assert _plan(tree, case, capsys)[0] == 0


@pytest.mark.parametrize(
    ("program", "case"),
    [("tidemark-scheduler", "encodings/binary-random.yaml"), ("tidemark-agent", "lists/list-items-int.yaml")],
)
def test_console_scripts_exit_2_with_the_path(program: str, case: str, tmp_path: Path) -> None:
    """The installed console scripts, as users run them (one subprocess each: ~1 s of imports)."""
    path = CASES / case
    bindir = Path(sys.executable).parent
    if program == "tidemark-scheduler":
        argv = [str(bindir / program), "simulate", "--conf", str(CONF), "--cluster", str(path)]
    else:
        argv = [str(bindir / program), "plan", "--node-name", "n1", "--cluster", str(path),
                "--proc-root", str(tmp_path), "--cgroup-root", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr


# --- hardening round 3 (issue 33): usage checkpoints and capacity traces ---------------------------------


@pytest.mark.parametrize("case", CHECKPOINTS, ids=_id)
def test_plan_reads_a_crafted_checkpoint_as_cold_and_changes_nothing(
    case: Path, tree: KubeletCgroupTree, capsys: pytest.CaptureFixture[str], quiet_logs: None, tmp_path: Path
) -> None:
    """`plan --state-dir` reads the running agent's profiles.json read-only: an unusable one is named and read
    as cold (exit 0), never raised; the agent's start reads it through the same loader (it sets it aside)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "profiles.json").write_bytes(case.read_bytes())
    rc, err = _plan(tree, VALID_CLUSTER, capsys, "--state-dir", str(state))
    _check(rc, err, f"plan --state-dir {_id(case)}")
    assert rc == 0 and (state / "profiles.json").read_bytes() == case.read_bytes()


@pytest.mark.parametrize("case", CHECKPOINTS, ids=_id)
def test_the_agent_sets_a_crafted_checkpoint_aside(case: Path, tmp_path: Path) -> None:
    from agent.act.statedir import ProfileCheckpoint
    from agent.model import ProfileState
    from tests.fuzz.corpus import CHECKPOINT_NOW

    path = tmp_path / "profiles.json"
    path.write_bytes(case.read_bytes())
    state = ProfileCheckpoint(str(path), fsync=False).load(CHECKPOINT_NOW)
    if case.stem == "valid":
        assert state != ProfileState() and path.exists()
    else:
        assert state == ProfileState() and not path.exists(), case.stem
        assert len(list(tmp_path.glob("profiles.json.corrupt-*"))) == 1


@pytest.mark.parametrize("case", TRACES, ids=_id)
def test_the_capacity_replay_refuses_a_crafted_trace_naming_it(
    case: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.test_bench_capacity import load

    load("capacity_traces")
    bench = load("bench_capacity")
    rc = bench.main(["--traces", "", "--trace", str(case)])
    err = capsys.readouterr().err
    _check(rc, err, f"bench_capacity --trace {_id(case)}")
    assert rc == 2 and str(case) in err
