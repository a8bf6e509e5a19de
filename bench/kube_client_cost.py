"""Benchmark: the client's CPU per Kubernetes API write, through kubernetes_asyncio's
``call_api`` and through the lean paths of ``services/runtime/kube.py``, beside a floor.

Run on purpose (it is not a test)::

    .venv/bin/python bench/kube_client_cost.py [--calls 2000] [--rounds 3]

``sandbus devcluster`` runs as its own process at 0 ms per write; this process is only the
client, so its CPU time (``time.process_time``) over a stretch of calls is what the client
spends on them. One call at a time, as a worker's write waits for its answer, four ways:

- **call_api**: :class:`KubeApi` sending through kubernetes_asyncio's ``ApiClient.call_api``
  with ``_preload_content=False`` (``via_call_api=True``), as every write went before the lean
  path: it walks the body and the parameters (``sanitize_for_serialization``,
  ``parameters_to_tuples``), dumps the JSON and builds the request in its REST client;
- **aiohttp lean**: :class:`KubeApi` with ``via_aiohttp=True``: the body encoded by msgspec
  and sent with the ``ApiClient``'s own aiohttp session, with its headers and its token (as
  the workers sent their writes before the http1 transport; still the way through a proxy);
- **http1 lean**: :class:`KubeApi` as the workers use it: the same headers and body, sent over
  the lean HTTP/1.1 connection pool of ``services/runtime/http1.py``;
- **floor**: the same requests from a bare aiohttp session with the headers, URLs and bodies
  encoded before the clock starts, each answer read and decoded by msgspec: what any Python
  client on aiohttp must spend (the http1 transport is below it).

The three ``KubeApi`` rows share one ``ApiClient`` made as the services make theirs
(``new_api_client`` from the kubeconfig the cluster wrote), and go through the same
``KubeApi._json`` (timeouts, error mapping, decoding), so the differences between them are
the ways of sending alone. The calls are ``--calls`` JSON merge patches of one ConfigMap (an
annotation and a data key that change with every call, as a worker's patch changes something),
and as many creates of ConfigMaps (deleted again, unmeasured, after each stretch); the ways
take turns for ``--rounds`` rounds, after a warm-up of each, and each figure is the median of
its rounds, in microseconds of client CPU per call. A second table repeats the calls with
aiohttp's session and the http1 pool replaced by a stub that answers at once: the Python each
way runs above its HTTP client. Wall time per call is shown too, but the cluster's own CPU is
in it (client and cluster share the machine's cores).

The Markdown table goes to stdout; progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from common import cluster_url, progress, start_devcluster, stop

from events.envelope import ObjectKey
from services.runtime.kube import MERGE_PATCH, KubeApi
from services.runtime.kubeclient import ApiClient, Configuration, kube_config, new_api_client

NAMESPACE = "default"
CONFIGMAPS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
FIELD_MANAGER = "bench-kube-client"
WAYS = ("call-api", "aiohttp", "http1", "floor")
"""The four ways, in the table's order (a ConfigMap name takes no underscore)."""
OPERATIONS = ("merge patch", "create")


def patch_body(index: int) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"bench.sandbus.dev/call": str(index)}},
        "data": {"call": str(index)},
    }


def config_map(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": "bench", "bench.sandbus.dev/kind": "create"},
        },
        "data": {"key": "value", "other": "x" * 64},
    }


class Floor:
    """The least a client on aiohttp does per call: one request with everything it sends
    ready, its answer read and decoded."""

    def __init__(self, host: str, headers: dict[str, str]) -> None:
        self.host = host
        self.headers = {"Accept": "application/json", **headers}
        self.session: Any = aiohttp.ClientSession()
        self.decoder = msgspec.json.Decoder()

    async def send(self, method: str, url: str, data: bytes, content_type: str) -> Any:
        headers = {**self.headers, "Content-Type": content_type}
        response = await self.session.request(method, url, data=data, headers=headers)
        try:
            raw = await response.read()
        finally:
            response.release()
        if response.status >= 300:
            raise RuntimeError(f"{method} {url}: {response.status} {raw[:200]!r}")
        return self.decoder.decode(raw)


