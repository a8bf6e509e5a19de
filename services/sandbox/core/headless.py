"""A Sandbox's headless Service (docs/agent-sandbox.md §2.3 to §2.5; upstream ``reconcileService``
and ``servicePortsForSandbox``).

``spec.service`` has three values. ``true``: a headless Service named like the Sandbox
(``clusterIP: None``, selecting the Pod by its name-hash label, ports derived from the
containers) is created, or adopted, or repaired. ``false``: the Service the Sandbox owns is
deleted. Unset: an owned Service is kept and repaired (but its ports left alone), an unowned
one ignored, and none created. A Service controlled by someone else is an error either way
except ``false``, where it is simply not the Sandbox's to delete.

Adoption of an unowned Service (only with ``service: true``) needs the adoptable or the
name-hash label and a headless (or unset) clusterIP, which is immutable; it is a full Update
(PUT, with the resourceVersion it was read at) that sets labels, selector, ports and the
controller reference; a 409 Conflict (another writer, maybe another adopter, came first) reads
the Service again and plans anew. Drift of an owned Service (label, selector, and ports when
``service: true``) is repaired with a merge patch.

Ports: every ``containers[].ports[]`` and those of native sidecars (init containers with
``restartPolicy: Always``); port 0 skipped; protocol defaults to TCP; one Service port per
(port, protocol), which keeps the first explicit name not already taken; sorted by port then
protocol; unnamed ports become ``p-<port>-<protocol>``, with ``-2``, ``-3``… if that name is
taken; ``targetPort`` is the port number. No ports: the field is left out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api.agents import Sandbox, SandboxSpec
from api.keys import LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH
from api.objects import Json, is_deleting, labels_of, uid_of
from api.patching.merge import merge_patch
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Replace
from services.sandbox.core.objects import (
    Ownership,
    adoptable,
    owned_by_other_message,
    ownership,
    with_controller,
)
from services.sandbox.core.pods import sandbox_reference

__all__ = ["ServicePlan", "plan_service", "service_ports"]


def _ports_of(container: Any) -> list[Mapping[str, Any]]:
    if not isinstance(container, Mapping):
        return []
    return [port for port in container.get("ports") or () if isinstance(port, Mapping)]


def service_ports(spec: SandboxSpec) -> list[Json] | None:
    """The Service ports derived from the pod template, or None when there are none."""
    pod_spec = spec.pod_template.spec
    containers = list(pod_spec.get("containers") or ())
    containers += [
        container
        for container in pod_spec.get("initContainers") or ()
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always"
    ]
    names: dict[tuple[int, str], str] = {}
    reserved: set[str] = set()
    for container in containers:
        for port in _ports_of(container):
            number = port.get("containerPort")
            if not isinstance(number, int) or number == 0:
                continue
            key = (number, str(port.get("protocol") or "TCP"))
            names.setdefault(key, "")
            # The first explicit name of a (port, protocol) wins, unless another port took it.
            name = str(port.get("name") or "")
            if not name or names[key] or name in reserved:
                continue
            names[key] = name
            reserved.add(name)
    if not names:
        return None
    ports: list[Json] = []
    for number, protocol in sorted(names):
        name = names[(number, protocol)] or _generated_name(number, protocol, reserved)
        reserved.add(name)
        ports.append({"name": name, "protocol": protocol, "port": number, "targetPort": number})
    return ports


def _generated_name(port: int, protocol: str, reserved: set[str]) -> str:
    base = f"p-{port}-{protocol.lower()}"
    if base not in reserved:
        return base
    suffix = 2
    while f"{base}-{suffix}" in reserved:
        suffix += 1
    return f"{base}-{suffix}"


def _ports_equal(existing: Any, desired: list[Json] | None) -> bool:
    existing = [port for port in existing or () if isinstance(port, Mapping)]
    desired = desired or []
    if len(existing) != len(desired):
        return False
    fields = ("name", "protocol", "port", "targetPort")
    return all(
        all(have.get(field) == want.get(field) for field in fields)
        for have, want in zip(existing, desired, strict=True)
    )


@dataclass(frozen=True)
class ServicePlan:
    service: Json | None = None
    """The Service the Sandbox uses (for its status and readiness), after these actions."""
    actions: tuple[Action, ...] = ()
    error: str | None = None


def _new_service(sandbox: Sandbox, name_hash: str, ports: list[Json] | None) -> Json:
    spec: Json = {"clusterIP": "None", "selector": {LABEL_SANDBOX_NAME_HASH: name_hash}}
    if ports:
        spec["ports"] = ports
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": sandbox.metadata.name,
            "namespace": sandbox.metadata.namespace,
            "labels": {LABEL_SANDBOX_NAME_HASH: name_hash},
            "ownerReferences": [sandbox_reference(sandbox)],
        },
        "spec": spec,
    }


def plan_service(sandbox: Sandbox, existing: Json | None, name_hash: str) -> ServicePlan:
    wanted = sandbox.spec.service
    ports = service_ports(sandbox.spec)
    name = sandbox.metadata.name or ""
    key = ObjectKey("Service", sandbox.metadata.namespace or "", name)

    if existing is None:
        if wanted:
            service = _new_service(sandbox, name_hash, ports)
            return ServicePlan(service, (Create(service, why="create the headless Service"),))
        return ServicePlan()

    owner = ownership(existing, sandbox.metadata.uid or "")
    if wanted is False:
        if owner is Ownership.OWNED and not is_deleting(existing):
            delete = Delete(key, uid=uid_of(existing), why="spec.service is false")
            return ServicePlan(None, (delete,))
        return ServicePlan()
    if owner is Ownership.OTHER:
        return ServicePlan(error=owned_by_other_message("service", existing, name))
    if owner is Ownership.UNOWNED:
        if wanted is None:
            return ServicePlan()  # neither asked for nor ours: not adopted
        if not adoptable(existing, name_hash):
            return ServicePlan(
                error=(
                    f'cannot adopt unowned service "{name}": missing required pool authorization '
                    f'label ("{LABEL_ADOPTABLE}") or sandbox tracking label '
                    f'("{LABEL_SANDBOX_NAME_HASH}")'
                )
            )
        cluster_ip = str((existing.get("spec") or {}).get("clusterIP") or "")
        if cluster_ip not in ("", "None"):
            return ServicePlan(
                error=(
                    f'cannot adopt service "{name}": ClusterIP is "{cluster_ip}" '
                    '(expected "None", field is immutable)'
                )
            )
        adopted = copy.deepcopy(existing)
        metadata = adopted.setdefault("metadata", {})
        metadata["labels"] = {**labels_of(existing), LABEL_SANDBOX_NAME_HASH: name_hash}
        metadata["ownerReferences"] = with_controller(existing, sandbox_reference(sandbox))
        adopted_spec = adopted.setdefault("spec", {})
        adopted_spec["selector"] = {LABEL_SANDBOX_NAME_HASH: name_hash}
        if ports:
            adopted_spec["ports"] = ports
        else:
            adopted_spec.pop("ports", None)
        adopt = Replace(adopted, why="adopt the Service", on_conflict="refresh")
        return ServicePlan(adopted, (adopt,))

    # Owned: repair drift of what the Sandbox decides.
    found = existing.get("spec")
    spec: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    before: Json = {
        "metadata": {"labels": dict(labels_of(existing))},
        "spec": {"selector": dict(spec.get("selector") or {})},
    }
    after: Json = {
        "metadata": {"labels": {**labels_of(existing), LABEL_SANDBOX_NAME_HASH: name_hash}},
        "spec": {"selector": {LABEL_SANDBOX_NAME_HASH: name_hash}},
    }
    if wanted and not _ports_equal(spec.get("ports"), ports):
        before["spec"]["ports"] = spec.get("ports")
        after["spec"]["ports"] = ports
    patch = merge_patch(before, after)
    if not patch:
        return ServicePlan(existing)
    return ServicePlan(existing, (Patch(key, patch, why="repair the Service's drift"),))
