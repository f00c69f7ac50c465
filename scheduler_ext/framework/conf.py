"""volcano-scheduler.conf: parsing and validation (Volcano's conf/scheduler_conf.go + UnmarshalSchedulerConf).

Rules (docs/design.md, "Conf validation"): an unknown action is an error; an unknown plugin is a warning and
is skipped (the plugins docs/design.md, "The scheduler" lists as not yet supported get their own warning);
an unknown option or argument key is a warning; a bad value is an error naming its path
(`tiers[1].plugins[0].arguments.x`).
Every problem is collected before reporting. Unset enable flags default to true, as Volcano's
ApplyPluginConfDefaults, except `enableHierarchy` (and `enabledClusterOrder`, which Volcano never
defaults). drf with hierarchy enabled together with proportion in one tier is an error, as in Volcano.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from scheduler_ext.framework.interface import ActionSpec, ArgSpec, Arguments, PluginSpec
from tidemark.apis import LABEL_OVERSUBSCRIPTION, label_enabled, parse_bool, parse_go_duration, short_repr
from tidemark.yamlsafe import YamlError
from tidemark.yamlsafe import load as load_yaml

#: the largest magnitude a number argument may have (weights, thresholds): beyond it is a typo or an attack,
#: and products of such weights with scores would lose all precision
MAX_FLOAT_ARGUMENT: Final = 1e15

#: YAML option key -> PluginOption field, Volcano's spellings (`enable` and `enabled` mixed)
OPTION_KEYS: Final[Mapping[str, str]] = {
    "enableJobOrder": "job_order",
    "enableHierarchy": "hierarchy",
    "enableJobReady": "job_ready",
    "enableJobPipelined": "job_pipelined",
    "enableTaskOrder": "task_order",
    "enablePreemptable": "preemptable",
    "enableReclaimable": "reclaimable",
    "enablePreemptive": "preemptive",
    "enableQueueOrder": "queue_order",
    "enabledClusterOrder": "cluster_order",
    "enablePredicate": "predicate",
    "enableBestNode": "best_node",
    "enableNodeOrder": "node_order",
    "enableTargetJob": "target_job",
    "enableReservedNodes": "reserved_nodes",
    "enableJobEnqueued": "job_enqueued",
    "enabledVictim": "victim",
    "enableJobStarving": "job_starving",
    "enabledOverused": "overused",
    "enabledAllocatable": "allocatable",
    "enabledHyperNodeOrder": "hyper_node_order",
    "enabledSubJobReady": "sub_job_ready",
    "enabledSubJobPipelined": "sub_job_pipelined",
    "enabledSubJobOrder": "sub_job_order",
    "enabledHyperNodeGradient": "hyper_node_gradient",
}
#: flags whose unset value is false (Volcano never defaults them)
DEFAULT_FALSE: Final = frozenset({"hierarchy", "cluster_order"})

#: docs/design.md, "The scheduler": accepted in a conf with a warning, no effect
UNSUPPORTED_PLUGINS: Final = frozenset(
    {"resourcequota", "pdb", "numaaware", "deviceshare", "extender", "task-topology", "network-topology-aware"}
)


@dataclass(frozen=True, slots=True)
class PluginOption:
    """One plugin entry of a tier, flags resolved to booleans (defaults applied)."""

    name: str
    job_order: bool = True
    hierarchy: bool = False
    job_ready: bool = True
    job_pipelined: bool = True
    task_order: bool = True
    preemptable: bool = True
    reclaimable: bool = True
    preemptive: bool = True
    queue_order: bool = True
    cluster_order: bool = False
    predicate: bool = True
    best_node: bool = True
    node_order: bool = True
    target_job: bool = True
    reserved_nodes: bool = True
    job_enqueued: bool = True
    victim: bool = True
    job_starving: bool = True
    overused: bool = True
    allocatable: bool = True
    hyper_node_order: bool = True
    sub_job_ready: bool = True
    sub_job_pipelined: bool = True
    sub_job_order: bool = True
    hyper_node_gradient: bool = True
    arguments: Arguments = field(default_factory=Arguments)

    def enabled(self, flag: str) -> bool:
        return bool(getattr(self, flag))


@dataclass(frozen=True, slots=True)
class Tier:
    plugins: tuple[PluginOption, ...]


@dataclass(frozen=True, slots=True)
class Configuration:
    """Arguments of one action (`configurations: [{name: preempt, arguments: {...}}]`)."""

    name: str
    arguments: Arguments


@dataclass(frozen=True, slots=True)
class SchedulerConf:
    actions: tuple[str, ...]
    tiers: tuple[Tier, ...]
    configurations: tuple[Configuration, ...] = ()
    metrics: Mapping[str, Any] = field(default_factory=dict)

    def action_arguments(self, name: str) -> Arguments:
        for c in self.configurations:
            if c.name == name:
                return c.arguments
        return Arguments()

    def plugin(self, name: str) -> PluginOption | None:
        for tier in self.tiers:
            for p in tier.plugins:
                if p.name == name:
                    return p
        return None


@dataclass(frozen=True, slots=True)
class ConfProblem:
    severity: Literal["error", "warning"]
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfError(Exception):
    """The conf has errors; `problems` holds all of them (and the warnings)."""

    def __init__(self, problems: list[ConfProblem]) -> None:
        self.problems = problems
        errors = [p for p in problems if p.severity == "error"]
        super().__init__("; ".join(str(p) for p in errors) or "invalid scheduler conf")




def _check_value(spec: ArgSpec, value: Any) -> str | None:
    """None when `value` suits the spec, else what is wrong."""
    kind = spec.kind
    if kind == "any":
        return None
    if kind == "int":
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            return f"must be an integer, got {short_repr(value)}"
        if not -(2**63) <= value < 2**63:
            return f"must be an integer within int64, got {short_repr(value)}"
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number, got {short_repr(value)}"
        if not math.isfinite(value) or abs(value) > MAX_FLOAT_ARGUMENT:
            return f"must be a finite number of at most {MAX_FLOAT_ARGUMENT:g} in magnitude, got {short_repr(value)}"
    elif kind == "bool":
        if isinstance(value, bool):
            return None
        if isinstance(value, str) and parse_bool(value).warning is None:
            return None
        return f"must be a boolean, got {value!r}"
    elif kind == "str":
        if not isinstance(value, str):
            return f"must be a string, got {value!r}"
    elif kind == "duration" and parse_go_duration(value) is None:
        return f"must be a duration such as 3m or 100ms, got {value!r}"
    return None


def _check_arguments(
    raw: Any, specs: tuple[ArgSpec, ...] | None, path: str, owner: str, problems: list[ConfProblem]
) -> Arguments:
    if raw is None:
        return Arguments()
    if not isinstance(raw, Mapping):
        problems.append(ConfProblem("error", path, f"must be a mapping, got {type(raw).__name__}"))
        return Arguments()
    args: dict[str, Any] = {}
    for key, value in raw.items():
        k = str(key)
        if specs is None:
            args[k] = value
            continue
        spec = next((s for s in specs if s.matches(k)), None)
        if spec is None:
            problems.append(ConfProblem("warning", f"{path}.{k}", f"unknown argument of {owner}; ignored"))
            continue
        err = _check_value(spec, value)
        if err:
            problems.append(ConfProblem("error", f"{path}.{k}", err))
            continue
        args[k] = value
    return Arguments(args)


def parse_conf(
    text: str,
    actions: Mapping[str, ActionSpec],
    plugins: Mapping[str, PluginSpec],
) -> tuple[SchedulerConf, list[ConfProblem]]:
    """Parse and validate; returns the conf and its warnings, raises ConfError listing every error."""
    problems: list[ConfProblem] = []
    try:
        doc = load_yaml(text)
    except YamlError as e:
        raise ConfError([ConfProblem("error", "", f"invalid YAML{e.where}: {e.message}")]) from e
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise ConfError([ConfProblem("error", "", "the conf must be a mapping with actions and tiers")])

    for key in doc:
        if key not in ("actions", "tiers", "configurations", "metrics"):
            problems.append(ConfProblem("warning", str(key), "unknown top-level key; ignored"))

    # actions
    raw_actions = doc.get("actions")
    action_names: list[str] = []
    if not isinstance(raw_actions, str):
        problems.append(ConfProblem("error", "actions", "must be a string such as \"enqueue, allocate, backfill\""))
    else:
        for i, part in enumerate(raw_actions.split(",")):
            name = part.strip()
            if name not in actions:
                problems.append(ConfProblem("error", f"actions[{i}]", f"unknown action {name!r}"))
            else:
                action_names.append(name)

    # tiers
    tiers: list[Tier] = []
    raw_tiers = doc.get("tiers") or []
    if not isinstance(raw_tiers, list):
        problems.append(ConfProblem("error", "tiers", "must be a list of {plugins: [...]}"))
        raw_tiers = []
    for ti, raw_tier in enumerate(raw_tiers):
        tpath = f"tiers[{ti}]"
        if not isinstance(raw_tier, Mapping):
            problems.append(ConfProblem("error", tpath, "must be a mapping with plugins"))
            continue
        for key in raw_tier:
            if key != "plugins":
                problems.append(ConfProblem("warning", f"{tpath}.{key}", "unknown key; ignored"))
        raw_plugins = raw_tier.get("plugins") or []
        if not isinstance(raw_plugins, list):
            problems.append(ConfProblem("error", f"{tpath}.plugins", "must be a list"))
            continue
        options: list[PluginOption] = []
        hdrf = proportion = False
        for pi, raw_plugin in enumerate(raw_plugins):
            ppath = f"{tpath}.plugins[{pi}]"
            opt = _parse_plugin(raw_plugin, ppath, plugins, problems)
            if opt is None:
                continue
            if opt.name == "drf" and opt.hierarchy:
                hdrf = True
            if opt.name == "proportion":
                proportion = True
            if opt.name in plugins:
                options.append(opt)
        if hdrf and proportion:
            problems.append(
                ConfProblem("error", tpath, "proportion and drf with hierarchy enabled conflicts")
            )
        tiers.append(Tier(tuple(options)))

    # configurations
    configurations: list[Configuration] = []
    raw_confs = doc.get("configurations") or []
    if not isinstance(raw_confs, list):
        problems.append(ConfProblem("error", "configurations", "must be a list of {name, arguments}"))
        raw_confs = []
    for ci, raw_c in enumerate(raw_confs):
        cpath = f"configurations[{ci}]"
        if not isinstance(raw_c, Mapping) or not isinstance(raw_c.get("name"), str):
            problems.append(ConfProblem("error", cpath, "must be a mapping with a name"))
            continue
        name = raw_c["name"]
        for key in raw_c:
            if key not in ("name", "arguments"):
                problems.append(ConfProblem("warning", f"{cpath}.{key}", "unknown key; ignored"))
        spec = actions.get(name)
        if spec is None:
            problems.append(ConfProblem("warning", f"{cpath}.name", f"unknown action {name!r}; ignored"))
            continue
        args = _check_arguments(
            raw_c.get("arguments"), spec.arguments, f"{cpath}.arguments", f"action {name}", problems
        )
        configurations.append(Configuration(name, args))

    metrics = doc.get("metrics") or {}
    if not isinstance(metrics, Mapping):
        problems.append(ConfProblem("error", "metrics", "must be a mapping"))
        metrics = {}

    problems.extend(_combination_warnings(tiers))
    if any(p.severity == "error" for p in problems):
        raise ConfError(problems)
    conf = SchedulerConf(tuple(action_names), tuple(tiers), tuple(configurations), dict(metrics))
    return conf, problems


def _parse_plugin(
    raw: Any, path: str, plugins: Mapping[str, PluginSpec], problems: list[ConfProblem]
) -> PluginOption | None:
    if not isinstance(raw, Mapping):
        problems.append(ConfProblem("error", path, "must be a mapping with a name"))
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        problems.append(ConfProblem("error", f"{path}.name", "is required"))
        return None
    spec = plugins.get(name)
    if spec is None:
        if name in UNSUPPORTED_PLUGINS:
            problems.append(ConfProblem("warning", f"{path}.name", f"plugin {name!r} is not yet supported; skipped"))
        else:
            problems.append(ConfProblem("warning", f"{path}.name", f"unknown plugin {name!r}; skipped"))
    flags: dict[str, bool] = {}
    for key, value in raw.items():
        if key in ("name", "arguments"):
            continue
        field_name = OPTION_KEYS.get(str(key))
        if field_name is None:
            problems.append(ConfProblem("warning", f"{path}.{key}", "unknown plugin option; ignored"))
            continue
        if value is None:
            continue
        if not isinstance(value, bool):
            problems.append(ConfProblem("error", f"{path}.{key}", f"must be true or false, got {value!r}"))
            continue
        flags[field_name] = value
    args = _check_arguments(
        raw.get("arguments"),
        spec.arguments if spec is not None else None,
        f"{path}.arguments",
        f"plugin {name}",
        problems,
    )
    return PluginOption(name=name, arguments=args, **flags)


def _combination_warnings(tiers: list[Tier]) -> list[ConfProblem]:
    """The seed oversubscription guide's constraint: overcommit must be off where oversubscription is on."""
    where: dict[str, str] = {}
    for ti, tier in enumerate(tiers):
        for pi, opt in enumerate(tier.plugins):
            where.setdefault(opt.name, f"tiers[{ti}].plugins[{pi}]")
    if "overcommit" in where and "oversubscription" in where:
        return [ConfProblem(
            "warning", where["overcommit"] + ".name",
            "overcommit and oversubscription are both enabled: the oversubscription guide requires overcommit "
            "off (its inflated enqueue capacity admits jobs the oversubscribed nodes cannot hold); remove overcommit",
        )]
    return []


