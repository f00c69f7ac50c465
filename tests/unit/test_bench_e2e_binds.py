"""benchmarks/bench_e2e_binds.py: the contenders' command lines and the per-round ceiling (pure parts)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_e2e_binds.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_e2e_binds", PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_e2e_binds"] = mod
    spec.loader.exec_module(mod)
    return mod


ENV = {"KUBECONFIG": "/k", "KUBE_API_URL": "https://127.0.0.1:6443", "ADMIN_TOKEN": "t", "BINDONLY": "/bin/bo"}


def test_go_client_arguments(bench: ModuleType) -> None:
    h2 = bench.ceiling_args("bind-go:256x4", ENV, "ns", 100)
    assert h2[0] == "/bin/bo"
    assert "-concurrency=256" in h2 and "-conns=4" in h2 and "-http1" not in h2
    one = bench.ceiling_args("bind-go:64", ENV, "ns", 100)
    assert "-concurrency=64" in one and not any(a.startswith("-conns") for a in one)
    h1 = bench.ceiling_args("bind-go-h1:64+-warm=false", ENV, "ns", 100)
    assert h1[-1] == "-http1" and "-warm=false" in h1 and "-namespace=ns" in h1


def test_python_clients_and_the_fallback_without_go(bench: ModuleType) -> None:
    py = bench.ceiling_args("bind-py:128", ENV, "ns", 100)
    assert py[2:] == ["--bind-py", "/k,ns,100,128"]
    fallback = bench.ceiling_args("bind-go:64", {**ENV, "BINDONLY": ""}, "ns", 100)
    assert fallback[2:] == ["--bind-only", "/k,ns,100,64"]
    assert bench.is_ceiling("bind-py:64") and not bench.is_ceiling("tidemark")


def test_the_ceiling_of_a_round_is_its_fastest_bind_only_client(bench: ModuleType) -> None:
    rows = []
    for rnd, rates in enumerate([
        {"tidemark": 1000, "kube-scheduler": 500, "bind-py:64": 1500, "bind-go:64": 1200},
        {"tidemark": 900, "kube-scheduler": 300, "bind-py:64": 800, "bind-go:64": 2000},
        {"tidemark": 1100, "kube-scheduler": 550, "bind-py:64": 1000, "bind-go:64": 1000},
    ]):
        for name, pps in rates.items():
            rows.append({"scheduler": name, "round": rnd, "pods_per_second": pps, "load_average_1m": [1.0, 2.0],
                         "window_cpu_ms_per_bind": {"apiserver": 0.1 * (rnd + 1)}})
    out = bench.summarize(rows)
    assert out["pods_per_second"]["ceiling"]["rounds"] == [1500, 2000, 1000]
    assert out["tidemark / ceiling"]["per_round"] == [round(1000 / 1500, 3), 0.45, 1.1]
    assert out["tidemark / ceiling"]["of_medians"] == round(1000 / 1500, 3)
    assert out["tidemark / kube-scheduler"]["per_round"] == [2.0, 3.0, 2.0]
    assert out["window_cpu_ms_per_bind_median"]["tidemark"]["apiserver"] == 0.2
