"""`python -m localcluster`: the local colocation cluster (`make run`), its pod runner, and cleanup.

    python -m localcluster run [--once] [--extra-nodes N] [--results F] ...   the cluster + scenario + live view
    python -m localcluster podrunner --kubeconfig K --node-name N ...          the pod runner (NOT a kubelet)
    python -m localcluster cleanup                                            sweep trees left by killed runs

Exit codes of `run`: 0 the scenario passed (or, in a terminal, the cluster ran until Ctrl-C), 1 a
step failed or the cluster could not start, 2 bad usage, 3 this machine cannot run it (not root, no
usable cgroups, no apiserver and no apt to build one): `hack/run.sh` then falls back to
`tidemark-scheduler simulate` + `tidemark-agent plan`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from localcluster.cluster import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNSUPPORTED,
    EXIT_USAGE,
    LocalCluster,
    Options,
    Unsupported,
)

log = logging.getLogger("localcluster")


def _quantity(kind: str) -> Any:
    def parse(text: str) -> int:
        from tidemark.apis import canonical_amount

        value = canonical_amount(kind, text)
        if value is None or value <= 0:
            raise argparse.ArgumentTypeError(f"not a positive {kind} quantity: {text!r}")
        return value

    return parse


def _watermarks(text: str) -> tuple[int, int]:
    try:
        high, low = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HIGH/LOW percents, e.g. 40/20: {text!r}") from None
    if not 0 <= low < high <= 100:
        raise argparse.ArgumentTypeError(f"need 0 <= LOW < HIGH <= 100: {text!r}")
    return high, low


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m localcluster", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="bring up the local colocation cluster and play the scenario")
    r.add_argument("--once", action="store_true", help="play the scenario once and exit, even in a terminal")
    r.add_argument("--no-scenario", action="store_true", help="only bring the cluster up (until Ctrl-C)")
    r.add_argument("--short", action="store_true", help="shorter holds between the scenario's phases (for CI)")
    r.add_argument("--run-dir", type=Path, help="logs, kubeconfigs, pod logs (default /tmp/tidemark-local/run-<time>)")
    r.add_argument("--node-name", help="this machine's Node name (default: the hostname)")
    r.add_argument("--extra-nodes", type=int, default=0, help="simulated (hollow) extra nodes for the scheduler")
    r.add_argument("--agent-port", type=int, default=9102, help="agent metrics port (a free one if taken; 0: any)")
    r.add_argument("--scheduler-port", type=int, default=8080, help="scheduler metrics port (a free one if taken)")
    r.add_argument("--allocatable-cpu", type=_quantity("cpu"), help="node allocatable cpu (default: every CPU)")
    r.add_argument(
        "--allocatable-memory", type=_quantity("memory"), help="node allocatable memory (default: MemTotal - 100Mi)"
    )
    r.add_argument(
        "--cpu-watermarks", type=_watermarks, help="HIGH/LOW cpu watermarks (default: examples/local-node.yaml)"
    )
    r.add_argument("--agent-config", type=Path, help="tidemark-agent config (default examples/local-agent-config.yaml)")
    r.add_argument("--cpuset", default="0", help="the CPU(s) every demo pod is pinned to (default 0)")
    r.add_argument("--results", type=Path, help="write the scenario's figures and checks as JSON here")
    r.add_argument("--no-build", action="store_true", help="never build kube-apiserver (exit 3 when it is missing)")
    pr = sub.add_parser("podrunner", help="run the pods bound to this node as host processes (NOT a kubelet)")
    pr.add_argument("--kubeconfig", required=True)
    pr.add_argument("--node-name", required=True)
    pr.add_argument("--cgroup-root", default="/sys/fs/cgroup")
    pr.add_argument("--cgroup-prefix", required=True, help="the unique kube cgroup root name (tidemark-local-...)")
    pr.add_argument("--pods-dir", required=True, help="pod working directories and container logs")
    pr.add_argument("--allocatable-cpu", type=_quantity("cpu"))
    pr.add_argument("--allocatable-memory", type=_quantity("memory"))
    pr.add_argument(
        "--hollow-node",
        action="append",
        default=[],
        metavar="NAME[:CPU[:MEMORY]]",
        help="also serve a simulated node: admit and report pods Running, no processes",
    )
    pr.add_argument("--ready-file", help="touched once the node is registered and the runner is syncing")
    sub.add_parser("cleanup", help="kill the processes of, and remove, cgroup trees left by killed runs")
    return p


# --- run --------------------------------------------------------------------------------------


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def cmd_run(args: argparse.Namespace) -> int:
    from localcluster.scenario import Scenario, ScenarioConfig

    out = sys.stdout
    tty = out.isatty() and not args.once
    opts = Options(
        run_dir=args.run_dir,
        node_name=args.node_name,
        extra_nodes=max(0, args.extra_nodes),
        agent_port=args.agent_port,
        scheduler_port=args.scheduler_port,
        allocatable_cpu_milli=args.allocatable_cpu,
        allocatable_memory=args.allocatable_memory,
        cpu_watermarks=args.cpu_watermarks,
        build=not args.no_build,
    )
    if args.agent_config:
        opts.agent_config = args.agent_config.resolve()
    cluster = LocalCluster(opts, out)
    try:
        cluster.preflight()
    except Unsupported as exc:
        print(f"local cluster: not possible on this machine: {exc}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    except (RuntimeError, OSError) as exc:
        print(f"local cluster: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("local cluster: interrupted before anything started", file=sys.stderr)
        return EXIT_FAILED
    signal.signal(signal.SIGTERM, _raise_interrupt)
    status = EXIT_OK
    results: Any = None
    view: Any = None
    watch: Any = None
    interrupted = False
    try:
        cluster.up()
        from localcluster.view import LiveView, ViewInfo
        from localcluster.watch import ClusterWatch

        assert cluster.cp is not None and cluster.cgroups is not None
        admin = cluster.cp.client("admin")
        watch = ClusterWatch(admin, cluster.node, events_log=cluster.run_dir / "events.log").start()
        info = ViewInfo(
            node=cluster.node,
            run_dir=cluster.run_dir,
            agent_url=cluster.agent_url,
            scheduler_url=cluster.scheduler_url,
            kubeconfig=cluster.cp.kubeconfig("admin"),
        )
        view = LiveView(watch, cluster.cgroups, info, tty=tty).start()
        if not tty:
            out.write(
                f"== metrics: agent {cluster.agent_url}/metrics, scheduler {cluster.scheduler_url}/metrics; "
                f"admin kubeconfig {info.kubeconfig}\n"
            )
        if not args.no_scenario:
            cfg = ScenarioConfig(node=cluster.node, run_dir=cluster.run_dir, cpuset=args.cpuset)
            if args.short:
                cfg = dataclasses.replace(cfg, settle=3.0, baseline=1.0)
            scenario = Scenario(
                admin, watch, cluster.cgroups, cfg, say=view.say, phase=view.phase, health=cluster.dead_component
            )
            results = scenario.run()
            status = EXIT_OK if results.ok else EXIT_FAILED
            view.phase(
                f"scenario {'PASSED' if results.ok else 'FAILED'}" + (" - the cluster keeps running" if tty else "")
            )
        if tty or args.no_scenario:
            load_file = cluster.run_dir / "web-load"
            hint = f"\ntry: echo 1 > {load_file}  (an online spike; echo 0.05 > ... to idle)" if results else ""
            view.footer = f"Ctrl-C: tear everything down (restores every cgroup knob, stops every process){hint}"
            while True:
                dead = cluster.dead_component()
                if dead:
                    view.say(f"!! {dead.splitlines()[0]}")
                    status = EXIT_FAILED
                    break
                time.sleep(0.5)
    except KeyboardInterrupt:
        interrupted = True
    except Exception as exc:
        status = EXIT_FAILED
        if view is not None:
            view.say(f"error: {exc}")
        print(f"\nlocal cluster: {type(exc).__name__}: {exc}", file=sys.stderr)
        if os.environ.get("TIDEMARK_DEBUG"):
            raise
    finally:
        # A second Ctrl-C must not abandon processes and cgroups half torn down.
        signal.signal(signal.SIGINT, lambda s, f: out.write("   (tearing down, please wait)\n"))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if view is not None:
            view.stop()
        if watch is not None:
            watch.stop()
        out.write(f"\n== tearing down{' (interrupted)' if interrupted else ''}\n")
        out.flush()
        report = cluster.down()
        left = report.get("leftover_cgroups") or []
        out.write(
            f"   scheduler, agent, pod runner stopped; cgroups {'LEFT: ' + ', '.join(left) if left else 'removed'}; "
            f"control plane {report.get('control_plane_stop')}; {'clean' if report.get('clean') else 'NOT clean'} "
            f"in {report.get('seconds')}s\n"
        )
        if not report.get("clean"):
            status = EXIT_FAILED
        if results is not None:
            print_summary(out, results.to_json(), cluster)
        if args.results:
            doc = results.to_json() if results is not None else {"ok": False, "error": "the scenario did not run"}
            doc.update(
                timings=cluster.timings,
                teardown=report,
                node=cluster.node,
                prefix=cluster.prefix,
                run_dir=str(cluster.run_dir),
                interrupted=interrupted,
            )
            args.results.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        out.write(f"   logs kept in {cluster.run_dir}\n")
        out.flush()
    if interrupted and status == EXIT_OK and results is None:
        return EXIT_OK
    return status


def print_summary(out: Any, doc: dict[str, Any], cluster: LocalCluster) -> None:
    fig = doc.get("figures") or {}

    def f(key: str, unit: str = "s") -> str:
        v = fig.get(key)
        return "-" if v is None else f"{v:.2f}{unit}" if unit == "s" else f"{v}{unit}"

    share = fig.get("online_share_during_spike")
    lines = [
        "",
        f"== scenario {'PASSED' if doc.get('ok') else 'FAILED'}"
        + (f": {doc.get('error')}" if doc.get("error") else ""),
        f"   offline placement (submit -> Running)       {f('placement_seconds')}",
        f"   CPU back to online after a spike             {f('cpu_recovery_seconds')}"
        f"   (online share then {100 * share:.1f}%, {fig.get('online_cores_during_spike')} core)"
        if share is not None
        else "",
        f"   spike -> node marked evicting                {f('eviction_mark_seconds')}",
        f"   spike -> first eviction / all offline gone   {f('first_eviction_seconds')} / {f('eviction_seconds')}",
        f"   load falls -> node cleared                   {f('evicting_clear_seconds')}",
        f"   load falls -> new offline pods Running       {f('readmission_seconds')}",
    ]
    for c in doc.get("checks") or []:
        lines.append(f"   {'PASS' if c['ok'] else 'FAIL'} {c['name']}")
    for n in doc.get("notes") or []:
        lines.append(f"   note: {n}")
    out.write("\n".join(line for line in lines if line) + "\n")


# --- podrunner ----------------------------------------------------------------------------------


def _hollow_spec(text: str, default_cpu: int, default_mem: int) -> tuple[str, int, int]:
    from tidemark.apis import canonical_amount

    name, _, rest = text.partition(":")
    cpu_s, _, mem_s = rest.partition(":")
    cpu = canonical_amount("cpu", cpu_s) if cpu_s else default_cpu
    mem = canonical_amount("memory", mem_s) if mem_s else default_mem
    if not name or cpu is None or mem is None:
        raise ValueError(f"bad --hollow-node {text!r} (NAME[:CPU[:MEMORY]])")
    return name, cpu, mem


def cmd_podrunner(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    import urllib3

    from localcluster.cgroups import KubeletCgroups
    from localcluster.podrunner import COMPONENT, NodeSpec, PodRunner, host_capacity
    from tidemark.kube.client import new_api_client
    from tidemark.kube.events import EventRecorder

    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda s, f: stop.set())
    signal.signal(signal.SIGINT, lambda s, f: stop.set())
    cpu, mem = host_capacity()
    alloc_cpu = args.allocatable_cpu or cpu
    alloc_mem = args.allocatable_memory or mem
    api = new_api_client(args.kubeconfig, user_agent=COMPONENT)
    recorder = EventRecorder(api, COMPONENT, host=args.node_name)
    cgroups = KubeletCgroups(
        args.cgroup_prefix, cgroup_root=args.cgroup_root, allocatable_cpu_milli=alloc_cpu, allocatable_memory=alloc_mem
    )
    runners = [
        PodRunner(
            api,
            NodeSpec(args.node_name, cpu, mem, alloc_cpu, alloc_mem),
            cgroups=cgroups,
            pods_dir=args.pods_dir,
            recorder=recorder,
        )
    ]
    for spec in args.hollow_node:
        name, hcpu, hmem = _hollow_spec(spec, 4000, 8 * 2**30)
        runners.append(
            PodRunner(
                api,
                NodeSpec(name, hcpu, hmem, hcpu, hmem, labels={"tidemark.io/hollow": "true"}),
                cgroups=None,
                pods_dir=os.path.join(args.pods_dir, name),
                hollow=True,
                recorder=recorder,
            )
        )
    status = 0
    started: list[PodRunner] = []
    try:
        for r in runners:
            r.start()
            started.append(r)
            log.info("serving node %s%s", r.node.name, " (hollow)" if r.hollow else "")
        if args.ready_file:
            Path(args.ready_file).write_text(f"{os.getpid()}\n")
        while not stop.wait(1.0):
            pass
    except Exception:
        log.exception("pod runner failed")
        status = 1
    finally:
        for r in reversed(started):
            left = r.stop()
            if left:
                log.error("cgroups left behind: %s", ", ".join(left))
                status = 1
        if not started:
            cgroups.teardown()
        recorder.stop(2.0)
        log.info("pod runner stopped")
    return status


def cmd_cleanup(args: argparse.Namespace) -> int:
    from localcluster.cgroups import sweep_stale

    swept = sweep_stale()
    print(f"swept {len(swept)} stale tree(s)" + (f": {', '.join(swept)}" if swept else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if args.command == "run":
        return cmd_run(args)
    if args.command == "podrunner":
        return cmd_podrunner(args)
    return cmd_cleanup(args)
