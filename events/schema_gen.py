"""Generate ``schemas/``: a JSON Schema per event type and an AsyncAPI 3.0 document.

The msgspec Structs in :mod:`events.types` are the single source of truth; this module turns
them into documents that a subscriber in any language can use without our code:

- ``<type>.json`` (e.g. ``io.sandbus.object.added.v1.json``): a self-contained JSON Schema
  (draft 2020-12) of the whole CloudEvent of that type. Pick the file by the event's ``type``
  attribute and validate the payload with it.
- ``asyncapi.yaml``: the channels (subject patterns), which messages each carries, their
  headers, and which streams keep them; message payloads refer to the files above.
- ``README.md``: the index.

:func:`render_schemas` is pure (it returns file name → text) so a test can compare it with
the checked-in directory; writing the files is the caller's job (``sandbus generate schemas``).
Output is deterministic: keys keep the order msgspec gives them, and nothing depends on time.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec
import yaml

from events.envelope import event_type_of
from events.headers import (
    CLOUDEVENTS_JSON,
    CONTENT_TYPE,
    DLQ_REASON,
    DLQ_REJECTED_BY,
    DLQ_SEQUENCE,
    DLQ_STREAM,
    DLQ_SUBJECT,
    MSG_ID,
    TRACEPARENT,
    TRACESTATE,
)
from events.types import (
    DecisionMade,
    Event,
    ObjectAdded,
    ObjectDeleted,
    ObjectModified,
    WarmQueued,
)

__all__ = ["ASYNCAPI_FILE", "JSON_SCHEMA_DIALECT", "event_schema", "render_schemas"]

JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
ASYNCAPI_FILE: Final = "asyncapi.yaml"
_SCHEMA_FORMAT: Final = "application/schema+json;version=draft-2020-12"

# CloudEvents makes these REQUIRED; our Structs give them defaults only so that Python code
# need not repeat them, and the encoder always writes them, so the schema may demand them.
_ALWAYS_ENCODED: Final = ("specversion",)


def schema_file(cls: type[Event]) -> str:
    return f"{event_type_of(cls)}.json"


def event_schema(cls: type[Event]) -> dict[str, Any]:
    """The standalone JSON Schema of one event class, its definition at the root."""
    generated = msgspec.json.schema(cls)
    definitions: dict[str, Any] = dict(generated["$defs"])
    root_name = generated["$ref"].rsplit("/", 1)[1]
    root = dict(definitions.pop(root_name))
    required = list(root.get("required", []))
    for attribute in _ALWAYS_ENCODED:
        if attribute not in required:
            required.insert(0, attribute)
    root["required"] = required
    schema: dict[str, Any] = {
        "$schema": JSON_SCHEMA_DIALECT,
        "$comment": "Generated from events.types by `sandbus generate schemas`; do not edit.",
        **root,
    }
    if definitions:
        schema["$defs"] = definitions
    return schema


# --- AsyncAPI ----------------------------------------------------------------------------

_PARAMETERS: Final[dict[str, str]] = {
    "kind": "The Kubernetes kind in lower case, e.g. sandbox, pod.",
    "namespace": "The namespace, token-encoded; `=` for a cluster-scoped object.",
    "name": (
        "The object name, token-encoded: `.` is written `_`, and every character other than "
        "A-Z a-z 0-9 - as =XX per UTF-8 byte (so `my.app` is `my_app`)."
    ),
    "worker": "The worker that decided: sandbox, pool, claim or snapshot.",
    "templateHash": "The template's name hash, token-encoded.",
    "pool": "The warm pool that made the sandbox, token-encoded (`=`: none).",
    "node": "The node the sandbox runs on, token-encoded (`=`: not known).",
    "sandbox": "The sandbox (or pooled Pod) name, token-encoded like `name`.",
    "origin": "The original subject without its leading `sandbus.` (several tokens).",
}
_OBJECT_PARAMETERS: Final = ("kind", "namespace", "name")


_MESSAGES: Final[dict[str, tuple[type[Event], str]]] = {
    "objectAdded": (ObjectAdded, "An object appeared."),
    "objectModified": (ObjectModified, "An object has a new resourceVersion."),
    "objectDeleted": (ObjectDeleted, "An object is gone (synthetic when found by a relist)."),
    "decisionMade": (DecisionMade, "A worker reconciled one object."),
    "warmQueued": (WarmQueued, "An adoptable sandbox entered its warm queue."),
}


def _message(cls: type[Event], summary: str, *, dedup: bool) -> dict[str, Any]:
    headers: dict[str, Any] = {
        CONTENT_TYPE: {"type": "string", "const": CLOUDEVENTS_JSON},
        TRACEPARENT: {"type": "string", "description": "W3C Trace Context, as the attribute."},
        TRACESTATE: {"type": "string"},
    }
    if dedup:
        headers = {
            MSG_ID: {"type": "string", "description": "The event id (JetStream dedup)."},
            **headers,
        }
    return {
        "name": event_type_of(cls),
        "title": cls.__name__,
        "summary": summary,
        "contentType": CLOUDEVENTS_JSON,
        "headers": {
            "schemaFormat": _SCHEMA_FORMAT,
            "schema": {"type": "object", "properties": headers},
        },
        "payload": {"schemaFormat": _SCHEMA_FORMAT, "schema": {"$ref": schema_file(cls)}},
    }


def _dead_letter_message() -> dict[str, Any]:
    return {
        "name": "dead-letter",
        "title": "DeadLetter",
        "summary": "A message that could not be processed, byte for byte, with the reason.",
        "contentType": "application/octet-stream",
        "headers": {
            "schemaFormat": _SCHEMA_FORMAT,
            "schema": {
                "type": "object",
                "required": [DLQ_REASON, DLQ_SUBJECT],
                "properties": {
                    DLQ_REASON: {"type": "string", "description": "Why it was rejected."},
                    DLQ_SUBJECT: {"type": "string", "description": "The original subject."},
                    DLQ_REJECTED_BY: {"type": "string", "description": "The rejecting service."},
                    DLQ_STREAM: {"type": "string", "description": "The stream it came from."},
                    DLQ_SEQUENCE: {"type": "string", "description": "Its sequence there."},
                    MSG_ID: {"type": "string", "description": "dlq:<stream>:<sequence>."},
                },
            },
        },
        "payload": {
            "schemaFormat": _SCHEMA_FORMAT,
            "schema": {"description": "The original payload, unchanged (any bytes)."},
        },
    }


def _channel(
    address: str,
    title: str,
    description: str,
    messages: list[str],
    parameters: tuple[str, ...],
) -> dict[str, Any]:
    return {
        "address": address,
        "title": title,
        "description": description,
        "parameters": {name: {"$ref": f"#/components/parameters/{name}"} for name in parameters},
        "messages": {name: {"$ref": f"#/components/messages/{name}"} for name in messages},
    }


def _operation(channel: str, action: str, summary: str, messages: list[str]) -> dict[str, Any]:
    return {
        "action": action,
        "summary": summary,
        "channel": {"$ref": f"#/channels/{channel}"},
        "messages": [{"$ref": f"#/channels/{channel}/messages/{name}"} for name in messages],
    }


def asyncapi_document() -> dict[str, Any]:
    object_messages = ["objectAdded", "objectModified", "objectDeleted"]
    channels = {
        "objectEvents": _channel(
            "sandbus.events.{kind}.{namespace}.{name}",
            "Observed changes (event log)",
            "Every change the watcher sees, in order per object, at least once, deduplicated "
            "by id. Stored in the event-log stream (limits retention by age and size); replay "
            "by time or sequence. Filter with wildcards, e.g. sandbus.events.sandbox.default.>.",
            object_messages,
            _OBJECT_PARAMETERS,
        ),
        "decisions": _channel(
            "sandbus.decisions.{worker}.{kind}.{namespace}.{name}",
            "Worker decisions (event log)",
            "What each worker decided about which object and why. Stored in the event-log "
            "stream beside the changes, so one sequence orders both.",
            ["decisionMade"],
            ("worker", *_OBJECT_PARAMETERS),
        ),
        "stateTable": _channel(
            "sandbus.state.{kind}.{namespace}.{name}",
            "State table",
            "The latest event per object (one message per subject): what workers read on "
            "start instead of relisting. A deletion may stay as a tombstone that expires "
            "(per-message TTL).",
            object_messages,
            _OBJECT_PARAMETERS,
        ),
        "warmQueues": _channel(
            "sandbus.warm.{namespace}.{templateHash}.{pool}.{node}.{sandbox}",
            "Warm queues",
            "One entry per adoptable sandbox in a work-queue stream; a second entry for the "
            "same sandbox is refused (JetStream error 10077). A queue is one template's "
            "sandboxes from one warm pool (a claim names its pool), sandbus.warm.<namespace>."
            "<templateHash>.<pool>.>; within it, one durable pull consumer per node, "
            "sandbus.warm.<namespace>.<templateHash>.<pool>.<node>.*, shared by all claim "
            "workers, so a claim takes from the node with the most sandboxes left (FIFO within "
            "a node). An entry is acked only after the adoption is committed.",
            ["warmQueued"],
            ("namespace", "templateHash", "pool", "node", "sandbox"),
        ),
        "deadLetters": _channel(
            "sandbus.dlq.{origin}",
            "Dead letters",
            "Messages that did not decode or could not be processed; {origin} is the "
            "original subject without its leading `sandbus.` (several tokens).",
            ["deadLetter"],
            ("origin",),
        ),
    }
    operations = {
        "publishObjectEvents": _operation(
            "objectEvents", "send", "The watcher publishes observed changes.", object_messages
        ),
        "recordDecisions": _operation(
            "decisions", "send", "Workers record their decisions.", ["decisionMade"]
        ),
        "updateStateTable": _operation(
            "stateTable", "send", "The watcher keeps the latest event per object.", object_messages
        ),
        "enqueueWarmSandboxes": _operation(
            "warmQueues", "send", "Pool workers enqueue adoptable sandboxes.", ["warmQueued"]
        ),
        "takeWarmSandboxes": _operation(
            "warmQueues", "receive", "Claim workers take warm sandboxes.", ["warmQueued"]
        ),
        "deadLetter": _operation(
            "deadLetters",
            "send",
            "Any service dead-letters what it cannot process.",
            ["deadLetter"],
        ),
    }
    messages = {
        name: _message(cls, summary, dedup=cls is not WarmQueued)
        for name, (cls, summary) in _MESSAGES.items()
    }
    messages["deadLetter"] = _dead_letter_message()
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "sandbus event bus",
            "version": "1.0.0",
            "description": (
                "CloudEvents 1.0 (structured mode, JSON) on NATS JetStream: the changes the "
                "sandbus watcher observes in Kubernetes, the decisions its workers make, the "
                "latest state per object, the warm-sandbox queues and dead letters. Generated "
                "from the msgspec types in events/; do not edit."
            ),
        },
        "defaultContentType": CLOUDEVENTS_JSON,
        "servers": {
            "local": {
                "host": "127.0.0.1:4222",
                "protocol": "nats",
                "description": "The embedded NATS of `sandbus up` (see DIR/nats-url).",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "parameters": {
                name: {"description": description} for name, description in _PARAMETERS.items()
            },
            "messages": messages,
        },
    }


# --- the directory -----------------------------------------------------------------------


def _readme() -> str:
    rows = "\n".join(
        f"| `{event_type_of(cls)}` | [{schema_file(cls)}]({schema_file(cls)}) | {summary} |"
        for cls, summary in _MESSAGES.values()
    )
    return f"""# schemas/

