"""`tidemark-scheduler webhook`: the admission webhook over HTTPS (stdlib ssl + tidemark.serving's bounded server).

Endpoints (AdmissionReview v1 and v1beta1, answered in the version asked): `POST /mutate`,
`POST /validate`, and `GET /healthz`. The decisions are `scheduler_ext.webhook.admission`; this
module adds TLS, the API lookups they need (a pod's node, cached by pod UID; a Queue by name) and
the webhook configurations the manifests and tests register (`configurations`). The command also
runs the NodeReport controller (`scheduler_ext.controller.nodereport`), which applies the agents'
reports to their Nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any, Final

from scheduler_ext.webhook.admission import (
    AGENT_GROUP,
    VOLCANO_GROUP,
    Lookups,
    ProfileSource,
    Settings,
    agent_users,
    mutate,
    review_response,
    validate,
)
from tidemark.apis import LABEL_PART_OF, PART_OF_TIDEMARK, dns1123_label_problem, dns1123_subdomain_problem
from tidemark.nodereport import GROUP as REPORT_GROUP
from tidemark.nodereport import PLURAL as REPORT_PLURAL
from tidemark.profiles import GROUP as PROFILE_GROUP
from tidemark.profiles import PLURAL as PROFILE_PLURAL
from tidemark.profiles import PREEMPTION_POLICIES
from tidemark.serving import BoundedHTTPServer, RequestHead, parse_listen_address, plain_response

log = logging.getLogger(__name__)

#: The largest AdmissionReview read: etcd stores at most 1.5 MiB per object (its --max-request-bytes
#: default), an UPDATE's review carries two (object and oldObject), and the envelope (uid, kind, resource,
#: userInfo, options) is a few KiB: 3 MiB and change; 4 MiB leaves room for JSON's field names (core
#: objects are stored as protobuf). A larger body is refused before it is read (`oversized_response`).
MAX_BODY: Final = 4 * 1024 * 1024
#: bytes of review bodies parsed and held at once: one review at the cap, or any number of small ones.
#: json.loads of empty objects costs about 24 bytes of Python objects per byte (a 4 MiB body ~100 MB):
#: with the process's ~50 MB that stays under the Deployment's 256Mi limit whatever arrives in parallel
PARSE_BUDGET: Final = MAX_BODY
#: an API server's review begins with its type and the request's uid (Go encodes the fields in this order)
_REVIEW_PREFIX: Final = re.compile(
    rb'\s*\{\s*"kind"\s*:\s*"AdmissionReview"\s*,\s*"apiVersion"\s*:\s*"(admission\.k8s\.io/v1(?:beta1)?)"\s*,'
    rb'\s*"request"\s*:\s*\{\s*"uid"\s*:\s*"([0-9A-Za-z-]{1,128})"'
)
DEFAULT_AGENT_SERVICE_ACCOUNT: Final = "tidemark-system:tidemark-agent"


class ApiLookups:
    """Lookups through the API: a pod's node (cached by UID: a pod never moves) and Queues (not cached)."""

    def __init__(self, api_client: Any, *, cache_size: int = 4096) -> None:
        self.api = api_client
        self._nodes: dict[str, str] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def pod_node(self, namespace: str, name: str, uid: str | None) -> str | None:
        from tidemark.kube.client import ApiStatusError, request_json
        from tidemark.kube.resources import PODS

        if dns1123_label_problem(namespace) or dns1123_subdomain_problem(name):
            return None  # no such pod can exist: nothing to ask
        if uid:
            with self._lock:
                cached = self._nodes.get(uid)
            if cached:
                return cached
        try:
            pod = request_json(self.api, "GET", PODS.object_path(name, namespace))
        except ApiStatusError as exc:
            if exc.status == 404:
                return None
            raise
        md = pod.get("metadata") or {}
        if uid and md.get("uid") != uid:
            return None
        node = str((pod.get("spec") or {}).get("nodeName") or "") or None
        if node and uid:
            with self._lock:
                if len(self._nodes) >= self._cache_size:
                    self._nodes.pop(next(iter(self._nodes)))
                self._nodes[uid] = node
        return node

    def queue(self, name: str) -> Mapping[str, Any] | None:
        from tidemark.kube.resources import QUEUES

        if dns1123_subdomain_problem(name):
            return None  # no such Queue can exist: nothing to ask
        return self.current(QUEUES.object_path(name))

    def current(self, path: str) -> Mapping[str, Any] | None:
        from tidemark.kube.client import ApiStatusError, request_json

        try:
            return request_json(self.api, "GET", path)
        except ApiStatusError as exc:
            if exc.status == 404:
                return None
            raise


