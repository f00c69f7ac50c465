"""nodeorder's imagelocality and selectorspread scores (kube-scheduler's ImageLocality / SelectorSpread)."""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler_ext.plugins.nodeorder import (
    IMAGE_MIN_THRESHOLD,
    MIB,
    NodeOrderPlugin,
    image_priority,
    normalized_image_name,
    selector_spread_scores,
)

from .helpers import node, pod, podgroup, queue, run, session

MIB_500 = 500 * MIB


def conf(**weights: int) -> str:
    base = {"leastrequested.weight": 0, "balancedresource.weight": 0, "tainttoleration.weight": 0,
            "nodeaffinity.weight": 0, "podaffinity.weight": 0, "podtopologyspread.weight": 0,
            "imagelocality.weight": 0, "selectorspread.weight": 0,
            **{k.replace("_", "."): v for k, v in weights.items()}}
    args = "".join(f"\n      {k}: {v}" for k, v in base.items())
    return f"""
actions: allocate
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: nodeorder
    arguments:{args}
"""


def with_images(name: str, *images: tuple[list[str], int], **kw: Any) -> dict[str, Any]:
    n = node(name, **kw)
    n["status"]["images"] = [{"names": names, "sizeBytes": size} for names, size in images]
    return n


def image_pod(name: str, *images: str, **kw: Any) -> dict[str, Any]:
    p = pod(name, group="g", **kw)
    p["spec"]["containers"] = [
        {"name": f"c{i}", "image": img, "resources": {"requests": {"cpu": "1"}}} for i, img in enumerate(images)
    ]
    return p


def scores(objs: list[dict[str, Any]], task_name: str, text: str) -> dict[str, float]:
    ssn = session(objs, text)
    plugin = ssn.plugins["nodeorder"]
    assert isinstance(plugin, NodeOrderPlugin)
    task = next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.name == task_name)
    s = plugin.score(ssn, task, ssn.all_nodes)
    return {n.name: float(s[n.index]) for n in ssn.node_list}


def test_image_names_and_priority_as_kube_scheduler() -> None:
    assert normalized_image_name("busybox") == "busybox:latest"
    assert normalized_image_name("registry:5000/busybox") == "registry:5000/busybox:latest"
    assert normalized_image_name("repo/app:v1") == "repo/app:v1"
    assert image_priority(0, 1) == 0
    assert image_priority(IMAGE_MIN_THRESHOLD, 1) == 0
    assert image_priority(1000 * MIB, 1) == 100
    assert image_priority(5000 * MIB, 1) == 100
    # (500 MiB - 23 MiB) * 100 / (1000 MiB - 23 MiB), integer division
    assert image_priority(MIB_500, 1) == 100 * (MIB_500 - IMAGE_MIN_THRESHOLD) // (1000 * MIB - IMAGE_MIN_THRESHOLD)
    # the upper bound grows with the number of containers
    two = 100 * (1000 * MIB - IMAGE_MIN_THRESHOLD) // (2000 * MIB - IMAGE_MIN_THRESHOLD)
    assert image_priority(1000 * MIB, 2) == two


def test_imagelocality_prefers_nodes_with_the_image_scaled_by_spread() -> None:
    objs = [
        queue("q1"), podgroup("g"),
        node("n0"),
        with_images("n1", (["repo/app:v1", "repo/app@sha256:x"], MIB_500)),
        with_images("n2", (["repo/app:v1"], MIB_500), (["busybox:latest"], 900 * MIB)),
        image_pod("p", "repo/app:v1"),
        image_pod("q", "busybox"),
    ]
    s = scores(objs, "p", conf(imagelocality_weight=2))
    expect = 2 * image_priority(int(MIB_500 * (2 / 3)), 1)
    assert s == {"n0": 0.0, "n1": float(expect), "n2": float(expect)}
    s = scores(objs, "q", conf(imagelocality_weight=1))  # `busybox` is busybox:latest, on one node of three
    assert s == {"n0": 0.0, "n1": 0.0, "n2": float(image_priority(int(900 * MIB / 3), 1))}
    # the whole allocate follows it
    ssn = run(objs[:-1], conf(imagelocality_weight=1))
    assert {b.task.name: b.node for b in ssn.binds} == {"p": "n1"}


def test_imagelocality_off_and_malformed_images() -> None:
    bad = node("n1")
    bad["status"]["images"] = [{"names": "x", "sizeBytes": 1}, "junk", {"names": ["repo/app:v1"], "sizeBytes": "big"}]
    objs = [queue("q1"), podgroup("g"), bad, with_images("n2", (["repo/app:v1"], MIB_500)),
            image_pod("p", "repo/app:v1")]
    assert scores(objs, "p", conf(imagelocality_weight=0)) == {"n1": 0.0, "n2": 0.0}
    s = scores(objs, "p", conf(imagelocality_weight=1))
    assert s["n1"] == 0.0 and s["n2"] > 0


def owned(name: str, owner: str, node_name: str = "", **kw: Any) -> dict[str, Any]:
    p = pod(name, group="g", node_name=node_name, phase="Running" if node_name else "Pending", **kw)
    p["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "uid": owner, "controller": True}]
    return p


def test_selector_spread_counts_pods_of_the_same_controller() -> None:
    objs = [
        queue("q1"), podgroup("g", min_member=0),
        node("n1"), node("n2"), node("n3"),
        owned("a1", "rs-a", "n1"), owned("a2", "rs-a", "n1"), owned("a3", "rs-a", "n2"),
        owned("b1", "rs-b", "n3"), owned("b2", "rs-b", "n3"),
        owned("new", "rs-a"),
    ]
    s = scores(objs, "new", conf(selectorspread_weight=1))
    assert s == {"n1": 0.0, "n2": 50.0, "n3": 100.0}
    # no controller: an empty selector, every node 100
    objs.append(pod("lonely", group="g"))
    s = scores(objs, "lonely", conf(selectorspread_weight=2))
    assert s == {"n1": 200.0, "n2": 200.0, "n3": 200.0}
    # off by default (weight 0, the add-on guide's default)
    assert scores(objs, "new", conf()) == {"n1": 0.0, "n2": 0.0, "n3": 0.0}


def test_selector_spread_zones_as_kube_scheduler() -> None:
    # counts 2, 1, 0 on nodes in zones a, a, b: node part 100*(2-c)/2, zone part 100*(3-zc)/3
    got = selector_spread_scores([2, 1, 0], ["r:\x00:a", "r:\x00:a", "r:\x00:b"])
    assert got == [float(int(0 / 3 + 2 / 3 * 0)), float(int(50 / 3 + 2 / 3 * 0)), float(int(100 / 3 + 2 / 3 * 100))]
    assert selector_spread_scores([0, 0], ["", ""]) == [100.0, 100.0]
    assert np.isclose(selector_spread_scores([1, 0], ["", "z"])[1], 100.0)
