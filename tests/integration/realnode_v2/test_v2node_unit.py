"""Uninstall, then the agent as a systemd service, on the production-shaped node (tests/fixtures/v2node.py).

Uninstall of the DaemonSet install (`kubectl delete -k` of what was applied): the agent sees its DaemonSet gone on
SIGTERM and restores every knob it journaled before it exits.

Then the same node as a systemd install: the rest of the manifests applied again without the agent's DaemonSet
(docs/install.md, "The agent as a systemd service": the webhook and its certificates, the RBAC), and
`systemd/tidemark-agent.service` and `systemd/tidemark-agent.env` as shipped, installed as docs/agent.md
("Install: systemd") says: `pip install tidemark-colocation` (from the project's wheels, no index), the unit in
/etc/systemd/system, the environment file and the configuration in /etc/tidemark, a kubeconfig with a client
certificate for `tidemark:agent:<node>` in the group `tidemark:agents` (docs/security.md, "Agents outside
Kubernetes": a CSR approved for the cluster's kube-apiserver-client signer), `systemctl enable --now`. It
reaches the same state as the DaemonSet (the same knobs on the same pods), under the hardening the unit declares
(checked on the running process), and `systemctl disable --now` + `tidemark-agent restore` puts every knob back.

One test, the two in a row on the same pods: an uninstall is what a move to the systemd unit starts with (before,
the service test ran first and the uninstall test applied the DaemonSet again and started its own pods: 125-170 s
under TCG; now the webhook's restart overlaps the guest's pip install). The pods are the systemd actions' (conftest.py
`knob_pods`: a pod start under TCG is about a minute). Named to sort after test_v2node_systemd.py: it removes the
install, which the node's other tests need; it runs last in the lane.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from agent.knobs import current_of, key_of
from localcluster.realnode import REPO
from localcluster.v2node import SHARE_IN_GUEST, V2Node
from tests.fixtures.realnode import RealNamespace
from tests.integration.realnode_v2.common import (
    JOURNAL,
    KnobPods,
    agent_pod,
    journal,
    mismatches,
    node_path,
    pod_dict,
    wait_knobs,
    wanted_knobs,
)

pytestmark = [pytest.mark.realnode_v2, pytest.mark.slow]

AGENT_SEL = "app.kubernetes.io/name=tidemark-agent"
#: CAP_DAC_OVERRIDE (1) and CAP_SYS_RESOURCE (24): the unit's CapabilityBoundingSet
CAP_BOUNDING = f"{(1 << 1) | (1 << 24):016x}"


def _originals(node: V2Node) -> dict[str, str]:
    """Every journaled knob (the file as the node sees it; a keyed knob's key after a space: `.../io.max 254:16`,
    one entry per disk) and the value it held before the agent wrote it."""
    out = {}
    for k in journal(node).get("knobs", []):
        key = key_of(k["file"], k["original"])
        out[f"{node_path(k['path'])}/{k['file']}" + (f" {key}" if key is not None else "")] = k["original"]
    return out


def _files(originals: dict[str, str]) -> set[str]:
    return {k.split(" ", 1)[0] for k in originals}


def _follow_agent_log(node: V2Node, out: Path) -> subprocess.Popen[bytes] | None:
    """`kubectl logs -f` of the DaemonSet's agent into `out`: its last words survive the pod (a failed restore
    after an uninstall is otherwise unexplained: the CI run of 2026-11-30 found every knob still in place)."""
    pod = agent_pod(node)
    if pod is None:
        return None
    with open(out, "wb") as f:
        return subprocess.Popen([node.bins["kubectl"], f"--kubeconfig={node.kubeconfig}", "logs", "-f",
                                 "-n", "tidemark-system", pod["metadata"]["name"]],
                                stdout=f, stderr=subprocess.STDOUT)  # fmt: skip


def _log_tail(follower: subprocess.Popen[bytes] | None, out: Path, lines: int = 40) -> str:
    if follower is None:
        return "(no agent pod to follow)"
    follower.kill()
    follower.wait()
    return "\n".join(out.read_text(errors="replace").splitlines()[-lines:])


def _wait_restored(node: V2Node, originals: dict[str, str], timeout: float, why: Callable[[], str] = str) -> None:
    """Every journaled knob holds its original again, as the kernel shows it (a keyed knob's line without limits
    is no line at all: `current_of`); a file whose cgroup is gone counts as restored. `why`: words for a
    failure (the agent's last log lines)."""
    t0 = time.monotonic()
    while True:
        got = node.read_files(sorted(_files(originals)))
        wrong = {}
        for k, o in originals.items():
            path = k.split(" ", 1)[0]
            content = got[path]
            if content is None:
                continue
            now = current_of(path.rsplit("/", 1)[1], content, o)
            if (now or "").split() != o.split():
                wrong[k] = (o, content)
        if not wrong:
            return
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"knobs not restored after {timeout:.0f} s: {wrong}\n{why()}")
        time.sleep(1)


def _agent_daemonset_gone(node: V2Node, ns: RealNamespace) -> None:
    ns.wait(lambda: agent_pod(node) is None and not node.pods("tidemark-system", AGENT_SEL), 300,
            "the agent pod gone")


