"""Unknown fields of built-in kinds: what the real server's strict JSON decoder finds.

A real kube-apiserver decodes a built-in object into its Go struct. A field the struct does not
have is, by the request's ``fieldValidation``: refused (``Strict``: 400 ``strict decoding error:
unknown field "spec.bogus"``), dropped with a ``Warning`` header per field (``Warn``, the
default) or dropped silently (``Ignore``). Custom resources get the same verdicts from their
structural schema (:class:`~devtools.cluster.apirules.strategy.CustomResourceStrategy`); this
module gives the built-in kinds theirs, from the Kubernetes OpenAPI schemas the
``kubernetes-validate`` package ships per release (the ``-local-strict`` JSON Schemas of the
version the stand-in reports, else the newest it has).

The schema file is read once, on the first write of a built-in kind, and each kind's tree of
known fields is compiled on its first write: a struct (``properties``) is checked key by key, a
map (``additionalProperties`` only: labels, annotations, ``data``) only through its values, a
list through its items; int-or-string, quantities, ``RawExtension`` and other free-form objects
(no ``properties``) are never looked into. Without ``kubernetes-validate`` installed (it is a
test dependency) nothing is flagged, as before.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

import msgspec

from api.objects import Json
from devtools.cluster.storage.jsonmemo import JsonMemo

__all__ = ["unknown_fields"]

# The release whose schemas are used first: the version /version reports.
_PREFERRED = "v1.33.0"

# A compiled node: None (anything goes), ("s", {field: node}) a struct,
# ("m", node) a map's values, ("l", node) a list's items.
Node = tuple[str, Any] | None

_lock = threading.Lock()
_defs: dict[str, Any] | None = None
_by_gvk: dict[tuple[str, str, str], str] = {}
_compiled: dict[str, Node] = {}
_kinds: dict[tuple[str, str, str], Node] = {}


def _schema_dir() -> str | None:
    try:
        import kubernetes_validate
    except ImportError:
        return None
    root = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
    try:
        names = os.listdir(root)
    except OSError:
        return None
    strict = [n for n in names if n.endswith("-local-strict")]
    if not strict:
        return None
    preferred = f"{_PREFERRED}-local-strict"
    if preferred in strict:
        return os.path.join(root, preferred)

    def release(name: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", name)[:3])

    return os.path.join(root, max(strict, key=release))


def _load() -> dict[str, Any]:
    global _defs
    if _defs is None:
        directory = _schema_dir()
        defs: dict[str, Any] = {}
        if directory is not None:
            try:
                with open(os.path.join(directory, "_definitions.json"), "rb") as fh:
                    raw = msgspec.json.decode(fh.read())
                defs = raw.get("$defs") or raw.get("definitions") or {}
            except (OSError, msgspec.DecodeError):
                defs = {}
        for name, schema in defs.items():
            for gvk in schema.get("x-kubernetes-group-version-kind") or ():
                key = (gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))
                _by_gvk.setdefault(key, name)
        _defs = defs
    return _defs


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _compile(schema: Any) -> Node:
    if not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _compile_def(_ref_name(ref))
    props = schema.get("properties")
    if isinstance(props, dict):
        fields: dict[str, Node] = {}
        node: Node = ("s", fields)
        for key, sub in props.items():
            fields[key] = _compile(sub)
        return node
    items = schema.get("items")
    if isinstance(items, dict):
        inner = _compile(items)
        return None if inner is None else ("l", inner)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        inner = _compile(extra)
        return None if inner is None else ("m", inner)
    return None  # a scalar, int-or-string, or a free-form object


def _compile_def(name: str) -> Node:
    if name in _compiled:
        return _compiled[name]
    schema = _load().get(name)
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        node = _compile(schema)
        _compiled[name] = node
        return node
    # A struct: registered before its fields are compiled, so recursive types terminate.
    fields: dict[str, Node] = {}
    struct: Node = ("s", fields)
    _compiled[name] = struct
    for key, sub in schema["properties"].items():
        fields[key] = _compile(sub)
    return struct


def _kind_node(group: str, version: str, kind: str) -> Node:
    key = (group, version, kind)
    if key in _kinds:
        return _kinds[key]
    with _lock:
        _load()
        name = _by_gvk.get(key)
        node = _compile_def(name) if name else None
        _kinds[key] = node
    return node


def _walk(value: Any, node: Node, prefix: str, out: list[str]) -> None:
    if node is None:
        return
    shape, inner = node
    if shape == "s":
        if not isinstance(value, dict):
            return
        unknown: list[str] = []
        for key, sub in value.items():  # in document order, as the decoder reports them
            if key not in inner:
                unknown.append(key)
                out.append(f"{prefix}.{key}" if prefix else key)
                continue
            child = inner[key]
            if child is not None and isinstance(sub, dict | list):
                _walk(sub, child, f"{prefix}.{key}" if prefix else key, out)
        for key in unknown:
            del value[key]
    elif shape == "l":
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict | list):
                    _walk(item, inner, f"{prefix}[{i}]", out)
    elif isinstance(value, dict):  # "m"
        for key, sub in value.items():
            if isinstance(sub, dict | list):
                _walk(sub, inner, f"{prefix}.{key}" if prefix else key, out)


def unknown_fields(group: str, version: str, kind: str, obj: Json) -> list[str]:
    """Drop the fields of ``obj`` (a built-in kind's external shape) that its Go type lacks.

    Returns their dotted paths (``spec.bogus``, ``spec.containers[0].bogus``), in document
    order, as the real server's strict decoder names them. A kind without a schema: nothing.
    """
    node = _kind_node(group, version, kind)
    out: list[str] = []
    if node is not None and node[0] == "s" and isinstance(obj, dict):
        _walk_top(obj, node[1], out)
    else:
        _walk(obj, node, "", out)
    return out


def _walk_top(value: Json, fields: dict[str, Node], out: list[str]) -> None:
    """:func:`_walk` of a kind's top level, each field below it through :func:`_walk_known`."""
    unknown: list[str] = []
    for key, sub in value.items():
        if key not in fields:
            unknown.append(key)
            out.append(key)
            continue
        child = fields[key]
        if child is None or not isinstance(sub, dict | list):
            continue
        if key == "metadata":  # changes with every write (its resourceVersion): no use
            _walk(sub, child, key, out)
        else:
            _walk_known(sub, child, key, out)
    for key in unknown:
        del value[key]


# Every write of a built-in kind walks the whole object, and most change one part of it (a
# Pod status write leaves ``spec`` as it was): a top-level value found without unknown fields
# is remembered by its schema node (:class:`~devtools.cluster.storage.jsonmemo.JsonMemo`; the
# walk depends on nothing else). A value with unknown fields is walked every time (the walk
# drops them and names them by their path).
_KNOWN = JsonMemo()


def _walk_known(value: Any, node: Node, prefix: str, out: list[str]) -> None:
    key = _KNOWN.key(node, value)
    if key is not None and _KNOWN.get(key, node, value)[0]:
        return
    found = len(out)
    _walk(value, node, prefix, out)
    if key is not None and len(out) == found:
        _KNOWN.put(key, node, True)