class Canned:
    """In aiohttp's place, for the second table: every request is answered at once with
    ``body``, so that what is left is the Python each way runs above the HTTP client."""

    status = 200
    reason = "OK"

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def request(self, *args: Any, **kwargs: Any) -> Canned:
        return self

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        pass


class CannedPool(Canned):
    """The same in the http1 pool's place."""

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        return self.status, self.reason, self.body


Calls = list[Callable[[], Awaitable[Any]]]


@dataclass
class Way:
    """One way of making the calls: ``calls(operation, round, count)`` returns the calls of one
    stretch, everything they send prepared before the clock starts."""

    name: str
    calls: Callable[[str, int, int], Calls]
    cpu: dict[str, list[float]] = field(default_factory=dict)
    """Per operation, each round's CPU seconds per call (user and system)."""
    wall: dict[str, list[float]] = field(default_factory=dict)


def kube_way(name: str, kube: KubeApi) -> Way:
    key = ObjectKey("ConfigMap", NAMESPACE, "patched")

    def calls(operation: str, round_: int, count: int) -> Calls:
        if operation == "merge patch":
            bodies = [patch_body(round_ * count + index) for index in range(count)]
            return [functools.partial(kube.patch, key, body) for body in bodies]
        created = [config_map(f"{name}-{round_}-{index}") for index in range(count)]
        return [functools.partial(kube.create, body) for body in created]

    return Way(name, calls)


def floor_way(floor: Floor) -> Way:
    patch_url = f"{floor.host}{CONFIGMAPS}/patched?fieldManager={FIELD_MANAGER}"
    create_url = f"{floor.host}{CONFIGMAPS}?fieldManager={FIELD_MANAGER}"
    encode = msgspec.json.encode

    def calls(operation: str, round_: int, count: int) -> Calls:
        if operation == "merge patch":
            bodies = [encode(patch_body(round_ * count + index)) for index in range(count)]
            return [
                functools.partial(floor.send, "PATCH", patch_url, data, MERGE_PATCH)
                for data in bodies
            ]
        created = [encode(config_map(f"floor-{round_}-{index}")) for index in range(count)]
        return [
            functools.partial(floor.send, "POST", create_url, data, "application/json")
            for data in created
        ]

    return Way("floor", calls)


async def stretch(way: Way, operation: str, round_: int, count: int) -> None:
    """``count`` calls one after the other; round 0 is the warm-up, not recorded."""
    calls = way.calls(operation, round_, count)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    for call in calls:
        await call()
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    if round_:
        way.cpu.setdefault(operation, []).append(cpu / count)
        way.wall.setdefault(operation, []).append(wall / count)


async def delete_created(floor: Floor, prefix: str, count: int) -> None:
    """Delete a stretch's creates again (unmeasured), 32 at a time."""
    names = iter(f"{prefix}-{index}" for index in range(count))

    async def deleter() -> None:
        for name in names:
            url = f"{floor.host}{CONFIGMAPS}/{name}"
            async with floor.session.delete(url, headers=floor.headers) as response:
                await response.read()

    await asyncio.gather(*(deleter() for _ in range(32)))


async def api_client(kubeconfig: Path) -> ApiClient:
    """The client the services make (services.runtime.settings.kube_api_client)."""
    configuration = Configuration()
    await kube_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    return new_api_client(configuration)


async def rounds(
    ways: list[Way], args: argparse.Namespace, floor: Floor, *, canned: bool = False
) -> None:
    """A warm-up (round 0: connections, caches, the first calls' costs), then ``--rounds``
    rounds in which the ways take turns."""
    for round_ in range(args.rounds + 1):
        count = args.calls if round_ else min(200, args.calls)
        for operation in OPERATIONS:
            for way in ways:
                await stretch(way, operation, round_, count)
                if operation == "create" and not canned:
                    await delete_created(floor, f"{way.name}-{round_}", count)
            if round_:
                cells = ", ".join(f"{w.name} {w.cpu[operation][-1] * 1e6:.0f}" for w in ways)
                what = f"{operation}{' (canned)' if canned else ''}"
                progress(f"round {round_}/{args.rounds}, {what}: {cells} µs CPU/call")


