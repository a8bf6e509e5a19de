"""The control plane's in-process loops (CRDs, namespaces) run on the shared work queue: a pass
that fails is tried again with backoff, and the loop is idle only once nothing is left to try."""

from __future__ import annotations

import asyncio

from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.controllers.lifecycle import _Loop


async def test_a_failed_pass_is_tried_again_and_the_loop_is_idle_only_after_it_finishes() -> None:
    calls: list[str] = []

    async def work(key: str) -> bool:
        calls.append(key)
        if len(calls) == 1:
            raise StatusError(409, "Conflict", "the object has been modified")
        if len(calls) == 2:
            raise RuntimeError("a bug")
        return len(calls) > 3  # the third pass answers "not finished"

    loop = _Loop("test-controller", work)
    loop.add("ns")
    assert not loop.idle.is_set()
    loop.start()
    try:
        async with asyncio.timeout(5):
            await loop.idle.wait()
    finally:
        await loop.stop()
    assert calls == ["ns"] * 4


async def test_keys_added_while_one_is_worked_on_are_each_served_once() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    calls: list[str] = []

    async def work(key: str) -> bool:
        calls.append(key)
        if key == "a" and len(calls) == 1:
            started.set()
            await release.wait()
        return True

    loop = _Loop("test-controller", work)
    loop.start()
    try:
        loop.add("a")
        await started.wait()
        for key in ("b", "a", "b"):
            loop.add(key)
        release.set()
        async with asyncio.timeout(5):
            await loop.idle.wait()
    finally:
        await loop.stop()
    assert calls == ["a", "b", "a"]
