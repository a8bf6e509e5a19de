"""Other representations a client may ask for or send: Table, PartialObjectMetadata, protobuf,
OpenAPI. Row 25 territory (kubectl's view of the server)."""

from __future__ import annotations

import json

import aiohttp
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from tests.component.devcluster.samples import GROUP, MERGE, PLURAL, VERSION, create_widget, pod

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
WIDGETS = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"


async def test_table_for_custom_resources_uses_printer_columns(
    custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """apiextensions tableconvertor: Name plus the CRD's additionalPrinterColumns."""
    await create_widget(custom, "w1", size=4)
    async with http.get(WIDGETS, headers={"Accept": TABLE}) as response:
        table = await response.json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size"]
    assert table["rows"][0]["cells"] == ["w1", 4]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table["metadata"]["resourceVersion"]


async def test_table_for_pods(core: k8s.CoreV1Api, http: aiohttp.ClientSession) -> None:
    """printPod: NAME READY STATUS RESTARTS AGE (+ wide columns at priority 1)."""
    await core.create_namespaced_pod("default", pod("p1"))
    await core.patch_namespaced_pod_status(
        "p1",
        "default",
        {
            "status": {
                "containerStatuses": [
                    {
                        "name": "app",
                        "ready": False,
                        "restartCount": 2,
                        "image": "nginx:1.25",
                        "imageID": "",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    }
                ]
            }
        },
    )
    async with http.get("/api/v1/namespaces/default/pods", headers={"Accept": TABLE}) as response:
        table = await response.json()
    names = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert names == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["p1", "0/1", "CrashLoopBackOff", 2]


async def test_table_watch_events_carry_tables(
    custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """kubectl get -w asks for Tables on the watch too; each event's object is a one-row Table."""
    await create_widget(custom, "w1", size=1)
    async with http.get(
        WIDGETS, params={"watch": "1", "timeoutSeconds": "1"}, headers={"Accept": TABLE}
    ) as response:
        lines = [json.loads(line) async for line in response.content if line.strip()]
    assert lines[0]["type"] == "ADDED"
    assert lines[0]["object"]["kind"] == "Table"
    assert lines[0]["object"]["rows"][0]["cells"] == ["w1", 1]


async def test_partial_object_metadata_list(
    custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """Metadata-only clients get PartialObjectMetadataList."""
    await create_widget(custom, "w1")
    accept = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
    async with http.get(WIDGETS, headers={"Accept": accept}) as response:
        body = await response.json()
    assert body["kind"] == "PartialObjectMetadataList"
    assert body["items"][0] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": body["items"][0]["metadata"],
    }
    assert "spec" not in body["items"][0]


def _field(number: int, payload: bytes) -> bytes:
    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            byte = value & 0x7F
            value >>= 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _entry(key: str, value: str) -> bytes:
    return _field(1, key.encode()) + _field(2, value.encode())


async def test_protobuf_config_map_is_accepted(http: aiohttp.ClientSession) -> None:
    """kubectl's typed clients send application/vnd.kubernetes.protobuf for built-ins; the body
    is k8s\\0 + runtime.Unknown{typeMeta, raw}."""
    metadata = _field(1, b"c1") + _field(2, b"") + _field(11, _entry("app", "x"))
    config_map = _field(1, metadata) + _field(2, _entry("key", "value"))
    unknown = _field(1, _field(1, b"v1") + _field(2, b"ConfigMap")) + _field(2, config_map)
    async with http.post(
        "/api/v1/namespaces/default/configmaps",
        data=b"k8s\x00" + unknown,
        headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
    ) as response:
        assert response.status == 201
        created = await response.json()
    assert created["data"] == {"key": "value"}
    assert created["metadata"]["labels"] == {"app": "x"}
    assert "generateName" not in created["metadata"]


async def test_protobuf_of_an_unsupported_kind_is_415(http: aiohttp.ClientSession) -> None:
    """A protobuf body we cannot read is refused with 415, listing what is accepted."""
    unknown = _field(1, _field(1, b"v1") + _field(2, b"Service")) + _field(2, b"")
    async with http.post(
        "/api/v1/namespaces/default/services",
        data=b"k8s\x00" + unknown,
        headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
    ) as response:
        assert response.status == 415
        assert (await response.json())["reason"] == "UnsupportedMediaType"


async def test_openapi_v3_publishes_custom_resource_schemas(http: aiohttp.ClientSession) -> None:
    """kubectl explain reads the CRD schema from /openapi/v3 components."""
    async with http.get(f"/openapi/v3/apis/{GROUP}/{VERSION}") as response:
        doc = await response.json()
    schema = doc["components"]["schemas"]["com.example.v1.Widget"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "example.com", "version": "v1", "kind": "Widget"}
    ]
    assert schema["properties"]["spec"]["properties"]["size"]["type"] == "integer"


async def test_openapi_v2_is_an_empty_document(http: aiohttp.ClientSession) -> None:
    """/openapi/v2 exists (empty), as protobuf when asked for it."""
    accept = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    async with http.get("/openapi/v2", headers={"Accept": accept}) as response:
        assert response.status == 200
        assert response.content_type == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        assert await response.read() == b""
    async with http.get("/openapi/v2") as response:
        assert (await response.json())["swagger"] == "2.0"


async def test_undeclared_subresource_of_a_custom_resource_is_object_not_found(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """crdHandler: an undeclared subresource answers NotFound for the object itself."""
    async with http.get(f"{WIDGETS}/w1/logs") as response:
        assert response.status == 404
        error = await response.json()
    assert error["message"] == 'widgets.example.com "w1" not found'
    assert error["details"] == {"name": "w1", "group": "example.com", "kind": "widgets"}


async def test_slow_watcher_is_closed(
    cluster: DevCluster, custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """A watcher that falls more than queue_size changes behind is closed (cacher terminates
    unresponsive watchers); the client sees a clean end and must re-watch."""
    cluster.watch_settings.queue_size = 2
    cluster.faults.delay_events(200, resource="widgets")
    created = await create_widget(custom, "w1")
    async with http.get(
        WIDGETS,
        params={"watch": "1", "resourceVersion": created["metadata"]["resourceVersion"]},
    ) as response:
        await cluster.watches.wait_for()
        for size in range(1, 6):
            await custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                "default",
                PLURAL,
                "w1",
                {"spec": {"size": size}},
                _content_type=MERGE,
            )
        body = await response.read()
    assert len(body.splitlines()) < 5
