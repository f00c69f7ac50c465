"""bench_colocation's cluster side: the online pod, Tidemark installed and removed as a user does, the agent's
config per arm, the calibration and one cell (the online load and the offline pods of one kind and arm, measured
over a window). The node is the host's real node or the production-shaped v2 node (colocation_node.NodeView)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from colocation_generator import Generator
from colocation_node import CG, STATE_DIR, NodeView, journal_entries, window_figures
from colocation_pods import (
    GIB,
    HOG_FRACTION,
    MEMORY_MARGIN,
    MIB,
    NS,
    ONLINE_CPU_REQUEST_M,
    PORT,
    PUBLISHED_FRACTION,
    REPO,
    WORK_STRESSOR,
    Sizing,
    agent_yaml_for,
    arm_config,
    offline_pods,
    offline_work,
    online_pod,
    parse_stress_yaml,
    podgroup,
    shipped_agent_config,
)
from colocation_stats import LOAD_LEVELS, ONLINE_ONLY_ARMS, TIDEMARK_ARMS, fit_rate, latency_summary

from tidemark.apis import ANN_NODE_USAGE, json_annotation, rfc3339_seconds
from tidemark.quantities import quantity_to_int

#: the agent's gauge naming the online pod whose CPU wait is the signal, and its `pod` label
ONLINE_WAIT_POD = "tidemark_agent_online_cpu_wait_pod_info{"
WORST_POD = re.compile(r'pod="([^"]*)"')

AGENT_LABELS = ("volcano.sh/colocation", "volcano.sh/oversubscription")
DEMO_ANNOTATIONS = (
    "volcano.sh/evicting-cpu-high-watermark",
    "volcano.sh/evicting-cpu-low-watermark",
    "volcano.sh/evicting-memory-high-watermark",
    "volcano.sh/evicting-memory-low-watermark",
)


@dataclass
class Colocation:
    node: Any  # localcluster.realnode.RealNode or localcluster.v2node.V2Node
    args: argparse.Namespace
    say: Any
    image: str = ""
    installed: bool = True
    config: str = "default"  # the agent config in force: colocation_pods.arm_config's names
    web: dict[str, Any] | None = None
    web_uid: str = ""
    calibration: list[dict[str, Any]] = field(default_factory=list)
    #: the online request rate per load level (LOAD_LEVELS), from the calibration or --rate
    rates: dict[str, float] = field(default_factory=dict)
    view: Any = None  # colocation_node.NodeView
    api: Any = None
    core: Any = None
    apps: Any = None
    custom: Any = None
    admission: Any = None
    cores: float = 2.0
    #: the tidemark arm's agent.yaml: the shipped ConfigMap's unless --agent-config names another
    base_config: str = ""
    #: per load level, the machine's busy cores while the online pod ran alone: what is not idle
    idle_busy: dict[str, float] = field(default_factory=dict)

    @property
    def slowdown(self) -> float:
        """How much longer the waits are on this node (the v2 node under QEMU's TCG: about ten times)."""
        return float(getattr(self.node, "SLOWDOWN", 1.0))

    # --- API helpers -------------------------------------------------------------------------------
    def connect(self) -> None:
        import urllib3
        from kubernetes import client, config  # type: ignore[import-untyped,unused-ignore]

        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the local apiserver's own CA
        self.api = config.new_client_from_config(config_file=str(self.node.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.admission = client.AdmissionregistrationV1Api(self.api)

    def raw(self, fn: Any, *a: Any, **kw: Any) -> Any:
        """A client call's JSON as plain dicts (None on 404)."""
        from kubernetes.client.rest import ApiException  # type: ignore[import-untyped,unused-ignore]

        try:
            return json.loads(fn(*a, _preload_content=False, **kw).data)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def node_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.raw(self.core.read_node, self.node.node_name)
        return obj

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.raw(self.core.list_namespaced_pod, NS, label_selector=selector)["items"]
        return items

    def published(self) -> tuple[int, int]:
        alloc = self.node_obj()["status"].get("allocatable") or {}
        # quantities: the API server writes a published 1000 as "1k"
        return (quantity_to_int(alloc.get("kubernetes.io/batch-cpu", "0")) or 0,
                quantity_to_int(alloc.get("kubernetes.io/batch-memory", "0")) or 0)

    def evicting(self) -> bool:
        return (self.node_obj()["metadata"].get("annotations") or {}).get("volcano.sh/offline-job-evicting") == "true"

    def wait(self, cond: Any, timeout: float, what: str, poll: float = 0.5) -> bool:
        """Polls `cond` until it holds or `timeout` (x the node's slowdown) passes; says so when it did not."""
        timeout *= self.slowdown
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(poll)
        self.say(f"  (waited {timeout:.0f} s for {what}: not yet)")
        return False

    # --- setup ------------------------------------------------------------------------------------
    def import_image(self) -> None:
        """The workload image built (hack/bench-image.sh) and imported into the node's containerd; the v2 node's
        guest reads it from the run's share (localcluster/v2node.py)."""
        from localcluster.realnode import _run

        archive = _run(["bash", str(REPO / "hack" / "bench-image.sh"), "build"], timeout=3600).stdout.strip()
        self.image = _run(["bash", str(REPO / "hack" / "bench-image.sh"), "ref"]).stdout.strip()
        path = archive
        if self.view.version == "v2":
            from localcluster.v2node import SHARE_IN_GUEST, _link

            _link(Path(archive), Path(self.node.share) / "bench-image.tar")
            path = f"{SHARE_IN_GUEST}/bench-image.tar"
        self.node.ctr("images", "import", path, timeout=1800)
        self.say(f"bench image {self.image} imported ({archive})")

    def setup(self) -> None:
        self.connect()
        self.view = NodeView(self.node)
        self.import_image()
        self.base_config = (Path(self.args.agent_config).read_text() if self.args.agent_config
                            else shipped_agent_config())
        alloc = self.node_obj()["status"]["allocatable"]
        self.cores = int(_parse_cpu(alloc["cpu"])) / 1000.0
        # The shipped defaults, not the demo's: make run's node carries examples/local-node.yaml's CPU
        # watermarks (30/15 %); a user who sets none gets the agent's defaults (80/30, 60/30).
        self.node.kubectl("annotate", "node", self.node.node_name, *[f"{a}-" for a in DEMO_ANNOTATIONS], check=False)
        self.node.kubectl("create", "namespace", NS, check=False)

        def sa_token() -> bool:
            sa = self.raw(self.core.read_namespaced_service_account, "default", NS)
            return bool(sa and sa.get("secrets"))

        self.wait(sa_token, 60, "the default ServiceAccount token")
        # Tidemark out first: its pods as shipped request 1200m of this node's 2000m (two scheduler replicas of
        # 500m), and the online pod's 1 CPU must fit beside the one scheduler replica the tidemark arms run.
        self.want("alone")
        self.replace_web()
        if not self.wait(lambda: self._web_ready(), 120, "the online pod Ready"):
            raise RuntimeError("the online pod (nginx) did not become Ready: "
                               + json.dumps(self.raw(self.core.read_namespaced_pod, "web", NS).get("status"))[:800])
        self.say(f"online: nginx in pod web at {self.web_ip()}:{PORT} (Burstable, cpu 1, memory 256Mi/512Mi)")

    def _web_ready(self) -> bool:
        self.web = self.raw(self.core.read_namespaced_pod, "web", NS)
        return (bool(self.web) and not self.web["metadata"].get("deletionTimestamp")
                and self.web["metadata"]["uid"] == self.web_uid and self.node.pod_ready(self.web))

    def replace_web(self) -> None:
        """A new online pod: an earlier one (a previous run's, or a dead one) deleted and waited for first."""
        with contextlib.suppress(Exception):
            self.core.delete_namespaced_pod("web", NS, grace_period_seconds=0)
        self.wait(lambda: self.raw(self.core.read_namespaced_pod, "web", NS) is None, 300, "the old web pod gone")
        created = self.core.create_namespaced_pod(NS, online_pod(self.image, self.args.access_log == "file"))
        self.web_uid = created.metadata.uid

    def web_ip(self) -> str:
        assert self.web is not None
        return str(self.web["status"]["podIP"])

    def web_state(self) -> dict[str, Any]:
        pod = self.raw(self.core.read_namespaced_pod, "web", NS)
        if not pod:
            return {"uid": None, "restarts": 0, "ooms": 0, "evicted": True}
        statuses = pod["status"].get("containerStatuses") or [{}]
        return {
            "uid": pod["metadata"]["uid"],
            "restarts": int(statuses[0].get("restartCount", 0)),
            "ooms": self.view.oom_kills(pod),
            "evicted": bool(pod["metadata"].get("deletionTimestamp")) or pod["status"].get("reason") == "Evicted",
        }

    def ensure_web(self) -> None:
        """The online pod again where something removed it (counted as an eviction by the cell)."""
        if self._web_ready():
            return
        pod = self.raw(self.core.read_namespaced_pod, "web", NS)
        if (pod is None or pod["metadata"].get("deletionTimestamp") or pod["metadata"]["uid"] != self.web_uid
                or pod["status"].get("phase") in ("Failed", "Succeeded")):
            self.say("the online pod is gone or dead: a new one")
            self.replace_web()
        self.wait(self._web_ready, 120, "the online pod Ready")

    # --- Tidemark in and out ---------------------------------------------------------------------------
    def uninstall(self) -> None:
        """As a user removes it: labels off the Node (the agent restores its knobs and publishes 0), then the
        DaemonSet (its agent, on SIGTERM with its DaemonSet gone, restores everything it wrote), the Deployments
        and the webhook configurations; `tidemark-agent restore` on the host; the files are checked."""
        t0 = time.monotonic()
        steps = []
        self.node.kubectl("label", "node", self.node.node_name, *[f"{k}-" for k in AGENT_LABELS], check=False)
        self.wait(lambda: self.published() == (0, 0), 30, "batch-cpu/batch-memory published as 0")
        steps.append(f"labels off {time.monotonic() - t0:.0f} s")
        self.node.kubectl("delete", "-n", "tidemark-system", "daemonset/tidemark-agent",
                          "deployment/tidemark-scheduler", "deployment/tidemark-webhook", "--ignore-not-found",
                          "--wait=false", timeout=60)
        self.node.kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                          "tidemark-admission", "--ignore-not-found", timeout=60)
        # the scheduler's and webhook's pods hold nothing on the node: not waited for (the agent's pod keeps its
        # grace period: on SIGTERM with its DaemonSet gone it restores what it wrote)
        self.node.kubectl("delete", "pods", "-n", "tidemark-system", "-l",
                          "app.kubernetes.io/name in (tidemark-scheduler,tidemark-webhook)", "--grace-period=0",
                          "--force", "--wait=false", check=False, timeout=60)

        def gone() -> bool:
            # a pod whose processes are all gone from its cgroup counts: kubelet may take minutes more to tear its
            # sandbox down and report it (here: `failed to remove netns ... device or resource busy` while other
            # jobs hold mounts), and the agent has restored everything before its process exits
            left = self.raw(self.core.list_namespaced_pod, "tidemark-system")["items"]
            done = [p for p in left if p["metadata"].get("deletionTimestamp") and not self.view.pod_has_processes(p)]
            for p in done:
                with contextlib.suppress(Exception):
                    self.core.delete_namespaced_pod(p["metadata"]["name"], "tidemark-system", grace_period_seconds=0)
            return len(done) == len(left)

        self.wait(gone, 90, "the agent, scheduler and webhook pods gone", poll=1.0)
        steps.append(f"pods gone {time.monotonic() - t0:.0f} s")
        restored = "not run (the v2 node's agent restores on SIGTERM; no agent on its host)"
        if self.view.version == "v1":
            restore = subprocess.run(
                [str(Path(sys.executable).parent / "tidemark-agent"), "restore", "--state-dir", str(STATE_DIR),
                 "--cgroup-root", str(CG)], capture_output=True, text=True, timeout=120, check=False)
            restored = f"{(restore.stdout or restore.stderr).strip().splitlines()[-1:] or ['(nothing)']}"
            restored += f"; journal entries: {journal_entries()}"
        found = self.view.agent_knobs()
        self.installed = False
        self.say(f"Tidemark uninstalled in {time.monotonic() - t0:.0f} s ({', '.join(steps)}); tidemark-agent restore: "
                 f"{restored}; agent knobs under kubepods: {len(found)}"
                 + (f" {found[:5]}" if found else " (cpu.idle, soft limits, I/O throttles all kubelet's)"))

    def install(self, config: str) -> None:
        """`kubectl apply -k` of the local overlay (the shipped manifests; `noqos`: with qos.enabled false in the
        agent's ConfigMap), the webhook's certificates, the labels; waits for the pods and the first publication."""
        t0 = time.monotonic()
        self.node.kubectl("apply", "-k", str(self.stage(config)), timeout=180)
        self.node.webhook_certs()
        self.node.kubectl("label", "node", self.node.node_name, "--overwrite", *[f"{k}=true" for k in AGENT_LABELS])
        self.node.wait_tidemark()
        self.wait(lambda: "kubernetes.io/batch-cpu" in (self.node_obj()["status"].get("allocatable") or {}), 60,
                  "the agent's first publication")
        self.installed, self.config = True, config
        self.say(f"Tidemark installed ({config} agent config) in {time.monotonic() - t0:.0f} s; published "
                 f"batch-cpu/batch-memory {self.published()}")

    def switch_config(self, config: str) -> None:
        """Another agent config while installed: the ConfigMap applied, the agent pod replaced (its DaemonSet
        stays, so nothing is restored by the old pod; the new one starts with the new config)."""
        t0, wall = time.monotonic(), time.time()
        self.node.kubectl("apply", "-k", str(self.stage(config)), timeout=180)
        self.node.kubectl("delete", "pod", "-n", "tidemark-system", "-l", "app.kubernetes.io/name=tidemark-agent",
                          "--wait=true", timeout=120)
        self.node.wait_tidemark()
        # the new agent's own publication before the next cell sizes its pods from it: sized from the old agent's
        # value, a cell's pods waited 90 s Pending while the new one published less (2 cells of the 2026-11-29 run)
        self.wait(lambda: self._published_since(wall), 120, "the new agent's first publication")
        self.config = config
        self.say(f"agent config {config} in force in {time.monotonic() - t0:.0f} s")

    def _published_since(self, wall: float) -> bool:
        """Whether the agent published (the `time` of tidemark.io/node-usage) at or after `wall`, batch-cpu > 0."""
        md = self.node_obj()["metadata"]
        doc = json_annotation((md.get("annotations") or {}).get(ANN_NODE_USAGE))
        when = doc.get("time") if doc is not None else None
        at = rfc3339_seconds(when) if isinstance(when, str) else None
        return at is not None and at >= int(wall) and self.published()[0] > 0

    def stage(self, config: str) -> Path:
        """The overlay to apply: a copy of daemonset/ (localcluster's staging) whose agent ConfigMap carries the
        arm's agent.yaml (colocation_pods.agent_yaml_for: the shipped one unless --agent-config, noqos or a
        suppress setting) and whose scheduler Deployment has ONE replica: the shipped two request 500m each,
        and with the agent (100m) and the webhook (2 x 50m) Tidemark's pods would ask 1200m of this 2-core
        node; applied beside the 1-CPU online pod, their system-cluster-critical priority makes kube-scheduler
        preempt it (measured). On a real cluster the scheduler's replicas run on other nodes."""
        import yaml

        self.node.agent_config = agent_yaml_for(config, self.base_config)
        overlay = Path(self.node.stage_manifests())
        dep = overlay.parents[1] / "scheduler" / "deployment.yaml"
        docs = [d for d in yaml.safe_load_all(dep.read_text()) if d]
        for d in docs:
            if d.get("kind") == "Deployment":
                d["spec"]["replicas"] = 1
        dep.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return overlay

    def want(self, arm: str) -> None:
        """Tidemark installed with the arm's agent config (a config change replaces the agent pod: the new
        config is in force from its start, not after the kubelet's ConfigMap sync), or uninstalled."""
        if arm in TIDEMARK_ARMS:
            config = arm_config(arm)
            if not self.installed:
                self.install(config)
            elif self.config != config:
                self.switch_config(config)
        elif self.installed:
            self.uninstall()

    # --- calibration --------------------------------------------------------------------------------
    def measure_idle(self, load: str, seconds: float = 5.0) -> None:
        """The machine's busy cores with the online pod alone at the load level's rate: what kubelet_burstable's
        requests may take of the idle CPU at that level."""
        rate = self.rates[load]
        gen = Generator(f"{self.web_ip()}:{PORT}", rate, self.args.run_dir / "idle.bin").start()
        time.sleep(1.0)
        b0 = self.view.busy()
        time.sleep(seconds)
        b1 = self.view.busy()
        gen.stop()
        self.idle_busy[load] = (b1[0] - b0[0]) / max(b1[1] - b0[1], 1) * self.cores
        self.say(f"the machine with the online pod alone at {rate:.0f} req/s ({load}): {self.idle_busy[load]:.2f} "
                 f"of {self.cores:.0f} cores busy (load {os.getloadavg()[0]:.1f})")

    def calibrate(self, rates: list[float], seconds: float, loads: list[str]) -> dict[str, float]:
        """The rate of each load level: nginx's cores at each of `rates`, a line through the origin, the rate at
        which it uses the level's fraction of its CPU request."""
        points = []
        for r in rates:
            gen = Generator(f"{self.web_ip()}:{PORT}", r, self.args.run_dir / "calib.bin").start()
            time.sleep(1.5)
            c0 = self.view.counters(self.web, [])
            time.sleep(seconds)
            c1 = self.view.counters(self.web, [])
            records = gen.stop()
            lat = latency_summary(records, c0.t, c1.t)
            cores = (c1.web_ns - c0.web_ns) / 1e9 / (c1.t - c0.t)
            points.append((lat["online_rps"], cores))
            row = {"rate": r, "achieved_rps": lat["online_rps"], "online_cores": round(cores, 4),
                   "p50_ms": lat["online_p50_ms"], "p99_ms": lat["online_p99_ms"], "load_1m": os.getloadavg()[0]}
            self.calibration.append(row)
            self.say(f"  calibration: {r:.0f} req/s -> nginx {cores:.3f} cores, p50 {lat['online_p50_ms']} ms, "
                     f"p99 {lat['online_p99_ms']} ms (load {row['load_1m']:.1f})")
        out = {}
        for load in loads:
            target = LOAD_LEVELS[load] * ONLINE_CPU_REQUEST_M / 1000.0
            out[load] = fit_rate(points, target)
            self.say(f"calibrated rate ({load}): {out[load]:.0f} req/s for {target:.2f} cores of the online pod's "
                     f"1-CPU request ({1000 * sum(c for _, c in points) / max(sum(r for r, _ in points), 1):.3f} ms "
                     "of CPU per request)")
        return out

    # --- one cell ---------------------------------------------------------------------------------------
    def _requested(self) -> tuple[int, int]:
        """CPU (m) and memory (bytes) requested by the pods on the node that have not ended."""
        req_cpu = req_mem = 0
        for p in self.raw(self.core.list_pod_for_all_namespaces,
                          field_selector=f"spec.nodeName={self.node.node_name}")["items"]:
            if p["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            for c in p["spec"]["containers"]:
                r = c.get("resources", {}).get("requests") or {}
                req_cpu += _parse_cpu(r.get("cpu", "0"))
                req_mem += _parse_mem(r.get("memory", "0"))
        return req_cpu, req_mem

    def sizing(self, kind: str, arm: str, load: str) -> tuple[Sizing, dict[str, Any]]:
        note: dict[str, Any] = {}
        mem = self.view.meminfo()
        avail = max(0, mem.get("MemAvailable", 0) - MEMORY_MARGIN)
        note["mem_available_gib"] = round(mem.get("MemAvailable", 0) / GIB, 2)
        if arm in (*ONLINE_ONLY_ARMS, "kubelet_besteffort"):
            return Sizing(hog_bytes=int(HOG_FRACTION * avail)), note
        if arm == "kubelet_burstable":
            alloc = self.node_obj()["status"]["allocatable"]
            req_cpu, req_mem = self._requested()
            unreq_cpu = _parse_cpu(alloc["cpu"]) - req_cpu
            unreq_mem = _parse_mem(alloc["memory"]) - req_mem
            idle_cpu = int(1000 * self.cores - 1000 * self.idle_busy.get(load, 0.0))
            cpu = max(0, min(unreq_cpu, idle_cpu))
            memory = max(0, min(unreq_mem, avail))
            note.update(unrequested_cpu_m=unreq_cpu, idle_cpu_m=idle_cpu,
                        unrequested_memory_gib=round(unreq_mem / GIB, 2))
            return Sizing(cpu_milli=cpu, memory_bytes=memory, hog_bytes=int(HOG_FRACTION * memory)), note
        # tidemark arms: what the agent publishes, once it is not evicting
        self.wait(lambda: not self.evicting(), 60, "the node out of the evicting state")
        # the capacity follows the node's usage over the agent's 60 s window: after a cell that kept the kernel
        # busy outside the pods (reclaim, writeback), give the window time to move past it
        self.wait(lambda: self.published()[0] >= 100, 30 if self.args.quick else 120,
                  "batch-cpu >= 100m published")
        cpu, memory = self.published()
        note.update(published_batch_cpu_m=cpu, published_batch_memory_mib=round(memory / MIB))
        cpu, memory = int(cpu * PUBLISHED_FRACTION), int(memory * PUBLISHED_FRACTION)
        if kind != "memory":
            memory = 0
        return Sizing(cpu_milli=cpu, memory_bytes=memory, hog_bytes=int(HOG_FRACTION * memory)), note

    def _start_offline(self, cell: str, arm: str, manifests: list[dict[str, Any]],
                       rec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The cell's PodGroup and pods created, waited for until they run; (every pod, the running ones)."""
        t_create = time.monotonic()
        if manifests and arm in TIDEMARK_ARMS:
            self.custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", NS, "podgroups",
                                                        podgroup(cell, len(manifests)))
        for m in manifests:
            self.core.create_namespaced_pod(NS, m)
        offline: list[dict[str, Any]] = []

        def started() -> bool:
            nonlocal offline
            offline = self.pods(f"cell={cell}")
            return all(p["status"].get("phase") in ("Running", "Succeeded", "Failed") for p in offline)

        if manifests:
            self.wait(started, 90, "the offline pods Running")
            rec["offline_start_s"] = round(time.monotonic() - t_create, 2)
        running = [p for p in offline if p["status"].get("phase") == "Running"]
        rec["offline_pods_running"] = len(running)
        rec["offline_rejected"] = sum(1 for p in offline if p["status"].get("phase") == "Failed")
        if manifests:
            time.sleep(2.0)  # the agent's knobs land within a second of Running
        knobs = self.view.agent_knobs(running)
        rec["agent_knobs_found"] = len(knobs)
        rec["agent_knobs"] = sorted({re.sub(r"pod[0-9a-f_-]+(\.slice)?(/[0-9a-f]{64}|/cri-containerd-[0-9a-f]+"
                                            r"\.scope)?", "pod*", k).split("kubepods", 1)[-1] for k in knobs})[:12]
        return offline, running

    def _fill_hog(self, cell: str, running: list[dict[str, Any]], rec: dict[str, Any]) -> None:
        """Memory kind: until the hog holds 90 % of its memory (its first touch takes seconds per GiB at the CPU
        its arm gives it), then the page-cache streamer starts."""
        t_fill = time.monotonic()
        hog = rec["sizing"]["hog_mib"] * MIB
        rec["hog_filled"] = self.wait(lambda: self.view.anon_bytes(running[0]) >= 0.9 * hog,
                                      self.args.fill_timeout, "the hog to hold 90 % of its memory")
        rec["hog_fill_s"] = round(time.monotonic() - t_fill, 1)
        self.view.ctl_touch(cell, "stream")

    def _measure(self, cell: str, kind: str, arm: str, manifests: list[dict[str, Any]],
                 running: list[dict[str, Any]], gen: Generator, rec: dict[str, Any]) -> None:
        """The warm-up, the measured window, the offline pods' fate and work, the online pod's latency."""
        time.sleep(self.args.warmup)
        c0 = self.view.counters(self.web, running)
        if arm in TIDEMARK_ARMS and self.installed:
            rec.update(self._tier_trace(self.args.measure))
        else:
            time.sleep(self.args.measure)
        c1 = self.view.counters(self.web, running)
        alloc_mem = _parse_mem(self.node_obj()["status"]["allocatable"]["memory"])
        rec["node_mem_util"] = round(self.view.kubepods_working_set() / alloc_mem, 4)
        rec.update(window_figures(c0, c1, self.cores))
        # before the stop: what happened to the offline pods (evicted: deleted by the agent; nothing else deletes)
        after = {p["metadata"]["name"]: p for p in self.pods(f"cell={cell}")}
        names = [m["metadata"]["name"] for m in manifests]
        evicted = [n for n in names if n not in after or after[n]["metadata"].get("deletionTimestamp")
                   or after[n]["status"].get("reason") == "Evicted"]
        rec["offline_evictions"] = len(evicted)
        rec["offline_ooms"] = sum(self.view.oom_kills(p) for p in after.values())
        self.view.ctl_touch(cell, "stop")
        wanted = [f"{n}.yaml" for n in names if n in after and after[n]["status"].get("phase") == "Running"]
        self.wait(lambda: all(v is not None for v in self.view.ctl_read(cell, wanted).values()), 30,
                  "the offline jobs' metrics", poll=0.5)
        records = gen.stop()
        rec.update(latency_summary(records, c0.t, c1.t))
        texts = self.view.ctl_read(cell, [f"{n}.yaml" for n in names])
        results = {n: parse_stress_yaml(texts.get(f"{n}.yaml") or "") for n in names}
        rec["offline_work_per_s"] = offline_work(results, WORK_STRESSOR[kind]) if arm not in ONLINE_ONLY_ARMS else None
        rec["offline_runs"] = {n: r.get(WORK_STRESSOR[kind]) for n, r in results.items()}

    def _tier_trace(self, seconds: float) -> dict[str, Any]:
        """Over the measured window, the agent's offline tier as it decided it, scraped from its /metrics every
        second (agent/daemon/metrics.py): the ceiling's percentiles, the worst online pod's CPU wait and its
        baseline, and the share of scrapes with the wait over target + baseline (where the feedback cuts). What
        held the tier back in a cell: the bound (a ceiling near allocatable x ratio - online - system) or the
        wait feedback (a high over-target share)."""
        import yaml

        from localcluster.agentmetrics import (
            OFFLINE_IO_LIMIT,
            ONLINE_DELAY,
            ONLINE_DELAY_BASE,
            ONLINE_IO_WAIT,
            ONLINE_WAIT,
            ONLINE_WAIT_BASE,
            TIER_CEILING,
            http_get,
            parse_metrics,
        )
        from localcluster.view import agent_metrics_url

        conf = yaml.safe_load(getattr(self.node, "agent_config", "") or "") or {}
        from agent.config_tier import TierConfig

        # the shipped target where the arm's config has none (it said 0.05 after the default became 0.10: the
        # shipped arm's "over" share of the runs before 2026-11-30 counted waits over 0.05 + baseline)
        default = TierConfig()
        tier_cpu = (conf.get("tier") or {}).get("cpu") or {}
        slices = str(tier_cpu.get("onlineWaitSignal", default.online_wait_signal)) == "slice"
        target = float(tier_cpu.get("onlineWaitTarget", default.online_wait_target))
        delay_target = float(tier_cpu.get("onlineDelayTarget", default.online_delay_target))
        url = agent_metrics_url(self.node.pods("tidemark-system", "app.kubernetes.io/name=tidemark-agent"),
                                self.node.node_name)
        ceilings: list[float] = []
        waits: list[float] = []
        bases: list[float] = []
        delays: list[float] = []  # ms per slice
        io_waits: list[float] = []
        io_limits: list[float] = []  # MiB/s; 0 = no limit
        worst: Counter[str] = Counter()  # the pod whose wait is the signal, per scrape
        over = 0
        end = time.monotonic() + seconds
        while end - time.monotonic() > 0:
            with contextlib.suppress(Exception):  # a missed scrape is a gap in the trace, not a failed cell
                m = parse_metrics(http_get(url)) if url else {}
                if TIER_CEILING in m:
                    ceilings.append(m[TIER_CEILING])
                if ONLINE_WAIT in m:
                    base = m.get(ONLINE_WAIT_BASE, 0.0)
                    waits.append(m[ONLINE_WAIT])
                    if not slices:
                        bases.append(base)
                        over += m[ONLINE_WAIT] > target + base
                if ONLINE_DELAY in m:
                    delay_base = 1000.0 * m.get(ONLINE_DELAY_BASE, 0.0)
                    delays.append(1000.0 * m[ONLINE_DELAY])
                    if slices:
                        bases.append(delay_base)
                        over += 1000.0 * m[ONLINE_DELAY] > delay_target + delay_base
                worst.update(WORST_POD.findall(" ".join(k for k in m if k.startswith(ONLINE_WAIT_POD))))
                if ONLINE_IO_WAIT in m:
                    io_waits.append(m[ONLINE_IO_WAIT])
                if OFFLINE_IO_LIMIT in m:
                    io_limits.append(m[OFFLINE_IO_LIMIT] / 2**20)
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

        def pct(xs: list[float], q: float) -> float | None:
            return round(float(np.percentile(xs, q)), 4) if xs else None

        return {"tier_scrapes": len(ceilings), "tier_ceiling_cores_p10": pct(ceilings, 10),
                "tier_ceiling_cores_p50": pct(ceilings, 50), "tier_ceiling_cores_p90": pct(ceilings, 90),
                "online_wait_p50": pct(waits, 50), "online_wait_p90": pct(waits, 90),
                "online_wait_base_p50": pct(bases, 50),
                "online_wait_target": delay_target if slices else target,
                "online_wait_signal": "slice" if slices else "share",
                "online_delay_ms_p50": pct(delays, 50), "online_delay_ms_p90": pct(delays, 90),
                "online_wait_over_share": round(over / len(delays if slices else waits), 3)
                if (delays if slices else waits) else None,
                "online_wait_worst_pods": dict(worst.most_common(3)),
                "online_io_wait_p50": pct(io_waits, 50), "online_io_wait_p90": pct(io_waits, 90),
                "io_limit_mib_s_p10": pct(io_limits, 10), "io_limit_mib_s_p50": pct(io_limits, 50),
                "io_unlimited_share": round(sum(v == 0 for v in io_limits) / len(io_limits), 3) if io_limits else None}

    def cell(self, kind: str, arm: str, rnd: int, load: str = "third") -> dict[str, Any]:
        """One cell: the online load at the level's rate, the offline pods of (kind, arm), the measured window."""
        self.want(arm)
        self.ensure_web()
        cell = f"{kind}-{arm.replace('_', '-')}-{load.replace('_', '-')}-r{rnd}"
        ctl = self.view.ctl_reset(cell)
        rec: dict[str, Any] = {"kind": kind, "arm": arm, "round": rnd, "load_level": load,
                               "rate": self.rates[load], "load_1m_start": round(os.getloadavg()[0], 2)}
        sizing, note = self.sizing(kind, arm, load)
        rec.update(note)
        rec["sizing"] = {"cpu_milli": sizing.cpu_milli, "memory_mib": sizing.memory_bytes // MIB,
                         "hog_mib": sizing.hog_bytes // MIB}
        manifests = offline_pods(kind, arm, sizing, self.image, ctl, cell)
        if arm in TIDEMARK_ARMS and manifests and sizing.cpu_milli < 20 * max(1, len(manifests)):
            rec["no_capacity"] = True
            manifests = []
        web0 = self.web_state()
        gen = Generator(f"{self.web_ip()}:{PORT}", self.rates[load], self.args.run_dir / "records.bin").start()
        time.sleep(1.0)
        offline, running = self._start_offline(cell, arm, manifests, rec)
        if kind == "memory" and running:
            self._fill_hog(cell, running, rec)
        self._measure(cell, kind, arm, manifests, running, gen, rec)
        web1 = self.web_state()
        rec["online_restarts"] = web1["restarts"] - web0["restarts"] if web1["uid"] == web0["uid"] else 1
        rec["online_ooms"] = max(0, web1["ooms"] - web0["ooms"]) if web1["uid"] == web0["uid"] else 0
        rec["online_evictions"] = int(web1["evicted"] or web1["uid"] != web0["uid"])
        rec["load_1m_end"] = round(os.getloadavg()[0], 2)
        rec["installed"] = self.installed
        self.cleanup(cell, offline)
        self.view.ctl_remove(cell)
        return rec

    def cleanup_all(self) -> None:
        """Every pod of the benchmark's namespace deleted (an attached node stays up)."""
        if self.core is not None:
            with contextlib.suppress(Exception):
                self.core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)

    def cleanup(self, cell: str, offline: list[dict[str, Any]]) -> None:
        """The cell's offline pods deleted (grace 0) and waited for until kubelet has removed their cgroups."""
        self.core.delete_collection_namespaced_pod(NS, label_selector=f"cell={cell}", grace_period_seconds=0)
        with contextlib.suppress(Exception):
            self.custom.delete_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", NS, "podgroups", cell)
        with_status = [p for p in offline if p.get("status", {}).get("qosClass")]

        def gone() -> bool:
            return not self.pods(f"cell={cell}") and not any(self.view.pod_present(p) for p in with_status)

        self.wait(gone, 90, "the offline pods and their cgroups gone")


def _parse_cpu(q: str) -> int:
    q = str(q)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def _parse_mem(q: str) -> int:
    q = str(q)
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
    for u, mult in units.items():
        if q.endswith(u):
            return int(float(q[: -len(u)]) * mult)
    return int(float(q))

