"""Volcano's own scheduler unit tests, as cases (tests/conformance/README.md), through `simulate`."""

from __future__ import annotations

import collections
import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler_ext.cli import main
from scheduler_ext.plugins.tdm import reset_evict_clock

CASES = sorted((Path(__file__).parent / "cases").glob("*.yaml"))
GROUP_KEY = "scheduling.k8s.io/group-name"
KNOWN_EXPECT = {"binds", "bind_count", "evictions", "evict_count", "pipelined", "pipelined_jobs", "podgroups"}


def _pod_groups(objects: list[Any]) -> dict[str, str]:
    out = {}
    for o in objects:
        if isinstance(o, dict) and o.get("kind") == "Pod":
            md = o.get("metadata") or {}
            ns = md.get("namespace", "default")
            group = (md.get("annotations") or {}).get(GROUP_KEY)
            if group:
                out[f"{ns}/{md.get('name')}"] = f"{ns}/{group}"
    return out


def _differences(expect: dict[str, Any], got: dict[str, Any], objects: list[Any]) -> list[str]:
    binds, evictions = got.get("binds") or {}, got.get("evictions") or []
    pipelined, podgroups = got.get("pipelined") or {}, got.get("podgroups") or {}
    errs = []
    if "binds" in expect and {str(k): str(v) for k, v in (expect["binds"] or {}).items()} != binds:
        errs.append(f"binds: want {expect['binds']} got {binds}")
    if "bind_count" in expect and len(binds) != int(expect["bind_count"]):
        errs.append(f"bind_count: want {expect['bind_count']} got {len(binds)}")
    if "evictions" in expect and collections.Counter(map(str, expect["evictions"] or [])) != collections.Counter(
        evictions
    ):
        errs.append(f"evictions: want {sorted(expect['evictions'] or [])} got {sorted(evictions)}")
    if "evict_count" in expect and len(evictions) != int(expect["evict_count"]):
        errs.append(f"evict_count: want {expect['evict_count']} got {len(evictions)}")
    if "pipelined" in expect and {str(k): str(v) for k, v in (expect["pipelined"] or {}).items()} != pipelined:
        errs.append(f"pipelined: want {expect['pipelined']} got {pipelined}")
    pod_job = _pod_groups(objects)
    for job, nodes in (expect.get("pipelined_jobs") or {}).items():
        mine = {p: n for p, n in pipelined.items() if pod_job.get(p) == job}
        if not mine or any(str(n) not in map(str, nodes) for n in mine.values()):
            errs.append(f"pipelined_jobs: want {job} pipelined on {nodes}, got {mine}")
    for pg, phase in (expect.get("podgroups") or {}).items():
        if str(podgroups.get(pg)) != str(phase):
            errs.append(f"podgroups: want {pg}={phase} got {podgroups.get(pg)}")
    return errs


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_volcano_case(case_file: Path, tmp_path: Path) -> None:
    case = yaml.safe_load(case_file.read_text())
    expect = case["expect"] or {}
    assert set(expect) <= KNOWN_EXPECT, sorted(set(expect) - KNOWN_EXPECT)
    objects = case["objects"] or []
    conf, cluster = tmp_path / "CONF.yaml", tmp_path / "OBJECTS.yaml"
    conf.write_text(yaml.safe_dump(case["conf"], sort_keys=False))
    cluster.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    reset_evict_clock()  # each case is a fresh scheduler process (tdm keeps Volcano's process-wide clock)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["simulate", "--conf", str(conf), "--cluster", str(cluster), "-o", "json"])
    assert rc == 0, f"{case['name']}: exit {rc}"
    errs = _differences(expect, json.loads(out.getvalue()), objects)
    assert not errs, f"{case['name']} ({case.get('source', '')}): " + "; ".join(errs)


def test_all_cases_are_here() -> None:
    assert len(CASES) == 78
