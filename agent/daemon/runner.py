"""`tidemark-agent run` and `tidemark-agent restore`: build the daemon from flags, run it, exit with a code.

Exit codes (docs/design.md, "Agent command line"): 0 ok, 1 runtime failure (no cgroups, no API configuration,
the state dir held by another agent, the listen address taken, --once could not apply its decision), 2 bad usage or
configuration (one line per problem on stderr, never a traceback).

Startup order: everything slow (the Kubernetes client import, YAML, the first API lists) happens before
the first cgroup read, so no sample is skewed (docs/design.md, "Sampler").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from agent.act.restore import RestoreRoots, restore_state_dir
from agent.act.statedir import StateDir, StateDirError
from agent.cgroups.fs import FileReader, ReadStats
from agent.cgroups.layout import DEFAULT_KUBELET_CONFIG, KubeLayout, detect_driver
from agent.cgroups.mounts import CgroupDetectionError, detect_hierarchy
from agent.daemon.agent import Agent, AgentOptions
from agent.daemon.configsource import ConfigSource
from agent.daemon.netloop import restore_network
from agent.daemon.sdnotify import Notifier
from agent.render import plan_json
from agent.sense.procfs import ProcFS
from tidemark.clock import Clock, SystemClock

log = logging.getLogger("agent.run")
PROG = "tidemark-agent"
#: `restore` waits this long for a running agent to restore on its behalf
RESTORE_WAIT_SECONDS = 30.0


class Exit(Exception):
    """Leave with `code` after printing `message` (one line per problem)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _err(message: str) -> None:
    for line in message.splitlines():
        print(f"{PROG}: {line}", file=sys.stderr)