async def measure(kubeconfig: Path, args: argparse.Namespace) -> tuple[list[Way], list[Way]]:
    """The four ways against the cluster, then again with the HTTP clients canned."""
    client = await api_client(kubeconfig)
    lean = KubeApi(client, field_manager=FIELD_MANAGER)
    assert lean._pool is not None, "the http1 transport is not in use"
    on_aiohttp = KubeApi(client, field_manager=FIELD_MANAGER, via_aiohttp=True)
    old = KubeApi(client, field_manager=FIELD_MANAGER, via_call_api=True)
    # The floor sends what the ApiClient sends: its User-Agent and token.
    headers = dict(client.default_headers)
    await client.update_params_for_auth(headers, [], ["BearerToken"])
    floor = Floor(str(client.configuration.host), headers)
    session, bare, pool = client.rest_client.pool_manager, floor.session, lean._pool

    def ways() -> list[Way]:
        return [
            kube_way(WAYS[0], old),
            kube_way(WAYS[1], on_aiohttp),
            kube_way(WAYS[2], lean),
            floor_way(floor),
        ]

    try:
        await lean.create(config_map("patched"))
        served = ways()
        await rounds(served, args, floor)
        answer = msgspec.json.encode(await lean.get(ObjectKey("ConfigMap", NAMESPACE, "patched")))
        client.rest_client.pool_manager = floor.session = Canned(answer)
        lean._pool = CannedPool(answer)  # type: ignore[assignment]
        canned = ways()
        await rounds(canned, args, floor, canned=True)
    finally:
        client.rest_client.pool_manager, floor.session, lean._pool = session, bare, pool
        await floor.session.close()
        await client.close()
    return served, canned


def report(served: list[Way], canned: list[Way], args: argparse.Namespace) -> None:
    def median(ways: list[Way], name: str, operation: str, wall: bool = False) -> float:
        (way,) = (way for way in ways if way.name == name)
        return statistics.median((way.wall if wall else way.cpu)[operation]) * 1e6

    print(
        f"\nClient CPU per call, µs (median of {args.rounds} rounds of {args.calls} calls, "
        "one at a time, `sandbus devcluster` at 0 ms per write)\n"
    )
    columns = "| operation | call_api | aiohttp lean | http1 lean | floor |"
    print(f"{columns} call_api / aiohttp | aiohttp / http1 | http1 / floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for operation in OPERATIONS:
        old, aiohttp_lean, lean, floor = (median(served, name, operation) for name in WAYS)
        print(
            f"| {operation} | {old:.0f} | {aiohttp_lean:.0f} | {lean:.0f} | {floor:.0f} "
            f"| {old / aiohttp_lean:.2f}x | {aiohttp_lean / lean:.2f}x | {lean / floor:.2f}x |"
        )
    print(
        "\nThe Python above the HTTP client, µs of CPU per call: the same calls with aiohttp's "
        "session and the http1 pool replaced by a stub that answers at once (the floor: awaiting "
        "it, reading and decoding)\n"
    )
    print(f"{columns} call_api - aiohttp lean |")
    print("|---|---:|---:|---:|---:|---:|")
    for operation in OPERATIONS:
        old, aiohttp_lean, lean, floor = (median(canned, name, operation) for name in WAYS)
        print(
            f"| {operation} | {old:.1f} | {aiohttp_lean:.1f} | {lean:.1f} | {floor:.1f} "
            f"| {old - aiohttp_lean:.1f} |"
        )
    print("\nWall time per call, µs (the cluster's CPU included)\n")
    print(columns)
    print("|---|---:|---:|---:|---:|")
    for operation in OPERATIONS:
        cells = " | ".join(f"{median(served, name, operation, wall=True):.0f}" for name in WAYS)
        print(f"| {operation} | {cells} |")


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-kube-client-"))
    kubeconfig = workdir / "kubeconfig"
    devcluster = start_devcluster(
        kubeconfig, workdir / "devcluster.log", pod_ready_delay=0.0, write_latency_ms=0.0, pods=0
    )
    failed = True
    try:
        await cluster_url(kubeconfig, devcluster)
        progress(f"sandbus devcluster up; {args.rounds} rounds of {args.calls} calls each way")
        served, canned = await measure(kubeconfig, args)
        failed = False
    finally:
        stop(devcluster)
        if failed:
            progress(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report(served, canned, args)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per stretch (2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way (3)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
