"""Admin HTTP endpoints under ``/_devcluster/``: faults and latency for other processes.

A multi-process test (watcher, workers and the development cluster in separate processes) has
no Python handle on the cluster, so the fault engine is also served over HTTP. These paths are
outside the Kubernetes API and bypass faults and latency (including pause):

- ``GET /_devcluster/state``: resourceVersion, object counts per resource, live watches, paused.
- ``GET|POST|DELETE /_devcluster/faults``: list rules / add one (a JSON object with the fields
  of :class:`~devtools.cluster.http.faults.FaultRule`) / clear all;
  ``DELETE /_devcluster/faults/{id}`` removes one.
- ``POST /_devcluster/pause`` and ``/resume``: 503 on every API request / back to normal.
- ``POST /_devcluster/compact``: drop the change history (every resume then gets 410).
- ``POST /_devcluster/watches`` with ``{"action": "close|abort|stall|expire", "resource": ...}``:
  act on live watches now.
- ``GET|PUT /_devcluster/latency``: read / change the latency model.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from devtools.cluster.http.faults import Faults, LatencyModel
from devtools.cluster.http.watch import WatchHub
from devtools.cluster.storage.store import Store

__all__ = ["ADMIN_PREFIX", "admin_routes"]

ADMIN_PREFIX = "/_devcluster"


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text="expected a JSON object")
    return data


def admin_routes(
    store: Store, faults: Faults, latency: LatencyModel, hub: WatchHub
) -> list[web.RouteDef]:
    async def state(request: web.Request) -> web.Response:
        return _json(
            {
                "resourceVersion": str(store.resource_version),
                "objects": {r: store.count(r) for r in store.resources()},
                "watches": [
                    {
                        "resource": w.info.resource,
                        "namespace": w.info.namespace,
                        "userAgent": w.info.user_agent,
                        "eventsSent": w.info.events_sent,
                    }
                    for w in hub.active()
                ],
                "paused": faults.paused,
            }
        )

    async def list_faults(request: web.Request) -> web.Response:
        return _json([rule.to_json() for rule in faults.rules])

    async def add_fault(request: web.Request) -> web.Response:
        try:
            rule = faults.add_json(await _body(request))
        except (TypeError, ValueError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        return _json(rule.to_json(), status=201)

    async def clear_faults(request: web.Request) -> web.Response:
        faults.clear()
        return _json({"cleared": True})

    async def remove_fault(request: web.Request) -> web.Response:
        if not faults.remove(int(request.match_info["rule_id"])):
            raise web.HTTPNotFound(text="no such rule")
        return _json({"removed": int(request.match_info["rule_id"])})

    async def pause(request: web.Request) -> web.Response:
        faults.pause()
        return _json({"paused": True})

    async def resume(request: web.Request) -> web.Response:
        faults.resume()
        return _json({"paused": False})

    async def compact(request: web.Request) -> web.Response:
        return _json({"compactedResourceVersion": str(faults.compact())})

    async def watches(request: web.Request) -> web.Response:
        data = await _body(request)
        action = data.get("action")
        if action not in ("close", "abort", "stall", "expire"):
            raise web.HTTPBadRequest(text="action must be one of close, abort, stall, expire")
        count = faults.break_watches(
            action, resource=data.get("resource"), namespace=data.get("namespace")
        )
        return _json({"affected": count})

    async def get_latency(request: web.Request) -> web.Response:
        return _json(latency.to_json())

    async def put_latency(request: web.Request) -> web.Response:
        try:
            latency.update(await _body(request))
        except (TypeError, ValueError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        return _json(latency.to_json())

    p = ADMIN_PREFIX
    return [
        web.get(f"{p}/state", state),
        web.get(f"{p}/faults", list_faults),
        web.post(f"{p}/faults", add_fault),
        web.delete(f"{p}/faults", clear_faults),
        web.delete(f"{p}/faults/{{rule_id:\\d+}}", remove_fault),
        web.post(f"{p}/pause", pause),
        web.post(f"{p}/resume", resume),
        web.post(f"{p}/compact", compact),
        web.post(f"{p}/watches", watches),
        web.get(f"{p}/latency", get_latency),
        web.put(f"{p}/latency", put_latency),
    ]
