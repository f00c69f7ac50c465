"""benchmarks/bench_colocation.py: parsing, statistics, the pods, the schedule, the JSON shape and the open-loop
generator against a local server (pure parts and loopback only: no cluster, no root)."""

from __future__ import annotations

import array
import asyncio
import importlib.util
import itertools
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import yaml

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_colocation.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_colocation", PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_colocation"] = mod
    spec.loader.exec_module(mod)
    return mod


# stress-ng 0.15.06's own output (Debian bookworm), as the benchmark's pods write it
BRIEF = """stress-ng: info:  [28857] setting to a 3 second run per stressor
stress-ng: info:  [28857] dispatching hogs: 1 cpu
stress-ng: metrc: [28857] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s
stress-ng: metrc: [28857]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)
stress-ng: metrc: [28857] cpu                 821      3.00      0.94      0.00       273.54         870.63
stress-ng: metrc: [28857] vm                30118      3.04      0.72      0.42      9897.44       26439.87
stress-ng: info:  [28857] successful run completed in 3.01s
"""
YAML = """---
system-info:
      stress-ng-version: 0.15.06
      run-by: root
metrics:
    - stressor: hdd
      bogo-ops: 4096
      bogo-ops-per-second-usr-sys-time: 8000.0
      bogo-ops-per-second-real-time: 409.6
      wall-clock-time: 10.000000
      user-time: 0.100000
      system-time: 0.412000
      cpu-usage-per-instance: 5.1
      max-rss: 3188
...
"""


def test_stress_ng_metrics_brief_and_yaml(bench: ModuleType) -> None:
    brief = bench.parse_metrics_brief(BRIEF)
    assert brief["cpu"] == {"bogo_ops": 821.0, "real_time_s": 3.0, "usr_s": 0.94, "sys_s": 0.0, "ops_per_s": 273.54}
    assert brief["vm"]["bogo_ops"] == 30118.0 and set(brief) == {"cpu", "vm"}
    y = bench.parse_stress_yaml(YAML)
    assert y == {"hdd": {"bogo_ops": 4096.0, "real_time_s": 10.0, "usr_s": 0.1, "sys_s": 0.412, "ops_per_s": 409.6}}
    assert bench.parse_stress_yaml("") == {} and bench.parse_stress_yaml(": : :") == {}


def test_offline_work_sums_the_pods_over_the_longest_run(bench: ModuleType) -> None:
    runs = {
        "a": {"cpu": {"bogo_ops": 1000.0, "real_time_s": 10.0}},
        "b": {"cpu": {"bogo_ops": 500.0, "real_time_s": 5.0}},  # evicted half-way: what it did counts
        "c": {},  # never ran (no capacity, or killed without its metrics): 0
    }
    assert bench.offline_work(runs, "cpu") == 150.0
    assert bench.offline_work(runs, "vm") == 0.0
    assert bench.offline_work({}, "cpu") == 0.0


def test_percentiles_are_nearest_rank(bench: ModuleType) -> None:
    v = [float(i) for i in range(1, 1001)]
    assert bench.percentile(v, 50) == 500.0
    assert bench.percentile(v, 99) == 990.0
    assert bench.percentile(v, 99.9) == 999.0
    assert bench.percentile(v, 100) == 1000.0
    assert bench.percentile([7.0], 99.9) == 7.0
    assert bench.percentile([], 50) is None


def test_latency_summary_counts_the_window_and_the_errors(bench: ModuleType) -> None:
    nan = math.nan
    records = [(0.5, 0.001, 0.0)]  # before the window
    records += [(1.0 + i * 0.01, 0.002 + (0.1 if i == 99 else 0.0), 0.0001) for i in range(100)]
    records += [(1.5, nan, nan), (1.6, nan, nan)]  # two errors inside
    records += [(3.5, 5.0, 0.0)]  # after
    s = bench.latency_summary(records, 1.0, 3.0)
    assert s["online_requests"] == 102 and s["online_errors"] == 2
    assert s["online_rps"] == 50.0
    assert s["online_p50_ms"] == 2.0 and s["online_p999_ms"] == 102.0 and s["online_max_ms"] == 102.0
    assert s["generator_lag_p99_ms"] == 0.1
    empty = bench.latency_summary([], 0.0, 1.0)
    assert empty["online_p99_ms"] is None and empty["online_rps"] == 0.0


