"""What both Tidemark programs share and nothing else: the Kubernetes vocabulary (apis), the
Kubernetes I/O layer (kube), HTTP serving, logging and the clock (docs/design.md, "Shared package").

`agent` and `scheduler_ext` import this package and never each other; this package imports
neither (import-linter contracts in pyproject.toml, run by `make lint`).
"""

__version__ = "0.1.0"  # the one version source: pyproject, both --version flags, build_info, image tag
