"""The live agent when things go wrong: an API outage, malformed annotations, restores, a kill mid-way.

The outage: the agent's client is pointed at a closed port (connection refused) and its watches end
every 2 s, so every list, watch and write fails until the host is put back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent.cli import main
from tests.fixtures.cgroups import MiB
from tests.integration.agent_live.conftest import FAST_CONFIG, LiveNode, read_knob, wait_for
from tests.integration.kube.helpers import closed_port
from tidemark.apis import ANN_NODE_USAGE, ANN_OFFLINE_JOB_EVICTING

pytestmark = [
    pytest.mark.kube,
    pytest.mark.cgroup,
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),
]
REPO = Path(__file__).resolve().parents[3]


def test_survives_an_api_outage_local_qos_goes_on_and_writes_resync(live: LiveNode) -> None:
    live.create_node(memory="1Gi")
    pod = live.add_pod("etl", qos="BE", busy=False)
    hog = live.add_pod("hog", qos="BE", busy=False, start=False)  # its process starts during the outage
    dirs = live.tree.pods[pod.uid].dirs
    running = live.start_agent(watch_timeout=2, api_ready_window=2.0)
    agent = running.agent
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1", "the offline knobs")
    wait_for(lambda: ANN_NODE_USAGE in live.annotations(), "the first publication")
    wait_for(lambda: agent.ready()[0], "/readyz")
    real_host = running.api.configuration.host
    running.api.configuration.host = f"https://127.0.0.1:{closed_port()}"
    try:
        wait_for(lambda: not agent.ready()[0], "/readyz to fail once the API is unreachable")
        samples = agent.stats.samples
        with open(os.path.join(dirs.cpu, "cpu.idle"), "w") as f:  # "kubelet" resets a knob during the outage
            f.write("0")
        wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1", "local QoS to put the knob back during the outage")
        live.tree.start_process(hog.uid, "c", memory_bytes=700 * MiB, busy=False)  # memory past the high watermark
        wait_for(lambda: agent.cycle.last_plan is not None and agent.cycle.last_plan.evicting, "the decision to evict")
        wait_for(lambda: agent.worker.backing_off(), "the failed Node patch to back off")
        assert agent.stats.samples > samples and agent.healthy()[0]
        assert not live.terminating("hog"), "no eviction before the Node is marked evicting"
        assert ANN_OFFLINE_JOB_EVICTING not in live.annotations()
    finally:
        running.api.configuration.host = real_host
    wait_for(lambda: live.annotations().get(ANN_OFFLINE_JOB_EVICTING) == "true", "the Node marked after the outage")
    wait_for(lambda: live.terminating("hog"), "the eviction after the outage", timeout=40)
    wait_for(lambda: agent.ready()[0], "/readyz again", timeout=40)
    # the write that failed first may be the annotations' or the batch resources' (status) one
    assert agent.stats.api_writes[("node", "error")] + agent.stats.api_writes[("status", "error")] >= 1
    # the Node can carry the mark before the agent counts its write: the NodeReport controller applies the report
    # while the agent's wait for it may still time out once and retry
    wait_for(lambda: agent.stats.api_writes[("node", "ok")] >= 2, "the agent's own writes to succeed again", timeout=40)


def test_malformed_annotations_change_nothing_but_a_reported_reason(live: LiveNode) -> None:
    live.create_node(annotations={"volcano.sh/evicting-cpu-high-watermark": "abc"})
    offline = live.add_pod("etl", qos="BE", busy=False)
    garbled = live.add_pod("odd", qos="not-a-level", busy=False)
    running = live.start_agent()
    dirs = live.tree.pods[offline.uid].dirs
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1", "the offline knobs")
    bad = wait_for(lambda: live.events("InvalidAnnotation"), "an InvalidAnnotation event on the Node")
    assert "cpu watermarks high='abc'" in bad[0]["message"] and "using the defaults 80/30" in bad[0]["message"]
    assert running.agent.cycle.last_plan is not None
    # the default pair (docs/design.md, "Vocabulary and object contracts")
    assert running.agent.view.node.watermarks.high("cpu") == 80
    wait_for(lambda: live.events("InvalidQosLevel"), "an InvalidQosLevel event on the pod")
    assert read_knob(live.tree.pods[garbled.uid].dirs.cpu, "cpu.idle") == "0"  # malformed = online: no knobs
    # the qos-level is fixed at first sight: an edit is reported and ignored
    live.kube.core.patch_namespaced_pod(
        "etl", live.kube.name, {"metadata": {"annotations": {"volcano.sh/qos-level": "LC"}}}
    )
    ignored = wait_for(lambda: live.events("QosLevelChangeIgnored"), "a QosLevelChangeIgnored event")
    assert "first seen at level -1" in ignored[0]["message"]
    live.cycles(running, reconciles=2)
    assert read_knob(dirs.cpu, "cpu.idle") == "1"
    with open(Path(live.state_dir()) / "qos-classes.json") as f:
        assert f'"{offline.uid}"' in f.read()


def restore_args(live: LiveNode) -> list[str]:
    """`tidemark-agent restore` flags: the state dir and the roots to restore under (never read from the journal)."""
    return ["--state-dir", live.state_dir(), "--kube-cgroup-root", live.tree.kube_cgroup_root]


def test_restore_command_offline_and_through_a_running_agent(
    live: LiveNode, capsys: pytest.CaptureFixture[str]
) -> None:
    live.create_node()
    pod = live.add_pod("etl", qos="BE", requests={"cpu": "200m"}, busy=False)
    dirs = live.tree.pods[pod.uid].dirs
    quota = read_knob(dirs.cpu, "cpu.cfs_quota_us")
    running = live.start_agent()
    wait_for(
        lambda: read_knob(dirs.cpu, "cpu.idle") == "1" and read_knob(dirs.cpu, "cpu.cfs_quota_us") != quota, "knobs"
    )
    # while the agent runs: the request goes through it (it holds the state dir's lock)
    assert main(["restore", *restore_args(live)]) == 0
    assert "the running agent restored" in capsys.readouterr().out
    assert read_knob(dirs.cpu, "cpu.idle") == "0" and read_knob(dirs.cpu, "cpu.cfs_quota_us") == quota
    live.cycles(running, reconciles=2)  # reconciles later the agent still leaves them alone
    assert read_knob(dirs.cpu, "cpu.idle") == "0" and running.agent.qos.paused
    running.stop()

    again = live.start_agent()  # a new agent applies again...
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1", "knobs again")
    again.stop()  # ...and stops without restoring (an update, not an uninstall)
    assert read_knob(dirs.cpu, "cpu.idle") == "1"
    assert main(["restore", *restore_args(live)]) == 0  # no agent: restores directly
    out = capsys.readouterr().out
    assert "restored" in out and "0 failed" in out
    assert read_knob(dirs.cpu, "cpu.idle") == "0" and read_knob(dirs.cpu, "cpu.cfs_quota_us") == quota


def test_a_killed_agent_leaves_a_journal_that_is_replayed(live: LiveNode) -> None:
    """`tidemark-agent run` (the real command) is SIGKILLed; the next agent replays the journal and restores."""
    live.create_node()
    pod = live.add_pod("etl", qos="BE", busy=False)
    dirs = live.tree.pods[pod.uid].dirs
    with open(f"/proc/{pod.process.pid}/oom_score_adj") as f:  # type: ignore[union-attr]
        oom_before = f.read().strip()
    cmd = [sys.executable, "-m", "agent.cli", "run", *live.cli_args()]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "1" or proc.poll() is not None, "the agent's knobs", 30)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    journal = Path(live.state_dir()) / "journal.json"
    assert journal.exists() and str(dirs.cpu) in journal.read_text()
    # "kubelet" changes one owned knob meanwhile: the replay lets go of it. v1 refuses a child's quota above its
    # parent's, and the killed agent left the offline tier's ceiling on the BestEffort root: stay under it.
    root = int(read_knob(os.path.dirname(dirs.cpu), "cpu.cfs_quota_us") or "-1")
    changed = "50000" if root < 0 or root >= 50000 else str(max(1000, root // 2))
    with open(os.path.join(dirs.cpu, "cpu.cfs_quota_us"), "w") as f:
        f.write(changed)
    running = live.start_agent(FAST_CONFIG.replace("qos: {reconcile: 1s}", "qos: {reconcile: 1s, enabled: false}"))
    wait_for(lambda: read_knob(dirs.cpu, "cpu.idle") == "0", "the replayed journal's originals back")
    # the restore puts cgroup files back first, then processes: awaited, not read in between
    oom = f"/proc/{pod.process.pid}/oom_score_adj"  # type: ignore[union-attr]
    wait_for(lambda: read_knob(*os.path.split(oom)) == oom_before, f"oom_score_adj back to {oom_before}")
    assert read_knob(dirs.cpu, "cpu.cfs_quota_us") == changed
    wait_for(lambda: len(running.state.journal) == 0, "an empty journal")


def test_run_once_through_the_command_line(live: LiveNode) -> None:
    """`tidemark-agent run --once`: one full decision applied (Node, knobs), the plan on stdout, exit 0."""
    import json

    live.create_node()
    pod = live.add_pod("etl", qos="BE", busy=False)
    dirs = live.tree.pods[pod.uid].dirs
    cmd = [sys.executable, "-m", "agent.cli", "run", "--once", *live.cli_args()]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["node"] == live.name and not plan["evicting"]
    assert {"path": dirs.cpu, "file": "cpu.idle", "value": "1"} in plan["cgroup_writes"]
    assert read_knob(dirs.cpu, "cpu.idle") == "1"
    ann = live.annotations()
    assert "volcano.sh/oversubscription-cpu" in ann and ANN_NODE_USAGE in ann
    assert "kubernetes.io/batch-cpu" in live.node()["status"]["allocatable"]
    dry = subprocess.run([*cmd, "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    restored = subprocess.run(
        [sys.executable, "-m", "agent.cli", "restore", *restore_args(live)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert restored.returncode == 0 and read_knob(dirs.cpu, "cpu.idle") == "0", restored.stderr


def test_sigterm_stops_cleanly_and_serves_health(live: LiveNode) -> None:
    import re
    import urllib.request

    live.create_node()
    live.add_pod("etl", qos="BE", busy=False)
    cmd = [sys.executable, "-m", "agent.cli", "run", "--log-format", "json", *live.cli_args()]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True).start()
    try:
        port = wait_for(
            lambda: next((m.group(1) for line in lines if (m := re.search(r"serving .* on \S*:(\d+)", line))), None),
            "the serving line",
        )
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _get(url + "/readyz")[0] == 200, "/readyz 200", timeout=30)
        assert _get(url + "/healthz")[0] == 200
        status, body = _get(url + "/metrics")
        assert status == 200 and "tidemark_agent_usage_ratio" in body and "tidemark_agent_config_generation" in body
        # Ready means a first decision; the pod's knobs may land with the next QoS sense (a pod event or the
        # waiting pod's re-sense), so the write counter is awaited, not expected at the first scrape.
        wait_for(lambda: 'tidemark_agent_cgroup_writes_total{file="cpu.idle"}' in _get(url + "/metrics")[1],
                 "the offline pod's cpu.idle write counted", timeout=30)
        del urllib
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(20)
    assert rc == 0
    assert [line for line in lines if line.strip() and not line.startswith("{")] == []


def _get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def test_uninstall_is_told_from_an_update_by_the_owner_daemonset(live: LiveNode) -> None:
    """On SIGTERM the agent restores only when its DaemonSet is gone (read with the agent's own RBAC)."""
    from agent.daemon.runner import uninstall_check
    from tests.integration.agent_live.conftest import agent_client
    from tidemark.kube.client import request_json

    ns = live.kube.name
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "tidemark-agent", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "registry.invalid/agent"}]},
            },
        },
    }
    created = request_json(live.admin, "POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets", body=ds)
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "tidemark-agent", "uid": created["metadata"]["uid"]}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent-x", "namespace": ns, "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "agent", "image": "registry.invalid/agent"}]},
    }
    request_json(live.admin, "POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
    # wait=0: the pod has no pod-template-generation label, so the check would look again for 10 s before keeping
    check = uninstall_check(agent_client(live.kube.server), {"POD_NAME": "agent-x", "POD_NAMESPACE": ns}, wait=0.0)
    assert check() is False  # an update or a drain: keep the knobs for the next agent
    request_json(live.admin, "DELETE", f"/apis/apps/v1/namespaces/{ns}/daemonsets/tidemark-agent")
    assert check() is True  # uninstall: restore
    assert uninstall_check(None, {"TIDEMARK_RESTORE_ON_EXIT": "true"})() is True
    assert uninstall_check(None, {})() is False  # systemd default
