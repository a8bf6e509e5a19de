"""The development cluster: a faithful Kubernetes API server stand-in (``sandbus devcluster``).

Module map (spec/kube-standin.md §4.2):

- :mod:`.cluster` — :class:`DevCluster`, the in-process entry point; :mod:`.cli` the command.
- :mod:`.server` — URL grammar, verbs, options, Status errors; :mod:`.discovery`, :mod:`.admin`.
- :mod:`.podexec` — ``pods/exec`` over WebSocket, with a simulated container runtime.
- :mod:`.reads`, :mod:`.writes`, :mod:`.watch` — the verbs.
- :mod:`.store` (+ :mod:`.persistence`) — objects, the global resourceVersion, the history.
- :mod:`.resources`, :mod:`.builtins`, :mod:`.crds` — what is served; :mod:`.strategy`,
  :mod:`.pods`, :mod:`.meta`, :mod:`.scale` — the per-kind rules; :mod:`.errors` — Status bodies.
- :mod:`.lifecycle` — the in-process control loops (CRDs, namespaces); :mod:`.controllers` —
  the plug for the kubelet and garbage collector, which talk HTTP.
- :mod:`.faults` — latency model and fault injection.

The names below load on first use (PEP 562): ``sandbus --help`` imports :mod:`.cli`, and with
it this package, which must not pull in the server and aiohttp just to build a parser.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.devcluster.cluster import DevCluster
    from services.devcluster.controllers import ControllerContext, SimulationSettings
    from services.devcluster.faults import FaultRule, LatencyModel
    from services.devcluster.watch import WatchSettings

__all__ = [
    "ControllerContext",
    "DevCluster",
    "FaultRule",
    "LatencyModel",
    "SimulationSettings",
    "WatchSettings",
]

_HOMES = {
    "ControllerContext": "services.devcluster.controllers",
    "DevCluster": "services.devcluster.cluster",
    "FaultRule": "services.devcluster.faults",
    "LatencyModel": "services.devcluster.faults",
    "SimulationSettings": "services.devcluster.controllers",
    "WatchSettings": "services.devcluster.watch",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
