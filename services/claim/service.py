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

import math
import os
from collections.abc import Mapping
from pathlib import Path

from services.claim.core.metadata import DEFAULT_ALLOWED_LABEL_DOMAINS, parse_allowed_label_domains
from services.claim.core.observation import ClaimSettings
from services.claim.core.plan import CONTROLLER_NAME
from services.claim.core.spread import queued_nodes
from services.claim.worker import claim_worker
from services.runtime.bus import BusConfig
from services.runtime.reconcile.serving import WorkerService, serve_worker
from services.runtime.reconcile.warm import WarmTaker
from services.runtime.reconcile.worker import WorkerDefinition, WorkerSettings
from services.runtime.settings import Settings

__all__ = ["ALLOWED_LABEL_DOMAINS_FILE", "definition", "serve", "settings_from"]

_PREFIX = "SANDBUS_CLAIM_"
ALLOWED_LABEL_DOMAINS_FILE = Path("/etc/sandbox-config/allowed-label-domains")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(_PREFIX + name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{_PREFIX}{name}={text!r}: expected a positive number of seconds")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    text = env.get(_PREFIX + name, "").strip().lower() or "true"
    if text not in ("true", "false"):
        raise ValueError(f"{_PREFIX}{name}={text!r}: expected true or false")
    return text == "true"


def settings_from(
    env: Mapping[str, str], domains_file: Path = ALLOWED_LABEL_DOMAINS_FILE
) -> ClaimSettings:
    text = env.get(_PREFIX + "ALLOWED_LABEL_DOMAINS")
    if text is None and domains_file.is_file():
        text = domains_file.read_text()
    domains = parse_allowed_label_domains(text) if text else DEFAULT_ALLOWED_LABEL_DOMAINS
    return ClaimSettings(
        allowed_label_domains=domains,
        pod_ip_grace=_seconds(env, "POD_IP_GRACE", ClaimSettings().pod_ip_grace),
        events=_flag(env, "EVENTS"),
        observability_annotations=_flag(env, "OBSERVABILITY_ANNOTATIONS"),
    )


def _taker(env: Mapping[str, str]) -> WarmTaker:
    return WarmTaker(ack_wait=_seconds(env, "ACK_WAIT", 30.0), spread=queued_nodes)


def definition() -> WorkerDefinition:
    """The claim worker as this environment configures it."""
    return claim_worker(
        settings_from(os.environ),
        _taker(os.environ),
        resume_pull_secret=os.environ.get(_PREFIX + "RESUME_PULL_SECRET", "").strip(),
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
