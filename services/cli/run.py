"""``sandbus run SERVICE``: the registry of the deployed services, and the command that runs one.

Services register by name as ``"module:function"`` strings, so that ``sandbus run watcher``
imports only the watcher's code. The command line is the one place that knows which services
exist; the runtime (:mod:`services.runtime.runner`) runs whichever it is handed.
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING, Any, cast

from services.runtime.runner import Serve, run_service
from services.runtime.settings import Settings, add_connection_args

if TYPE_CHECKING:
    from services.runtime.worker_api import WorkerDefinition

__all__ = ["SERVICES", "WORKERS", "load_service", "load_worker", "register"]

SERVICES: dict[str, str] = {
    "watcher": "services.watcher.service:serve",
    "sandbox": "services.sandbox.service:serve",
    "pool": "services.pool.service:serve",
    "claim": "services.claim.service:serve",
    "snapshot": "services.snapshot.service:serve",
}
"""Service name → ``"module:function"`` of its ``serve(settings)``."""

WORKERS: dict[str, str] = {
    "sandbox": "services.sandbox.service:definition",
    "pool": "services.pool.service:definition",
    "claim": "services.claim.service:definition",
    "snapshot": "services.snapshot.service:definition",
}
"""Worker name → ``"module:function"`` returning its ``WorkerDefinition`` as the service
configures it from the environment (what ``sandbus explain --rerun`` re-runs decisions with)."""


def _load(registry: dict[str, str], what: str, name: str) -> Any:
    try:
        target = registry[name]
    except KeyError:
        known = ", ".join(sorted(registry)) or "none yet"
        raise LookupError(f"unknown {what} {name!r} (known: {known})") from None
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def load_service(name: str) -> Serve:
    return cast(Serve, _load(SERVICES, "service", name))


def load_worker(name: str) -> WorkerDefinition:
    """The definition of worker ``name``, configured from the environment."""
    return cast("WorkerDefinition", _load(WORKERS, "worker", name)())


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one service as its own process (what each Deployment runs)",
        description="Run one service until SIGTERM or Ctrl-C; exit 0 on a clean stop.",
    )
    parser.add_argument("service", choices=sorted(SERVICES), help="the service to run")
    add_connection_args(parser)
    parser.set_defaults(
        func=lambda args: run_service(load_service(args.service), Settings.from_args(args))
    )
