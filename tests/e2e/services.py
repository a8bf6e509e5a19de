"""Services as their own processes, for the end-to-end tests: ``sandbus run SERVICE`` (or any
module with the same arguments), logging into a file per process, tied to the test process so
that none outlives it (:func:`services.cli.processes.die_with_parent`, as ``sandbus up`` ties
its children).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from services.cli.processes import die_with_parent

SANDBUS_RUN = (
    sys.executable,
    "-c",
    # `sandbus run`, with INFO logging so that a failure leaves a readable trail.
    "import logging, sys; logging.basicConfig(level=logging.INFO, "
    "format='%(asctime)s %(levelname)s %(name)s %(message)s'); "
    "from services.cli import main; sys.exit(main())",
    "run",
)


@contextlib.asynccontextmanager
async def service(
    name: str,
    nats_url: str,
    kubeconfig: Path,
    logs: Path,
    *,
    env: Mapping[str, str] | None = None,
    command: tuple[str, ...] | None = None,
    log_name: str | None = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``sandbus run NAME`` (or ``command``) until the block ends: then SIGTERM, and SIGKILL
    after 10 s. ``env`` is added to this process's environment."""
    log = (logs / f"{log_name or name}.log").open("ab")
    environment = {
        **os.environ,
        "SANDBUS_WATCHER_IDENTITY": f"e2e-{log_name or name}",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    process = await asyncio.create_subprocess_exec(
        *(command or (*SANDBUS_RUN, name)),
        "--nats",
        nats_url,
        "--kubeconfig",
        str(kubeconfig),
        stdout=log,
        stderr=log,
        env=environment,
        preexec_fn=die_with_parent,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        log.close()


def log_tails(logs: Path, lines: int = 25) -> str:
    return "\n".join(
        f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        for path in sorted(logs.glob("*.log"))
    )
