"""A real nats-server started with deploy/base/nats/nats.conf, as the StatefulSet starts it, and
one user's connection to it: what the tests of this directory share (the fixtures that start
and connect are in conftest.py).

Only what a deployment changes is changed here. The passwords come from the environment, as the
Secret provides them, with random values instead of the placeholders. The store directory is given
on the command line, as the StatefulSet gives it, but it points into tmp_path. The ports are random
and bound to 127.0.0.1 so that parallel tests never collide. The permissions are exactly the
committed ones.

:class:`Client` wraps one user's connection. It records the server's permission violations, so a
test can ask whether the server refused a publish or a subscription. The refusal usually arrives
before the PONG of a flush; when it does not, the test waits a bounded time for it. The wait is
only ever taken where a refusal is expected, because an accepted publish is confirmed by nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.client import Client as NatsClient
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from devtools.natsd import find_nats_server
from tests.unit.deploy.manifests import NATS_CONF

_PR_SET_PDEATHSIG = 1
READER_INBOX_PREFIX = "_INBOX_reader"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class SecuredNats:
    """The running server: its port and the password of every user."""

    port: int
    passwords: dict[str, str]
    log: Path
    pid_file: Path

    def url(self, user: str) -> str:
        return f"nats://{user}:{self.passwords[f'SANDBUS_NATS_PASSWORD_{user.upper()}']}@127.0.0.1:{self.port}"


@dataclass
class Client:
    """One user's connection, and the permission violations the server reported to it."""

    nc: NatsClient
    violations: list[str] = field(default_factory=list)

    @property
    def js(self) -> JetStreamContext:
        return self.nc.jetstream(timeout=2.0)

    def refused(self, subject: str) -> bool:
        # nats-py lower-cases the server's error text.
        quoted = f'"{subject.lower()}"'
        return any(quoted in violation.lower() for violation in self.violations)

    async def publish_refused(self, subject: str, payload: bytes = b"{}") -> bool:
        """Publish ``subject`` (with a reply inbox, as a request would) and say whether the
        server refused it. Use it only where a refusal is expected: an accepted publish is
        confirmed by nothing, so that answer takes the whole deadline."""
        await self.nc.publish(subject, payload, reply=self.nc.new_inbox())
        await self.nc.flush()
        return await self._reported(subject)

    async def follow(self, subject: str) -> Subscription:
        """Subscribe to ``subject`` and return once the server has the subscription.

        One flush is not enough with nats-py: its PING is written to the socket at once, while
        the SUB waits in the pending buffer for the flusher task, so the PONG can come back
        before the server has seen the SUB. By the second flush the flusher has run, and the
        server answers that PING only after the SUB ahead of it.
        """
        subscription = await self.nc.subscribe(subject)
        await self.nc.flush()
        await self.nc.flush()
        return subscription

    async def subscribe_refused(self, subject: str) -> bool:
        """Like :meth:`publish_refused`, for a subscription."""
        subscription = await self.nc.subscribe(subject)
        await self.nc.flush()
        refused = await self._reported(subject)
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
        return refused

    async def _reported(self, subject: str, deadline: float = 5.0) -> bool:
        # The server's -ERR for a violation may arrive after the PONG of the flush.
        loop = asyncio.get_running_loop()
        until = loop.time() + deadline
        while not self.refused(subject):
            if loop.time() >= until:
                return False
            await asyncio.sleep(0.01)
        return True


def start_server(
    tmp_path: Path, passwords: dict[str, str], *, config: Path = NATS_CONF
) -> tuple[subprocess.Popen[bytes], int, Path]:
    ports_dir = tmp_path / "ports"
    ports_dir.mkdir()
    log = tmp_path / "nats-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                find_nats_server(),
                "--config",
                str(config),
                "--store_dir",
                str(tmp_path / "store"),
                "--addr",
                "127.0.0.1",
                "--port",
                "-1",
                "--http_port",
                "-1",
                "--pid",
                str(tmp_path / "nats.pid"),
                "--ports_file_dir",
                str(ports_dir),
            ],
            env={**os.environ, **passwords},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nats-server exited: {log.read_text()[-2000:]}")
        for ports_file in ports_dir.glob("*.ports"):
            with contextlib.suppress(ValueError, OSError):
                urls = json.loads(ports_file.read_text()).get("nats") or []
                if urls:
                    return process, int(str(urls[0]).rsplit(":", 1)[1]), log
        time.sleep(0.01)
    process.kill()
    raise RuntimeError(f"nats-server did not start: {log.read_text()[-2000:]}")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