class ProfileCache:
    """The ColocationProfiles and the Namespaces, each a list+watch (`tidemark.kube.reflector`): no GET per pod.

    A namespace created a moment ago may not be in the cache yet: it is read once (GET) and kept until the watch
    has it, for `priority_ttl` seconds at most (up to NAMESPACES_KEPT of them; before, it was read again at every
    admission until the watch caught up). PriorityClasses (value and preemptionPolicy) are read on first use and
    kept for `priority_ttl` seconds. Until the profiles' first list is in, `profiles()` is empty: pods are
    created unchanged, as with the webhook down (failurePolicy Ignore).
    """

    NAMESPACES_KEPT: Final = 1024

    def __init__(self, api_client: Any, *, priority_ttl: float = 60.0) -> None:
        from tidemark.kube.reflector import Reflector
        from tidemark.kube.resources import COLOCATIONPROFILES, NAMESPACES

        self.api = api_client
        self.profile_reflector = Reflector.for_resource(api_client, COLOCATIONPROFILES)
        self.namespace_reflector = Reflector.for_resource(api_client, NAMESPACES)
        self._priority: dict[str, tuple[float, int | None, str | None]] = {}
        self._priority_ttl = priority_ttl
        self._namespaces: dict[str, tuple[float, Mapping[str, Any] | None]] = {}
        self._lock = threading.Lock()
        #: GETs made (namespaces and PriorityClasses), for tests and the metrics
        self.gets = 0

    def start(self) -> ProfileCache:
        self.profile_reflector.start()
        self.namespace_reflector.start()
        return self

    def stop(self) -> None:
        self.profile_reflector.stop()
        self.namespace_reflector.stop()

    def wait_for_sync(self, timeout: float) -> bool:
        return self.profile_reflector.wait_for_sync(timeout) and self.namespace_reflector.wait_for_sync(timeout)

    def profiles(self) -> list[Mapping[str, Any]]:
        return list(self.profile_reflector.store.list())

    def namespace_labels(self, namespace: str) -> Mapping[str, Any] | None:
        from tidemark.kube.resources import NAMESPACES

        ns: Mapping[str, Any] | None = self.namespace_reflector.store.get_object(namespace)
        if ns is None and not dns1123_label_problem(namespace):
            ns = self._namespace_read_once(namespace, NAMESPACES.object_path(namespace))
        return ((ns or {}).get("metadata") or {}).get("labels") or {} if ns is not None else None

    def _namespace_read_once(self, namespace: str, path: str) -> Mapping[str, Any] | None:
        """A namespace the watch has not delivered yet: one GET, kept (the watch takes over once it has it)."""
        now = time.monotonic()
        with self._lock:
            kept = self._namespaces.get(namespace)
        if kept is not None and now - kept[0] < self._priority_ttl:
            return kept[1]
        ns = self._get(path)
        with self._lock:
            if len(self._namespaces) >= self.NAMESPACES_KEPT:
                self._namespaces.clear()
            self._namespaces[namespace] = (now, ns)
        return ns

    def priority_value(self, name: str) -> int | None:
        return self._priority_class(name)[0]

    def preemption_policy(self, name: str) -> str | None:
        return self._priority_class(name)[1]

    def _priority_class(self, name: str) -> tuple[int | None, str | None]:
        """(value, preemptionPolicy) of a PriorityClass, read on first use and kept `priority_ttl` seconds."""
        from tidemark.kube.resources import PRIORITY_CLASSES

        if dns1123_subdomain_problem(name):
            return None, None
        now = time.monotonic()
        with self._lock:
            cached = self._priority.get(name)
        if cached is not None and now - cached[0] < self._priority_ttl:
            return cached[1], cached[2]
        pc = self._get(PRIORITY_CLASSES.object_path(name))
        value = pc.get("value") if pc is not None else None
        found = value if isinstance(value, int) and not isinstance(value, bool) else None
        policy = pc.get("preemptionPolicy") if pc is not None else None
        policy = policy if isinstance(policy, str) and policy in PREEMPTION_POLICIES else None
        with self._lock:
            self._priority[name] = (now, found, policy)
        return found, policy

    def _get(self, path: str) -> Mapping[str, Any] | None:
        from tidemark.kube.client import ApiStatusError, KubeError, request_json

        self.gets += 1
        try:
            return request_json(self.api, "GET", path, timeout=(2.0, 3.0))
        except ApiStatusError as exc:
            if exc.status != 404:
                log.warning("colocation profiles: GET %s: %s", path, exc)
            return None
        except KubeError as exc:
            log.warning("colocation profiles: GET %s: %s", path, exc)
            return None


