"""`tidemark-scheduler run`: schedule a live cluster in place of Volcano's scheduler.

The rooms (each module's docstring has the details):
- `options`: RunOptions (Volcano's flag names) and the flag parsing;
- `command`: `run_command`, the process: signals, exit codes (0 ok, 1 failure, 2 bad flags or conf);
- `scheduler`: the Scheduler object and its loop (snapshot -> session -> plan -> executor, the
  executor being the only side effect, the `default` Queue's creation included);
- `conf_source`: the conf file (or the built-in default) and its hot reload;
- `leader`: leader election and the executor's fence;
- `health`: /healthz, /readyz and /metrics on `--listen-address`;
- `client`: the API client, with the patch of its per-request credential refresh (and why);
- `observe`: the metrics of a session and the plugin hook timings.
The names below are the package's front door (tests and the CLI use them).
"""

from __future__ import annotations

from scheduler_ext.run.command import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, run_command
from scheduler_ext.run.conf_source import ConfSource, LoadedConf, default_conf_text
from scheduler_ext.run.options import RunOptions, options_from_args, parse_go_bool, parse_go_duration
from scheduler_ext.run.scheduler import Scheduler

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "ConfSource",
    "LoadedConf",
    "RunOptions",
    "Scheduler",
    "default_conf_text",
    "options_from_args",
    "parse_go_bool",
    "parse_go_duration",
    "run_command",
]
