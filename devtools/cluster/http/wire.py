"""JSON on the wire: one msgspec encoder, and stored objects served without decoding them.

Serialising a LIST of 10,000 objects is most of its cost, so the response side leans on how the
store keeps objects: canonical JSON bytes (:mod:`~devtools.cluster.storage.store`). A resource type
serves a stored object after :meth:`~devtools.cluster.apirules.resources.ResourceType.present` sets
its ``apiVersion`` and ``kind``; for the common case that changes nothing, the bytes are spliced
into the response as they are. Three levels, cheapest first, each byte-for-byte what the one after
it would produce:

1. The bytes already open with the served ``{"apiVersion":…,"kind":…,`` (the first two keys of
   a sorted custom resource): used as they are, or with that prefix cut off for a typed list
   item, which carries no TypeMeta.
2. Otherwise only the top level is decoded, into :class:`msgspec.Raw` values that keep the
   nested bytes untouched; ``apiVersion`` and ``kind`` are set (or dropped) there and the top
   level re-encoded around the untouched values. A ConfigMap, whose ``data`` sorts before
   ``kind``, takes this path.
3. A version served through a conversion function (``to_external``) is decoded, converted
   and encoded in full.

Encoding keeps dict insertion order like :func:`json.dumps`, so a decoded stored object comes
out with its keys sorted either way.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from devtools.cluster.apirules.resources import ResourceType

__all__ = ["dumps", "event_line", "list_document", "presented"]

_encoder = msgspec.json.Encoder()
_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw])
_decoder = msgspec.json.Decoder()


def dumps(body: Any) -> bytes:
    """A response body as compact JSON, keys in insertion order."""
    return _encoder.encode(body)


@lru_cache(maxsize=256)
def _type_meta(api_version: str, kind: str) -> tuple[bytes, msgspec.Raw, msgspec.Raw]:
    """The sorted TypeMeta prefix, and the two values as raw JSON."""
    version_json = _encoder.encode(api_version)
    kind_json = _encoder.encode(kind)
    prefix = b'{"apiVersion":' + version_json + b',"kind":' + kind_json + b","
    return prefix, msgspec.Raw(version_json), msgspec.Raw(kind_json)


def presented(rtype: ResourceType, raw: bytes, *, type_meta: bool = True) -> bytes:
    """Stored bytes as ``rtype`` serves them; without apiVersion and kind if not ``type_meta``
    (the items of a typed list)."""
    if rtype.to_external is not None:
        obj = rtype.present(_decoder.decode(raw))
        if not type_meta:
            obj.pop("apiVersion", None)
            obj.pop("kind", None)
        return _encoder.encode(obj)
    prefix, version_json, kind_json = _type_meta(rtype.api_version, rtype.kind)
    if raw.startswith(prefix):
        return raw if type_meta else b"{" + raw[len(prefix) :]
    fields = _top_level.decode(raw)
    if type_meta:
        fields["apiVersion"] = version_json
        fields["kind"] = kind_json
    else:
        fields.pop("apiVersion", None)
        fields.pop("kind", None)
    return _encoder.encode(fields)


def list_document(api_version: str, kind: str, metadata: Any, items: list[bytes]) -> bytes:
    """A ``…List`` body around already encoded items."""
    return _encoder.encode(
        {
            "apiVersion": api_version,
            "items": [msgspec.Raw(item) for item in items],
            "kind": kind,
            "metadata": metadata,
        }
    )


def event_line(event_type: str, obj: Any) -> bytes:
    """One watch event, newline-terminated; ``obj`` is a JSON-able value or encoded bytes."""
    encoded = obj if isinstance(obj, bytes) else _encoder.encode(obj)
    return b'{"type":"' + event_type.encode() + b'","object":' + encoded + b"}\n"
