"""The depth of each warm queue: the pool worker's ``sandbus_warm_queue_depth`` gauge.

A warm queue is the subjects ``sandbus.warm.<ns>.<template-hash>.<pool>.<node>.<sandbox>`` of
the work-queue stream (:func:`~events.subjects.warm_subject`), one entry at most per subject.
Counted the way ``sandbus queue ls`` counts (:mod:`services.cli.history.queues`): the stream's
info with a subject filter gives every subject's count, and a queue's depth is the sum over
its subjects. That includes the entries a claim has taken and not acked yet: they stay stored
until the adoption's writes land, and until then their sandboxes are still the pool's.

Every pool the worker knows has a queue, full or not, so each reports a depth: a pool run dry is
a series at 0, which an alert can see, not a series that vanished. Entries of a pool that is
gone still count, under its name (the pool worker purges them as their members go).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api.keys import name_hash
from api.objects import metadata_of
from events.subjects import SubjectError, parse_warm_subject
from services.domain.agentsandbox.warmpool import template_ref_name

__all__ = ["QueueLabels", "warm_queue_depths"]

QueueLabels = tuple[str, str, str]
"""A queue as the gauge labels it: namespace, template hash, pool ("" for entries no pool
made)."""


def warm_queue_depths(
    subject_counts: Mapping[str, int], pools: Iterable[Mapping[str, Any]]
) -> dict[QueueLabels, int]:
    """The depth of every queue: those with entries (from the warm stream's subject counts)
    and those of ``pools`` (the SandboxWarmPools the worker knows, 0 when empty). A subject
    outside the queues' scheme is not a queue's and is left out (``queue ls`` names it)."""
    depths: dict[QueueLabels, int] = {}
    for pool in pools:
        template = template_ref_name(pool)
        metadata = metadata_of(pool)
        name = str(metadata.get("name") or "")
        if template and name:  # a pool without a template has no queue
            depths[(str(metadata.get("namespace") or ""), name_hash(template), name)] = 0
    for subject, count in subject_counts.items():
        try:
            parsed = parse_warm_subject(subject)
        except SubjectError:
            continue
        key = (parsed.namespace, parsed.template_hash, parsed.pool)
        depths[key] = depths.get(key, 0) + count
    return depths
