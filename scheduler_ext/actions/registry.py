"""The action registry (Volcano's actions/factory.go): one explicit dict keyed by the conf name.

Adding an action: write its module (exposing `SPEC`), import it here and add it to the tuple.
Nothing registers itself; a duplicate name raises at import time. The framework never imports
this module: callers hand the registry to `parse_conf` and the Session.
"""

from __future__ import annotations

from scheduler_ext.actions import allocate, backfill, enqueue, preempt, privilege, reclaim, shuffle
from scheduler_ext.framework.interface import ActionSpec, build_registry

ACTIONS: dict[str, ActionSpec] = build_registry(
    "action",
    (enqueue.SPEC, allocate.SPEC, backfill.SPEC, preempt.SPEC, privilege.SPEC, reclaim.SPEC, shuffle.SPEC),
)
