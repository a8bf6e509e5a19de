"""The warm queues: one per namespace, template and pool, each entry a sandbox offered to claims.

The pool worker puts each adoptable member on its pool's queue (:class:`Enqueue`) and takes it
off when it stops being adoptable (:class:`Purge`); the claim worker takes one entry for a claim
(:class:`Take`) and, once its pool is gone, drops the queue's consumers (:class:`DropQueue`).
These are the planners' action kinds; their executors, which talk to the warm stream, are the
runtime's (``services/runtime/reconcile/warm.py``).

A queue is divided by node: each node's part has one durable consumer, shared by every claim
worker replica (:func:`consumer_name`, :func:`queue_filter`), so an entry goes to exactly one of
them, and a claim takes from the node with the most entries left first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

from events.envelope import ObjectKey
from events.subjects import (
    SubjectError,
    parse_warm_subject,
    warm_consumer_name,
    warm_queue_filter,
)
from events.types import WarmQueued

__all__ = [
    "WARM_SOURCE",
    "DropQueue",
    "Enqueue",
    "Purge",
    "Take",
    "WarmQueue",
    "consumer_name",
    "consumer_prefix",
    "nodes_by_depth",
    "queue_filter",
]

WARM_SOURCE = "warm"
"""The source name of taken warm entries, as ``Ack`` and ``Release`` name them."""


@dataclass(frozen=True)
class WarmQueue:
    """One warm queue: a namespace's entries of one template, made by one pool."""

    namespace: str
    template_hash: str
    pool: str


@dataclass(frozen=True)
class Take:
    """Take an entry of ``queue`` for ``target`` (a claim): the oldest on the node with the
    most entries left (upstream's node-spread). A queue found empty lets the plan go on: the
    actions after a take say what to do without one; an entry taken ends the plan, so the claim
    is planned again at once with it."""

    queue: WarmQueue
    target: ObjectKey
    why: str = ""
    step: str = ""
    verb = "take"


@dataclass(frozen=True)
class DropQueue:
    """Remove ``queue``'s durable consumers (its pool is gone; the entries go with the members)."""

    queue: WarmQueue
    target: ObjectKey
    why: str = ""
    step: str = ""
    verb = "drop queue"


@dataclass(frozen=True)
class Enqueue:
    """Queue ``entry``; ``target`` is the sandbox it offers. An entry already queued is not a
    failure (the warm stream holds one per sandbox)."""

    entry: WarmQueued
    why: str = ""
    step: str = ""
    verb = "enqueue"

    @property
    def target(self) -> ObjectKey:
        return ObjectKey(self.entry.kind, self.entry.namespace or "", self.entry.name)


@dataclass(frozen=True)
class Purge:
    """Remove the warm stream's messages under ``subject`` (a wildcard filter: a queue)."""

    subject: str
    target: ObjectKey
    why: str = ""
    step: str = ""
    verb = "purge"


def consumer_name(queue: WarmQueue, node: str) -> str:
    """The durable consumer of ``node``'s part of ``queue`` ("": the part without a node)."""
    return warm_consumer_name(queue.namespace, queue.template_hash, queue.pool, node)


def consumer_prefix(queue: WarmQueue) -> str:
    """What the names of ``queue``'s consumers start with, whatever the node."""
    return consumer_name(queue, "").rsplit(":", 1)[0] + ":"


def queue_filter(queue: WarmQueue, node: str | None = None) -> str:
    """The subjects of ``queue`` (of ``node``'s part of it, when given)."""
    return warm_queue_filter(queue.namespace, queue.template_hash, queue.pool, node)


def nodes_by_depth(subjects: Mapping[str, int]) -> list[str]:
    """The nodes whose parts of a queue hold entries, most first, from the stream's count of
    messages per subject (subjects that are no queue entry's are left out)."""
    counts: dict[str, int] = {}
    for subject, count in subjects.items():
        with contextlib.suppress(SubjectError):
            node = parse_warm_subject(subject).node
            counts[node] = counts.get(node, 0) + count
    return sorted(counts, key=lambda node: (-counts[node], node))
