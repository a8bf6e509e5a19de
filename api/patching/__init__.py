"""Patch semantics that the development cluster serves and the workers apply themselves: JSON
merge patch (:mod:`.merge`), strategic merge patch of the built-in kinds (:mod:`.strategic`,
with the list table of :mod:`.lists`) and the errors a patch that cannot be applied raises
(:mod:`.errors`).

They live here, beside the API types, because both sides need them: the development cluster
answers ``application/strategic-merge-patch+json`` with them, and the claim worker builds a
BatchSandbox's Pods with them (OpenSandbox's ``shardPatches`` are strategic merge patches of
the Pod, applied before the create).
"""
