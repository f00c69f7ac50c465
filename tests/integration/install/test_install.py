"""docs/install.md on the real node: its commands, read from the doc, install, check, monitor and upgrade.

The real one-node cluster (tests/fixtures/realnode.py) starts with the local overlay applied. This
test runs the doc's `<!-- run: STEP -->` blocks as written (doc.py) with `kubectl` = the project's
kubectl 1.20.2, `KUBECONFIG`, `NODE` and `CONTAINERD_ADDRESS` set: the image built and imported,
`kubectl apply -f install.yaml` (the image reference `tidemark/tidemark:<version>` is the one the
import gives containerd, so the file is applied unchanged) and `-k daemonset/`, the node labelled,
the checks, the monitoring overlay (over stand-ins of the operator's CRDs, as in the monitoring
test), then the upgrade: the same image tagged one patch version up in containerd and install.yaml
with that image field changed (and nothing else), applied by the doc's upgrade block.

Across both rollouts an offline pod with the agent's knobs and an online pod keep running: the
offline container's cpu.shares, sampled every 0.2 s throughout, never leaves the agent's value (the
stopped agent restores nothing: its DaemonSet is still there), the journal on the host keeps its
entries, the new agent pods run the new image, and nothing is evicted. Afterwards the cluster is put
back as the fixture made it (its overlay re-applied, quiet watermarks, the monitoring objects gone).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from localcluster.realnode import RealNode
from tests.fixtures.realnode import QUIET_WATERMARKS, RealNamespace, set_cpu_watermarks, settle_after_install
from tests.integration.install.doc import REPO, step
from tidemark.apis import quantity_to_int

pytestmark = pytest.mark.slow

# The doc's run steps, in the order this test executes them (test_doc.py checks the doc has exactly these).
STEPS = ("image", "install", "install-k", "node", "check", "monitoring", "upgrade", "uninstall", "uninstall-node")
NS = "tidemark-system"
STATE_DIR = Path("/var/lib/tidemark")
CG = Path("/sys/fs/cgroup")
BATCH_CPU = "kubernetes.io/batch-cpu"
OFFLINE = {"volcano.sh/qos-level": "-1"}
ONLINE = {"volcano.sh/qos-level": "2"}
ROLLOUT_TIMEOUT = 420


def run_step(node: RealNode, name: str, cwd: Path = REPO, timeout: float = 900) -> str:
    """Runs the doc's block `name` in bash (-euo pipefail) as a user would; returns its stdout."""
    env = {
        **os.environ,
        "PATH": f"{Path(node.bins['kubectl']).parent}:{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(node.kubeconfig),
        "NODE": node.node_name,
        "CONTAINERD_ADDRESS": str(node.sock),
    }
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", step(name)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, (
        f"docs/install.md step {name!r} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    )
    return r.stdout


def container_cgroup(pod: Any, controller: str) -> Path:
    qos = {"BestEffort": "besteffort", "Burstable": "burstable"}.get(pod.status.qos_class)
    base = CG / controller / "kubepods"
    cid = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    return (base / qos if qos else base) / f"pod{pod.metadata.uid}" / cid


def journal_knobs() -> list[dict[str, Any]]:
    path = STATE_DIR / "journal.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    knobs: list[dict[str, Any]] = data.get("knobs", [])
    return knobs


def pod_knobs() -> list[dict[str, Any]]:
    """The journal's entries of the per-pod knobs, which an upgrade must keep. The offline tier's controllers
    (the BestEffort root's CPU quota and memory limit, the I/O limits that follow the online wait) write and
    release their knobs as the load moves, so their entries come and go with it, upgrade or not."""
    return [
        k for k in journal_knobs()
        if not str(k.get("file", "")).startswith("blkio.throttle")
        and not str(k.get("path", "")).rstrip("/").endswith(("/besteffort", "kubepods-besteffort.slice"))
    ]


def agent_pods(node: RealNode) -> list[dict[str, Any]]:
    return node.pods(NS, "app.kubernetes.io/name=tidemark-agent")


def rollout(node: RealNode) -> None:
    for obj in ("daemonset/tidemark-agent", "deployment/tidemark-scheduler"):
        node.kubectl("-n", NS, "rollout", "status", obj, f"--timeout={ROLLOUT_TIMEOUT}s", timeout=ROLLOUT_TIMEOUT + 30)


