"""Starting and stopping ``sandbus`` commands as their own processes, for the benchmarks (the
command line is :func:`services.cli.processes.sandbus_command`, as ``sandbus up`` starts its
children).

Imported by the scripts next to it (``python bench/<script>.py`` puts this folder on the path).
"""

from __future__ import annotations

import compileall
import functools
import math
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from services.cli.processes import sandbus_command

SOURCES = Path(__file__).resolve().parent.parent
"""The checkout whose ``sandbus`` the benchmarks run (an editable install)."""


@functools.cache
def compile_sandbus() -> None:
    """Byte-compile sandbus's own modules, once: installed, as in the image, they are compiled
    (pip compiles what it installs), so a benchmarked start should not compile them from source
    either, which it does from a checkout where ``PYTHONDONTWRITEBYTECODE`` is set (about
    0.1 s of every process's start on this machine)."""
    for package in ("api", "events", "services"):
        compileall.compile_dir(SOURCES / package, quiet=1)


def start_sandbus(
    arguments: list[str], log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Run ``sandbus ARGUMENTS`` from this interpreter's environment, its output into ``log``."""
    compile_sandbus()
    with log.open("ab") as out:
        return subprocess.Popen(
            sandbus_command(*arguments),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


def start_devcluster(
    kubeconfig: Path,
    log: Path,
    *,
    pod_ready_delay: float,
    write_latency_ms: float,
    pods: int,
) -> subprocess.Popen[bytes]:
    """``sandbus devcluster`` on a free port, writing ``kubeconfig``, with enough simulated
    nodes for ``pods`` Pods (110 each, as a real node allows)."""
    return start_sandbus(
        [
            "devcluster",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--pod-ready-delay",
            str(pod_ready_delay),
            "--write-latency-ms",
            str(write_latency_ms),
            "--nodes",
            str(max(1, math.ceil(pods / 110))),
        ],
        log,
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
