"""The one Kubernetes client of sandbus: plain JSON in and out, with kubernetes_asyncio's
``ApiClient``'s settings, for the workers' writes, the watcher's lists and watches, and the
Lease.

Why not the generated per-kind APIs and models. The objects travel as JSON dicts everywhere
else (events, cache, planners), and the event log must carry an object *as the API server sent
it*: the typed models (``V1Pod``...) drop every field the client version does not know and
turn timestamps into datetimes. The generated deserializer is also slow. So the ``ApiClient``
does only what it is good at (kubeconfig, TLS, tokens) and every call here reads the raw body
and decodes it with msgspec. Nor does a request go through its ``call_api``, which walks the
body and the parameters, dumps the JSON and builds the request anew on every call: about two
thirds of the Python a write runs above aiohttp, a sixth of the client's CPU per write with
aiohttp's share (bench/kube_client_cost.py). A request carries the headers ``call_api`` would
send and the token it would ask for before each request. Nor does a request (anything but an
exec) go through aiohttp, whose per-request machinery is most of the client's CPU per write,
and whose streaming machinery a good part of the watcher's per event:
:mod:`services.runtime.http1` sends a one-shot JSON request over a pool of keep-alive
connections with the ``ApiClient``'s TLS context (its client certificate), SNI name and
connection limit, closed with the ``ApiClient``, and a watch on a connection of its own with
the same settings. Through a proxy, :meth:`KubeApi._send` sends both over the ``ApiClient``'s
aiohttp session instead; an exec goes over that session's connector. The generated
``patch_*`` methods send a dict as json-patch (custom objects) or strategic-merge-patch
(built-in kinds); :meth:`KubeApi.patch` always sends a JSON merge patch, which every kind
accepts. And ``watch.Watch`` hides the cases the watcher must tell apart (docs/devcluster.md
§3): it swallows a clean end by reconnecting with a stale resourceVersion, retries a 410 once
with the same stale version, and lets an aborted stream escape as
``aiohttp.ClientPayloadError``; :meth:`KubeApi.watch` reads the lines itself.

One exception type. Every call raises :class:`KubeError` and nothing else, so a caller
handles exactly one type:

=================================================  =========================================
the API server answered with a failure status      ``status`` the HTTP code, ``reason`` and
(or an ERROR watch event)                          ``message`` from its Status (NotFound,
                                                   AlreadyExists, Conflict, Invalid...);
                                                   :class:`Expired` for 410 Gone
no answer: connection refused or reset, the        ``status`` 0, ``reason`` ``Unreachable``
server disconnected, DNS, TLS, a malformed
answer (any ``aiohttp.ClientError`` or
``OSError``)
no answer within the request timeout               ``status`` 0, ``reason`` ``Timeout``
a watch stream that broke mid-way, or stalled      :class:`StreamBroken`, :class:`StreamStalled`
                                                   (``status`` 0)
=================================================  =========================================

Exec. :meth:`KubeApi.exec` runs a command in a Pod's container through the ``pods/exec``
subresource over a WebSocket (subprotocol ``v5.channel.k8s.io`` or ``v4.channel.k8s.io``: binary
frames whose first byte is the channel, 1 stdout, 2 stderr, 3 the command's final ``Status``).
kubernetes_asyncio's own ``WsApiClient`` is a second ApiClient with its own session, and it
keeps only stdout and stderr, mixed, and drops the exit status; here the WebSocket goes over
the ``ApiClient``'s own connector (its TLS settings and client certificate), to its host, with
its auth headers. A command that ran and failed is an :class:`ExecResult` with its exit code;
a refused upgrade (no such Pod, no such container, no running container) is a
:class:`KubeError` with the API server's status and message, as every other call raises.

Timeouts. Every request is bounded by ``request_timeout`` (30 s unless told), the wait for a
token included. A watch is bounded only until its response starts (connect and headers); the
stream then lives for minutes, and the caller's inactivity limit
(:meth:`WatchStream.next_event`) catches one that went silent.

:data:`RESOURCES` maps a kind to its REST resource: the one table of the kinds sandbus reads
and writes (the watcher's selection of what it watches is built on it,
:mod:`services.watcher.resources`). Kinds are unique across the groups we use, except
``Event``, which here always means ``events.k8s.io/v1``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
import msgspec

from api.kinds import ALL_KINDS
from api.objects import Json
from events.envelope import ObjectKey
from services.runtime import http1
from services.runtime.kubeclient import ApiClient, ApiException

__all__ = [
    "RESOURCES",
    "ExecResult",
    "Expired",
    "KubeApi",
    "KubeError",
    "Resource",
    "StreamBroken",
    "StreamStalled",
    "WatchStream",
]


MERGE_PATCH: Final = "application/merge-patch+json"
JSON: Final = "application/json"
DEFAULT_REQUEST_TIMEOUT: Final = 30.0
"""Seconds any request may take, from sending it to the last byte of the answer."""

_AUTH: Final = ["BearerToken"]
_MAX_LINE: Final = 64 << 20
"""A watch line holds one object: etcd caps those at 1.5 MB, so 64 MB means a broken stream."""
_SHOWN: Final = 300
"""Characters of an unexpected answer quoted in an error message."""
_EXEC_PROTOCOLS: Final = ("v5.channel.k8s.io", "v4.channel.k8s.io")
_STDOUT, _STDERR, _STATUS = 1, 2, 3


# --- resources ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """A REST resource: where the objects of one kind live."""

    group: str
    """``""`` for the core API group."""
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The path of one object (``name``), or of the collection in ``namespace``, or, with
        neither namespace nor name, of the collection across all namespaces."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


RESOURCES: Final[Mapping[str, Resource]] = {
    "Pod": Resource("", "v1", "pods"),
    "Service": Resource("", "v1", "services"),
    "PersistentVolumeClaim": Resource("", "v1", "persistentvolumeclaims"),
    "ConfigMap": Resource("", "v1", "configmaps"),
    "Secret": Resource("", "v1", "secrets"),
    "Event": Resource("events.k8s.io", "v1", "events"),
    "NetworkPolicy": Resource("networking.k8s.io", "v1", "networkpolicies"),
    "Job": Resource("batch", "v1", "jobs"),
    "Lease": Resource("coordination.k8s.io", "v1", "leases"),
    **{
        kind.KIND.kind: Resource(kind.KIND.group, kind.KIND.version, kind.KIND.plural)
        for kind in ALL_KINDS
    },
}


def resource_for(kind: str) -> Resource:
    try:
        return RESOURCES[kind]
    except KeyError:
        raise KubeError(0, "UnknownKind", f"sandbus does not know the resource of {kind}") from None


# --- errors ------------------------------------------------------------------------------


class KubeError(Exception):
    """A request the API server refused, or one that got no answer (``status`` 0)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{reason} ({status}): {message}" if status else f"{reason}: {message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def unanswered(self) -> bool:
        """No answer from the API server: unreachable, timed out, or a stream that broke."""
        return self.status == 0

    @classmethod
    def from_status(
        cls, status: int, body: Any, *, reason: str = "", raw: bytes = b""
    ) -> KubeError:
        """The error for a failure answer: ``body`` is the decoded answer (a ``Status`` when the
        API server wrote it), ``reason`` the HTTP reason phrase, ``raw`` the undecoded body."""
        message = ""
        if isinstance(body, Mapping):
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
            code = body.get("code")
            if isinstance(code, int) and code:
                status = code
        if not message and raw:
            message = raw[:_SHOWN].decode("utf-8", "replace")
        if not reason:
            with contextlib.suppress(ValueError):
                reason = http.HTTPStatus(status).phrase
        error_class = Expired if status == 410 else KubeError
        return error_class(status, reason, message)


class Expired(KubeError):
    """410 Gone: the resourceVersion is older than the server's history. Relist."""


class StreamStalled(KubeError):
    """A watch delivered nothing, not even a bookmark, for longer than the inactivity limit."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "Timeout", message)


class StreamBroken(KubeError):
    """A watch stream broke mid-way (aborted connection, truncated or garbled line)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "StreamBroken", message)


