"""The embedded nats-server: a real server that tests and `sandbus up` start and stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from devtools.natsd import NatsServer


async def test_fixture_server_publishes_and_consumes_a_jetstream_message(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="SMOKE", subjects=["smoke.>"]))
        ack = await js.publish("smoke.hello", b"hi", headers={"Nats-Msg-Id": "m-1"})
        assert ack.stream == "SMOKE" and ack.seq == 1
        sub = await js.pull_subscribe("smoke.>", durable="reader")
        [msg] = await sub.fetch(1, timeout=5)
        assert (msg.subject, msg.data) == ("smoke.hello", b"hi")
        await msg.ack()
    finally:
        await nc.close()


async def test_stream_survives_a_restart_on_the_same_url(nats_server: NatsServer) -> None:
    url = nats_server.url
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(StreamConfig(name="KEEP", subjects=["keep.>"]))
    await nc.jetstream().publish("keep.a", b"1")
    await nc.close()

    nats_server.restart()

    assert nats_server.url == url
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info("KEEP")
        assert info.state.messages == 1
    finally:
        await nc.close()


def test_stop_is_idempotent_and_close_removes_its_own_store() -> None:
    server = NatsServer().start()
    store = server.store_dir
    assert server.running and store.is_dir()
    server.stop()
    server.stop()
    assert not server.running
    server.close()
    assert not store.exists()


def test_a_server_whose_parent_is_killed_does_not_survive(tmp_path: Path) -> None:
    """A test worker killed with SIGKILL must not leave a nats-server behind."""
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import time, pathlib
                from devtools.natsd import NatsServer
                server = NatsServer(store_dir={str(tmp_path / "store")!r}).start()
                pathlib.Path({str(pid_file)!r}).write_text(str(server.pid))
                time.sleep(60)
                """
            ),
        ]
    )
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the child never started its server"
            time.sleep(0.02)
        child_pid = int(pid_file.read_text())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child_pid):
            assert time.monotonic() < deadline, "nats-server outlived its parent"
            time.sleep(0.02)
    finally:
        parent.kill()
        parent.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; it waits only for its (dead) parent's reaper.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_missing_binary_is_a_clear_error() -> None:
    from devtools.natsd import NatsServerError

    with pytest.raises(NatsServerError, match="cannot start"):
        NatsServer(binary="/nonexistent/nats-server").start()


async def test_an_object_as_large_as_the_api_server_allows_fits_in_one_message(
    nats_server: NatsServer,
) -> None:
    """etcd stores objects up to 1.5 MiB; each change event carries one whole object."""
    nc = await nats.connect(nats_server.url)
    try:
        assert nc.max_payload >= 2 * 1024 * 1024
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="BIG", subjects=["big.>"]))
        ack = await js.publish("big.object", b"x" * (1536 * 1024 + 4096))
        assert ack.seq == 1
    finally:
        await nc.close()
