"""An executor as a process: :func:`run` serves until SIGTERM or SIGINT, then exits 0.

Order of the start: bind the address first (a second executor on the same port fails at once,
before it has touched the data dir), then recover the tasks of the data dir, then serve and
reconcile. On SIGTERM or SIGINT it stops serving and reconciling and exits 0, and leaves the
task supervisors running: they are the workload, and the next executor on this data dir picks
them up (:meth:`~.executor.TaskExecutor.recover`). Stops under way are abandoned; the next
executor begins them again.

The main thread waits for the signals on the pipe ``signal.set_wakeup_fd`` writes their
numbers to. Whichever thread the kernel delivers a signal to, the interpreter's C handler
writes to that pipe, so the main thread wakes (``sigwait`` would need the signals blocked in
every thread, including any a library started before this one ran); the Python handler does
nothing, and so cannot run into a lock held where it interrupted.

Logging is one line per record on stderr, at ``SANDBUS_LOG_LEVEL`` (default INFO), formatted
as every sandbus service logs (``services/runtime/runner.py``, not imported: it would bring the
service runtime into every sandbox's executor).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
from pathlib import Path
from typing import Final

from services.taskexecutor.core.settings import ExecutorSettings
from services.taskexecutor.executor import TaskExecutor
from services.taskexecutor.server import make_server

__all__ = ["run"]

log = logging.getLogger("services.taskexecutor")

_STOP_SIGNALS: Final = {signal.SIGTERM, signal.SIGINT}


def _configure_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("SANDBUS_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


class _StopSignals:
    """SIGTERM and SIGINT, waited for on the wake-up pipe (main thread only)."""

    def __init__(self) -> None:
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for signum in _STOP_SIGNALS:
            # A handler, so the signal no longer kills the process; the pipe says it came.
            signal.signal(signum, lambda number, frame: None)

    def wait(self) -> signal.Signals:
        while True:
            select.select([self._read], [], [])
            for number in os.read(self._read, 64):
                if number in _STOP_SIGNALS:
                    return signal.Signals(number)


def run(settings: ExecutorSettings) -> int:
    """Serve until SIGTERM or SIGINT; the exit code (1 when it cannot start)."""
    _configure_logging()
    stop_signals = _StopSignals()
    executor = TaskExecutor(Path(settings.data_dir), stop_grace=settings.stop_grace)
    try:
        server = make_server(executor, settings.host, settings.port)
    except OSError as error:
        log.error("cannot listen on %s:%s: %s", settings.host, settings.port, error)
        return 1
    try:
        executor.recover()
    except OSError as error:
        log.error("cannot use the data dir %s: %s", settings.data_dir, error)
        server.server_close()
        return 1
    reconciler = threading.Thread(
        target=executor.run_reconciler,
        args=(settings.reconcile_interval,),
        name="reconciler",
        daemon=True,
    )
    serving = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="server", daemon=True
    )
    reconciler.start()
    serving.start()
    log.info(
        "task executor serving on http://%s:%d, tasks in %s",
        settings.host,
        server.port,
        executor.data.root,
    )
    received = stop_signals.wait()
    log.info("received %s: stopping (task supervisors keep running)", received.name)
    executor.closing.set()
    server.shutdown()
    server.server_close()
    reconciler.join(timeout=5.0)
    return 0
