"""The sandbox runtime (devtools/sandboxruntime) as one process, the way the development
cluster's kubelet starts it for a Pod: what it does where isolation is unavailable, and that
stopping it, or killing it, leaves nothing of its sandbox running.

- Without bubblewrap or user namespaces (here: a PATH that holds neither ``bwrap`` nor
  ``unshare``) it warns, loudly, that commands run unisolated, says ``isolation: none`` at
  ``GET /``, and still works, each command in a process group of its own.
- SIGTERM (the kubelet stopping a deleted Pod's runtime) kills what its commands left running.
- Isolated by ``unshare`` (where the machine allows it), even SIGKILL of the runtime's wrapper
  leaves nothing: the kernel ends the PID namespace.
- Paths that lead out of the sandbox's directory are refused (403).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from devtools.sandboxruntime.isolation import UNISOLATED_WARNING, choose
from tests.e2e.sdkruntime.processes import matching

pytestmark = [pytest.mark.timeout(120)]


@dataclass
class Runtime:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def execute(self, command: str, timeout: float | None = None) -> dict[str, object]:
        body: dict[str, object] = {"command": command}
        if timeout is not None:
            body["timeout_seconds"] = timeout
        answer = requests.post(f"{self.url}/execute", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


def _address() -> tuple[str, int]:
    """A loopback address of its own (127/8 all binds on Linux) and a free port on it."""
    host = f"127.{random.randint(100, 199)}.{random.randint(0, 255)}.{random.randint(2, 254)}"
    with socket.socket() as probe:
        probe.bind((host, 0))
        return host, int(probe.getsockname()[1])


def _wait(what: str, check: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/", timeout=1).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], Runtime]]:
    """Start runtimes with the given environment; each is killed, group and all, at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def run(env: dict[str, str]) -> Runtime:
        host, port = _address()
        log = tmp_path / f"runtime-{len(started)}.log"
        argv = [
            sys.executable,
            "-m",
            "devtools.sandboxruntime",
            "--host",
            host,
            "--port",
            str(port),
        ]
        process = subprocess.Popen(
            [*argv, "--data-dir", str(tmp_path / f"sandbox-{len(started)}")],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append(process)
        runtime = Runtime(process, f"http://{host}:{port}", log)
        _wait("the runtime answers", lambda: _answers(runtime.url) or process.poll() is not None)
        assert process.poll() is None, log.read_text()
        return runtime

    yield run
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _bare_path(tmp_path: Path) -> str:
    """A PATH with what the commands below use, and neither bwrap nor unshare."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sleep", "cat"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_without_isolation_it_warns_and_still_works(
    start: Callable[[dict[str, str]], Runtime], tmp_path: Path
) -> None:
    env = {**os.environ, "PATH": _bare_path(tmp_path)}
    env.pop("SANDBUS_SANDBOX_ISOLATION", None)
    runtime = start(env)
    assert "UNISOLATED" in runtime.log.read_text()
    assert requests.get(f"{runtime.url}/", timeout=5).json()["isolation"] == "none"

    assert runtime.execute("echo hi") == {
        "stdout": "hi\n",
        "stderr": "",
        "exit_code": 0,
        "timed_out": False,
    }
    slow = runtime.execute("echo $$ > victim.pid; exec sleep 60", timeout=0.5)
    assert (slow["exit_code"], slow["timed_out"]) == (124, True)
    victim = int((tmp_path / "sandbox-0" / "victim.pid").read_text())
    _wait("the timed-out command is killed", lambda: not Path(f"/proc/{victim}").exists())

    marker = f"{random.randint(10_000, 99_999)}.5"
    runtime.execute(f"sleep {marker} >/dev/null 2>&1 &")
    _wait("the background command runs", lambda: bool(matching("sleep", marker)))
    runtime.process.send_signal(signal.SIGTERM)
    assert runtime.process.wait(timeout=10) == 0
    _wait("SIGTERM killed what the commands left", lambda: not matching("sleep", marker))


def test_choosing_with_nothing_available_logs_the_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        chosen = choose("auto", path=str(tmp_path))
    assert not chosen.isolated
    assert UNISOLATED_WARNING in caplog.text


def test_isolated_runtime_leaves_nothing_even_when_killed(
    start: Callable[[dict[str, str]], Runtime],
) -> None:
    if not choose("auto").isolated:
        pytest.skip("neither bubblewrap nor user namespaces work on this machine")
    runtime = start({k: v for k, v in os.environ.items() if k != "SANDBUS_SANDBOX_ISOLATION"})
    assert requests.get(f"{runtime.url}/", timeout=5).json()["isolation"] != "none"
    # Its own PID namespace: the command sees the runtime and itself, not this machine's.
    assert int(str(runtime.execute("ls /proc | grep -c '^[0-9]'")["stdout"])) < 10

    marker = f"{random.randint(10_000, 99_999)}.25"
    runtime.execute(f"setsid sleep {marker} >/dev/null 2>&1 &")
    _wait("the background command runs", lambda: bool(matching("sleep", marker)))
    os.kill(runtime.process.pid, signal.SIGKILL)  # the wrapper only, no SIGTERM first
    runtime.process.wait(timeout=10)
    _wait("the PID namespace ended", lambda: not matching("sleep", marker))


def test_paths_out_of_the_sandbox_are_refused(
    start: Callable[[dict[str, str]], Runtime],
) -> None:
    runtime = start(dict(os.environ))
    escape = requests.get(f"{runtime.url}/download/..%2F..%2Fetc%2Fpasswd", timeout=5)
    assert escape.status_code == 403
    upload = requests.post(
        f"{runtime.url}/upload", files={"file": ("../outside.txt", b"no")}, timeout=5
    )
    assert upload.status_code == 403
    assert requests.get(f"{runtime.url}/list/nowhere", timeout=5).status_code == 404
    assert requests.get(f"{runtime.url}/exists/..%2F..", timeout=5).status_code == 403
