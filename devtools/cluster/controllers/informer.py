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

__all__ = ["Informer", "NamespacedName", "SharedInformers", "namespaced_name"]

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
    """List+watch one collection URL into a cache, reporting ADDED/MODIFIED/DELETED to handlers.

    ``handler(type, obj, old)`` runs synchronously in the informer's task, after the cache has
    been updated; ``old`` is the previous cached version (None for ADDED). More handlers can be
    added (:meth:`add_handler`), which is how :class:`SharedInformers` serves several
    controllers from one watch; they get the same objects, which none may modify.

    ``metadata``, a :class:`msgspec.Struct` whose fields are keys of ``metadata``, makes it a
    metadata informer (client-go's metadatainformer, done on the client side): the objects it
    caches and reports are ``{"metadata": {...}}`` with only those keys (the ones present), as
    plain dicts. msgspec skips the rest of each object without building it, which is most of
    what decoding a watch event costs.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        path: str,
        handler: Handler | None,
        *,
        label_selector: str = "",
        retry_delay: float = _RETRY_DELAY,
        metadata: type[msgspec.Struct] | None = None,
    ) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + path
        self._handlers: list[Handler] = [handler] if handler is not None else []
        self._label_selector = label_selector
        self._retry_delay = retry_delay
        self._decode_list, self._decode_event = _decoders(metadata)
        self.cache: dict[NamespacedName, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.gone = False  # the collection itself answered 404 (e.g. its CRD was deleted)

    def get(self, key: NamespacedName) -> dict[str, Any] | None:
        return self.cache.get(key)

    def add_handler(self, handler: Handler) -> None:
        """Report to ``handler`` too, starting with what is cached now as ADDED events (as
        client-go does for a handler added to a running informer): the cache only changes
        together with the reports of the change, so it misses nothing and sees nothing twice."""
        self._handlers.append(handler)
        for obj in list(self.cache.values()):
            handler("ADDED", obj, None)

    def remove_handler(self, handler: Handler) -> None:
        with contextlib.suppress(ValueError):
            self._handlers.remove(handler)

    def _handler(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        for handler in self._handlers:
            handler(kind, obj, old)

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
            body = self._decode_list(await response.read())
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
                    self._on_event(self._decode_event(line))

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


class SharedInformers:
    """Informers shared by the controllers of one process, one per collection path (client-go's
    SharedInformerFactory, reduced), on a session of their own.

    The kubelet and the garbage collector both watch every Pod, the collection that changes
    the most: through this they read one watch instead of two, so the server sends, and this
    process reads and decodes, each Pod event once. The watch's User-Agent names both
    components, so a fault rule aimed at either one's requests (a regex search) still matches
    it. :class:`~devtools.cluster.cluster.DevCluster` makes one for its controllers and closes
    it after they have stopped; a controller that is not given one watches on its own.
    """

    USER_AGENT = "devcluster-controllers (devcluster-kubelet, devcluster-garbage-collector)"

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._informers: dict[str, tuple[Informer, asyncio.Task[None]]] = {}

    def informer(self, path: str) -> Informer:
        """The informer of ``path``, started at the first ask (with no handler yet: add yours
        with :meth:`Informer.add_handler`, and wait for ``synced``)."""
        held = self._informers.get(path)
        if held is not None:
            return held[0]
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers={"User-Agent": self.USER_AGENT}, read_bufsize=2**21
            )
        informer = Informer(self._session, self.base_url, path, None)
        self._informers[path] = (informer, asyncio.create_task(informer.run()))
        return informer

    async def close(self) -> None:
        await cancel_tasks([task for _, task in self._informers.values()])
        self._informers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None


class _Gone(Exception):
    """The collection no longer exists (404)."""


_NO_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None)


_decoder = msgspec.json.Decoder()


def _decode(raw: bytes) -> Any:
    # msgspec decodes several times faster than json; every pod status write passes through here.
    return _decoder.decode(raw)


def _decoders(
    metadata: type[msgspec.Struct] | None,
) -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
    """(decode a list body, decode a watch event line): whole documents, or, given a metadata
    Struct, the same shapes reduced to each object's ``metadata`` (those fields) and, for an
    ERROR event's Status, its ``code`` and ``message``. Fields left unset are omitted
    (``omit_defaults``), so the dicts read as the server's with the other keys dropped."""
    if metadata is None:
        return _decode, _decode
    partial = msgspec.defstruct(
        "PartialObject",
        [("metadata", metadata | None, None), ("code", Any, None), ("message", Any, None)],
        omit_defaults=True,
    )
    event = msgspec.defstruct(
        "PartialEvent", [("type", Any, None), ("object", partial | None, None)], omit_defaults=True
    )
    items: Any = list[partial]  # type: ignore[valid-type]  # a type made at run time
    listing = msgspec.defstruct(
        "PartialList",
        [("metadata", dict[str, Any] | None, None), ("items", items | None, None)],
        omit_defaults=True,
    )
    event_decoder = msgspec.json.Decoder(event)
    list_decoder = msgspec.json.Decoder(listing)

    def decode_list(raw: bytes) -> Any:
        return msgspec.to_builtins(list_decoder.decode(raw))

    def decode_event(raw: bytes) -> Any:
        return msgspec.to_builtins(event_decoder.decode(raw))

    return decode_list, decode_event


async def cancel_tasks(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel and await tasks, swallowing their cancellation."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
