"""An ApiClient for both programs, a write rate limiter, and raw JSON requests.

Why raw requests: the official client's model classes are slow to build and, in client 37, break
on some replies (`create_namespaced_pod_binding` cannot decode the server's Status). Every call in
`tidemark.kube` therefore goes through `request()`, which reuses the client's configuration, auth
(including token refresh hooks), TLS and urllib3 pool, and returns decoded JSON dicts.

Errors are translated at this boundary into a small taxonomy (docs/design.md, "House style" 8):
`ApiStatusError` (the server answered with a non-2xx status) and `TransportError` (no answer:
connection refused, timeout, TLS), both `KubeError`.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import urllib3

log = logging.getLogger(__name__)

JSON = dict[str, Any]
#: (connect, read) seconds for ordinary calls: a hung apiserver must never block a loop forever.
DEFAULT_TIMEOUT: Final[tuple[float, float]] = (10.0, 30.0)
DEFAULT_QPS: Final = 2000.0
DEFAULT_BURST: Final = 2000
#: urllib3 keeps this many connections per host: enough for concurrent binds from a worker pool.
DEFAULT_POOL_SIZE: Final = 32
WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"


# --- errors ----------------------------------------------------------------------------------


class KubeError(Exception):
    """Anything the Kubernetes I/O layer raises."""


class TransportError(KubeError):
    """No HTTP answer: connection refused or reset, timeout, TLS failure."""


class ApiStatusError(KubeError):
    """The server answered with a non-2xx status; `status` is the code, `body` the decoded Status if any."""

    def __init__(self, status: int, message: str, body: JSON | None = None, headers: Mapping[str, str] | None = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body
        self.headers: Mapping[str, str] = headers or {}

    @property
    def reason(self) -> str:
        """The Status `reason` (NotFound, Conflict, Expired, TooManyRequests...), or ''."""
        return str(self.body.get("reason", "")) if self.body else ""


# --- rate limiting ---------------------------------------------------------------------------


class TokenBucket:
    """A thread-safe token bucket (client-go's QPS/burst); the Python client has none.

    `reserve()` takes a token now and says how long the caller must wait before using it, so
    waiters are served in call order without holding the lock while sleeping (like Go's
    rate.Limiter.Reserve). qps <= 0 means unlimited.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._last = clock()

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0 or self.qps == float("inf")

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = now

    def reserve(self, n: int = 1) -> float:
        """Take n tokens; return the seconds to wait before acting (0 when available now)."""
        if self.unlimited:
            return 0.0
        with self._lock:
            self._refill(self._clock())
            self._tokens -= n
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_take(self, n: int = 1) -> bool:
        """Take n tokens only if they are available now."""
        if self.unlimited:
            return True
        with self._lock:
            self._refill(self._clock())
            if self._tokens >= n:
                self._tokens -= n
                return True
            return False

    def take(self, n: int = 1) -> float:
        """Block until n tokens are ours; return the seconds waited."""
        delay = self.reserve(n)
        if delay > 0:
            self._sleep(delay)
        return delay


def _official_client_class() -> Any:
    """`RateLimitedApiClient`, built on first use: importing the official client costs about 20 MiB and 0.4 s,
    which the agent does not pay (`tidemark.kube.lite`)."""
    global _OFFICIAL
    if _OFFICIAL is not None:
        return _OFFICIAL
    from kubernetes import client as k8s_client

    class RateLimitedApiClient(k8s_client.ApiClient):  # type: ignore[misc,unused-ignore]
        """An ApiClient whose write calls (POST/PUT/PATCH/DELETE) pass a shared token bucket.

        Reads and watches are not limited: a relist after an outage must not queue behind binds, and
        client-go's QPS exists mainly to protect the server from write storms. Every generated API
        class built on this client (CoreV1Api(client)...) is limited too, since all go through call_api.
        """

        def __init__(self, configuration: Any, limiter: TokenBucket | None = None) -> None:
            super().__init__(configuration)
            self.limiter = limiter or TokenBucket(DEFAULT_QPS, DEFAULT_BURST)

        def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if method.upper() in WRITE_METHODS:
                self.limiter.take()
            return super().call_api(method, url, *args, **kwargs)

        def send(self, method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str], body: Any,
                 timeout: float | tuple[float, float] | None) -> Any:  # fmt: skip
            """The raw urllib3 response, unread (`LiteApiClient.send`'s contract)."""
            serialized = self.param_serialize(
                method, path, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            try:
                return self.call_api(*serialized, _request_timeout=timeout).response
            except k8s_client.ApiException as exc:  # the REST layer's wrapping of TLS errors (status 0)
                if exc.status:
                    raise ApiStatusError(int(exc.status), str(exc.reason)) from exc
                raise TransportError(f"{method} {path}: {exc.reason}") from exc

    _OFFICIAL = RateLimitedApiClient
    return _OFFICIAL


_OFFICIAL: Any = None


def __getattr__(name: str) -> Any:
    """`RateLimitedApiClient` on demand (PEP 562), so importing this module does not import the official client."""
    if name == "RateLimitedApiClient":
        return _official_client_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- configuration ---------------------------------------------------------------------------


def _in_cluster_available(environ: Mapping[str, str]) -> bool:
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )


