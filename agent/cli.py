"""`tidemark-agent`: `plan` (sense, decide, print), `run` (the daemon) and `restore` (put originals back).

Exit codes (docs/design.md, "Agent command line"): 0 ok, 1 runtime failure, 2 bad usage or configuration. Bad
input gives one clear line per problem on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from agent.cgroups.fs import FileReader, ReadStats
from agent.cgroups.layout import DEFAULT_KUBELET_CONFIG, KubeLayout, detect_driver
from agent.cgroups.mounts import CgroupDetectionError, detect_hierarchy
from agent.config import DEFAULT_CONFIG, AgentConfig, errors, load_config_file
from agent.decide.plan import decide, initial_state
from agent.model import CgroupState, PodView, ProfileState, Snapshot
from agent.render import render_json, render_table, render_yaml
from agent.sense.blockdev import host_devices
from agent.sense.procfs import ProcFS
from agent.sense.sampler import Sampler
from agent.sense.snapshot import (
    find_node,
    node_view,
    pod_view,
    pods_on,
    qos_ancestors,
    resolve_pod_cgroups,
    sense_cgroups,
)
from agent.sense.tiersense import TierSensor
from tidemark.apis import parse_resource_list, pod_limits, pod_requests
from tidemark.buildinfo import version_line
from tidemark.clock import Clock, SystemClock

log = logging.getLogger("agent.cli")
PROG = "tidemark-agent"


class UsageError(Exception):
    """Bad flags or configuration: exit code 2."""


class RuntimeFailure(Exception):
    """The machine is not as expected (no cgroups, no kubepods): exit code 1."""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _root_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup", help="where the cgroup filesystems are mounted")
    p.add_argument("--kube-cgroup-root", default="/", help="kubelet's own --cgroup-root (default /)")
    p.add_argument("--cgroup-driver", choices=("auto", "cgroupfs", "systemd"), default="auto")
    p.add_argument("--proc-root", default="/proc", help="where /proc is mounted")


def _sensing_flags(p: argparse.ArgumentParser) -> None:
    _root_flags(p)
    p.add_argument("--config", help="agent configuration file (YAML; defaults when absent)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Tidemark node agent")
    parser.add_argument("--version", action="version", version=version_line(PROG))
    sub = parser.add_subparsers(dest="command", metavar="{plan,run,restore}")
    sub.required = True
    plan = sub.add_parser("plan", help="sense this node, decide, and print the plan (changes nothing)")
    plan.add_argument("--node-name", required=True)
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--cluster", metavar="OBJECTS.yaml", help="multi-document YAML with the Node and its Pods")
    source.add_argument(
        "--kubeconfig",
        nargs="?",
        const="",
        metavar="FILE",
        help="read the Node and its Pods from the live cluster, read-only (no FILE: in-cluster, $KUBECONFIG, "
        "~/.kube/config)",
    )
    _sensing_flags(plan)
    plan.add_argument("--samples", type=_positive_int, default=3, help="K measurements (K+1 reads), default 3")
    plan.add_argument("--interval", type=_positive_float, default=1.0, help="seconds between reads, default 1")
    plan.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    plan.add_argument(
        "--state-dir",
        help="read the usage profiles (profiles.json) of the agent running with this state dir, read-only, for the "
        "`profile` capacity policy (default: none, the profiles start empty)",
    )
    run = sub.add_parser("run", help="run the agent on this node (sense, decide, act in loops)")
    run.add_argument("--node-name", help="this node's name (default $NODE_NAME, else the host name)")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    run.add_argument(
        "--node-writes",
        choices=("report", "direct"),
        default="report",
        help="report (default): write this node's NodeReport, which the webhook's controller applies to the Node "
        "(the agent needs no Node write rights); direct: patch the Node itself (needs cluster-wide nodes patch)",
    )
    _sensing_flags(run)
    run.add_argument("--state-dir", default="/var/lib/tidemark", help="journal of original values, first-seen classes")
    run.add_argument("--listen-address", default=":9102", help="HOST:PORT for /metrics /healthz /readyz")
    run.add_argument("--log-format", choices=("text", "json"), default="text")
    run.add_argument("--dry-run", action="store_true", help="decide and log the plan; write nothing")
    run.add_argument("--once", action="store_true", help="sample until one full decision is possible, apply it, exit")
    restore = sub.add_parser("restore", help="put back every journaled original value")
    restore.add_argument("--state-dir", default="/var/lib/tidemark")
    _root_flags(restore)  # the only roots journaled values may be restored under (never read from the journal)
    return parser


def _load_config(path: str | None, labels: Mapping[str, str] | None = None) -> tuple[AgentConfig, list[str]]:
    if not path:
        return DEFAULT_CONFIG, []
    config, problems = load_config_file(path, labels)
    bad = errors(problems)
    if bad:
        raise UsageError("\n".join(f"config {path}: {p}" for p in bad))
    return config, [f"config {path}: {p}" for p in problems]


def _live_objects(kubeconfig: str, node_name: str) -> list[dict[str, Any]]:
    """The Node and the Pods bound to it, read from the API server (two GETs, nothing written)."""
    from tidemark.kube.client import ApiStatusError, KubeError, new_api_client, request_json
    from tidemark.kube.resources import NODES, PODS, InvalidNameError

    try:
        NODES.object_path(node_name)
    except InvalidNameError as e:
        raise UsageError(f"--node-name: {e}") from None
    try:
        api = new_api_client(kubeconfig or None, user_agent=f"{PROG}-plan/{node_name}", lite=True)
        node = request_json(api, "GET", NODES.object_path(node_name))
        pods = request_json(api, "GET", PODS.collection_path(), query={"fieldSelector": f"spec.nodeName={node_name}"})
    except ApiStatusError as e:
        if e.status == 404:
            return []
        raise RuntimeFailure(f"reading node {node_name!r} and its pods: {e}") from None
    except KubeError as e:
        raise RuntimeFailure(f"reading node {node_name!r} and its pods: {e}") from None
    node.setdefault("kind", "Node")
    items = [dict(p, kind="Pod") for p in pods.get("items") or [] if isinstance(p, dict)]
    return [node, *items]


def _quantity_problems(obj: Mapping[str, object]) -> list[str]:
    """The quantities of a Node's status or a Pod's containers that Kubernetes would refuse (simulate refuses
    them too): not its grammar, out of range, negative."""
    problems: list[str] = []
    if obj.get("kind") == "Node":
        status = obj.get("status")
        if isinstance(status, Mapping):
            for part in ("allocatable", "capacity"):
                found: list[str] = []
                parse_resource_list(status.get(part), found)  # type: ignore[arg-type]
                problems.extend(f"status.{part}: {p.removesuffix('; ignored')}" for p in found)
    else:
        found = []
        pod_requests(obj, found)
        pod_limits(obj, found)
        problems.extend(f"resources: {p.removesuffix('; ignored')}" for p in dict.fromkeys(found))
    return problems


def _shape_problems(obj: Mapping[str, object]) -> list[str]:
    """`plan`'s alone, imported here: `run` never loads tidemark.shapes (the daemon's RSS, docs/scale.md)."""
    from tidemark.shapes import shape_problems

    return shape_problems(obj)


def _refuse_misshaped(path: str, objects: list[Mapping[str, object]]) -> None:
    """The node and its pods must be what Kubernetes would store (their shape, their quantities): else exit 2
    naming each bad field, as `tidemark-scheduler simulate` does."""
    lines: list[str] = []
    for obj in objects:
        md = obj.get("metadata")
        name = md.get("name") if isinstance(md, Mapping) else None
        ns = md.get("namespace") if isinstance(md, Mapping) else None
        who = f"{obj.get('kind')} {ns + '/' if isinstance(ns, str) and ns else ''}{name}"
        shape = _shape_problems(obj)
        lines.extend(f"{path}: {who}: {p}" for p in shape or _quantity_problems(obj))
    if lines:
        raise UsageError("\n".join(lines))


#: what capacity cannot do without: the machine's CPU and memory use (U_non), from /proc
PROC_INPUTS = ("stat", "meminfo")


def _require_proc(proc_root: str) -> None:
    """Capacity fails closed (issue #13 D4): without /proc, U_non would read as 0 and B as A x ratio."""
    missing = [name for name in PROC_INPUTS if not os.access(os.path.join(proc_root, name), os.R_OK)]
    if missing:
        raise UsageError(
            f"--proc-root {proc_root}: cannot read {', '.join(missing)}: the node's own usage (U_non) is "
            "unknown, and a capacity without it would offer what online pods are using; is /proc mounted there?"
        )


def plan_command(args: argparse.Namespace, clock: Clock) -> str:
    _load_config(args.config)  # refuse a bad file before reading anything else
    profile_notes: list[str] = []
    if args.cluster is not None:
        from tidemark.objects import ObjectsError, load_objects  # plan's alone: not in the daemon's memory
        from tidemark.profiles import apply_to_objects

        try:
            objects = load_objects(args.cluster)
        except ObjectsError as e:
            raise UsageError(str(e)) from None
        # the file's ColocationProfiles, applied to its pods as the webhook would (docs/colocation-profiles.md)
        objects, profile_notes = apply_to_objects(objects)
        where = args.cluster
    else:
        objects, where = _live_objects(args.kubeconfig, args.node_name), "the cluster"
    node_obj = find_node(objects, args.node_name)
    if node_obj is None:
        raise UsageError(f"node {args.node_name!r} not found in {where}")
    _refuse_misshaped(where, [node_obj, *pods_on(objects, args.node_name)])
    start = clock.wall()
    node = node_view(node_obj)
    config, notes = _load_config(args.config, node.labels)  # with the overrides that match this node
    notes.extend(profile_notes)
    pods = []
    for obj in pods_on(objects, args.node_name):
        view, warnings = pod_view(obj, start)
        pods.append(view)
        notes.extend(warnings)

    _require_proc(args.proc_root)
    stats = ReadStats()
    reader = FileReader(stats)
    procfs = ProcFS(args.proc_root, reader)
    try:
        hierarchy = detect_hierarchy(args.cgroup_root, procfs.mountinfo())
    except CgroupDetectionError as e:
        raise RuntimeFailure(str(e)) from None
    driver, why = detect_driver(hierarchy, args.kube_cgroup_root, args.cgroup_driver, DEFAULT_KUBELET_CONFIG)
    layout = KubeLayout(hierarchy, driver, args.kube_cgroup_root)
    kubepods = layout.kubepods()
    if not os.path.isdir(kubepods.cpu) or not os.path.isdir(kubepods.memory):
        raise RuntimeFailure(
            f"no kubepods cgroup at {kubepods.cpu} ({hierarchy.version}, {driver}); check --cgroup-root, "
            "--kube-cgroup-root and --cgroup-driver"
        )
    notes.append(f"cgroup {hierarchy.version} under {hierarchy.mount_root} (found from {hierarchy.source}); {why}")
    cgroups = resolve_pod_cgroups(layout, pods)
    for p in pods:
        if p.uid not in cgroups:
            notes.append(
                f"{p.key}: no pod cgroup on this machine (not started, still being made: no sandbox in it yet, "
                "or elsewhere); no usage or knobs"
            )
    sampler = Sampler(layout, {uid: pc.pod for uid, pc in cgroups.items()}, procfs, reader, clock)
    sampler.online = frozenset(p.uid for p in pods if not p.offline)  # their PSI (v2) is in the explanations

    devices, device_notes = host_devices(config.io_qos.devices, procfs, hierarchy)
    # the memory guard's and the I/O controller's readings, over the same samples (agent.sense.tiersense)
    tiers = TierSensor(reader, args.proc_root)
    by_class = {c: {p.key: cgroups[p.uid].pod for p in pods if p.uid in cgroups and p.offline == c} for c in (0, 1)}
    read_tier = partial(tiers.read, besteffort=qos_ancestors(layout).get("besteffort"), online=by_class[0],
                        offline=by_class[1], disks=[d.number for d in devices])  # fmt: skip
    read_tier(clock.wall())
    samples = sampler.samples(args.samples, args.interval)  # the first cgroup read happens here
    tier_sense = read_tier(clock.wall())

    state = sense_cgroups(layout, pods, cgroups, reader, procfs)
    state = replace(state, devices=devices, device_notes=device_notes)
    # the samples were taken --interval apart: that is the sampler period of this decision (the watermark
    # rule counts a sample faster than the period only for a triggered resource)
    config = replace(config, sampler=replace(config.sampler, period=args.interval))
    n = config.eviction.consecutive
    if args.samples < n:
        notes.append(f"--samples {args.samples} < N={n}: using N={args.samples} consecutive samples")
        config = replace(config, eviction=replace(config.eviction, consecutive=args.samples))
    if stats.missing or stats.errors:
        notes.append(f"{stats.missing} cgroup/proc file(s) were missing and {stats.errors} unreadable while sensing")
    snapshot = Snapshot(
        node=node,
        pods=tuple(pods),
        samples=samples,
        new_samples=len(samples),
        cgroups=state,
        state=replace(
            initial_state(node.evicting_annotation or node.evicting_taint), profile=_profiles(args, notes, clock.wall())
        ),
        notes=tuple(notes),
        tier_sense=tier_sense,
    )
    plan = decide(snapshot, config, clock.wall())
    if config.network_qos.enabled:
        net = _network_explanations(args, config, pods, state, clock)
        plan = replace(plan, explanations=plan.explanations + net)
    renderers = {"json": render_json, "yaml": render_yaml, "table": render_table}
    return renderers[args.output](plan)


def _profiles(args: argparse.Namespace, notes: list[str], now: float) -> ProfileState:
    """The running agent's usage profiles from `--state-dir` (read-only), else none."""
    if not args.state_dir:
        return ProfileState()
    from agent.act.statedir import PROFILES, ProfileCheckpoint

    checkpoint = ProfileCheckpoint(os.path.join(args.state_dir, PROFILES))
    profiles = checkpoint.load(now, set_aside=False)
    notes.append(f"usage profiles from {checkpoint.path}: {checkpoint.loaded}")
    return profiles


def _network_explanations(
    args: argparse.Namespace, config: AgentConfig, pods: Sequence[PodView], state: CgroupState, clock: Clock
) -> tuple[str, ...]:
    """networkQoS on: K more samples of the NIC and the offline pods' veths; the network plan in words."""
    from agent.daemon.netqos import plan_network
    from agent.sense.network import NetSensor, PodNet

    offline = [PodNet(p.uid, p.key, True, pid=(state.pids.get(p.uid) or (None,))[0]) for p in pods if p.offline]
    try:
        sensor = NetSensor(args.proc_root)
        net = plan_network(
            config.network_qos, offline, args.samples, args.interval, sensor, clock.sleep, clock.monotonic
        )
    except Exception as e:  # no netlink here (not Linux, no permission to enter a pod's namespace)
        return (f"network QoS: cannot sense the network: {e}",)
    shaped = ", ".join(f"{s.key} on {s.veth} ({s.download_bps} / {s.upload_bps} bit/s)" for s in net.shapes)
    return (*net.explanations, f"network QoS: shaped (download / upload) {shaped or 'none'}")


def main(argv: Sequence[str] | None = None, clock: Clock | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage line
        return e.code if isinstance(e.code, int) else 2
    if args.command == "run":
        from agent.daemon.runner import run_command

        return run_command(args, clock)
    if args.command == "restore":
        from agent.daemon.runner import restore_command

        logging.getLogger().setLevel(logging.INFO)
        return restore_command(args)
    try:
        out = plan_command(args, clock or SystemClock())
    except UsageError as e:
        for line in str(e).splitlines():
            print(f"{PROG}: {line}", file=sys.stderr)
        return 2
    except RuntimeFailure as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 1
    except Exception as e:  # a bug or an unexpected OS error: one line, no traceback
        if os.environ.get("TIDEMARK_DEBUG"):
            raise
        print(f"{PROG}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    try:
        print(out)
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
