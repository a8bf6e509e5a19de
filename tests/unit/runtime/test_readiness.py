"""What a worker process says at ``/readyz`` (``serve_worker``'s readiness): ready once
connected to NATS with its view of the world loaded from the bus; a standby once it knows who
leads."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from services.runtime.reconcile.serving import _Live, _waiting_for


def connection(connected: bool = True) -> Any:
    return SimpleNamespace(client=SimpleNamespace(is_connected=connected))


def worker(loaded: bool) -> Any:
    event = asyncio.Event()
    if loaded:
        event.set()
    return SimpleNamespace(feed=SimpleNamespace(loaded=event))


def elector(leading: bool, leader: str | None) -> Any:
    return SimpleNamespace(is_leader=lambda: leading, standing_by_for=leader)


def test_an_active_worker_is_ready_once_connected_and_loaded() -> None:
    assert _waiting_for(connection(False), _Live(worker(True))) == "not connected to NATS"
    assert _waiting_for(connection(), _Live()) == "loading the state table"
    assert _waiting_for(connection(), _Live(worker(False))) == "loading the state table"
    assert _waiting_for(connection(), _Live(worker(True))) is None


def test_a_standby_is_ready_once_it_knows_who_leads_and_a_leader_once_loaded() -> None:
    assert _waiting_for(connection(), _Live(None, elector(False, None))) == "no leader known yet"
    assert _waiting_for(connection(), _Live(None, elector(False, "other"))) is None
    leading = _Live(worker(False), elector(True, None))
    assert _waiting_for(connection(), leading) == "loading the state table"
    leading.worker = worker(True)
    assert _waiting_for(connection(), leading) is None
