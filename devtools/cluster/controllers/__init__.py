"""The control loops of the development cluster, in-process or beside it as HTTP clients.

- :mod:`.plug` — how :class:`~devtools.cluster.cluster.DevCluster` starts the controllers that
  run beside it (:class:`~.plug.ControllerContext`, :class:`~.plug.SimulationSettings`).
- :mod:`.lifecycle` — the loops that live inside a real control plane's binaries (CRD
  registration, naming and establishing, namespace deletion): in-process, through the writer.
- :mod:`.kubelet` — the simulated scheduler, kubelet and Job controller (a package of planners
  and one shell); :mod:`.gc` — the garbage collector. Both talk HTTP, like their real
  counterparts, through :mod:`.informer` (client-go's informer, reduced).

Every loop here runs on :class:`api.workqueue.WorkQueue`, the work queue of the services'
reconcilers.
"""
