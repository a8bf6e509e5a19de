"""``sandbus devcluster``: run the development cluster until SIGTERM or Ctrl-C.

Writes a kubeconfig for it (``--kubeconfig``), so kubectl and the services can be pointed at it,
and exits with 0 on a clean shutdown. ``--nodes`` and ``--pod-ready-delay`` configure the
simulated kubelet; ``--write-latency-ms`` sets the latency model to a real API server's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from services.devcluster.cluster import DEFAULT_CRD_DIR, DevCluster
from services.devcluster.controllers import SimulationSettings
from services.devcluster.faults import LatencyModel

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "devcluster",
        help="run the development Kubernetes API server stand-in",
        description="Serve a faithful Kubernetes API stand-in on 127.0.0.1 until interrupted.",
    )
    parser.add_argument("--port", type=int, default=6443, help="listen port (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address")
    parser.add_argument(
        "--kubeconfig", type=Path, required=True, help="write a kubeconfig for this cluster here"
    )
    parser.add_argument("--data", type=Path, default=None, help="keep objects in SQLite in DIR")
    parser.add_argument(
        "--crds",
        type=Path,
        action="append",
        default=None,
        help=f"CRD file or directory to install (repeatable; default {DEFAULT_CRD_DIR})",
    )
    parser.add_argument("--nodes", type=int, default=1, help="simulated nodes")
    parser.add_argument(
        "--pod-ready-delay", type=float, default=0.2, help="seconds until a started Pod is Ready"
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    latency = (
        LatencyModel.with_write_ms(args.write_latency_ms, seed=args.seed)
        if args.write_latency_ms is not None
        else LatencyModel(seed=args.seed)
    )
    cluster = DevCluster(
        host=args.host,
        port=args.port,
        crd_dirs=args.crds if args.crds is not None else [DEFAULT_CRD_DIR],
        data_dir=args.data,
        latency=latency,
        seed=args.seed,
        simulation=SimulationSettings(nodes=args.nodes, pod_ready_delay=args.pod_ready_delay),
    )
    return asyncio.run(_serve(cluster, args.kubeconfig))


async def _serve(cluster: DevCluster, kubeconfig: Path) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with cluster:
        cluster.write_kubeconfig(kubeconfig)
        print(f"devcluster serving at {cluster.url}; kubeconfig {kubeconfig}", flush=True)
        await stop.wait()
    return 0