class ByteBudget:
    """At most `limit` bytes held at once by the holders; one larger than the limit waits to be alone."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, size: int) -> Iterator[None]:
        with self._cond:
            while self.used and self.used + size > self.limit:
                self._cond.wait()
            self.used += size
            self.peak = max(self.peak, self.used)
        try:
            yield
        finally:
            with self._cond:
                self.used -= size
                self._cond.notify_all()


def oversized_review(head: RequestHead, peek: bytes, final: bool) -> bytes | None:
    """The answer to a review over MAX_BODY: the API server's own reviews are denied by their uid (a 413 is a
    webhook failure, which `failurePolicy: Ignore` admits: padding an object past the cap must not pass the
    checks); anything else is a 413. None while the first bytes may still turn out to be a review's."""
    found = _REVIEW_PREFIX.match(peek)
    if found is None:
        if not final and len(peek) < 512 and peek.lstrip()[:1] in (b"", b"{"):
            return None
        return plain_response(413, f"the request body is larger than {MAX_BODY} bytes")
    api_version, uid = found.group(1).decode(), found.group(2).decode()
    message = (f"the AdmissionReview is {head.content_length} bytes, larger than the {MAX_BODY} this webhook reads "
               "(etcd stores at most 1.5 MiB per object)")
    reply = json.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "response": {
        "uid": uid, "allowed": False,
        "status": {"code": 413, "reason": "RequestEntityTooLarge", "message": message},
    }}).encode()
    log.warning("denied an AdmissionReview of %d bytes (uid %s): over the %d-byte cap", head.content_length, uid,
                MAX_BODY)
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(reply)}\r\n"
            "Connection: close\r\n\r\n").encode() + reply


class _WebhookServer(BoundedHTTPServer):
    lookups: Lookups
    settings: Settings
    parses: ByteBudget
    profiles: ProfileSource | None

    def oversized_response(self, head: RequestHead, peek: bytes, final: bool) -> bytes | None:
        return oversized_review(head, peek, final)


class _Handler(BaseHTTPRequestHandler):
    server: _WebhookServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    log_error = log_message

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/healthz", "/livez", "/readyz"):
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/mutate", "/validate"):
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._send(400, b'{"message": "a JSON AdmissionReview with a Content-Length is required"}')
            return
        # parsed, decided and dropped within the budget: a parsed review may be 24 times its body
        with self.server.parses.hold(length):
            self._review(path, length)

    def _review(self, path: str, length: int) -> None:
        try:
            review = json.loads(self.rfile.read(length))
        except (ValueError, RecursionError):
            self._send(400, b'{"message": "the body is not JSON"}')
            return
        if not isinstance(review, dict):
            review = {}
        t0 = time.perf_counter()
        lookups, settings = self.server.lookups, self.server.settings
        if path == "/mutate":
            profiles = self.server.profiles
            reply = review_response(review, lambda req: mutate(req, profiles, settings))
        else:
            reply = review_response(review, lambda req: validate(req, lookups, settings))
        response = reply["response"]
        raw_request = review.get("request")
        request: dict[str, Any] = raw_request if isinstance(raw_request, dict) else {}
        log.info(
            "%s %s %s/%s by %s: %s%s (%.1f ms)",
            path[1:],
            str(request.get("operation")),
            str((request.get("resource") or {}).get("resource")),
            str(request.get("name") or ""),
            str((request.get("userInfo") or {}).get("username")),
            "allowed" if response["allowed"] else "denied",
            "" if response["allowed"] else f": {response['status']['message']}",
            (time.perf_counter() - t0) * 1000,
        )
        self._send(200, json.dumps(reply).encode())


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