@contextlib.contextmanager
def _answered(what: str, timeout: float) -> Iterator[None]:
    """Turn every client-side failure of ``what`` into a :class:`KubeError` with status 0."""
    try:
        yield
    except ApiException as error:  # kubernetes_asyncio refusing to build the request
        raise KubeError(int(error.status or 0), str(error.reason or "BadRequest"), what) from None
    except TimeoutError as error:  # also aiohttp's ServerTimeoutError; before OSError, its base
        raise KubeError(0, "Timeout", f"{what}: no answer within {timeout:g} s") from error
    except (aiohttp.ClientError, OSError) as error:
        raise KubeError(0, "Unreachable", f"{what}: {error!r}") from error


_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def _decode(raw: bytes) -> Any:
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        return None


# --- watch streams -----------------------------------------------------------------------


class WatchStream:
    """The lines of one watch response, whose body ``read`` gives as it arrives (``b""`` at its
    end): :meth:`http1.Stream.read <services.runtime.http1.Stream.read>`, or the ``readany`` of
    an aiohttp response's content."""

    def __init__(self, read: Callable[[], Awaitable[bytes]]) -> None:
        self._read = read
        self._lines: collections.deque[bytes] = collections.deque()
        """Complete lines read, not yet taken."""
        self._partial: list[bytes] = []
        """The start of the next line, in the pieces it came in."""
        self._partial_size = 0
        self._eof = False

    async def _read_line(self) -> bytes | None:
        """The next line, without its newline; None at the end of the stream."""
        lines = self._lines
        partial = self._partial
        while not lines:
            if self._eof:
                return None
            try:
                chunk = await self._read()
            except (aiohttp.ClientError, OSError) as error:
                raise StreamBroken(f"the watch stream broke: {error!r}") from error
            if not chunk:
                self._eof = True
                if b"".join(partial).strip():
                    raise StreamBroken("the watch stream ended in the middle of a line")
                partial.clear()
                return None
            if b"\n" not in chunk:
                partial.append(chunk)
                self._partial_size += len(chunk)
            else:
                if partial:
                    partial.append(chunk)
                    chunk = b"".join(partial)
                    partial.clear()
                *complete, rest = chunk.split(b"\n")
                lines.extend(complete)
                if rest:
                    partial.append(rest)
                self._partial_size = len(rest)
            if self._partial_size > _MAX_LINE:
                raise StreamBroken(f"a watch line exceeded {_MAX_LINE} bytes")
        return lines.popleft()

    async def next_event(self, inactivity_limit: float) -> dict[str, Any] | None:
        """The next event (BOOKMARKs included), or None when the server ended the stream."""
        while True:
            if self._lines:  # read already: no wait to bound
                line: bytes | None = self._lines.popleft()
            else:
                try:
                    async with asyncio.timeout(inactivity_limit):
                        line = await self._read_line()
                except TimeoutError:
                    raise StreamStalled(
                        f"no watch event or bookmark for {inactivity_limit:g} s"
                    ) from None
            if line is None:
                return None
            if not line.strip():
                continue
            event = _decode(line)
            if not isinstance(event, dict):
                raise StreamBroken(f"a watch line is not a JSON object: {line[:200]!r}")
            event_type = event.get("type")
            obj = event.get("object")
            if event_type == "ERROR" or (event_type is None and "code" in event):
                raise KubeError.from_status(500, obj if event_type == "ERROR" else event)
            if not isinstance(event_type, str) or not isinstance(obj, dict):
                raise StreamBroken(f"a watch line has no type or object: {line[:200]!r}")
            return event


