"""The plug for controllers that run beside the API server: the kubelet/scheduler and the GC.

Those components are clients of the API, as in a real cluster: they get the server's URL and a
kubeconfig and talk HTTP, so everything they do produces real watch events and real
resourceVersions. A controller is an ``async def run(ctx: ControllerContext) -> None`` that
runs until it is cancelled; :class:`~devtools.cluster.cluster.DevCluster` starts one task
per controller after the server is listening and cancels them on stop.

:data:`BUILTIN_CONTROLLERS` names the built-in ones as ``"module:function"``; a module that does
not exist (yet) is skipped with a log line, so the server runs without them.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devtools.cluster.controllers.informer import SharedInformers
    from devtools.cluster.storage.store import Store

__all__ = [
    "BUILTIN_CONTROLLERS",
    "ControllerContext",
    "ControllerFactory",
    "SimulationSettings",
    "resolve_controllers",
]

log = logging.getLogger(__name__)


@dataclass
class SimulationSettings:
    """Knobs of the simulated node components (``sandbus devcluster --nodes/--pod-ready-delay``).

    ``options`` carries anything further a controller wants to read, keyed by its own names.
    """

    nodes: int = 1
    pod_ready_delay: float = 0.2
    kubelet: bool = True
    garbage_collector: bool = True
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ControllerContext:
    url: str
    kubeconfig: Path
    settings: SimulationSettings
    seed: int
    store: Store  # for in-process diagnostics only: controllers act through the HTTP API
    # Watches the controllers share (the Pods, read by the kubelet and the garbage collector);
    # None: each watches on its own.
    informers: SharedInformers | None = None


ControllerFactory = Callable[[ControllerContext], Awaitable[None]]

# Filled by the kubelet and garbage-collector implementations (helper D).
BUILTIN_CONTROLLERS: tuple[tuple[str, str], ...] = (
    ("kubelet", "devtools.cluster.controllers.kubelet.shell:run"),
    ("garbage_collector", "devtools.cluster.controllers.gc:run"),
)


def resolve_controllers(
    settings: SimulationSettings, entries: Sequence[tuple[str, str]] = BUILTIN_CONTROLLERS
) -> list[ControllerFactory]:
    """The built-in controllers that are enabled in ``settings`` and importable."""
    out: list[ControllerFactory] = []
    for switch, spec in entries:
        if not getattr(settings, switch, True):
            continue
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            log.info("controller %s not available; skipping", spec)
            continue
        factory = getattr(module, attr, None)
        if factory is None:
            log.warning("controller %s has no %s(); skipping", module_name, attr)
            continue
        out.append(factory)
    return out
