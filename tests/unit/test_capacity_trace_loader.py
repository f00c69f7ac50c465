"""Issue 33 item 14: the capacity replay's trace loader names what is wrong and exits 2, within bounds.

Before: most malformed traces ended in a traceback (a string `seed`, a float `created`, `online: 5`, a deeply
nested document, an infinite `deleted`), `steps: 1e12` tried to build a 1e12-element list, and `steps: 2.5` was
read as 2. Each case below must end in `TraceError` from the loader and exit 2 from the benchmark's main.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.test_bench_capacity import load

VALID: dict[str, object] = {
    "kind": "tidemark-capacity-trace", "version": 1, "name": "t", "seed": 1, "start": 1767571200, "step": 15,
    "steps": 2, "node": {"cpu": 4000, "memory": 2**33}, "system": {"cpu": [100, 100], "memory": [2**30, 2**30]},
    "online": [{"name": "web", "created": -1, "deleted": None, "request": {"cpu": 1000, "memory": 2**30},
                "cpu": [500, 600], "memory": [2**29, 2**29]}],
    "offline": [{"name": "j", "arrival": 1, "request": {"cpu": 1000, "memory": 2**30}, "memory": 2**29,
                 "work": 60000}],
}


def _with(**changes: object) -> str:
    doc = json.loads(json.dumps(VALID))
    for path, value in changes.items():
        cur = doc
        *parents, last = path.split("__")
        for p in parents:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        cur[last] = value
    return json.dumps(doc)


CASES = {
    "steps-1e12": _with(steps=1e12),
    "steps-2.5": _with(steps=2.5),
    "steps-string": _with(steps="2"),
    "seed-string": _with(seed="abc"),
    "seed-list": _with(seed=[1]),
    "created-string": _with(online__0__created="x"),
    "created-float": _with(online__0__created=0.5),
    "deleted-infinite": _with(online__0__deleted=1e400).replace("Infinity", "1e400"),
    "arrival-beyond-the-trace": _with(offline__0__arrival=10**9),
    "online-int": _with(online=5),
    "offline-mapping": _with(offline={"a": 1}),
    "deeply-nested": "[" * 100_000 + "]" * 100_000,
    "not-utf8": "\udcff",
    "not-json": "{",
}


@pytest.fixture(scope="module")
def ct() -> ModuleType:
    return load("capacity_traces")


@pytest.fixture(scope="module")
def bc() -> ModuleType:
    load("capacity_traces")
    return load("bench_capacity")


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_malformed_trace_is_a_trace_error(ct: ModuleType, tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, name, CASES[name])
    with pytest.raises(ct.TraceError) as e:
        ct.load(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("name", ["steps-1e12", "seed-string", "online-int", "deeply-nested"])
def test_the_replay_exits_2_naming_the_trace(
    bc: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = _write(tmp_path, name, CASES[name])
    assert bc.main(["--traces", "", "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error: trace" in err and str(path) in err and "Traceback" not in err


def test_the_valid_trace_still_loads(ct: ModuleType, tmp_path: Path) -> None:
    trace = ct.load(_write(tmp_path, "valid", json.dumps(VALID)))
    assert trace.steps == 2 and trace.online[0].created == -1 and trace.offline[0].arrival == 1
