"""`sandbus run`'s process contract: SIGTERM stops a service cleanly, a crash exits non-zero."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from services.cli.run import load_service
from services.runtime import runner

SERVICE = textwrap.dedent(
    """
    import asyncio, pathlib, sys
    from services.runtime.runner import event_loop_factory, serve_until_signalled

    marks = pathlib.Path(sys.argv[1])
    mode = sys.argv[2]
    loop = sys.argv[3]

    async def serve():
        (marks / "started").touch()
        try:
            if mode == "crash":
                raise RuntimeError("boom")
            if mode == "return":
                return
            await asyncio.Event().wait()
        finally:
            (marks / "cleaned-up").touch()

    with asyncio.Runner(loop_factory=event_loop_factory(loop)) as runner:
        sys.exit(runner.run(serve_until_signalled(serve())))
    """
)


def _start(tmp_path: Path, mode: str, loop: str = "uvloop") -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(tmp_path), mode, loop], stderr=subprocess.PIPE
    )


def _wait_for(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_service_cleanly(
    tmp_path: Path, signum: signal.Signals, loop: str
) -> None:
    process = _start(tmp_path, "serve", loop)
    try:
        _wait_for(tmp_path / "started")
        process.send_signal(signum)
        assert process.wait(timeout=20) == 0
        assert (tmp_path / "cleaned-up").exists()
    finally:
        process.kill()
        process.wait()


def test_a_crashing_service_exits_non_zero_with_its_error(tmp_path: Path) -> None:
    process = _start(tmp_path, "crash")
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 1
    assert b"boom" in stderr
    assert (tmp_path / "cleaned-up").exists()


def test_a_service_that_returns_by_itself_exits_non_zero(tmp_path: Path) -> None:
    """A long-running service that stops on its own is a failure its Deployment should see."""
    process = _start(tmp_path, "return")
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 1
    assert b"returned before it was asked to stop" in stderr


def test_an_unknown_service_names_the_known_ones() -> None:
    with pytest.raises(LookupError, match=r"unknown service 'nope' \(known: claim, pool, "):
        load_service("nope")


@pytest.mark.parametrize(
    ("value", "uvloop"), [(None, True), ("", True), ("uvloop", True), (" asyncio", False)]
)
def test_the_event_loop_is_uvloop_unless_asked(value: str | None, uvloop: bool) -> None:
    factory = runner.event_loop_factory(value)
    assert (factory is not None) == uvloop
    if factory is not None:
        loop = factory()
        try:
            assert type(loop).__module__.startswith("uvloop")
        finally:
            loop.close()


def test_an_unknown_event_loop_stops_the_service() -> None:
    with pytest.raises(ValueError, match="SANDBUS_EVENT_LOOP='trio'"):
        runner.event_loop_factory("trio")
