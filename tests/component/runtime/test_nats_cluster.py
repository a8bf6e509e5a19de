"""A replicated bus on real nats-servers (devtools/natsd.py ``NatsCluster``): three nodes
form one JetStream cluster, the streams get three replicas, a service started without
``SANDBUS_BUS_REPLICAS`` never shrinks them, and a client given every node's URL keeps working
when the node it is connected to is killed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from devtools.natsd import NatsCluster
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.connection import connect_nats


@pytest.mark.timeout(90)
async def test_a_three_node_bus_keeps_serving_when_a_node_dies(tmp_path: Path) -> None:
    async with NatsCluster(3, store_dir=tmp_path) as cluster:
        connection = await connect_nats(cluster.url, name="test", reconnect_wait=0.1)
        try:
            js = connection.js
            assert set((await ensure_bus(js, BusConfig(replicas=3))).values()) == {"created"}
            # A service without the setting: nothing is scaled down.
            assert set((await ensure_bus(js, BusConfig())).values()) == {"unchanged"}
            info = await js.stream_info("SANDBUS_MEMO")
            assert info.config.num_replicas == 3
            assert info.cluster is not None and len(info.cluster.replicas or []) == 2
            first = await js.publish("sandbus.memo.test.a", b"1", stream="SANDBUS_MEMO")
            connected = connection.client.connected_url
            assert connected is not None
            victim = next(n for n in cluster.nodes if n.port == connected.port)
            victim.kill()
            second = None
            for _ in range(150):  # the client moves to another node; the stream re-elects
                try:
                    second = await js.publish(
                        "sandbus.memo.test.b", b"2", stream="SANDBUS_MEMO", timeout=1
                    )
                    break
                except Exception:
                    await asyncio.sleep(0.1)
            assert second is not None and second.seq == first.seq + 1
            assert connection.client.connected_url.port != victim.port  # type: ignore[union-attr]
            victim.start()  # back on its ports and store, it rejoins
            assert (await js.stream_info("SANDBUS_MEMO")).state.messages == 2
        finally:
            await connection.close()
