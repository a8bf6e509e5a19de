"""The development cluster: a faithful Kubernetes API server stand-in (``sandbus devcluster``).

Layout, top down (the command itself is :mod:`services.cli.devcluster`):

- :mod:`.cluster` — :class:`DevCluster`, the entry point, in-process for tests or as a service:
  it opens the store, builds the resource table, serves HTTP and starts the controllers.
- :mod:`.http` — the API server as clients see it: :mod:`.http.server` (routes, Status
  responses), the verbs (:mod:`.http.reads`, :mod:`.http.writes`, :mod:`.http.watch`), the
  representations (:mod:`.http.wire`, :mod:`.http.protobuf`, :mod:`.http.tables`),
  :mod:`.http.discovery` and :mod:`.http.openapi_docs`, ``pods/exec`` (:mod:`.http.podexec`),
  latency and faults (:mod:`.http.faults`, served by :mod:`.http.admin`), and
  :mod:`.http.kubeconfig`.
- :mod:`.apirules` — what the server enforces about objects, as pure functions: the resource
  table (:mod:`.apirules.resources`, :mod:`.apirules.builtins`, :mod:`.apirules.crds`), per-kind
  write rules (:mod:`.apirules.strategy`, :mod:`.apirules.pods`, :mod:`.apirules.structural`),
  ObjectMeta, selectors, deletion, scale, patches (:mod:`.apirules.patching`) and the Status
  error bodies (:mod:`.apirules.errors`).
- :mod:`.storage` — :mod:`.storage.store` (objects, the global resourceVersion, the history),
  :mod:`.storage.persistence` (SQLite) and :mod:`.storage.jsontree` (copies for the write path).
- :mod:`.controllers` — the control loops: in-process ones (:mod:`.controllers.lifecycle`: CRDs,
  namespaces) and those that talk HTTP beside the server, started through
  :mod:`.controllers.plug`: the simulated scheduler/kubelet/Job controller
  (:mod:`.controllers.kubelet`) and the garbage collector (:mod:`.controllers.gc`), both on
  :mod:`.controllers.informer`.

How they depend on each other: :mod:`.cluster` assembles the rest; :mod:`.http` and
:mod:`.controllers` use :mod:`.apirules` and :mod:`.storage`; :mod:`.apirules` uses only
:mod:`.storage.jsontree`; :mod:`.storage` uses none. Two imports cross between :mod:`.http` and
:mod:`.controllers`: the in-process loops of :mod:`.controllers.lifecycle` write through
:mod:`.http.writes`, and ``pods/exec`` (:mod:`.http.podexec`) writes the container statuses of
:mod:`.controllers.kubelet.statuses`, as the kubelet would.

The names below load on first use (PEP 562): importing any module of the package runs this file
first, and a light one (the command line's :mod:`.controllers.plug`, a planner in a unit test)
must not pull in the server and aiohttp with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devtools.cluster.cluster import DevCluster
    from devtools.cluster.controllers.plug import ControllerContext, SimulationSettings
    from devtools.cluster.http.faults import FaultRule, LatencyModel
    from devtools.cluster.http.watch import WatchSettings

__all__ = [
    "ControllerContext",
    "DevCluster",
    "FaultRule",
    "LatencyModel",
    "SimulationSettings",
    "WatchSettings",
]

_HOMES = {
    "ControllerContext": "devtools.cluster.controllers.plug",
    "DevCluster": "devtools.cluster.cluster",
    "FaultRule": "devtools.cluster.http.faults",
    "LatencyModel": "devtools.cluster.http.faults",
    "SimulationSettings": "devtools.cluster.controllers.plug",
    "WatchSettings": "devtools.cluster.http.watch",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
