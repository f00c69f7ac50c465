"""The plugin registry (Volcano's plugins/factory.go): one explicit dict keyed by the conf name.

Adding a plugin: write its module (exposing `SPEC`), import it here and add it to the tuple.
Nothing registers itself; a duplicate name raises at import time. The framework never imports
this module: callers hand the registry to `parse_conf` and the Session.
"""

from __future__ import annotations

from scheduler_ext.framework.interface import PluginSpec, build_registry
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
    rescheduling,
    sla,
    tdm,
    usage,
)

PLUGINS: dict[str, PluginSpec] = build_registry(
    "plugin",
    (
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
        rescheduling.SPEC,
    ),
)