class Sampler(threading.Thread):
    """Reads a cgroup file every 0.2 s until stopped; keeps every distinct value seen."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.seen, self.halt = path, set[str](), threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.seen.add(self.path.read_text().strip())
            except OSError as e:
                self.seen.add(f"error: {e}")
            self.halt.wait(0.2)

    def stop(self) -> set[str]:
        self.halt.set()
        self.join(5)
        return self.seen


def restore_fixture_install(node: RealNode) -> None:
    """The cluster as tests/fixtures/realnode.py made it: its overlay, quiet watermarks, no monitoring objects."""
    from tests.integration.monitoring.test_prometheus import monitoring_objects

    for d in monitoring_objects(node):
        node.kubectl("delete", d["kind"].lower(), "-n", NS, d["metadata"]["name"], "--ignore-not-found", check=False)
    node.kubectl("delete", "-f", str(REPO / "tests" / "integration" / "monitoring" / "operator-crds.yaml"),
                 "--ignore-not-found", check=False)
    node.kubectl("apply", "-k", str(node.stage_manifests()), timeout=180)
    if node.kubectl("-n", NS, "get", "secret", "tidemark-webhook-tls", check=False).returncode != 0:
        node.webhook_certs()  # the uninstall step took the namespace, and the Secret with it
    set_cpu_watermarks(node, *QUIET_WATERMARKS)
    node.prepare_node()
    set_cpu_watermarks(node, *QUIET_WATERMARKS)
    rollout(node)
    node.wait_tidemark()
    settle_after_install(node)


def test_the_install_doc_installs_monitors_and_upgrades_keeping_the_journal(
    real_node: RealNode, real_ns: RealNamespace, tmp_path: Path
) -> None:
    real_ns.cleanups.append(lambda: restore_fixture_install(real_node))
    # Workloads that must live through the install and the upgrade.
    real_ns.wait(lambda: (quantity_to_int((real_ns.core.read_node(real_node.node_name).status.allocatable or {})
                                          .get(BATCH_CPU, "0")) or 0) >= 20, 90, f"{BATCH_CPU} >= 20 published")
    real_ns.create(real_ns.pod("offline", requests={BATCH_CPU: "20"}, limits={BATCH_CPU: "40"}, annotations=OFFLINE))
    real_ns.create(real_ns.pod("online", requests={"cpu": "50m", "memory": "16Mi"}, annotations=ONLINE))
    off, on = real_ns.wait_running("offline", timeout=180), real_ns.wait_running("online")
    shares = container_cgroup(off, "cpu") / "cpu.shares"
    real_ns.wait(lambda: shares.read_text().strip() == "20", 60, "the agent's cpu.shares on the offline container")
    uid = off.metadata.uid

    def journaled_here() -> bool:
        return any(uid in json.dumps(k) and k.get("file") == "cpu.shares" for k in journal_knobs())

    real_ns.wait(journaled_here, 30, "the offline container's cpu.shares in the journal")
    # this test's pods only: a test before it on the same node leaves its pods' entries until the agent prunes them
    mine = (off.metadata.uid, on.metadata.uid)
    journaled = len([k for k in pod_knobs() if any(u in json.dumps(k) for u in mine)])
    sampler = Sampler(shares)
    sampler.start()
    try:
        # 1-2: image, install (from the file, then from the checkout: the same objects).
        run_step(real_node, "image")
        run_step(real_node, "install")
        run_step(real_node, "install-k")
        ref = (REPO / "install.yaml").read_text()
        image = re.search(r"image: (tidemark/tidemark:[\w.]+)", ref)
        assert image, "install.yaml names no tidemark image"
        assert all(c["image"] == image[1] for p in agent_pods(real_node) for c in p["spec"]["containers"])
        # 3-4: the node, the checks.
        run_step(real_node, "node")
        out = run_step(real_node, "check")
        assert re.search(r'^tidemark_build_info\{.*component="agent".*\} 1', out, re.M), out
        assert BATCH_CPU in out
        set_cpu_watermarks(real_node, *QUIET_WATERMARKS)  # the doc's 80/60 would be too low on a shared machine
        # 5: monitoring, over stand-ins of the operator's CRDs.
        from tests.integration.monitoring.test_prometheus import ensure_operator_crds

        ensure_operator_crds(real_node)
        out = run_step(real_node, "monitoring")
        for name in (
            "podmonitor.monitoring.coreos.com/tidemark-agent",
            "servicemonitor.monitoring.coreos.com/tidemark-scheduler",
            "prometheusrule.monitoring.coreos.com/tidemark",
        ):
            assert name in out, out
        rollout(real_node)
        # 6: upgrade to the "next" version: the same image one patch version up, install.yaml's image field only.
        major, minor, patch = image[1].rsplit(":", 1)[1].split(".")
        newer = f"tidemark/tidemark:{major}.{minor}.{int(patch) + 1}"
        real_node.ctr("images", "tag", "--force", f"docker.io/{image[1]}", f"docker.io/{newer}")
        (tmp_path / "install.yaml").write_text(ref.replace(f"image: {image[1]}", f"image: {newer}"))
        old = {p["metadata"]["uid"] for p in agent_pods(real_node)}
        run_step(real_node, "upgrade", cwd=tmp_path)
    finally:
        seen = sampler.stop()
    agents = agent_pods(real_node)
    assert agents and not old & {p["metadata"]["uid"] for p in agents}, "the agent pod was not replaced"
    assert all(real_node.pod_ready(p) and p["spec"]["containers"][0]["image"] == newer for p in agents)
    scheds = real_node.pods(NS, "app.kubernetes.io/name=tidemark-scheduler")
    assert any(real_node.pod_ready(p) for p in scheds if p["spec"]["containers"][0]["image"] == newer)
    # Nothing restored, nothing lost, nothing evicted.
    assert seen == {"20"}, f"cpu.shares of the offline container during install and upgrade: {seen}"
    kept = [k for k in pod_knobs() if any(u in json.dumps(k) for u in mine)]
    assert journaled > 0 and len(kept) >= journaled and journaled_here(), journal_knobs()
    for name, before in (("offline", off), ("online", on)):
        now = real_ns.get(name)
        assert now.metadata.uid == before.metadata.uid and now.status.phase == "Running", name
    evicted = [e.involved_object.name for e in real_ns.core.list_namespaced_event(real_ns.name).items
               if e.reason in ("Evicted", "Evicting", "Preempted")]
    assert not evicted, evicted
    # 7: uninstall, then Tidemark's resources off the Node (the controller that applied them went with it).
    run_step(real_node, "uninstall", cwd=tmp_path)
    run_step(real_node, "uninstall-node")
    status = real_ns.core.read_node(real_node.node_name).status
    left = [k for k in [*(status.capacity or {}), *(status.allocatable or {})] if k.startswith("kubernetes.io/batch-")]
    assert not left, f"after the uninstall the Node keeps {left}"