class WebhookServer:
    """The HTTPS server in a daemon thread; `port` says where (port 0 binds a free one)."""

    def __init__(
        self,
        listen_address: str,
        ssl_context: ssl.SSLContext,
        lookups: Lookups,
        settings: Settings | None = None,
        *,
        profiles: ProfileSource | None = None,
        timeout: float = 10.0,
        max_workers: int = 8,
        max_connections: int = 256,
    ) -> None:
        host, port = parse_listen_address(listen_address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if host == "" and socket.has_ipv6:
            host, family = "::", socket.AF_INET6
        self._server = _WebhookServer(
            (host, port),
            _Handler,
            family,
            timeout=timeout,
            max_workers=max_workers,
            max_connections=max_connections,
            ssl_context=ssl_context,
            max_body=MAX_BODY,
            # the webhook's readiness is its liveness (nothing to wait for): both have the probe worker
            probe_paths=frozenset({"/healthz", "/livez", "/readyz"}),
        )
        self._server.lookups = lookups
        self._server.settings = settings or Settings()
        self._server.parses = ByteBudget(PARSE_BUDGET)
        self._server.profiles = profiles
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> WebhookServer:
        self._thread = threading.Thread(target=self._server.serve, name="serving-webhook", daemon=True)
        self._thread.start()
        log.info("admission webhook serving /mutate /validate on port %d", self.port)
        return self

    def stop(self) -> None:
        self._server.stop()
        if self._thread is not None:
            self._thread.join(5)
        self._server.server_close()


# --- the webhook configurations ------------------------------------------------------------------

MUTATING_NAME: Final = "tidemark-admission"
VALIDATING_NAME: Final = "tidemark-admission"


def _rule(groups: list[str], resources: list[str], operations: list[str], scope: str = "*") -> dict[str, Any]:
    return {"apiGroups": groups, "apiVersions": ["*"], "resources": resources, "operations": operations, "scope": scope}


def configurations(
    client_config: Mapping[str, Any],
    *,
    failure_policy: str = "Ignore",
    agent_failure_policy: str = "Fail",
    profile_failure_policy: str = "Ignore",
    timeout_seconds: int = 5,
    object_selector: Mapping[str, Any] | None = None,
    namespace_selector: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(MutatingWebhookConfiguration, ValidatingWebhookConfiguration) calling `client_config`
    (`{"service": {...}, "caBundle": ...}` in a cluster, `{"url": ..., "caBundle": ...}` in tests).

    `failure_policy` (Ignore) for the Queue, PodGroup and Pod rules: the scheduler skips any object it cannot
    parse, so nothing there depends on the webhook for safety, and kubelet writes pods/status. The agent rules
    fail closed (`agent_failure_policy`, Fail): NodeReports, which only agents write (their eviction asks too:
    no hook matches `pods/eviction`, so no eviction in the cluster waits for the webhook). No rule matches Nodes:
    agents hold no Node rights, and a Node hook would stand in kubelet's and the controllers' way while the
    webhook is down (docs/security.md, "The agent's writes"). The Pod CREATE hook that applies ColocationProfiles
    has `profile_failure_policy` (Ignore): with the webhook down, pods are created unchanged
    (docs/colocation-profiles.md). The ColocationProfile hook fails closed (`agent_failure_policy`): only cluster
    admins write profiles, and a profile must be checked before it changes the pods it selects. The selectors are
    for tests on a shared API server.
    """

    def hook(name: str, path: str, rules: list[dict[str, Any]], policy: str, namespaced: bool) -> dict[str, Any]:
        h: dict[str, Any] = {
            "name": name,
            "admissionReviewVersions": ["v1", "v1beta1"],
            "sideEffects": "None",
            "failurePolicy": policy,
            "timeoutSeconds": timeout_seconds,
            "matchPolicy": "Equivalent",
            "clientConfig": dict(client_config),
            "rules": rules,
        }
        if "url" in client_config:
            h["clientConfig"]["url"] = str(client_config["url"]) + path
        if "service" in client_config:
            h["clientConfig"] = {**client_config, "service": {**client_config["service"], "path": path}}
        if object_selector is not None and not namespaced:
            h["objectSelector"] = dict(object_selector)
        if namespace_selector is not None and namespaced:
            h["namespaceSelector"] = dict(namespace_selector)
        return h

    agent_policy = agent_failure_policy
    volcano = [_rule([VOLCANO_GROUP], ["queues"], ["CREATE", "UPDATE"], "Cluster")]
    podgroups = [_rule([VOLCANO_GROUP], ["podgroups"], ["CREATE", "UPDATE"], "Namespaced")]
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MUTATING_NAME, "labels": {LABEL_PART_OF: PART_OF_TIDEMARK}},
        "webhooks": [
            hook("queues.mutate.tidemark.io", "/mutate", volcano, failure_policy, False),
            hook("podgroups.mutate.tidemark.io", "/mutate", podgroups, failure_policy, True),
            hook("pods.mutate.tidemark.io", "/mutate",
                 [_rule([""], ["pods"], ["CREATE"], "Namespaced")], profile_failure_policy, True),
        ],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VALIDATING_NAME, "labels": {LABEL_PART_OF: PART_OF_TIDEMARK}},
        "webhooks": [
            hook("queues.validate.tidemark.io", "/validate", volcano, failure_policy, False),
            hook("podgroups.validate.tidemark.io", "/validate", podgroups, failure_policy, True),
            # pods/status too: the status subresource can rewrite a pod's annotations as well
            hook("pods.validate.tidemark.io", "/validate",
                 [_rule([""], ["pods", "pods/status"], ["UPDATE"], "Namespaced")], failure_policy, True),
            hook("nodereports.validate.tidemark.io", "/validate",
                 [_rule([REPORT_GROUP], [REPORT_PLURAL], ["CREATE", "UPDATE", "DELETE"], "Cluster")],
                 agent_policy, False),
            hook("colocationprofiles.validate.tidemark.io", "/validate",
                 [_rule([PROFILE_GROUP], [PROFILE_PLURAL], ["CREATE", "UPDATE"], "Cluster")], agent_policy, False),
        ],
    }
    return mutating, validating


# --- command line -------------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    w = sub.add_parser("webhook", help="serve the admission webhook (Queue/PodGroup defaults and checks, agent rights)")
    w.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    w.add_argument("--listen-address", default=":8443", help="HOST:PORT of the HTTPS endpoint (default :8443)")
    w.add_argument("--tls-cert-file", required=True, help="PEM certificate (chain) the API server trusts")
    w.add_argument("--tls-private-key-file", required=True, help="PEM private key of the certificate")
    w.add_argument(
        "--agent-service-account",
        action="append",
        help=f"NAMESPACE:NAME of the agent's ServiceAccount (repeatable; default {DEFAULT_AGENT_SERVICE_ACCOUNT})",
    )
    w.add_argument(
        "--agent-group",
        action="append",
        help=f"group of the node-bound agent users tidemark:agent:<node> (repeatable; default {AGENT_GROUP})",
    )
    w.add_argument(
        "--node-report-resync",
        type=float,
        default=300.0,
        help="seconds between re-applying every NodeReport to its Node (default 300; 0: no NodeReport controller)",
    )
    w.add_argument(
        "--profile-exempt-namespace",
        action="append",
        help="namespace whose pods no ColocationProfile changes (repeatable; default tidemark-system, kube-system)",
    )
    w.add_argument("--log-format", choices=("text", "json"), default="text")


def webhook_command(ns: argparse.Namespace) -> int:
    """Exit 0 after SIGTERM/SIGINT, 2 on bad flags or certificates, 1 on other failures."""
    from tidemark.kube.client import KubeError, new_api_client
    from tidemark.logs import setup_logging

    setup_logging(ns.log_format)
    try:
        users = agent_users(ns.agent_service_account or [DEFAULT_AGENT_SERVICE_ACCOUNT])
        try:
            ctx = tls_context(ns.tls_cert_file, ns.tls_private_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"TLS certificate {ns.tls_cert_file} / key {ns.tls_private_key_file}: {exc}") from exc
        api = new_api_client(ns.kubeconfig, user_agent="tidemark-webhook")
        exempt = ns.profile_exempt_namespace
        settings = Settings(agent_users=users, agent_groups=frozenset(ns.agent_group or [AGENT_GROUP]),
                            **({"profile_exempt_namespaces": frozenset(exempt)} if exempt else {}))
        profiles = ProfileCache(api)
        server = WebhookServer(ns.listen_address, ctx, ApiLookups(api), settings, profiles=profiles)
    except (ValueError, OSError, ssl.SSLError, KubeError) as exc:
        print(f"tidemark-scheduler webhook: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    profiles.start()
    # the profiles' first list before the first review, when the API answers soon: a pod admitted before it
    # is created unchanged (as with the webhook down)
    if not profiles.wait_for_sync(10.0):
        log.warning("colocation profiles: not listed within 10 s; pods are admitted unchanged until they are")
    server.start()
    controller = None
    if ns.node_report_resync > 0:
        from scheduler_ext.controller.nodereport import NodeReportController

        controller = NodeReportController(api, resync=ns.node_report_resync).start()
    stop.wait()
    if controller is not None:
        controller.stop()
    server.stop()
    profiles.stop()
    return 0
