"""``sandbus up``: the whole control plane on its embedded default, each part its own process.

It starts what the services need and then every registered service:

1. NATS: an embedded ``nats-server`` with JetStream whose store is ``DIR/nats`` (with
   ``--nats-cluster N``, N of them as one JetStream cluster under ``DIR/nats-cluster``, every
   stream with N replicas; or the server named by ``--nats``), and the bus's streams on it
   (``ensure_bus``; before the cluster, so a wrong ``--nats`` is told at once);
2. Kubernetes: the development cluster with its objects in ``DIR/cluster`` (or the cluster of
   ``--kubeconfig``), with ``--nodes`` simulated nodes, a kubelet that readies a Pod after
   ``--pod-ready-delay`` seconds and writes that take ``--write-latency-ms``: ``sandbus
   devcluster`` as a child process;
3. agent-sandbox's router for the SDK, in this process (:func:`_router`);
4. each service of ``sandbus run`` as a child process (``sandbus run SERVICE``), as each
   Deployment runs it, so that every service has a core to itself where the machine has them.

The children are supervised (:class:`~services.cli.processes.Supervisor`): their log lines come
out on stderr with the child's name in front; a service that exits without being asked is
reported on a status line and started again, with a backoff, up to ``--max-restarts`` times in
a row, and then, or when the development cluster exits, ``up`` stops everything and exits 1: a
dead child is never ignored. ``--one-process`` runs the cluster and every service as tasks of
this one process instead, as ``up`` did before, for a debugger or a profiler.

Every sandbus process (not ``nats-server``, whose own monitoring this does not turn on) serves
``/metrics``, ``/healthz`` and ``/readyz`` (:mod:`services.runtime.endpoint`) on a free port of
the host of ``SANDBUS_METRICS_ADDRESS`` (default 127.0.0.1): each child its own, chosen here and
handed to it in that variable; with ``--one-process``, the one process's, at
``SANDBUS_METRICS_ADDRESS`` itself when it is set. Each part prints one status line once it is
ready, with its endpoint and process id; a service is ready once its ``/readyz`` says so (in one
process, once the readiness registry ``/readyz`` answers from,
:data:`~services.runtime.endpoint.READINESS`, does: the shell registers a placeholder check
under the service's name, which the service replaces with its own check when it starts, so "not
registered yet" and "not ready yet" read the same). The wait is bounded: a service still not
ready after :data:`READY_WITHIN` seconds gets a line saying what it waits for, and the rest goes
on (the service may well get there later; ``/readyz`` keeps telling).

Both stores live in DIR so that a restart of ``sandbus up`` finds the cluster and its event
history consistent with each other: with only one of them kept, the watcher would see every
object as new, or report every object as deleted. ``DIR/kubeconfig``, ``DIR/nats-url`` and
``DIR/endpoints.json`` (each part's process id and ``/metrics``, ``/healthz`` and ``/readyz``
URLs, :func:`endpoints_document`) are written once everything is ready, ``nats-url`` last, so a
script can wait for it and find the others. Ctrl-C or SIGTERM stops the services first, then the
cluster, then NATS.

:func:`running` is all of that as an async context manager, so that ``sandbus demo`` starts
exactly what ``sandbus up`` starts and then does its work inside; :func:`up` is that plus
waiting for a signal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import nats

from devtools.natsd import NatsCluster, NatsServer
from services.cli.processes import (
    Child,
    RestartPolicy,
    Supervisor,
    free_port,
    sandbus_command,
)
from services.cli.run import SERVICES, load_service
from services.runtime.bus import REPLICAS_ENV, BusConfig, ensure_bus
from services.runtime.connection import server_urls
from services.runtime.endpoint import READINESS
from services.runtime.gc_tuning import tune_for_serving
from services.runtime.metrics import METRICS_ADDRESS_ENV, metrics_address
from services.runtime.runner import configure_logging
from services.runtime.settings import Settings

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "READY_WITHIN",
    "DevClusterOptions",
    "Endpoint",
    "Mode",
    "Running",
    "UpError",
    "add_cluster_args",
    "add_mode_args",
    "cluster_options",
    "endpoints_document",
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
_READYZ_POLL = 0.1
"""Seconds between two looks at the children's /readyz (a request each)."""
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


