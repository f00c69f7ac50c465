"""scheduler_ext.run.client.throttle_refresh_hook: the kubeconfig loader's per-request refresh hook
runs at most once per interval, also after it re-installs itself (as kube_config's hook does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from scheduler_ext.run.client import throttle_refresh_hook


class _Api:
    def __init__(self, cfg: Any) -> None:
        self.configuration = cfg


def test_a_hook_that_reinstalls_itself_stays_throttled() -> None:
    cfg = k8s_client.Configuration()
    cfg.api_key["BearerToken"] = "t"
    calls = []

    def hook(configuration: Any) -> None:  # what kube_config._refresh_api_key does
        calls.append(1)
        configuration.refresh_api_key_hook = hook

    cfg.refresh_api_key_hook = hook
    throttle_refresh_hook(_Api(cfg), interval=3600)
    for _ in range(5):
        assert cfg.get_api_key_with_prefix("BearerToken") == "t"
    assert len(calls) == 1


def test_interval_zero_refreshes_every_time() -> None:
    cfg = k8s_client.Configuration()
    cfg.api_key["BearerToken"] = "t"
    calls = []

    def hook(configuration: Any) -> None:
        calls.append(1)
        configuration.refresh_api_key_hook = hook

    cfg.refresh_api_key_hook = hook
    throttle_refresh_hook(_Api(cfg), interval=0)
    for _ in range(3):
        cfg.get_api_key_with_prefix("BearerToken")
    assert len(calls) == 3


def test_the_real_kubeconfig_hook_keeps_the_throttle(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: secret}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)  # type: ignore[no-untyped-call]
    assert cfg.refresh_api_key_hook is not None
    throttle_refresh_hook(_Api(cfg), interval=3600)
    throttled = cfg.refresh_api_key_hook
    for _ in range(3):
        assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer secret"
    assert cfg.refresh_api_key_hook is throttled
