"""``sandbus devcluster``: run the development cluster until SIGTERM or Ctrl-C.

Writes a kubeconfig for it (``--kubeconfig``), so kubectl and the services can be pointed at it,
and exits with 0 on a clean shutdown. ``--nodes``, ``--pod-ready-delay`` and ``--job-delay`` (how
long a simulated Job, an image-committer's too, runs) configure the simulated kubelet, and
``--no-task-executors`` has it simulate the Pods that run OpenSandbox's task executor without
running a real one for each;
``--write-latency-ms`` sets the latency model to a real API server's.
sandbus's own CRDs are always served (generated from the API types); ``--crds`` adds more.
``--advertise-host``/``--advertise-url`` name the server in the kubeconfig when the listen
address is not one clients can use (``--host 0.0.0.0`` in a container).
``SANDBUS_METRICS_ADDRESS`` (``host:port``) serves the process's ``/metrics``, ``/healthz`` and
``/readyz`` there, as every service does (``sandbus up`` sets it for the cluster it starts).

Every ``sandbus`` command builds its parser from this module, so it imports nothing heavy at
module level: the cluster (and aiohttp) load only when this command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from devtools.cluster.cluster import DevCluster
    from devtools.cluster.controllers.plug import SimulationSettings

__all__ = ["register", "simulation_settings"]


def _server_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s) URL with a host: {value!r}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "devcluster",
        help="run the development Kubernetes API server stand-in",
        description="Serve a faithful Kubernetes API stand-in on 127.0.0.1 until interrupted.",
    )
    parser.add_argument("--port", type=int, default=6443, help="listen port (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address")
    advertised = parser.add_mutually_exclusive_group()
    advertised.add_argument(
        "--advertise-host",
        default=None,
        help="host name clients reach the cluster by, written into the kubeconfig "
        "(default: --host; e.g. the compose service name with --host 0.0.0.0)",
    )
    advertised.add_argument(
        "--advertise-url",
        type=_server_url,
        default=None,
        help="the whole server URL for the kubeconfig, e.g. behind a port mapping",
    )
    parser.add_argument(
        "--kubeconfig", type=Path, required=True, help="write a kubeconfig for this cluster here"
    )
    parser.add_argument("--data", type=Path, default=None, help="keep objects in SQLite in DIR")
    parser.add_argument(
        "--crds",
        type=Path,
        action="append",
        default=None,
        help="a further CRD file or directory to install (repeatable); sandbus's own CRDs are "
        "always installed, generated from its API types, and a file may replace one of them",
    )
    parser.add_argument(
        "--no-sandbus-crds",
        dest="sandbus_crds",
        action="store_false",
        help="do not install sandbus's own CRDs (only those of --crds)",
    )
    parser.add_argument("--nodes", type=int, default=1, help="simulated nodes, 110 Pods each")
    parser.add_argument(
        "--pod-ready-delay", type=float, default=0.2, help="seconds until a started Pod is Ready"
    )
    parser.add_argument(
        "--job-delay",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds a simulated Job runs before it completes or fails (default: 0.1)",
    )
    parser.add_argument(
        "--no-task-executors",
        dest="task_executors",
        action="store_false",
        help="do not run a real task executor (python -m services.taskexecutor) for each Pod "
        "that runs one; simulate those Pods like the others",
    )
    parser.add_argument(
        "--write-latency-ms",
        type=float,
        default=None,
        help="median write latency (default: a few ms, like a real API server)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from devtools.cluster.cluster import DevCluster
    from devtools.cluster.http.faults import LatencyModel
    from services.runtime.gc_tuning import tune_for_serving

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    latency = (
        LatencyModel.with_write_ms(args.write_latency_ms, seed=args.seed)
        if args.write_latency_ms is not None
        else LatencyModel(seed=args.seed)
    )
    cluster = DevCluster(
        host=args.host,
        port=args.port,
        advertise_host=args.advertise_host,
        advertise_url=args.advertise_url,
        crd_dirs=args.crds or [],
        sandbus_crds=args.sandbus_crds,
        data_dir=args.data,
        latency=latency,
        seed=args.seed,
        simulation=simulation_settings(args),
    )
    tune_for_serving()
    return asyncio.run(_serve(cluster, args.kubeconfig))


def simulation_settings(args: argparse.Namespace) -> SimulationSettings:
    """The simulated components' settings from the command line."""
    from devtools.cluster.controllers.plug import SimulationSettings

    # Only what is given: the kubelet's own defaults stay in force.
    kubelet: dict[str, Any] = {}
    if args.job_delay is not None:
        kubelet["job_delay"] = args.job_delay
    if not args.task_executors:
        kubelet["task_executor_command"] = None
    options = {"kubelet": kubelet} if kubelet else {}
    return SimulationSettings(
        nodes=args.nodes, pod_ready_delay=args.pod_ready_delay, options=options
    )


async def _serve(cluster: DevCluster, kubeconfig: Path) -> int:
    from services.runtime.endpoint import metrics_endpoint
    from services.runtime.metrics import metrics_address, process_metrics

    address = metrics_address()  # read first: a malformed one is told before anything starts
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with cluster, contextlib.AsyncExitStack() as stack:
        # Opened once the cluster serves, so that its /readyz answering says the cluster does.
        if address is not None:
            await stack.enter_async_context(metrics_endpoint(process_metrics(), *address))
        cluster.write_kubeconfig(kubeconfig)
        print(
            f"devcluster serving at {cluster.url}; kubeconfig {kubeconfig} "
            f"(listening on {cluster.host}:{cluster.port})",
            flush=True,
        )
        await stop.wait()
    return 0
