"""The objects the development cluster's conformance suite builds: the ``widgets.example.com``
CRD with every feature the rows exercise (status and scale subresources, a schema with bounds,
an enum, a default and an unknown-fields-preserving subtree, a printer column and a selectable
field), Widgets and Pods to create, and :func:`failure` for a call that must fail.

The fixtures that start the cluster are in this directory's conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from api.objects import Json
from devtools.cluster import WatchSettings

GROUP = "example.com"
VERSION = "v1"
PLURAL = "widgets"
MERGE = "application/merge-patch+json"

WIDGET_CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
                ],
                "selectableFields": [{"jsonPath": ".spec.color"}],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer", "minimum": 0, "maximum": 10},
                                    "replicas": {"type": "integer", "default": 1},
                                    "color": {"type": "string", "enum": ["red", "blue"]},
                                    "extra": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "selector": {"type": "string"},
                                    "phase": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def fast_watch() -> WatchSettings:
    return WatchSettings(
        bookmark_interval=60.0, bookmark_before_deadline=0.3, too_large_wait=0.3, idle_check=0.05
    )


def widget(name: str = "w1", **spec: Any) -> Json:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec or {"size": 1},
    }


def pod(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> Json:
    spec.setdefault("containers", [{"name": "app", "image": "nginx:1.25"}])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


async def failure(call: Awaitable[Any]) -> tuple[int, Json]:
    """Await a client call that must fail; returns the HTTP status and the Status body."""
    with pytest.raises(ApiException) as caught:
        await call
    return caught.value.status, json.loads(caught.value.body)


async def create_widget(custom: k8s.CustomObjectsApi, name: str = "w1", **spec: Any) -> Json:
    created: Json = await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, widget(name, **spec)
    )
    return created
