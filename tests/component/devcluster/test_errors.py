"""Row 13 of docs/devcluster.md §2: every non-2xx is a metav1.Status with an exact reason."""

from __future__ import annotations

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from tests.component.devcluster.samples import GROUP, PLURAL, VERSION, failure

WIDGETS = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"


async def test_not_found_body(custom: k8s.CustomObjectsApi) -> None:
    """Row 13 (errors.go NewNotFound): message, reason and details {name, group, kind=plural}."""
    status, error = await failure(
        custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1")
    )
    assert status == 404
    assert error == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'widgets.example.com "w1" not found',
        "reason": "NotFound",
        "details": {"name": "w1", "group": "example.com", "kind": "widgets"},
        "code": 404,
    }


async def test_core_not_found_has_no_group(core: k8s.CoreV1Api) -> None:
    """Row 13: core resources have an empty group, so neither message nor details name one."""
    status, error = await failure(core.read_namespaced_pod("p", "default"))
    assert status == 404
    assert error["message"] == 'pods "p" not found'
    assert error["details"] == {"name": "p", "kind": "pods"}


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"{not json", "application/json"),
        (b"a: [unclosed", "application/yaml"),
        (b"", "application/json"),
    ],
)
async def test_malformed_bodies_are_400(
    http: aiohttp.ClientSession, body: bytes, content_type: str
) -> None:
    """Malformed JSON/YAML never reaches a handler: 400 BadRequest Status, no traceback."""
    async with http.post(WIDGETS, data=body, headers={"Content-Type": content_type}) as response:
        assert response.status == 400
        error = await response.json()
    assert error["reason"] == "BadRequest"
    assert error["kind"] == "Status"
    assert "Traceback" not in error["message"]


async def test_body_of_wrong_shape_is_400(http: aiohttp.ClientSession) -> None:
    """A JSON array where an object belongs is a decoding error (400)."""
    async with http.post(WIDGETS, json=[1, 2]) as response:
        assert response.status == 400
        assert (await response.json())["reason"] == "BadRequest"


async def test_kind_mismatch_is_400(http: aiohttp.ClientSession) -> None:
    """The apiVersion/kind in the body must match the endpoint."""
    body = {"apiVersion": "example.com/v2", "kind": "Widget", "metadata": {"name": "w"}}
    async with http.post(WIDGETS, json=body) as response:
        assert response.status == 400
        assert (await response.json())["message"] == (
            "the API version in the data (example.com/v2) does not match the expected API "
            "version (example.com/v1)"
        )


@pytest.mark.parametrize(
    "path",
    [
        "/apis/example.com/v1/namespaces/default/gadgets",
        "/apis/nope.io/v1/things",
        "/api/v1/namespaces/default/pods/p/logs",
    ],
)
async def test_unknown_resources_are_404_status(http: aiohttp.ClientSession, path: str) -> None:
    """An unknown group, resource or subresource is a 404 Status, as the real server answers."""
    async with http.get(path) as response:
        assert response.status == 404
        error = await response.json()
    assert error == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }


async def test_method_not_allowed(http: aiohttp.ClientSession) -> None:
    """A verb the resource does not support is 405 MethodNotAllowed."""
    async with http.delete("/api/v1/namespaces") as response:
        assert response.status == 405
        assert (await response.json())["reason"] == "MethodNotAllowed"
    async with http.post(f"{WIDGETS}/w1") as response:
        assert response.status == 405


async def test_unexpected_failure_is_a_clean_500(
    cluster: DevCluster, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug inside a handler still answers with a Status (InternalError), never a traceback."""

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cluster.reader, "page", explode)  # every LIST reads a page
    async with http.get(WIDGETS) as response:
        assert response.status == 500
        error = await response.json()
    assert error["reason"] == "InternalError"
    assert error["message"] == "Internal error occurred: RuntimeError: boom"
