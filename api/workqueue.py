"""The work queue: which keys need a pass, with controller-runtime's semantics, on asyncio.

It lives here, beside the API types, for the same reason as the patch semantics of
:mod:`api.patching`: both sides need it. The reconcilers of the services
(:mod:`services.runtime.reconcile`) run on it, and so do the development cluster's simulated
controllers (the kubelet and scheduler, the garbage collector, the control plane's own loops in
:mod:`devtools.cluster.controllers`), which may import nothing of sandbus but ``api``. When a
key comes back after a reconcile is the runtime's own rule, not the queue's
(:func:`services.runtime.reconcile.queueing.schedule`).

Events say only *which* key to look at; the queue makes sure each key is looked at by one task
at a time, as often as needed and no more:

- A key is in the queue at most once. Adding a key that is already waiting does nothing but
  remember why (the ids of the events that woke it, which the runtime keeps for the decision
  record).
- A key that is being processed is not handed to a second task. Adding it meanwhile marks it
  dirty, and :meth:`WorkQueue.done` puts it back, so a change that arrived during a pass is
  never lost and never processed concurrently with itself.
- :meth:`WorkQueue.add_after` schedules a key; of several schedules the earliest wins. A pass
  serves every schedule made before it starts, so taking a key cancels its timer: a pass that
  still needs to come back says so again (a timer left behind would only run a pass that finds
  nothing to do). The callers are level-triggered: every pass works out its next wake-up from
  what it sees, and asks for it again. :meth:`WorkQueue.unschedule` drops a key's timer (its
  object is gone).
  :meth:`WorkQueue.add_soon` is an add that waits up to a window first, so that a burst of
  changes (every member of a pool) is served by one pass.
- :meth:`WorkQueue.backoff` schedules a failed key with per-key exponential backoff
  (``base_delay`` doubling up to ``max_delay``, controller-runtime's 5 ms and 1000 s by
  default); :meth:`WorkQueue.forget` resets it after a success.
- Two lanes. A key added with ``background=True`` (the pass every key gets after a worker
  loads the state table) waits behind every other key: a restarted worker with 10,000 objects
  serves a change that just happened before it goes over the ones that did not change. A
  background key that an event asks for meanwhile moves to the front lane.

Concurrency across keys is bounded by the number of tasks that call :meth:`WorkQueue.get`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["QueueShutDown", "WorkQueue"]

K = TypeVar("K", bound=Hashable)


class QueueShutDown(Exception):
    """:meth:`WorkQueue.get` after :meth:`WorkQueue.shutdown`."""


class WorkQueue(Generic[K]):
    """Keys waiting for a pass: one task per key at a time, delayed adds, per-key backoff."""

    def __init__(
        self,
        *,
        base_delay: float = 0.005,
        max_delay: float = 1000.0,
        max_triggers: int = 16,
    ) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base_delay <= max_delay")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._max_triggers = max_triggers
        self._ready: deque[K] = deque()
        self._background: deque[K] = deque()
        self._lane: dict[K, deque[K]] = {}
        """The lane each waiting key is in (a lane may also hold stale copies: skipped)."""
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._triggers: dict[K, list[str]] = {}
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[K, int] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._shut_down = False

    # -- adding -----------------------------------------------------------------------------

    def add(self, key: K, trigger: str | None = None, *, background: bool = False) -> None:
        """Ask for a reconcile of ``key``; ``trigger`` is the id of the event that asks;
        ``background`` puts it behind every key added without."""
        if self._shut_down:
            return
        self._remember(key, trigger)
        if key in self._dirty:
            if not background and self._lane.get(key) is self._background:
                self._lane[key] = self._ready  # its copy in the background lane is skipped
                self._ready.append(key)
                self._wake_one()
            return
        self._dirty.add(key)
        self._idle.clear()
        if key not in self._processing:
            lane = self._background if background else self._ready
            self._lane[key] = lane
            lane.append(key)
            self._wake_one()

    def _remember(self, key: K, trigger: str | None) -> None:
        if trigger:
            triggers = self._triggers.setdefault(key, [])
            if trigger not in triggers:
                triggers.append(trigger)
                del triggers[: -self._max_triggers]

    def add_soon(self, key: K, window: float, trigger: str | None = None) -> None:
        """Ask for a reconcile of ``key`` within ``window`` seconds, so that the changes that
        arrive meanwhile are served by one pass (a pool woken by each of its members)."""
        if self._shut_down:
            return
        self._remember(key, trigger)
        if key not in self._dirty:
            self.add_after(key, window)

    def add_after(self, key: K, delay: float) -> None:
        """Ask for a reconcile of ``key`` in ``delay`` seconds (now if ``delay <= 0``)."""
        if self._shut_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        scheduled = self._timers.get(key)
        if scheduled is not None:
            if scheduled[0] <= when:
                return
            scheduled[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def join_scheduled(self, key: K, within: float, trigger: str | None = None) -> bool:
        """When a reconcile of ``key`` is scheduled within ``within`` seconds, count
        ``trigger`` among that one's and return True (nothing else is scheduled); False when
        none is, and the caller asks for one."""
        due = self.due_in(key)
        if within <= 0 or due is None or due > within or self._shut_down:
            return False
        self._remember(key, trigger)
        return True

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def unschedule(self, key: K) -> None:
        """Drop ``key``'s pending :meth:`add_after` (or :meth:`add_soon`, :meth:`backoff`): its
        object is gone, so no pass is due. A key already waiting or being processed stays so;
        its backoff is :meth:`forget`'s."""
        scheduled = self._timers.pop(key, None)
        if scheduled is not None:
            scheduled[1].cancel()
            if key not in self._dirty:  # the triggers were kept for the pass the timer was for
                self._triggers.pop(key, None)

    def backoff(self, key: K, *, at_least: float = 0.0) -> float:
        """Schedule ``key`` after its next backoff delay (``at_least`` seconds, even above the
        queue's maximum), and return that delay."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = min(self.base_delay * 2.0 ** min(failures - 1, 64), self.max_delay)
        delay = max(delay, at_least)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset the backoff of ``key`` (after it reconciled successfully); a pending timer
        stays (that is :meth:`unschedule`)."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    # -- taking -----------------------------------------------------------------------------

    async def get(self) -> tuple[K, tuple[str, ...]]:
        """The next key to process and the ids of the events that asked for it (empty when
        they gave none); call :meth:`done` after. Raises :class:`QueueShutDown` once
        :meth:`shutdown` has run and nothing is left waiting."""
        while True:
            key = self._next()
            if key is not None:
                break
            if self._shut_down:
                raise QueueShutDown
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # Pass the wake-up on if we were woken and cancelled before taking a key.
                if waiter.done() and not waiter.cancelled() and self._lane:
                    self._wake_one()
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self._dirty.discard(key)
        self._processing.add(key)
        scheduled = self._timers.pop(key, None)
        if scheduled is not None:
            scheduled[1].cancel()
        return key, tuple(self._triggers.pop(key, ()))

    def _next(self) -> K | None:
        """The first waiting key, front lane first (stale copies of moved keys skipped)."""
        for lane in (self._ready, self._background):
            while lane:
                key = lane.popleft()
                if self._lane.get(key) is lane:
                    del self._lane[key]
                    return key
        return None

    def done(self, key: K) -> None:
        """``key`` is reconciled; if it was added meanwhile, it goes back into the queue."""
        self._processing.discard(key)
        if key in self._dirty and not self._shut_down:
            self._lane[key] = self._ready
            self._ready.append(key)
            self._wake_one()
        elif self.idle():
            self._idle.set()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    # -- state ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys waiting to be taken (not those being processed or scheduled for later)."""
        return len(self._lane)

    @property
    def processing(self) -> frozenset[K]:
        return frozenset(self._processing)

    @property
    def scheduled(self) -> frozenset[K]:
        return frozenset(self._timers)

    def due_in(self, key: K) -> float | None:
        """Seconds until ``key``'s scheduled reconcile (None: none is scheduled)."""
        scheduled = self._timers.get(key)
        return None if scheduled is None else scheduled[0] - asyncio.get_running_loop().time()

    def idle(self) -> bool:
        """Nothing waiting, nothing being processed (scheduled keys may still come)."""
        return not self._lane and not self._processing

    async def join(self) -> None:
        """Wait until the queue is :meth:`idle`."""
        while not self.idle():
            self._idle.clear()
            await self._idle.wait()

    def shutdown(self) -> None:
        self._shut_down = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(QueueShutDown())
