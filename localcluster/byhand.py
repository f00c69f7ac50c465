"""`python -m localcluster.realnode|v2node up|scenario|down DIR`: a local cluster by hand (debugging).

The real node and the v2 node share this command: `up` keeps the cluster up until Ctrl-C (or SIGTERM) and then
tears it down; `scenario` runs the colocation scenario on it (localcluster/realscenario.py) and prints its
figures; `down` tears down what a killed run left, from its state record; `check` (the real node) says whether
this machine can run it. Exit 0 when all went well and the teardown left nothing, 3 when the machine cannot
run the node (hack/run.sh falls back), 2 for bad arguments, else 1.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from localcluster import realscenario
from localcluster.cluster import LocalCluster
from localcluster.host import Unsupported

EXIT_UNSUPPORTED: Final = 3
Log = Callable[[str], None]


@dataclass(frozen=True)
class Kind:
    """One kind of local cluster, as its command runs it."""

    prog: str  # the module after `python -m localcluster.`
    make: Callable[[Path, Log], LocalCluster]  # the cluster in a run directory, logging through the callable
    default_dir: str
    state: Path  # the state record a killed run leaves
    teardown: Callable[[dict[str, Any], Log], list[str]]  # undo a run from its state record
    check: Callable[[], str] | None = None  # '' when this machine can run the node, else why (`check`)


def main(kind: Kind, argv: list[str]) -> int:
    verbs = ("up", "scenario", "down", *(("check",) if kind.check else ()))
    if not argv or argv[0] not in verbs:
        usage = " | ".join(f"{v} DIR" if v in ("up", "scenario") else v for v in verbs)
        print(f"usage: python -m localcluster.{kind.prog} {usage}", file=sys.stderr)
        return 2

    def say(s: str) -> None:
        print(f"{kind.prog}: {s}", file=sys.stderr, flush=True)

    if argv[0] == "check" and kind.check is not None:
        reason = kind.check()
        print(reason or "ok")
        return EXIT_UNSUPPORTED if reason else 0
    if argv[0] == "down":
        if not kind.state.exists():
            return 0
        problems = kind.teardown(json.loads(kind.state.read_text() or "{}"), say)
        kind.state.unlink(missing_ok=True)
        return 1 if problems else 0
    return _run_node(kind.make(Path(argv[1] if len(argv) > 1 else kind.default_dir), say), argv[0], say)


def _run_node(node: LocalCluster, verb: str, say: Log) -> int:
    """`up` or `scenario` on `node`, then its teardown, whatever happened (Ctrl-C and SIGTERM included)."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)  # a background job starts with SIGINT ignored
    try:
        node.up()
    except Unsupported as e:
        say(str(e))
        return EXIT_UNSUPPORTED
    say(f"up: {json.dumps({k: round(v, 1) for k, v in node.timings.items()})}")
    rc = 1
    try:
        if verb == "scenario":
            fig = realscenario.run(node, say)
            print(fig.table(), flush=True)
            rc = 0 if fig.passed else 1
        else:
            say(f"KUBECONFIG={node.kubeconfig}; press Ctrl-C to tear down")
            rc = 0
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        t0 = time.monotonic()
        problems = node.down()
        say(f"down in {time.monotonic() - t0:.1f} s{'; left: ' + ', '.join(problems) if problems else ', clean'}")
    return 1 if problems else rc
