"""What the OpenSandbox end-to-end tests share: reading BatchSandboxes and their Pods through the
API, a Pool to create, and a command that must succeed."""

from __future__ import annotations

import asyncio
import json

from api.opensandbox import (
    ANNOTATION_ALLOC_STATUS,
)
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError
from tests.support.samples import NS, Json


async def run(*command: str) -> str:
    """A command's standard output; it must succeed."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


def pool_body(name: str, *, buffer: tuple[int, int], pool: tuple[int, int]) -> Json:
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "Pool",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "template": {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}},
            "capacitySpec": {
                "bufferMin": buffer[0],
                "bufferMax": buffer[1],
                "poolMin": pool[0],
                "poolMax": pool[1],
            },
            "scaleStrategy": {"maxUnavailable": "100%"},
        },
    }


def pods_of(sandbox: Json, key: str = ANNOTATION_ALLOC_STATUS) -> list[str]:
    text = (sandbox["metadata"].get("annotations") or {}).get(key)
    return list(json.loads(text)["pods"]) if text else []


async def get(kube: KubeApi, kind: str, name: str) -> Json | None:
    try:
        return await kube.get(ObjectKey(kind, NS, name))
    except KubeError as error:
        if error.not_found:
            return None
        raise


def conditions(sandbox: Json | None) -> dict[str, str]:
    found = ((sandbox or {}).get("status") or {}).get("conditions") or ()
    return {c["type"]: c.get("reason", "") for c in found if c.get("status") == "True"}
