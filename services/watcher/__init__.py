"""The watcher: the only part of sandbus that watches Kubernetes, and the spine of the bus.

It lists and watches the seven kinds of sandbus, and the Pods, Services, PVCs and Jobs that
carry our labels and the NetworkPolicies our templates control, and publishes every change to
the event log as a CloudEvent with a deterministic id, then the latest state per object to the
state table. After a restart, a 410
or a leader handover it relists and publishes only what really changed, plus a synthetic
deletion for every object that vanished in the gap.

Functional core: :mod:`.diffing` (what to publish), :mod:`.recovery` (what was published),
:mod:`.lease` (leader election decisions), :mod:`.tracing`, :mod:`.resources`.
Imperative shell: :mod:`.kubeapi`, :mod:`.streams`, :mod:`.publisher`, :mod:`.watching`,
:mod:`.election`, :mod:`.service` (``serve``, what ``sandbus run watcher`` runs), :mod:`.config`,
and :mod:`.cancellation` (how every task the watcher starts is stopped on the way out).
"""
