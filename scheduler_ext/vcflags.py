"""Volcano's vc-scheduler command line, accepted by `tidemark-scheduler run` (docs/design.md, "Drop-in for
vc-scheduler").

Every flag of Volcano's cmd/scheduler/app/options/options.go, the leader-election flags it binds
(component-base) and klog's flags (`-v`, `--logtostderr`, ...) parse here, so a vc-scheduler
Deployment runs unchanged with Tidemark's image. What means something here is honoured; the rest is
accepted with one warning line each (`warnings`). klog and pflag spell words with `_` or `-`
alike, so both spellings are accepted. Volcano's chart passes a literal `2>&1` (Kubernetes does not
run a shell): stray positional words are accepted with a warning, as pflag ignores them.

Honoured: `--scheduler-conf`, `--scheduler-name` (the first; more names warn), `--schedule-period`,
`--listen-address`, `--kubeconfig`, `--kube-api-qps`/`--kube-api-burst`, `--leader-elect*`
(`--leader-elect-resource-namespace` is `--lock-object-namespace`, `--leader-elect-resource-name` the
Lease name; `--leader-elect-resource-lock` other than leases warns), `--percentage-nodes-to-find`,
`--minimum-feasible-nodes`, `--minimum-percentage-nodes-to-find`, `--enable-healthz` with
`--healthz-address` (a second /healthz listener, where Volcano's liveness probe looks),
`--enable-metrics` (metrics are always on `--listen-address`), `-v`/`--v` (klog levels: up to 3
info, 4 debug, 5 and more debug with per-action lines; a bare `-v`, `-vv` counts as before),
`--logtostderr`/`--alsologtostderr` (true is what Tidemark does), `--version`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidemark.apis import parse_bool


@dataclass(frozen=True, slots=True)
class VcFlag:
    """One vc-scheduler flag: its name (pflag spelling), whether it takes an optional bool, what it does."""

    name: str
    kind: str  # "bool" (value optional, Go ParseBool), "value", "multi" (repeatable)
    #: "" when Tidemark honours it (a `run` flag of the same meaning exists or this module maps it)
    ignored: str = ""


#: Flags `run` did not have before, with Volcano's meaning; `ignored` says why they have no effect here.
VC_FLAGS: Final[tuple[VcFlag, ...]] = (
    VcFlag("master", "value", "the API server comes from --kubeconfig (or in-cluster config)"),
    VcFlag("ca-cert-file", "value", "Tidemark's scheduler serves no HTTPS"),
    VcFlag("tls-cert-file", "value", "Tidemark's scheduler serves no HTTPS"),
    VcFlag("tls-private-key-file", "value", "Tidemark's scheduler serves no HTTPS"),
    VcFlag("resync-period", "value", "watches are resumed, never resynced"),
    VcFlag("default-queue", "value"),
    VcFlag("healthz-address", "value"),
    VcFlag("priority-class", "bool", "PriorityClasses are always read"),
    VcFlag("plugins-dir", "value", "plugins are Python modules in the registry; no dynamic loading"),
    VcFlag("csi-storage", "bool", "volumes are not modelled"),
    VcFlag("enable-healthz", "bool"),
    VcFlag("enable-metrics", "bool"),
    VcFlag("enable-pprof", "bool", "no pprof endpoint (Python)"),
    VcFlag("node-selector", "multi", "every node is scheduled"),
    VcFlag("cache-dumper", "bool", "no cache dumper"),
    VcFlag("cache-dump-dir", "value", "no cache dumper"),
    VcFlag("node-worker-threads", "value", "nodes are parsed in the watch thread"),
    VcFlag("gate-removal-worker-num", "value", "scheduling gates are not removed by the scheduler"),
    VcFlag("ignored-provisioners", "multi", "volumes are not modelled"),
    VcFlag("resource-sync-timeout", "value", "the first session waits for every watch to list"),
    VcFlag("disable-default-scheduler-config", "bool", "an invalid conf keeps the previous one"),
    VcFlag("scheduler-sharding-mode", "value", "no sharding"),
    VcFlag("scheduler-sharding-name", "value", "no sharding"),
    VcFlag("leader-elect-resource-lock", "value"),
    VcFlag("leader-elect-resource-name", "value"),
    VcFlag("leader-elect-resource-namespace", "value"),
    VcFlag("feature-gates", "value", "no Kubernetes feature gates here"),
    # klog / component-base logging
    VcFlag("logtostderr", "bool"),
    VcFlag("alsologtostderr", "bool"),
    VcFlag("log-dir", "value", "logs go to stderr only"),
    VcFlag("log-file", "value", "logs go to stderr only"),
    VcFlag("log-file-max-size", "value", "logs go to stderr only"),
    VcFlag("skip-headers", "bool", "log lines keep their headers"),
    VcFlag("skip-log-headers", "bool", "log lines keep their headers"),
    VcFlag("add-dir-header", "bool", "log lines name the logger, not the file"),
    VcFlag("one-output", "bool", "logs go to stderr only"),
    VcFlag("stderrthreshold", "value", "logs go to stderr only"),
    VcFlag("vmodule", "value", "one verbosity for all loggers (-v)"),
    VcFlag("log-backtrace-at", "value", "no backtraces on log lines"),
    VcFlag("log-flush-frequency", "value", "stderr is unbuffered"),
)
_BY_DEST: Final = {f.name.replace("-", "_"): f for f in VC_FLAGS}
DEFAULT_HEALTHZ_ADDRESS: Final = ":11251"
LEASE_LOCKS: Final = frozenset({"leases", "endpointsleases", "configmapsleases"})


class _Verbosity(argparse.Action):
    """`-v` (count), `-vv`, `-v=3`, `--v=3`, `-v 3`: a bare v counts as before, a number is klog's level."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if values is None:
            namespace.verbose = (namespace.verbose or 0) + 1
            return
        text = str(values).lstrip("=")
        if text and set(text) == {"v"}:  # -vv, -vvv
            namespace.verbose = (namespace.verbose or 0) + 1 + len(text)
            return
        try:
            level = int(text)
        except ValueError:
            parser.error(f"{option_string}: invalid klog level {values!r}")
        namespace.klog_v = level


