"""The registries: one explicit dict per kind (actions, plugins), keyed by the conf name.

Adding an action or a plugin: write its module (exposing `SPEC`), import it here and add it to the
tuple below. A duplicate name raises at import time. Nothing registers itself.
"""

from __future__ import annotations

from scheduler_ext.actions import allocate, backfill, enqueue, preempt, reclaim, shuffle
from scheduler_ext.framework.interface import ActionSpec, PluginSpec
from scheduler_ext.plugins import (
    binpack,
    capacity,
    conformance,
    drf,
    gang,
    nodeorder,
    overcommit,
    oversubscription,
    predicates,
    priority,
    proportion,
    sla,
    tdm,
    usage,
)


class DuplicateRegistration(Exception):
    """Two specs with one name."""


def register_action(registry: dict[str, ActionSpec], spec: ActionSpec) -> None:
    if spec.name in registry:
        raise DuplicateRegistration(f"action {spec.name!r} registered twice")
    registry[spec.name] = spec


def register_plugin(registry: dict[str, PluginSpec], spec: PluginSpec) -> None:
    if spec.name in registry:
        raise DuplicateRegistration(f"plugin {spec.name!r} registered twice")
    registry[spec.name] = spec


ACTIONS: dict[str, ActionSpec] = {}
for _spec in (
    enqueue.SPEC,
    allocate.SPEC,
    backfill.SPEC,
    preempt.SPEC,
    reclaim.SPEC,
    shuffle.SPEC,
):
    register_action(ACTIONS, _spec)

PLUGINS: dict[str, PluginSpec] = {}
for _pspec in (
    priority.SPEC,
    gang.SPEC,
    conformance.SPEC,
    drf.SPEC,
    proportion.SPEC,
    predicates.SPEC,
    nodeorder.SPEC,
    binpack.SPEC,
    overcommit.SPEC,
    capacity.SPEC,
    tdm.SPEC,
    oversubscription.SPEC,
    usage.SPEC,
    sla.SPEC,
):
    register_plugin(PLUGINS, _pspec)