def node_name_from(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    name = args.node_name or environ.get("NODE_NAME") or socket.gethostname().lower()
    if not name:
        raise Exit(2, "no node name: pass --node-name (or set NODE_NAME)")
    return str(name)


def build_layout(args: argparse.Namespace, reader: FileReader, procfs: ProcFS) -> tuple[KubeLayout, str]:
    try:
        hierarchy = detect_hierarchy(args.cgroup_root, procfs.mountinfo())
    except CgroupDetectionError as e:
        raise Exit(1, str(e)) from None
    driver, why = detect_driver(hierarchy, args.kube_cgroup_root, args.cgroup_driver, DEFAULT_KUBELET_CONFIG)
    layout = KubeLayout(hierarchy, driver, args.kube_cgroup_root)
    kubepods = layout.kubepods()
    if not os.path.isdir(kubepods.cpu) or not os.path.isdir(kubepods.memory):
        raise Exit(
            1,
            f"no kubepods cgroup at {kubepods.cpu} ({hierarchy.version}, {driver}); check --cgroup-root, "
            "--kube-cgroup-root and --cgroup-driver",
        )
    return layout, f"cgroup {hierarchy.version} under {hierarchy.mount_root} ({hierarchy.source}); {why}"


#: seconds the SIGTERM check keeps looking for an uninstall while the owner DaemonSet is still there unchanged
UNINSTALL_WAIT = 10.0


def uninstall_check(
    api: Any,
    environ: Mapping[str, str],
    *,
    get: Callable[[str], Any] | None = None,
    wait: float = UNINSTALL_WAIT,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[], bool]:
    """On SIGTERM: restore kubelet's values iff the agent is being uninstalled.

    `TIDEMARK_RESTORE_ON_EXIT=true|false` decides outright (systemd: unset = false). In a pod (POD_NAME,
    POD_NAMESPACE from the downward API) the agent reads its own pod and its owner DaemonSet with its own
    credentials:
    - the DaemonSet gone (404), being deleted or replaced (another UID): uninstall;
    - the agent's credentials refused (401: its ServiceAccount's token is gone; 403: its RBAC is): uninstall.
      `kubectl delete -k` / `-f` of the install deletes the namespace, the ServiceAccount and the bindings
      BEFORE the DaemonSet (kustomize's order), so by the time the agent is stopped it is often refused;
    - the DaemonSet there with a newer pod template (`metadata.generation` past the pod's
      `pod-template-generation`): a rollout, nothing restored, the next agent takes over the journal;
    - the DaemonSet there with this pod's template: a node drain or shutdown, a pod deleted by hand, or an
      uninstall whose DaemonSet deletion has not come yet (the namespace's deletion reaches the pods first): it
      looks again every second for `wait` seconds, then keeps the knobs.
    An API that does not answer (a timeout, a refused connection, 429, 5xx: a loaded API server during the very
    uninstall) is asked again every second within the same `wait`; when it still cannot tell, nothing is
    restored (the journal stays for the next agent or `tidemark-agent restore`).
    """
    from tidemark.kube.client import ApiStatusError, KubeError, request_json
    from tidemark.kube.resources import DAEMONSETS, PODS

    fetch = get or (lambda path: request_json(api, "GET", path, timeout=(2.0, 3.0)))
    revoked = (401, 403)

    def once(namespace: str) -> bool | None:
        """True: uninstall; False: keep the knobs; None: the DaemonSet unchanged, look again."""
        try:
            pod = fetch(PODS.object_path(environ["POD_NAME"], namespace))
        except ApiStatusError as e:
            if e.status in revoked:
                log.info("the API refuses the agent its own pod (%s): its credentials are gone", e)
                return True
            raise
        md = pod.get("metadata") or {}
        ds = next((o for o in md.get("ownerReferences") or [] if o.get("kind") == "DaemonSet"), None)
        if ds is None:
            return False
        try:
            obj = fetch(DAEMONSETS.object_path(str(ds.get("name") or ""), namespace))
        except ApiStatusError as e:
            if e.status == 404 or e.status in revoked:
                return True
            raise
        dmd = obj.get("metadata") or {}
        if dmd.get("deletionTimestamp") or dmd.get("uid") != ds.get("uid"):
            return True
        mine = str((md.get("labels") or {}).get("pod-template-generation", ""))
        if mine and mine != str(dmd.get("generation", "")):
            return False  # a rollout of a newer template
        return None

    def check() -> bool:
        explicit = environ.get("TIDEMARK_RESTORE_ON_EXIT", "").strip().lower()
        if explicit in ("true", "1", "yes"):
            return True
        if explicit in ("false", "0", "no") or not environ.get("POD_NAME"):
            return False
        namespace = environ.get("POD_NAMESPACE") or "kube-system"
        deadline = clock() + wait
        unanswered: KubeError | None = None
        while True:
            try:
                verdict = once(namespace)
                unanswered = None
            except KubeError as e:
                if isinstance(e, ApiStatusError) and e.status < 500 and e.status != 429:
                    log.warning("cannot tell whether the agent is being uninstalled (%s); keeping the knobs", e)
                    return False
                verdict, unanswered = None, e
            if verdict is not None:
                return verdict
            if clock() >= deadline:
                if unanswered is not None:
                    log.warning("cannot tell whether the agent is being uninstalled: no answer for %.0f s (%s); "
                                "keeping the knobs", wait, unanswered)  # fmt: skip
                return False
            sleep(1.0)

    return check


def run_command(args: argparse.Namespace, clock: Clock | None = None, environ: Mapping[str, str] | None = None) -> int:
    from tidemark.logs import setup_logging

    env = os.environ if environ is None else environ
    clock = clock or SystemClock()
    setup_logging(args.log_format, env.get("TIDEMARK_LOG_LEVEL", "INFO"))
    # Python warnings (urllib3's InsecureRequestWarning with an insecure kubeconfig) go through logging,
    # so --log-format json stays one JSON object per line; a repeated warning is logged once.
    logging.captureWarnings(True)
    warnings.filterwarnings("once", module="urllib3")
    try:
        return _run(args, clock, env)
    except Exit as e:
        _err(str(e))
        return e.code


def _run(args: argparse.Namespace, clock: Clock, env: Mapping[str, str]) -> int:
    """Configuration, the API client, the cgroup layout and the state dir (everything slow first), the agent,
    its HTTP server; then the loop until a signal (or one decision with --once), and the way out."""
    config = ConfigSource(args.config)
    first = config.load()
    if not first.accepted:
        raise Exit(2, "\n".join(f"config {args.config}: {p}" for p in first.problems))
    for p in first.problems:
        log.warning("config %s: %s", args.config, p)
    node = node_name_from(args, env)

    # the slow part first: the client import and configuration
    from tidemark.kube.client import KubeError, new_api_client

    try:
        api = new_api_client(args.kubeconfig, user_agent=f"{PROG}/{node}", lite=True)
    except KubeError as e:
        raise Exit(1, str(e)) from None

    reader = FileReader(ReadStats())
    procfs = ProcFS(args.proc_root, reader)
    layout, why = build_layout(args, reader, procfs)
    log.info("%s", why)
    state = None if args.dry_run else _lock_state_dir(args.state_dir, procfs)

    from agent.daemon.cluster import KubeCluster
    from tidemark.kube.events import EventRecorder

    cluster = KubeCluster(api, node)
    events = EventRecorder(api, PROG, host=node)
    notifier = Notifier(env)
    agent = Agent(
        node_name=node,
        layout=layout,
        procfs=procfs,
        reader=reader,
        clock=clock,
        cluster=cluster,
        config=config,
        state=state,
        node_writer=_node_writer(args, api, node),
        evictor=_evictor(args, api, node),
        events=events,
        options=AgentOptions(dry_run=args.dry_run, threaded_api=not args.once, pressure_sensor=not args.once),
        notifier=notifier,
    )
    server = None if args.once else _serve(args.listen_address, agent, state)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        agent.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _loop(args, agent, cluster)
    finally:
        notifier.stopping()
        restore = False
        if not args.once and not args.dry_run and state is not None:
            with contextlib.suppress(Exception):
                restore = uninstall_check(api, env)()
        if restore:
            log.info("the agent is being uninstalled: restoring every original value")
        agent.shutdown(restore=restore)
        events.stop(2.0)
        if server is not None:
            server.stop()
        if state is not None:
            state.unlock()
        for s, h in previous.items():
            signal.signal(s, h)


def _lock_state_dir(path: str, procfs: ProcFS) -> StateDir:
    """The state dir, locked (one agent per node) and loaded."""
    state = StateDir(path)
    try:
        if not state.try_lock():
            raise Exit(1, f"another tidemark-agent holds the state dir {path} (its lock file)")
    except StateDirError as e:
        raise Exit(1, str(e)) from None
    state.load()
    state.journal.proc_root = procfs.root
    return state


def _node_writer(args: argparse.Namespace, api: Any, node: str) -> Any:
    """report (the default): the agent writes its NodeReport only (docs/security.md, "The agent's writes");
    direct: the Node itself."""
    from agent.act.node_writer import NodeWriter
    from agent.act.report_writer import ReportWriter

    direct = getattr(args, "node_writes", "report") == "direct"
    return NodeWriter(api, node) if direct else ReportWriter(api, node)


def _evictor(args: argparse.Namespace, api: Any, node: str) -> Any:
    """report (the default): the agent asks its NodeReport controller to evict (it holds no eviction right);
    direct (no controller runs): the Eviction API itself."""
    from agent.act.evictor import KubeEvictor
    from agent.act.report_evictor import ReportEvictor

    direct = getattr(args, "node_writes", "report") == "direct"
    return KubeEvictor(api) if direct else ReportEvictor(api, node)


def _serve(listen: str, agent: Agent, state: StateDir | None) -> Any:
    """/metrics, /healthz and /readyz, started; a taken address or a bad one is an exit (the lock let go)."""
    from agent.daemon.metrics import agent_registry
    from agent.daemon.netqos import NetworkQosCollector
    from tidemark.serving import ServingServer

    registry = agent_registry(agent)
    registry.register(NetworkQosCollector(agent.network.qos))
    server = ServingServer(listen, registry, healthz={"loops": agent.healthy}, readyz={"api": agent.ready})
    try:
        server.start()
    except (OSError, ValueError) as e:
        if state is not None:
            state.unlock()
        raise Exit(1 if isinstance(e, OSError) else 2, f"cannot serve on {listen}: {e}") from None
    return server


def _loop(args: argparse.Namespace, agent: Agent, cluster: Any) -> int:
    """Start, run until stopped (or, with --once, one decision printed); the exit code."""
    agent.start()
    if args.once and not cluster.wait_for_sync(60.0):
        raise Exit(1, f"--once: the Node and its Pods could not be listed within 60s ({cluster.describe()})")
    rc = agent.run(once=args.once)
    plan = agent.cycle.last_plan
    if args.once and plan is not None:
        print(json.dumps(plan_json(plan), indent=2))
        if agent.worker.last_error and agent.worker.backing_off():
            _err(f"--once: the decision could not be written: {agent.worker.last_error}")
            rc = 1
    return rc


def restore_command(args: argparse.Namespace, wait: float = RESTORE_WAIT_SECONDS) -> int:
    """Put back every journaled original value; through the running agent when it holds the state dir."""
    state = StateDir(args.state_dir)
    if not os.path.isdir(args.state_dir):
        print(f"nothing to restore: no state dir {args.state_dir}")
        return 0
    try:
        got = state.try_lock()
    except StateDirError as e:
        _err(str(e))
        return 1
    if not got:
        state.request_restore()
        deadline = time.monotonic() + wait
        while state.restore_requested():
            if time.monotonic() > deadline:
                _err(f"the running agent did not restore within {wait:.0f}s; the request stays in {args.state_dir}")
                return 1
            time.sleep(0.05)
        print("the running agent restored every original value and stopped applying knobs")
        return 0
    try:
        roots = RestoreRoots(args.cgroup_root, args.kube_cgroup_root, args.cgroup_driver, args.proc_root)
        report = restore_state_dir(state, roots)
        net_ok, net_failed = restore_network(args.state_dir)  # qdiscs and IFBs, from their own journal
    finally:
        state.unlock()
    for line in (*report.rejected, *report.result.invalid):
        _err(line)
    for o in report.result.failed:
        _err(f"could not restore {o.path}/{o.file}={o.value}: {o.error}")
    print(report.summary())
    if net_ok or net_failed:
        print(f"network QoS: removed the shaping of {net_ok} interface(s), {net_failed} failed")
    return 0 if report.ok and not net_failed else 1
