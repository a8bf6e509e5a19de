"""Starting and stopping ``sandbus`` commands as their own processes, for the benchmarks.

Imported by the scripts next to it (``python bench/<script>.py`` puts this folder on the path).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def start_sandbus(
    arguments: list[str], log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Run ``sandbus ARGUMENTS`` from this interpreter's environment, its output into ``log``."""
    sandbus = Path(sys.executable).parent / "sandbus"
    command = [str(sandbus)] if sandbus.is_file() else [sys.executable, "-m", "services.cli"]
    with log.open("ab") as out:
        return subprocess.Popen(
            [*command, *arguments],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (thawing a SIGSTOPped process first), then SIGKILL after 15 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