def _spellings(name: str) -> list[str]:
    names = [f"--{name}"]
    if "-" in name:
        names.append(f"--{name.replace('-', '_')}")
    return names


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """Volcano's extra flags on `run`'s parser (the common ones `run` defines itself), and `-v`/`--v`."""
    p.add_argument("-v", "--v", "--verbose", dest="verbose_flag", nargs="?", action=_Verbosity, default=None,
                   help="bare -v: INFO, -vv: DEBUG; -v=N: klog level (1-3 INFO, 4+ DEBUG)")
    p.set_defaults(verbose=0, klog_v=None)
    for f in VC_FLAGS:
        dest = f.name.replace("-", "_")
        helptext = f"vc-scheduler's --{f.name}" + (f" (no effect: {f.ignored})" if f.ignored else "")
        if f.kind == "bool":
            p.add_argument(*_spellings(f.name), dest=dest, nargs="?", const="true", default=None, help=helptext)
        elif f.kind == "multi":
            p.add_argument(*_spellings(f.name), dest=dest, action="append", default=None, help=helptext)
        else:
            p.add_argument(*_spellings(f.name), dest=dest, default=None, help=helptext)
    p.add_argument("vc_positional", nargs="*", help=argparse.SUPPRESS)


@dataclass(frozen=True, slots=True)
class VcSettings:
    """What the vc-scheduler flags change in `run` (None: unchanged)."""

    lock_namespace: str | None = None
    lock_name: str | None = None
    healthz_address: str | None = None
    extra_scheduler_names: tuple[str, ...] = ()


def run_verbosity(ns: argparse.Namespace) -> int:
    """`run`'s verbosity count (0 INFO, 1 DEBUG, 2 DEBUG with per-action lines) from `-v` in either form.

    klog levels: up to 3 (Volcano's Deployment runs -v=3) is INFO, 4 DEBUG, 5 and more also the
    per-action lines; a bare `-v` counts as before.
    """
    klog_v = getattr(ns, "klog_v", None)
    if klog_v is not None:
        return 0 if klog_v <= 3 else 1 if klog_v == 4 else 2
    return int(getattr(ns, "verbose", 0) or 0)


def _bool(raw: str, flag: str, problems: list[str]) -> bool:
    p = parse_bool(raw)
    if p.warning is not None:
        problems.append(f"--{flag}: invalid boolean {raw!r}")
        return False
    return p.value


def interpret(ns: argparse.Namespace, scheduler_names: Sequence[str] = ()) -> tuple[VcSettings, list[str], list[str]]:
    """(settings, warnings, errors) from the parsed vc-scheduler flags: one warning line per flag without effect."""
    warnings: list[str] = []
    errors: list[str] = []
    settings: dict[str, Any] = {}
    for dest, f in _BY_DEST.items():
        raw = getattr(ns, dest, None)
        if raw is None:
            continue
        if f.ignored:
            shown = ",".join(raw) if isinstance(raw, list) else raw
            warnings.append(f"--{f.name}={shown} accepted for vc-scheduler compatibility; no effect: {f.ignored}")
            continue
        if f.name in ("logtostderr", "alsologtostderr"):
            if not _bool(raw, f.name, errors):
                warnings.append(f"--{f.name}=false accepted; no effect: logs always go to stderr")
        elif f.name == "enable-metrics":
            if not _bool(raw, f.name, errors):
                warnings.append(
                    "--enable-metrics=false accepted; no effect: metrics are always served on --listen-address"
                )
        elif f.name == "enable-healthz":
            if _bool(raw, f.name, errors):
                settings["healthz_address"] = getattr(ns, "healthz_address", None) or DEFAULT_HEALTHZ_ADDRESS
        elif f.name == "healthz-address":
            enabled = getattr(ns, "enable_healthz", None)
            if enabled is None or not parse_bool(enabled).value:
                warnings.append(f"--healthz-address={raw} has no effect without --enable-healthz=true "
                                "(health is always served on --listen-address)")
        elif f.name == "default-queue":
            if raw != "default":
                warnings.append(f"--default-queue={raw} accepted; no effect: jobs without a queue go to 'default'")
        elif f.name == "leader-elect-resource-namespace":
            settings["lock_namespace"] = raw
        elif f.name == "leader-elect-resource-name":
            settings["lock_name"] = raw
        elif f.name == "leader-elect-resource-lock" and raw not in LEASE_LOCKS:
            warnings.append(f"--leader-elect-resource-lock={raw} accepted; Tidemark always locks with a Lease")
    names = list(scheduler_names)
    if len(names) > 1:
        settings["extra_scheduler_names"] = tuple(names[1:])
        warnings.append(f"--scheduler-name given {len(names)} times; Tidemark schedules pods of the first "
                        f"({names[0]!r}) only")
    for word in getattr(ns, "vc_positional", None) or []:
        warnings.append(f"argument {word!r} ignored (as vc-scheduler ignores it)")
    return VcSettings(**settings), warnings, errors
