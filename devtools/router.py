"""A sandbox router for the development cluster: what agent-sandbox's ``sandbox-router`` is on a
real cluster, so the SDK's ``SandboxDirectConnectionConfig(api_url=...)`` works unchanged.

The SDK sends every runtime request (``/execute``, ``/upload``, ``/download/...``) to one URL
with the router headers: ``X-Sandbox-ID`` (the Sandbox's name), ``X-Sandbox-Namespace``,
``X-Sandbox-Port`` (the runtime's port, 8888), and, when it could read one,
``X-Sandbox-Pod-IP`` and ``X-Sandbox-Timeout``. For each request the router:

1. reads the Sandbox from the Kubernetes API (the kubeconfig it is given): none of that name is
   a **404** saying which; a malformed header a 400;
2. wants it Ready (its ``Ready`` condition True) with a Pod IP in ``status.podIPs``; otherwise a
   **503** with the condition's reason and message, which the SDK treats as retryable;
3. forwards the request, body and headers (less the router's own and the hop-by-hop ones) to
   ``http://<podIP>:<port>``, streaming both ways, bounded by ``X-Sandbox-Timeout`` (else 180 s,
   upstream's default): a runtime that does not answer is a 502, one too slow a 504.

``X-Sandbox-Pod-IP`` is used only when it is one of the Sandbox's own IPs: the header comes from
the client, and a router that forwarded to any address it is told would let a client reach any
host the router can. In the development cluster Pod IPs are loopback addresses on this machine
(see :mod:`devtools.cluster.controllers.kubelet.nodes`), where the kubelet runs a real runtime
for the Pods that ask for one (:mod:`devtools.sandboxruntime`).

:func:`serve_router` serves it on a free port (or the one given) while its block runs and
yields its URL; `sandbus up` starts one beside the development cluster.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

__all__ = ["Route", "RoutingError", "serve_router"]

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 8888
DEFAULT_NAMESPACE: Final = "default"
DEFAULT_TIMEOUT: Final = 180.0
_CONNECT_TIMEOUT: Final = 5.0
_AGENTS = ("agents.x-k8s.io", "v1beta1")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ROUTER_HEADERS: Final = frozenset(
    {
        "x-sandbox-id",
        "x-sandbox-namespace",
        "x-sandbox-port",
        "x-sandbox-pod-ip",
        "x-sandbox-timeout",
    }
)
_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


class RoutingError(Exception):
    """A request the router answers itself: its HTTP status and a message for the caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Route:
    """Where a request goes, read from its router headers."""

    name: str
    namespace: str
    port: int
    pod_ip: str | None
    timeout: float


def parse_route(headers: Any) -> Route:
    """The route the headers ask for; :class:`RoutingError` (400) when they are malformed."""
    name = str(headers.get("X-Sandbox-ID") or "").strip()
    if not name:
        raise RoutingError(400, "missing the X-Sandbox-ID header: which sandbox?")
    namespace = str(headers.get("X-Sandbox-Namespace") or DEFAULT_NAMESPACE).strip()
    for what, value in (("X-Sandbox-ID", name), ("X-Sandbox-Namespace", namespace)):
        if not _NAME.match(value):
            raise RoutingError(400, f"{what} {value!r} is not a Kubernetes name")
    return Route(
        name,
        namespace,
        _port(headers.get("X-Sandbox-Port")),
        str(headers.get("X-Sandbox-Pod-IP") or "").strip() or None,
        _timeout(headers.get("X-Sandbox-Timeout")),
    )