Generated by `sandbus generate schemas` from the msgspec types in `events/`; do not edit.
A test fails when these files are out of date.

Every message is a CloudEvent 1.0 in structured mode (JSON). Pick the schema by the
event's `type` attribute; [{ASYNCAPI_FILE}]({ASYNCAPI_FILE}) describes the subjects.

| type | JSON Schema | meaning |
|---|---|---|
{rows}

Subjects: `sandbus.events.<kind>.<namespace>.<name>`,
`sandbus.decisions.<worker>.<kind>.<namespace>.<name>`,
`sandbus.state.<kind>.<namespace>.<name>`,
`sandbus.warm.<namespace>.<template-hash>.<pool>.<node>.<sandbox>`,
`sandbus.dlq.<original subject>`.
Kinds are lower case; in names `.` is written `_` and other characters outside
`A-Z a-z 0-9 -` as `=XX` per UTF-8 byte.
"""


class _PlainDumper(yaml.SafeDumper):
    """Writes a shared sub-document out again instead of as a YAML anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_schemas() -> dict[str, str]:
    """Every file of ``schemas/``: file name → content."""
    files = {
        schema_file(cls): json.dumps(event_schema(cls), indent=2, ensure_ascii=False) + "\n"
        for cls, _ in _MESSAGES.values()
    }
    files[ASYNCAPI_FILE] = yaml.dump(
        asyncapi_document(),
        Dumper=_PlainDumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    files["README.md"] = _readme()
    return files