def load_configuration(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Any:
    """A client Configuration: `kubeconfig` if given, else in-cluster, else $KUBECONFIG or ~/.kube/config.

    This is client-go's order for a daemon (an explicit flag wins; inside a pod the service
    account; a developer's machine the default kubeconfig). Raises KubeError when none works.
    """
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    env = os.environ if environ is None else environ
    cfg = k8s_client.Configuration()
    try:
        if kubeconfig:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
            return cfg
        if _in_cluster_available(env):
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            return cfg
        default = env.get("KUBECONFIG") or "~/.kube/config"
        path = os.path.expanduser(default.split(os.pathsep)[0])
        if os.path.exists(path):
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=cfg
            )
            return cfg
    except (k8s_config.ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        raise KubeError(f"cannot load Kubernetes client configuration: {exc}") from exc
    raise KubeError("no Kubernetes configuration: pass --kubeconfig, run in a pod, or create ~/.kube/config")


def new_api_client(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    pool_size: int = DEFAULT_POOL_SIZE,
    user_agent: str = "tidemark",
    configuration: Any = None,
    lite: bool = False,
) -> Any:
    """The ApiClient both programs use: configured, pooled for concurrent binds, write-rate-limited.

    `configuration` (a client Configuration) skips loading, for tests and callers that built one. `lite`: the
    urllib3-only client (`tidemark.kube.lite`, the agent's) when the configuration is one it handles, else the
    official one; the same lookup order either way.
    """
    if lite and configuration is None:
        api = _lite_client(kubeconfig, context, TokenBucket(qps, burst), pool_size, user_agent)
        if api is not None:
            return api
    cfg = configuration if configuration is not None else load_configuration(kubeconfig, context=context)
    cfg.connection_pool_maxsize = max(1, pool_size)
    api = _official_client_class()(cfg, TokenBucket(qps, burst))
    api.user_agent = user_agent
    return api


def _lite_client(
    kubeconfig: str | None, context: str | None, limiter: TokenBucket, pool_size: int, user_agent: str,
    environ: Mapping[str, str] | None = None,
) -> Any:
    """`load_configuration`'s order with the lite loader; None when the configuration needs the official client."""
    from tidemark.kube import lite

    env = os.environ if environ is None else environ
    if kubeconfig:
        cfg = lite.from_kubeconfig(kubeconfig, context)
    elif _in_cluster_available(env):
        cfg = lite.in_cluster(env)
    else:
        default = os.path.expanduser((env.get("KUBECONFIG") or "~/.kube/config").split(os.pathsep)[0])
        cfg = lite.from_kubeconfig(default, context) if os.path.exists(default) else None
    if cfg is None:
        return None
    try:
        return lite.LiteApiClient(cfg, limiter, pool_size=pool_size, user_agent=user_agent)
    except (ssl.SSLError, ValueError) as exc:
        raise KubeError(f"cannot use the Kubernetes client configuration: {exc}") from exc


# --- raw requests ----------------------------------------------------------------------------

Query = Mapping[str, str | int | bool] | Iterable[tuple[str, str | int | bool]]


@dataclass(slots=True)
class Response:
    """A decoded reply: `body` is the JSON object (None when the body was empty or not JSON)."""

    status: int
    body: JSON | None
    headers: Mapping[str, str]


def _query_items(query: Query | None) -> list[tuple[str, str]]:
    if not query:
        return []
    items = query.items() if isinstance(query, Mapping) else query
    out: list[tuple[str, str]] = []
    for key, value in items:
        if isinstance(value, bool):
            out.append((key, "true" if value else "false"))
        else:
            out.append((key, str(value)))
    return out


def _decode(data: bytes) -> JSON | None:
    if not data:
        return None
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def status_message(status: int, body: JSON | None, data: bytes = b"") -> str:
    """The human message of a failed reply: the Status message, else the raw text."""
    if body and isinstance(body.get("message"), str):
        return str(body["message"])
    text = data.decode("utf-8", "replace").strip()
    return text[:500] if text else f"HTTP {status}"


def open_request(
    api_client: Any,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: float | tuple[float, float] | None = DEFAULT_TIMEOUT,
) -> Any:
    """Send a request and return the raw, unread urllib3 response (for streams; the caller closes it).

    Raises TransportError when no HTTP answer arrives. The status is not checked here.
    """
    headers: dict[str, str] = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    send = getattr(api_client, "send", None) or _official_client_class().send.__get__(api_client)
    try:
        return send(method, path, _query_items(query), headers, body, timeout)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TransportError(f"{method} {path}: {exc}") from exc


def request(
    api_client: Any,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: float | tuple[float, float] | None = DEFAULT_TIMEOUT,
) -> Response:
    """One JSON call: raises ApiStatusError on non-2xx, TransportError on no answer."""
    raw = open_request(api_client, method, path, query=query, body=body, content_type=content_type, timeout=timeout)
    try:
        data = raw.data
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TransportError(f"{method} {path}: reading the reply: {exc}") from exc
    finally:
        raw.release_conn()
    decoded = _decode(data)
    headers = dict(raw.headers)
    if not 200 <= raw.status <= 299:
        raise ApiStatusError(raw.status, status_message(raw.status, decoded, data), decoded, headers)
    return Response(raw.status, decoded, headers)


def request_json(api_client: Any, method: str, path: str, **kwargs: Any) -> JSON:
    """`request()` returning just the decoded body ({} when the reply had none)."""
    return request(api_client, method, path, **kwargs).body or {}