# --- exec --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecResult:
    """What a command run through ``pods/exec`` left: its output and how it ended."""

    stdout: str
    stderr: str
    exit_code: int | None
    """0 when it succeeded, else its exit code; None when the container runtime could not run
    it at all (``message`` says why)."""
    message: str = ""
    """The failure the API server reported on the status channel (empty on success)."""

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0


async def _exec_result(ws: aiohttp.ClientWebSocketResponse, what: str) -> ExecResult:
    """Demultiplex one exec stream until the server closes it."""
    channels = {_STDOUT: bytearray(), _STDERR: bytearray(), _STATUS: bytearray()}
    async for message in ws:
        if message.type is aiohttp.WSMsgType.BINARY and message.data:
            data: bytes = message.data
            if data[0] in channels:
                channels[data[0]] += data[1:]
        elif message.type is aiohttp.WSMsgType.ERROR:
            raise StreamBroken(f"{what}: the exec stream broke: {ws.exception()!r}")
    stdout = channels[_STDOUT].decode("utf-8", "replace")
    stderr = channels[_STDERR].decode("utf-8", "replace")
    status = _decode(bytes(channels[_STATUS]))
    if not isinstance(status, dict):
        raise StreamBroken(
            f"{what}: the exec stream ended without the command's status "
            f"(close code {ws.close_code}; stdout {stdout[:_SHOWN]!r}, stderr {stderr[:_SHOWN]!r})"
        )
    if status.get("status") == "Success":
        return ExecResult(stdout, stderr, 0)
    exit_code: int | None = None
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or ():
            if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
                with contextlib.suppress(TypeError, ValueError):
                    exit_code = int(str(cause.get("message")))
    return ExecResult(stdout, stderr, exit_code, str(status.get("message") or status))


