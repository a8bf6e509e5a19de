"""What makes a Sandbox impossible to act on, said so that a person can fix it.

The CRD schema accepts any pod spec (it is an embedded object), so a Sandbox can pass the API
server and still describe a Pod, PVC or Service that the API server will refuse. Upstream finds
out by trying: every pass fails the same create, and the Sandbox shows
``ReconcilerError: Error seen: Pod "x" is invalid: …``. We check the mistakes that are
certain to fail before trying, and report them as Ready=False with upstream's reason
``InvalidConfiguration`` (v1.0.4) and a message that names each field and its fix. The reason
is terminal: nothing is created for such a Sandbox and nothing is retried until its spec
changes (that change is an event, which wakes it again); other Sandboxes are not affected. A
claim forwards its Sandbox's Ready condition, so the claim carries the reason too, and the SDK
stops waiting at once.

Earlier versions of sandbus wrote the reason ``InvalidSpec``; the next pass over such a Sandbox
computes the condition again and writes ``InvalidConfiguration`` in its place (the status
stays False, so ``lastTransitionTime`` does not move).

Anything the API server refuses that is not caught here still surfaces: the refused write's
error is the next pass's ``last_error``, reported as ``ReconcilerError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from api.agents import REASON_INVALID_CONFIGURATION, SERVICE_NAME_MAX_LENGTH, Sandbox

__all__ = ["REASON_INVALID_CONFIGURATION", "parse_time", "problems"]

_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MAX_LABEL = SERVICE_NAME_MAX_LENGTH
_MAX_SUBDOMAIN = 253


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time with a zone, or None."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _containers(pod_spec: Mapping[str, Any], field: str) -> list[Any]:
    value = pod_spec.get(field)
    return value if isinstance(value, list) else []


def problems(sandbox: Sandbox) -> list[str]:
    """Every reason the Sandbox's spec cannot be turned into objects, in field order."""
    found: list[str] = []
    name = sandbox.metadata.name or ""
    spec = sandbox.spec
    pod_spec = spec.pod_template.spec

    containers = _containers(pod_spec, "containers")
    if not containers:
        found.append(
            "spec.podTemplate.spec.containers is empty: a Pod needs at least one container"
        )
    volume_names = {
        str(volume.get("name"))
        for volume in pod_spec.get("volumes") or ()
        if isinstance(volume, Mapping) and volume.get("name")
    }
    for field in ("initContainers", "containers"):
        for index, container in enumerate(_containers(pod_spec, field)):
            where = f"spec.podTemplate.spec.{field}[{index}]"
            if not isinstance(container, Mapping):
                found.append(f"{where} is not an object")
                continue
            if not container.get("name"):
                found.append(f"{where} has no name")
            if not container.get("image"):
                found.append(f"{where} has no image")

    claim_names: set[str] = set()
    for index, template in enumerate(spec.volume_claim_templates or ()):
        where = f"spec.volumeClaimTemplates[{index}]"
        template_name = template.metadata.name if template.metadata else None
        if not template_name:
            found.append(f"{where} has no metadata.name: it names the PVC and the volume")
            continue
        if template_name in claim_names:
            found.append(f"{where}: the name {template_name!r} is used twice")
        claim_names.add(template_name)
        pvc_name = f"{template_name}-{name}"
        if len(pvc_name) > _MAX_SUBDOMAIN or not _DNS_SUBDOMAIN.match(pvc_name):
            found.append(
                f"{where}: the PVC name {pvc_name!r} (<template>-<sandbox>) is not a valid "
                f"object name (lower-case DNS subdomain, at most {_MAX_SUBDOMAIN} characters); "
                "shorten the template or the Sandbox name"
            )

    for field in ("initContainers", "containers"):
        for container in _containers(pod_spec, field):
            if not isinstance(container, Mapping):
                continue
            for mount in container.get("volumeMounts") or ():
                volume = mount.get("name") if isinstance(mount, Mapping) else None
                if volume and volume not in volume_names and volume not in claim_names:
                    found.append(
                        f"container {container.get('name')!r} mounts volume {volume!r}, which is "
                        "neither in spec.podTemplate.spec.volumes nor a volumeClaimTemplate"
                    )

    if spec.service and (len(name) > _MAX_LABEL or not _DNS_1035_LABEL.match(name)):
        found.append(
            f"spec.service is true but {name!r} cannot name a Service (a DNS-1035 label: at most "
            f"{_MAX_LABEL} lower-case letters, digits and '-', starting with a letter); "
            "use a shorter name or set spec.service to false"
        )
    if spec.shutdown_time is not None and parse_time(spec.shutdown_time) is None:
        found.append(
            f"spec.shutdownTime {spec.shutdown_time!r} is not an RFC 3339 time with a time zone"
        )
    return found
