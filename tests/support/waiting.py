"""Waiting for something another actor does: poll a check until it holds, within a deadline.

A cluster, a NATS server, a process under test is another actor: there is no event of ours to
await, so a test reads what it expects back, again and again, until it is there or the time
it may take is up. :func:`until` is the one way tests do that.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["until"]

_UNSET: Any = object()


async def until(
    check: Callable[[], Any],
    *,
    within: float = 20.0,
    interval: float = 0.05,
    what: str | Callable[[], str] | None = None,
) -> Any:
    """Call ``check`` (a plain function, or one that returns an awaitable) every ``interval``
    seconds until it returns something truthy, and return that.

    After ``within`` seconds (a check still under way is cancelled then), fail with an
    AssertionError that says what was awaited: ``what``, else the check's name (or source),
    with the check's last result; or, when ``what`` is a function, what it says at that moment
    (to show what the caller saw last). An exception the check raises is not caught: it fails
    the test at once.
    """
    last: Any = _UNSET
    deadline = asyncio.timeout(within)
    try:
        async with deadline:
            while True:
                result = check()
                if inspect.isawaitable(result):
                    result = await result
                last = result
                if result:
                    return result
                await asyncio.sleep(interval)
    except TimeoutError:
        if not deadline.expired():
            raise  # the check's own TimeoutError
    if callable(what):
        raise AssertionError(f"not within {within} s: {what()}")
    seen = "no answer yet" if last is _UNSET else f"last: {last!r}"
    raise AssertionError(f"not within {within} s: {what or _name_of(check)} ({seen})")


def _name_of(check: Callable[[], Any]) -> str:
    name = getattr(check, "__qualname__", None) or repr(check)
    if name.endswith("<lambda>"):
        try:
            return inspect.getsource(check).strip()
        except (OSError, TypeError):
            return name
    return name
