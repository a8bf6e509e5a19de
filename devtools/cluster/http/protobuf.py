"""Just enough Kubernetes protobuf to accept what kubectl's typed clients send.

kubectl creates some built-in objects through typed clients that speak
``application/vnd.kubernetes.protobuf`` (``kubectl create namespace``, ``create configmap``,
``create secret generic``), and client-go does not fall back to JSON when a server refuses
protobuf. The server answers in JSON, which the client accepts, so only *decoding* is needed.

The body is the ``k8s\\x00`` magic followed by a ``runtime.Unknown`` (typeMeta, raw, ...); ``raw``
is the object in the field numbering of ``k8s.io/api/core/v1/generated.proto``. We keep a small
table of the messages involved (ObjectMeta, Namespace, ConfigMap, Secret) and turn them into the
JSON the rest of the server understands; gogo-protobuf writes empty strings and zero numbers
for non-pointer fields, which JSON would omit, so those are dropped. A protobuf body of any
other kind is a 415 listing the media types the server does take.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from devtools.cluster.apirules import errors

__all__ = ["MEDIA_TYPE", "decode_object", "is_protobuf"]

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"

# message -> field number -> (json name, kind). Kinds: "string", "bytes", "int", "bool",
# "time", "map" (string->string), "bytesmap" (string->base64), "strings" (repeated string),
# "message:<Name>", "messages:<Name>" (repeated).
_SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "Unknown": {
        1: ("typeMeta", "message:TypeMeta"),
        2: ("raw", "raw"),
        4: ("contentType", "string"),
    },
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        5: ("uid", "string"),
        6: ("resourceVersion", "string"),
        7: ("generation", "int"),
        8: ("creationTimestamp", "time"),
        9: ("deletionTimestamp", "time"),
        10: ("deletionGracePeriodSeconds", "int"),
        11: ("labels", "map"),
        12: ("annotations", "map"),
        13: ("ownerReferences", "messages:OwnerReference"),
        14: ("finalizers", "strings"),
    },
    "OwnerReference": {
        1: ("kind", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("controller", "bool"),
        7: ("blockOwnerDeletion", "bool"),
    },
    "Time": {1: ("seconds", "int"), 2: ("nanos", "int")},
    "Namespace": {
        1: ("metadata", "message:ObjectMeta"),
        2: ("spec", "message:NamespaceSpec"),
        3: ("status", "message:NamespaceStatus"),
    },
    "NamespaceSpec": {1: ("finalizers", "strings")},
    "NamespaceStatus": {1: ("phase", "string")},
    "ConfigMap": {
        1: ("metadata", "message:ObjectMeta"),
        2: ("data", "map"),
        3: ("binaryData", "bytesmap"),
        4: ("immutable", "bool"),
    },
    "Secret": {
        1: ("metadata", "message:ObjectMeta"),
        2: ("data", "bytesmap"),
        3: ("type", "string"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
}
_TOP_LEVEL = {("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "Secret")}


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() == MEDIA_TYPE


def _unsupported() -> errors.StatusError:
    return errors.unsupported_media_type(["application/json", "application/yaml"])


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs; length-delimited values stay bytes."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _map_entry(raw: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for number, item in _fields(raw):
        if number == 1 and isinstance(item, bytes):
            key = item.decode()
        elif number == 2 and isinstance(item, bytes):
            value = item
    return key, value


def _message(name: str, data: bytes) -> dict[str, Any]:
    schema = _SCHEMAS[name]
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            continue
        key, kind = schema[number]
        if kind == "string" and isinstance(value, bytes):
            if value:
                out[key] = value.decode()
        elif kind == "raw":
            out[key] = value
        elif kind == "int" and isinstance(value, int):
            if value:
                out[key] = _signed(value)
        elif kind == "bool" and isinstance(value, int):
            out[key] = bool(value)
        elif kind == "time" and isinstance(value, bytes):
            seconds = _message("Time", value).get("seconds", 0)
            if seconds:
                out[key] = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        elif kind in ("map", "bytesmap") and isinstance(value, bytes):
            entry_key, entry_value = _map_entry(value)
            shown = (
                entry_value.decode() if kind == "map" else base64.b64encode(entry_value).decode()
            )
            out.setdefault(key, {})[entry_key] = shown
        elif kind == "strings" and isinstance(value, bytes):
            out.setdefault(key, []).append(value.decode())
        elif kind.startswith("message:") and isinstance(value, bytes):
            nested = _message(kind.split(":", 1)[1], value)
            if nested:
                out[key] = nested
        elif kind.startswith("messages:") and isinstance(value, bytes):
            out.setdefault(key, []).append(_message(kind.split(":", 1)[1], value))
    return out


def decode_object(raw: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it encodes (415 if we cannot read it)."""
    if not raw.startswith(_MAGIC):
        raise errors.bad_request("provided object is not a valid protobuf message (missing magic)")
    try:
        unknown = _message("Unknown", raw[len(_MAGIC) :])
        type_meta = unknown.get("typeMeta", {})
        api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
        if (api_version, kind) not in _TOP_LEVEL:
            raise _unsupported()
        obj = _message(kind, unknown.get("raw", b""))
    except (ValueError, UnicodeDecodeError, KeyError) as exc:
        raise errors.bad_request(f"unable to decode protobuf body: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
