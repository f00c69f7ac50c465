"""`run`'s settings: RunOptions (Volcano's flag names) and how the parsed flags become them."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from scheduler_ext.framework.session import SessionOptions
from scheduler_ext.vcflags import interpret
from tidemark import apis
from tidemark.apis import DEFAULT_SCHEDULER_NAME, parse_bool
from tidemark.kube.leader import LeaderElectionConfig
from tidemark.serving import parse_listen_address

LEASE_NAME: Final = "tidemark-scheduler"
#: the API counts as reached when something answered within this many seconds (readiness)
API_STALE_AFTER: Final = 30.0


def parse_go_duration(text: str) -> float:
    """A Go duration (`1s`, `500ms`, `1m30s`, `0`) in seconds; ValueError otherwise (as Go's flag)."""
    value = apis.parse_go_duration(text)
    if value is None:
        raise ValueError(f"invalid duration {text!r} (e.g. 1s, 500ms, 1m30s)")
    return value


def parse_go_bool(text: str | bool) -> bool:
    """Go's strconv.ParseBool, as a flag value; ValueError otherwise."""
    if isinstance(text, bool):
        return text
    parsed = parse_bool(text)
    if parsed.warning is not None:
        raise ValueError(f"invalid boolean {text!r} (true or false)")
    return parsed.value


@dataclass(frozen=True, slots=True)
class RunOptions:
    """`run`'s settings (flags; Volcano's names). Times in seconds."""

    kubeconfig: str | None = None
    #: None: the default conf shipped with the package
    scheduler_conf: str | None = None
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    schedule_period: float = 1.0
    listen_address: str = ":8080"
    leader_elect: bool = False
    lock_namespace: str = "kube-system"
    lock_name: str = LEASE_NAME
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    #: the Lease holder name; None: hostname_uuid
    identity: str | None = None
    qps: float = 2000.0
    burst: int = 2000
    #: the scheduler's own Pod (downward API), for Events about the conf
    pod_name: str = ""
    pod_namespace: str = ""
    #: evictions (and binds when the async binder cannot serve the client configuration)
    bind_workers: int = 16
    #: binds in flight on the async binder's keep-alive connections (tidemark.kube.binding)
    bind_connections: int = 64
    status_workers: int = 4
    #: after an early wake-up, wait this long for more changes to batch them into one session
    wake_debounce: float = 0.02
    #: at least this long between the end of a session and an early (event-triggered) next one
    min_session_gap: float = 0.05
    api_stale_after: float = API_STALE_AFTER
    session_options: SessionOptions = field(default_factory=SessionOptions)
    #: vc-scheduler's --enable-healthz/--healthz-address: a second /healthz listener (None: none)
    healthz_address: str | None = None
    #: one line per vc-scheduler flag accepted without effect, logged at start
    flag_warnings: tuple[str, ...] = ()


def options_from_args(ns: argparse.Namespace, environ: Mapping[str, str] | None = None) -> RunOptions:
    """RunOptions from `run`'s parsed flags; ValueError names the bad flag."""
    env = os.environ if environ is None else environ
    try:
        period = parse_go_duration(str(ns.schedule_period))
    except ValueError as exc:
        raise ValueError(f"--schedule-period: {exc}") from None
    if period <= 0:
        raise ValueError("--schedule-period must be positive")
    try:
        leader_elect = parse_go_bool(ns.leader_elect)
    except ValueError as exc:
        raise ValueError(f"--leader-elect: {exc}") from None
    try:
        parse_listen_address(ns.listen_address)
    except ValueError as exc:
        raise ValueError(f"--listen-address: {exc}") from None
    timings: dict[str, Any] = {}
    for flag, attr in (
        ("leader_elect_lease_duration", "lease_duration"),
        ("leader_elect_renew_deadline", "renew_deadline"),
        ("leader_elect_retry_period", "retry_period"),
    ):
        raw = getattr(ns, flag, None)
        if raw is not None:
            try:
                timings[attr] = parse_go_duration(str(raw))
            except ValueError as exc:
                raise ValueError(f"--{flag.replace('_', '-')}: {exc}") from None
    le = dataclasses.replace(LeaderElectionConfig(), **timings)
    problems = le.problems()
    if problems:
        raise ValueError("leader election timings: " + "; ".join(problems))
    if ns.kube_api_qps <= 0 or ns.kube_api_burst <= 0:
        raise ValueError("--kube-api-qps and --kube-api-burst must be positive")
    raw_names = ns.scheduler_name
    names = [str(n) for n in raw_names] if isinstance(raw_names, list) else [str(raw_names or DEFAULT_SCHEDULER_NAME)]
    vc, flag_warnings, errors = interpret(ns, names)
    if errors:
        raise ValueError("; ".join(errors))
    if vc.healthz_address is not None:
        try:
            parse_listen_address(vc.healthz_address)
        except ValueError as exc:
            raise ValueError(f"--healthz-address: {exc}") from None
    session = SessionOptions(
        percentage_of_nodes_to_find=int(getattr(ns, "percentage_nodes_to_find", 100)),
        min_nodes_to_find=int(getattr(ns, "minimum_feasible_nodes", 100)),
        min_percentage_of_nodes_to_find=int(getattr(ns, "minimum_percentage_nodes_to_find", 5)),
    )
    return RunOptions(
        kubeconfig=ns.kubeconfig or None,
        scheduler_conf=ns.scheduler_conf or None,
        scheduler_name=names[0] if names else DEFAULT_SCHEDULER_NAME,
        schedule_period=period,
        listen_address=ns.listen_address,
        leader_elect=leader_elect,
        lock_namespace=vc.lock_namespace or ns.lock_object_namespace,
        lock_name=vc.lock_name or LEASE_NAME,
        leader_election=le,
        qps=float(ns.kube_api_qps),
        burst=int(ns.kube_api_burst),
        pod_name=env.get("POD_NAME", ""),
        pod_namespace=env.get("POD_NAMESPACE", ""),
        session_options=session,
        healthz_address=vc.healthz_address,
        flag_warnings=tuple(flag_warnings),
    )
