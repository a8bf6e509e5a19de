"""How each list of a built-in kind merges: by a key, as a set, or as a whole.

Upstream reads a list's merge strategy from the Go struct tags of ``k8s.io/api``
(``patchStrategy:"merge"`` and ``patchMergeKey``) for strategic merge patch, and from the
schema's ``x-kubernetes-list-type``/``list-map-keys`` for server-side apply. We keep one table
for both, keyed by field name, which covers the built-in kinds this project writes, with one
context rule: ``ports`` inside a container merges by
``containerPort``, elsewhere by ``port``. ``finalizers`` is a set of scalars. Every other list
is atomic: a patch or an apply replaces it whole.

:func:`effective_strategy`, which server-side apply and field tracking use, demotes a strategy
to atomic when the data does not fit it (items without the key, or a "set" holding objects), as
for a custom resource's field that shares a name with a built-in one. Not modelled:
``x-kubernetes-list-type`` declared by CRDs and multi-field list keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ATOMIC", "MERGE", "SET", "effective_strategy", "list_strategy"]


# patchMergeKey of the built-in types, by field name (k8s.io/api struct tags).
_MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "secrets": "name",  # ServiceAccount.secrets
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
    "topologySpreadConstraints": "topologyKey",
}
_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})
# patchStrategy=merge on a list of scalars: a set.
_SET_LISTS = frozenset({"finalizers"})

MERGE = "merge"
SET = "set"
ATOMIC = "atomic"


def list_strategy(fields: tuple[str, ...]) -> tuple[str, str]:
    """How the list at this field path merges: (merge, key), (set, "") or (atomic, "")."""
    if not fields:
        return ATOMIC, ""
    name = fields[-1]
    if name == "ports":
        in_container = len(fields) >= 2 and fields[-2] in _CONTAINER_LISTS
        return MERGE, "containerPort" if in_container else "port"
    if name in _SET_LISTS:
        return SET, ""
    key = _MERGE_KEYS.get(name)
    if key is not None:
        return MERGE, key
    return ATOMIC, ""


def effective_strategy(fields: tuple[str, ...], *lists: list[Any]) -> tuple[str, str]:
    """The table's strategy, demoted to atomic when the data does not fit it (e.g. a CR field)."""
    kind, key = list_strategy(fields)
    items = [item for values in lists for item in values]
    if kind == MERGE and not all(isinstance(item, dict) and key in item for item in items):
        return ATOMIC, ""
    if kind == SET and any(isinstance(item, dict | list) for item in items):
        return ATOMIC, ""
    return kind, key
