"""A worker at rest gives memory back: what its cache keeps unpacked goes, what the state table's
read left loose is packed, and the C heap's free memory returns to the system.

Once the queue has stayed idle for :data:`REST_AFTER` (a pool woken again within 50 ms rereads
its members, so not at once), the cache lets go of the objects it keeps unpacked
(:meth:`~services.runtime.cache.ObjectCache.rest`), then packs its loose objects
:data:`PACK_SLICE` at a time while the queue stays idle, so that work arriving meanwhile waits
for one slice at most; when work comes first, the next rest goes on with it.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
from collections.abc import Callable
from typing import Final

from services.runtime.cache import ObjectCache

__all__ = ["Resting"]

REST_AFTER: Final = 1.0
"""Seconds of an idle queue after which the cache lets go of what it keeps unpacked, and packs
what it keeps loose."""
PACK_SLICE: Final = 500
"""Objects packed at a time while resting: about 10 ms of the loop."""


class Resting:
    """Rests ``cache`` whenever the worker's queue has stayed ``idle`` long enough (see the
    module doc)."""

    def __init__(self, cache: ObjectCache, idle: Callable[[], bool]) -> None:
        self._cache = cache
        self._idle = idle
        self._idle_since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def soon(self) -> None:
        """The queue is idle now: rest once it has stayed so for :data:`REST_AFTER`."""
        loop = asyncio.get_running_loop()
        self._idle_since = loop.time()
        if self._timer is None:
            self._timer = loop.call_later(REST_AFTER, self.if_still_idle)

    def if_still_idle(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        if not self._idle():
            return  # the pass that ends it calls soon() again
        waited = loop.time() - self._idle_since
        if waited >= REST_AFTER:
            self._cache.rest()
            self._pack_loose()
        else:
            self._timer = loop.call_later(REST_AFTER - waited, self.if_still_idle)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _pack_loose(self) -> None:
        if not self._idle():
            return
        if self._cache.pack_loose(PACK_SLICE):
            asyncio.get_running_loop().call_soon(self._pack_loose)
        else:
            _give_back_freed_memory()


def _give_back_freed_memory() -> None:
    """Return the C heap's free memory to the system (glibc's ``malloc_trim``; nothing where
    the C library has none). A worker at rest has just let go of what it kept unpacked or
    loose, and glibc keeps freed blocks of that size for itself: measured, a restarted sandbox
    worker with 10,000 Sandboxes held 4 MiB more without this."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    return getattr(ctypes.CDLL(None), "malloc_trim", None)
