"""The NATS subject scheme of the bus: which subject every message lives on, and how to filter.

Every subject starts with ``sandbus`` and then names its channel; the tokens after that carry
the identity of the object the message is about, so a subscriber filters with NATS wildcards
instead of decoding every message::

    sandbus.events.<kind>.<namespace>.<name>             observed changes (the event log)
    sandbus.decisions.<worker>.<kind>.<namespace>.<name> worker decisions (also the event log)
    sandbus.state.<kind>.<namespace>.<name>              latest event per object (the state table,
                                                         copied by the server from the event log)
    sandbus.warm.<namespace>.<template-hash>.<pool>.<node>.<sandbox>  warm-queue entries
    sandbus.memo.<worker>.<kind>.<namespace>.<name>      a worker's memory of one key
    sandbus.memo.<worker>.replica.<identity>             a live replica's heartbeat
    sandbus.dlq.<original subject without "sandbus.">    dead letters

``<kind>`` is the Kubernetes kind in lower case (``sandbox``, ``sandboxwarmpool``, ``pod``), so
``sandbus.events.sandbox.>`` reads the way people type it; the exact kind travels in the
event's ``kind`` attribute.

Token encoding. A NATS token may not contain ``.``, ``*``, ``>`` or whitespace and may not be
empty, but Kubernetes names may contain dots. Every token therefore goes through
:func:`encode_token`, which keeps ``A-Z a-z 0-9 -`` as they are, writes ``.`` as ``_`` (so
``my.app`` becomes ``my_app`` and stays readable), and writes every other byte of the UTF-8
text (``_`` and ``=`` included, which is what makes it reversible) as ``=XX`` in upper-case
hex. The empty string (a cluster-scoped object's namespace) is the token ``=``. The output
alphabet ``[A-Za-z0-9_=-]`` is also valid in JetStream KV keys and consumer names, so the same
tokens can serve there.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "DEAD_LETTER_SUBJECTS",
    "EMPTY_TOKEN",
    "EVENT_LOG_SUBJECTS",
    "MEMO_SUBJECTS",
    "OBSERVED_SUBJECTS",
    "ROOT",
    "STATE_SUBJECTS",
    "WARM_SUBJECTS",
    "DecisionSubject",
    "ObjectSubject",
    "SubjectError",
    "WarmSubject",
    "dead_letter_filter",
    "dead_letter_subject",
    "decision_filter",
    "decision_subject",
    "decode_token",
    "encode_token",
    "event_filter",
    "event_subject",
    "kind_token",
    "memo_filter",
    "memo_subject",
    "parse_decision_subject",
    "parse_event_subject",
    "parse_state_subject",
    "parse_warm_subject",
    "replica_filter",
    "replica_subject",
    "state_filter",
    "state_subject",
    "warm_consumer_name",
    "warm_queue_filter",
    "warm_subject",
]

ROOT = "sandbus"
EVENTS = f"{ROOT}.events"
DECISIONS = f"{ROOT}.decisions"
STATE = f"{ROOT}.state"
WARM = f"{ROOT}.warm"
DLQ = f"{ROOT}.dlq"
MEMO = f"{ROOT}.memo"

OBSERVED_SUBJECTS: tuple[str, ...] = (f"{EVENTS}.>",)
"""The watcher's part of the event log: observed changes (the state table is derived from it)."""
EVENT_LOG_SUBJECTS: tuple[str, ...] = (*OBSERVED_SUBJECTS, f"{DECISIONS}.>")
"""What the event-log stream stores: observed changes and decisions, in one order."""
STATE_SUBJECTS: tuple[str, ...] = (f"{STATE}.>",)
WARM_SUBJECTS: tuple[str, ...] = (f"{WARM}.>",)
DEAD_LETTER_SUBJECTS: tuple[str, ...] = (f"{DLQ}.>",)
MEMO_SUBJECTS: tuple[str, ...] = (f"{MEMO}.>",)

EMPTY_TOKEN = "="
_WILDCARD = "*"
_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_DOT = ord(".")
_PLAIN_OR_DOTS = re.compile(r"[A-Za-z0-9.-]+")
_ESCAPE = re.compile(r"=([0-9A-F]{2})")
_ENCODED_TOKEN = re.compile(r"(?:[A-Za-z0-9_-]|=[0-9A-F]{2})+")


class SubjectError(ValueError):
    """A subject or token that does not follow the scheme."""


def encode_token(text: str) -> str:
    """Encode any text as one NATS subject token; :func:`decode_token` reverses it."""
    if not text:
        return EMPTY_TOKEN
    if _PLAIN_OR_DOTS.fullmatch(text):
        # Kubernetes names (DNS labels and subdomains) are all of this: every subject a worker
        # reads or writes encodes some, so they skip the byte loop below.
        return text.replace(".", "_")
    out: list[str] = []
    for byte in text.encode("utf-8"):
        if byte in _PLAIN:
            out.append(chr(byte))
        elif byte == _DOT:
            out.append("_")
        else:
            out.append(f"={byte:02X}")
    return "".join(out)


