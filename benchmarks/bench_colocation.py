"""Colocation quality on the real node: an online service's tail latency beside offline work, three ways.

Tidemark exists for one result: offline work fills the capacity online pods requested and do not use,
and the online pods do not notice. This measures it on the real one-node cluster of `make run`
(localcluster.realnode: kubelet 1.20.2 + containerd, the project image, the shipped manifests), or with
TIDEMARK_NODE=v2 on the production-shaped node (localcluster.v2node: cgroup v2, systemd driver, in a VM; under
QEMU's TCG its figures carry that caveat), with the same online service, the same request rates and the same
offline jobs in every arm:

- online: nginx (Debian's nginx-light) in a Burstable pod (requests cpu 1, memory 256Mi; limit memory
  512Mi), serving a 64 KiB text file gzip-compressed on the fly (nginx's default level 1) with an access
  log on disk, driven from the HOST to the pod's IP by an open-loop generator (colocation_generator.py):
  requests leave on a fixed timetable whatever the answers do, and each latency counts from the request's
  INTENDED send time (no coordinated omission). Two load levels (`--load-levels`): the rates at which nginx
  uses a third and two thirds of its CPU request, calibrated (`--rate` skips it);
- offline, one kind at a time (stress-ng from Debian): `cpu` two pods of one matrixprod worker each;
  `memory` one pod holding an anonymous hog and streaming a sparse file through the page cache; `io` one pod
  writing buffered and one with O_DIRECT, both to an emptyDir on the disk nginx logs to;
- arms: `alone`; `kubelet_besteffort` and `kubelet_burstable` (Tidemark NOT installed); `tidemark` (as
  shipped; offline pods ask batch-* requests = limits sized to what the agent publishes); `tidemark_nolimits`
  (README's requests-only pods, the shipped config); `tidemark_s70` / `tidemark_s100` (the same pods, the agent's
  `tier.cpu.suppressRatio` at 0.70 / 1.00: with tidemark_nolimits the three suppress settings of the frontier);
  `tidemark_w10` / `tidemark_w25` / `tidemark_nowait` (online-wait targets 0.10 = shipped, 0.25, off),
  `tidemark_pcut` (`tier.cpu.cut: proportional`);
  optionally `tidemark_noqos` (`qos.enabled: false`) and `tidemark_alone` (Tidemark installed, shipped config, no
  offline pod: what its own processes cost the online p99, paired with `alone`) and `tidemark_open` (suppressRatio
  1.0, the wait feedback off: the tier's bound alone). Tidemark is uninstalled between
  halves of a round as a user would, and every kubelet cell checks the cgroup files for agent knobs;
- per cell: online p50/p99/p99.9, rate achieved and errors over the measured window; node CPU; offline work
  per second (stress-ng bogo ops); evictions, OOM kills and restarts; reclaim and disk figures; the load average.

Paired rounds (colocation_stats.py): each round runs every kind, arm and load level once; each cell's p99 is
divided by the same round's `alone` cell and its offline work by the same round's `kubelet_besteffort` cell (same
kind and level), and the median of those ratios gets a seeded bootstrap 95 % interval; intervals that overlap are
written "no difference". `--json` (benchmarks/results/colocation.json): the lower load level under `kinds`
(today's shape plus `p99_ratio_to_alone` and `work_ratio_to_besteffort`, each {median, lo, hi, n}), the higher
under `kinds_two_thirds`, the raw cells under `raw`. Plots: the bars (`--plot`) and the frontier (`--frontier`:
offline work ratio against p99 ratio, every arm, Tidemark's suppress settings joined). docs/benchmarks-colocation.md
has the method and the figures.

Run (root; the real node needs cgroup v1; exits 0 with the reason where the machine cannot run it):
  python benchmarks/bench_colocation.py [--quick] [--kinds cpu,memory,io] [--rounds 7] [--measure 30]
  TIDEMARK_NODE=v2 python benchmarks/bench_colocation.py --kinds memory,io
  make bench-colocation   (installs the bench extra, then the full run)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

# The parts, re-exported here for the unit tests and for readers who look for them in this file.
from colocation_generator import REQUEST, Generator, _generate, _read_response, generator_main  # noqa: E402
from colocation_node import Counters, NodeView, window_figures  # noqa: E402
from colocation_pods import (  # noqa: E402
    REQUESTS_ONLY_ARMS,
    Sizing,
    agent_yaml_for,
    arm_config,
    noqos_config,
    offline_jobs,
    offline_pods,
    offline_work,
    online_pod,
    parse_metrics_brief,
    parse_stress_yaml,
    podgroup,
    shipped_agent_config,
    suppress_config,
    tier_cpu_config,
)
from colocation_report import frontier_plot, frontier_points, markdown, plot, ratio_text, table  # noqa: E402
from colocation_stats import (  # noqa: E402
    ALL_ARMS,
    ARMS,
    EXTRA_ARMS,
    FIELDS,
    FRONTIER_LINE,
    KINDS,
    LOAD_LEVELS,
    MORE_FIELDS,
    NO_DIFFERENCE,
    SUPPRESS_ARMS,
    TIDEMARK_ARMS,
    WAIT_ARMS,
    bootstrap_median,
    compare,
    fit_rate,
    goals,
    latency_summary,
    level_key,
    median_range,
    paired_ratios,
    percentile,
    summarize,
)

__all__ = [
    "ALL_ARMS", "ARMS", "EXTRA_ARMS", "FIELDS", "FRONTIER_LINE", "KINDS", "LOAD_LEVELS", "MORE_FIELDS",
    "NO_DIFFERENCE", "REQUEST", "REQUESTS_ONLY_ARMS", "SUPPRESS_ARMS", "TIDEMARK_ARMS", "WAIT_ARMS", "Counters",
    "Generator",
    "NodeView", "Sizing", "_generate", "_read_response", "agent_yaml_for", "arm_config", "bootstrap_median",
    "compare", "fit_rate", "frontier_plot", "frontier_points", "generator_main", "goals", "latency_summary",
    "level_key", "markdown", "median_range", "noqos_config", "offline_jobs", "offline_pods", "offline_work",
    "online_pod", "paired_ratios", "parse_metrics_brief", "parse_stress_yaml", "percentile", "plot", "podgroup",
    "ratio_text", "schedule", "shipped_agent_config", "summarize", "suppress_config", "table", "tier_cpu_config",
    "window_figures",
]

#: the arms of a full run and of --quick (tidemark_noqos only when asked: what the QoS knobs contribute)
FULL_ARMS = ("alone", "kubelet_besteffort", "kubelet_burstable", "tidemark", "tidemark_nolimits", *SUPPRESS_ARMS)
QUICK_ARMS = ("alone", "kubelet_besteffort", "tidemark_s70", "tidemark_nolimits", "tidemark_s100")


def _rotate(xs: list[str], r: int) -> list[str]:
    return xs[r % len(xs):] + xs[: r % len(xs)] if xs else xs


def schedule(kinds: list[str], arms: list[str], rounds: int, first_on: bool = False,
             loads: tuple[str, ...] | list[str] = ("third",),
             kinds_by_load: dict[str, list[str]] | None = None) -> list[tuple[int, str, str, str]]:
    """(round, kind, arm, load level) in run order: each round runs every kind, arm and load level once (a
    level's kinds: `kinds_by_load`, default all); Tidemark's arms form one half of the round and the others the
    other half, the halves alternating (Tidemark's first in round 0 when `first_on`), so one install or
    uninstall happens per round; inside Tidemark's half the arms are grouped by agent config (one agent restart
    per group), the groups' order reversed every other round; inside a half the kinds, arms and levels rotate
    with the round."""
    configs: dict[str, list[str]] = {}
    for a in arms:
        if a in TIDEMARK_ARMS:
            configs.setdefault(arm_config(a), []).append(a)
    off = [a for a in arms if a not in TIDEMARK_ARMS]
    by_load = kinds_by_load or {}
    out: list[tuple[int, str, str, str]] = []
    for r in range(rounds):
        groups = list(configs.values()) if r % 2 == 0 else list(configs.values())[::-1]
        on = [a for g in groups for a in _rotate(g, r)]
        halves = [on, _rotate(off, r)] if (r % 2 == 0) == first_on else [_rotate(off, r), on]
        pairs = [(k, lv) for lv in _rotate(list(loads), r) for k in _rotate(kinds, r)
                 if k in by_load.get(lv, kinds)]
        for half in halves:
            for arm in half:
                out.extend((r, k, arm, lv) for k, lv in pairs)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--arms", default="", help=f"of {', '.join(ALL_ARMS)}; default {', '.join(FULL_ARMS)} "
                                               f"(--quick: {', '.join(QUICK_ARMS)})")
    ap.add_argument("--load-levels", default=",".join(LOAD_LEVELS),
                    help="the online load levels, of " + ", ".join(f"{k} ({v:.2f} of the CPU request)"
                                                              for k, v in LOAD_LEVELS.items()))
    ap.add_argument("--kinds-two-thirds", default=None,
                    help="the kinds run at the higher load level, default --kinds (--quick: cpu)")
    ap.add_argument("--rounds", type=int, default=None, help="default 7 (--quick: 2)")
    ap.add_argument("--measure", type=float, default=None, help="seconds measured per cell, default 30 (--quick: 8)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds after the offline pods run, default 10 (--quick: 4)")
    ap.add_argument("--rate", default="",
                    help="requests/s of the lower level (the others scaled by their fraction), or one per level "
                         "(comma-separated); empty = calibrate")
    ap.add_argument("--fill-timeout", type=float, default=None,
                    help="memory kind: at most this long for the hog to fill before the warm-up, "
                         "default 90 (--quick: 45)")
    ap.add_argument("--quick", action="store_true",
                    help="every code path in about 15 minutes: 2 rounds, short windows, the frontier's arms")
    ap.add_argument("--delayacct", action=argparse.BooleanOptionalAction, default=False,
                    help="on the real (cgroup v1) node, kernel.task_delayacct=1 for the run (the I/O controller's "
                    "per-pod signal, docs/agent.md), put back after (default off: the node as found)")
    ap.add_argument("--access-log", choices=("file", "off"), default="file",
                    help="nginx's access log: a file on the node's disk, a write() per request (default: every kind "
                         "reaches nginx through the path it takes), or off (the log's writes meet the control "
                         "plane's fsyncs in ext4's journal; for a cpu-only run)")
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    ap.add_argument("--json", default="")
    ap.add_argument("--plot", default="")
    ap.add_argument("--frontier", default="")
    ap.add_argument("--markdown", default="", help="also write the table as markdown to this file")
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/tidemark-colocation"))
    ap.add_argument("--lock-wait", type=float, default=900.0)
    ap.add_argument("--agent-config", default="",
                    help="an agent.yaml for the tidemark arms instead of the shipped ConfigMap's (say why)")
    ap.add_argument("--attach", type=Path, default=None,
                    help="use the real node already up in this run dir (python -m localcluster.realnode up DIR: "
                         "development; it stays up afterwards)")
    ap.add_argument("--generate", help=argparse.SUPPRESS)
    ap.add_argument("--records", help=argparse.SUPPRESS)
    ap.add_argument("--max-conns", type=int, default=64, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def settle_args(args: argparse.Namespace) -> str:
    """The defaults that depend on --quick and on the node; returns a usage error or ''."""
    v2 = os.environ.get("TIDEMARK_NODE", "") == "v2"
    args.node_kind = "v2" if v2 else "v1"
    args.rounds = args.rounds or (2 if args.quick else 7)
    args.measure = args.measure or (8.0 if args.quick else 30.0)
    args.warmup = args.warmup if args.warmup is not None else (4.0 if args.quick else 10.0)
    args.fill_timeout = args.fill_timeout if args.fill_timeout is not None else (45.0 if args.quick else 90.0)
    args.kind_list = [k for k in args.kinds.split(",") if k]
    args.arm_list = [a for a in args.arms.split(",") if a] or list(QUICK_ARMS if args.quick else FULL_ARMS)
    args.loads = [lv for lv in args.load_levels.split(",") if lv]
    two = args.kinds_two_thirds if args.kinds_two_thirds is not None else ("cpu" if args.quick else args.kinds)
    args.kinds_by_load = {"two_thirds": [k for k in two.split(",") if k in args.kind_list]}
    stem = "colocation-v2" if v2 else "colocation"
    res = REPO / "benchmarks" / "results"
    args.json = args.json or str(res / f"{stem}.json")
    args.plot = args.plot or str(res / f"{stem}.png")
    args.frontier = args.frontier or str(res / f"{stem}-frontier.png")
    bad = ([k for k in args.kind_list if k not in KINDS] + [a for a in args.arm_list if a not in ALL_ARMS]
           + [lv for lv in args.loads if lv not in LOAD_LEVELS])
    if bad:
        return f"unknown kind, arm or load level: {', '.join(bad)}"
    if args.rounds < 2:
        return "--rounds must be at least 2 (a paired interval needs two rounds)"
    return ""


def rates_from(arg: str, loads: list[str]) -> dict[str, float]:
    """--rate: one rate per level, or the lower level's scaled by the levels' fractions."""
    given = [float(x) for x in arg.split(",") if x]
    if len(given) == len(loads):
        return dict(zip(loads, given, strict=True))
    base = given[0] / LOAD_LEVELS[loads[0]]
    return {lv: round(base * LOAD_LEVELS[lv] / 10.0) * 10.0 for lv in loads}


def bring_up(args: argparse.Namespace, say: Any) -> Any:
    """The node: attached (--attach), or brought up (the real node, or the v2 node with TIDEMARK_NODE=v2); None
    with the reason printed where the machine cannot run it."""
    sys.path.insert(0, str(REPO))
    from localcluster.realnode import STATE_PATH, RealNode, Unsupported, cache_bin, host_is_supported

    if args.node_kind == "v2":
        from localcluster.v2node import V2Node
        from localcluster.v2node import host_is_supported as v2_supported

        reason = v2_supported()
        node: Any = V2Node(run_dir=args.run_dir / "v2node", log=lambda s: say(f"v2node: {s}"))
    else:
        reason = host_is_supported()
        node = RealNode(run_dir=args.run_dir / "node", log=lambda s: say(f"realnode: {s}"))
    if reason:
        print(f"bench_colocation: skipped: {reason}")
        return None
    if args.attach:
        node = RealNode(run_dir=args.attach.resolve(), log=lambda s: say(f"realnode: {s}"))
        node.bins = {b: str(cache_bin() / b) for b in ("kubectl", "kubelet", "kube-apiserver")}
        with contextlib.suppress(OSError, ValueError):  # its pids: the waits check that kubelet still runs
            node.pids = dict(json.loads(STATE_PATH.read_text()).get("pids") or {})
        say(f"attached to the real node in {args.attach}")
        return node
    try:
        node.up(lock_wait=args.lock_wait)
    except Unsupported as e:
        print(f"bench_colocation: skipped: {e}")
        return None
    say(f"{args.node_kind} node up in {node.timings.get('up', 0):.0f} s (Tidemark applied as shipped)")
    return node


def run_cells(colo: Any, args: argparse.Namespace, say: Any, cells: list[dict[str, Any]],
              loads: list[float]) -> None:
    """Calibration, then every cell of the schedule; appends to `cells` as it goes (an error keeps them)."""
    colo.setup()  # leaves Tidemark uninstalled: the calibration is the online pod alone on the node
    if args.rate:
        colo.rates = rates_from(args.rate, args.loads)
    else:
        rates = [100.0, 300.0, 500.0] if args.quick else [100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
        colo.rates = colo.calibrate(rates, 4.0 if args.quick else 8.0, args.loads)
    for lv in args.loads:
        colo.measure_idle(lv)
    plan = schedule(args.kind_list, args.arm_list, args.rounds, first_on=False, loads=args.loads,
                    kinds_by_load=args.kinds_by_load)
    say(f"{len(plan)} cells: kinds {args.kind_list}, arms {args.arm_list}, load levels {colo.rates}, "
        f"{args.rounds} round(s), warm-up {args.warmup:.0f} s, measured {args.measure:.0f} s each")
    for i, (rnd, kind, arm, lv) in enumerate(plan):
        rec = colo.cell(kind, arm, rnd, lv)
        cells.append(rec)
        loads.append(rec["load_1m_start"])
        say(f"cell {i + 1}/{len(plan)} round {rnd} {kind:<6} {lv:<10} {arm:<19} p50 {rec['online_p50_ms']} p99 "
            f"{rec['online_p99_ms']} p99.9 {rec['online_p999_ms']} ms, {rec['online_rps']:.0f} req/s, "
            f"err {rec['online_errors']}, node CPU {rec['node_cpu_util']:.0%}, offline "
            f"{rec['offline_work_per_s']} ops/s ({rec['offline_pods_running']} pods, evicted "
            f"{rec['offline_evictions']}), knobs {rec['agent_knobs_found']}, load {rec['load_1m_start']:.1f}"
            f"->{rec['load_1m_end']:.1f}")


def node_caveat(node_kind: str) -> str:
    if node_kind == "v2":
        return ("v2 node (cgroup v2, systemd driver) in a QEMU VM under TCG (software emulation, about ten times "
                "slower than the host): compare arms within this run, not with the real node's figures")
    return "real node (cgroup v1, cgroupfs driver)"


def report(cells: list[dict[str, Any]], loads: list[float], colo: Any, args: argparse.Namespace,
           failed: str) -> None:
    """The summary printed (table, goals) and written (JSON, markdown, the two plots)."""
    summary = summarize(cells, loads, seed=args.seed)
    commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True,
                            text=True, check=False).stdout.strip()
    summary.update(rates=colo.rates, rate=colo.rates.get(args.loads[0], 0.0), calibration=colo.calibration,
                   idle_busy_cores={k: round(v, 3) for k, v in colo.idle_busy.items()},
                   measure_s=args.measure, warmup_s=args.warmup, cores=colo.cores, image=colo.image,
                   node=node_caveat(args.node_kind), task_delayacct=getattr(args, "task_delayacct", None),
                   agent_config=args.agent_config or "shipped (daemonset/agent/configmap.yaml)", commit=commit,
                   date=time.strftime("%Y-%m-%d %H:%M:%S %z"), command=" ".join(sys.argv), error=failed or None)
    print(table(summary))
    print("goals:")
    for goal, met, detail in goals(summary):
        print(f"  [{'met' if met else 'NOT met' if met is not None else '-'}] {goal}: {detail}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown(summary) + "\n")
    plotted = plot(summary, Path(args.plot)) and frontier_plot(summary, Path(args.frontier))
    print(f"results: {args.json}" + (f", plots {args.plot} {args.frontier}" if plotted else ""))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.generate:
        return generator_main(args.generate, float(args.rate), args.records, args.max_conns)
    error = settle_args(args)
    if error:
        print(error, file=sys.stderr)
        return 2
    t_start = time.monotonic()

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # killed: tear the node down as on Ctrl-C
    signal.signal(signal.SIGHUP, on_term)

    def say(s: str) -> None:
        print(f"[{time.monotonic() - t_start:6.0f} s] {s}", flush=True)

    args.run_dir.mkdir(parents=True, exist_ok=True)
    node = bring_up(args, say)
    if node is None:
        return 0
    from colocation_cluster import Colocation

    colo = Colocation(node=node, args=args, say=say)
    failed = ""
    cells: list[dict[str, Any]] = []
    loads: list[float] = []
    delayacct = Path("/proc/sys/kernel/task_delayacct")
    found = delayacct.read_text().strip() if args.node_kind == "v1" and delayacct.exists() else None
    args.task_delayacct = found
    try:
        if found is not None and args.delayacct:
            delayacct.write_text("1")
            args.task_delayacct = "1"
            say(f"kernel.task_delayacct 1 for the run (was {found}): the I/O controller's v1 per-pod signal")
        run_cells(colo, args, say, cells, loads)
    except KeyboardInterrupt:
        say("interrupted: tearing down")
        failed = "interrupted"
    except Exception as e:  # the cells so far are still reported
        traceback.print_exc()
        say(f"stopped by an error: {e!r}; tearing down")
        failed = repr(e)
    finally:
        if found is not None:
            delayacct.write_text(found)
        if args.attach:
            colo.cleanup_all()
        else:
            problems = node.down()
            say(f"{args.node_kind} node down{': left ' + ', '.join(problems) if problems else ', clean'}")
        with contextlib.suppress(Exception):
            if colo.view is not None and args.node_kind == "v1":
                colo.view.ctl_remove()
        shutil.rmtree(args.run_dir / "ctl", ignore_errors=True)
    if not cells:
        return 1
    report(cells, loads, colo, args, failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
