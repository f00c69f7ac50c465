"""bench_colocation's statistics: percentiles, medians, the paired ratios with bootstrap intervals, the JSON
summary and the goals. Pure functions of the cells' records (tests/unit/test_bench_colocation.py).

Why paired ratios: the machine's noise moves every arm of one round together (the same `alone` arm's median p99
was 23.8 ms in one kind and 5.8 ms in another of the same run), so each cell is divided by the same round's
`alone` cell (p99) or `kubelet_besteffort` cell (offline work) of its kind and load level, and the interval of
the median of those ratios (a seeded bootstrap over the rounds) says whether a difference is one at all.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

KINDS = ("cpu", "memory", "io")
ARMS = ("alone", "kubelet_besteffort", "kubelet_burstable", "tidemark")
#: Tidemark at three CPU suppress settings: tidemark_s70 and tidemark_s100 run README's requests-only pods (as
#: tidemark_nolimits) with the agent's `tier.cpu.suppressRatio` at 0.70 and 1.00; tidemark_nolimits is the shipped
#: setting. The frontier plot joins them with a line.
SUPPRESS_ARMS = {"tidemark_s70": 0.70, "tidemark_s100": 1.00}
FRONTIER_LINE = ("tidemark_s70", "tidemark_nolimits", "tidemark_s100")
#: Tidemark at other online-wait targets (`tier.cpu.onlineWaitTarget`, shipped 0.10), README's requests-only pods:
#: tidemark_w10 the shipped target (as it was named when 0.05 was shipped), tidemark_w25 a looser one,
#: tidemark_nowait the feedback off (a target of 1 is never passed): the bound alone, as Koordinator's suppression.
#: What the feedback costs in work and buys in p99, in the same rounds.
WAIT_ARMS = {"tidemark_w10": 0.10, "tidemark_w25": 0.25, "tidemark_nowait": 1.00}
#: Tidemark with another wait cut (`tier.cpu.cut`), README's requests-only pods: tidemark_pcut cuts the ceiling by
#: target / wait (at most a half) where the shipped `halve` halves it at every period over the target
CUT_ARMS = {"tidemark_pcut": "proportional"}
#: Tidemark installed (shipped config) beside the online pod and no offline pod: what Tidemark's own processes (the
#: agent, the scheduler, the controller, the webhook, their API traffic) cost the online p99, paired with `alone`
ONLINE_ONLY_ARMS = ("alone", "tidemark_alone")
#: Tidemark at its loosest CPU setting: suppressRatio 1.0 and the wait feedback off (the share signal at a target
#: of 1), README's requests-only pods: the tier's bound alone (allocatable - online, - system with
#: `tier.cpu.subtractSystem`), the upper end of the frontier
OPEN_ARM = "tidemark_open"
#: the CPU tier as shipped before 2026-12-01, README's requests-only pods: the feedback on the online pods' wait
#: share (`tier.cpu.onlineWaitSignal: share`, target 0.10) and the system usage subtracted from the bound
#: (`tier.cpu.subtractSystem: true`), paired with the shipped delay-per-slice signal and bound
SHARE_ARM = "tidemark_share"
#: README's requests-only pods with `tier.enabled: false`: the pods' own knobs (cpu.idle, memory, I/O) and no tier
#: quota on the BestEffort root: what the quota itself costs or buys, paired with the shipped arm
NOTIER_ARM = "tidemark_notier"
EXTRA_ARMS = ("tidemark_nolimits", *SUPPRESS_ARMS, *WAIT_ARMS, *CUT_ARMS, "tidemark_noqos", "tidemark_alone", OPEN_ARM,
              SHARE_ARM, NOTIER_ARM)
ALL_ARMS = (*ARMS, *EXTRA_ARMS)
TIDEMARK_ARMS = ("tidemark", "tidemark_noqos", "tidemark_nolimits", *SUPPRESS_ARMS, *WAIT_ARMS, *CUT_ARMS,
                 "tidemark_alone", OPEN_ARM, SHARE_ARM, NOTIER_ARM)
#: the online load levels: the fraction of the online pod's CPU request nginx uses at the calibrated rate; the
#: first is the JSON's `kinds`, the others `kinds_<name>`
LOAD_LEVELS = {"third": 1.0 / 3.0, "two_thirds": 2.0 / 3.0}
#: the medians every kind and arm has in the JSON (the issue's shape)
FIELDS = (
    "online_p50_ms",
    "online_p99_ms",
    "online_p999_ms",
    "online_rps",
    "online_errors",
    "node_cpu_util",
    "offline_work_per_s",
    "online_evictions",
    "online_restarts",
    "offline_evictions",
)
#: more figures per cell (medians under "more" in the JSON)
MORE_FIELDS = (
    "online_ooms",
    "offline_ooms",
    "offline_rejected",
    "offline_pods_running",
    "node_oom_kills",
    "online_cores",
    "offline_cores",
    "node_busy_util",
    "node_mem_util",
    "reclaim_scanned_mib_s",
    "direct_reclaim_stalls",
    "disk_write_mib_s",
    "generator_lag_p99_ms",
    "agent_knobs_found",
    "published_batch_cpu_m",
    "published_batch_memory_mib",
    "load_1m_start",
    "load_1m_end",
    # the agent's tier over the measured window (colocation_cluster.Colocation._tier_trace; Tidemark arms only)
    "tier_ceiling_cores_p50",
    "online_wait_p50",
    "online_delay_ms_p50",
    "online_wait_over_share",
    "online_io_wait_p50",
    "io_limit_mib_s_p50",
    "io_unlimited_share",
)
#: bootstrap resamples and the interval's coverage
BOOTSTRAP_RESAMPLES = 4000
CONFIDENCE = 0.95
NO_DIFFERENCE = "no difference"


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (q in 0..100); None for an empty list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values) / 100.0 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(records: list[tuple[float, float, float]], t0: float, t1: float) -> dict[str, Any]:
    """The generator's records (intended send time, latency or NaN for an error, send lag) whose intended
    time lies in [t0, t1): percentiles in ms of the answered ones, the answered rate, the errors."""
    inside = [r for r in records if t0 <= r[0] < t1]
    ok = sorted(r[1] for r in inside if not math.isnan(r[1]))
    lags = sorted(r[2] for r in inside if not math.isnan(r[2]))
    span = max(t1 - t0, 1e-9)

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000.0, 3)

    return {
        "online_p50_ms": ms(percentile(ok, 50)),
        "online_p99_ms": ms(percentile(ok, 99)),
        "online_p999_ms": ms(percentile(ok, 99.9)),
        "online_max_ms": ms(ok[-1] if ok else None),
        "online_rps": round(len(ok) / span, 2),
        "online_errors": len(inside) - len(ok),
        "online_requests": len(inside),
        "generator_lag_p99_ms": ms(percentile(lags, 99)),
    }


def median_range(values: list[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "min": None, "max": None, "n": 0}
    med = statistics.median(got)
    return {"median": round(med, 4), "min": round(min(got), 4), "max": round(max(got), 4), "n": len(got)}


def fit_rate(points: list[tuple[float, float]], target_cores: float) -> float:
    """The rate at which the online pod uses `target_cores`, from (requests/s, cores) points: the least-squares
    line through the origin (an idle nginx uses nothing), rounded to 10 requests/s."""
    num = sum(r * c for r, c in points)
    den = sum(r * r for r, _ in points)
    if num <= 0 or den <= 0:
        raise ValueError(f"calibration gave no CPU cost per request: {points}")
    return float(max(10, round(target_cores / (num / den) / 10.0) * 10))


# --- paired ratios and their intervals ------------------------------------------------------------------------
def paired_ratios(cells: list[dict[str, Any]], kind: str, arm: str, base_arm: str, name: str,
                  load: str = "third") -> list[float]:
    """Per round, `name` of (kind, arm, load) over the same of the same round's `base_arm` cell; rounds where
    either is missing, or the base is 0, are left out (a ratio needs both halves of the pair)."""
    def by_round(a: str) -> dict[int, float]:
        return {int(c["round"]): float(c[name]) for c in cells
                if c["kind"] == kind and c["arm"] == a and c.get("load_level", "third") == load
                and c.get(name) is not None}

    num, den = by_round(arm), by_round(base_arm)
    return [num[r] / den[r] for r in sorted(num) if r in den and den[r] > 0]


def bootstrap_median(values: list[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
                     confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The median of `values` and a percentile-bootstrap interval of it (the rounds resampled with replacement,
    numpy's generator seeded: the same figures give the same interval). Fewer than two values: no interval."""
    if not values:
        return {"median": None, "lo": None, "hi": None, "n": 0}
    med = float(np.median(values))
    if len(values) < 2:
        return {"median": round(med, 4), "lo": None, "hi": None, "n": 1}
    rng = np.random.default_rng(seed)
    data = np.asarray(values, dtype=float)
    draws = rng.integers(0, len(data), size=(resamples, len(data)))
    meds = np.median(data[draws], axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(meds, [tail, 100.0 - tail])
    return {"median": round(med, 4), "lo": round(float(lo), 4), "hi": round(float(hi), 4), "n": len(values)}


def compare(a: dict[str, Any], b: dict[str, Any]) -> str:
    """`lower`, `higher` or NO_DIFFERENCE: a's interval against b's; overlapping intervals (or one missing)
    are no difference. A point (lo = hi, e.g. the base arm's own ratio 1) is an interval too."""
    if a.get("lo") is None or a.get("hi") is None or b.get("lo") is None or b.get("hi") is None:
        return NO_DIFFERENCE
    if a["hi"] < b["lo"]:
        return "lower"
    if a["lo"] > b["hi"]:
        return "higher"
    return NO_DIFFERENCE


UNIT = {"median": 1.0, "lo": 1.0, "hi": 1.0, "n": 0}


def ratio_stats(cells: list[dict[str, Any]], kind: str, arm: str, load: str, seed: int) -> dict[str, Any]:
    """`p99_ratio_to_alone`, `work_ratio_to_besteffort` and `p99_ratio_to_besteffort` of one arm, each {"median",
    "lo", "hi", "n"}: the base arm's own ratio is exactly 1; `alone` has no ratio to BestEffort (it runs no offline
    pod). The p99 against BestEffort's is paired too: the same round's BestEffort cell, not the overlap of two
    intervals to alone (which called 1.29 [1.02-1.48] no difference)."""
    out: dict[str, Any] = {}
    for key, base, name in (("p99_ratio_to_alone", "alone", "online_p99_ms"),
                            ("work_ratio_to_besteffort", "kubelet_besteffort", "offline_work_per_s"),
                            ("p99_ratio_to_besteffort", "kubelet_besteffort", "online_p99_ms")):
        if arm == base:
            out[key] = dict(UNIT, n=len(paired_ratios(cells, kind, arm, base, name, load)))
        elif key != "p99_ratio_to_alone" and arm in ONLINE_ONLY_ARMS:
            out[key] = {"median": None, "lo": None, "hi": None, "n": 0}
        else:
            out[key] = bootstrap_median(paired_ratios(cells, kind, arm, base, name, load), seed=seed)
    return out


def _level(cells: list[dict[str, Any]], load: str, seed: int) -> dict[str, Any]:
    """One load level's part of the summary: medians, ranges, more, with the ratios added to every arm."""
    kinds: dict[str, dict[str, dict[str, Any]]] = {}
    ranges: dict[str, dict[str, dict[str, Any]]] = {}
    more: dict[str, dict[str, dict[str, Any]]] = {}
    rounds = 0
    for k, kind in enumerate(KINDS):
        for a, arm in enumerate(ALL_ARMS):
            rows = [c for c in cells if c["kind"] == kind and c["arm"] == arm and c.get("load_level", "third") == load]
            if not rows:
                continue
            rounds = max(rounds, len(rows))
            stats = {f: median_range([r.get(f) for r in rows]) for f in FIELDS}
            entry: dict[str, Any] = {f: s["median"] for f, s in stats.items()}
            entry.update(ratio_stats(cells, kind, arm, load, seed=seed + 100 * k + a))
            kinds.setdefault(kind, {})[arm] = entry
            ranges.setdefault(kind, {})[arm] = {f: [s["min"], s["max"]] for f, s in stats.items()}
            more.setdefault(kind, {})[arm] = {f: median_range([r.get(f) for r in rows]) for f in MORE_FIELDS}
    return {"kinds": kinds, "ranges": ranges, "more": more, "rounds": rounds}


def level_key(base: str, load: str) -> str:
    """The JSON key of a load level's part: `kinds` for the first level, `kinds_two_thirds` for the second."""
    return base if load == next(iter(LOAD_LEVELS)) else f"{base}_{load}"


def summarize(cells: list[dict[str, Any]], loads: list[float], seed: int = 0) -> dict[str, Any]:
    """The JSON: per load level, medians (with ranges) per kind and arm and each arm's paired ratios with
    their intervals; the lower level under `kinds`/`ranges`/`more` (today's shape), the others under
    `kinds_<level>` etc.; the raw cells under `raw` (each with its load averages), the loads beside them."""
    out: dict[str, Any] = {"kinds": {}, "ranges": {}, "more": {}, "rounds": 0}
    levels = [lv for lv in LOAD_LEVELS if any(c.get("load_level", "third") == lv for c in cells)]
    for load in levels:
        part = _level(cells, load, seed)
        for key in ("kinds", "ranges", "more"):
            out[level_key(key, load)] = part[key]
        out["rounds"] = max(out["rounds"], part["rounds"])
    out.update(load_levels=levels, load=loads, raw=cells, seed=seed)
    return out


def levels_of(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(load level, its kinds, its ranges) for every level the summary has."""
    out = []
    for load in summary.get("load_levels") or ["third"]:
        kinds = summary.get(level_key("kinds", load))
        if kinds:
            out.append((load, kinds, summary.get(level_key("ranges", load)) or {}))
    return out


# --- the goals (issue 32) ---------------------------------------------------------------------------------------
WORK_GOAL = {"cpu": 0.90, "memory": 0.80, "io": 0.80}


def _fmt(ci: dict[str, Any]) -> str:
    if ci.get("median") is None:
        return "-"
    if ci.get("lo") is None:
        return f"{ci['median']:.2f}"
    return f"{ci['median']:.2f} [{ci['lo']:.2f}-{ci['hi']:.2f}]"


def _idle_rounds(summary: dict[str, Any], kind: str, arm: str, load: str) -> int:
    return sum(1 for c in summary["raw"] if c["kind"] == kind and c["arm"] == arm
               and c.get("load_level", "third") == load and not c.get("offline_pods_running"))


def _arm_goals(summary: dict[str, Any], load: str, kinds: dict[str, Any], arm: str, kind: str
               ) -> list[tuple[str, bool | None, str]]:
    """The goals of one Tidemark arm in one kind at one load level."""
    got = kinds.get(kind, {}).get(arm)
    if not got:
        return []
    idle = _idle_rounds(summary, kind, arm, load)
    note = f"; not measured: {arm} ran no offline pod in {idle} round(s)" if idle else ""
    out: list[tuple[str, bool | None, str]] = []

    def add(goal: str, met: bool, detail: str) -> None:
        out.append((f"{kind}/{load}: {arm} {goal}", None if note else met, detail + note))

    p99 = got["p99_ratio_to_alone"]
    if p99["median"] is not None:
        add("p99 <= 1.10 x alone (upper end <= 1.25)",
            p99["median"] <= 1.10 and (p99["hi"] is None or p99["hi"] <= 1.25), _fmt(p99))
    work = got["work_ratio_to_besteffort"]
    if work["median"] is not None:
        add(f"offline work >= {WORK_GOAL[kind]:.0%} of kubelet_besteffort's", work["median"] >= WORK_GOAL[kind],
            _fmt(work))
    util = got.get("node_cpu_util")
    if kind == "cpu" and util is not None:
        add("node CPU >= 80 %", util >= 0.80, f"{util:.0%}")
    be = kinds.get(kind, {}).get("kubelet_besteffort")
    if kind in ("memory", "io") and be:
        verdict = compare(p99, be["p99_ratio_to_alone"])
        add("p99 below kubelet_besteffort's (intervals apart)", verdict == "lower",
            f"{_fmt(p99)} vs {_fmt(be['p99_ratio_to_alone'])}: {verdict}")
    return out


def goals(summary: dict[str, Any], arms: tuple[str, ...] = ("tidemark", "tidemark_nolimits")
          ) -> list[tuple[str, bool | None, str]]:
    """Issue 32's goals for each Tidemark arm at each load level, each (goal, met or None when not measured,
    figures): p99 at most 1.10 x alone (paired median; the interval's upper end at most 1.25); offline work at
    least 90 % (cpu) / 80 % (memory, io) of kubelet_besteffort's; node CPU at least 80 % in the cpu kind; in
    memory and io a p99 below kubelet_besteffort's with intervals that do not overlap; no offline eviction;
    zero online evictions, OOM kills or restarts."""
    out: list[tuple[str, bool | None, str]] = []
    for load, kinds, _ranges in levels_of(summary):
        for arm in arms:
            for kind in KINDS:
                out += _arm_goals(summary, load, kinds, arm, kind)
    tm = [c for c in summary["raw"] if c["arm"] in TIDEMARK_ARMS]

    def where(c: dict[str, Any]) -> str:
        return f"{c['kind']}/{c.get('load_level', 'third')}/{c['arm']} round {c['round']}"

    bad = [where(c) for c in tm
           if (c.get("online_evictions") or 0) + (c.get("online_restarts") or 0) + (c.get("online_ooms") or 0)]
    evicted = [where(c) for c in tm if c["arm"] in arms and c.get("offline_evictions")]
    if tm:
        out.append(("no offline eviction (the online load is steady in every cell)", not evicted,
                    ", ".join(evicted) or "none"))
        out.append(("zero online evictions, OOM kills or restarts with Tidemark", not bad, ", ".join(bad) or "none"))
    return out