def add_mode_args(parser: argparse.ArgumentParser) -> None:
    """``--one-process`` and ``--max-restarts``, as ``sandbus up`` and ``sandbus demo`` both take
    them."""
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="run the development cluster and every service in this one process, not each in "
        "its own (for a debugger or a profiler)",
    )
    parser.add_argument(
        "--max-restarts",
        type=whole_number(0),
        default=RestartPolicy().max_restarts,
        metavar="N",
        help="restarts in a row of a service that exits before sandbus stops with an error "
        f"(default {RestartPolicy().max_restarts}; 0: the first exit stops it)",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run NATS, the development cluster and every service, each its own process",
        description=(
            "Run sandbus on its embedded default: an embedded NATS, the development cluster "
            "and every service, each its own process, until Ctrl-C or SIGTERM."
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
    add_mode_args(parser)
    parser.set_defaults(func=lambda args: _main(parser, args))


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    cluster = cluster_options(parser, args)
    configure_logging()
    services = args.only or sorted(SERVICES)
    if args.nats and args.nats_cluster > 1:
        parser.error("--nats-cluster runs an embedded NATS: it does not go with --nats")
    if args.one_process:
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
                mode=Mode.from_args(args),
            )
        )
    except UpError as error:
        print(f"sandbus up: error: {error}", flush=True)
        return 1


def _status(part: str, detail: str) -> None:
    print(f"  {part:<12} {detail}", flush=True)


@dataclass(frozen=True)
class Mode:
    """How the parts run: each its own process (the default) or all in this one."""

    one_process: bool = False
    restarts: RestartPolicy = field(default_factory=RestartPolicy)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Mode:
        """From :func:`add_mode_args`' options."""
        return cls(args.one_process, RestartPolicy(max_restarts=args.max_restarts))


@dataclass(frozen=True)
class Endpoint:
    """Where a part's process serves ``/metrics``, ``/healthz`` and ``/readyz``."""

    url: str
    """``http://host:port``, without a path."""
    pid: int

    @property
    def metrics(self) -> str:
        return f"{self.url}/metrics"

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "metrics": self.metrics,
            "healthz": f"{self.url}/healthz",
            "readyz": f"{self.url}/readyz",
        }


def endpoints_document(endpoints: Mapping[str, Endpoint], *, one_process: bool) -> dict[str, Any]:
    """What ``DIR/endpoints.json`` holds: each part's process id and URLs, by part (the
    development cluster as ``devcluster``, each service by its name); with ``--one-process``
    every service names the same process and URLs."""
    return {
        "mode": "one-process" if one_process else "processes",
        "parts": {name: endpoint.to_json() for name, endpoint in endpoints.items()},
    }


def _metrics_host() -> str:
    """The host every process's endpoint listens on: ``SANDBUS_METRICS_ADDRESS``'s, else
    loopback (the endpoints are a developer's, not the network's)."""
    address = metrics_address()
    return address[0] if address is not None else "127.0.0.1"


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


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


def _development_registry() -> None:
    """The development cluster's commits are simulated and push nowhere: any registry name
    does, and snapshots work with no configuration. A registry set by the user is kept; set in
    this environment, which the service processes inherit."""
    from services.snapshot.service import DEVELOPMENT_REGISTRY, REGISTRY_ENV

    os.environ.setdefault(REGISTRY_ENV, DEVELOPMENT_REGISTRY)


def _cluster_detail(url: str, directory: Path, options: DevClusterOptions) -> str:
    nodes = f"{options.nodes} node{'s' if options.nodes != 1 else ''}"
    return f"{url} (development cluster, {nodes}, data {directory / 'cluster'})"


