"""Issue 33 item 6: the mutating hook validates a stored profile once per version, not at every pod CREATE.

Before: `select` ran `profile_problems` over every profile for every pod (400 maximum-size profiles: 1.0 s per
pod CREATE, about 2000 past the hook's 5 s timeout). Now a profile from the API server (uid, resourceVersion) is
checked once per version; a profile whose matchLabels cannot select the pod is not checked at all.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import tidemark.profiles as pf


def _big(i: int, app: str = "etl") -> dict[str, Any]:
    """A maximum-size profile: 64 labels, 64 annotations of 4096 characters, long selectors."""
    return {
        "apiVersion": "colocation.tidemark.io/v1alpha1", "kind": "ColocationProfile",
        "metadata": {"name": f"p{i:04d}", "uid": f"uid-{i}", "resourceVersion": str(1000 + i)},
        "spec": {
            "selector": {"matchLabels": {"app": app}, "matchExpressions": [
                {"key": f"k{j}.example.com/x", "operator": "NotIn", "values": [f"v{v}" for v in range(20)]}
                for j in range(20)]},
            "qosLevel": "BE",
            "labels": {f"l{j}.example.com/x": f"v{j}" for j in range(64)},
            "annotations": {f"a{j}.example.com/x": "x" * 4096 for j in range(64)},
        },
    }


POD = {"metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}}, "spec": {"containers": []}}


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = pf.profile_problems

    def counting(obj: Any) -> list[str]:
        calls[0] += 1
        return real(obj)

    monkeypatch.setattr(pf, "profile_problems", counting)
    return calls


def test_each_stored_profile_version_is_validated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    profiles = [_big(i, app="web") for i in range(50)]
    calls = _count_checks(monkeypatch)
    for _ in range(5):
        done = pf.apply_profiles(POD, "shop", {}, profiles)
        assert len(done.profiles) == 50
    assert calls[0] == 50  # once each, not 250
    profiles[0]["metadata"]["resourceVersion"] = "9999"  # a new version is checked again
    pf.apply_profiles(POD, "shop", {}, profiles)
    assert calls[0] == 51


def test_profiles_that_cannot_select_the_pod_cost_no_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    profiles = [_big(i, app="etl") for i in range(400)]
    calls = _count_checks(monkeypatch)
    start = time.perf_counter()
    for _ in range(20):
        assert not pf.apply_profiles(POD, "shop", {}, profiles).profiles
    per_pod = (time.perf_counter() - start) / 20
    assert calls[0] == 0
    assert per_pod < 0.05, f"{per_pod * 1000:.1f} ms per pod for 400 profiles that do not select it"


def test_an_invalid_profile_is_still_skipped_and_files_without_versions_are_checked_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = _big(1, app="web")
    bad["metadata"]["uid"] = "uid-bad"  # one (uid, resourceVersion) is one content, on the API server as here
    bad["spec"]["qosLevel"] = "nope"
    calls = _count_checks(monkeypatch)
    assert not pf.apply_profiles(POD, "shop", {}, [bad]).profiles
    unversioned = _big(2, app="web")
    del unversioned["metadata"]["resourceVersion"]
    for _ in range(3):
        assert pf.apply_profiles(POD, "shop", {}, [unversioned]).profiles == ("p0002",)
    assert calls[0] == 1 + 3
