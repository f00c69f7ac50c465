"""A Kubernetes client made of urllib3 alone, for the node agent (docs/design.md, "Shared package").

Why: importing the official client (`kubernetes`, with requests, oauthlib and pydantic behind it) costs the agent
about 20 MiB of memory and 0.4 s of CPU at start, on every node, for a daemon that sends a handful of JSON calls
through `tidemark.kube.client.request` anyway. This loader covers what a node's agent is given: the pod's service
account (in-cluster), or a kubeconfig whose user is a client certificate or a token. Anything else a kubeconfig may
ask for (an `exec` credential plugin, an `auth-provider`, a username and password, impersonation, a proxy) returns
None from `load`, and `new_api_client` falls back to the official client, which knows them all.

Token files are read again every `TOKEN_PERIOD` seconds: bound service-account tokens rotate (client-go's
`NewCachedFileTokenSource` does the same, k8s.io/client-go/transport/token_source.go).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3

from tidemark.kube.client import KubeError

log = logging.getLogger(__name__)

#: seconds a token read from a file is used before the file is read again
TOKEN_PERIOD = 60.0
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
#: user keys this loader does not handle (the official client does)
FOREIGN_USER_KEYS = frozenset({"exec", "auth-provider", "username", "password", "as", "as-groups", "as-uid",
                               "as-user-extra"})  # fmt: skip
FOREIGN_CLUSTER_KEYS = frozenset({"proxy-url"})


class LiteConfigError(KubeError):
    """A kubeconfig or service account that is there but unusable (a missing file, bad base64, no server)."""


@dataclass(frozen=True, slots=True)
class LiteConfig:
    """What a request needs: the server, TLS material (PEM bytes) and a bearer token or token file."""

    host: str
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    verify: bool = True
    server_name: str | None = None


def in_cluster(environ: Mapping[str, str], root: str = SERVICE_ACCOUNT) -> LiteConfig | None:
    """The pod's service account (client-go's `rest.InClusterConfig`), None outside a pod."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    token = os.path.join(root, "token")
    if not host or not os.path.exists(token):
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    ca = os.path.join(root, "ca.crt")
    return LiteConfig(f"https://{host}:{port or 443}", ca=_read(ca) if os.path.exists(ca) else None,
                      token_file=token)  # fmt: skip


def from_kubeconfig(path: str, context: str | None = None) -> LiteConfig | None:
    """The kubeconfig's context (its current one by default); None when its user or cluster needs the official
    client (module docstring). Relative file paths are relative to the kubeconfig's directory, as in client-go."""
    import yaml

    try:
        with open(path, "rb") as f:
            doc = yaml.safe_load(f) or {}
    except OSError as exc:
        raise LiteConfigError(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise LiteConfigError(f"{path}: not YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise LiteConfigError(f"{path}: not a kubeconfig (a {type(doc).__name__})")
    name = context or doc.get("current-context")
    ctx = _named(doc, "contexts", "context", name, path)
    cluster = _named(doc, "clusters", "cluster", ctx.get("cluster"), path)
    user = _named(doc, "users", "user", ctx.get("user"), path) if ctx.get("user") else {}
    if FOREIGN_USER_KEYS & set(user) or FOREIGN_CLUSTER_KEYS & set(cluster):
        return None
    base = os.path.dirname(os.path.abspath(path))
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise LiteConfigError(f"{path}: cluster {ctx.get('cluster')!r} has no server")
    token_file = user.get("tokenFile")
    return LiteConfig(
        server.rstrip("/"),
        ca=_material(cluster, "certificate-authority", base),
        cert=_material(user, "client-certificate", base),
        key=_material(user, "client-key", base),
        token=str(user["token"]) if user.get("token") else None,
        token_file=os.path.join(base, token_file) if token_file else None,
        verify=not cluster.get("insecure-skip-tls-verify", False),
        server_name=cluster.get("tls-server-name") or None,
    )


def _named(doc: Mapping[str, Any], section: str, key: str, name: object, path: str) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        body = entry.get(key) if isinstance(entry, dict) and entry.get("name") == name else None
        if isinstance(body, dict):
            return body
    raise LiteConfigError(f"{path}: no {key} named {name!r} in {section}")


def _material(section: Mapping[str, Any], key: str, base: str) -> bytes | None:
    data = section.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except ValueError as exc:
            raise LiteConfigError(f"{key}-data is not base64: {exc}") from exc
    file = section.get(key)
    return _read(os.path.join(base, str(file))) if file else None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise LiteConfigError(f"cannot read {path}: {exc}") from exc


def ssl_context(cfg: LiteConfig) -> ssl.SSLContext:
    """Verification against the CA (the system's when none is given), the client certificate when there is one."""
    ctx = ssl.create_default_context(cadata=cfg.ca.decode() if cfg.ca else None)
    if not cfg.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert and cfg.key:
        # load_cert_chain reads files only: a private directory for the moment it takes
        with tempfile.TemporaryDirectory(prefix="tidemark-tls-") as d:
            cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
            for p, data in ((cert, cfg.cert), (key, cfg.key)):
                with open(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                    f.write(data)
            ctx.load_cert_chain(cert, key)
    return ctx


class LiteApiClient:
    """`send()` for `tidemark.kube.client.open_request`: a pooled urllib3 connection, the bearer token, writes
    through the token bucket (the same contract as `RateLimitedApiClient`)."""

    def __init__(self, cfg: LiteConfig, limiter: Any, *, pool_size: int, user_agent: str,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.config = cfg
        self.limiter = limiter
        self.user_agent = user_agent
        self._clock = clock
        self._lock = threading.Lock()
        self._token: tuple[float, str] | None = None
        if not cfg.verify:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            log.warning("TLS verification of the API server is off (insecure-skip-tls-verify)")
        tls = cfg.host.startswith("https:")
        extra: dict[str, Any] = {"ssl_context": ssl_context(cfg)} if tls else {}
        if tls and cfg.server_name:
            extra["server_hostname"] = cfg.server_name
        self.pool = urllib3.PoolManager(num_pools=2, maxsize=max(1, pool_size), **extra)

    def bearer(self) -> str | None:
        """The token: the configured one, or the token file's content, read again after `TOKEN_PERIOD`."""
        if self.config.token:
            return self.config.token
        if not self.config.token_file:
            return None
        now = self._clock()
        with self._lock:
            if self._token is None or now - self._token[0] >= TOKEN_PERIOD:
                try:
                    self._token = (now, _read(self.config.token_file).decode().strip())
                except LiteConfigError as exc:
                    if self._token is None:
                        raise
                    log.warning("%s; the token read before is used", exc)
            return self._token[1]

    def send(self, method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str], body: Any,
             timeout: float | tuple[float, float] | None) -> Any:  # fmt: skip
        """The raw urllib3 response, unread (the caller reads or streams it, then releases it)."""
        if method.upper() in ("POST", "PUT", "PATCH", "DELETE"):
            self.limiter.take()
        url = self.config.host + path + ("?" + urlencode(query, quote_via=quote) if query else "")
        headers = {**headers, "User-Agent": self.user_agent}
        token = self.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None if body is None else body if isinstance(body, (bytes, str)) else json.dumps(body)
        if isinstance(timeout, tuple):
            limit: urllib3.Timeout | None = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            limit = urllib3.Timeout(total=timeout) if timeout else None
        return self.pool.request(method.upper(), url, body=data, headers=headers, timeout=limit,
                                 preload_content=False, redirect=False)  # fmt: skip