# --- the client --------------------------------------------------------------------------


class KubeApi:
    """JSON in, JSON out, for the kinds in :data:`RESOURCES`.

    ``field_manager`` names the writer in ``managedFields`` (sent with every create, patch
    and replace when set). ``via_call_api`` sends every request through kubernetes_asyncio's
    ``call_api``, as all went before :meth:`_send` sent them itself; ``via_aiohttp`` sends the
    requests and watches over the ``ApiClient``'s aiohttp session, as all went before
    :mod:`services.runtime.http1` carried them: both only for measuring the ways
    (bench/kube_client_cost.py) and comparing them in tests.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        field_manager: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        via_call_api: bool = False,
        via_aiohttp: bool = False,
    ) -> None:
        if request_timeout <= 0:
            raise ValueError("the request timeout must be positive")
        self._client = api_client
        self.field_manager = field_manager
        self.request_timeout = request_timeout
        self._via_call_api = via_call_api
        self._pool = None if via_call_api or via_aiohttp else _http1_pool(api_client)
        # The path of the configured host (an API server behind a path prefix), before ours.
        self._prefix = urlsplit(str(api_client.configuration.host)).path.rstrip("/")
        rest = api_client.rest_client
        # What kubernetes_asyncio's REST client adds to every request, fixed when it was made.
        self._options: dict[str, Any] = {
            option: value
            for option, value in (
                ("proxy", rest.proxy),
                ("proxy_headers", rest.proxy_headers),
                ("server_hostname", rest.server_hostname),
            )
            if value
        }

    @property
    def field_manager(self) -> str | None:
        return self._field_manager

    @field_manager.setter
    def field_manager(self, name: str | None) -> None:
        self._field_manager = name
        # The query string of every create, patch and replace, encoded once.
        self._write_query = f"?{urlencode(self._writing())}" if name else ""

    # -- transport ----------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None,
        write: bool,
        body: Any,
        content_type: str,
        client_timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """The request ``call_api`` would make, without the CPU it spends building it
        (bench/kube_client_cost.py): the body encoded by msgspec, the query string by one
        ``urlencode`` (a write's once, :attr:`field_manager`), the ``ApiClient``'s own headers
        and the token its ``update_params_for_auth`` gives now, which runs the configuration's
        ``refresh_api_key_hook`` first (the in-cluster token re-read from its file) and reads
        the token that an exec plugin's ``config.refresh_token`` may have replaced; over its
        session, with its proxy and SNI name. For every request and watch through a proxy (or
        ``via_aiohttp``); :meth:`_json` and :meth:`watch` send the others over
        :mod:`services.runtime.http1`. ``write``: a create, patch or replace, which names
        :attr:`field_manager`."""
        client = self._client
        if self._via_call_api:
            response: aiohttp.ClientResponse = await client.call_api(
                path,
                method,
                query_params=self._writing() if write else query or [],
                header_params={"Accept": JSON, "Content-Type": content_type},
                body=body,
                auth_settings=_AUTH,
                _preload_content=False,
                _request_timeout=client_timeout,
            )
            return response
        headers, target = await self._prepare(path, query, write, content_type)
        data = None if body is None else _encoder.encode(body)
        return await client.rest_client.pool_manager.request(
            method,
            f"{client.configuration.host}{target}",
            headers=headers,
            data=data,
            timeout=client_timeout,
            **self._options,
        )

    async def _prepare(
        self, path: str, query: list[tuple[str, str]] | None, write: bool, content_type: str
    ) -> tuple[dict[str, str], str]:
        """The headers of a request and its path with the query string."""
        headers = {"Accept": JSON, "Content-Type": content_type}
        credentials: list[tuple[str, str]] = []  # were the token configured to go in the query
        await self._add_client_headers(headers, credentials)
        if write and not credentials:
            return headers, path + self._write_query
        if write or query or credentials:
            pairs = [*(self._writing() if write else query or ()), *credentials]
            return headers, f"{path}?{urlencode(pairs)}"
        return headers, path

    async def _add_client_headers(
        self, headers: dict[str, str], query: list[tuple[str, str]]
    ) -> None:
        """Add what the ``ApiClient`` adds to every request: its default headers (User-Agent),
        its cookie, and the bearer token (in ``headers``, or in ``query`` were it configured so)
        as its ``update_params_for_auth`` gives it now."""
        client = self._client
        headers.update(client.default_headers)
        if client.cookie:
            headers["Cookie"] = client.cookie
        await client.update_params_for_auth(headers, query, _AUTH)

    async def _json(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        write: bool = False,
        body: Any = None,
        content_type: str = JSON,
    ) -> Json:
        what = f"{method} {path}"
        timeout = self.request_timeout
        pool = self._pool
        with _answered(what, timeout):
            # The one bound of the lean transport; for aiohttp, it also covers what its own
            # does not (a token refresh before sending).
            async with asyncio.timeout(timeout):
                if pool is not None:
                    headers, target = await self._prepare(path, query, write, content_type)
                    data = None if body is None else _encoder.encode(body)
                    status, reason, raw = await pool.request(
                        method, self._prefix + target, headers, data
                    )
                else:
                    response = await self._send(
                        method,
                        path,
                        query=query,
                        write=write,
                        body=body,
                        content_type=content_type,
                        client_timeout=aiohttp.ClientTimeout(total=timeout),
                    )
                    try:
                        raw = await response.read()
                    finally:
                        response.release()
                    status, reason = response.status, response.reason or ""
        decoded = _decode(raw)
        if not 200 <= status <= 299:
            raise KubeError.from_status(status, decoded, reason=reason, raw=raw)
        if not isinstance(decoded, dict):
            raise KubeError(
                status, "BadResponse", f"{what} answered {raw[:_SHOWN]!r}, not an object"
            )
        return decoded

    def _writing(self) -> list[tuple[str, str]]:
        return [("fieldManager", self._field_manager)] if self._field_manager else []

    # -- objects ------------------------------------------------------------------------------

    async def get(self, key: ObjectKey) -> Json:
        path = resource_for(key.kind).path(key.namespace, key.name)
        return _with_kind(await self._json("GET", path), key.kind)

    async def create(self, body: Json) -> Json:
        kind = str(body.get("kind") or "")
        namespace = str((body.get("metadata") or {}).get("namespace") or "")
        path = resource_for(kind).path(namespace)
        created = await self._json("POST", path, body=body, write=True)
        return _with_kind(created, kind)

    async def patch(self, key: ObjectKey, patch: Json, *, subresource: str | None = None) -> Json:
        """Apply ``patch`` as a JSON merge patch (RFC 7386)."""
        path = resource_for(key.kind).path(key.namespace, key.name, subresource)
        patched = await self._json("PATCH", path, body=patch, content_type=MERGE_PATCH, write=True)
        return _with_kind(patched, key.kind)

    async def replace(self, body: Json) -> Json:
        """PUT ``body``; its ``metadata.resourceVersion``, when set, is the precondition."""
        kind = str(body.get("kind") or "")
        metadata = body.get("metadata") or {}
        path = resource_for(kind).path(str(metadata.get("namespace") or ""), str(metadata["name"]))
        replaced = await self._json("PUT", path, body=body, write=True)
        return _with_kind(replaced, kind)

    async def delete(
        self,
        key: ObjectKey,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
    ) -> Json:
        """The API's answer: the object while it is still terminating, else a Status (or, for
        some kinds, the deleted object without a deletionTimestamp)."""
        options: Json = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {
            name: value
            for name, value in (("uid", uid), ("resourceVersion", resource_version))
            if value
        }
        if preconditions:
            options["preconditions"] = preconditions
        if propagation:
            options["propagationPolicy"] = propagation
        path = resource_for(key.kind).path(key.namespace, key.name)
        return await self._json("DELETE", path, body=options)

    async def list(self, kind: str, namespace: str) -> list[Json]:
        """Every object of ``kind`` in ``namespace`` (``""``: in all of them), in one answer.
        Workers never list (they read the bus); this is for tools and tests that check what
        the API server holds."""
        listing = await self._json("GET", resource_for(kind).path(namespace))
        return [_with_kind(item, kind) for item in listing.get("items") or ()]

    # -- exec ---------------------------------------------------------------------------------

    async def exec(
        self,
        namespace: str,
        pod: str,
        container: str,
        command: Sequence[str],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109 (bounds the upgrade and the stream, as one)
    ) -> ExecResult:
        """Run ``command`` (an argv, no shell) in ``container`` of the Pod, with stdout and stderr
        and neither stdin nor a TTY, and wait until it ends, ``timeout`` seconds at most."""
        if not command:
            raise ValueError("exec needs a command")
        if timeout <= 0:
            raise ValueError("the exec timeout must be positive")
        path = resource_for("Pod").path(namespace, pod, "exec")
        query = [
            ("container", container),
            *(("command", argument) for argument in command),
            ("stdout", "true"),
            ("stderr", "true"),
        ]
        what = f"exec {list(command)} in {namespace}/{pod} container {container}"
        rest = self._client.rest_client
        headers: dict[str, str] = {}
        # aiohttp drops the body of a refused upgrade; keep it for the error's message.
        refusal: list[bytes] = []

        async def keep_refusal(
            _session: aiohttp.ClientSession, _context: Any, params: aiohttp.TraceRequestEndParams
        ) -> None:
            if params.response.status != 101:
                refusal.append(await params.response.read())

        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(keep_refusal)
        with _answered(what, timeout):
            async with asyncio.timeout(timeout):
                await self._add_client_headers(headers, query)
                async with aiohttp.ClientSession(
                    connector=rest.pool_manager.connector,
                    connector_owner=False,
                    trust_env=True,
                    trace_configs=[trace],
                ) as session:
                    try:
                        ws = await session.ws_connect(
                            f"{self._client.configuration.host}{path}",
                            params=query,
                            headers=headers,
                            protocols=_EXEC_PROTOCOLS,
                            proxy=rest.proxy or None,
                            proxy_headers=rest.proxy_headers or None,
                            server_hostname=rest.server_hostname or None,
                        )
                    except aiohttp.WSServerHandshakeError as refused:
                        raw = refusal[0] if refusal else b""
                        raise KubeError.from_status(refused.status, _decode(raw), raw=raw) from None
                    async with ws:
                        return await _exec_result(ws, what)

    # -- the watcher's list and watch ---------------------------------------------------------

    async def list_page(
        self,
        kind: str,
        *,
        limit: int,
        continue_token: str | None = None,
        label_selector: str | None = None,
        namespace: str | None = None,
    ) -> Json:
        """One page of a list (cluster-wide unless ``namespace``), as the API server sent it:
        items of built-in kinds come without ``kind``."""
        query = [("limit", str(limit))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if continue_token:
            query.append(("continue", continue_token))
        return await self._json("GET", resource_for(kind).path(namespace), query=query)

    async def get_as_of(self, key: ObjectKey, resource_version: str) -> Json | None:
        """``key`` as it was at exactly ``resource_version`` (None: it did not exist then): a
        list of its namespace narrowed to its name at that revision, which a real API server
        answers from etcd's history. Raises :class:`Expired` when the history no longer
        reaches back so far."""
        query = [
            ("fieldSelector", f"metadata.name={key.name}"),
            ("resourceVersion", resource_version),
            ("resourceVersionMatch", "Exact"),
        ]
        listing = await self._json("GET", resource_for(key.kind).path(key.namespace), query=query)
        for item in listing.get("items") or ():
            if isinstance(item, dict) and (item.get("metadata") or {}).get("name") == key.name:
                return _with_kind(item, key.kind)
        return None

    @contextlib.asynccontextmanager
    async def watch(
        self,
        kind: str,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None = None,
        namespace: str | None = None,
    ) -> AsyncIterator[WatchStream]:
        """A watch from ``resource_version`` with bookmarks; the server ends it cleanly after
        ``timeout_seconds``. On a connection of its own from :mod:`services.runtime.http1`,
        or over the ``ApiClient``'s aiohttp session through a proxy (or ``via_aiohttp``)."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        path = resource_for(kind).path(namespace)
        what = f"watch {path}"
        bound = self.request_timeout
        pool = self._pool
        if pool is not None:
            # Bounded until the answer's head came (a failure's whole answer); then the stream
            # is not, as over aiohttp.
            with _answered(what, bound):
                async with asyncio.timeout(bound):
                    headers, target = await self._prepare(path, query, False, JSON)
                    stream = await pool.stream(self._prefix + target, headers)
            try:
                if stream.status != 200:
                    raw = stream.body
                    raise KubeError.from_status(
                        stream.status, _decode(raw), reason=stream.reason, raw=raw
                    )
                yield WatchStream(stream.read)
            finally:
                stream.close()
            return
        # No total timeout for the stream: only connecting and the response headers are bounded.
        timeout = aiohttp.ClientTimeout(total=None, connect=bound, sock_connect=bound)
        with _answered(what, bound):
            async with asyncio.timeout(bound):
                response = await self._send(
                    "GET",
                    path,
                    query=query,
                    write=False,
                    body=None,
                    content_type=JSON,
                    client_timeout=timeout,
                )
        try:
            if response.status != 200:
                with _answered(what, bound):
                    async with asyncio.timeout(bound):
                        raw = await response.read()
                raise KubeError.from_status(
                    response.status, _decode(raw), reason=response.reason or "", raw=raw
                )
            yield WatchStream(response.content.readany)
        finally:
            response.close()


