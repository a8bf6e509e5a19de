"""Running a real ``kubectl`` binary against a cluster, as a user does: :class:`Kubectl` runs one
command (or streams a long-running one, :meth:`Kubectl.streaming`) with a kubeconfig the cluster
wrote, a cache directory and a home of the test's own, and an environment without the user's
KUBECONFIG or proxies.

kubectl runs as an asyncio subprocess: the cluster runs on the test's own loop, so the test must
not block it. :data:`KUBECTL` is where the binary is expected (next to this interpreter); tests
skip when it is not there.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.samples import Json

__all__ = ["COMMAND_TIMEOUT", "KUBECTL", "LINE_TIMEOUT", "Kubectl", "Lines", "Result"]

KUBECTL = Path(sys.executable).parent / "kubectl"
COMMAND_TIMEOUT = 30.0
"""Seconds one kubectl command may take."""
LINE_TIMEOUT = 10.0
"""Seconds a streaming command may take to print its next line."""


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


class Kubectl:
    """Runs the kubectl binary against one cluster, with state confined to the test's tmp_path."""

    def __init__(self, kubeconfig: Path, cache_dir: Path, home: Path) -> None:
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key != "KUBECONFIG" and not key.lower().endswith("_proxy")
        }
        # A fresh HOME keeps the user's ~/.kube (cache, kuberc preferences) out of the run.
        self.env["HOME"] = str(home)

    def argv(self, args: Sequence[str]) -> list[str]:
        return [
            str(KUBECTL),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.cache_dir}",
            *args,
        ]

    async def __call__(self, *args: str, stdin: str | None = None) -> Result:
        process = await asyncio.create_subprocess_exec(
            *self.argv(args),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        try:
            out, err = await asyncio.wait_for(
                process.communicate(stdin.encode() if stdin is not None else None),
                COMMAND_TIMEOUT,
            )
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"kubectl {' '.join(args)} did not finish") from None
        assert process.returncode is not None
        return Result(process.returncode, out.decode(), err.decode())

    async def ok(self, *args: str, stdin: str | None = None) -> str:
        """Run a command that must succeed; its stdout."""
        result = await self(*args, stdin=stdin)
        assert result.code == 0, result
        return result.out

    async def json(self, *args: str) -> Json:
        document: Json = json.loads(await self.ok(*args, "-o", "json"))
        return document

    @asynccontextmanager
    async def streaming(self, *args: str) -> AsyncIterator[Lines]:
        """A long-running command (``get -w``), killed when the block ends."""
        process = await asyncio.create_subprocess_exec(
            *self.argv(args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        try:
            yield Lines(process)
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()


class Lines:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def next(self) -> str:
        """The next line of stdout; fails if none comes within LINE_TIMEOUT."""
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), LINE_TIMEOUT)
        except TimeoutError:
            raise AssertionError("kubectl printed no further line") from None
        if not line:
            assert self.process.stderr is not None
            err = (await self.process.stderr.read()).decode()
            raise AssertionError(f"kubectl closed its output: {err}")
        return line.decode().rstrip("\n")


def kubectl_for(cluster: Any, tmp_path: Path) -> Kubectl:
    """A real ``kubectl`` for the development ``cluster``, with a home and a kubeconfig under
    ``tmp_path``."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return Kubectl(cluster.write_kubeconfig(tmp_path / "kubeconfig-kubectl"), tmp_path / "kc", home)