def decode_token(token: str) -> str:
    """The text that :func:`encode_token` turned into ``token``."""
    if token == EMPTY_TOKEN:
        return ""
    if not _ENCODED_TOKEN.fullmatch(token):
        raise SubjectError(f"not an encoded subject token: {token!r}")
    raw = token.replace("_", "=2E").encode("ascii")
    decoded = _ESCAPE.sub(lambda match: chr(int(match.group(1), 16)), raw.decode("ascii"))
    try:
        text = decoded.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError as error:
        raise SubjectError(f"token {token!r} does not decode to UTF-8 text") from error
    # One name, one subject: a spelling such as "=41" for "A" would let two subjects name the
    # same object, so only the canonical spelling is accepted.
    if encode_token(text) != token:
        raise SubjectError(f"token {token!r} is not canonically encoded")
    return text


def kind_token(kind: str) -> str:
    """The token for a Kubernetes kind: lower case, so filters read as people type them."""
    if not kind:
        raise SubjectError("a kind is required")
    return encode_token(kind.lower())


def _name_token(name: str) -> str:
    if not name:
        raise SubjectError("a name is required")
    return encode_token(name)


def _namespace_token(namespace: str | None) -> str:
    return encode_token(namespace or "")


def _optional(token: str | None) -> str:
    return _WILDCARD if token is None else token


# --- observed changes, the state table and decisions -------------------------------------


class ObjectSubject(NamedTuple):
    """The identity a per-object subject carries; ``kind`` is the lower-case kind token."""

    kind: str
    namespace: str
    name: str


class DecisionSubject(NamedTuple):
    worker: str
    kind: str
    namespace: str
    name: str


def event_subject(kind: str, namespace: str | None, name: str) -> str:
    """Where the watcher publishes a change of one object."""
    return f"{EVENTS}.{kind_token(kind)}.{_namespace_token(namespace)}.{_name_token(name)}"


def state_subject(kind: str, namespace: str | None, name: str) -> str:
    """Where the state table keeps the latest event of one object."""
    return f"{STATE}.{kind_token(kind)}.{_namespace_token(namespace)}.{_name_token(name)}"


def decision_subject(worker: str, kind: str, namespace: str | None, name: str) -> str:
    """Where a worker records a decision about one object."""
    if not worker:
        raise SubjectError("a worker is required")
    return (
        f"{DECISIONS}.{encode_token(worker)}.{kind_token(kind)}."
        f"{_namespace_token(namespace)}.{_name_token(name)}"
    )


def memo_subject(worker: str, kind: str, namespace: str | None, name: str) -> str:
    """Where a worker keeps what it remembers of one key (its memo and expectations)."""
    if not worker:
        raise SubjectError("a worker is required")
    return (
        f"{MEMO}.{encode_token(worker)}.{kind_token(kind)}."
        f"{_namespace_token(namespace)}.{_name_token(name)}"
    )


def replica_subject(worker: str, identity: str) -> str:
    """Where a replica of an active-active worker says it is alive (a heartbeat with a TTL):
    one token shorter than every memo subject, so the two never mix."""
    if not worker or not identity:
        raise SubjectError("a worker and an identity are required")
    return f"{MEMO}.{encode_token(worker)}.{_REPLICA}.{encode_token(identity)}"


def replica_filter(worker: str) -> str:
    """Every live replica of a worker."""
    return f"{MEMO}.{encode_token(worker)}.{_REPLICA}.*"


_REPLICA = "replica"


def memo_filter(worker: str) -> str:
    """Every key a worker remembers something of."""
    return f"{MEMO}.{encode_token(worker)}.>"


def _object_filter(channel: str, kind: str | None, namespace: str | None, name: str | None) -> str:
    return ".".join(
        (
            channel,
            _optional(None if kind is None else kind_token(kind)),
            _optional(None if namespace is None else encode_token(namespace)),
            _optional(None if name is None else _name_token(name)),
        )
    )


def event_filter(
    kind: str | None = None, namespace: str | None = None, name: str | None = None
) -> str:
    """A subscription filter for observed changes; ``None`` matches any value of that token.

    ``namespace=""`` selects cluster-scoped objects, ``namespace=None`` every namespace.
    """
    return _object_filter(EVENTS, kind, namespace, name)


def state_filter(
    kind: str | None = None, namespace: str | None = None, name: str | None = None
) -> str:
    """A filter over the state table, with the same rules as :func:`event_filter`."""
    return _object_filter(STATE, kind, namespace, name)


