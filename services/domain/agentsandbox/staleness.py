"""Is a pool member stale, i.e. no longer what its template would make today?
(docs/agent-sandbox.md §4.5; upstream ``isSandboxStale`` and ``compareSandboxBlueprint``,
pool:1156-1250).

Who asks (the pool planner, §4.2 step 4): under the ``Recreate`` strategy every pool-owned
member; under ``OnReplenish`` (the default) only orphans, which are vetted before adoption.
``is_stale`` decides in upstream's order:

1. The member's ``sandbox-template-ref-hash`` label is not ``NameHash(template name)``: stale.
   The pool's templateRef was renamed, and members of the old ref go even if the new template
   has the very same spec (a missing label is a mismatch too).
2. An orphan (no controller): the full semantic comparison, whatever its hash label says. Its
   labels were written by someone else and may be copied from a genuine member; only the spec
   is evidence.
3. Its ``sandbox-template-hash`` label equals the template's current blueprint hash: fresh.
4. The current hash is empty (upstream: marshalling the template failed): not stale, so that a
   failure to hash cannot delete a whole pool.
5. Otherwise the semantic comparison decides. A hash mismatch alone is not staleness: the hash
   covers the podTemplate's labels and annotations, which the comparison ignores, and a hash
   computed by a different implementation (ours emulates Go's ``json.Marshal``, §4.6) may
   differ for the same spec.

``blueprints_match`` is that comparison, field by field of the SandboxBlueprint:

- ``podTemplate.spec``: the template's pod spec *with the secure defaults applied* (as the
  member was created) against the member's pod spec, semantically equal. So a template that
  leaves ``automountServiceAccountToken`` unset matches a member with ``false``, and an empty
  ``dnsPolicy`` matches the ``None`` + public nameservers that the secure default wrote; a
  template ``ClusterFirst`` against a member ``Default`` is drift. The podTemplate's labels
  and annotations are not compared: editing them never makes a member stale.
- ``volumeClaimTemplates``: the same count, and index by index the same name and a
  semantically equal spec; their labels and annotations are ignored. Order matters, as it does
  for the hash (the list is atomic).
- ``service``: equal as a tri-state (unset, true, false are three different values).

"Semantically equal" stands for apimachinery's ``equality.Semantic.DeepEqual`` over the typed
Go structs, and is computed the way Go gets there: both sides are decoded into the PodSpec,
PersistentVolumeClaimSpec and SandboxBlueprint types and written back as Go's
``encoding/json`` would, by the encoder that computes the template hashes
(:func:`.hashes.blueprint_json`, which knows every field's Go type), and the two documents are
compared. So what Go's decoding erases is no drift: a null, an empty string, a ``false`` or a
``0`` in a plain field (``dnsPolicy: ""``, ``hostNetwork: false``), an empty list or map, and a
quantity written two ways (``1024Mi`` and ``1Gi``). What it keeps is drift: an explicit
``false`` or ``0`` in a pointer field (``automountServiceAccountToken``,
``terminationGracePeriodSeconds``) against an unset one, and an empty object in a pointer field
(``securityContext: {}``) against none. One difference is removed by hand: Go writes a nil slice
of a field without ``omitempty`` (``containers``) as ``null`` and an empty one as ``[]``, which
Semantic equality does not tell apart. Fields the encoder does not know (newer Kubernetes
fields) are compared as they are, where Go would drop them. One encoder for the hash and the
comparison keeps them consistent: an edit of the template that Go's decoding erases changes
neither, so an owned member (hash) and an orphan (comparison) get the same answer.

Upstream also memoizes the comparison per old hash label within one pass (``vettedHashes``).
It is left out here: it only saves encoding and comparing two documents already in memory,
and with it a member's verdict would depend on which member of the same label was
listed first (two owned members with one old hash label but different specs, one edited by
hand, would share the first one's verdict). Without it ``is_stale`` is a function of the member
and the template alone, which is what ``sandbus explain --rerun`` replays. The template's
blueprint hash can be computed once per pass and passed in as ``current_hash``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.keys import LABEL_SANDBOX_TEMPLATE_HASH, LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash
from api.objects import labels_of, metadata_of
from services.domain.agentsandbox.hashes import blueprint_hash, blueprint_json
from services.domain.agentsandbox.secure_defaults import apply_secure_defaults

__all__ = ["blueprints_match", "is_stale"]


def is_stale(
    sandbox: Mapping[str, Any],
    template: Mapping[str, Any],
    *,
    orphan: bool,
    current_hash: str | None = None,
) -> bool:
    """Should ``sandbox`` (a member, or an orphan the pool would adopt) be replaced because
    ``template`` changed? ``orphan``: it has no controller. ``current_hash``: the template's
    blueprint hash if the caller already has it (computed here when ``None``)."""
    labels = labels_of(sandbox)
    template_name = str(metadata_of(template).get("name") or "")
    if labels.get(LABEL_SANDBOX_TEMPLATE_REF_HASH) != name_hash(template_name):
        return True
    sandbox_spec = _mapping(sandbox.get("spec"))
    template_spec = _mapping(template.get("spec"))
    if orphan:
        return not blueprints_match(sandbox_spec, template_spec)
    if current_hash is None:
        current_hash = blueprint_hash(template_spec)
    sandbox_hash = labels.get(LABEL_SANDBOX_TEMPLATE_HASH) or ""
    if sandbox_hash and sandbox_hash == current_hash:
        return False
    if not current_hash:
        return False
    return not blueprints_match(sandbox_spec, template_spec)


def blueprints_match(sandbox_spec: Mapping[str, Any], template_spec: Mapping[str, Any]) -> bool:
    """Is the SandboxBlueprint in ``sandbox_spec`` (a Sandbox's ``spec``) what ``template_spec``
    (a SandboxTemplate's ``spec``) makes, for every field that staleness tracks?"""
    expected_pod_spec = apply_secure_defaults(_pod_spec(template_spec), template_spec)
    return _tracked(template_spec, expected_pod_spec) == _tracked(
        sandbox_spec, _pod_spec(sandbox_spec)
    )


def _tracked(blueprint: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> str:
    """The Go JSON of the parts of ``blueprint`` that staleness compares: the pod spec given,
    each VCT's name and spec (not its labels or annotations), and ``service``."""
    view = {
        "podTemplate": {"spec": pod_spec},
        "volumeClaimTemplates": [
            {"metadata": {"name": _name(_mapping(vct))}, "spec": _mapping(vct).get("spec")}
            for vct in _list(blueprint.get("volumeClaimTemplates"))
        ],
        "service": blueprint.get("service"),
    }
    return blueprint_json(_without_empty_lists(view))


def _without_empty_lists(value: Any) -> Any:
    """Semantic equality does not tell a nil slice from an empty one, but Go writes a nil slice
    of a field without ``omitempty`` (``containers``) as ``null`` and an empty one as ``[]``."""
    if isinstance(value, Mapping):
        return {key: _without_empty_lists(item) for key, item in value.items() if item != []}
    if isinstance(value, list):
        return [_without_empty_lists(item) for item in value]
    return value


def _name(vct: Mapping[str, Any]) -> str:
    return str(_mapping(vct.get("metadata")).get("name") or "")


def _pod_spec(blueprint: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(blueprint.get("podTemplate")).get("spec"))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
