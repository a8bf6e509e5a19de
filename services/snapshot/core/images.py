"""Where a SandboxSnapshot's images go (docs/opensandbox.md §4.2, §9.21).

Each committed container becomes ``<registry>/<sandbox>-<container>:<tag>``. The tag tells the
two kinds of snapshot apart:

- the pause snapshot a BatchSandbox makes of itself (it names the BatchSandbox as controller)
  is tagged ``snap-gen<generation of the BatchSandbox>``, so a second pause of the same sandbox
  at a later generation does not overwrite the first one's images;
- the lifecycle server's public snapshots are named ``osb-snap-<32 hex>`` and tagged
  ``snap-<that hex>``, so the server can find them by id;
- any other snapshot is tagged ``snap-`` and the first 32 hex digits of the SHA-256 of its
  name: stable across retries, and a valid tag whatever the name.

The containers are the BatchSandbox template's, or the source Pod's when there is no template
(a pooled sandbox); init containers are never committed: they do not run any more.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from api.objects import controller_of, metadata_of
from api.opensandbox import GROUP

__all__ = ["container_names", "image_tag", "image_uri"]

_PUBLIC_NAME: Final = re.compile(r"osb-snap-([0-9a-f]{32})")


def image_tag(snapshot: Mapping[str, Any], sandbox: Mapping[str, Any]) -> str:
    owner = controller_of(snapshot)
    if (
        owner is not None
        and owner.get("kind") == "BatchSandbox"
        and str(owner.get("apiVersion") or "").split("/")[0] == GROUP
    ):
        return f"snap-gen{int(metadata_of(sandbox).get('generation') or 0)}"
    name = str(metadata_of(snapshot).get("name") or "")
    public = _PUBLIC_NAME.fullmatch(name)
    if public is not None:
        return f"snap-{public.group(1)}"
    return "snap-" + hashlib.sha256(name.encode()).hexdigest()[:32]


def image_uri(registry: str, sandbox: str, container: str, tag: str) -> str:
    return f"{registry.rstrip('/')}/{sandbox}-{container}:{tag}"


def container_names(sandbox: Mapping[str, Any], pod: Mapping[str, Any]) -> list[str]:
    """The containers to commit: the template's, else the Pod's, in their order."""
    template = (sandbox.get("spec") or {}).get("template")
    if isinstance(template, Mapping) and template:
        containers = (template.get("spec") or {}).get("containers") or ()
    else:
        containers = (pod.get("spec") or {}).get("containers") or ()
    return [str(c.get("name")) for c in containers if isinstance(c, Mapping) and c.get("name")]