def _port(raw: str | None) -> int:
    if raw is None or not str(raw).strip():
        return DEFAULT_PORT
    try:
        port = int(raw)
    except ValueError:
        raise RoutingError(400, f"X-Sandbox-Port {raw!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise RoutingError(400, f"X-Sandbox-Port {port} is out of range")
    return port


def _timeout(raw: str | None) -> float:
    try:
        value = float(raw) if raw is not None else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if math.isfinite(value) and value > 0 else DEFAULT_TIMEOUT


def _ready_condition(sandbox: dict[str, Any]) -> dict[str, Any]:
    for condition in (sandbox.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return cast(dict[str, Any], condition)
    return {}


def target_ip(sandbox: dict[str, Any], route: Route) -> str:
    """The Pod IP to forward to; :class:`RoutingError` (503) while the Sandbox is not Ready."""
    where = f"sandbox {route.namespace}/{route.name}"
    ready = _ready_condition(sandbox)
    if ready.get("status") != "True":
        reason = ready.get("reason") or "no Ready condition yet"
        detail = f": {ready['message']}" if ready.get("message") else ""
        raise RoutingError(503, f"{where} is not Ready ({reason}{detail})")
    ips = [str(ip) for ip in (sandbox.get("status") or {}).get("podIPs") or () if ip]
    if not ips:
        raise RoutingError(503, f"{where} is Ready but reports no Pod IP yet")
    # The client's header only picks among the Sandbox's own addresses.
    return route.pod_ip if route.pod_ip in ips else ips[0]


class _Router:
    def __init__(self, api: k8s.ApiClient, session: aiohttp.ClientSession) -> None:
        self.objects = k8s.CustomObjectsApi(api)
        self.session = session

    async def sandbox(self, route: Route) -> dict[str, Any]:
        try:
            found = await self.objects.get_namespaced_custom_object(
                *_AGENTS, route.namespace, "sandboxes", route.name
            )
        except k8s.ApiException as error:
            if error.status == 404:
                raise RoutingError(
                    404, f"sandbox {route.namespace}/{route.name} not found"
                ) from None
            raise RoutingError(502, f"reading the sandbox: HTTP {error.status}") from None
        except (aiohttp.ClientError, TimeoutError) as error:
            raise RoutingError(502, f"cannot read the sandbox from Kubernetes: {error}") from None
        return cast(dict[str, Any], found)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            route = parse_route(request.headers)
            ip = target_ip(await self.sandbox(route), route)
            return await self.forward(request, route, ip)
        except RoutingError as error:
            log.debug("router: %s %s: %s %s", request.method, request.path, error.status, error)
            return web.json_response({"message": error.message}, status=error.status)

    async def forward(self, request: web.Request, route: Route, ip: str) -> web.StreamResponse:
        url = f"http://{ip}:{route.port}{request.rel_url}"
        headers = {
            key: value
            for key, value in request.headers.items()
            if key.lower() not in _ROUTER_HEADERS and key.lower() not in _HOP_BY_HOP
        }
        body = request.content if request.body_exists else None
        # A Pod without a runtime (simulated only) must not hold the caller for the whole timeout.
        timeout = aiohttp.ClientTimeout(total=route.timeout, sock_connect=_CONNECT_TIMEOUT)
        try:
            # Until the runtime's headers arrive the router can still answer for it; after that
            # the answer is the runtime's, streamed, and a failure only cuts it short.
            upstream = await self.session.request(
                request.method,
                url,
                headers=headers,
                data=body,
                timeout=timeout,
                allow_redirects=False,
            )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as error:
            # Connecting failed, refused or timed out: no runtime listens there.
            raise RoutingError(502, _no_runtime(ip, route, error)) from None
        except TimeoutError:
            raise RoutingError(
                504, f"the sandbox did not answer within {route.timeout:g} s"
            ) from None
        except aiohttp.ClientError as error:
            raise RoutingError(
                502, f"the sandbox's runtime at {ip}:{route.port}: {error}"
            ) from None
        async with upstream:
            return await _relay(request, upstream)


def _no_runtime(ip: str, route: Route, error: Exception) -> str:
    return (
        f"nothing answers at {ip}:{route.port} for sandbox {route.namespace}/{route.name} "
        f"({error}); in the development cluster only Pods that ask for agent-sandbox's runtime "
        "run one (its python-runtime-sandbox image, or the annotation "
        "devcluster.sandbus.io/runtime: agent-sandbox; docs/devcluster.md §4.8)"
    )


async def _relay(request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for key, value in upstream.headers.items():
        if key.lower() not in _HOP_BY_HOP:
            response.headers.add(key, value)
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    await response.prepare(request)
    async for chunk in upstream.content.iter_chunked(1 << 16):
        await response.write(chunk)
    await response.write_eof()
    return response


@contextlib.asynccontextmanager
async def serve_router(
    kubeconfig: Path, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve the router on ``host:port`` (0: a free port) until the block ends; yields its URL."""
    api = await k8s_config.new_client_from_config(config_file=str(kubeconfig))
    # No pooled connection outlives a Pod's runtime for long; no proxy from the environment.
    session = aiohttp.ClientSession(auto_decompress=False)
    router = _Router(api, session)
    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("*", "/{tail:.*}", router.handle)
    runner = web.AppRunner(app, access_log=None)
    # Bound here, not by aiohttp, so the port it got (when asked for 0) is known.
    listener = socket.create_server((host, port))
    try:
        await runner.setup()
        await web.SockSite(runner, listener).start()
        yield f"http://{host}:{listener.getsockname()[1]}"
    finally:
        await runner.cleanup()
        await session.close()
        await api.close()
        listener.close()