def decision_filter(
    worker: str | None = None,
    kind: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
) -> str:
    """A filter over recorded decisions; ``None`` matches any value of that token."""
    worker_part = _optional(None if worker is None else encode_token(worker))
    return _object_filter(f"{DECISIONS}.{worker_part}", kind, namespace, name)


def _split(subject: str, prefix: str, count: int) -> list[str]:
    if not subject.startswith(prefix + "."):
        raise SubjectError(f"{subject!r} is not under {prefix}")
    tokens = subject[len(prefix) + 1 :].split(".")
    if len(tokens) != count:
        raise SubjectError(f"{subject!r} needs {count} tokens after {prefix}, has {len(tokens)}")
    return tokens


def _parse_object(subject: str, prefix: str) -> ObjectSubject:
    kind, namespace, name = _split(subject, prefix, 3)
    return ObjectSubject(decode_token(kind), decode_token(namespace), decode_token(name))


def parse_event_subject(subject: str) -> ObjectSubject:
    return _parse_object(subject, EVENTS)


def parse_state_subject(subject: str) -> ObjectSubject:
    return _parse_object(subject, STATE)


def parse_decision_subject(subject: str) -> DecisionSubject:
    worker, kind, namespace, name = _split(subject, DECISIONS, 4)
    return DecisionSubject(
        decode_token(worker), decode_token(kind), decode_token(namespace), decode_token(name)
    )


# --- warm queues -------------------------------------------------------------------------


class WarmSubject(NamedTuple):
    namespace: str
    template_hash: str
    pool: str
    node: str
    sandbox: str


def warm_subject(namespace: str, template_hash: str, pool: str, node: str, sandbox: str) -> str:
    """The queue entry of one adoptable sandbox; the warm stream holds at most one per subject.

    A template's queue is partitioned by the warm pool that made the sandbox (``pool`` empty:
    none), because a claim names the pool it adopts from (v1beta1 ``warmPoolRef``), and within
    a pool by the node the sandbox runs on (``node`` empty: not known), so that a claim can
    take from the node with the most sandboxes left (upstream's node-spread)."""
    if not template_hash:
        raise SubjectError("a template hash is required")
    return (
        f"{WARM}.{_namespace_token(namespace)}.{encode_token(template_hash)}."
        f"{_namespace_token(pool)}.{encode_token(node)}.{_name_token(sandbox)}"
    )


def warm_queue_filter(
    namespace: str, template_hash: str, pool: str | None = None, node: str | None = None
) -> str:
    """The filter of one node's part of a warm queue (namespace + template + pool + node):
    what its one consumer reads; with ``node=None``, the whole queue of the pool; with
    ``pool=None`` too, every pool's queue of the template (to purge them all).

    A work-queue stream allows one consumer per subject and no overlapping filters, so each
    node's part of a queue has exactly this filter and exactly one durable,
    :func:`warm_consumer_name`.
    """
    if not template_hash:
        raise SubjectError("a template hash is required")
    prefix = f"{WARM}.{_namespace_token(namespace)}.{encode_token(template_hash)}"
    if pool is None:
        return f"{prefix}.>"
    if node is None:
        return f"{prefix}.{_namespace_token(pool)}.>"
    return f"{prefix}.{_namespace_token(pool)}.{encode_token(node)}.{_WILDCARD}"


def warm_consumer_name(namespace: str, template_hash: str, pool: str, node: str) -> str:
    """The durable consumer of one node's part of a warm queue, shared by every claim-worker
    replica.

    Consumer names may not contain ``.``; encoded tokens never contain ``:``, so joining them
    with ``:`` keeps the name unique and readable.
    """
    if not template_hash:
        raise SubjectError("a template hash is required")
    return (
        f"warm:{_namespace_token(namespace)}:{encode_token(template_hash)}:"
        f"{_namespace_token(pool)}:{encode_token(node)}"
    )


def parse_warm_subject(subject: str) -> WarmSubject:
    namespace, template_hash, pool, node, sandbox = _split(subject, WARM, 5)
    return WarmSubject(
        decode_token(namespace),
        decode_token(template_hash),
        decode_token(pool),
        decode_token(node),
        decode_token(sandbox),
    )


# --- dead letters ------------------------------------------------------------------------


def dead_letter_subject(original_subject: str) -> str:
    """Where a message that could not be processed goes, keeping its identity tokens.

    ``sandbus.events.sandbox.default.x`` becomes ``sandbus.dlq.events.sandbox.default.x``, so
    ``sandbus.dlq.events.>`` selects the dead events. The exact original subject also travels
    in a header (see :mod:`events.headers`), which is what to trust for subjects from outside
    ``sandbus.``.
    """
    if not original_subject:
        raise SubjectError("the original subject is required")
    rest = original_subject.removeprefix(ROOT + ".")
    return f"{DLQ}.{rest}"


def dead_letter_filter() -> str:
    return DEAD_LETTER_SUBJECTS[0]
