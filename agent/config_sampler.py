"""The `sampler` section of the agent's configuration (docs/agent.md, "Samples and smoothing", "Calm sampling"):
how often usage is read, the window it is smoothed over, and the calm period a quiet node samples at.

Kept beside `agent.config` (which builds `AgentConfig` from it and maps the YAML keys through `SAMPLER_FIELDS`)
so that module stays small. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agent.config_values import Parser, _choice, _duration

Smoothing = Literal["mean", "p95"]


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True, slots=True)
class SamplerConfig:
    period: float = field(
        default=1.0,
        metadata=_doc("Seconds between usage samples (default 1). CPU usage is the counter delta over this interval."),
    )
    window: float = field(
        default=60.0,
        metadata=_doc(
            "Seconds of samples smoothed into U_non and the published usage (default 60): long enough to ride "
            "out bursts, short enough to follow daily load. Until it fills, the samples so far."
        ),
    )
    smoothing: Smoothing = field(
        default="mean",
        metadata=_doc("`mean` (default) or `p95` of the window: p95 publishes less when online load is spiky."),
    )
    calm_period: float = field(
        default=5.0,
        metadata=_doc(
            "Seconds between samples, tier and eviction checks while the node is calm (default 5; 0, or any value "
            "not above `sampler.period`, samples every `sampler.period` always). Calm (agent.decide.calm): for "
            "`sampler.calmAfter` seconds, usage at least 20 points under every high watermark, the online pods' "
            "CPU and I/O wait under half their targets, the tier's ceiling settled, no I/O limit in force, the "
            "memory guard's headroom over 10 % of allocatable memory, no pressure, no eviction. Leaving it is "
            "immediate (a PSI trigger, the probe of the kubepods root every `sampler.period`, or the first sample "
            "that breaks a condition). Why: sampling every second "
            "is most of an idle agent's CPU (issue 34: 0.69 % of a core at 1 s, 0.36 % at 3 s, 0.32 % at 5 s on a "
            "hollow node, paired rounds)."
        ),
    )
    calm_after: float = field(
        default=10.0,
        metadata=_doc(
            "Seconds every calm condition must hold before the calm period applies (default 10): a node between "
            "two spikes of a spiky pod is not calm."
        ),
    )


#: (YAML key, AgentConfig section, attribute, parser) of each row; `agent.config` adds them to its table
SAMPLER_FIELDS: tuple[tuple[str, str, str, Parser], ...] = (
    ("sampler.period", "sampler", "period", _duration()),
    ("sampler.window", "sampler", "window", _duration()),
    ("sampler.smoothing", "sampler", "smoothing", _choice("mean", "p95")),
    ("sampler.calmPeriod", "sampler", "calm_period", _duration(0.0, exclusive=False)),
    ("sampler.calmAfter", "sampler", "calm_after", _duration(0.0, exclusive=False)),
)