def cluster_warnings(conf: SchedulerConf, nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Conf-versus-cluster mismatches of the seed guide's Table 1 (the scheduler checks what Volcano does not).

    Nodes labelled `volcano.sh/oversubscription=true` while the conf lacks the oversubscription plugin:
    "not triggered or failed, avoid this configuration" (their X is never granted and offline pods are
    fitted as online ones). One line naming how many nodes and the first few.
    """
    if any(opt.name == "oversubscription" for tier in conf.tiers for opt in tier.plugins):
        return []
    labelled: list[str] = []
    for n in nodes:
        md = n.get("metadata") or {}
        labels = md.get("labels") or {}
        if isinstance(labels, Mapping) and label_enabled(labels, LABEL_OVERSUBSCRIPTION).value:
            labelled.append(str(md.get("name") or ""))
    if not labelled:
        return []
    shown = ", ".join(sorted(labelled)[:5]) + (", ..." if len(labelled) > 5 else "")
    return [
        f"{len(labelled)} node(s) labelled {LABEL_OVERSUBSCRIPTION}=true ({shown}) but the conf has no "
        "oversubscription plugin: their oversubscribed capacity is not used and offline pods are fitted as "
        "online ones (seed guide, Table 1: avoid this configuration); add `- name: oversubscription` to the "
        "conf or remove the label"
    ]


def load_conf(
    path: str, actions: Mapping[str, ActionSpec], plugins: Mapping[str, PluginSpec]
) -> tuple[SchedulerConf, list[ConfProblem]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfError([ConfProblem("error", "", f"cannot read {path}: {e.strerror or e}")]) from e
    except UnicodeDecodeError as e:
        raise ConfError([ConfProblem("error", "", f"{path} is not UTF-8 text (byte {e.start})")]) from e
    return parse_conf(text, actions, plugins)
