"""``sandbus up``: the whole control plane in one process, on its embedded default.

It starts what the services need and then every registered service:

1. NATS: an embedded ``nats-server`` with JetStream whose store is ``DIR/nats`` (or the server
   named by ``--nats``);
2. Kubernetes: the development cluster with its objects in ``DIR/cluster`` (or the cluster of
   ``--kubeconfig``);
3. the bus's streams (``ensure_bus``), then each service of ``sandbus run`` as a task.

Both stores live in DIR so that a restart of ``sandbus up`` finds the cluster and its event
history consistent with each other: with only one of them kept, the watcher would see every
object as new, or report every object as deleted. ``DIR/kubeconfig`` and ``DIR/nats-url`` are
written once everything is ready, so a script can wait for them. Ctrl-C or SIGTERM stops the
services first, then the cluster, then NATS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import nats

from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.natsd import NatsServer
from services.runtime.runner import SERVICES, configure_logging, load_service
from services.runtime.settings import Settings

__all__ = ["register", "up"]

log = logging.getLogger(__name__)


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
    parser.add_argument("--nats", metavar="URL", help="use this NATS instead of an embedded one")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="use this Kubernetes cluster instead of the development cluster",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(SERVICES),
        metavar="SERVICE",
        help="run only these services (repeatable; default: all)",
    )
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    configure_logging()
    services = args.only or sorted(SERVICES)
    return asyncio.run(up(args.dir, services, nats_url=args.nats, kubeconfig=args.kubeconfig))


def _status(part: str, detail: str) -> None:
    print(f"  {part:<12} {detail}", flush=True)


@contextlib.asynccontextmanager
async def _embedded_nats(directory: Path) -> AsyncIterator[str]:
    async with NatsServer(store_dir=directory / "nats") as server:
        _status("nats", f"{server.url} (embedded, store {directory / 'nats'})")
        yield server.url


@contextlib.asynccontextmanager
async def _development_cluster(directory: Path) -> AsyncIterator[Path]:
    from services.devcluster.cluster import DevCluster  # development only
    from services.snapshot.service import DEVELOPMENT_REGISTRY, REGISTRY_ENV

    # The development cluster's commits are simulated and push nowhere: any registry name does,
    # and snapshots work with no configuration. A registry set by the user is kept.
    os.environ.setdefault(REGISTRY_ENV, DEVELOPMENT_REGISTRY)
    async with DevCluster(data_dir=directory / "cluster") as cluster:
        kubeconfig = cluster.write_kubeconfig(directory / "devcluster.kubeconfig")
        _status("kubernetes", f"{cluster.url} (development cluster, data {directory / 'cluster'})")
        yield kubeconfig


async def up(
    directory: Path,
    services: list[str],
    *,
    nats_url: str | None = None,
    kubeconfig: Path | None = None,
) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    for stale in ("kubeconfig", "nats-url"):
        (directory / stale).unlink(missing_ok=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    print("sandbus up:", flush=True)
    async with contextlib.AsyncExitStack() as stack:
        if nats_url is None:
            nats_url = await stack.enter_async_context(_embedded_nats(directory))
        else:
            _status("nats", nats_url)
        if kubeconfig is None:
            kubeconfig = await stack.enter_async_context(_development_cluster(directory))
        else:
            _status("kubernetes", f"from {kubeconfig}")

        connection = await nats.connect(nats_url)
        try:
            await ensure_bus(connection.jetstream(), BusConfig())
        finally:
            await connection.close()
        _status("bus", "streams ready")

        settings = Settings(nats_url=nats_url, kubeconfig=str(kubeconfig))
        tasks = {
            name: asyncio.create_task(load_service(name)(settings), name=name) for name in services
        }
        for name in services:
            _status(name, "started")

        (directory / "kubeconfig").write_bytes(kubeconfig.read_bytes())
        (directory / "nats-url").write_text(nats_url + "\n")
        print(
            f"ready. kubectl --kubeconfig {directory / 'kubeconfig'} get sandboxes\n"
            f"       sandbus events tail --nats $(cat {directory / 'nats-url'})",
            flush=True,
        )

        failed = await _wait(stop, tasks)
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        print("sandbus up: stopping", flush=True)
    return 1 if failed else 0


async def _wait(stop: asyncio.Event, tasks: dict[str, asyncio.Task[None]]) -> bool:
    """Wait for a stop request or for a service to end; True when a service ended by itself."""
    stopping = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopping, *tasks.values()], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    for name, task in tasks.items():
        if task in done:
            error = task.exception()
            log.error("service %s ended unexpectedly: %r", name, error)
            return True
    return False
