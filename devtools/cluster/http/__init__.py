"""The HTTP side of the API server: routes, verbs, representations, and what clients reach.

- :mod:`.server` — :class:`~.server.ApiServer`, the aiohttp application: URL grammar, verbs,
  options, Status responses.
- :mod:`.reads`, :mod:`.writes`, :mod:`.watch` — GET/LIST, the write pipeline (create, update,
  patch, delete), WATCH.
- :mod:`.wire` — JSON encoding, stored objects served without decoding; :mod:`.protobuf` — the
  protobuf bodies kubectl's typed clients send; :mod:`.tables` — the Table and
  PartialObjectMetadata representations (``kubectl get``).
- :mod:`.discovery`, :mod:`.openapi_docs` — the documents that describe what is served.
- :mod:`.podexec` — ``pods/exec`` over WebSocket, with a simulated container runtime.
- :mod:`.faults` — latency model and fault injection; :mod:`.admin` — the ``/_devcluster/``
  endpoints that control them from another process.
- :mod:`.kubeconfig` — the kubeconfig clients use to reach the server.
"""