def _apply(node: V2Node, manifest: str) -> None:
    """`kubectl apply -f -` of `manifest` (JSON or YAML documents) on the node's cluster."""
    subprocess.run([node.bins["kubectl"], f"--kubeconfig={node.kubeconfig}", "apply", "-f", "-"],
                   input=manifest, text=True, check=True, capture_output=True, timeout=300)  # fmt: skip


def _gone(node: V2Node, *what: str) -> bool:
    done = node.kubectl("get", *what, "--ignore-not-found", "-o", "name", check=False, timeout=30)
    return done.returncode == 0 and not done.stdout.strip()


def _install_without_the_agent(node: V2Node, ns: RealNamespace, manifests: Path) -> None:
    """docs/install.md, "The agent as a systemd service": the rest installed as for the DaemonSet (the webhook and
    its certificates: the agent's writes go through it), without the agent's DaemonSet, once the uninstall is
    over (a namespace or CRD still terminating refuses the apply). Not waited for: the webhook pod starts (about 50 s
    under TCG) while the guest's pip install runs."""
    docs = [d for d in yaml.safe_load_all(node.kubectl("kustomize", str(manifests), timeout=60).stdout) if d]
    crds = [d["metadata"]["name"] for d in docs if d.get("kind") == "CustomResourceDefinition"]
    ns.wait(lambda: _gone(node, "namespace", "tidemark-system") and _gone(node, "crd", *crds), 300,
            "the uninstall over (the namespace tidemark-system and the CRDs gone)")
    rest = [d for d in docs if not (d.get("kind") == "DaemonSet" and d["metadata"]["name"] == "tidemark-agent")]
    assert len(rest) == len(docs) - 1, "the overlay has no tidemark-agent DaemonSet"
    _apply(node, yaml.safe_dump_all(rest))
    node.webhook_certs()


def _webhook_ready(node: V2Node, ns: RealNamespace) -> None:
    ns.wait(lambda: any(map(node.pod_ready, node.pods("tidemark-system", "app.kubernetes.io/name=tidemark-webhook"))),
            600, "the webhook pod Ready")


def _agent_kubeconfig(node: V2Node, work: Path) -> str:
    """A kubeconfig for the systemd agent, made as docs/security.md ("Agents outside Kubernetes") says: a key and a
    CSR for `tidemark:agent:<node>` in the group `tidemark:agents`, signed by the cluster's
    `kubernetes.io/kube-apiserver-client` signer once approved."""
    name = f"tidemark-agent-{node.node_name}"
    key, csr = work / "tidemark-agent.key", work / "tidemark-agent.csr"
    subprocess.run(
        ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(csr), "-subj", f"/O=tidemark:agents/CN=tidemark:agent:{node.node_name}"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    req = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64.b64encode(csr.read_bytes()).decode(),
                 "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]},
    }  # fmt: skip
    node.kubectl("delete", "csr", name, "--ignore-not-found")
    _apply(node, json.dumps(req))
    node.kubectl("certificate", "approve", name)
    deadline = time.monotonic() + 120
    cert = ""
    while not cert:
        assert time.monotonic() < deadline, "the agent's CSR was not signed within 120 s"
        time.sleep(1)
        cert = node.kubectl("get", "csr", name, "-o", "jsonpath={.status.certificate}").stdout.strip()
    ca = Path(node.api_env["CA_FILE"]).read_bytes()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {node.api_url}\n"
        f"    certificate-authority-data: {b64(ca)}\n"
        f"users:\n- name: agent\n  user:\n    client-certificate-data: {cert}\n"
        f"    client-key-data: {b64(key.read_bytes())}\n"
        "contexts:\n- name: c\n  context:\n    cluster: c\n    user: agent\ncurrent-context: c\n"
    )


