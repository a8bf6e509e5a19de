"""``--data DIR``: objects survive a restart and resourceVersions keep increasing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from devtools.cluster import DevCluster, LatencyModel
from tests.component.devcluster.samples import GROUP, PLURAL, VERSION, widget

WIDGETS = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"


def make(data: Path, crds: Path) -> DevCluster:
    return DevCluster(
        port=0, crd_dirs=[crds], data_dir=data, latency=LatencyModel.zero(), controllers=[]
    )


async def test_objects_and_resource_versions_survive_a_restart(
    tmp_path: Path, crd_dir: Path
) -> None:
    """Restart from the same data directory: same objects, same uids, RVs continue upward, and
    a watch from a pre-restart RV gets 410 (the history is not kept, as after compaction)."""
    data = tmp_path / "data"
    async with make(data, crd_dir) as first, aiohttp.ClientSession(base_url=first.url) as http:
        async with http.post(WIDGETS, json=widget("w1")) as response:
            created = await response.json()
        async with http.post(WIDGETS, json=widget("w0")) as response:
            assert response.status == 201
        last_rv = first.store.resource_version
    async with make(data, crd_dir) as second, aiohttp.ClientSession(base_url=second.url) as http:
        async with http.get(f"{WIDGETS}/w1") as response:
            assert response.status == 200
            again = await response.json()
        assert again["metadata"]["uid"] == created["metadata"]["uid"]
        assert second.store.resource_version == last_rv
        async with http.post(WIDGETS, json=widget("w2")) as response:
            newer = await response.json()
        assert int(newer["metadata"]["resourceVersion"]) == last_rv + 1
        async with http.get(
            WIDGETS,
            params={
                "watch": "1",
                "resourceVersion": created["metadata"]["resourceVersion"],
                "timeoutSeconds": "1",
            },
        ) as response:
            event = await response.json(content_type=None)
        assert event["object"]["code"] == 410
        async with http.get("/api/v1/namespaces") as response:
            names = [n["metadata"]["name"] for n in (await response.json())["items"]]
        assert "default" in names


async def test_in_memory_by_default(tmp_path: Path, crd_dir: Path) -> None:
    """Without a data directory nothing is written to disk and a restart starts empty."""
    async with (
        DevCluster(
            port=0, crd_dirs=[crd_dir], latency=LatencyModel.zero(), controllers=[]
        ) as cluster,
        aiohttp.ClientSession(base_url=cluster.url) as http,
        http.post(WIDGETS, json=widget("w1")) as response,
    ):
        assert response.status == 201
    async with DevCluster(
        port=0, crd_dirs=[crd_dir], latency=LatencyModel.zero(), controllers=[]
    ) as cluster:
        assert cluster.store.get("widgets.example.com", "default", "w1") is None
    assert list(tmp_path.glob("**/*.sqlite")) == []


async def test_concurrent_writes_share_transactions_and_all_reach_the_file(
    tmp_path: Path, crd_dir: Path
) -> None:
    """Writes that arrive together are put on file together (a group commit): fewer
    transactions than writes, each write answered once it is on file, and every one of them
    there after a restart, the deleted ones gone."""
    data = tmp_path / "data"
    async with make(data, crd_dir) as first, aiohttp.ClientSession(base_url=first.url) as http:
        backend = first.store._backend
        assert backend is not None
        transactions = 0
        write = backend.write

        async def counted(*args: Any) -> None:
            nonlocal transactions
            transactions += 1
            await write(*args)

        backend.write = counted  # type: ignore[method-assign]

        async def create(name: str) -> int:
            async with http.post(WIDGETS, json=widget(name)) as response:
                return response.status

        statuses = await asyncio.gather(*(create(f"w{i}") for i in range(40)))
        assert statuses == [201] * 40
        async with http.delete(f"{WIDGETS}/w0") as response:
            assert response.status == 200
        assert 0 < transactions < 40
        last_rv = first.store.resource_version
    async with make(data, crd_dir) as second, aiohttp.ClientSession(base_url=second.url) as http:
        assert second.store.resource_version == last_rv
        async with http.get(WIDGETS) as response:
            names = {item["metadata"]["name"] for item in (await response.json())["items"]}
        assert names == {f"w{i}" for i in range(1, 40)}


async def test_a_write_the_file_refuses_is_an_error_to_its_writer(
    tmp_path: Path, crd_dir: Path
) -> None:
    async with make(tmp_path / "data", crd_dir) as cluster:
        backend = cluster.store._backend
        assert backend is not None

        async def full(*args: Any) -> None:
            raise OSError(28, "No space left on device")

        backend.write = full  # type: ignore[method-assign]
        async with (
            aiohttp.ClientSession(base_url=cluster.url) as http,
            http.post(WIDGETS, json=widget("w1")) as response,
        ):
            assert response.status == 500
            assert "No space left on device" in await response.text()
