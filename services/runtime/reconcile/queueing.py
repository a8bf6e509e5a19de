"""When a key comes back after a pass: :func:`schedule`, the worker's requeue rule.

The queue itself (one task per key at a time, requeue-after, backoff, two lanes) is
:class:`api.workqueue.WorkQueue`, which the development cluster's controllers share; what a
pass's outcome means for the key's next one is the runtime's, and stays here.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from api.workqueue import WorkQueue

__all__ = ["schedule"]

K = TypeVar("K", bound=Hashable)


def schedule(
    queue: WorkQueue[K],
    key: K,
    *,
    failed: bool,
    refused_write: bool = False,
    refused_backoff: float = 0.0,
    stale: bool,
    refused: bool,
    requeue_after: float | None,
    write_passes: int,
    max_write_passes: int,
) -> tuple[float | None, str]:
    """Schedule ``key`` after a pass; returns the delay (None: on the next event) and a note for
    the decision when the planner's wish was overridden. In order of precedence:

    1. an action failed (``failed``) → retry with per-key exponential backoff; when the API
       server refused it for a reason retrying cannot fix (``refused_write``) and the key's
       previous pass failed too, at least ``refused_backoff`` seconds: the pass after the
       first refusal comes soon, to report it on the object (a condition, an Event), and
       the ones after it do not hammer the API server with a write it keeps refusing;
    2. the API showed the plan was made on stale state (AlreadyExists, NotFound) → again now;
    3. the planner reported an error it cannot fix (``refused``) → backoff;
    4. otherwise the planner's ``requeue_after`` (0 = now; None = wait for the next event), and
       the key's backoff is reset.

    A planner that writes on every pass would spin on rule 4 with ``requeue_after=0``; after
    ``max_write_passes`` consecutive writing passes of one key it backs off instead, and says
    so.
    """
    if failed:
        if refused_write and queue.failures(key) > 0:
            return queue.backoff(key, at_least=refused_backoff), ""
        return queue.backoff(key), ""
    if stale:
        queue.add(key)
        return 0.0, ""
    if refused:
        return queue.backoff(key), ""
    if requeue_after is not None and requeue_after <= 0 and write_passes >= max_write_passes:
        delay = queue.backoff(key)
        return delay, (
            f"{write_passes} passes in a row wrote something; backing off instead "
            "of reconciling again at once"
        )
    queue.forget(key)
    if requeue_after is None:
        return None, ""
    queue.add_after(key, requeue_after)
    return max(requeue_after, 0.0), ""
