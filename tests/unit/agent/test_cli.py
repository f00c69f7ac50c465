"""`tidemark-agent plan` on fake kubelet trees (fake clock, no sleeps), exit codes and error lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.cli import main
from tests.fixtures.cgroups import GiB, KubeletCgroupTree
from tidemark.clock import FakeClock

Tree = Callable[..., KubeletCgroupTree]
REPO = Path(__file__).resolve().parents[3]

CLUSTER = """\
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {{volcano.sh/colocation: "true", volcano.sh/oversubscription: "true"}}
  annotations: {annotations}
status:
  allocatable: {{cpu: "4", memory: 16Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: shop, uid: on-1, creationTimestamp: "2023-11-14T20:00:00Z"}}
spec:
  nodeName: n1
  containers: [{{name: app, resources: {{requests: {{cpu: "2", memory: 4Gi}}}}}}]
status: {{qosClass: Burstable, containerStatuses: [{{name: app, containerID: "containerd://aaa"}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: crunch, namespace: batch, uid: off-1, annotations: {{volcano.sh/qos-level: BE}},
           creationTimestamp: "2023-11-14T21:00:00Z"}}
spec:
  nodeName: n1
  containers: [{{name: job, resources: {{}}}}]
status: {{qosClass: BestEffort, containerStatuses: [{{name: job, containerID: "containerd://bbb"}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: elsewhere, namespace: batch, uid: off-9}}
spec: {{nodeName: n2, containers: [{{name: x}}]}}
"""


def setup(tree: KubeletCgroupTree, tmp_path: Path, annotations: str = "{}") -> tuple[str, FakeClock]:
    tree.add_pod("on-1", "Burstable", {"app": "containerd://aaa"}, cpu_request_milli=2000)
    tree.add_pod("off-1", "BestEffort", {"job": "containerd://bbb"})
    tree.set_memory("on-1", 3 * GiB, inactive_file=GiB)
    tree.set_memory("off-1", GiB)
    tree.add_process("off-1", 7001, oom_score_adj=1000)
    cluster = tmp_path / f"cluster-{tree.version}-{tree.driver}.yaml"
    cluster.write_text(CLUSTER.format(annotations=annotations))
    clock = FakeClock(wall=1_700_000_000.0)
    clock.hooks.append(tree.hook({"on-1": 1.2, "off-1": 0.6}, other_cores=0.3))
    return str(cluster), clock


def run(argv: list[str], clock: FakeClock | None, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv, clock=clock)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_plan_json_on_fake_trees(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, driver: str
) -> None:
    tree = kubelet_cgroup_tree(version, driver)
    cluster, clock = setup(tree, tmp_path)
    rc, out, err = run(
        ["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "-o", "json"], clock, capsys
    )
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["node"] == "n1"
    assert doc["usage"] == {
        "cpu": 1800,
        "memory": 3 * GiB,
        "cpu_percent": 45.0,
        "memory_percent": 18.75,
        "online": {"cpu": 1200, "memory": 2 * GiB},
        "offline": {"cpu": 600, "memory": GiB},
    }
    # U_non = machine 2100m - offline 600m = 1500m; B = 2800 - 1500 = 1300; X = 1300 - 0 - (4000 - 2000) -> 0
    assert doc["capacity"]["policy"] == "profile"  # the default: no day of samples yet, so B is the window's
    assert doc["capacity"]["computed"]["B"]["cpu"] == 1300 and doc["capacity"]["batch"]["cpu"] == 1300
    assert doc["oversubscription"]["cpu"] == 0
    assert not doc["evicting"] and doc["evictions"] == []
    ann = doc["node_report"]["annotations"]
    assert ann["volcano.sh/oversubscription-cpu"] == "0"
    assert json.loads(ann["tidemark.io/node-usage"]) == {
        "cpu": 45.0,
        "memory": 18.75,
        "window": "3s",
        "time": "2023-11-14T22:13:23Z",
        "latest": {"cpu": 45.0, "memory": 18.75},  # steady fake load: the newest sample and the p95 are the mean
        "p95": {"cpu": 45.0, "memory": 18.75},
        "online": {"cpu": 30.0, "memory": 12.5},  # online 1200m of 4000m (the rescheduling plugin's "hot")
        # the tier's allowance (0.9 x 4000m - online 1200m; the system's 300m is not subtracted by default,
        # tier.cpu.subtractSystem) and the agent's satisfaction: its "starving"
        "offline": {"allowance": 60.0, "satisfaction": 0.6},
    }
    assert doc["node_report"]["resources"]["kubernetes.io/batch-cpu"] == "1300"
    cpu = [w for w in doc["cgroup_writes"] if w["file"].startswith("cpu.")]
    # the offline tier: ceiling = allocatable 4000m x 0.9 - online 1200m = 2400m on the BestEffort root (the system's
    # 300m not subtracted: tier.cpu.subtractSystem)
    root = tree.layout.qos("BestEffort").cpu
    quota = {"file": "cpu.cfs_quota_us", "value": "240000"}
    if version == "v2":
        quota = {"file": "cpu.max", "value": "240000 100000"}
    assert cpu == [{"path": root, **quota}, {"path": tree.pods["off-1"].dirs.cpu, "file": "cpu.idle", "value": "1"}]
    assert doc["tier"]["cpu"]["ceiling"] == 2400 and doc["tier"]["cpu"]["rule"] == "bound"
    # memory QoS: the offline pod capped at allocatable 16Gi x capacity.ratio.memory 0.5 x highRatio 0.9 (paged);
    # on v2 the online pod (request 4Gi) gets memory.low on itself, its container and its ancestors' sums
    memory = {(w["path"], w["file"]): w["value"] for w in doc["cgroup_writes"] if not w["file"].startswith("cpu.")}
    off, on = tree.pods["off-1"].dirs.memory, tree.pods["on-1"].dirs.memory
    if version == "v1":
        assert memory == {(off, "memory.soft_limit_in_bytes"): "7730937856"}
    else:
        low = str(4 * GiB)
        assert memory == {
            (off, "memory.high"): "7730937856",
            (on, "memory.low"): low,
            (tree.pods["on-1"].containers["app"].memory, "memory.low"): low,
            (tree.layout.qos("Burstable").memory, "memory.low"): low,
            (tree.kubepods.memory, "memory.low"): low,
        }
    assert any("is offline: memory." in e for e in doc["explanations"])
    assert doc["process_writes"] == []
    assert any(f"cgroup driver {driver}" in e for e in doc["explanations"])


def test_auto_driver_table_and_eviction(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = kubelet_cgroup_tree("v2", "systemd")
    # kubepods uses 45 %, online pods alone 30 %: the satisfaction measure (the default) evicts only past 30
    annotations = '{volcano.sh/evicting-cpu-high-watermark: "25", volcano.sh/evicting-cpu-low-watermark: "10"}'
    cluster, clock = setup(tree, tmp_path, annotations)
    args = tree.cli_args()
    args = args[: args.index("--cgroup-driver")] + args[args.index("--cgroup-driver") + 2 :]
    rc, out, err = run(["plan", "--node-name", "n1", "--cluster", cluster, *args], clock, capsys)
    assert rc == 0, err
    assert "cgroup driver systemd (" in out and "exists" in out
    assert "Evicting: yes" in out
    assert "batch/crunch  OnlineCPUHighWatermark" in out
    assert "evicting-" not in out.split("NodeReport:")[1].split("\n")[0]
    assert '"volcano.sh/offline-job-evicting": "true"' in out


def test_fewer_samples_than_n(kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = kubelet_cgroup_tree("v1")
    cluster, clock = setup(tree, tmp_path)
    rc, out, _ = run(
        [
            "plan",
            "--node-name",
            "n1",
            "--cluster",
            cluster,
            *tree.cli_args(),
            "--samples",
            "2",
            "--interval",
            "0.5",
            "-o",
            "json",
        ],
        clock,
        capsys,
    )
    assert rc == 0
    doc = json.loads(out)
    assert "--samples 2 < N=3: using N=2 consecutive samples" in doc["explanations"]
    assert doc["usage"]["cpu"] == 1800


def test_config_file(kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = kubelet_cgroup_tree("v1")
    cluster, clock = setup(tree, tmp_path)
    config = tmp_path / "agent.yaml"
    config.write_text("capacity:\n  ratio: {cpu: 0.5}\n  policy: window\nunknown: 1\n")
    rc, out, _ = run(
        ["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "--config", str(config), "-o", "json"],
        clock,
        capsys,
    )
    assert rc == 0
    doc = json.loads(out)
    assert doc["capacity"]["computed"]["B"]["cpu"] == 500  # 4000 * 0.5 - 1500
    assert any("unknown: unknown key" in e for e in doc["explanations"])
    config.write_text("capacity:\n  ratio: {cpu: 2, memory: -1}\nsampler: {smoothing: median}\n")
    rc, _, err = run(
        ["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "--config", str(config)], clock, capsys
    )
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("tidemark-agent: config ") for line in lines)
    assert "capacity.ratio.cpu: must be in (0, 1]" in err and "sampler.smoothing" in err


def test_bad_input_exit_2(kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = kubelet_cgroup_tree("v1")
    cluster, clock = setup(tree, tmp_path)
    base = ["plan", "--cluster", cluster, *tree.cli_args()]
    assert (
        run([*base, "--node-name", "nope"], clock, capsys)[2] == f"tidemark-agent: node 'nope' not found in {cluster}\n"
    )
    assert run(base, clock, capsys)[0] == 2  # --node-name missing
    assert run([*base, "--node-name", "n1", "--samples", "0"], clock, capsys)[0] == 2
    assert run([*base, "--node-name", "n1", "--interval", "-1"], clock, capsys)[0] == 2
    assert run([*base, "--node-name", "n1", "-o", "xml"], clock, capsys)[0] == 2
    assert run([*base, "--node-name", "n1", "--kubeconfig", "k"], clock, capsys)[0] == 2  # one source only
    (tmp_path / "bad.yaml").write_text("kind: [")
    rc, _, err = run(
        ["plan", "--node-name", "n1", "--cluster", str(tmp_path / "bad.yaml"), *tree.cli_args()], clock, capsys
    )
    assert rc == 2 and "is not valid YAML" in err and len(err.splitlines()) == 1
    rc, _, err = run(["plan", "--node-name", "n1", "--cluster", str(tmp_path / "absent.yaml")], clock, capsys)
    assert rc == 2 and "cannot read" in err
    assert run([], clock, capsys)[0] == 2
    assert run(["--help"], clock, capsys)[0] == 0


def test_runtime_failures_exit_1(kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = kubelet_cgroup_tree("v1")
    cluster, clock = setup(tree, tmp_path)
    rc, _, err = run(
        [
            "plan",
            "--node-name",
            "n1",
            "--cluster",
            cluster,
            "--cgroup-root",
            str(tmp_path / "none"),
            "--proc-root",
            tree.proc_root,
        ],
        clock,
        capsys,
    )
    assert rc == 1 and "cannot list the cgroup root" in err
    rc, _, err = run(
        ["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "--kube-cgroup-root", "/x"], clock, capsys
    )
    assert rc == 1 and "no kubepods cgroup at" in err and len(err.splitlines()) == 1


def test_run_refuses_a_bad_config_and_restore_without_a_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "agent.yaml"
    bad.write_text("capacity: {ratio: {cpu: 2}}\nsampler: {period: -1}\n")
    rc, _, err = run(["run", "--config", str(bad), "--state-dir", str(tmp_path / "s")], None, capsys)
    assert rc == 2 and "capacity.ratio.cpu" in err and "sampler.period" in err and "Traceback" not in err
    rc, out, _ = run(["restore", "--state-dir", str(tmp_path / "absent")], None, capsys)
    assert rc == 0 and "nothing to restore" in out


def test_console_script_exit_codes(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "tidemark-agent"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "agent.cli"]
    r = subprocess.run(
        [*cmd, "plan", "--node-name", "n1", "--cluster", str(tmp_path / "x.yaml")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = subprocess.run(
        [*cmd, "run", "--config", str(tmp_path / "absent.yaml")], capture_output=True, text=True, cwd=REPO
    )
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_nothing_is_imported_while_sampling(kubelet_cgroup_tree: Tree, tmp_path: Path) -> None:
    """Slow work (imports, YAML) happens before the first cgroup read: a fresh interpreter proves it."""
    tree = kubelet_cgroup_tree("v2", "systemd")
    cluster, _ = setup(tree, tmp_path)
    script = textwrap.dedent(
        f"""
        import sys
        from tidemark.clock import FakeClock
        from agent.cli import main
        seen = []
        clock = FakeClock()
        clock.hooks.append(lambda s: seen.append(set(sys.modules)))
        rc = main(["plan", "--node-name", "n1", "--cluster", {cluster!r}, *{tree.cli_args()!r}, "--samples", "4"],
                  clock=clock)
        assert rc == 0, rc
        assert len(seen) == 4
        new = set().union(*seen) - seen[0]
        assert not new, sorted(new)
        print("ok")
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")


def test_plan_shows_psi_of_the_node_kubepods_and_online_pods(
    kubelet_cgroup_tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = kubelet_cgroup_tree("v2")
    cluster, clock = setup(tree, tmp_path)
    tree.write(tree.kubepods, "memory.pressure", "some avg10=4.50 avg60=1.00 avg300=0.00 total=9\n")
    tree.write(tree.pods["on-1"].dirs, "cpu.pressure", "some avg10=33.00 avg60=1.00 avg300=0.00 total=9\n")
    tree.write(tree.pods["off-1"].dirs, "cpu.pressure", "some avg10=77.00 avg60=1.00 avg300=0.00 total=9\n")
    pressure_dir = Path(tree.proc_root) / "pressure"
    pressure_dir.mkdir(exist_ok=True)
    (pressure_dir / "cpu").write_text("some avg10=12.25 avg60=0.00 avg300=0.00 total=1\n")
    rc, out, err = run(
        ["plan", "--node-name", "n1", "--cluster", cluster, *tree.cli_args(), "-o", "json"], clock, capsys
    )
    assert rc == 0, err
    text = "\n".join(json.loads(out)["explanations"])
    assert "node pressure (PSI some avg10, /proc/pressure): cpu 12.2 %" in text
    assert "kubepods pressure (PSI some avg10): cpu 0.0 %, memory 4.5 %" in text
    assert "online pods' pressure (PSI some avg10, highest first): shop/web cpu 33.0 %" in text
    assert "crunch" not in text.split("online pods' pressure", 1)[1].split("\n", 1)[0], "offline pods are not shown"
