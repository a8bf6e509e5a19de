"""What the tests that drive agent-sandbox's SDK against `sandbus up` share: the kinds as the
Kubernetes client addresses them, reading one object, waiting, and the end of the `sandbus up`
log for a failure's message. Imported after the SDK's ``importorskip``: it needs the
``kubernetes`` client, a dependency of the SDK."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

from kubernetes import client as k8s

from api.objects import Json

T = TypeVar("T")

NAMESPACE = "default"
EXTENSIONS = "extensions.agents.x-k8s.io"
AGENTS = ("agents.x-k8s.io", "v1beta1", "sandboxes")
CLAIMS = (EXTENSIONS, "v1beta1", "sandboxclaims")
POOLS = (EXTENSIONS, "v1beta1", "sandboxwarmpools")


def log_tail(tmp_path: Path, lines: int = 60) -> str:
    log = tmp_path / "up.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return "--- sandbus up (last lines)\n" + "\n".join(text.splitlines()[-lines:])


def eventually(
    what: str,
    probe: Callable[[], T | None],
    tmp_path: Path,
    timeout: float,
    seen: Callable[[], object] | None = None,
) -> T:
    """``probe()`` every 0.1 s until it returns something other than None; on timeout the
    failure shows ``seen()`` (when given) and the end of the `sandbus up` log."""
    deadline = time.monotonic() + timeout
    while (result := probe()) is None:
        if time.monotonic() > deadline:
            shown = f"; seen: {seen()}" if seen is not None else ""
            raise AssertionError(f"{what}: not within {timeout}s{shown}\n{log_tail(tmp_path)}")
        time.sleep(0.1)
    return result


def get(objects: k8s.CustomObjectsApi, kind: tuple[str, str, str], name: str) -> Json | None:
    """The object ``name`` of ``kind`` (group, version, plural) in the namespace, or None."""
    try:
        found = objects.get_namespaced_custom_object(*kind[:2], NAMESPACE, kind[2], name)
    except k8s.ApiException as error:
        if error.status == 404:
            return None
        raise
    return cast(Json, found)  # kubernetes >= 37 types custom objects as `object`