@contextlib.asynccontextmanager
async def _development_cluster(
    directory: Path, options: DevClusterOptions, status: Status
) -> AsyncIterator[Path]:
    """The development cluster in this process (``--one-process``)."""
    # Development only. Its option types come through devtools.cluster.cluster too: that is
    # the one import of the development cluster the layering contract grants (pyproject.toml).
    from devtools.cluster.cluster import DevCluster, LatencyModel, SimulationSettings

    _development_registry()
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
        status("kubernetes", _cluster_detail(cluster.url, directory, options))
        yield kubeconfig


def _devcluster_command(directory: Path, options: DevClusterOptions, port: int) -> list[str]:
    command = sandbus_command(
        "devcluster",
        "--port",
        str(port),
        "--kubeconfig",
        str(directory / "devcluster.kubeconfig"),
        "--data",
        str(directory / "cluster"),
        "--nodes",
        str(options.nodes),
        "--pod-ready-delay",
        str(options.pod_ready_delay),
    )
    if options.write_latency_ms is not None:
        command += ["--write-latency-ms", str(options.write_latency_ms)]
    return command


def _child_env(host: str, port: int, name: str = "") -> dict[str, str]:
    """This environment (the registry, the bus's replicas, the log level are set in it), with
    the child's own endpoint and, for a service, a name among replicas that its restarts keep,
    as a restarted container keeps its Pod's: a Lease it held, and the keys it served among
    the claim worker's shards, are its again at once, not after they expire."""
    identity = f"{socket.gethostname()}-{os.getpid()}-{name}"
    return {
        "SANDBUS_IDENTITY": identity,
        "SANDBUS_WATCHER_IDENTITY": identity,
        **os.environ,
        METRICS_ADDRESS_ENV: f"{host}:{port}",
        "PYTHONUNBUFFERED": "1",
    }


@contextlib.asynccontextmanager
async def _cluster_process(
    directory: Path,
    options: DevClusterOptions,
    status: Status,
    children: Children,
    ready_within: float,
) -> AsyncIterator[Path]:
    """``sandbus devcluster`` as a child, until the block ends; not restarted (the services'
    watches and caches would all start over): its exit stops ``up``."""
    _development_registry()
    kubeconfig = directory / "devcluster.kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    port = free_port()
    endpoint_port = free_port(children.host)
    child = await children.supervisor.start(
        "devcluster",
        _devcluster_command(directory, options, port),
        env=_child_env(children.host, endpoint_port),
        restart=False,
    )
    try:
        endpoint = Endpoint(_url(children.host, endpoint_port), child.pid or 0)
        children.endpoints["devcluster"] = endpoint
        problem = await children.ready(endpoint, ready_within)
        if problem is not None:
            raise UpError(f"the development cluster did not start: {problem}")
        detail = _cluster_detail(f"http://127.0.0.1:{port}", directory, options)
        status("kubernetes", f"{detail}; pid {endpoint.pid}, {endpoint.metrics}")
        yield kubeconfig
    finally:
        await children.supervisor.stop(["devcluster"])


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
    failed: asyncio.Future[str]
    """Set, with what happened, when a part has ended for good (a service, or the development
    cluster's process); never while everything runs."""
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    """Each part's endpoint, by name (see :func:`endpoints_document`)."""

    async def until(self, stop: asyncio.Event) -> bool:
        """Wait for ``stop`` or for a part to end for good; True when a part ended."""
        stopping = asyncio.create_task(stop.wait())
        try:
            either: list[asyncio.Future[Any]] = [stopping, self.failed]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        return self._ended() is not None

    async def guard(self, work: Awaitable[T]) -> T:
        """``work``'s result, or :class:`UpError` when a part ends for good before it does."""
        task = asyncio.ensure_future(work)
        try:
            either: list[asyncio.Future[Any]] = [task, self.failed]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
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
        if not self.failed.done():
            return None
        log.error("%s", self.failed.result())
        return self.failed.result()


