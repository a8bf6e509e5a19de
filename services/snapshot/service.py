"""``sandbus run snapshot``: the snapshot worker as a process.

The worker (:mod:`services.snapshot.worker`) on the runtime's process shell
(:func:`~services.runtime.reconcile.serving.serve_worker`), active-passive on the Lease
``sandbus-snapshot``: one writer creates a snapshot's commit Job. It writes as
``sandboxsnapshot-controller``.

Environment, besides the shell's (upstream's flag after each):

``SANDBUS_SNAPSHOT_REGISTRY``
    Where committed images are pushed, e.g. ``registry.example.com/sandboxes``
    (``--snapshot-registry``). Unset: every snapshot fails with ``RegistryNotConfigured``.
    ``sandbus up`` on the development cluster sets ``registry.sandbus.local/snapshots``, whose
    simulated commit pushes nowhere.
``SANDBUS_SNAPSHOT_PUSH_SECRET``
    A ``kubernetes.io/dockerconfigjson`` Secret in the sandbox's namespace that the commit Job
    logs in with (``--snapshot-push-secret``).
``SANDBUS_SNAPSHOT_REGISTRY_INSECURE``
    ``true`` or ``false`` (default): push over plain HTTP (``--snapshot-registry-insecure``).
``SANDBUS_SNAPSHOT_COMMITTER_IMAGE``
    The image-committer image, default ``image-committer:dev`` (``--image-committer-image``).
``SANDBUS_SNAPSHOT_CONTAINERD_SOCKET``
    containerd's socket on the nodes, default ``/var/run/containerd/containerd.sock``
    (``--containerd-socket-path``).
``SANDBUS_SNAPSHOT_COMMIT_TIMEOUT``
    Seconds a commit Job may run, default 600 (``--commit-job-timeout``).
``SANDBUS_SNAPSHOT_EVENTS``
    ``true`` (default) or ``false``: record the Kubernetes Event ``CreatedJob``.

A value that does not parse stops the service at start, with the variable named.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Final

from services.runtime.bus import BusConfig
from services.runtime.reconcile.serving import WorkerService, serve_worker
from services.runtime.reconcile.worker import WorkerDefinition
from services.runtime.settings import Settings
from services.snapshot.core.jobs import CommitterSettings
from services.snapshot.core.plan import CONTROLLER_NAME, SnapshotSettings
from services.snapshot.worker import snapshot_worker

__all__ = ["DEVELOPMENT_REGISTRY", "REGISTRY_ENV", "definition", "serve", "settings_from"]

_PREFIX = "SANDBUS_SNAPSHOT_"
REGISTRY_ENV: Final = _PREFIX + "REGISTRY"
DEVELOPMENT_REGISTRY: Final = "registry.sandbus.local/snapshots"


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    text = env.get(_PREFIX + name, "").strip().lower()
    if not text:
        return default
    if text not in ("true", "false"):
        raise ValueError(f"{_PREFIX}{name}={text!r}: expected true or false")
    return text == "true"


def _text(env: Mapping[str, str], name: str, default: str) -> str:
    return env.get(_PREFIX + name, "").strip() or default


def settings_from(env: Mapping[str, str]) -> SnapshotSettings:
    defaults = CommitterSettings()
    timeout_text = env.get(_PREFIX + "COMMIT_TIMEOUT", "").strip()
    timeout = defaults.commit_timeout
    if timeout_text:
        try:
            timeout = float(timeout_text)
        except ValueError:
            timeout = math.nan
        if not (math.isfinite(timeout) and timeout >= 1):
            raise ValueError(
                f"{_PREFIX}COMMIT_TIMEOUT={timeout_text!r}: expected seconds, 1 or more"
            )
    return SnapshotSettings(
        registry=_text(env, "REGISTRY", ""),
        committer=CommitterSettings(
            image=_text(env, "COMMITTER_IMAGE", defaults.image),
            push_secret=_text(env, "PUSH_SECRET", ""),
            registry_insecure=_flag(env, "REGISTRY_INSECURE", False),
            containerd_socket=_text(env, "CONTAINERD_SOCKET", defaults.containerd_socket),
            commit_timeout=timeout,
        ),
        events=_flag(env, "EVENTS", True),
    )


def definition() -> WorkerDefinition:
    """The snapshot worker as this environment configures it."""
    return snapshot_worker(settings_from(os.environ))


async def serve(settings: Settings, *, bus: BusConfig | None = None) -> None:
    """Run the snapshot worker until cancelled."""
    service = WorkerService(definition(), field_manager=CONTROLLER_NAME, replicas="leader")
    await serve_worker(settings, service, bus=bus)
