"""bench_colocation's output: the printed table, the same as markdown for docs/benchmarks-colocation.md, the bar
plot and the frontier plot (offline work against online p99, both as paired ratios with their intervals)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from colocation_stats import (
    ALL_ARMS,
    FRONTIER_LINE,
    NO_DIFFERENCE,
    UNIT,
    WORK_GOAL,
    compare,
    levels_of,
)


def _cell_text(m: dict[str, Any], r: dict[str, Any], name: str, fmt: str = "{:.2f}", pct: bool = False) -> str:
    v, (lo, hi) = m.get(name), r.get(name, [None, None])
    if v is None:
        return "-"
    if pct:
        return f"{v:.0%} ({lo:.0%}-{hi:.0%})"
    return f"{fmt.format(v)} ({fmt.format(lo)}-{fmt.format(hi)})"


def ratio_text(ci: dict[str, Any], ref: dict[str, Any] = UNIT) -> str:
    """A paired ratio with its interval, and `no difference` where the interval overlaps the reference's
    (by default the base arm's own ratio, 1): `1.80 [1.40-2.30] higher`, `no difference (0.97 [0.85-1.12])`."""
    if ci.get("median") is None:
        return "-"
    inner = f"{ci['median']:.2f}" + (f" [{ci['lo']:.2f}-{ci['hi']:.2f}]" if ci.get("lo") is not None else "")
    if ci.get("lo") == ci.get("hi") == ci.get("median") == ref.get("lo") == ref.get("hi"):
        return f"{ci['median']:.2f}"  # a point on the reference's point: the base arm itself
    verdict = compare(ci, ref)
    return f"{NO_DIFFERENCE} ({inner})" if verdict == NO_DIFFERENCE else f"{inner} {verdict}"


def rows(summary: dict[str, Any]) -> list[dict[str, str]]:
    """One row per load level, kind and arm: the figures as text (the printed table and the markdown's)."""
    out = []
    for load, kinds, ranges in levels_of(summary):
        for kind, arms in kinds.items():
            for arm, m in arms.items():
                r = ranges.get(kind, {}).get(arm, {})
                p99r = m.get("p99_ratio_to_alone") or {}
                loads = [c.get("load_1m_start") for c in summary["raw"] if c["kind"] == kind and c["arm"] == arm
                         and c.get("load_level", "third") == load and c.get("load_1m_start") is not None]
                out.append({
                    "kind": kind, "load": load, "arm": arm, "rounds": str(p99r.get("n") or len(loads)),
                    "p50": _cell_text(m, r, "online_p50_ms"), "p99": _cell_text(m, r, "online_p99_ms"),
                    "p99_alone": "1 (base)" if arm == "alone" else ratio_text(p99r),
                    "p99_be": ("-" if arm in ("alone", "kubelet_besteffort")
                               else ratio_text(m.get("p99_ratio_to_besteffort") or {})),
                    "cpu": _cell_text(m, r, "node_cpu_util", pct=True),
                    "work": _cell_text(m, r, "offline_work_per_s", "{:.0f}"),
                    "work_be": ("1 (base)" if arm == "kubelet_besteffort"
                                else ratio_text(m.get("work_ratio_to_besteffort") or {})),
                    "evict": f"{m.get('offline_evictions') or 0:.0f} / {m.get('online_evictions') or 0:.0f}",
                    "load1": f"{sorted(loads)[len(loads) // 2]:.1f}" if loads else "-",
                })
    return out


COLUMNS = (("kind", "kind", 7), ("load", "load", 11), ("arm", "arm", 20), ("rounds", "n", 3),
           ("p99", "p99 ms", 22), ("p99_alone", "p99 / alone (paired, 95 %)", 42),
           ("p99_be", "p99 / BE (paired, 95 %)", 42), ("cpu", "node CPU", 16), ("work", "offline ops/s", 20),
           ("work_be", "work / BE (paired, 95 %)", 42), ("evict", "evict off/on", 13), ("load1", "load1", 6))


def table(summary: dict[str, Any]) -> str:
    """Medians (ranges) and paired ratios [95 % intervals] per load level, kind and arm, one line each."""
    lines = ["".join(f"{title:<{w}} " for _, title, w in COLUMNS)]
    lines += ["".join(f"{row[key]:<{w}} " for key, _, w in COLUMNS) for row in rows(summary)]
    return "\n".join(line.rstrip() for line in lines)


def markdown(summary: dict[str, Any]) -> str:
    """The same table as markdown (docs/benchmarks-colocation.md)."""
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    sep = "|" + "---|" * len(COLUMNS)
    body = ["| " + " | ".join(f"`{row[key]}`" if key == "arm" else row[key] for key, _, _ in COLUMNS) + " |"
            for row in rows(summary)]
    return "\n".join([head, sep, *body])


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot")
        return None
    return plt


COLORS = {"alone": "tab:gray", "tidemark_alone": "tab:olive", "kubelet_besteffort": "tab:orange",
          "kubelet_burstable": "tab:red", "tidemark": "tab:blue", "tidemark_noqos": "tab:cyan",
          "tidemark_nolimits": "tab:purple",
          "tidemark_s70": "tab:green", "tidemark_s100": "tab:pink"}


def plot(summary: dict[str, Any], out: Path) -> bool:
    """Bars: the median p99 and node CPU of every arm per kind, ranges as error bars, one row per load level."""
    plt = _pyplot()
    if plt is None:
        return False
    import matplotlib

    levels = levels_of(summary)
    fig, axes = plt.subplots(len(levels), 2, figsize=(13, 4.6 * len(levels)), squeeze=False)
    for row, (load, kinds_d, ranges) in enumerate(levels):
        kinds = list(kinds_d)
        arms = [a for a in ALL_ARMS if any(a in kinds_d[k] for k in kinds)]
        width = 0.8 / max(1, len(arms))
        for ax, name, label in ((axes[row][0], "online_p99_ms", f"online p99 latency (ms), load {load}"),
                                (axes[row][1], "node_cpu_util", f"node CPU (kubepods / cores), load {load}")):
            for i, arm in enumerate(arms):
                xs, ys, lo, hi = [], [], [], []
                for k, kind in enumerate(kinds):
                    v = kinds_d[kind].get(arm, {}).get(name)
                    if v is None:
                        continue
                    r = ranges[kind][arm][name]
                    xs.append(k + (i - (len(arms) - 1) / 2) * width)
                    ys.append(v)
                    lo.append(v - r[0])
                    hi.append(r[1] - v)
                ax.bar(xs, ys, width * 0.95, yerr=[lo, hi], capsize=2, label=arm, color=COLORS.get(arm))
            ax.set_xticks(range(len(kinds)))
            ax.set_xticklabels([f"{k} interference" for k in kinds])
            ax.set_ylabel(label, fontsize=8)
            if name == "node_cpu_util":
                ax.set_ylim(0, 1)
                ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
            else:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.3g"))
                ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.3g"))
                ax.tick_params(axis="y", which="both", labelsize=7)
    axes[0][0].legend(fontsize=7)
    load_avg = summary.get("load") or [0.0]
    fig.suptitle(f"colocation ({summary.get('date', '')[:10]}, {summary.get('node', 'real node')}): medians of "
                 f"{summary['rounds']} round(s), bars = range; load average {min(load_avg):.1f}-{max(load_avg):.1f} "
                 f"on {summary.get('cores', 2):.0f} cores", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def frontier_points(summary: dict[str, Any]) -> dict[tuple[str, str], dict[str, tuple[float, ...]]]:
    """Per (load level, kind), per arm with both ratios: (work median, lo, hi, p99 median, lo, hi); an interval
    not known (one round) is the median itself. `alone` sits at work 0, p99 1."""
    out: dict[tuple[str, str], dict[str, tuple[float, ...]]] = {}
    for load, kinds, _ranges in levels_of(summary):
        for kind, arms in kinds.items():
            pts: dict[str, tuple[float, ...]] = {}
            for arm, m in arms.items():
                w, p = m.get("work_ratio_to_besteffort") or {}, m.get("p99_ratio_to_alone") or {}
                if arm == "alone":
                    pts[arm] = (0.0, 0.0, 0.0, 1.0, 1.0, 1.0)
                elif w.get("median") is not None and p.get("median") is not None:
                    pts[arm] = tuple(float(d[k] if d.get(k) is not None else d["median"])
                                     for d in (w, p) for k in ("median", "lo", "hi"))
            out[(load, kind)] = pts
    return out


def frontier_plot(summary: dict[str, Any], out: Path) -> bool:
    """Offline work / kubelet_besteffort's (x) against online p99 / alone (y), both paired medians with their
    95 % intervals as error bars, every arm, one panel per load level and kind; Tidemark's suppress settings
    (FRONTIER_LINE) joined by a line, the goals (p99 1.10 x alone, the kind's work share) dashed."""
    plt = _pyplot()
    if plt is None:
        return False
    import matplotlib

    points = frontier_points(summary)
    loads = list(dict.fromkeys(load for load, _ in points))
    kinds = list(dict.fromkeys(kind for _, kind in points))
    fig, axes = plt.subplots(max(1, len(loads)), max(1, len(kinds)), figsize=(4.6 * max(1, len(kinds)),
                             4.0 * max(1, len(loads))), squeeze=False)
    for (load, kind), pts in points.items():
        ax = axes[loads.index(load)][kinds.index(kind)]
        for arm, (x, xlo, xhi, y, ylo, yhi) in pts.items():
            ax.errorbar([x], [y], xerr=[[x - xlo], [xhi - x]], yerr=[[y - ylo], [yhi - y]], fmt="o", capsize=3,
                        color=COLORS.get(arm), label=arm)
        line = [pts[a] for a in FRONTIER_LINE if a in pts]
        if len(line) > 1:
            ax.plot([p[0] for p in line], [p[3] for p in line], "-", color="tab:green", alpha=0.6,
                    label="Tidemark, requests-only pods: suppress 0.70 / shipped / 1.00")
        ax.axhline(1.10, ls="--", lw=0.8, color="black")
        ax.axvline(WORK_GOAL.get(kind, 0.8), ls="--", lw=0.8, color="black")
        ax.set_title(f"{kind}, online load {load.replace('_', ' ')}", fontsize=9)
        ax.set_xlabel("offline work / kubelet_besteffort's (paired)", fontsize=8)
        ax.set_ylabel("online p99 / alone (paired)", fontsize=8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.2g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.2g"))
        ax.tick_params(axis="y", which="both", labelsize=7)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"colocation frontier ({summary.get('date', '')[:10]}, {summary.get('node', 'real node')}): "
                 f"paired medians of {summary['rounds']} round(s), bars = bootstrap 95 % intervals", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True
