"""The watcher: the only part of sandbus that watches Kubernetes, and the spine of the bus.

It lists and watches the seven kinds of sandbus, the Pods, Services, PVCs and Jobs that carry
our labels (one label-selector watch per key: the API server filters, so unrelated objects are
never read) and the NetworkPolicies our templates control, and publishes every change to the
event log as a CloudEvent with a deterministic id, once: one ordered stream per object, however
many watches saw it, from which the server derives the state table (the latest event per
object). After a restart, a 410 or a leader handover it relists and publishes only what really
changed, plus a synthetic deletion for every object that vanished in the gap.

Functional core: :mod:`.core.diffing` (what to publish), :mod:`.core.merging` (several watches
of one resource, one stream per object), :mod:`.core.recovery` (what was published); also
without I/O, outside :mod:`.core`: :mod:`.tracing`, :mod:`.resources`. Imperative shell:
:mod:`.streams`, :mod:`.publisher`, :mod:`.tombstones`, :mod:`.watching`, :mod:`.service`
(``serve``, what ``sandbus run watcher`` runs) and :mod:`.config`. From the shared runtime it
takes the Kubernetes client (:mod:`services.runtime.kube`), the leader election
(:mod:`services.runtime.election`), the bounded stream read (:mod:`services.runtime.streams`)
and how every task it starts is stopped on the way out (:mod:`services.runtime.cancellation`).
"""
