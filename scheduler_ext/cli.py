"""tidemark-scheduler: `simulate` a scheduling run over a cluster file, `run` against a cluster, `webhook` (admission).

Exit codes: 0 ok, 1 runtime failure, 2 bad usage, conf or input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from datetime import datetime

from scheduler_ext.vcflags import add_run_flags
from tidemark.apis import DEFAULT_SCHEDULER_NAME
from tidemark.buildinfo import version_line

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

log = logging.getLogger("scheduler_ext")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {"ts": record.created, "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        )


def _setup_logging(fmt: str, verbosity: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG)


def _parse_now(text: str | None) -> float:
    if not text:
        return time.time()
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    dt = datetime.fromisoformat(t)
    if dt.tzinfo is None:
        raise ValueError("--now needs a timezone (RFC3339, e.g. 2024-01-01T00:00:00Z)")
    return dt.timestamp()


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidemark-scheduler", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=version_line("tidemark-scheduler"))
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("simulate", help="run scheduling cycles over an OBJECTS.yaml and print the decisions")
    s.add_argument("--conf", "--scheduler-conf", dest="conf", required=True, help="volcano-scheduler.conf")
    s.add_argument("--cluster", required=True, help="OBJECTS.yaml: Nodes, Pods, PodGroups, Queues, ...")
    s.add_argument("--cycles", type=int, default=1, help="scheduling cycles to run (default 1)")
    s.add_argument("--now", help="the current time, RFC3339 (default: now)")
    s.add_argument("-o", "--output", choices=("json", "yaml", "table"), default="json")
    s.add_argument("--scheduler-name", default=DEFAULT_SCHEDULER_NAME, help="pods with this schedulerName are ours")
    s.add_argument("--percentage-nodes-to-find", type=int, default=100,
                   help="stop the predicate search after this share of nodes (100: all; 0: Volcano's adaptive)")
    s.add_argument("--minimum-feasible-nodes", type=int, default=100)
    s.add_argument("--minimum-percentage-nodes-to-find", type=int, default=5)
    s.add_argument("--log-format", choices=("text", "json"), default="text")
    s.add_argument("-v", "--verbose", action="count", default=0)

    r = sub.add_parser("run", help="schedule a live cluster (scheduler_ext/run/)", allow_abbrev=False,
                       description="Accepts every flag of Volcano's vc-scheduler as well (scheduler_ext/vcflags.py).")
    r.add_argument("--kubeconfig", help="default: in-cluster, else $KUBECONFIG or ~/.kube/config")
    r.add_argument("--scheduler-conf", help="volcano-scheduler.conf, re-read every period (default: built-in)")
    r.add_argument("--scheduler-name", action="append", default=None,
                   help=f"pods with this schedulerName are ours (default {DEFAULT_SCHEDULER_NAME})")
    r.add_argument("--schedule-period", default="1s", help="Go duration between sessions (default 1s)")
    r.add_argument("--listen-address", default=":8080", help="HOST:PORT for /metrics /healthz /readyz")
    r.add_argument("--leader-elect", nargs="?", const="true", default="false", help="true|false (default false)")
    r.add_argument("--lock-object-namespace", default="kube-system")
    r.add_argument("--leader-elect-lease-duration", help="Go duration (default 15s)")
    r.add_argument("--leader-elect-renew-deadline", help="Go duration (default 10s)")
    r.add_argument("--leader-elect-retry-period", help="Go duration (default 2s)")
    r.add_argument("--kube-api-qps", type=float, default=2000)
    r.add_argument("--kube-api-burst", type=int, default=2000)
    r.add_argument("--percentage-nodes-to-find", type=int, default=100,
                   help="stop the predicate search after this share of nodes (100: all; 0: Volcano's adaptive)")
    r.add_argument("--minimum-feasible-nodes", type=int, default=100)
    r.add_argument("--minimum-percentage-nodes-to-find", type=int, default=5)
    r.add_argument("--log-format", choices=("text", "json"), default="text")
    add_run_flags(r)  # -v/--v and vc-scheduler's other flags
    from scheduler_ext.webhook.server import add_parser as add_webhook_parser

    add_webhook_parser(sub)
    return p


def _simulate(ns: argparse.Namespace) -> int:
    from scheduler_ext.actions.registry import ACTIONS
    from scheduler_ext.cache.file_source import SourceError, load_objects
    from scheduler_ext.framework.conf import ConfError, load_conf
    from scheduler_ext.framework.session import SessionOptions
    from scheduler_ext.model.snapshot import SnapshotError
    from scheduler_ext.plugins.registry import PLUGINS
    from scheduler_ext.simulate import simulate

    if ns.cycles < 1:
        print("tidemark-scheduler: --cycles must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        now = _parse_now(ns.now)
    except ValueError as e:
        print(f"tidemark-scheduler: bad --now: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        conf, warnings = load_conf(ns.conf, ACTIONS, PLUGINS)
    except ConfError as e:
        for problem in e.problems:
            if problem.severity == "warning":
                log.warning("conf: %s", problem)
        print(f"tidemark-scheduler: {ns.conf}: {e}", file=sys.stderr)
        return EXIT_USAGE
    for w in warnings:
        log.warning("conf: %s", w)
    try:
        objects = load_objects(ns.cluster)
    except SourceError as e:
        print(f"tidemark-scheduler: {e}", file=sys.stderr)
        return EXIT_USAGE
    options = SessionOptions(
        percentage_of_nodes_to_find=ns.percentage_nodes_to_find,
        min_nodes_to_find=ns.minimum_feasible_nodes,
        min_percentage_of_nodes_to_find=ns.minimum_percentage_nodes_to_find,
    )
    try:
        result = simulate(
            objects,
            conf,
            ACTIONS,
            PLUGINS,
            cycles=ns.cycles,
            now=now,
            scheduler_name=ns.scheduler_name,
            options=options,
        )
    except SnapshotError as e:
        print(f"tidemark-scheduler: {ns.cluster}: {e}", file=sys.stderr)
        return EXIT_USAGE
    for line in result.warnings:
        log.warning("cluster: %s", line)
    for line in result.profile_lines if ns.output != "table" else ():  # the table shows them
        print(f"colocation profile: {line}", file=sys.stderr)
    if ns.output == "json":
        sys.stdout.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
    elif ns.output == "yaml":
        import yaml  # only for -o yaml

        sys.stdout.write(yaml.safe_dump(result.to_json(), sort_keys=True))
    else:
        sys.stdout.write(result.to_table() + "\n")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    if ns.command == "run":
        from scheduler_ext.run import run_command

        return run_command(ns)
    if ns.command == "webhook":
        from scheduler_ext.webhook.server import webhook_command

        return webhook_command(ns)
    _setup_logging(ns.log_format, ns.verbose)
    try:
        return _simulate(ns)
    except KeyboardInterrupt:
        return EXIT_FAILURE
    except Exception as e:
        log.debug("simulate failed", exc_info=True)
        print(f"tidemark-scheduler: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