class Children:
    """The parts run as child processes: their supervisor, their endpoints, and reading a
    child's readiness from its ``/readyz``."""

    def __init__(self, status: Status, policy: RestartPolicy) -> None:
        self.supervisor = Supervisor(status, policy, self._restarted)
        self.host = _metrics_host()
        self.endpoints: dict[str, Endpoint] = {}
        self.written: Path | None = None
        """``DIR/endpoints.json`` once written: rewritten when a child's pid changes."""
        self._http: aiohttp.ClientSession | None = None

    def _restarted(self, child: Child) -> None:
        """A child started again, on the same endpoint: its new pid, where it is written."""
        endpoint = self.endpoints.get(child.name)
        if endpoint is None or child.pid is None:
            return
        self.endpoints[child.name] = dataclasses.replace(endpoint, pid=child.pid)
        if self.written is not None:
            _write_endpoints(self.written, self.endpoints, one_process=False)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def waiting(self, endpoint: Endpoint) -> str | None:
        """What the process behind ``endpoint`` waits for (its ``/readyz``); None: ready."""
        import aiohttp  # here: `sandbus --help` builds this parser, and needs no HTTP client

        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        try:
            async with self._http.get(f"{endpoint.url}/readyz") as response:
                if response.status == 200:
                    return None
                return (await response.text()).strip().replace("\n", "; ") or _STARTING
        except (aiohttp.ClientError, TimeoutError):
            return _STARTING  # not listening yet, or restarting

    async def ready(self, endpoint: Endpoint, within: float) -> str | None:
        """Until the process behind ``endpoint`` is ready (None), or what it still waits for
        after ``within`` seconds; :class:`UpError` when a child is gone for good meanwhile."""
        deadline = time.monotonic() + within
        while (problem := await self.waiting(endpoint)) is not None:
            if time.monotonic() >= deadline:
                return problem
            await self._pause()
        return None

    async def _pause(self) -> None:
        """A poll interval, cut short (with :class:`UpError`) when a child is gone for good."""
        failed = self.supervisor.failed
        await asyncio.wait([failed], timeout=_READYZ_POLL)
        if failed.done():
            raise UpError(f"{failed.result()}; see the log above")

    async def start_services(self, services: list[str], settings: Settings) -> None:
        for name in services:
            port = free_port(self.host)
            command = sandbus_command("run", name, "--nats", settings.nats_url)
            command += ["--kubeconfig", str(settings.kubeconfig)]
            env = _child_env(self.host, port, name)
            child = await self.supervisor.start(name, command, env=env)
            self.endpoints[name] = Endpoint(_url(self.host, port), child.pid or 0)

    async def report_readiness(self, services: list[str], within: float, status: Status) -> None:
        """A status line for each service as its ``/readyz`` says it is ready; after ``within``
        seconds, one for each still waiting."""

        async def waiting() -> dict[str, str]:
            answers = await asyncio.gather(*(self.waiting(self.endpoints[n]) for n in services))
            return {n: a for n, a in zip(services, answers, strict=True) if a is not None}

        await _report_readiness(services, waiting, within, status, self.endpoints, self._pause)


async def _report_readiness(
    names: list[str],
    waiting: Callable[[], Awaitable[dict[str, str]]],
    within: float,
    status: Status,
    endpoints: Mapping[str, Endpoint],
    pause: Callable[[], Awaitable[None]],
) -> None:
    """A status line for each of ``names`` as ``waiting`` stops naming it, in that order; after
    ``within`` seconds, one for each still waiting. ``pause`` waits between two looks, and
    raises :class:`UpError` when a part ends meanwhile."""
    started = time.monotonic()
    pending = set(names)
    while pending:
        problems = await waiting()
        elapsed = time.monotonic() - started
        for name in sorted(pending - problems.keys()):
            status(name, f"ready ({elapsed:.1f} s); {_where(endpoints[name])}")
            pending.discard(name)
        if not pending:
            return
        if elapsed >= within:
            for name in sorted(pending):
                status(
                    name,
                    f"not ready after {within:g} s: {problems.get(name, '?')}; "
                    f"{_where(endpoints[name])}",
                )
            return
        await pause()


