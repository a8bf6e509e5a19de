"""``sandbus run claim``: the claim worker as a process.

The worker (:mod:`services.claim.worker`) on the runtime's process shell
(:func:`~services.runtime.reconcile.serving.serve_worker`), active on every replica with the
claims divided among the live replicas (``replicas="shards"``); every replica takes from the
same durable consumer of each warm queue, which hands an entry to exactly one of them. It
writes as ``sandboxclaim-controller``.

Environment, besides the shell's (upstream's flag after each):

``SANDBUS_CLAIM_ACK_WAIT``
    Seconds a warm entry taken by a replica that died stays away before it is offered again,
    default 30.
``SANDBUS_CLAIM_POD_IP_GRACE``
    Seconds after its creation a claim waits for an offered sandbox's pod IP, default 2.
``SANDBUS_CLAIM_EVENTS``
    ``true`` (default) or ``false``: record Kubernetes Events (``--disable-claim-events``).
``SANDBUS_CLAIM_OBSERVABILITY_ANNOTATIONS``
    ``true`` (default) or ``false``: stamp ``controller-first-observed-at`` on each claim
    (``--disable-claim-observability-annotations``).
``SANDBUS_CLAIM_ALLOWED_LABEL_DOMAINS``
    Comma- or newline-separated domains that additionalPodMetadata labels may use, default
    ``sandbox.users.io`` (upstream reads them from
    ``/etc/sandbox-config/allowed-label-domains``; so does this, when the variable is unset and
    the file exists).

``SANDBUS_CLAIM_RESUME_PULL_SECRET``
    An image pull Secret a BatchSandbox resuming from its pause snapshot gets in its template,
    for the snapshot registry (``--resume-pull-secret``); default none.

A value that does not parse stops the service at start, with the variable named.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from services.claim.core.metadata import DEFAULT_ALLOWED_LABEL_DOMAINS, parse_allowed_label_domains
from services.claim.core.observation import ClaimSettings
from services.claim.core.plan import CONTROLLER_NAME
from services.claim.core.spread import queued_nodes
from services.claim.worker import claim_worker
from services.runtime.worker_api import (
    BusConfig,
    Settings,
    WarmTaker,
    WorkerDefinition,
    WorkerService,
    WorkerSettings,
    serve_worker,
    setting,
)

__all__ = ["ALLOWED_LABEL_DOMAINS_FILE", "definition", "serve", "settings_from"]

_PREFIX = "SANDBUS_CLAIM_"
ALLOWED_LABEL_DOMAINS_FILE = Path("/etc/sandbox-config/allowed-label-domains")


def settings_from(
    env: Mapping[str, str] | None = None, domains_file: Path = ALLOWED_LABEL_DOMAINS_FILE
) -> ClaimSettings:
    """The settings of ``env`` (the process's environment by default)."""
    # Unset, not blank, is what sends it to the file, as upstream reads the file only then.
    text = (os.environ if env is None else env).get(_PREFIX + "ALLOWED_LABEL_DOMAINS")
    if text is None and domains_file.is_file():
        text = domains_file.read_text()
    domains = parse_allowed_label_domains(text) if text else DEFAULT_ALLOWED_LABEL_DOMAINS
    grace = ClaimSettings().pod_ip_grace
    return ClaimSettings(
        allowed_label_domains=domains,
        pod_ip_grace=setting(
            _PREFIX + "POD_IP_GRACE", float, grace, minimum=0, above=True, env=env
        ),
        events=setting(_PREFIX + "EVENTS", bool, True, env=env),
        observability_annotations=setting(
            _PREFIX + "OBSERVABILITY_ANNOTATIONS", bool, True, env=env
        ),
    )


def definition() -> WorkerDefinition:
    """The claim worker as this environment configures it."""
    ack_wait = setting(_PREFIX + "ACK_WAIT", float, 30.0, minimum=0, above=True)
    return claim_worker(
        settings_from(),
        WarmTaker(ack_wait=ack_wait, spread=queued_nodes),
        resume_pull_secret=setting(_PREFIX + "RESUME_PULL_SECRET", str, ""),
    )


async def serve(settings: Settings, *, bus: BusConfig | None = None) -> None:
    """Run the claim worker until cancelled."""
    service = WorkerService(
        definition(),
        field_manager=CONTROLLER_NAME,
        replicas="shards",
        settings=WorkerSettings(concurrency=32),
    )
    await serve_worker(settings, service, bus=bus)
