"""vc-scheduler's command line (Volcano's options.go, leader election, klog) as `run` accepts it."""

from __future__ import annotations

import argparse

import pytest

from scheduler_ext.cli import _build_parser
from scheduler_ext.run.options import options_from_args
from scheduler_ext.vcflags import VC_FLAGS, add_run_flags, interpret, run_verbosity

#: Volcano's own Deployment args (installer chart, scheduler.yaml), unchanged
VOLCANO_ARGS = [
    "--logtostderr",
    "--scheduler-conf=/volcano.scheduler/volcano-scheduler.conf",
    "--enable-healthz=true",
    "--enable-metrics=true",
    "--leader-elect=false",
    "--kube-api-qps=2000",
    "--kube-api-burst=2000",
    "--schedule-period=1s",
    "--node-worker-threads=20",
    "-v=3",
    "2>&1",
]


def parser() -> argparse.ArgumentParser:
    """`run`'s own flags as the cli defines them, plus Volcano's."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    for flag in ("--kubeconfig", "--scheduler-conf", "--schedule-period", "--listen-address",
                 "--lock-object-namespace", "--kube-api-qps", "--kube-api-burst", "--leader-elect"):
        p.add_argument(flag)
    p.add_argument("--scheduler-name", action="append")
    add_run_flags(p)
    return p


def test_volcano_deployment_args_parse_with_one_warning_per_ignored_flag() -> None:
    ns = parser().parse_args(VOLCANO_ARGS)
    settings, warnings, errors = interpret(ns, ["volcano"])
    assert errors == []
    assert settings.healthz_address == ":11251"  # where Volcano's liveness probe looks
    assert run_verbosity(ns) == 0  # -v=3 is Volcano's normal INFO
    assert len(warnings) == 2
    assert warnings[0].startswith("--node-worker-threads=20 accepted for vc-scheduler compatibility; no effect")
    assert warnings[1] == "argument '2>&1' ignored (as vc-scheduler ignores it)"


def test_the_run_command_turns_them_into_its_options() -> None:
    ns = _build_parser().parse_args(["run", *VOLCANO_ARGS, "--leader-elect-resource-namespace=volcano-system",
                                     "--percentage-nodes-to-find=50", "--scheduler-name=a", "--scheduler-name=b"])
    opts = options_from_args(ns, environ={})
    assert opts.scheduler_conf == "/volcano.scheduler/volcano-scheduler.conf"
    assert opts.healthz_address == ":11251"
    assert opts.lock_namespace == "volcano-system"
    assert opts.scheduler_name == "a"
    assert opts.session_options.percentage_of_nodes_to_find == 50
    assert opts.leader_elect is False and opts.schedule_period == 1.0 and opts.qps == 2000.0
    assert [w.split(" ")[0] for w in opts.flag_warnings] == ["--node-worker-threads=20", "--scheduler-name", "argument"]
    with pytest.raises(ValueError, match="--enable-healthz: invalid boolean"):
        options_from_args(_build_parser().parse_args(["run", "--enable-healthz=maybe"]), environ={})


def test_every_flag_of_options_go_and_klog_is_accepted_in_both_spellings() -> None:
    p = parser()
    for f in VC_FLAGS:
        for spelling in {f.name, f.name.replace("-", "_")}:
            args = [f"--{spelling}"] if f.kind == "bool" else [f"--{spelling}=x"]
            ns = p.parse_args(args)
            assert getattr(ns, f.name.replace("-", "_")) is not None, spelling


@pytest.mark.parametrize(
    ("args", "verbosity"),
    [([], 0), (["-v"], 1), (["-vv"], 2), (["-v=3"], 0), (["--v=4"], 1), (["-v", "5"], 2), (["--v=0"], 0)],
)
def test_verbosity_in_klog_and_counting_forms(args: list[str], verbosity: int) -> None:
    assert run_verbosity(parser().parse_args(args)) == verbosity


def test_honoured_flags_and_their_warnings() -> None:
    ns = parser().parse_args([
        "--leader-elect-resource-namespace=volcano-system", "--leader-elect-resource-name=vc-lock",
        "--leader-elect-resource-lock=configmaps", "--enable-metrics=false", "--logtostderr=false",
        "--healthz-address=:9999", "--default-queue=other", "--plugins-dir=plugins",
        "--node-selector=a:b", "--node-selector=c:d",
    ])
    settings, warnings, errors = interpret(ns, ["volcano", "second"])
    assert errors == []
    assert settings.lock_namespace == "volcano-system" and settings.lock_name == "vc-lock"
    assert settings.healthz_address is None  # not enabled
    assert settings.extra_scheduler_names == ("second",)
    text = "\n".join(warnings)
    for part in ("--leader-elect-resource-lock=configmaps", "--enable-metrics=false", "--logtostderr=false",
                 "--healthz-address=:9999 has no effect", "--default-queue=other", "--plugins-dir=plugins",
                 "--node-selector=a:b,c:d", "--scheduler-name given 2 times"):
        assert part in text, part
    assert len(warnings) == 8


def test_bad_values_are_errors() -> None:
    ns = parser().parse_args(["--enable-healthz=maybe"])
    assert interpret(ns)[2] == ["--enable-healthz: invalid boolean 'maybe'"]
    with pytest.raises(SystemExit):
        parser().parse_args(["-v=loud"])