def _where(endpoint: Endpoint) -> str:
    return f"pid {endpoint.pid}, {endpoint.metrics}"


def _waiting(lines: Iterable[str]) -> dict[str, str]:
    """:meth:`Readiness.waiting`'s ``service: what it waits for`` lines, by service."""
    out = {}
    for line in lines:
        service, _, problem = line.partition(": ")
        out[service] = problem
    return out


@contextlib.contextmanager
def _own_endpoint() -> Iterator[Endpoint]:
    """This process's endpoint (``--one-process``): at ``SANDBUS_METRICS_ADDRESS`` when set,
    else on a free port of loopback, set in the environment the services read it from while
    the block runs."""
    address = metrics_address()
    if address is not None:
        yield Endpoint(_url(*address), os.getpid())
        return
    port = free_port()
    os.environ[METRICS_ADDRESS_ENV] = f"127.0.0.1:{port}"
    try:
        yield Endpoint(_url("127.0.0.1", port), os.getpid())
    finally:
        os.environ.pop(METRICS_ADDRESS_ENV, None)


@contextlib.asynccontextmanager
async def _service_tasks(
    services: list[str], settings: Settings, within: float, status: Status
) -> AsyncIterator[tuple[asyncio.Future[str], dict[str, Endpoint]]]:
    """``--one-process``: each service a task of this process, until the block ends; then each
    is cancelled. Yields the future a service's end sets, and the endpoints."""
    failed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    tasks: dict[str, asyncio.Task[None]] = {}
    with _own_endpoint() as endpoint:
        for name in services:
            # Replaced by the service's own check as it starts (see the module docstring).
            READINESS.add(name, lambda: _STARTING)
            tasks[name] = asyncio.create_task(load_service(name)(settings), name=name)
        watch = asyncio.create_task(_first_to_end(tasks, failed))
        endpoints = dict.fromkeys(services, endpoint)
        try:

            async def waiting() -> dict[str, str]:
                return _waiting(READINESS.waiting())

            async def pause() -> None:
                await asyncio.wait([failed], timeout=_POLL)
                if failed.done():
                    raise UpError(f"{failed.result()} while starting")

            await _report_readiness(services, waiting, within, status, endpoints, pause)
            yield failed, endpoints
        finally:
            watch.cancel()
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(watch, *tasks.values(), return_exceptions=True)
            for name in services:  # a service that failed before it registered left ours
                READINESS.discard(name)


async def _first_to_end(tasks: dict[str, asyncio.Task[None]], failed: asyncio.Future[str]) -> None:
    """Set ``failed`` when one of ``tasks`` ends (a service never ends by itself)."""
    if not tasks:
        return
    done, _ = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
    task = next(iter(done))
    error = None if task.cancelled() else task.exception()
    failed.set_result(f"service {task.get_name()} ended unexpectedly: {error!r}")


@contextlib.asynccontextmanager
async def _children(mode: Mode, status: Status) -> AsyncIterator[Children | None]:
    """The children's supervisor, or None with ``--one-process``."""
    if mode.one_process:
        yield None
        return
    children = Children(status, mode.restarts)
    try:
        yield children
    finally:
        await children.supervisor.stop(list(children.supervisor.children))  # any left
        await children.close()


@contextlib.asynccontextmanager
async def _service_processes(
    children: Children, services: list[str], settings: Settings, within: float, status: Status
) -> AsyncIterator[tuple[asyncio.Future[str], dict[str, Endpoint]]]:
    """Each service a child process, until the block ends; then all are stopped at once."""
    try:
        await children.start_services(services, settings)
        await children.report_readiness(services, within, status)
        yield children.supervisor.failed, children.endpoints
    finally:
        await children.supervisor.stop(services)


