"""`sandbus up` as a user runs it, for the end-to-end tests: where the commands are, and kubectl
against the cluster of `sandbus up --dir STATE`, as the README shows. The ``sandbus_up`` fixture
that runs it is in tests/e2e/conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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
