"""Plain-HTTP helpers for the tests of the development cluster's own controllers (kubelet, garbage
collector), which talk to the API server over HTTP exactly as these helpers do."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import aiohttp

from api.objects import Json


async def create(http: aiohttp.ClientSession, path: str, body: Json) -> Json:
    async with http.post(path, json=body) as response:
        created: Json = await response.json()
        assert response.status == 201, created
        return created


async def watch_until(
    http: aiohttp.ClientSession,
    collection: str,
    name: str,
    predicate: Callable[[Json | None], bool],
    *,
    within: float = 5.0,
) -> list[Json | None]:
    """Every version of one object seen (None = deleted) until ``predicate`` holds."""
    seen: list[Json | None] = []
    selector = {"fieldSelector": f"metadata.name={name}"}
    async with asyncio.timeout(within):
        async with http.get(collection, params=selector) as response:
            listed = await response.json()
        seen.append(listed["items"][0] if listed["items"] else None)
        if predicate(seen[-1]):
            return seen
        params = {
            **selector,
            "watch": "true",
            "resourceVersion": listed["metadata"]["resourceVersion"],
        }
        async with http.get(collection, params=params) as response:
            async for line in response.content:
                event = json.loads(line)
                seen.append(None if event["type"] == "DELETED" else event["object"])
                if predicate(seen[-1]):
                    return seen
    raise AssertionError("watch ended before the condition held")
