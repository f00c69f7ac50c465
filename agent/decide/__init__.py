"""Pure decisions: `decide(snapshot, config, now) -> Plan` over plain numbers.

Nothing in this package reads files, talks to the API, or imports `kubernetes`, `pyroute2` or an
executor (the import-linter contract `decisions-pure` in pyproject.toml, run by `make lint`, checks
it). Modules, one per decision: `usage` (window smoothing), `capacity` (B, X, publishing and its
cadence), `watermarks` (hysteresis), `eviction` (victims), `admission` (the admission guard), `qos`
(cgroup and process knobs), `plan` (the whole cycle and the state it carries).
"""

from agent.decide.ops import EvictPod, Plan, SetCgroupValue, SetProcessValue
from agent.decide.plan import decide

__all__ = ["EvictPod", "Plan", "SetCgroupValue", "SetProcessValue", "decide"]