def _http1_pool(client: ApiClient) -> http1.Pool | None:
    """The lean transport of ``client``'s requests and watches: one pool per ``ApiClient``, with
    its TLS context, SNI name and connection limit, closed when it is. None when they must go
    over its aiohttp session: through a proxy, or to a host that is not a plain http(s) URL."""
    rest = client.rest_client
    pool: http1.Pool | None = getattr(rest, "sandbus_http1", None)
    if pool is not None or rest.proxy:
        return pool
    url = urlsplit(str(client.configuration.host))
    connector = rest.pool_manager.connector
    context = getattr(connector, "_ssl", None)  # the SSLContext kubernetes_asyncio made
    if url.scheme == "https" and not isinstance(context, ssl.SSLContext):
        return None
    if url.scheme not in ("http", "https") or not url.hostname or url.username or not connector:
        return None
    https = url.scheme == "https"
    pool = http1.Pool(
        url.hostname,
        url.port or (443 if https else 80),
        ssl_context=context if https else None,
        server_hostname=rest.server_hostname,
        limit=connector.limit,
    )
    closing = rest.close

    async def close() -> None:  # the ApiClient's close closes its REST client's
        try:
            await closing()
        finally:
            await pool.close()

    rest.close = close  # type: ignore[method-assign]
    rest.sandbus_http1 = pool  # type: ignore[attr-defined]
    return pool


def _with_kind(obj: Json, kind: str) -> Json:
    # Built-in kinds answer with apiVersion/kind set, but a caller should not have to care.
    if kind and not obj.get("kind"):
        obj["kind"] = kind
    return obj
