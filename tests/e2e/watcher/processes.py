"""``sandbus run watcher`` as a real process that a test can SIGKILL, and the Lease it holds:
what the watcher's end-to-end tests share (their fixtures are in conftest.py).

Each process is tied to the test process with ``PR_SET_PDEATHSIG``, like the embedded
nats-server, so that a test runner that dies leaves no watcher behind; every process a test
starts is also killed in the fixture's teardown.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from devtools.cluster import DevCluster
from services.runtime.lease import holder_of
from tests.support.waiting import until

LEASE_SECONDS = 2.0
"""The Lease duration the watcher processes of these tests run with."""
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def sandbus_command() -> list[str]:
    beside = Path(sys.executable).parent / "sandbus"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "services.cli"]


class WatcherProcess:
    def __init__(
        self, identity: str, *, nats_url: str, kubeconfig: Path, log_dir: Path, lease_seconds: float
    ) -> None:
        self.identity = identity
        self.log_path = log_dir / f"watcher-{identity}.log"
        env = dict(os.environ)
        env.update(
            {
                "SANDBUS_WATCHER_IDENTITY": identity,
                "SANDBUS_WATCHER_LEASE_SECONDS": str(lease_seconds),
                "SANDBUS_WATCHER_INACTIVITY_SECONDS": "10",
                # A tiny duplicate window: a change published twice would be stored twice and
                # seen by the test, instead of being hidden by deduplication.
                "SANDBUS_BUS_DUPLICATE_WINDOW": "0.2",
            }
        )
        command = [
            *sandbus_command(),
            "run",
            "watcher",
            "--nats",
            nats_url,
            "--kubeconfig",
            str(kubeconfig),
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent,
            )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no Lease release, publishes cut wherever they are."""
        if self.alive:
            self.process.kill()
        self.process.wait()

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM, as Kubernetes stops a Pod; returns the exit code."""
        if self.alive:
            self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def lease_holder(cluster: DevCluster, name: str = "sandbus-watcher") -> str:
    return holder_of(cluster.store.get("leases.coordination.k8s.io", "default", name))


async def wait_holder(cluster: DevCluster, identity: str, within: float = 15.0) -> float:
    """Wait until ``identity`` holds the Lease; returns when (monotonic)."""
    await until(
        lambda: lease_holder(cluster) == identity,
        within=within,
        what=lambda: f"{identity} to hold the Lease (held by {lease_holder(cluster)!r})",
    )
    return time.monotonic()
