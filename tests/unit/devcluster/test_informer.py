"""The controllers' informer: metadata-only decoding (the garbage collector's) and handlers
added to a running informer (how the kubelet and the collector share the Pods' watch)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from devtools.cluster.controllers.gc import ResourceInfo, WatchedMetadata, graph_node
from devtools.cluster.controllers.informer import Informer, _decoders

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "u-1",
        "resourceVersion": "12",
        "labels": {"app": "x"},
        "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-0"}],
        "finalizers": ["f"],
        "deletionTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {"containers": [{"name": "app", "image": "nginx"}]},
    "status": {"phase": "Running"},
}
PODS = ResourceInfo("", "v1", "pods", "Pod", True)


def test_a_metadata_informer_keeps_what_the_collector_reads() -> None:
    decode_list, decode_event = _decoders(WatchedMetadata)
    line = json.dumps({"type": "MODIFIED", "object": POD}).encode()
    event = decode_event(line)
    assert event["type"] == "MODIFIED"
    assert set(event["object"]) == {"metadata"}
    assert "labels" not in event["object"]["metadata"]
    assert "managedFields" not in event["object"]["metadata"]
    assert graph_node(event["object"], PODS) == graph_node(POD, PODS)
    body = {"kind": "PodList", "metadata": {"resourceVersion": "13"}, "items": [POD]}
    listed = decode_list(json.dumps(body).encode())
    assert listed["metadata"] == {"resourceVersion": "13"}
    assert listed["items"] == [event["object"]]
    assert decode_list(b'{"metadata":{"resourceVersion":"1"},"items":null}') == {
        "metadata": {"resourceVersion": "1"}
    }


def test_a_metadata_informer_reads_an_expired_watch_and_a_bookmark() -> None:
    _, decode_event = _decoders(WatchedMetadata)
    error = decode_event(
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},'
        b'"status":"Failure","message":"too old","reason":"Expired","code":410}}'
    )
    assert error == {"type": "ERROR", "object": {"metadata": {}, "code": 410, "message": "too old"}}
    bookmark = decode_event(
        b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}'
    )
    assert bookmark == {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}


async def test_a_handler_added_late_is_told_the_cache_then_every_change() -> None:
    seen: list[tuple[str, str]] = []
    async with aiohttp.ClientSession() as session:
        informer = Informer(session, "http://127.0.0.1:1", "/api/v1/pods", None)
        informer._on_event({"type": "ADDED", "object": POD})

        def handler(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            seen.append((kind, obj["metadata"]["resourceVersion"]))

        informer.add_handler(handler)
        changed = {**POD, "metadata": {**POD["metadata"], "resourceVersion": "13"}}
        informer._on_event({"type": "MODIFIED", "object": changed})
        informer.remove_handler(handler)
        informer._on_event({"type": "DELETED", "object": changed})
    assert seen == [("ADDED", "12"), ("MODIFIED", "13")]
