"""Stored bytes served without decoding them say exactly what decoding, presenting and encoding
them would: the same bytes, for every kind of resource type and any stored object."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.cluster.apirules.builtins import builtin_types
from devtools.cluster.apirules.resources import ResourceType
from devtools.cluster.apirules.strategy import CustomResourceStrategy
from devtools.cluster.http import wire
from devtools.cluster.storage.store import decode, encode

TYPES = {(t.group, t.plural): t for t in builtin_types()}
WIDGETS = ResourceType(
    "example.com",
    "v1",
    "widgets",
    "widget",
    "Widget",
    namespaced=True,
    strategy=CustomResourceStrategy({}),
    custom=True,
)
RTYPES = [
    TYPES[("", "configmaps")],  # data sorts before kind
    TYPES[("", "pods")],
    TYPES[("", "events")],  # "action" sorts before apiVersion
    TYPES[("events.k8s.io", "events")],  # served through a conversion function
    WIDGETS,
]

leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=8))
json_value = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
type_meta_value = st.one_of(
    st.none(), st.sampled_from(["v1", "example.com/v1", "events.k8s.io/v1", "Pod", "Widget"])
)


@st.composite
def stored_objects(draw: st.DrawFn) -> bytes:
    obj: dict[str, Any] = draw(
        st.dictionaries(
            st.sampled_from(["action", "data", "spec", "status", "zeta", "Upper"]),
            json_value,
            max_size=4,
        )
    )
    obj["metadata"] = {"name": "x", "namespace": "default", "resourceVersion": "7"}
    for key in ("apiVersion", "kind"):
        value = draw(type_meta_value)
        if value is not None:
            obj[key] = value
    return encode(obj)


def _expected(rtype: ResourceType, raw: bytes, type_meta: bool) -> bytes:
    """The old way: decode, present, drop TypeMeta for typed list items, encode."""
    obj = rtype.present(decode(raw))
    if not type_meta:
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
    return msgspec.json.encode(obj)


@settings(max_examples=300, deadline=None)
@given(raw=stored_objects(), index=st.integers(0, len(RTYPES) - 1), type_meta=st.booleans())
def test_presented_bytes_equal_decoding_presenting_and_encoding(
    raw: bytes, index: int, type_meta: bool
) -> None:
    rtype = RTYPES[index]
    assert wire.presented(rtype, raw, type_meta=type_meta) == _expected(rtype, raw, type_meta)


def test_a_custom_resource_is_served_as_stored() -> None:
    raw = encode(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}
    )
    assert wire.presented(WIDGETS, raw) is raw


def test_list_and_event_documents_are_json() -> None:
    item = encode({"metadata": {"name": "a"}})
    listed = wire.list_document("v1", "ConfigMapList", {"resourceVersion": "3"}, [item, item])
    assert msgspec.json.decode(listed) == {
        "apiVersion": "v1",
        "items": [{"metadata": {"name": "a"}}] * 2,
        "kind": "ConfigMapList",
        "metadata": {"resourceVersion": "3"},
    }
    line = wire.event_line("ADDED", item)
    assert line.endswith(b"\n")
    assert msgspec.json.decode(line) == {"type": "ADDED", "object": {"metadata": {"name": "a"}}}
    assert wire.event_line("ADDED", {"metadata": {"name": "a"}}) == line
