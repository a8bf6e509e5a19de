"""``sandbus up``: the whole control plane in one process, on its embedded default.

It starts what the services need and then every registered service:

1. NATS: an embedded ``nats-server`` with JetStream whose store is ``DIR/nats`` (with
   ``--nats-cluster N``, N of them as one JetStream cluster under ``DIR/nats-cluster``, every
   stream with N replicas; or the server named by ``--nats``), and the bus's streams on it
   (``ensure_bus``; before the cluster, so a wrong ``--nats`` is told at once);
2. Kubernetes: the development cluster with its objects in ``DIR/cluster`` (or the cluster of
   ``--kubeconfig``), with ``--nodes`` simulated nodes, a kubelet that readies a Pod after
   ``--pod-ready-delay`` seconds and writes that take ``--write-latency-ms``;
3. each service of ``sandbus run`` as a task.

Each part prints one status line once it is ready, a service once it says so itself: the shell
registers a placeholder check under the service's name in the process's readiness registry
(:data:`~services.runtime.endpoint.READINESS`, what ``/readyz`` answers from), which the service
replaces with its own check when it starts, so "not registered yet" and "not ready yet" read
the same and the shell needs nothing but that registry's public face. The wait is bounded: a
service still not ready after :data:`READY_WITHIN` seconds gets a line saying what it waits for,
and the rest goes on (the service may well get there later; ``/readyz`` keeps telling).

Both stores live in DIR so that a restart of ``sandbus up`` finds the cluster and its event
history consistent with each other: with only one of them kept, the watcher would see every
object as new, or report every object as deleted. ``DIR/kubeconfig`` and ``DIR/nats-url`` are
written once everything is ready, so a script can wait for them. Ctrl-C or SIGTERM stops the
services first, then the cluster, then NATS.

:func:`running` is all of that as an async context manager, so that ``sandbus demo`` starts
exactly what ``sandbus up`` starts and then does its work inside; :func:`up` is that plus
waiting for a signal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import nats

from devtools.natsd import NatsCluster, NatsServer
from services.cli.run import SERVICES, load_service
from services.runtime.bus import REPLICAS_ENV, BusConfig, ensure_bus
from services.runtime.connection import server_urls
from services.runtime.endpoint import READINESS
from services.runtime.gc_tuning import tune_for_serving
from services.runtime.runner import configure_logging
from services.runtime.settings import Settings

__all__ = [
    "READY_WITHIN",
    "DevClusterOptions",
    "Running",
    "UpError",
    "add_cluster_args",
    "cluster_options",
    "register",
    "running",
    "up",
    "whole_number",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

READY_WITHIN = 60.0
"""Seconds the shell waits for the services to say they are ready before it goes on anyway."""
_POLL = 0.05
"""Seconds between two looks at the readiness registry: a status line is at most this late."""
_STARTING = "starting"

Status = Callable[[str, str], None]


class UpError(Exception):
    """What kept the control plane from starting, in words for the person who ran it."""


@dataclass(frozen=True)
class DevClusterOptions:
    """How the development cluster is built; the development cluster's own defaults."""

    nodes: int = 1
    pod_ready_delay: float = 0.2
    write_latency_ms: float | None = None
    """None: the cluster's default latency model (a few ms, like a real API server)."""


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """``--nats``, ``--kubeconfig`` and the development cluster's options, as ``sandbus up``
    and ``sandbus demo`` both take them."""
    parser.add_argument("--nats", metavar="URL", help="use this NATS instead of an embedded one")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="use this Kubernetes cluster instead of the development cluster",
    )
    defaults = DevClusterOptions()
    group = parser.add_argument_group("development cluster (without --kubeconfig)")
    # Defaults of None, so that one given with --kubeconfig, where it would do nothing, is told.
    group.add_argument(
        "--nodes",
        type=whole_number(1),
        metavar="N",
        help=f"simulated nodes, 110 Pods each (default {defaults.nodes})",
    )
    group.add_argument(
        "--pod-ready-delay",
        type=_non_negative,
        metavar="SECONDS",
        help=f"seconds until a started Pod is Ready (default {defaults.pod_ready_delay})",
    )
    group.add_argument(
        "--write-latency-ms",
        type=_non_negative,
        metavar="MS",
        help="median latency of an API write (default: a few ms, like a real API server)",
    )


