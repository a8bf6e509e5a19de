"""The scale subresource: a custom object seen as an ``autoscaling/v1`` Scale, and back.

The CRD's ``specReplicasPath``, ``statusReplicasPath`` and ``labelSelectorPath`` are simple
JSON paths (``.spec.replicas``); GET builds ``{spec.replicas, status.replicas,
status.selector}`` from them and a write through ``/scale`` sets ``specReplicasPath`` on the
object, which then goes through the normal update (so generation moves, as upstream).
"""

from __future__ import annotations

import copy
from typing import Any

from api.objects import Json
from devtools.cluster.apirules.errors import field_invalid, invalid
from devtools.cluster.apirules.resources import ResourceType, ScaleSpec

__all__ = ["get_path", "object_with_scale", "scale_of", "set_path"]


def _parts(path: str) -> list[str]:
    return [p for p in path.lstrip(".").split(".") if p]


def get_path(obj: Any, path: str) -> Any:
    current = obj
    for part in _parts(path):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


def set_path(obj: Json, path: str, value: Any) -> None:
    parts = _parts(path)
    current = obj
    for part in parts[:-1]:
        nxt = current.get(part)
        if not isinstance(nxt, dict):
            nxt = current[part] = {}
        current = nxt
    current[parts[-1]] = value


def scale_of(rtype: ResourceType, obj: Json) -> Json:
    """The autoscaling/v1 Scale of a custom object."""
    spec = rtype.scale
    assert spec is not None
    meta = obj["metadata"]
    scale_meta = {
        key: meta[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if key in meta
    }
    status: Json = {"replicas": int(get_path(obj, spec.status_replicas_path) or 0)}
    if spec.label_selector_path:
        selector = get_path(obj, spec.label_selector_path)
        if isinstance(selector, str) and selector:
            status["selector"] = selector
    replicas = get_path(obj, spec.spec_replicas_path)
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": replicas} if replicas is not None else {},
        "status": status,
    }


def object_with_scale(rtype: ResourceType, obj: Json, scale: Json) -> Json:
    """``obj`` with the replicas of ``scale`` written to ``specReplicasPath``.

    The Scale's ``metadata.resourceVersion`` (if any) becomes the object's, so it acts as the
    precondition of the update that follows.
    """
    spec: ScaleSpec | None = rtype.scale
    assert spec is not None
    if not isinstance(scale, dict) or scale.get("kind") not in (None, "", "Scale"):
        raise invalid(
            "autoscaling",
            "Scale",
            obj["metadata"]["name"],
            [
                field_invalid(
                    "kind", scale.get("kind") if isinstance(scale, dict) else scale, "must be Scale"
                )
            ],
        )
    replicas = (scale.get("spec") or {}).get("replicas", 0)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise invalid(
            "autoscaling",
            "Scale",
            obj["metadata"]["name"],
            [field_invalid("spec.replicas", replicas, "must be greater than or equal to 0")],
        )
    result = copy.deepcopy(obj)
    set_path(result, spec.spec_replicas_path, replicas)
    rv = (scale.get("metadata") or {}).get("resourceVersion")
    if rv:
        result["metadata"]["resourceVersion"] = rv
    return result
