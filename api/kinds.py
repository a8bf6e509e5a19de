"""The seven kinds sandbus serves, and lookups from the names a request or an event carries.

One tuple lists them, so the CRD generator, the development cluster and the watcher agree on
what exists; adding a kind is one line here.
"""

from __future__ import annotations

from collections.abc import Mapping

from api.agents import Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool
from api.meta import Resource
from api.opensandbox import BatchSandbox, Pool, SandboxSnapshot

__all__ = ["ALL_KINDS", "kind_for", "kind_for_resource"]

ALL_KINDS: tuple[type[Resource], ...] = (
    Sandbox,
    SandboxTemplate,
    SandboxClaim,
    SandboxWarmPool,
    Pool,
    BatchSandbox,
    SandboxSnapshot,
)

_BY_API_VERSION_AND_KIND: Mapping[tuple[str, str], type[Resource]] = {
    (kind.KIND.api_version, kind.KIND.kind): kind for kind in ALL_KINDS
}
_BY_GROUP_VERSION_AND_PLURAL: Mapping[tuple[str, str, str], type[Resource]] = {
    (kind.KIND.group, kind.KIND.version, kind.KIND.plural): kind for kind in ALL_KINDS
}


def kind_for(api_version: str, kind: str) -> type[Resource] | None:
    """The type of ``apiVersion``/``kind`` (as an object carries them), or None if not ours."""
    return _BY_API_VERSION_AND_KIND.get((api_version, kind))


def kind_for_resource(group: str, version: str, plural: str) -> type[Resource] | None:
    """The type behind a REST path ``/apis/<group>/<version>/.../<plural>``, or None."""
    return _BY_GROUP_VERSION_AND_PLURAL.get((group, version, plural))
