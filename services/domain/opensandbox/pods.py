"""When an OpenSandbox Pod can be handed to a sandbox: the Pool allocates only such Pods, and a
BatchSandbox counts only such Pods as ready."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.objects import is_ready

__all__ = ["is_pod_ready"]


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    """Running with the Ready condition True: what a sandbox can be handed."""
    status = pod.get("status")
    return isinstance(status, Mapping) and status.get("phase") == "Running" and is_ready(pod)
