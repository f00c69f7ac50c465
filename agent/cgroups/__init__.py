"""The cgroup layer: hierarchy and driver detection, kubelet's layout, and a small file layer.

cgroup v1 (per-controller hierarchies, `cpu,cpuacct` combined or separate), v2 (one unified
hierarchy) and hybrid (v1 controllers plus an empty cgroup2 mount: cpu/memory live on v1). Every
root is a parameter. Reads never raise out of a cycle: missing or vanished files give None and are
counted (`ReadStats`). `agent.cgroups.knobs` declares every knob file once (pure: decision modules
import it).
"""

from agent.cgroups.fs import FileReader, ReadStats
from agent.cgroups.layout import Driver, KubeLayout, detect_driver
from agent.cgroups.mounts import CgroupVersion, Hierarchy, detect_hierarchy

__all__ = [
    "CgroupVersion",
    "Driver",
    "FileReader",
    "Hierarchy",
    "KubeLayout",
    "ReadStats",
    "detect_driver",
    "detect_hierarchy",
]
