"""List, then watch, one resource, forever: the loop that turns API-server streams into changes.

One :class:`ResourceWatcher` per watched resource (:mod:`services.watcher.resources`), all
sharing the leader's :class:`~services.watcher.publisher.Publisher`. The loop:

1. **Relist**: list the resource cluster-wide in pages (``limit``/``continue``, each page from
   the same snapshot), decide the changes against the published view page by page
   (:func:`~services.watcher.core.diffing.listed_changes`), and after the last page the synthetic
   deletions of the keys no page contained. The list's resourceVersion is where the watch starts.
2. **Watch** from that resourceVersion with ``allowWatchBookmarks``; each event is checked
   against the view (:func:`~services.watcher.core.diffing.watch_changes`) and submitted; every
   event and bookmark advances the resourceVersion to resume from.
3. When the stream ends, decide by how (spec/kube-standin.md §3, "what the watcher must do"):

   ==========================================  ============================================
   clean end (``timeoutSeconds`` reached)       watch again from the last resourceVersion
   aborted or garbled stream                    watch again from the last resourceVersion
   nothing, not even a bookmark, for            watch again from the last resourceVersion
   ``inactivity_limit`` (a silent stall)        (the inactivity watchdog)
   ERROR 410 / HTTP 410 (history expired)       relist, diff, watch from the new list
   another ERROR or HTTP status, or the         back off and watch again; after three
   API server unreachable                       failures in a row, relist
   ==========================================  ============================================

The view is updated when a change is *decided*, before it is published: the next decision
about the same object must see it, and the publisher keeps the order. :meth:`submit` waits
while the publisher is full, which pauses the stream: that is the backpressure.

What an operator reads in the log, per resource: each relist with its reason (the session
started, the watch expired, repeated failures) and then its counts (objects selected, changes
to publish, deletions of vanished objects), and each restart of a watch with its cause and the
resourceVersion it resumes from (INFO; WARNING for a stall or a failure). Single events are
never logged: at thousands per second that would drown everything else.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from events.envelope import ObjectKey
from services.runtime.kube import Expired, KubeApi, KubeError, StreamBroken, StreamStalled
from services.watcher.core.diffing import (
    Change,
    DiffError,
    Seen,
    WatchEventType,
    key_of,
    listed_changes,
    record,
    vanished_changes,
    watch_changes,
)
from services.watcher.resources import WatchedResource
from services.watcher.streams import Backoff

__all__ = ["ResourceWatcher", "WatchStats"]

log = logging.getLogger(__name__)

_CHANGE_TYPES: frozenset[str] = frozenset({"ADDED", "MODIFIED", "DELETED"})
_FAILURES_BEFORE_RELIST = 3
_SESSION_START = "the session started"


@dataclass
class WatchStats:
    """What one resource's loop went through; tests and operators read these."""

    relists: int = 0
    watches: int = 0
    expired: int = 0
    stalls: int = 0
    broken: int = 0
    clean_ends: int = 0
    errors: int = 0
    events: int = 0
    bookmarks: int = 0
    decided: int = 0


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class ResourceWatcher:
    def __init__(
        self,
        kube: KubeApi,
        resource: WatchedResource,
        view: dict[ObjectKey, Seen],
        submit: Callable[[Change], Awaitable[None]],
        *,
        inactivity_limit: float,
        server_timeout: tuple[int, int],
        page_size: int,
    ) -> None:
        self._kube = kube
        self.resource = resource
        self.view = view
        self._submit = submit
        self._inactivity_limit = inactivity_limit
        self._server_timeout = server_timeout
        self._page_size = page_size
        self.resource_version: str | None = None
        """Where the next watch starts; None means a relist is due."""
        self.stats = WatchStats()
        self.synced = asyncio.Event()
        """Set once the first relist has been decided and submitted."""

    async def run(self) -> None:
        backoff = Backoff(initial=0.1, maximum=5.0)
        failures = 0
        relist_reason = _SESSION_START
        kind = self.resource.kind
        while True:
            try:
                if self.resource_version is None:
                    await self._relist(relist_reason)
                    self.synced.set()
                await self._watch()
                self.stats.clean_ends += 1
                failures = 0
                backoff.reset()
                log.info(
                    "%s: the watch reached its server timeout; watching again from %s",
                    kind,
                    self.resource_version,
                )
            except Expired as error:
                self.stats.expired += 1
                relist_reason = f"the watch expired ({error})"
                self.resource_version = None
            except StreamStalled as error:
                self.stats.stalls += 1
                log.warning(
                    "%s: %s; watching again from %s", kind, error.message, self.resource_version
                )
            except StreamBroken as error:
                self.stats.broken += 1
                log.info(
                    "%s: %s; watching again from %s", kind, error.message, self.resource_version
                )
                await backoff.wait()
            except KubeError as error:  # an error status, or no answer at all (status 0)
                self.stats.errors += 1
                failures += 1
                if failures >= _FAILURES_BEFORE_RELIST or self.resource_version is None:
                    relist_reason = f"after {failures} failed attempt(s), the last: {error!r}"
                    log.warning("%s: %r (failure %d); relisting", kind, error, failures)
                    self.resource_version = None
                else:
                    log.warning(
                        "%s: %r (failure %d); watching again from %s",
                        kind,
                        error,
                        failures,
                        self.resource_version,
                    )
                await backoff.wait()

    # -- relist -----------------------------------------------------------------------------

    async def _relist(self, reason: str) -> None:
        self.stats.relists += 1
        if reason != _SESSION_START:  # every resource relists then: one line each is enough
            log.info("%s: relisting: %s", self.resource.kind, reason)
        decided = self.stats.decided
        listed: set[ObjectKey] = set()
        list_version: str | None = None
        token: str | None = None
        while True:
            page = await self._kube.list_page(
                self.resource.kind,
                limit=self._page_size,
                continue_token=token,
                label_selector=self.resource.label_selector,
            )
            metadata = _mapping(page.get("metadata"))
            if list_version is None:
                list_version = str(metadata.get("resourceVersion") or "") or None
            for item in page.get("items") or ():
                if not isinstance(item, dict):
                    continue
                self.resource.complete(item)
                if not self.resource.selects(item):
                    continue
                try:
                    key = key_of(self.resource.kind, item)
                    changes = listed_changes(key, self.view.get(key), item)
                except DiffError as error:
                    log.error("%s: skipping a listed object: %s", self.resource.kind, error)
                    continue
                listed.add(key)
                await self._decide(changes)
            token = metadata.get("continue") or None
            if not token:
                break
        vanished = vanished_changes(self.view, listed)
        await self._decide(vanished)
        if list_version is None:
            raise KubeError(500, "BadResponse", "the list carries no resourceVersion")
        self.resource_version = list_version
        log.info(
            "%s: relisted at resourceVersion %s (%s): %d objects selected, %d changes to "
            "publish (%d deletions of objects that vanished)",
            self.resource.kind,
            list_version,
            reason,
            len(listed),
            self.stats.decided - decided,
            len(vanished),
        )

    # -- watch ------------------------------------------------------------------------------

    async def _watch(self) -> None:
        assert self.resource_version is not None
        self.stats.watches += 1
        async with self._kube.watch(
            self.resource.kind,
            resource_version=self.resource_version,
            timeout_seconds=random.randint(*self._server_timeout),
            label_selector=self.resource.label_selector,
        ) as stream:
            while True:
                event = await stream.next_event(self._inactivity_limit)
                if event is None:
                    return
                await self._on_event(event["type"], event["object"])

    async def _on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        metadata = _mapping(obj.get("metadata"))
        if event_type == "BOOKMARK":
            self.stats.bookmarks += 1
            version = metadata.get("resourceVersion")
            if isinstance(version, str) and version:
                self.resource_version = version
            return
        if event_type not in _CHANGE_TYPES:
            log.warning("%s: ignoring a watch event of type %r", self.resource.kind, event_type)
            return
        self.stats.events += 1
        self.resource.complete(obj)
        try:
            key = key_of(self.resource.kind, obj)
            changes = watch_changes(
                key,
                self.view.get(key),
                cast(WatchEventType, event_type),
                obj,
                selected=self.resource.selects(obj),
            )
        except DiffError as error:
            log.error("%s: skipping a watch event: %s", self.resource.kind, error)
            return
        await self._decide(changes)
        self.resource_version = metadata["resourceVersion"]

    async def _decide(self, changes: list[Change]) -> None:
        for change in changes:
            record(self.view, change)
            self.stats.decided += 1
            await self._submit(change)
