"""`python -m localcluster`: `make run`, a real one-node Kubernetes on this machine with the scenario and its live view.

    python -m localcluster run [--once] [--run-dir DIR] [--lock-wait S]   up, scenario, live view, down
    python -m localcluster down                                            tear down what a killed run left

`run` brings the real node up (localcluster/realnode.py: etcd + kube-apiserver, kube-controller-manager,
kube-scheduler, containerd, kubelet 1.20.2, Tidemark's image and `daemonset/` through the local
overlay), plays the scenario (localcluster/realscenario.py) under the live view (localcluster/view.py)
and tears everything down. In a terminal the view is redrawn twice a second and stays up after the
scenario until Ctrl-C; without one (or with --once) the scenario runs once, the view prints what
changes line by line and its last frame at the end, and the exit status is the verdict.

Exit codes: 0 the scenario passed and the teardown left nothing behind, 1 a step failed or something
was left behind, 2 bad usage, 3 this machine cannot run it (not root, no cgroup v1, another real-node
cluster holds the lock): `hack/run.sh` then falls back to `tidemark-scheduler simulate` +
`tidemark-agent plan`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Final, TextIO

from localcluster import realscenario
from localcluster.cluster import LocalCluster, local_agent_config
from localcluster.host import Unsupported
from localcluster.realnode import STATE_PATH, RealNode, host_is_supported, teardown_state
from localcluster.view import LiveView
from localcluster.watch import ClusterWatch

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNSUPPORTED: Final = 3  # as localcluster.byhand.EXIT_UNSUPPORTED: hack/run.sh falls back


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m localcluster", description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the real node, the scenario and the live view (make run)")
    r.add_argument("--once", action="store_true", help="play the scenario once and exit, even in a terminal")
    r.add_argument("--run-dir", type=Path, help="logs and kubeconfigs (default /tmp/tidemark-realnode/run-<time>)")
    r.add_argument(
        "--lock-wait",
        type=float,
        default=0.0,
        help="seconds to wait while another real-node cluster holds the machine's lock (default: none)",
    )
    sub.add_parser("down", help="tear down what a killed run left behind (processes, mounts, cgroups, bridge)")
    return p


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def node_kind() -> str:
    """`TIDEMARK_NODE`: `v1` (default; this machine's own kubelet, cgroup v1, cgroupfs) or `v2` (a VM: cgroup v2,
    systemd as PID 1, kubelet's systemd driver; localcluster/v2node.py)."""
    return os.environ.get("TIDEMARK_NODE", "v1").strip().lower() or "v1"


def play(node: LocalCluster, *, tty: bool, out: TextIO, hold: bool = False) -> realscenario.Figures:
    """The scenario on a running node under the live view; its figures (also what a test calls).

    With `hold` (a terminal) the view stays up after the scenario until KeyboardInterrupt."""
    import urllib3

    from tidemark.kube.client import new_api_client

    # The local cluster's kubeconfig skips TLS verification (a throwaway CA on the machine's own bridge).
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    api = new_api_client(str(node.kubeconfig), user_agent="tidemark-live-view")
    watch = ClusterWatch(api, node.node_name, events_log=node.run_dir / "events.log").start()
    view = LiveView(watch, node.node_name, realscenario.NS, tty=tty, out=out, measure=node.measure())
    node.log = view.say
    view.start()
    fig: realscenario.Figures | None = None
    printed = False

    def done(f: realscenario.Figures) -> None:
        """The scenario's last step is over, its pods still there: the verdict on screen, the frame printed."""
        nonlocal printed
        view.phase("scenario PASSED" if f.passed else "scenario FAILED: " + "; ".join(f.failures))
        if tty:
            view.footer = (*f.table().splitlines(), *(("Ctrl-C: tear everything down",) if hold else ()))
        else:
            out.write("\n== the live view's last frame (the trends cover the last minute)\n")
            out.write(view.frame(color=False) + "\n\n")
            out.flush()
            printed = True

    try:
        fig = realscenario.run(node, say=view.say, phase=view.phase, on_done=done)
        if hold:
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    finally:
        view.stop()
        watch.stop()
        with contextlib.suppress(Exception):
            api.close()  # type: ignore[no-untyped-call,unused-ignore]
        if not tty and not printed:
            out.write("\n== the live view's last frame (the trends cover the last minute)\n")
            out.write(view.frame(color=False) + "\n")
            out.flush()
    return fig


def cmd_run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    tty = out.isatty() and not args.once
    t_start = time.monotonic()

    def say(text: str) -> None:
        out.write(f"{time.monotonic() - t_start:6.1f}s {text}\n")
        out.flush()

    kind = node_kind()
    if kind not in ("v1", "v2"):
        say(f"TIDEMARK_NODE={kind}: unknown node (v1: this machine's kubelet, v2: a cgroup v2 + systemd VM)")
        return EXIT_USAGE
    if kind == "v2":
        from localcluster import v2node

        reason = v2node.host_is_supported()
    else:
        reason = host_is_supported()
    if reason:
        say(f"this machine cannot run the real node: {reason}")
        return EXIT_UNSUPPORTED
    run_dir = args.run_dir or Path("/tmp/tidemark-realnode") / f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    node: LocalCluster
    if kind == "v2":
        node = v2node.V2Node(run_dir=run_dir, log=say, agent_config=local_agent_config())
        where = "kubelet + containerd in a QEMU VM with systemd as PID 1 (TCG: timings about ten times slower)"
    else:
        node = RealNode(run_dir=run_dir, log=say, agent_config=local_agent_config())
        where = "kubelet + containerd on this machine"
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)  # a background job starts with SIGINT ignored
    say(f"the real node: {node.DESCRIPTION} ({where})")
    say(f"bringing the real node up (logs in {run_dir})")
    try:
        node.up(lock_wait=args.lock_wait)
    except Unsupported as e:
        say(f"this machine cannot run the real node: {e}")
        return EXIT_UNSUPPORTED
    except KeyboardInterrupt:
        say("interrupted while coming up; torn down")
        return EXIT_FAILED
    except Exception as e:  # the node tore itself down; the reason is the message
        say(f"the real node did not come up: {e}")
        return EXIT_FAILED
    up = {k: round(v, 1) for k, v in node.timings.items()}
    say(f"up in {node.timings.get('up', 0):.1f} s: {json.dumps(up)}; KUBECONFIG={node.kubeconfig}")
    fig: realscenario.Figures | None = None
    try:
        fig = play(node, tty=tty, out=out, hold=tty)
    except KeyboardInterrupt:
        pass
    except Exception as e:
        say(f"the scenario stopped: {type(e).__name__}: {e}")
    finally:
        node.log = say
        signal.signal(signal.SIGINT, lambda s, f: out.write("   (tearing down, please wait)\n"))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        t0 = time.monotonic()
        problems = node.down()
        say(f"down in {time.monotonic() - t0:.1f} s: " + (f"LEFT {', '.join(problems)}" if problems else "clean"))
    if fig is None:
        return EXIT_FAILED
    out.write(f"\n== the scenario on the real node ({node.DESCRIPTION}), measured\n" + fig.table() + "\n")
    out.flush()
    return EXIT_OK if fig.passed and not problems else EXIT_FAILED


def cmd_down() -> int:
    from localcluster import v2node

    problems: list[str] = []
    if STATE_PATH.exists():
        problems += teardown_state(json.loads(STATE_PATH.read_text() or "{}"), print)
        STATE_PATH.unlink(missing_ok=True)
    if v2node.STATE_PATH.exists():
        problems += v2node.teardown_state(json.loads(v2node.STATE_PATH.read_text() or "{}"), print)
        v2node.STATE_PATH.unlink(missing_ok=True)
    return EXIT_FAILED if problems else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and EXIT_USAGE
    if args.command == "down":
        return cmd_down()
    return cmd_run(args)