def cluster_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> DevClusterOptions:
    """The development cluster's options from ``args`` (see :func:`add_cluster_args`); a
    usage error when one is given beside ``--kubeconfig``."""
    given = {
        flag: value
        for flag, value in (
            ("--nodes", args.nodes),
            ("--pod-ready-delay", args.pod_ready_delay),
            ("--write-latency-ms", args.write_latency_ms),
        )
        if value is not None
    }
    if given and args.kubeconfig is not None:
        parser.error(
            f"{', '.join(given)}: options of the development cluster, which --kubeconfig replaces"
        )
    defaults = DevClusterOptions()
    return DevClusterOptions(
        nodes=args.nodes if args.nodes is not None else defaults.nodes,
        pod_ready_delay=(
            args.pod_ready_delay if args.pod_ready_delay is not None else defaults.pod_ready_delay
        ),
        write_latency_ms=args.write_latency_ms,
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run NATS, the development cluster and every service in one process",
        description=(
            "Run sandbus on its embedded default: an embedded NATS, the development cluster "
            "and every service, until Ctrl-C or SIGTERM."
        ),
    )
    parser.add_argument(
        "--dir", type=Path, default=Path(".sandbus"), help="state directory (default .sandbus/)"
    )
    add_cluster_args(parser)
    parser.add_argument(
        "--nats-cluster",
        type=whole_number(1),
        default=1,
        metavar="N",
        help="run the embedded NATS as a JetStream cluster of N servers, every stream with N "
        "replicas (default 1: one server)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(SERVICES),
        metavar="SERVICE",
        help="run only these services (repeatable; default: all)",
    )
    parser.set_defaults(func=lambda args: _main(parser, args))


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    cluster = cluster_options(parser, args)
    configure_logging()
    services = args.only or sorted(SERVICES)
    if args.nats and args.nats_cluster > 1:
        parser.error("--nats-cluster runs an embedded NATS: it does not go with --nats")
    tune_for_serving()  # every service in this one process, as each on its own would be
    try:
        return asyncio.run(
            up(
                args.dir,
                services,
                nats_url=args.nats,
                kubeconfig=args.kubeconfig,
                cluster=cluster,
                nats_cluster=args.nats_cluster,
            )
        )
    except UpError as error:
        print(f"sandbus up: error: {error}", flush=True)
        return 1


def _status(part: str, detail: str) -> None:
    print(f"  {part:<12} {detail}", flush=True)


@contextlib.asynccontextmanager
async def _embedded_nats(directory: Path, status: Status, size: int = 1) -> AsyncIterator[str]:
    if size == 1:
        async with NatsServer(store_dir=directory / "nats") as server:
            status("nats", f"{server.url} (embedded, store {directory / 'nats'})")
            yield server.url
        return
    # A replicated bus: the services are told the streams' replicas, and every node's URL.
    os.environ[REPLICAS_ENV] = str(size)
    async with NatsCluster(size, store_dir=directory / "nats-cluster") as cluster:
        status("nats", f"{cluster.url} (embedded cluster of {size}, streams with {size} replicas)")
        yield cluster.url


@contextlib.asynccontextmanager
async def _development_cluster(
    directory: Path, options: DevClusterOptions, status: Status
) -> AsyncIterator[Path]:
    # Development only. Its option types come through devtools.cluster.cluster too: that is
    # the one import of the development cluster the layering contract grants (pyproject.toml).
    from devtools.cluster.cluster import DevCluster, LatencyModel, SimulationSettings
    from services.snapshot.service import DEVELOPMENT_REGISTRY, REGISTRY_ENV

    # The development cluster's commits are simulated and push nowhere: any registry name does,
    # and snapshots work with no configuration. A registry set by the user is kept.
    os.environ.setdefault(REGISTRY_ENV, DEVELOPMENT_REGISTRY)
    latency = (
        LatencyModel.with_write_ms(options.write_latency_ms)
        if options.write_latency_ms is not None
        else None
    )
    simulation = SimulationSettings(nodes=options.nodes, pod_ready_delay=options.pod_ready_delay)
    async with DevCluster(
        data_dir=directory / "cluster", latency=latency, simulation=simulation
    ) as cluster:
        kubeconfig = cluster.write_kubeconfig(directory / "devcluster.kubeconfig")
        nodes = f"{options.nodes} node{'s' if options.nodes != 1 else ''}"
        status(
            "kubernetes",
            f"{cluster.url} (development cluster, {nodes}, data {directory / 'cluster'})",
        )
        yield kubeconfig


async def _ensure_bus(nats_url: str) -> None:
    async def quiet(error: Exception) -> None:
        log.debug("connecting to NATS at %s: %r", nats_url, error)

    try:
        # A few attempts, not nats-py's minute of them: a wrong --nats is said at once.
        connection = await nats.connect(
            server_urls(nats_url), connect_timeout=5, max_reconnect_attempts=2, error_cb=quiet
        )
    except (OSError, nats.errors.Error) as error:
        raise UpError(f"cannot connect to NATS at {nats_url}: {error}") from None
    try:
        await ensure_bus(connection.jetstream(), BusConfig.from_environment())
    finally:
        await connection.close()


