"""A real task executor for the component tests, and a client of its routes: what the tests of
this directory share. :class:`Executor` runs ``python -m services.taskexecutor`` on 127.0.0.1 and
a free port the executor picks itself (``--port 0``, read back from its log, so parallel tests
never race for one), with a data dir under the test's ``tmp_path``, a reconcile pass every 0.1 s
and a 1 s stop grace; :class:`Client` drives it over HTTP with aiohttp. The fixtures are in
this directory's conftest.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from api.objects import Json
from services.taskexecutor.processes import kill_supervisors
from tests.support.waiting import until

EXECUTOR_MARK = "SANDBUS_TEST_EXECUTOR_MARK"
"""Set in the executor's environment, to show a task inherits it."""
_SERVING = re.compile(r"serving on http://127\.0\.0\.1:(\d+)")
START_TIMEOUT = 15.0


class Executor:
    """One data dir, and the executor process serving it now (restartable)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.log = root / "executor.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start an executor (on the port of the last one, if any) and wait until it serves."""
        assert self.process is None
        offset = self.log.stat().st_size if self.log.exists() else 0
        argv = [
            sys.executable,
            "-m",
            "services.taskexecutor",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--reconcile-interval",
            "0.1",
            "--stop-grace",
            "1",
        ]
        env = {**os.environ, EXECUTOR_MARK: "inherited"}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[offset:].decode(errors="replace")
            found = _SERVING.search(text)
            if found:
                self.port = int(found.group(1))
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.kill()
        raise AssertionError(f"the executor did not start:\n{self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL the executor (its supervisors are not its group: they live on)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def terminate(self) -> int:
        """SIGTERM the executor; its exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=10)
        self.process = None
        return code

    def close(self) -> None:
        self.kill()
        kill_supervisors(self.data_dir)

    def task_dir(self, name: str) -> Path:
        return self.data_dir / name


class Client:
    """The executor's routes, each answer as (status, JSON body or None)."""

    def __init__(self, session: aiohttp.ClientSession, executor: Executor) -> None:
        self.session = session
        self.executor = executor

    async def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        async with self.session.request(method, self.executor.url + path, **kwargs) as response:
            text = await response.text()
            return response.status, (await response.json() if text.strip() else None)

    async def set_tasks(self, tasks: Any) -> tuple[int, Any]:
        return await self.call("POST", "/setTasks", json=tasks)

    async def get_tasks(self) -> list[Json]:
        status, body = await self.call("GET", "/getTasks")
        assert status == 200, body
        assert isinstance(body, list)
        return body

    async def task(self, name: str) -> Json | None:
        status, body = await self.call("GET", f"/tasks/{name}")
        if status == 404:
            return None
        assert status == 200, body
        assert isinstance(body, dict)
        return body

    async def until(
        self,
        name: str,
        done: Callable[[Json | None], bool],
        within: float = 10.0,
    ) -> Json | None:
        """Poll task ``name`` until ``done`` says so; the last answer. Fails after ``within``
        seconds."""
        seen: list[Json | None] = [None]

        async def reached() -> tuple[Json | None] | None:
            seen[0] = await self.task(name)
            return (seen[0],) if done(seen[0]) else None

        (found,) = await until(
            reached, within=within, what=lambda: f"task {name} to get there; last seen: {seen[0]}"
        )
        return found

    async def terminated(self, name: str, within: float = 10.0) -> Json:
        """The ``processStatus.terminated`` of ``name`` once it has one."""
        found = await self.until(name, lambda t: terminated_of(t) is not None, within)
        ended = terminated_of(found)
        assert ended is not None
        return ended

    async def running(self, name: str, within: float = 10.0) -> Json:
        found = await self.until(
            name, lambda t: (t or {}).get("processStatus", {}).get("running") is not None, within
        )
        assert found is not None
        return found


def terminated_of(task: Json | None) -> Json | None:
    if task is None:
        return None
    ended = (task.get("processStatus") or {}).get("terminated")
    return ended if isinstance(ended, dict) else None


async def file_text(path: Path, within: float = 10.0) -> str:
    """``path``'s content once it exists (a hook or a task writes it in the background)."""
    await until(path.exists, within=within, what=f"{path} to be written")
    return path.read_text()
