"""The watcher's few Kubernetes calls, as raw JSON over kubernetes_asyncio's configured client.

Why raw: the typed models of kubernetes_asyncio (``V1Pod``...) drop every field the client
version does not know and turn timestamps into datetimes, and the event log must carry the
object *as the API server sent it*. And ``watch.Watch`` hides the cases the watcher must tell
apart (spec/kube-standin.md §3): it swallows a clean EOF by reconnecting with a stale
resourceVersion, retries a 410 once with the same stale version, and lets an aborted stream
escape as ``aiohttp.ClientPayloadError``. Here the ApiClient still does what it is good at
(kubeconfig, TLS, tokens), and this module reads the wire format itself:

- :meth:`KubeApi.list_page`: one page of a cluster-wide list (``limit``/``continue``).
- :meth:`KubeApi.watch`: a watch stream whose :meth:`WatchStream.next_event` returns the next
  ``{"type", "object"}`` line, None at a clean end, and raises :class:`Expired` on an ERROR 410,
  :class:`KubeApiError` on another ERROR or HTTP status, :class:`StreamStalled` when nothing
  (not even a bookmark) arrived within the inactivity limit, and :class:`StreamBroken` when the
  connection broke mid-stream.
- GET / POST / PUT of one object, for the Lease.

Every failure is a :class:`KubeApiError` subclass or a connection error from aiohttp; callers
decide what each means (relist, rewatch, retry).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import msgspec
from kubernetes_asyncio.client import ApiClient

from services.watcher.resources import WatchedResource

__all__ = [
    "CONNECTION_ERRORS",
    "Expired",
    "KubeApi",
    "KubeApiError",
    "StreamBroken",
    "StreamStalled",
    "WatchStream",
]

_AUTH = ["BearerToken"]
_JSON = {"Accept": "application/json"}
_MAX_LINE = 64 << 20
"""A watch line holds one object: etcd caps those at 1.5 MB, so 64 MB means a broken stream."""

CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    ConnectionError,
    TimeoutError,
    OSError,
)
"""What a request raises when the API server is unreachable or the connection breaks."""


class KubeApiError(Exception):
    """The API server answered with a failure (an HTTP status, or an ERROR watch event)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}".strip())

    @classmethod
    def from_status(cls, status: int, body: Any) -> KubeApiError:
        reason = message = ""
        if isinstance(body, Mapping):
            reason = str(body.get("reason") or "")
            message = str(body.get("message") or "")
            code = body.get("code")
            if isinstance(code, int) and code:
                status = code
        error_class = Expired if status == 410 else cls
        return error_class(status, reason, message)


class Expired(KubeApiError):
    """410 Gone: the resourceVersion is older than the server's history. Relist."""


class StreamStalled(Exception):
    """A watch delivered nothing, not even a bookmark, for longer than the inactivity limit."""


class StreamBroken(Exception):
    """A watch stream broke mid-way (aborted connection, truncated or garbled line)."""


_decoder = msgspec.json.Decoder()


def _decode(raw: bytes) -> Any:
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        return None


class WatchStream:
    """The lines of one watch response."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._buffer = bytearray()
        self._eof = False

    async def _read_line(self) -> bytes | None:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line
            if self._eof:
                if self._buffer.strip():
                    raise StreamBroken("the watch stream ended in the middle of a line")
                return None
            if len(self._buffer) > _MAX_LINE:
                raise StreamBroken(f"a watch line exceeded {_MAX_LINE} bytes")
            try:
                chunk = await self._response.content.readany()
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as error:
                raise StreamBroken(f"the watch stream broke: {error!r}") from error
            if not chunk:
                self._eof = True
            else:
                self._buffer += chunk

    async def next_event(self, inactivity_limit: float) -> dict[str, Any] | None:
        """The next event (BOOKMARKs included), or None when the server ended the stream."""
        while True:
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
                raise KubeApiError.from_status(500, obj if event_type == "ERROR" else event)
            if not isinstance(event_type, str) or not isinstance(obj, dict):
                raise StreamBroken(f"a watch line has no type or object: {line[:200]!r}")
            return event


class KubeApi:
    """Raw JSON access to the API server through a configured ``ApiClient``."""

    def __init__(self, api_client: ApiClient, *, request_timeout: float = 30.0) -> None:
        self._client = api_client
        self._request_timeout = request_timeout

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        request_timeout: aiohttp.ClientTimeout | float | None = None,
    ) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._client.call_api(
            path,
            method,
            query_params=query or [],
            header_params=dict(_JSON),
            body=body,
            auth_settings=_AUTH,
            _preload_content=False,
            _request_timeout=(
                request_timeout if request_timeout is not None else self._request_timeout
            ),
        )
        return response

    async def _json(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        response = await self._call(method, path, query=query, body=body)
        try:
            raw = await response.read()
        finally:
            response.release()
        decoded = _decode(raw)
        if not 200 <= response.status <= 299:
            raise KubeApiError.from_status(response.status, decoded)
        if not isinstance(decoded, dict):
            raise KubeApiError(response.status, "BadResponse", "the response is not a JSON object")
        return decoded

    async def get(self, path: str) -> dict[str, Any]:
        return await self._json("GET", path)

    async def create(self, collection_path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._json("POST", collection_path, body=dict(body))

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._json("PUT", path, body=dict(body))

    async def list_page(
        self, resource: WatchedResource, *, limit: int, continue_token: str | None = None
    ) -> dict[str, Any]:
        query = [("limit", str(limit))]
        if resource.label_selector:
            query.append(("labelSelector", resource.label_selector))
        if continue_token:
            query.append(("continue", continue_token))
        return await self._json("GET", resource.path, query=query)

    @contextlib.asynccontextmanager
    async def watch(
        self, resource: WatchedResource, *, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[WatchStream]:
        """A watch from ``resource_version`` with bookmarks; the server ends it cleanly after
        ``timeout_seconds``."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if resource.label_selector:
            query.append(("labelSelector", resource.label_selector))
        # No total timeout: the stream lives for minutes; the caller's inactivity limit
        # (WatchStream.next_event) catches a stalled one.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._request_timeout)
        response = await self._call("GET", resource.path, query=query, request_timeout=timeout)
        try:
            if response.status != 200:
                raise KubeApiError.from_status(response.status, _decode(await response.read()))
            yield WatchStream(response)
        finally:
            response.close()