@dataclass
class Running:
    """The control plane while :func:`running` holds it up."""

    nats_url: str
    kubeconfig: Path
    """The cluster's kubeconfig (``DIR/kubeconfig`` holds a copy)."""
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Each service's task, by name; a service never ends by itself."""

    async def until(self, stop: asyncio.Event) -> bool:
        """Wait for ``stop`` or for a service to end; True when a service ended by itself."""
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait(
                [stopping, *self.tasks.values()], return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopping.cancel()
        return self._ended() is not None

    async def guard(self, work: Awaitable[T]) -> T:
        """``work``'s result, or :class:`UpError` when a service ends before it does."""
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait([task, *self.tasks.values()], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise UpError(f"{self._ended()}; see the log above")
        return task.result()

    def _ended(self) -> str | None:
        for name, task in self.tasks.items():
            if task.done():
                error = None if task.cancelled() else task.exception()
                log.error("service %s ended unexpectedly: %r", name, error)
                return f"service {name} ended unexpectedly: {error!r}"
        return None


def _waiting(lines: Iterable[str]) -> dict[str, str]:
    """:meth:`Readiness.waiting`'s ``service: what it waits for`` lines, by service."""
    out = {}
    for line in lines:
        service, _, problem = line.partition(": ")
        out[service] = problem
    return out


async def _report_readiness(
    tasks: dict[str, asyncio.Task[None]], within: float, status: Status
) -> None:
    """A status line for each service as it becomes ready, in that order; after ``within``
    seconds, one for each still waiting. Raises :class:`UpError` when a service ends."""
    started = time.monotonic()
    pending = set(tasks)
    while pending:
        waiting = _waiting(READINESS.waiting())
        elapsed = time.monotonic() - started
        for name in sorted(pending - waiting.keys()):
            status(name, f"ready ({elapsed:.1f} s)")
            pending.discard(name)
        if not pending:
            return
        if elapsed >= within:
            for name in sorted(pending):
                status(name, f"not ready after {within:g} s: {waiting.get(name, '?')}")
            return
        # Sleeping on the tasks: a service that fails while starting is told at once.
        done, _ = await asyncio.wait(
            [tasks[name] for name in pending], timeout=_POLL, return_when=asyncio.FIRST_COMPLETED
        )
        for task in done:
            error = None if task.cancelled() else task.exception()
            raise UpError(f"service {task.get_name()} ended while starting: {error!r}")


@contextlib.asynccontextmanager
async def running(
    directory: Path,
    services: list[str],
    *,
    nats_url: str | None = None,
    kubeconfig: Path | None = None,
    cluster: DevClusterOptions | None = None,
    ready_within: float = READY_WITHIN,
    status: Status = _status,
    nats_cluster: int = 1,
) -> AsyncIterator[Running]:
    """NATS and its bus, the cluster, then ``services``, each ready (or waited for for
    ``ready_within`` seconds), until the block ends: then the services stop, then the cluster,
    then NATS. :class:`UpError` when NATS cannot be reached or a service fails as it starts."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in ("kubeconfig", "nats-url"):
        (directory / stale).unlink(missing_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        if nats_url is None:
            nats_url = await stack.enter_async_context(
                _embedded_nats(directory, status, nats_cluster)
            )
        else:
            status("nats", nats_url)
        await _ensure_bus(nats_url)
        status("bus", "streams ready")
        if kubeconfig is None:
            kubeconfig = await stack.enter_async_context(
                _development_cluster(directory, cluster or DevClusterOptions(), status)
            )
        else:
            status("kubernetes", f"from {kubeconfig}")

        settings = Settings(nats_url=nats_url, kubeconfig=str(kubeconfig))
        handle = Running(nats_url=nats_url, kubeconfig=kubeconfig)
        for name in services:
            # Replaced by the service's own check as it starts (see the module docstring).
            READINESS.add(name, lambda: _STARTING)
            handle.tasks[name] = asyncio.create_task(load_service(name)(settings), name=name)
        try:
            await _report_readiness(handle.tasks, ready_within, status)
            (directory / "kubeconfig").write_bytes(kubeconfig.read_bytes())
            (directory / "nats-url").write_text(nats_url + "\n")
            yield handle
        finally:
            for task in handle.tasks.values():
                task.cancel()
            await asyncio.gather(*handle.tasks.values(), return_exceptions=True)
            for name in services:  # a service that failed before it registered left ours
                READINESS.discard(name)


async def up(
    directory: Path,
    services: list[str],
    *,
    nats_url: str | None = None,
    kubeconfig: Path | None = None,
    cluster: DevClusterOptions | None = None,
    nats_cluster: int = 1,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    print("sandbus up:", flush=True)
    async with running(
        directory,
        services,
        nats_url=nats_url,
        kubeconfig=kubeconfig,
        cluster=cluster,
        nats_cluster=nats_cluster,
    ) as handle:
        config = directory / "kubeconfig"
        print(
            "ready. Try, in another terminal:\n"
            f"  kubectl --kubeconfig {config} get sandboxes,sandboxwarmpools,nodes\n"
            f"  sandbus events tail --nats $(cat {directory / 'nats-url'})\n"
            "  sandbus demo          # a warm pool, claims and their latency, on its own sandbus",
            flush=True,
        )
        failed = await handle.until(stop)
        print("sandbus up: stopping", flush=True)
    return 1 if failed else 0
