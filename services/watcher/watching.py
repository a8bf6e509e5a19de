"""List, then watch, each selection of a resource, forever, and merge them into one stream per
object: the loops that turn API-server streams into changes.

One :class:`ResourceWatcher` per watched resource (:mod:`services.watcher.resources`), all
sharing the leader's :class:`~services.watcher.publisher.Publisher`. It runs one
:class:`SelectionWatcher` per selection of its resource (Pods: four, one per label key, each with
an existence selector; most resources: one), and every observation of every selection goes
through the resource's one :class:`~services.watcher.core.merging.Merge`, which decides what is
published (newer states only; a deletion only when no selection holds the object). The loop of
one selection:

1. **Relist**: list the selection cluster-wide in pages (``limit``/``continue``, each page from
   the same snapshot); every listed object is a *present* report to the merge, page by page, and
   after the last page every object the selection held that no page contained is let go at the
   list's resourceVersion (a synthetic deletion once no selection holds it). The list's
   resourceVersion is where the watch starts, and how far this selection's stream has come.
2. **Watch** from that resourceVersion with ``allowWatchBookmarks``; each ADDED or MODIFIED is a
   present report, each DELETED (an object deleted, or one that stopped matching the selector)
   a let-go; after each event, and at each bookmark, the merge learns how far the stream is.
3. When the stream ends, decide by how (docs/devcluster.md §3, "what the watcher must do"):

   ==========================================  ============================================
   clean end (``timeoutSeconds`` reached)       watch again from the last resourceVersion
   aborted or garbled stream                    watch again from the last resourceVersion
   nothing, not even a bookmark, for            watch again from the last resourceVersion
   ``inactivity_limit`` (a silent stall)        (the inactivity watchdog)
   ERROR 410 / HTTP 410 (history expired)       relist, diff, watch from the new list
   another ERROR or HTTP status, or the         back off and watch again; after three
   API server unreachable                       failures in a row, relist
   ==========================================  ============================================

**Reads.** A let-go that leaves an object in no selection is a deletion only once every other
selection's stream has passed its resourceVersion, and an idle selection passes it only at its
next bookmark (a minute on a real API server). So the merge asks for the object as it was at
that resourceVersion (:meth:`~services.runtime.kube.KubeApi.get_as_of`: a list narrowed to its
name with ``resourceVersionMatch=Exact``, one key read on a real API server), and the answer
decides at once. Four reader tasks per resource watched more than once serve those requests
(one for a resource watched once, which never asks: its one stream's progress decides every
deletion at once); an answer that comes after the question was settled is dropped, and a 410
(the history no longer reaches that far back) leaves the deletion to the streams' progress. The
cost is one read per deletion of an object that the other selections' streams had not passed
yet: on a quiet cluster, about one per Pod deletion.

Decisions and submissions of one resource take turns (one lock): a change is submitted before
the next decision, so the publisher keeps their order per object. :meth:`submit` waits while
the publisher is full, which pauses the stream: that is the backpressure.

What an operator reads in the log, per selection (the kind, and the label key when a kind is
watched more than once): each relist with its reason (the session started, the watch expired,
repeated failures) and then its counts (objects selected, changes to publish, deletions of
vanished objects), and each restart of a watch with its cause and the resourceVersion it resumes
from (INFO; WARNING for a stall or a failure). Single events are never logged: at thousands per
second that would drown everything else.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from events.envelope import ObjectKey
from services.runtime.cancellation import supervise
from services.runtime.kube import (
    Expired,
    KubeApi,
    KubeError,
    StreamBroken,
    StreamStalled,
)
from services.watcher.core.diffing import Change, DiffError, Seen, key_of, seen_of
from services.watcher.core.merging import Merge
from services.watcher.resources import Selection, WatchedResource
from services.watcher.streams import Backoff

__all__ = ["ResourceWatcher", "SelectionWatcher", "WatchStats"]

log = logging.getLogger(__name__)

_CHANGE_TYPES: frozenset[str] = frozenset({"ADDED", "MODIFIED", "DELETED"})
_FAILURES_BEFORE_RELIST = 3
_SESSION_START = "the session started"
_READERS = 4
"""Reads in flight per resource watched through more than one selection."""


@dataclass
class WatchStats:
    """What one resource's loops went through (all its selections together); tests and
    operators read these."""

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
    undecided: int = 0
    """Let-gos that left an object in no selection before every other stream had passed them:
    deletions that waited for proof (a read, or the other streams)."""
    reads: int = 0
    """Objects read at the resourceVersion of such a deletion."""


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class ResourceWatcher:
    """Every selection of one resource, merged."""

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
        self._submit = submit
        self.merge = Merge(
            resource.kind, {s.name: s.holds for s in resource.selections}, published=view
        )
        self.stats = WatchStats()
        self.selections = [
            SelectionWatcher(
                kube,
                selection,
                self,
                inactivity_limit=inactivity_limit,
                server_timeout=server_timeout,
                page_size=page_size,
            )
            for selection in resource.selections
        ]
        self.synced = asyncio.Event()
        """Set once every selection has been relisted, and its changes decided and submitted."""
        self._turn = asyncio.Lock()
        self._reads: asyncio.Queue[tuple[ObjectKey, str]] = asyncio.Queue()

    async def run(self) -> None:
        plural = self.resource.plural
        readers = _READERS if len(self.selections) > 1 else 1  # once: progress decides at once
        await supervise(
            [
                *((f"watch-{plural}-{s.selection.name}", s.run()) for s in self.selections),
                *((f"read-{plural}-{index}", self._read()) for index in range(readers)),
                (f"synced-{plural}", self._sync()),
            ]
        )

    async def decide(self, decision: Callable[[], list[Change]]) -> list[Change]:
        """Make ``decision`` (a call of the merge) and submit its changes, in turn with every
        other decision about this resource."""
        async with self._turn:
            changes = decision()
            for wanted in self.merge.take_probes():
                self.stats.undecided += 1
                self._reads.put_nowait(wanted)
            for change in changes:
                self.stats.decided += 1
                await self._submit(change)
        return changes

    async def _sync(self) -> None:
        for selection in self.selections:
            await selection.synced.wait()
        await self._reads.join()
        self.synced.set()

    async def _read(self) -> None:
        backoff = Backoff(initial=0.1, maximum=5.0)
        while True:
            key, rv = await self._reads.get()
            try:
                while self.merge.awaits_probe(key, rv):
                    try:
                        obj = await self._kube.get_as_of(key, rv)
                    except Expired:
                        log.info(
                            "%s: the history no longer reaches resourceVersion %s; the deletion "
                            "of %s waits for every watch to pass it",
                            self.resource.kind,
                            rv,
                            key,
                        )
                        break
                    except KubeError as error:
                        log.warning("%s: reading %s at %s: %r", self.resource.kind, key, rv, error)
                        await backoff.wait()
                        continue
                    backoff.reset()
                    self.stats.reads += 1
                    if obj is not None:
                        self.resource.complete(obj)
                    try:
                        await self.decide(functools.partial(self.merge.probed, key, rv, obj))
                    except DiffError as error:
                        log.error("%s: skipping a read of %s: %s", self.resource.kind, key, error)
                    break
            finally:
                self._reads.task_done()


class SelectionWatcher:
    """The list-then-watch loop of one selection."""

    def __init__(
        self,
        kube: KubeApi,
        selection: Selection,
        owner: ResourceWatcher,
        *,
        inactivity_limit: float,
        server_timeout: tuple[int, int],
        page_size: int,
    ) -> None:
        self._kube = kube
        self.selection = selection
        self._owner = owner
        self._merge = owner.merge
        self.stats = owner.stats
        self._inactivity_limit = inactivity_limit
        self._server_timeout = server_timeout
        self._page_size = page_size
        self.resource_version: str | None = None
        """Where the next watch starts; None means a relist is due."""
        self.synced = asyncio.Event()
        """Set once the first relist has been decided and submitted."""

    async def run(self) -> None:
        backoff = Backoff(initial=0.1, maximum=5.0)
        failures = 0
        relist_reason = _SESSION_START
        label = str(self.selection)
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
                    label,
                    self.resource_version,
                )
            except Expired as error:
                self.stats.expired += 1
                relist_reason = f"the watch expired ({error})"
                self.resource_version = None
            except StreamStalled as error:
                self.stats.stalls += 1
                log.warning(
                    "%s: %s; watching again from %s", label, error.message, self.resource_version
                )
            except StreamBroken as error:
                self.stats.broken += 1
                log.info(
                    "%s: %s; watching again from %s", label, error.message, self.resource_version
                )
                await backoff.wait()
            except KubeError as error:  # an error status, or no answer at all (status 0)
                self.stats.errors += 1
                failures += 1
                if failures >= _FAILURES_BEFORE_RELIST or self.resource_version is None:
                    relist_reason = f"after {failures} failed attempt(s), the last: {error!r}"
                    log.warning("%s: %r (failure %d); relisting", label, error, failures)
                    self.resource_version = None
                else:
                    log.warning(
                        "%s: %r (failure %d); watching again from %s",
                        label,
                        error,
                        failures,
                        self.resource_version,
                    )
                await backoff.wait()

    # -- relist -----------------------------------------------------------------------------

    async def _relist(self, reason: str) -> None:
        self.stats.relists += 1
        label, kind, name = str(self.selection), self.selection.resource.kind, self.selection.name
        if reason != _SESSION_START:  # every selection relists then: one line each is enough
            log.info("%s: relisting: %s", label, reason)
        decided = self.stats.decided
        listed: set[ObjectKey] = set()
        list_version: str | None = None
        token: str | None = None
        while True:
            page = await self._kube.list_page(
                kind,
                limit=self._page_size,
                continue_token=token,
                label_selector=self.selection.label_selector,
            )
            metadata = _mapping(page.get("metadata"))
            if list_version is None:
                list_version = str(metadata.get("resourceVersion") or "") or None
            for item in page.get("items") or ():
                if not isinstance(item, dict):
                    continue
                self.selection.resource.complete(item)
                if not self.selection.holds(item):
                    continue
                try:
                    key = key_of(kind, item)
                    seen = seen_of(item)
                except DiffError as error:
                    log.error("%s: skipping a listed object: %s", label, error)
                    continue
                listed.add(key)
                present = functools.partial(self._merge.present, name, key, item, seen)
                await self._owner.decide(present)
            token = metadata.get("continue") or None
            if not token:
                break
        if list_version is None:
            raise KubeError(500, "BadResponse", "the list carries no resourceVersion")
        after = await self._owner.decide(
            functools.partial(self._merge.relisted, name, listed, list_version)
        )
        vanished = sum(1 for change in after if change.synthetic)
        self.resource_version = list_version
        log.info(
            "%s: relisted at resourceVersion %s (%s): %d objects selected, %d changes to "
            "publish (%d deletions of objects that vanished)",
            label,
            list_version,
            reason,
            len(listed),
            self.stats.decided - decided,
            vanished,
        )

    # -- watch ------------------------------------------------------------------------------

    async def _watch(self) -> None:
        assert self.resource_version is not None
        self.stats.watches += 1
        async with self._kube.watch(
            self.selection.resource.kind,
            resource_version=self.resource_version,
            timeout_seconds=random.randint(*self._server_timeout),
            label_selector=self.selection.label_selector,
        ) as stream:
            while True:
                event = await stream.next_event(self._inactivity_limit)
                if event is None:
                    return
                await self._on_event(event["type"], event["object"])

    async def _on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        name = self.selection.name
        if event_type == "BOOKMARK":
            self.stats.bookmarks += 1
            version = _mapping(obj.get("metadata")).get("resourceVersion")
            if isinstance(version, str) and version:
                await self._owner.decide(lambda: self._merge.progressed(name, version))
                self.resource_version = version
            return
        if event_type not in _CHANGE_TYPES:
            log.warning("%s: ignoring a watch event of type %r", self.selection, event_type)
            return
        self.stats.events += 1
        self.selection.resource.complete(obj)
        try:
            key = key_of(self.selection.resource.kind, obj)
            seen = seen_of(obj)
        except DiffError as error:
            log.error("%s: skipping a watch event: %s", self.selection, error)
            return
        rv = seen.resource_version
        held = event_type != "DELETED" and self.selection.holds(obj)

        def decision() -> list[Change]:
            if held:
                changes = self._merge.present(name, key, obj, seen)
            else:
                changes = self._merge.absent(name, key, rv, obj)
            return changes + self._merge.progressed(name, rv)

        await self._owner.decide(decision)
        self.resource_version = rv