def _stage_service_files(node: V2Node, kubeconfig: str) -> None:
    """The wheels and the shipped files in the share (read-only in the guest)."""
    share = node.share / "service"
    share.mkdir(exist_ok=True)
    wheels = share / "wheels"
    if not any(wheels.glob("tidemark_colocation-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), str(REPO)],
                       check=True, timeout=900)
    for name in ("tidemark-agent.service", "tidemark-agent.env"):
        (share / name).write_text((REPO / "systemd" / name).read_text())
    (share / "agent.yaml").write_text(node.agent_config or (REPO / "examples" / "agent-config.yaml").read_text())
    (share / "kubeconfig").write_text(kubeconfig)


def _service_show(node: V2Node, *props: str) -> dict[str, str]:
    out = node.sh(f"systemctl show tidemark-agent -p {','.join(props)}").out
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_uninstall_then_the_agent_as_a_systemd_service(v2_node: V2Node, knob_pods: KnobPods, tmp_path: Path) -> None:
    v2_ns = knob_pods.ns  # the systemd actions' pods (conftest.py), as they are now: the actions may replace containers
    offline, online = pod_dict(v2_ns, "offline"), pod_dict(v2_ns, "online")
    wanted = wanted_knobs(v2_node, offline, online)
    wait_knobs(v2_node, wanted, 180)
    kubeconfig = _agent_kubeconfig(v2_node, tmp_path)

    # 1. Uninstall (`kubectl delete -k` of what was applied): the agent's pod restores every knob on the way out.
    manifests = v2_node.stage_manifests()
    originals = _originals(v2_node)
    assert set(wanted) <= _files(originals), sorted(set(wanted) - _files(originals))
    log = tmp_path / "agent.log"
    follower = _follow_agent_log(v2_node, log)
    t0 = time.monotonic()
    v2_node.kubectl("delete", "-k", str(manifests), "--wait=false", timeout=300)
    _agent_daemonset_gone(v2_node, v2_ns)
    _wait_restored(v2_node, originals, 60, lambda: _log_tail(follower, log))
    _log_tail(follower, log)
    print(f"V2NODE uninstall: every knob restored {time.monotonic() - t0:.1f} s after kubectl delete -k")
    assert not journal(v2_node).get("knobs"), "the DaemonSet's agent left journaled knobs behind"
    assert set(mismatches(v2_node, wanted)) == set(wanted)  # none of the agent's values is left

    # 2. Installed as docs/install.md and docs/agent.md say: the rest of the manifests, then the unit.
    t0 = time.monotonic()
    _install_without_the_agent(v2_node, v2_ns, manifests)
    t_rest = time.monotonic() - t0
    _stage_service_files(v2_node, kubeconfig)
    s = f"{SHARE_IN_GUEST}/service"
    t0 = time.monotonic()
    v2_node.sh(
        f"pip install -q --no-compile --break-system-packages --no-index --find-links {s}/wheels tidemark-colocation"
        f" && install -m 0644 {s}/tidemark-agent.service /etc/systemd/system/"
        f" && install -D -m 0644 {s}/tidemark-agent.env /etc/tidemark/tidemark-agent.env"
        f" && install -m 0644 {s}/agent.yaml /etc/tidemark/agent.yaml"
        f" && install -m 0600 {s}/kubeconfig /etc/tidemark/kubeconfig",
        timeout=900,
    )
    t_pip = time.monotonic() - t0
    t0 = time.monotonic()
    _webhook_ready(v2_node, v2_ns)
    t_webhook = time.monotonic() - t0
    t0 = time.monotonic()
    v2_node.sh("systemctl daemon-reload && systemctl enable --now tidemark-agent", timeout=600)
    t_ready = time.monotonic() - t0  # Type=notify: enable --now returns at READY=1
    try:
        show = _service_show(v2_node, "ActiveState", "SubState", "MainPID", "NRestarts", "Type")
        assert (show["ActiveState"], show["SubState"], show["Type"]) == ("active", "running", "notify"), show
        pid = show["MainPID"]
        took = wait_knobs(v2_node, wanted, 180, "the service's knobs")
        print(f"V2NODE service: the rest of the install {t_rest:.0f} s, pip install {t_pip:.0f} s, the webhook Ready "
              f"{t_webhook:.0f} s later, READY=1 {t_ready:.0f} s after enable --now, knobs in force {took:.1f} s later")

        # 3. The hardening the unit declares, on the running process.
        status = dict(
            (k, v.strip())
            for k, _, v in (line.partition(":") for line in v2_node.sh(f"cat /proc/{pid}/status").out.splitlines())
        )
        assert status["CapBnd"] == CAP_BOUNDING, status["CapBnd"]
        assert status["NoNewPrivs"] == "1"
        assert status["Seccomp"] == "2"
        inside = v2_node.sh(
            f"nsenter -t {pid} -m sh -c 'touch /usr/local/x 2>&1; touch /etc/tidemark/x 2>&1; "
            f"test -w /var/lib/tidemark && echo state-writable; ls /home 2>&1 | wc -l; "
            f"test -e {JOURNAL} && echo journal'",
            check=False,
        ).out
        assert inside.count("Read-only file system") == 2, inside
        assert "state-writable" in inside and "journal" in inside
        mem = v2_node.read_files(["/sys/fs/cgroup/system.slice/tidemark-agent.service/memory.max"]).popitem()[1]
        assert mem == str(256 * 1024 * 1024)  # MemoryMax=256M
        score = v2_node.sh("systemd-analyze security tidemark-agent --no-pager | tail -1", check=False).out.strip()
        print(f"V2NODE service: {score}")

        # 4. The same state as the DaemonSet reached: B and X published, and the knobs kept through a daemon-reload.
        v2_node.sh("systemctl daemon-reload")
        wait_knobs(v2_node, wanted, 60, "the service's knobs after a daemon-reload")
        assert _service_show(v2_node, "NRestarts")["NRestarts"] == show["NRestarts"]
    finally:
        # 5. Uninstall as the unit's header says: every knob back.
        originals = _originals(v2_node)
        v2_node.sh("systemctl disable --now tidemark-agent && tidemark-agent restore", timeout=300)
    assert originals and set(wanted) <= _files(originals)
    _wait_restored(v2_node, originals, 30)
    assert not journal(v2_node).get("knobs")
    assert set(mismatches(v2_node, wanted)) == set(wanted)  # none of the agent's values is left
