"""A real task executor for the component tests: ``python -m services.taskexecutor`` on
127.0.0.1 and a free port the executor picks itself (``--port 0``, read back from its log, so
parallel tests never race for one), with a data dir under the test's ``tmp_path``, a reconcile
pass every 0.1 s and a 1 s stop grace; driven over HTTP with aiohttp.

The teardown leaves no process behind: the executor is killed, and so is the process group of
every task of its data dir (:func:`~services.taskexecutor.processes.kill_supervisors`), which
holds each supervisor, its hooks and its process, since supervisors outlive their executor on
purpose. The executor and its client are in executor.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.component.taskexecutor.executor import Client, Executor


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[Executor]:
    running = Executor(tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
async def client(executor: Executor) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield Client(session, executor)