@contextlib.asynccontextmanager
async def _router(directory: Path, kubeconfig: Path, status: Status) -> AsyncIterator[str]:
    """agent-sandbox's router for the SDK (devtools/router.py), its URL in DIR/router-url."""
    from devtools.router import serve_router
    from devtools.sandboxruntime.isolation import choose, describe

    isolation = await asyncio.to_thread(choose)  # a warning, when there is none, is logged
    async with serve_router(kubeconfig) as url:
        status("router", url)
        status("", f"sandbox commands run on this machine, {describe(isolation)}")
        (directory / "router-url").write_text(url + "\n")
        yield url


def _write_endpoints(path: Path, endpoints: Mapping[str, Endpoint], *, one_process: bool) -> None:
    """``endpoints.json``, replaced whole (a reader never sees half of it)."""
    document = endpoints_document(endpoints, one_process=one_process)
    written = path.with_name(f".{path.name}.new")
    written.write_text(json.dumps(document, indent=2) + "\n")
    written.replace(path)


def _write_state(
    directory: Path, handle: Running, kubeconfig: Path, children: Children | None
) -> None:
    # nats-url last: a script that waits for it finds the others written.
    path = directory / "endpoints.json"
    _write_endpoints(path, handle.endpoints, one_process=children is None)
    if children is not None:
        children.written = path  # from now on, a restart rewrites it
    (directory / "kubeconfig").write_bytes(kubeconfig.read_bytes())
    (directory / "nats-url").write_text(handle.nats_url + "\n")


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
    mode: Mode | None = None,
) -> AsyncIterator[Running]:
    """NATS and its bus, the cluster, then ``services``, each ready (or waited for for
    ``ready_within`` seconds), until the block ends: then the services stop, then the cluster,
    then NATS. :class:`UpError` when NATS cannot be reached or a part fails as it starts."""
    mode = mode or Mode()
    directory.mkdir(parents=True, exist_ok=True)
    for stale in ("kubeconfig", "nats-url", "endpoints.json", "router-url"):
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
        children = await stack.enter_async_context(_children(mode, status))
        if kubeconfig is None:
            kubeconfig = await stack.enter_async_context(
                _development_cluster(directory, cluster or DevClusterOptions(), status)
                if children is None
                else _cluster_process(
                    directory, cluster or DevClusterOptions(), status, children, ready_within
                )
            )
        else:
            status("kubernetes", f"from {kubeconfig}")
        await stack.enter_async_context(_router(directory, kubeconfig, status))

        settings = Settings(nats_url=nats_url, kubeconfig=str(kubeconfig))
        failed, endpoints = await stack.enter_async_context(
            _service_tasks(services, settings, ready_within, status)
            if children is None
            else _service_processes(children, services, settings, ready_within, status)
        )
        handle = Running(nats_url=nats_url, kubeconfig=kubeconfig, failed=failed)
        # The children's own: a restart's new pid shows in it.
        handle.endpoints = children.endpoints if children else endpoints
        _write_state(directory, handle, kubeconfig, children)
        yield handle


async def up(
    directory: Path,
    services: list[str],
    *,
    nats_url: str | None = None,
    kubeconfig: Path | None = None,
    cluster: DevClusterOptions | None = None,
    nats_cluster: int = 1,
    mode: Mode | None = None,
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
        mode=mode,
    ) as handle:
        config = directory / "kubeconfig"
        print(
            "ready. Try, in another terminal:\n"
            f"  kubectl --kubeconfig {config} get sandboxes,sandboxwarmpools,nodes\n"
            f"  sandbus events tail --nats $(cat {directory / 'nats-url'})\n"
            f"  cat {directory / 'endpoints.json'}   # each process's /metrics, /healthz, /readyz\n"
            "  sandbus demo          # a warm pool, claims and their latency, on its own sandbus",
            flush=True,
        )
        failed = await handle.until(stop)
        print("sandbus up: stopping", flush=True)
    return 1 if failed else 0
