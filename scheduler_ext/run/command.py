"""`tidemark-scheduler run`: flags -> RunOptions -> a Scheduler, until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any, Final

from scheduler_ext.framework.conf import ConfError
from scheduler_ext.run.client import warn_if_insecure
from scheduler_ext.run.options import options_from_args
from scheduler_ext.run.scheduler import Scheduler
from scheduler_ext.vcflags import run_verbosity
from tidemark.kube.client import KubeError

log = logging.getLogger(__name__)

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2


def run_command(ns: argparse.Namespace) -> int:
    """`tidemark-scheduler run`: exit 0 after SIGTERM/SIGINT, 2 on bad flags or conf, 1 on other failures."""
    from tidemark.logs import setup_logging

    try:
        options = options_from_args(ns)
    except ValueError as exc:
        print(f"tidemark-scheduler run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    verbose = run_verbosity(ns)  # a bare -v counts; klog's -v=N (Volcano's Deployment: 3) maps onto it
    setup_logging(ns.log_format, logging.DEBUG if verbose >= 1 else logging.INFO)
    if verbose < 2:  # run_session's per-action lines: the session line carries them
        logging.getLogger("scheduler_ext.simulate").setLevel(logging.WARNING)
    for line in options.flag_warnings:
        log.warning("%s", line)
    try:
        scheduler = Scheduler(options)
    except KubeError as exc:
        print(f"tidemark-scheduler run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    warn_if_insecure(scheduler.api)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            scheduler.start()
        except ConfError as exc:
            print(f"tidemark-scheduler run: {scheduler.conf_source.name}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except OSError as exc:
            print(f"tidemark-scheduler run: {exc}", file=sys.stderr)
            return EXIT_USAGE if isinstance(exc, FileNotFoundError) else EXIT_FAILURE
        log.info(
            "tidemark-scheduler running: name %s, period %.3fs, leader election %s, serving on %s",
            options.scheduler_name,
            options.schedule_period,
            "on" if options.leader_elect else "off",
            scheduler.server.address,
        )
        while not stop.wait(0.5):
            if scheduler.wait(0):
                break
        scheduler.stop()
        return EXIT_OK
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
