"""Development tooling: what runs sandbus without a cluster, never deployed with it.

- :mod:`devtools.cluster`: the development cluster, a Kubernetes API server stand-in with a
  simulated kubelet and controllers (``sandbus devcluster``, the embedded default of
  ``sandbus up``).
- :mod:`devtools.natsd`: runs a real ``nats-server`` (or a cluster of three) for ``sandbus up``,
  the tests and the benchmarks.

Nothing here imports the product beyond its contract and vocabulary (:mod:`api`); only the
command line (:mod:`services.cli`) imports this package.
"""
