"""Running one service in a process: signals, the exit code, logging and the event loop.

A service is an async callable ``serve(settings) -> None`` that runs until it is cancelled; it
does its own cleanup in ``finally`` blocks. This module owns everything around it that every
service needs the same way: turning SIGTERM and SIGINT into a cancellation (Kubernetes stops a
Pod with SIGTERM and expects a clean exit within the grace period), and the exit code. A
service that returns on its own, or fails, exits non-zero so that its Deployment restarts it.
Which services exist is the command line's knowledge (:mod:`services.cli.run`), not this
module's.

The event loop is uvloop's (``SANDBUS_EVENT_LOOP``, default ``uvloop``; ``asyncio`` for the
standard library's). A worker's own work is small beside the socket writes of its NATS and
Kubernetes clients and the loop's bookkeeping around them, which uvloop does in C: measured
with ``bench/sandbox_ready.py``, the sandbox worker spent about a fifth less CPU per Sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from services.runtime.gc_tuning import tune_for_serving
from services.runtime.settings import Settings

__all__ = ["LOG_LEVEL_ENV", "Serve", "configure_logging", "run_service"]

log = logging.getLogger(__name__)

Serve = Callable[[Settings], Coroutine[Any, Any, None]]


async def serve_until_signalled(main: Awaitable[None]) -> int:
    """Run ``main`` until it ends or SIGTERM/SIGINT arrives; return the exit code.

    A signal cancels ``main`` and waits for its cleanup: exit code 0. ``main`` ending by itself
    is unexpected for a long-running service: exit code 1, and so is an exception.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    stopping = asyncio.Event()

    def request_stop(signum: signal.Signals) -> None:
        log.info("received %s, stopping", signum.name)
        stopping.set()
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, request_stop, signum)
    try:
        await task
    except asyncio.CancelledError:
        if not stopping.is_set():
            raise
        return 0
    except Exception:
        log.exception("service failed")
        return 1
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)
    if stopping.is_set():
        return 0
    log.error("service returned before it was asked to stop")
    return 1


LOG_LEVEL_ENV = "SANDBUS_LOG_LEVEL"


def configure_logging() -> None:
    """One line per record on stderr, where a container runtime collects it; INFO by default."""
    logging.basicConfig(
        level=os.environ.get(LOG_LEVEL_ENV, "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


EVENT_LOOP_ENV = "SANDBUS_EVENT_LOOP"


def event_loop_factory(value: str | None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop ``SANDBUS_EVENT_LOOP`` names (``value``): uvloop's when unset, None for the
    standard library's; anything else, or uvloop where it is not installed, is refused."""
    choice = (value or "uvloop").strip().lower()
    if choice == "asyncio":
        return None
    if choice != "uvloop":
        raise ValueError(f"{EVENT_LOOP_ENV}={value!r}: expected uvloop or asyncio")
    try:
        import uvloop
    except ImportError as error:
        raise ValueError(
            f"{EVENT_LOOP_ENV}=uvloop, but uvloop is not installed here; "
            f"{EVENT_LOOP_ENV}=asyncio runs on the standard library's loop"
        ) from error
    return uvloop.new_event_loop


def run_service(serve: Serve, settings: Settings) -> int:
    """Run one service in this process until it is signalled (see :func:`serve_until_signalled`)
    on the configured event loop; return the exit code."""
    configure_logging()
    tune_for_serving()
    loop_factory = event_loop_factory(os.environ.get(EVENT_LOOP_ENV))
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(serve_until_signalled(serve(settings)))
