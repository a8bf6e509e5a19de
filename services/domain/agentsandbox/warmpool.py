"""What a SandboxWarmPool promises a claim about its members: which pool a member belongs to,
which template it was made from, and when it may be adopted.

The pool worker makes members and puts each adoptable one on its warm queue; the claim worker
adopts them; ``sandbus queue ls`` counts a queue's entries against them. All three read a
member through these rules, so they cannot disagree about one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import Json, controller_of, is_deleting, is_ready, labels_of

__all__ = ["adoptable_pool", "pool_selector", "template_ref_name"]


def pool_selector(pool_name: str) -> str:
    """The label selector of a pool's members, as ``status.selector`` reports it."""
    return f"{LABEL_WARM_POOL_SANDBOX}={name_hash(pool_name)}"


def template_ref_name(pool: Mapping[str, Any]) -> str:
    """The pool's ``spec.sandboxTemplateRef.name`` ("" when it is missing)."""
    spec = _mapping(pool.get("spec"))
    return str(_mapping(spec.get("sandboxTemplateRef")).get("name") or "")


def adoptable_pool(sandbox: Json | None) -> str | None:
    """The name of the SandboxWarmPool that may offer ``sandbox`` to claims, if it may (also
    what ``sandbus queue ls`` counts a queue's entries against)."""
    if sandbox is None or is_deleting(sandbox):
        return None
    owner = controller_of(sandbox)
    if owner is None or owner.get("kind") != "SandboxWarmPool":
        return None
    labels = labels_of(sandbox)
    if not labels.get(LABEL_WARM_POOL_SANDBOX) or not labels.get(LABEL_SANDBOX_TEMPLATE_REF_HASH):
        return None
    if not is_ready(sandbox):
        return None
    return str(owner.get("name") or "") or None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
