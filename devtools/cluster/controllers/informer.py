"""Client-side controller plumbing for the simulated cluster components (kubelet, GC).

The scheduler, kubelet and garbage collector of the development cluster are controllers that talk
to the API server over HTTP, like their real counterparts: they never touch the store. That keeps
them honest (every write goes through admission, validation, resourceVersions and watch fan-out,
so the objects a test sees were produced the way a cluster produces them) and lets the same code
run against the in-process server or a standalone one.

:class:`Informer`, shaped after client-go's, lists a resource, then watches it from the list's
resourceVersion, keeping a cache keyed by ``(namespace, name)`` and calling a synchronous handler
for every change. On a 410 (an ``ERROR`` event with code 410, or an HTTP 410) it relists and
reports the difference as synthetic events, which is what a real reflector does; on a dropped
connection or a clean end of stream it resumes the watch from the last resourceVersion it saw.

The work queue the handlers feed is :class:`api.workqueue.WorkQueue`, the one the services'
reconcilers run on: keys are deduplicated, a key being processed is never handed to a second
worker (a re-add while processing is replayed after ``done``), and ``add_after`` delays a key,
which is how the planners' "wake me in 200 ms" is carried out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec

from api.objects import resource_version_of

__all__ = ["Informer", "NamespacedName", "namespaced_name"]

log = logging.getLogger(__name__)

NamespacedName = tuple[str, str]
"""(namespace, name), as controller-runtime names it; the namespace is "" for cluster-scoped
objects. The informer keys one kind, so the kind is not part of it."""
Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], None]

_RETRY_DELAY = 0.2
_WATCH_TIMEOUT_SECONDS = 300


def namespaced_name(obj: dict[str, Any]) -> NamespacedName:
    metadata = obj.get("metadata") or {}
    return (metadata.get("namespace") or "", metadata.get("name") or "")


class WatchExpired(Exception):
    """The watch's resourceVersion is too old: relist."""


class Informer:
    """List+watch one collection URL into a cache, reporting ADDED/MODIFIED/DELETED to a handler.

    ``handler(type, obj, old)`` runs synchronously in the informer's task, after the cache has
    been updated; ``old`` is the previous cached version (None for ADDED).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        path: str,
        handler: Handler,
        *,
        label_selector: str = "",
        retry_delay: float = _RETRY_DELAY,
    ) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + path
        self._handler = handler
        self._label_selector = label_selector
        self._retry_delay = retry_delay
        self.cache: dict[NamespacedName, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.gone = False  # the collection itself answered 404 (e.g. its CRD was deleted)

    def get(self, key: NamespacedName) -> dict[str, Any] | None:
        return self.cache.get(key)

    async def run(self) -> None:
        """List, then watch forever; relist on 410. Ends only when cancelled or gone."""
        while True:
            try:
                await self._list()
                while True:
                    try:
                        await self._watch()
                    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as error:
                        log.debug("watch of %s interrupted: %s", self._url, error)
                        await asyncio.sleep(self._retry_delay)
            except WatchExpired:
                log.debug("watch of %s expired at %s; relisting", self._url, self.resource_version)
            except _Gone:
                self.gone = True
                self.synced.set()
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a server restart, a 5xx: keep the controller alive
                log.debug("list/watch of %s failed: %r", self._url, error)
                await asyncio.sleep(self._retry_delay)

    def _params(self, **extra: str) -> dict[str, str]:
        params = dict(extra)
        if self._label_selector:
            params["labelSelector"] = self._label_selector
        return params

    async def _list(self) -> None:
        async with self._session.get(self._url, params=self._params()) as response:
            if response.status == 404:
                raise _Gone
            if response.status != 200:
                raise RuntimeError(f"list {self._url}: HTTP {response.status}")
            body = _decode(await response.read())
        fresh = {namespaced_name(item): item for item in body.get("items") or []}
        previous = self.cache
        self.cache = dict(fresh)
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        # A relist reports what changed while we were not watching, like a reflector's Replace.
        for key, vanished in previous.items():
            if key not in fresh:
                self._handler("DELETED", vanished, vanished)
        for key, obj in fresh.items():
            known = previous.get(key)
            if known is None:
                self._handler("ADDED", obj, None)
            elif resource_version_of(known) != resource_version_of(obj):
                self._handler("MODIFIED", obj, known)
        self.synced.set()

    async def _watch(self) -> None:
        params = self._params(
            watch="true",
            resourceVersion=self.resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(_WATCH_TIMEOUT_SECONDS),
        )
        async with self._session.get(self._url, params=params, timeout=_NO_TIMEOUT) as response:
            if response.status == 410:
                raise WatchExpired
            if response.status == 404:
                raise _Gone
            if response.status != 200:
                raise RuntimeError(f"watch {self._url}: HTTP {response.status}")
            async for raw in response.content:
                line = raw.strip()
                if line:
                    self._on_event(_decode(line))

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired
            raise RuntimeError(f"watch error: {obj.get('message')}")
        rv = resource_version_of(obj)
        if rv:
            self.resource_version = rv
        if kind == "BOOKMARK":
            return
        key = namespaced_name(obj)
        old = self.cache.get(key)
        if kind == "DELETED":
            self.cache.pop(key, None)
            self._handler("DELETED", obj, old)
        elif kind in ("ADDED", "MODIFIED"):
            self.cache[key] = obj
            self._handler("ADDED" if old is None else "MODIFIED", obj, old)


class _Gone(Exception):
    """The collection no longer exists (404)."""


_NO_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None)


_decoder = msgspec.json.Decoder()


def _decode(raw: bytes) -> Any:
    # msgspec decodes several times faster than json; every pod status write passes through here.
    return _decoder.decode(raw)


async def cancel_tasks(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel and await tasks, swallowing their cancellation."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
