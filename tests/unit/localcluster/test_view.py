"""`make run`'s live view (localcluster/view.py): the state it builds and the lines it draws, trends included."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from localcluster.agentmetrics import (
    ONLINE_DELAY,
    ONLINE_WAIT,
    TIER_CEILING,
    AgentReading,
    agent_metrics_url,
    http_get,
    parse_metrics,
    reading_of,
)
from localcluster.view import (
    BLOCKS,
    HIGH_LINE,
    LOW_LINE,
    RED,
    YELLOW,
    LiveView,
    Measure,
    Sample,
    build_state,
    columns,
    event_shown,
    event_text,
    level_chart,
    newest_events,
    render,
    state_line,
    trend,
)
from localcluster.watch import EventLine

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def node(**ann: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "annotations": ann},
        "status": {
            "allocatable": {
                "cpu": "2",
                "memory": "4Gi",
                "kubernetes.io/batch-cpu": "700",
                "kubernetes.io/batch-memory": str(2**30),
            }
        },
    }


def pod(name: str, uid: str, level: str, phase: str = "Running", **md: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid, "annotations": {"volcano.sh/qos-level": level}, **md},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase},
    }


MARKS = {"volcano.sh/evicting-cpu-high-watermark": "30", "volcano.sh/evicting-cpu-low-watermark": "15"}


def test_columns_put_each_sample_in_its_second_and_keep_the_highest() -> None:
    cols = columns([(99.6, 10.0), (99.8, 40.0), (98.5, 5.0), (30.0, 99.0), (100.5, 50.0), (99.0, None)], 100.0, 60, 60)
    assert len(cols) == 60
    assert cols[-1] == 40.0  # 99.6 and 99.8 share the newest second; the higher wins
    assert cols[-2] == 5.0
    assert cols[:-2] == [None] * 58  # older than a minute, from the future, or unknown: nothing


def test_trend_fills_eighths_and_draws_the_watermarks_where_no_bar_covers_them() -> None:
    # 100 % in the oldest column, 50 % two columns later, nothing in between or after.
    lines = trend([(41.0, 100.0), (43.0, 50.0)], 100.0, 30, 15, seconds=60, width=60, height=4)
    assert len(lines) == 5  # four rows (top first) and the time axis
    rows = [line.split("│")[1] for line in lines[:4]]
    assert all(len(r) == 60 for r in rows)
    top, upper, middle, bottom = rows
    assert [r[0] for r in rows] == [BLOCKS[8]] * 4  # 100 %: the whole column
    assert [r[2] for r in rows] == [" ", " ", BLOCKS[8], BLOCKS[8]]  # 50 %: the lower two rows of 25 %
    assert middle[1] == HIGH_LINE and middle[5:] == HIGH_LINE * 55  # 30 %: the row 25..50 %
    assert bottom[1] == LOW_LINE and bottom[5:] == LOW_LINE * 55  # 15 %: the row 0..25 %
    assert set(top[1:]) == {" "} and set(upper[1:]) == {" "}
    assert "high 30%" in lines[1 + 1] and "low 15%" in lines[3] and "100%" in lines[0]
    assert "60s ago" in lines[4] and lines[4].rstrip().endswith("now┘")


def test_trend_partial_blocks_and_colours_by_watermark_zone() -> None:
    # 20 % of a 4-row chart: 6.4 eighths of the bottom row -> the 6-eighths block.
    plain = trend([(99.5, 20.0)], 100.0, 30, 15, width=10, height=4)
    assert plain[3].split("│")[1][-1] == BLOCKS[6]
    coloured = trend([(97.5, 40.0), (98.5, 20.0), (99.5, 10.0)], 100.0, 30, 15, width=10, seconds=10, color=True)
    bottom = coloured[3]
    assert f"{RED}{BLOCKS[8]}" in bottom and f"{YELLOW}{BLOCKS[6]}" in bottom  # 40 >= high; 15 < 20 < 30
    assert "\x1b[32m" + BLOCKS[3] in bottom  # 10 <= low: green
    assert ANSI.sub("", bottom) == ANSI.sub(
        "", trend([(97.5, 40.0), (98.5, 20.0), (99.5, 10.0)], 100.0, 30, 15, width=10, seconds=10)[3]
    )


def test_both_watermarks_in_one_row_share_its_label() -> None:
    lines = trend([], 10.0, 20, 10, height=4)
    assert "20/10%" in lines[3] and set(lines[3].split("│")[1]) == {HIGH_LINE}


def test_render_shows_usage_watermarks_trends_b_x_pods_events_and_narrative() -> None:
    n = node(
        **MARKS,
        **{
            "tidemark.io/node-usage": json.dumps({"cpu": 12.5, "memory": 20}),
            "volcano.sh/oversubscription-cpu": "600",
            "volcano.sh/offline-job-evicting": "true",
        },
    )
    pods = [pod("web", "u1", "2"), pod("job-0", "u2", "-1", deletionTimestamp="2026-01-01T00:00:00Z")]
    history = [Sample(float(t), 40.0, 20.0) for t in range(50, 100)]
    st = build_state(
        "n1",
        100.0,
        n,
        pods,
        pod_cpu={"u1": 0.95, "u2": 0.01},
        cpu_pct=40.0,
        memory_pct=20.0,
        events=["01:02:03 Normal Evicted Pod/job-0 [tidemark-agent]: " + "x" * 300],
        narrative=["  1.0s == 3. eviction"],
        phase="3. eviction",
        history=history,
        footer=["verdict: PASSED"],
    )
    lines = render(st, width=100, color=False)
    text = "\n".join(lines)
    assert not ANSI.search(text)
    assert "EVICTING" in text and "3. eviction" in text
    assert "cpu    40.0% of allocatable" in text and "agent's smoothed 12.5%" in text
    assert "watermarks high 30% low 15%" in text and "watermarks high 60% low 30%" in text  # memory: defaults
    assert text.count("60s ago") == 2  # a trend for cpu and one for memory
    assert "batch-cpu 700m" in text and "batch-memory 1.0Gi" in text and "oversubscription-cpu 600" in text
    assert re.search(r"web +online +2  Running +0\.95", text)
    assert re.search(r"job-0 +offline +-1  Terminating +0\.01", text)
    assert all(len(line) < 100 for line in lines if "Evicted" in line)
    assert lines[-1] == "verdict: PASSED"
    assert any(BLOCKS[8] in line for line in lines)  # 40 % history drawn
    assert "\x1b[31m" in "\n".join(render(st, width=100, color=True))


def test_bad_or_missing_node_fields_show_as_dashes() -> None:
    bad = {"metadata": {"annotations": {"tidemark.io/node-usage": "{not json", "volcano.sh/qos-level": 3}}}
    st = build_state("n1", 5.0, bad, [pod("p", "u", "junk", phase="Pending") | {"spec": {}}])
    assert st.agent_cpu == "-" and st.batch_cpu == "-" and st.cpu_marks == (80, 30)
    text = "\n".join(render(st, color=False))
    assert "Pending (unbound)" in text and "batch-cpu -" in text
    assert build_state("n1", 0.0, None, []).evicting is False
    assert "node open" in state_line(st) and "p:Pending (unbound)" in state_line(st)


def test_measure_reads_cpu_rates_and_the_working_set(tmp_path: Path) -> None:
    now = [10.0]
    kp = tmp_path / "cpuacct" / "kubepods"
    be = kp / "besteffort" / "poduid1"
    be.mkdir(parents=True)
    mem = tmp_path / "memory" / "kubepods"
    mem.mkdir(parents=True)
    (mem / "memory.usage_in_bytes").write_text(str(300 * 2**20))
    (mem / "memory.stat").write_text(f"cache 1\ntotal_inactive_file {100 * 2**20}\n")
    (kp / "cpuacct.usage").write_text("0")
    (be / "cpuacct.usage").write_text("0")
    m = Measure(tmp_path, clock=lambda: now[0])
    assert m.cpu({"uid1": "BestEffort", "gone": "Burstable"}) == (None, {})  # the first read only primes
    now[0] = 12.0
    (kp / "cpuacct.usage").write_text(str(3 * 10**9))
    (be / "cpuacct.usage").write_text(str(10**9))
    assert m.cpu({"uid1": "BestEffort"}) == (1.5, {"uid1": 0.5})
    assert m.memory_working_set() == 200 * 2**20
    assert Measure(tmp_path / "none").memory_working_set() is None


def test_events_shown_are_the_nodes_and_the_demos_with_their_count() -> None:
    def ev(ns: str, obj: str, count: int = 1) -> EventLine:
        return EventLine(0.0, "01:02:03", "Normal", "Started", "kubelet", obj, "Started container main", count, ns)

    assert event_shown(ev("", "Node/vm"), "tidemark-demo")
    assert event_shown(ev("tidemark-demo", "Pod/web"), "tidemark-demo")
    assert not event_shown(ev("tidemark-system", "Pod/tidemark-agent-x"), "tidemark-demo")
    assert event_text(ev("", "Node/vm", 3)) == "01:02:03 Normal Started x3 Node/vm [kubelet]: Started container main"


def test_the_newest_events_one_per_reason_and_object() -> None:
    def ev(reason: str, obj: str, at: float) -> EventLine:
        return EventLine(at, "", "Normal", reason, "tidemark-agent", obj, "", 1, "")

    events = [ev("Scheduled", "Pod/a", 1), ev("CapacityPublished", "Node/n", 2), ev("Started", "Pod/a", 3)]
    events += [ev("CapacityPublished", "Node/n", 4 + i) for i in range(10)]
    got = newest_events(events, 3)
    assert [(e.reason, e.at) for e in got] == [("Scheduled", 1), ("Started", 3), ("CapacityPublished", 13)]
    assert newest_events([], 6) == []


EXPOSITION = f"""# HELP {TIER_CEILING} The offline tier's CPU ceiling
# TYPE {TIER_CEILING} gauge
{TIER_CEILING} 0.85
{ONLINE_WAIT} 0.012 1700000000000
{ONLINE_DELAY} 0.00025
tidemark_agent_evictions_total{{reason="CPU Starvation",kind="cpu"}} 2.0
garbage
tidemark_agent_bad NaNx
"""


def test_parse_metrics_reads_gauges_labels_with_spaces_and_timestamps_and_skips_bad_lines() -> None:
    m = parse_metrics(EXPOSITION)
    assert m[TIER_CEILING] == 0.85 and m[ONLINE_WAIT] == 0.012
    assert m['tidemark_agent_evictions_total{reason="CPU Starvation",kind="cpu"}'] == 2.0
    assert "garbage" not in m and "tidemark_agent_bad" not in m and len(m) == 4


def test_reading_of_a_scrape_a_failed_one_and_one_without_the_tier() -> None:
    assert reading_of(EXPOSITION) == AgentReading(True, 0.85, 0.012, 0.25)
    assert reading_of(None) == AgentReading() and not AgentReading().scraped
    assert reading_of("# nothing\n") == AgentReading(True, None, None)


def agent_pod(ip: str | None, phase: str = "Running", **md: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "tidemark-agent-x", "labels": {"app.kubernetes.io/name": "tidemark-agent"}, **md},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "podIP": ip},
    }


def test_the_agents_metrics_address_is_its_running_pods_ip() -> None:
    other = agent_pod("10.0.0.9") | {"metadata": {"name": "sched", "labels": {"app.kubernetes.io/name": "x"}}}
    gone = agent_pod("10.0.0.7", deletionTimestamp="2026-01-01T00:00:00Z")
    assert agent_metrics_url([other, gone, agent_pod("10.0.0.8")], "n1") == "http://10.0.0.8:9102/metrics"
    assert agent_metrics_url([agent_pod(None), agent_pod("10.0.0.8", "Pending")], "n1") is None
    assert agent_metrics_url([agent_pod("10.0.0.8")], "another-node") is None


def test_level_chart_lines_up_with_the_trend_and_keeps_the_floor_visible() -> None:
    samples = [(95.5, 1.0), (96.5, 0.1), (97.5, 2.0), (99.5, None)]
    lines = level_chart(samples, 100.0, 2.0, label="ceiling", seconds=10, width=10, height=2)
    cpu = trend([], 100.0, 30, 15, seconds=10, width=10)
    assert [len(line) for line in lines] == [len(cpu[0])] * 2 and lines[0].index("│") == cpu[0].index("│")
    top, bottom = (line.split("│")[1] for line in lines)
    assert bottom[5:8] == BLOCKS[8] + BLOCKS[1] + BLOCKS[8]  # 1.0 of 2: the lower row full; 0.1: one eighth
    assert top[5:8] == " " + " " + BLOCKS[8]  # 2.0: both rows
    assert top[:5] + top[8:] == " " * 7 and bottom[:5] + bottom[8:] == " " * 7  # no sample, or unknown
    assert "2 cores" in lines[0] and "ceiling" in lines[1]


def test_render_shows_the_tier_ceiling_its_trend_and_a_failed_scrape_as_a_question_mark() -> None:
    history = [Sample(float(t), 10.0, 20.0, 1.2 if t < 90 else 0.1) for t in range(50, 100)]
    st = build_state("n1", 100.0, node(**MARKS), [], history=history, tier=AgentReading(True, 0.1, 0.3, 0.4))
    lines = render(st, width=120, color=False)
    i = next(i for i, line in enumerate(lines) if line.startswith("tier ceiling"))
    assert lines[i].startswith("tier ceiling 0.10 cores") and "CPU wait 30.0%, 0.40 ms a slice" in lines[i]
    assert lines[i - 1].rstrip().endswith("now┘")  # right under the cpu chart
    assert lines[i + 2].split("│")[1].endswith(BLOCKS[8] * 39 + BLOCKS[1] * 10 + " ")  # 1.2 then 0.1 of 2 cores
    assert "tier ceiling 0.10" in state_line(st)
    failed = build_state("n1", 100.0, node(**MARKS), [], history=history)
    text = "\n".join(render(failed, color=False))
    assert "tier ceiling ?" in text and "tier ceiling ?" in state_line(failed)
    unpublished = build_state("n1", 100.0, node(**MARKS), [], tier=AgentReading(True))
    assert "tier ceiling -" in "\n".join(render(unpublished, color=False))


class _Watch:
    """What LiveView reads of localcluster/watch.py's ClusterWatch (its stores' snapshots), here fixed."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self._pods = pods

    def pods_in(self, namespace: str) -> list[dict[str, Any]]:
        return self._pods if namespace == "tidemark-system" else []

    def on_event(self, listener: Any) -> None:
        pass