def test_median_range_and_rate_fit(bench: ModuleType) -> None:
    assert bench.median_range([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert bench.median_range([None]) == {"median": None, "min": None, "max": None, "n": 0}
    # 1 ms of CPU per request: a third of a core at 333 req/s, rounded to 330
    assert bench.fit_rate([(100.0, 0.1), (200.0, 0.2), (400.0, 0.4)], 1 / 3) == 330.0
    with pytest.raises(ValueError):
        bench.fit_rate([(100.0, 0.0)], 0.3)


def cell(kind: str, arm: str, rnd: int, p99: float, util: float, work: float | None, **more: Any) -> dict[str, Any]:
    return {"kind": kind, "arm": arm, "round": rnd, "online_p50_ms": p99 / 2, "online_p99_ms": p99,
            "online_p999_ms": p99 * 2, "online_rps": 400.0, "online_errors": 0, "node_cpu_util": util,
            "offline_work_per_s": work, "online_evictions": 0, "online_restarts": 0, "offline_evictions": 0,
            "load_1m_start": 1.0, "load_1m_end": 1.5, "offline_pods_running": 0 if arm == "alone" else 2, **more}


RATIO_KEYS = {"median", "lo", "hi", "n"}


def test_summary_json_shape(bench: ModuleType) -> None:
    """Today's keys (kinds.KIND.ARM medians, ranges, more, rounds, load, raw) kept for the lower load level, every
    arm with its two paired ratios, the higher level under kinds_two_thirds in the same shape."""
    cells = []
    for rnd in range(3):
        for load, scale in (("third", 1.0), ("two_thirds", 2.0)):
            for kind in bench.KINDS:
                cells.append(cell(kind, "alone", rnd, (2.0 + rnd) * scale, 0.17, None, load_level=load))
                cells.append(cell(kind, "kubelet_besteffort", rnd, (4.0 + rnd) * scale, 0.95, 1000.0, load_level=load))
                cells.append(cell(kind, "kubelet_burstable", rnd, (20.0 + rnd) * scale, 0.95, 1200.0, load_level=load))
                cells.append(cell(kind, "tidemark", rnd, (2.1 + rnd) * scale, 0.85, 950.0, load_level=load))
    s = bench.summarize(cells, [1.0, 2.0])
    assert set(s["kinds"]) == set(bench.KINDS) and s["rounds"] == 3 and s["load"] == [1.0, 2.0]
    assert s["load_levels"] == ["third", "two_thirds"]
    for key in ("kinds", "kinds_two_thirds"):
        for kind in bench.KINDS:
            assert set(s[key][kind]) == set(bench.ARMS)
            for arm in bench.ARMS:
                got = s[key][kind][arm]
                assert set(got) == {*bench.FIELDS, "p99_ratio_to_alone", "work_ratio_to_besteffort",
                                    "p99_ratio_to_besteffort"}
                assert set(got["p99_ratio_to_alone"]) == RATIO_KEYS
                assert set(got["work_ratio_to_besteffort"]) == RATIO_KEYS
    assert set(s["ranges_two_thirds"]["cpu"]["tidemark"]) == set(bench.FIELDS)
    assert s["kinds"]["cpu"]["tidemark"]["online_p99_ms"] == 3.1
    assert s["kinds_two_thirds"]["cpu"]["tidemark"]["online_p99_ms"] == 6.2
    assert s["ranges"]["cpu"]["tidemark"]["online_p99_ms"] == [2.1, 4.1]
    assert s["kinds"]["cpu"]["alone"]["offline_work_per_s"] is None
    assert s["kinds"]["cpu"]["alone"]["p99_ratio_to_alone"] == {"median": 1.0, "lo": 1.0, "hi": 1.0, "n": 3}
    assert s["kinds"]["cpu"]["alone"]["work_ratio_to_besteffort"]["median"] is None
    assert s["kinds"]["io"]["tidemark"]["work_ratio_to_besteffort"]["median"] == 0.95
    # the load average beside each cell: in the raw cells and as medians under `more`
    assert s["raw"] is cells and set(s["more"]["io"]["tidemark"]) == set(bench.MORE_FIELDS)
    assert s["more"]["io"]["tidemark"]["load_1m_start"]["median"] == 1.0
    json.dumps(s)  # plain JSON
    verdict = {g: met for g, met, _ in bench.goals(s)}
    assert verdict["cpu/third: tidemark offline work >= 90% of kubelet_besteffort's"] is True  # 950 of 1000
    assert verdict["cpu/third: tidemark node CPU >= 80 %"] is True
    assert verdict["memory/two_thirds: tidemark p99 below kubelet_besteffort's (intervals apart)"] is True
    assert verdict["zero online evictions, OOM kills or restarts with Tidemark"] is True
    assert verdict["no offline eviction (the online load is steady in every cell)"] is True
    cells.append(cell("cpu", "tidemark", 3, 2.0, 0.7, 100.0, online_restarts=1, offline_evictions=1))
    verdict2 = {g: (met, why) for g, met, why in bench.goals(bench.summarize(cells, []))}
    online = verdict2["zero online evictions, OOM kills or restarts with Tidemark"]
    assert online == (False, "cpu/third/tidemark round 3")
    assert verdict2["no offline eviction (the online load is steady in every cell)"][0] is False
    # a tidemark arm that placed no offline pod (nothing published) measured nothing: not a met goal
    cells.append(cell("io", "tidemark", 3, 2.0, 0.2, 0.0, offline_pods_running=0))
    verdict2 = {g: (met, why) for g, met, why in bench.goals(bench.summarize(cells, []))}
    met, why = verdict2["io/third: tidemark p99 <= 1.10 x alone (upper end <= 1.25)"]
    assert met is None and "no offline pod in 1 round(s)" in why


def test_pairing_takes_the_same_rounds_kind_and_level(bench: ModuleType) -> None:
    """Each cell is divided by the SAME round's base cell of its kind and load level; a round missing either
    half of the pair is left out, as is a base of 0."""
    cells = [cell("cpu", "alone", 0, 10.0, 0.1, None), cell("cpu", "tidemark", 0, 20.0, 0.5, 5.0),
             cell("cpu", "alone", 1, 100.0, 0.1, None), cell("cpu", "tidemark", 1, 110.0, 0.5, 5.0),
             cell("cpu", "tidemark", 2, 999.0, 0.5, 5.0),  # no alone cell in round 2
             cell("memory", "alone", 2, 1.0, 0.1, None),  # another kind: not a pair
             cell("cpu", "alone", 2, 1.0, 0.1, None, load_level="two_thirds"),  # another level: not a pair
             cell("cpu", "alone", 3, 0.0, 0.1, None), cell("cpu", "tidemark", 3, 5.0, 0.5, 5.0)]  # base 0
    assert bench.paired_ratios(cells, "cpu", "tidemark", "alone", "online_p99_ms") == [2.0, 1.1]
    # unpaired, the medians would say 20 vs 10 ms = 2x; paired, the noisy round 1 counts as what it is
    s = bench.summarize(cells, [])
    assert s["kinds"]["cpu"]["tidemark"]["p99_ratio_to_alone"]["median"] == 1.55
    assert s["kinds"]["cpu"]["tidemark"]["p99_ratio_to_alone"]["n"] == 2
    # the p99 against BestEffort's is paired by round as well
    be = [cell("cpu", "kubelet_besteffort", r, p99, 0.9, 10.0) for r, p99 in ((0, 10.0), (1, 200.0))]
    s = bench.summarize(cells + be, [])
    assert s["kinds"]["cpu"]["tidemark"]["p99_ratio_to_besteffort"]["median"] == (2.0 + 0.55) / 2
    assert s["kinds"]["cpu"]["alone"]["p99_ratio_to_besteffort"]["median"] is None


def test_bootstrap_interval_is_seeded_and_holds_the_true_ratio(bench: ModuleType) -> None:
    rng = np.random.default_rng(7)
    base = rng.lognormal(mean=2.0, sigma=0.6, size=25)  # a noisy baseline that moves every round
    arm = base * 1.5 * rng.lognormal(mean=0.0, sigma=0.1, size=25)  # 1.5 x the same round, a little noise
    cells = [c for i in range(25) for c in (cell("cpu", "alone", i, float(base[i]), 0.1, None),
                                            cell("cpu", "tidemark", i, float(arm[i]), 0.5, 1.0))]
    ratios = bench.paired_ratios(cells, "cpu", "tidemark", "alone", "online_p99_ms")
    ci = bench.bootstrap_median(ratios, seed=3)
    assert ci["lo"] < 1.5 < ci["hi"] and ci["hi"] - ci["lo"] < 0.2 and ci["n"] == 25
    assert bench.bootstrap_median(ratios, seed=3) == ci  # deterministic
    # and the pairing is what finds it: the baseline's own spread (sigma 0.6) makes the unpaired interval wide
    unpaired = bench.bootstrap_median([float(a / b) for a, b in zip(arm, np.roll(base, 1), strict=True)], seed=3)
    assert unpaired["hi"] - unpaired["lo"] > 3 * (ci["hi"] - ci["lo"])
    assert bench.bootstrap_median([]) == {"median": None, "lo": None, "hi": None, "n": 0}
    assert bench.bootstrap_median([2.0]) == {"median": 2.0, "lo": None, "hi": None, "n": 1}
    same = bench.bootstrap_median([1.2] * 7)
    assert same["lo"] == same["hi"] == same["median"] == 1.2


def test_overlapping_intervals_are_no_difference(bench: ModuleType) -> None:
    a = {"median": 1.0, "lo": 0.9, "hi": 1.2}
    assert bench.compare(a, {"median": 1.3, "lo": 1.15, "hi": 1.5}) == bench.NO_DIFFERENCE
    assert bench.compare(a, {"median": 1.5, "lo": 1.3, "hi": 1.7}) == "lower"
    assert bench.compare({"median": 2.0, "lo": 1.8, "hi": 2.3}, a) == "higher"
    assert bench.compare(a, {"median": 1.0, "lo": None, "hi": None}) == bench.NO_DIFFERENCE
    one = {"median": 1.0, "lo": 1.0, "hi": 1.0}
    assert bench.ratio_text({"median": 1.05, "lo": 0.92, "hi": 1.21, "n": 7}, one) == \
        "no difference (1.05 [0.92-1.21])"
    assert bench.ratio_text({"median": 1.8, "lo": 1.4, "hi": 2.3, "n": 7}, one) == "1.80 [1.40-2.30] higher"
    assert bench.ratio_text(one, one) == "1.00"
    # the printed table and the markdown say it the same way
    cells = [c for i in range(5) for c in (
        cell("cpu", "alone", i, 10.0 + i, 0.1, None),
        cell("cpu", "kubelet_besteffort", i, 30.0 + 3 * i, 0.9, 1000.0 + i),
        cell("cpu", "tidemark", i, [9.0, 11.5, 12.0, 14.5, 13.0][i], 0.6, 990.0 + 5 * i))]
    s = bench.summarize(cells, [1.0])
    text, md = bench.table(s), bench.markdown(s)
    tm_line = next(line for line in text.splitlines() if " tidemark " in f" {line} ")
    assert "no difference (" in tm_line and "higher" not in tm_line
    be_line = next(line for line in text.splitlines() if "kubelet_besteffort" in line)
    assert "higher" in be_line  # 3 x alone in every round: a difference
    assert md.count("\n") == 4 and "| `tidemark` |" in md and "no difference" in md


def test_frontier_plot_is_written(bench: ModuleType, tmp_path: Path) -> None:
    cells = []
    for i in range(4):
        for load in ("third", "two_thirds"):
            cells += [cell("cpu", "alone", i, 10.0, 0.1, None, load_level=load),
                      cell("cpu", "kubelet_besteffort", i, 12.0 + i, 0.9, 1000.0, load_level=load)]
            for arm, p99, work in (("tidemark_s70", 10.5, 600.0), ("tidemark_nolimits", 11.0, 800.0),
                                   ("tidemark_s100", 12.0, 950.0), ("tidemark", 10.2, 450.0)):
                cells.append(cell("cpu", arm, i, p99 + 0.1 * i, 0.6, work + i, load_level=load))
    s = bench.summarize(cells, [1.0])
    pts = bench.frontier_points(s)
    assert set(pts) == {("third", "cpu"), ("two_thirds", "cpu")}
    got = pts[("third", "cpu")]
    assert got["alone"] == (0.0, 0.0, 0.0, 1.0, 1.0, 1.0)
    x, xlo, xhi, y, ylo, yhi = got["tidemark_s100"]
    assert xlo <= x <= xhi and ylo <= y <= yhi and 0.9 < x < 1.0 and 1.1 < y < 1.3
    assert [a for a in bench.FRONTIER_LINE if a in got] == list(bench.FRONTIER_LINE)
    pytest.importorskip("matplotlib")
    out = tmp_path / "frontier.png"
    assert bench.frontier_plot(s, out) is True
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    bars = tmp_path / "bars.png"
    assert bench.plot(s, bars) is True and bars.stat().st_size > 10_000


def resources(pod: dict[str, Any]) -> dict[str, Any]:
    res: dict[str, Any] = pod["spec"]["containers"][0]["resources"]
    return res


def test_the_offline_pods_of_each_arm(bench: ModuleType) -> None:
    size = bench.Sizing(cpu_milli=1000, memory_bytes=8 * 2**30, hog_bytes=6 * 2**30)
    assert bench.offline_pods("cpu", "alone", size, "img", "/ctl", "c") == []
    be = bench.offline_pods("cpu", "kubelet_besteffort", size, "img", "/ctl", "c")
    assert len(be) == 2 and all(resources(p) == {} and "schedulerName" not in p["spec"] for p in be)
    bu = bench.offline_pods("cpu", "kubelet_burstable", size, "img", "/ctl", "c")
    assert [resources(p)["requests"]["cpu"] for p in bu] == ["500m", "500m"]
    assert "limits" not in resources(bu[0]) and "schedulerName" not in bu[0]["spec"]
    tm = bench.offline_pods("cpu", "tidemark", size, "img", "/ctl", "c")
    for p in tm:
        assert p["spec"]["schedulerName"] == "volcano"
        assert p["metadata"]["annotations"] == {"volcano.sh/qos-level": "-1", "scheduling.k8s.io/group-name": "c"}
        assert resources(p)["requests"] == resources(p)["limits"]
        assert resources(p)["requests"]["kubernetes.io/batch-cpu"] == "500"
        assert "cpu" not in resources(p)["requests"]
    # the same job in every arm: only resources, scheduler and annotations differ
    cmd = {tuple(p["spec"]["containers"][0]["command"]) for p in be + bu + tm}
    assert len(cmd) == 1 and "--cpu-method matrixprod" in next(iter(cmd))[2]
    mem = bench.offline_pods("memory", "tidemark", size, "img", "/ctl", "m")
    assert len(mem) == 1 and resources(mem[0])["limits"]["kubernetes.io/batch-memory"] == str(8 * 2**30)
    script = mem[0]["spec"]["containers"][0]["command"][2]
    assert "--vm-bytes 6144M --vm-keep" in script and "truncate -s 64G /scratch/sparse" in script
    io = bench.offline_pods("io", "kubelet_burstable", size, "img", "/ctl", "i")
    scripts = [p["spec"]["containers"][0]["command"][2] for p in io]
    assert "--hdd-opts wr-seq" in scripts[0] and "--hdd-opts direct,wr-seq" in scripts[1]
    assert all(p["spec"]["volumes"][0]["hostPath"]["path"] == "/ctl" for p in io)
    assert bench.podgroup("c", 2)["spec"] == {"minMember": 2, "queue": "default"}
    with pytest.raises(ValueError):
        bench.offline_pods("cpu", "nonsense", size, "img", "/ctl", "c")


def test_online_pod_and_the_noqos_config(bench: ModuleType) -> None:
    pod = bench.online_pod("img")
    c = pod["spec"]["containers"][0]
    assert c["resources"] == {"requests": {"cpu": "1000m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    assert "gzip on;" in c["command"][2] and "access_log /var/log/nginx/access.log;" in c["command"][2]
    quiet = bench.online_pod("img", access_log=False)["spec"]["containers"][0]["command"][2]
    assert "access_log off;" in quiet and "access.log" not in quiet and "gzip on;" in quiet
    assert "annotations" not in pod["metadata"] and "schedulerName" not in pod["spec"]
    shipped = bench.shipped_agent_config()
    conf = yaml.safe_load(bench.noqos_config(shipped))
    assert conf["qos"]["enabled"] is False
    assert conf["capacity"] == yaml.safe_load(shipped)["capacity"]


def test_schedule_interleaves_arms_with_one_switch_per_round(bench: ModuleType) -> None:
    arms = list(bench.ALL_ARMS)
    loads = ["third", "two_thirds"]
    plan = bench.schedule(list(bench.KINDS), arms, 4, loads=loads)
    assert len(plan) == 4 * 3 * len(arms) * 2
    for r in range(4):
        got = sorted((k, a, lv) for rr, k, a, lv in plan if rr == r)
        assert got == sorted((k, a, lv) for k in bench.KINDS for a in arms for lv in loads)
    installed = [a in bench.TIDEMARK_ARMS for _, _, a, _ in plan]
    switches = sum(1 for x, y in itertools.pairwise(installed) if x != y)
    assert installed[0] is False and switches == 4  # off,on | on,off | off,on | on,off
    # inside a Tidemark half the arms are grouped by agent config: one agent restart per config change
    configs = [bench.arm_config(a) for _, _, a, _ in plan if a in bench.TIDEMARK_ARMS]
    n_configs = len({bench.arm_config(a) for a in arms if a in bench.TIDEMARK_ARMS})
    assert sum(1 for x, y in itertools.pairwise(configs) if x != y) <= 4 * (n_configs - 1) + 3
    assert bench.schedule(["cpu"], list(bench.ARMS), 2, first_on=True)[0][2] == "tidemark"
    # arms rotate: round 0 and round 1 start their kubelet half with different arms
    starts = [next(a for rr, _, a, _ in plan if rr == r and a not in bench.TIDEMARK_ARMS) for r in range(2)]
    assert starts[0] != starts[1]
    # a level may run fewer kinds (--quick: the higher level for cpu only)
    quick = bench.schedule(list(bench.KINDS), ["alone", "tidemark"], 2, loads=loads,
                           kinds_by_load={"two_thirds": ["cpu"]})
    assert sorted({(k, lv) for _, k, _, lv in quick}) == sorted(
        [("cpu", "third"), ("memory", "third"), ("io", "third"), ("cpu", "two_thirds")])
    assert len(quick) == 2 * 2 * 4


def test_suppress_settings_run_through_the_agent_config(bench: ModuleType) -> None:
    """tidemark_s70 / tidemark_s100: README's requests-only pods, the agent's tier.cpu.suppressRatio set in its
    ConfigMap; the rest of the shipped config unchanged (an agent without the key warns and ignores it)."""
    shipped = bench.shipped_agent_config()
    assert bench.arm_config("tidemark") == bench.arm_config("tidemark_nolimits") == "default"
    assert bench.arm_config("tidemark_s70") == "s70" and bench.arm_config("tidemark_s100") == "s100"
    assert bench.arm_config("tidemark_noqos") == "noqos"
    assert bench.arm_config("tidemark_w10") == "w10" and bench.arm_config("tidemark_nowait") == "w100"
    assert bench.arm_config("tidemark_w25") == "w25"
    assert yaml.safe_load(bench.agent_yaml_for("w10", shipped))["tier"]["cpu"]["onlineWaitTarget"] == 0.10
    assert yaml.safe_load(bench.agent_yaml_for("w100", shipped))["tier"]["cpu"]["onlineWaitTarget"] == 1.0
    assert bench.arm_config("tidemark_pcut") == "cut:proportional"
    assert yaml.safe_load(bench.agent_yaml_for("cut:proportional", shipped))["tier"]["cpu"]["cut"] == "proportional"
    assert "tidemark_pcut" in bench.REQUESTS_ONLY_ARMS and "tidemark_pcut" in bench.TIDEMARK_ARMS
    assert "tidemark_nowait" in bench.REQUESTS_ONLY_ARMS and "tidemark_w10" in bench.TIDEMARK_ARMS
    s70 = yaml.safe_load(bench.agent_yaml_for("s70", shipped))
    assert s70["tier"]["cpu"]["suppressRatio"] == 0.7
    rest = {k: v for k, v in s70.items() if k != "tier"}
    assert rest == {k: v for k, v in yaml.safe_load(shipped).items() if k != "tier"}
    assert yaml.safe_load(bench.agent_yaml_for("s100", "tier:\n  cpu:\n    raiseStep: 0.2\n"))["tier"]["cpu"] == \
        {"raiseStep": 0.2, "suppressRatio": 1.0}
    assert bench.agent_yaml_for("default", shipped) == shipped
    assert bench.arm_config("tidemark_open") == "open" and "tidemark_open" in bench.REQUESTS_ONLY_ARMS
    assert yaml.safe_load(bench.agent_yaml_for("open", shipped))["tier"]["cpu"] == {
        **(yaml.safe_load(shipped).get("tier", {}).get("cpu") or {}), "suppressRatio": 1.0, "onlineWaitSignal": "share",
        "onlineWaitTarget": 1.0}
    # the tier as shipped before 2026-12-01: the wait share and the system term, paired with the shipped arm
    assert bench.arm_config("tidemark_share") == "share" and "tidemark_share" in bench.REQUESTS_ONLY_ARMS
    assert "tidemark_share" in bench.TIDEMARK_ARMS
    share = yaml.safe_load(bench.agent_yaml_for("share", shipped))["tier"]["cpu"]
    assert share["onlineWaitSignal"] == "share" and share["subtractSystem"] is True
    assert bench.arm_config("tidemark_notier") == "notier" and "tidemark_notier" in bench.REQUESTS_ONLY_ARMS
    assert yaml.safe_load(bench.agent_yaml_for("notier", shipped))["tier"]["enabled"] is False
    with pytest.raises(ValueError):
        bench.agent_yaml_for("nonsense", shipped)
    size = bench.Sizing(cpu_milli=1000)
    for arm in ("tidemark_s70", "tidemark_s100", "tidemark_nolimits"):
        pods = bench.offline_pods("cpu", arm, size, "img", "/ctl", "c")
        assert all("limits" not in resources(p) and p["spec"]["schedulerName"] == "volcano" for p in pods)
        assert resources(pods[0])["requests"]["kubernetes.io/batch-cpu"] == "500"


def test_rates_per_load_level(bench: ModuleType) -> None:
    assert bench.fit_rate([(100.0, 0.1), (200.0, 0.2)], 2 / 3) == 670.0
    mod = sys.modules["bench_colocation"]
    assert mod.rates_from("260", ["third", "two_thirds"]) == {"third": 260.0, "two_thirds": 520.0}
    assert mod.rates_from("250,480", ["third", "two_thirds"]) == {"third": 250.0, "two_thirds": 480.0}
    args = mod.parse_args(["--quick", "--json", "/tmp/x.json"])
    assert mod.settle_args(args) == ""
    assert args.rounds == 2 and args.kinds_by_load == {"two_thirds": ["cpu"]} and args.loads == ["third", "two_thirds"]
    assert set(bench.FRONTIER_LINE) <= set(args.arm_list)
    full = mod.parse_args([])
    assert mod.settle_args(full) == "" and full.rounds == 7 and full.json.endswith("results/colocation.json")
    assert full.frontier.endswith("results/colocation-frontier.png")
    assert mod.settle_args(mod.parse_args(["--rounds", "1"])) != ""
    assert "unknown" in mod.settle_args(mod.parse_args(["--arms", "nope"]))


async def _server(delay_first: float) -> tuple[asyncio.Server, int, list[int]]:
    """An HTTP/1.1 keep-alive server answering chunked like nginx's gzip; the first answer waits `delay_first`."""
    served = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                served[0] += 1
                if served[0] == 1:
                    await asyncio.sleep(delay_first)
                body = b"x" * 3000
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], served


def test_open_loop_generator_measures_from_the_intended_send_time(bench: ModuleType, tmp_path: Path) -> None:
    """A server stall of 0.3 s on the first request: with ONE connection, every request scheduled during the
    stall waits behind it, and its latency counts from when it was due (a closed-loop generator would have sent
    nothing meanwhile and reported one slow request)."""
    out = tmp_path / "records.bin"

    async def run() -> dict[str, Any]:
        server, port, _served = await _server(0.3)
        async with server:
            summary: dict[str, Any] = await bench._generate("127.0.0.1", port, 100.0, str(out), max_conns=1,
                                                            timeout=5.0, duration=0.6)
        return summary

    summary = asyncio.run(run())
    data = array.array("d")
    data.frombytes(out.read_bytes())
    records = [(data[i], data[i + 1], data[i + 2]) for i in range(0, len(data), 3)]
    assert summary["records"] == len(records) and summary["connections"] == 1
    assert 50 <= len(records) <= 70  # 100/s for 0.6 s, all sent whatever the answers did
    assert not any(math.isnan(lat) for _, lat, _ in records)
    records.sort()
    assert records[0][1] >= 0.29  # the stalled request
    assert records[10][1] >= 0.15  # due 0.1 s after it, answered after the stall: it waited ~0.2 s
    assert records[-1][1] < 0.1  # the backlog is gone at the end
    s = bench.latency_summary(records, records[0][0], records[-1][0] + 0.01)
    assert s["online_p99_ms"] >= 250 and s["online_errors"] == 0


def test_generator_reads_content_length_and_counts_refused_connections(bench: ModuleType, tmp_path: Path) -> None:
    async def cl() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nnope!HTTP/1.1 200 OK\r\n")
        assert await bench._read_response(reader) == 404
        assert await reader.readuntil(b"\r\n") == b"HTTP/1.1 200 OK\r\n"

    asyncio.run(cl())

    async def refused() -> dict[str, Any]:
        server, port, _ = await _server(0.0)
        server.close()
        await server.wait_closed()
        result: dict[str, Any] = await bench._generate("127.0.0.1", port, 50.0, str(tmp_path / "r.bin"),
                                                       max_conns=4, timeout=1.0, duration=0.2)
        return result

    summary = asyncio.run(refused())
    data = array.array("d")
    data.frombytes((tmp_path / "r.bin").read_bytes())
    assert summary["records"] >= 5 and all(math.isnan(data[i]) for i in range(1, len(data), 3))


def test_window_figures_from_two_counter_reads(bench: ModuleType) -> None:
    c0 = bench.Counters(t=10.0, kubepods_ns=0, web_ns=0, offline_ns=0, busy=(1000, 2000),
                        vm={"pgscan_kswapd": 0, "pgscan_direct": 0, "allocstall_normal": 0, "oom_kill": 0}, sectors=0)
    c1 = bench.Counters(t=20.0, kubepods_ns=12 * 10**9, web_ns=3 * 10**9, offline_ns=8 * 10**9, busy=(2500, 4000),
                        vm={"pgscan_kswapd": 2560, "pgscan_direct": 0, "allocstall_normal": 3, "oom_kill": 1},
                        sectors=2 * 20480)
    f = bench.window_figures(c0, c1, 2.0)
    assert f["node_cpu_util"] == 0.6  # 12 core-seconds over 10 s on 2 cores
    assert f["online_cores"] == 0.3 and f["offline_cores"] == 0.8
    assert f["node_busy_util"] == 0.75
    assert f["reclaim_scanned_mib_s"] == 1.0 and f["direct_reclaim_stalls"] == 3 and f["node_oom_kills"] == 1
    assert f["disk_write_mib_s"] == 2.0


def test_node_files_parse_on_v1_and_v2(bench: ModuleType) -> None:
    """The counters the benchmark reads from either node (colocation_node.py): v1 cpuacct.usage in ns, v2
    cpu.stat usage_usec; memory.stat / memory.events keys; whole disks only in /proc/diskstats."""
    node = sys.modules["colocation_node"]
    assert node.cpu_ns("123456789", "v1") == 123456789
    assert node.cpu_ns("usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n", "v2") == 2_500_000
    assert node.cpu_ns(None, "v2") == 0 and node.cpu_ns("", "v1") == 0
    assert node.stat_value("anon 4096\nfile 8192\n", "anon") == 4096
    assert node.stat_value("low 0\nhigh 3\nmax 1\noom 1\noom_kill 2\n", "oom_kill") == 2
    assert node.stat_value(None, "populated") == 0
    disks = (" 254       0 vda 100 0 800 50 200 0 4000 90 0 100 140\n"
             " 254       1 vda1 90 0 700 40 150 0 3000 80 0 90 120\n"
             "   7       0 loop0 1 0 8 0 0 0 64 0 0 0 0\n"
             " 259       0 nvme0n1 1 0 8 0 0 0 16 0 0 0 0\n")
    assert node.sectors_written(disks) == 4016
    assert node.busy_jiffies("cpu  10 1 5 100 4 2 3 0 0 0\ncpu0 1 1 1 1 1 1 1 1\n") == (21, 125)
    assert node.meminfo_bytes("MemTotal:  2048 kB\nMemAvailable: 1024 kB\n")["MemAvailable"] == 1024 * 1024


def test_the_worst_online_pod_is_read_from_the_agents_gauge(bench: ModuleType) -> None:
    """The tier scrape counts which pod the agent's `online_cpu_wait_pod_info` names (the pod holding the tier
    back), from the keys `parse_metrics` gives."""
    import colocation_cluster as cc

    from localcluster.agentmetrics import parse_metrics

    text = ('tidemark_agent_online_cpu_wait_ratio 0.12\n'
            'tidemark_agent_online_cpu_wait_pod_info{pod="bench/web",source="schedstat"} 1.0\n')
    keys = " ".join(k for k in parse_metrics(text) if k.startswith(cc.ONLINE_WAIT_POD))
    assert cc.WORST_POD.findall(keys) == ["bench/web"]


def test_tidemark_alone_installs_tidemark_and_runs_no_offline_pod(bench: ModuleType) -> None:
    """`tidemark_alone`: what Tidemark's own processes cost the online p99, paired with `alone`; no work ratio."""
    assert "tidemark_alone" in bench.TIDEMARK_ARMS and bench.arm_config("tidemark_alone") == "default"
    assert bench.offline_pods("cpu", "tidemark_alone", bench.Sizing(cpu_milli=1000), "img", "/ctl", "c") == []
    cells = [cell("cpu", "alone", r, 10.0, 0.2, None) for r in range(3)]
    cells += [cell("cpu", "tidemark_alone", r, 12.0, 0.2, None) for r in range(3)]
    stats = sys.modules["colocation_stats"].ratio_stats(cells, "cpu", "tidemark_alone", "third", 0)
    assert stats["p99_ratio_to_alone"]["median"] == 1.2 and stats["work_ratio_to_besteffort"]["median"] is None
