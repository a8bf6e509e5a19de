"""`sandbus up` as a user runs it, for the end-to-end tests: where the commands are, kubectl
against the cluster of `sandbus up --dir STATE`, as the README shows, and its processes and
their endpoints (``STATE/endpoints.json``). The ``sandbus_up`` fixture
that runs it is in tests/e2e/conftest.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
SANDBUS = str(BIN / "sandbus")
KUBECTL = str(BIN / "kubectl")


def wait_for_file(path: Path, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until `sandbus up` (``process``) writes ``path``; fail if it exits first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"sandbus up exited with {process.returncode}")
        assert time.monotonic() < deadline, f"{path.name} was not written in {timeout}s"
        time.sleep(0.05)


def user_env() -> dict[str, str]:
    """This environment without KUBECONFIG: a command finds its cluster as it is told."""
    return {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}


def kubectl(
    state: Path, tmp_path: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """kubectl against the cluster of `sandbus up --dir state`, as the README shows."""
    return subprocess.run(
        [
            KUBECTL,
            "--kubeconfig",
            str(state / "kubeconfig"),
            "--cache-dir",
            str(tmp_path / "kube-cache"),
            *args,
        ],
        input=input.encode() if input is not None else None,
        capture_output=True,
        env=user_env(),
        timeout=60,
        check=False,
    )


def endpoints(state: Path) -> dict[str, dict[str, Any]]:
    """Each part's process id and URLs, by part, from `sandbus up --dir state`'s endpoints.json."""
    parts: dict[str, dict[str, Any]] = json.loads((state / "endpoints.json").read_text())["parts"]
    return parts


def fetch(url: str) -> tuple[int, str]:
    """The status and body of a GET of ``url``; an HTTP error's too, and 0 with the reason when
    nothing answers (a process starting again)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except urllib.error.URLError as error:
        return 0, str(error.reason)


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # The command may hold spaces and parentheses: the fields follow the last ")".
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue  # gone meanwhile
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)