def test_the_live_views_scrape_never_raises_and_a_failure_is_a_question_mark() -> None:
    def refused(url: str) -> str:
        raise ConnectionRefusedError(url)

    asked: list[str] = []

    def fine(url: str) -> str:
        asked.append(url)
        return EXPOSITION

    pods = [agent_pod("10.0.0.8")]
    assert LiveView(_Watch(pods), "n1", "demo", tty=False, fetch=refused).scrape() == AgentReading()  # type: ignore[arg-type]
    assert LiveView(_Watch([]), "n1", "demo", tty=False, fetch=fine).scrape() == AgentReading()  # type: ignore[arg-type]
    got = LiveView(_Watch(pods), "n1", "demo", tty=False, fetch=fine).scrape()  # type: ignore[arg-type]
    assert got == AgentReading(True, 0.85, 0.012, 0.25) and asked == ["http://10.0.0.8:9102/metrics"]


def test_http_get_reads_a_real_server_and_times_out_on_a_silent_one() -> None:
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = EXPOSITION.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.handle_request, daemon=True).start()
    try:
        assert reading_of(http_get(f"http://127.0.0.1:{server.server_address[1]}/metrics")).ceiling == 0.85
    finally:
        server.server_close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    try:
        with pytest.raises(OSError):
            http_get(f"http://127.0.0.1:{silent.getsockname()[1]}/metrics")
    finally:
        silent.close()
