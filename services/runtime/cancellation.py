"""Stopping what a service started: one cancel stops it, and every task it started ends too.

Why this is not just ``task.cancel()`` and :class:`asyncio.TaskGroup`: on Python 3.11 a
cancellation can be *lost* inside nats-py, and the task then carries on as if nothing had been
asked of it. nats-py waits for replies and pulled messages through ``asyncio.wait_for``, which
on 3.11 returns the result instead of raising when the awaited future completes in the same
loop iteration as the cancel (fixed in 3.12); ``fetch`` runs that ``wait_for`` in a child task
that a cancel is forwarded to and lost in the same way; and ``Client._flush_pending`` catches
``CancelledError`` outright. Under a burst, with dozens of publishes in flight, one cancel in
a handful landed in such a window: the watcher survived its stop. Two remedies, both here:

- :func:`honour_lost_cancellation`. A lost cancel still leaves its mark: the task's
  :meth:`~asyncio.Task.cancelling` count says a stop was asked and never delivered. The
  watcher's loops call this after each nats-py call and before each retry (in
  :class:`~services.watcher.streams.Backoff`), and it raises the ``CancelledError`` that the
  library ate. That makes a single ``cancel()`` enough for the watcher's own tasks.
- :func:`stop_tasks` and :func:`supervise`, the structure. 3.11's ``TaskGroup`` cancels its
  children once and then only waits: a second cancellation of the parent is not forwarded to
  them (it is "already aborting"), so one child that lost its cancel kept the whole group,
  and whoever waited for it, alive for good; that was the ``watcher-publish-N`` task still
  running. :func:`stop_tasks` cancels every task, waits ``patience`` seconds, cancels again
  whatever is still running, and so on until all have ended or ``bound`` seconds have passed
  (then it logs what is stuck, with stacks, and returns rather than hang a shutdown).
  :func:`supervise` is the task group the watcher uses instead of ``TaskGroup``: children run
  until all return or one fails; the failure, or the caller's cancellation, stops the others
  with :func:`stop_tasks` before it propagates.

Neither swallows the *caller's* cancellation, the classic mistake of
``with suppress(CancelledError): await child``: a caller cancelled while it waits for its
children keeps waiting for them (abandoning them is how tasks get left behind), within the
bound, and then raises ``CancelledError``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

__all__ = ["honour_lost_cancellation", "stop_tasks", "supervise"]

log = logging.getLogger(__name__)

STOP_BOUND = 3.0
"""Seconds :func:`stop_tasks` waits for tasks to end before it reports them stuck."""
RECANCEL_PATIENCE = 0.25
"""Seconds a cancelled task is given to end before it is cancelled again."""


def honour_lost_cancellation() -> None:
    """Raise ``CancelledError`` if the current task was cancelled and the cancellation was lost
    on the way (a library caught it); do nothing otherwise.

    Call it on the normal path after a call that may lose a cancellation, never in cleanup code
    that runs *because* of a cancellation (there the count is legitimately non-zero).
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError("a cancellation lost inside a library call")


def _describe(tasks: Iterable[asyncio.Task[Any]]) -> str:
    return "; ".join(f"{task.get_name()} at {task.get_stack(limit=4)}" for task in tasks)


async def stop_tasks(
    tasks: Iterable[asyncio.Task[Any]],
    *,
    bound: float = STOP_BOUND,
    patience: float = RECANCEL_PATIENCE,
) -> None:
    """Cancel ``tasks`` and wait until every one has ended, cancelling again those that lost
    their cancellation; after ``bound`` seconds, log the ones still running and return.

    Their results and exceptions are consumed (a caller that wants them reads them from the
    tasks). A cancellation of the caller while it waits is deferred: the waiting goes on, and
    ``CancelledError`` is raised once the tasks have ended.
    """
    tasks = list(tasks)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    deferred: asyncio.CancelledError | None = None
    while True:
        running = [task for task in tasks if not task.done()]
        if not running:
            break
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.error(
                "tasks still running %g s after they were cancelled: %s", bound, _describe(running)
            )
            break
        for task in running:
            task.cancel()
        try:
            await asyncio.wait(running, timeout=min(patience, remaining))
        except asyncio.CancelledError as error:
            deferred = error
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # consumed: no "exception was never retrieved" at exit
    if deferred is not None:
        raise deferred


async def supervise(children: Iterable[tuple[str, Coroutine[Any, Any, None]]]) -> None:
    """Run each ``(name, coroutine)`` as a task until all have returned.

    The first child that fails stops the others (:func:`stop_tasks`), then its exception is
    raised here; a cancellation of the caller stops them all, then propagates. No child
    outlives the call, short of one that ignores cancellation for :data:`STOP_BOUND` seconds.
    """
    tasks = [asyncio.create_task(coroutine, name=name) for name, coroutine in children]
    try:
        waiting: set[asyncio.Task[None]] = set(tasks)
        while waiting:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if not task.cancelled() and (error := task.exception()) is not None:
                    raise error
    finally:
        await stop_tasks(tasks)
