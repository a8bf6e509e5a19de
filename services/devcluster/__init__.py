"""The development cluster: a faithful Kubernetes API server stand-in (``sandbus devcluster``).

Module map (spec/kube-standin.md §4.2):

- :mod:`.cluster` — :class:`DevCluster`, the in-process entry point; :mod:`.cli` the command.
- :mod:`.server` — URL grammar, verbs, options, Status errors; :mod:`.discovery`, :mod:`.admin`.
- :mod:`.reads`, :mod:`.writes`, :mod:`.watch` — the verbs.
- :mod:`.store` (+ :mod:`.persistence`) — objects, the global resourceVersion, the history.
- :mod:`.resources`, :mod:`.builtins`, :mod:`.crds` — what is served; :mod:`.strategy`,
  :mod:`.pods`, :mod:`.meta`, :mod:`.scale` — the per-kind rules; :mod:`.errors` — Status bodies.
- :mod:`.lifecycle` — the in-process control loops (CRDs, namespaces); :mod:`.controllers` —
  the plug for the kubelet and garbage collector, which talk HTTP.
- :mod:`.faults` — latency model and fault injection.
"""

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
