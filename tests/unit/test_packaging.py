"""The wheel users install: only the shipped packages, one version everywhere, the licence inside.

Builds the wheel once with `pip wheel . --no-deps`, as a user would (an isolated build: pip fetches
setuptools from the package index; a few seconds).
"""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

import tidemark

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("*.whl")
    return zipfile.ZipFile(whl)


def test_wheel_holds_the_three_packages_and_no_localcluster(wheel: zipfile.ZipFile) -> None:
    top = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"agent", "scheduler_ext", "tidemark"}
    assert not [n for n in wheel.namelist() if "localcluster" in n]


def test_one_version_and_the_distribution_name(wheel: zipfile.ZipFile) -> None:
    name = Path(wheel.filename or "").name
    assert name.startswith(f"tidemark_colocation-{tidemark.__version__}-"), name  # "tidemark" on PyPI is not ours
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    meta = wheel.read(info).decode()
    assert f"Version: {tidemark.__version__}\n" in meta and "Name: tidemark-colocation\n" in meta


def test_licence_and_console_scripts_ship(wheel: zipfile.ZipFile) -> None:
    assert any(n.endswith("/LICENSE") for n in wheel.namelist())
    entry = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    cp = configparser.ConfigParser()
    cp.read_string(wheel.read(entry).decode())
    scripts = dict(cp["console_scripts"])
    assert scripts == {"tidemark-agent": "agent.cli:main", "tidemark-scheduler": "scheduler_ext.cli:main"}


def test_manifests_name_the_project_version() -> None:
    images = set()
    for path in (REPO / "daemonset").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = ((doc or {}).get("spec") or {}).get("template", {}).get("spec", {})
            # an overlay patch names a container without its image: only full manifests count
            images |= {c["image"] for c in spec.get("containers", []) + spec.get("initContainers", []) if "image" in c}
    assert images, "no workload manifests found"
    assert all(image.endswith(f":{tidemark.__version__}") for image in images), images


@pytest.mark.parametrize("command", ["tidemark-agent", "tidemark-scheduler"])
def test_version_flag(command: str) -> None:
    r = subprocess.run([str(Path(sys.executable).with_name(command)), "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith(f"{command} {tidemark.__version__} "), r.stdout + r.stderr


def test_build_info_metric() -> None:
    from prometheus_client import generate_latest

    from agent.daemon.metrics import Stats, Status, agent_registry
    from scheduler_ext.metrics import SchedulerMetrics

    class IdleCycle:
        status = Status()

    class IdleAgent:
        cycle, stats = IdleCycle(), Stats()

        def info(self) -> dict[str, float]:
            return {}

    for component, registry in (("agent", agent_registry(IdleAgent())), ("scheduler", SchedulerMetrics().registry)):
        text = generate_latest(registry).decode()
        assert f'tidemark_build_info{{component="{component}",' in text
        assert f'version="{tidemark.__version__}"}} 1.0' in text
