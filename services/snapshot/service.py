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

from collections.abc import Mapping
from typing import Final

from services.runtime.worker_api import (
    BusConfig,
    Settings,
    WorkerDefinition,
    WorkerService,
    serve_worker,
    setting,
)
from services.snapshot.core.jobs import CommitterSettings
from services.snapshot.core.plan import CONTROLLER_NAME, SnapshotSettings
from services.snapshot.worker import snapshot_worker

__all__ = ["DEVELOPMENT_REGISTRY", "REGISTRY_ENV", "definition", "serve", "settings_from"]

_PREFIX = "SANDBUS_SNAPSHOT_"
REGISTRY_ENV: Final = _PREFIX + "REGISTRY"
DEVELOPMENT_REGISTRY: Final = "registry.sandbus.local/snapshots"


def settings_from(env: Mapping[str, str] | None = None) -> SnapshotSettings:
    """The settings of ``env`` (the process's environment by default)."""

    def text(name: str, default: str) -> str:
        return setting(_PREFIX + name, str, default, env=env)

    defaults = CommitterSettings()
    return SnapshotSettings(
        registry=text("REGISTRY", ""),
        committer=CommitterSettings(
            image=text("COMMITTER_IMAGE", defaults.image),
            push_secret=text("PUSH_SECRET", ""),
            registry_insecure=setting(_PREFIX + "REGISTRY_INSECURE", bool, False, env=env),
            containerd_socket=text("CONTAINERD_SOCKET", defaults.containerd_socket),
            commit_timeout=setting(
                _PREFIX + "COMMIT_TIMEOUT", float, defaults.commit_timeout, minimum=1, env=env
            ),
        ),
        events=setting(_PREFIX + "EVENTS", bool, True, env=env),
    )


def definition() -> WorkerDefinition:
    """The snapshot worker as this environment configures it."""
    return snapshot_worker(settings_from())


async def serve(settings: Settings, *, bus: BusConfig | None = None) -> None:
    """Run the snapshot worker until cancelled."""
    service = WorkerService(definition(), field_manager=CONTROLLER_NAME, replicas="leader")
    await serve_worker(settings, service, bus=bus)
