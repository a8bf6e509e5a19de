"""Patch semantics of the development cluster: merge, JSON, strategic merge and server-side apply.

Every function in this package is pure: it takes plain JSON-shaped dicts and returns a new
object (or, when asked ``in_place``, reuses the caller's), or raises
:class:`~api.patching.errors.PatchError` / :class:`~api.patching.errors.ApplyConflict`, which
the HTTP layer (:mod:`devtools.cluster.http.writes`) turns into a ``metav1.Status``. Keeping the
semantics apart from the handlers lets them be tested case by case.

What each content type means (docs/devcluster.md §2 row 9, apiserver ``handlers/patch.go``),
and where it lives:

- ``application/merge-patch+json`` → :func:`~.json_patches.merge_patch` (RFC 7386) and
  ``application/json-patch+json`` → :func:`~.json_patches.json_patch` (RFC 6902): the two
  patches that need no knowledge of the kind, in :mod:`.json_patches`.
- ``application/strategic-merge-patch+json`` →
  :func:`api.patching.strategic.strategic_merge_patch`, "SMP-lite", shared with the workers
  (:mod:`api.patching`); how each list of a built-in kind merges is the table in
  :mod:`api.patching.lists`, which server-side apply reads too.
- ``application/apply-patch+yaml`` → :func:`~.apply.server_side_apply`, "SSA-lite", in
  :mod:`.apply`. Ownership is recorded in ``metadata.managedFields`` by :mod:`.managed`, whose
  :func:`~.managed.record_update` every non-apply write calls too, as sets of field paths in
  the FieldsV1 notation of :mod:`.fields`.
- :mod:`api.patching.errors` — the two exceptions, and the messages Go's JSON decoder would
  give.
"""
