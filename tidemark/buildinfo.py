"""What build is running: `--version` on both commands and the `tidemark_build_info` metric."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING

from tidemark import __version__

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Gauge


def version_line(prog: str) -> str:
    """`tidemark-agent 0.1.0 (Python 3.11.7)`: what `--version` prints."""
    return f"{prog} {__version__} (Python {platform.python_version()})"


def register_build_info(registry: CollectorRegistry, component: str) -> Gauge:
    """`tidemark_build_info{component, version, python_version} 1`, the Prometheus convention for versions."""
    from prometheus_client import Gauge  # not at import time: `--version` and `simulate` stay light

    gauge = Gauge(
        "tidemark_build_info",
        "Always 1; the labels say which build of which component is running",
        ["component", "version", "python_version"],
        registry=registry,
    )
    gauge.labels(component, __version__, platform.python_version()).set(1)
    return gauge
