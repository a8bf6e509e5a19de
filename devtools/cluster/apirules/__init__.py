"""What the API server enforces about objects, whatever the transport: the registry's rules.

- :mod:`.resources` — the resource table (:class:`~.resources.Registry`, one
  :class:`~.resources.ResourceType` per served group/version/resource);
  :mod:`.builtins` and :mod:`.crds` fill it, the built-in kinds and the custom ones.
- :mod:`.strategy` — per-kind write rules (defaults, what an update may change, generation);
  :mod:`.pods` holds the Pod's, :mod:`.structural` the structural schemas of custom resources
  (defaulting, pruning, validation), :mod:`.celrules` their CEL validation rules.
- :mod:`.meta` — ObjectMeta rules shared by every kind; :mod:`.selectors` — label and field
  selectors; :mod:`.deletion` — what a DELETE does (graceful deletion, finalizers, propagation);
  :mod:`.scale` — the ``/scale`` subresource.
- :mod:`.patching` — merge, JSON, strategic merge patches and server-side apply.
- :mod:`.errors` — ``metav1.Status`` error bodies, as apimachinery builds them.

Nothing here does I/O: functions and data over plain JSON dicts, which the HTTP layer
(:mod:`devtools.cluster.http`) calls with what it read from the store
(:mod:`devtools.cluster.storage`).
"""
