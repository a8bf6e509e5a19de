"""Per-kind write rules: the RESTCreateStrategy / RESTUpdateStrategy / RESTDeleteStrategy role.

The write pipeline (:mod:`~devtools.cluster.http.writes`) is the same for every resource; what
differs per kind lives in a :class:`Strategy`: server defaults, what an update may change, what
``/status`` may change, how ``metadata.generation`` moves, whether deletion is graceful, what DELETE
returns. The base class holds the generic-registry behaviour; :class:`CustomResourceStrategy` adds
the apiextensions rules (schema pruning/defaulting/validation, the CEL validation rules of
:mod:`.celrules`, no unconditional update, generation on any non-metadata change); the built-in
kinds live in :mod:`.builtins`.

Every method works on plain JSON dicts and is pure apart from the mutation of the object it is
handed, so the rules can be read against the upstream strategy files they cite. The new object
(``obj``, ``new``) belongs to the write and may be changed or returned; the old one is the
write's own decode of the stored object, which the strategy reads and never changes, so what it
takes from it is copied (:func:`~devtools.cluster.storage.jsontree.copy_stored`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from random import Random
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from api.objects import Json
from devtools.cluster.apirules import celrules
from devtools.cluster.apirules.errors import Cause
from devtools.cluster.apirules.meta import (
    dns1123_subdomain_errors,
    validate_object_meta,
    validate_object_meta_update,
)
from devtools.cluster.apirules.structural import (
    StructuralSchema,
    _additional,
    _default,
    _is_non_nullable_null,
    _is_server_owned,
    _prune,
)
from devtools.cluster.storage.jsonmemo import JsonMemo
from devtools.cluster.storage.jsontree import copy_stored, copy_tree

if TYPE_CHECKING:
    from devtools.cluster.apirules.resources import Registry, ResourceType
    from devtools.cluster.storage.store import Store

__all__ = [
    "CustomResourceStrategy",
    "SchemaLike",
    "Strategy",
    "WriteContext",
    "load_schema",
]


NameErrors = Callable[[str, bool], list[str]]


@dataclass
class WriteContext:
    """What a strategy may consult besides the objects: the clock, randomness, other objects."""

    now: str
    rng: Random
    store: Store
    registry: Registry
    allocations: dict[str, Any] = field(default_factory=dict)
    # ``Warning`` headers the write adds to its response (ratcheted validation rules).
    warnings: list[str] = field(default_factory=list)


class SchemaLike(Protocol):
    """What the server needs of a custom resource's schema: a
    :class:`~devtools.cluster.apirules.structural.StructuralSchema`, or a permissive stand-in for a
    version that declares none."""

    def apply_defaults(self, obj: Any) -> Any: ...

    def prune(self, obj: Any) -> Any: ...

    def validate(self, obj: Any) -> list[Any]: ...


class _PermissiveSchema:
    """The schema of a version that declares none: accepts everything, prunes nothing."""

    def apply_defaults(self, obj: Any) -> Any:
        return obj

    def prune(self, obj: Any) -> Any:
        return obj

    def validate(self, obj: Any) -> list[Any]:
        return []


def load_schema(openapi_v3: dict[str, Any] | None) -> SchemaLike:
    if not openapi_v3:
        return _PermissiveSchema()
    return StructuralSchema(openapi_v3)


def _as_cause(raw: Any) -> Cause:
    """Adapt a schema error (``.field``, ``.reason``, ``.message``) to our Cause."""
    if isinstance(raw, Cause):
        return raw
    field_path = str(getattr(raw, "field", "") or "")
    message = str(getattr(raw, "message", "") or raw)
    if field_path and message.startswith(f"{field_path}: "):
        message = message[len(field_path) + 2 :]
    return Cause(str(getattr(raw, "reason", "FieldValueInvalid")), message, field_path)


class Strategy:
    """Generic-registry behaviour; subclasses override what their kind does differently."""

    allow_unconditional_update = True
    allow_create_on_update = False
    tracks_generation = False
    graceful = False
    return_deleted_object = False
    default_orphan = False  # DefaultGarbageCollectionPolicy == OrphanDependents
    accepts_strategic_merge = True
    delete_warning = ""

    def name_errors(self, name: str, prefix: bool) -> list[str]:
        return dns1123_subdomain_errors(name, prefix)

    # -- decoding-time behaviour ------------------------------------------------------------

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        """Defaulting (and pruning, for CRs) done when a body is decoded.

        Returns the paths of unknown fields that were dropped, for ``fieldValidation``.
        """
        return []

    # -- create -----------------------------------------------------------------------------

    def prepare_for_create(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> None:
        if rtype.status_subresource:
            initial = self.initial_status(rtype, obj)
            if initial is None:
                obj.pop("status", None)
            else:
                obj["status"] = initial
        if self.tracks_generation:
            obj["metadata"]["generation"] = 1

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        """The status a create starts with when the kind has a status subresource."""
        return None

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return validate_object_meta(
            obj["metadata"], namespaced=rtype.namespaced, name_errors=self.name_errors
        )

    # -- update -----------------------------------------------------------------------------

    def prepare_for_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> None:
        if rtype.status_subresource:
            if "status" in old:
                new["status"] = copy_stored(old["status"])
            else:
                new.pop("status", None)
        if self.tracks_generation:
            generation = int(old["metadata"].get("generation") or 0)
            if self.spec_changed(rtype, new, old):
                generation += 1
            new["metadata"]["generation"] = generation

    def spec_changed(self, rtype: ResourceType, new: Json, old: Json) -> bool:
        return new.get("spec") != old.get("spec")

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        return validate_object_meta_update(
            new["metadata"],
            old["metadata"],
            namespaced=rtype.namespaced,
            name_errors=self.name_errors,
        )

    # -- status subresource -----------------------------------------------------------------

    def prepare_for_status_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> Json:
        """Built-in status strategies keep the old spec; metadata changes go through."""
        result = new
        if "spec" in old:
            result["spec"] = copy_stored(old["spec"])
        else:
            result.pop("spec", None)
        if "generation" in old["metadata"]:
            result["metadata"]["generation"] = old["metadata"]["generation"]
        return result

    def validate_status_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        return self.validate_update(rtype, new, old, ctx)

    # -- delete -----------------------------------------------------------------------------

    def grace_period(self, obj: Json, requested: int | None) -> int:
        """Graceful kinds: the period this DELETE gets (0 = now). Only called if ``graceful``."""
        return 0


class CustomResourceStrategy(Strategy):
    """apiextensions ``customresource/strategy.go`` plus the structural-schema codec."""

    allow_unconditional_update = False
    tracks_generation = True
    accepts_strategic_merge = False

    def __init__(self, schemas: dict[str, SchemaLike], preserve_unknown: bool = False) -> None:
        self.schemas = schemas  # by version
        self.preserve_unknown = preserve_unknown
        self._rules: dict[str, celrules.RuleTree | None] = {}  # by version, compiled once

    def _schema(self, rtype: ResourceType) -> SchemaLike:
        return self.schemas.get(rtype.version) or _PermissiveSchema()

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        """Apply defaults, then prune unknown fields: the CR decoder's order (the codec defaults,
        then ``schemaCoercingDecoder`` prunes). apiVersion, kind and metadata are the server's."""
        schema = self._schema(rtype)
        meta: Json = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
        body = {k: v for k, v in obj.items() if k not in meta}
        if isinstance(schema, StructuralSchema):
            pruned, dropped = _normalized(schema.schema, body)
        else:
            defaulted = schema.apply_defaults(body)
            pruned = schema.prune(defaulted)
            dropped = _dropped_paths(defaulted, pruned)
        obj.clear()
        obj.update(meta)
        obj.update(pruned)
        return dropped

    def spec_changed(self, rtype: ResourceType, new: Json, old: Json) -> bool:
        """Any change outside metadata (and outside status, with a status subresource)."""
        ignored = {"metadata", "apiVersion", "kind"}
        if rtype.status_subresource:
            ignored.add("status")

        def body(obj: Json) -> Json:
            return {k: v for k, v in obj.items() if k not in ignored}

        return body(new) != body(old)

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        causes = super().validate(rtype, obj, ctx) + self._schema_causes(rtype, obj)
        return causes + self._rule_causes(rtype, obj, None, causes, ctx)

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx) + self._schema_causes(rtype, new)
        return causes + self._rule_causes(rtype, new, old, causes, ctx)

    def _rule_causes(
        self,
        rtype: ResourceType,
        new: Json,
        old: Json | None,
        causes: list[Cause],
        ctx: WriteContext,
    ) -> list[Cause]:
        """The ``x-kubernetes-validations`` (CEL) rules, after the schema, as strategy.go runs
        them: not at all when a schema error means the object lacks the shape they assume."""
        rules = self._rule_tree(rtype)
        if rules is None:
            return []
        if any(cause.reason in celrules.BLOCKING_REASONS for cause in causes):
            return [_as_cause(celrules.not_checked_cause())]
        outcome = rules.validate(new, old)
        ctx.warnings.extend(outcome.warnings)
        return [_as_cause(cause) for cause in outcome.causes]

    def _rule_tree(self, rtype: ResourceType) -> celrules.RuleTree | None:
        version = rtype.version
        if version not in self._rules:
            schema = self.schemas.get(version)
            self._rules[version] = (
                celrules.compile_rules(schema.schema)
                if isinstance(schema, StructuralSchema)
                else None
            )
        return self._rules[version]

    def _schema_causes(self, rtype: ResourceType, obj: Json) -> list[Cause]:
        body = {k: v for k, v in obj.items() if k != "metadata"}
        return [_as_cause(c) for c in self._schema(rtype).validate(body)]

    def prepare_for_status_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> Json:
        """status_strategy.go: copy the old object wholesale, take only ``.status`` (and
        managedFields) from the request."""
        result = copy_stored(old)
        managed = new["metadata"].get("managedFields")
        if managed is not None:
            result["metadata"]["managedFields"] = managed
        else:
            result["metadata"].pop("managedFields", None)
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        return result

    def validate_status_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = self._schema_causes(rtype, new)
        return causes + self._rule_causes(rtype, new, old, causes, ctx)


def _normalized(schema: Mapping[str, Any], body: Json) -> tuple[Json, list[str]]:
    """``prune(apply_defaults(body))`` and the paths pruned (:func:`_dropped_paths` between the
    two), the top-level fields each through :func:`_normalized_field`, which remembers them.

    The root is done here as :func:`~.structural._default` and :func:`~.structural._prune` do it
    (defaults of missing or null fields, nulls dropped, unknown fields pruned); each field
    below it is defaulted and pruned on its own, as those functions do, so the result and the
    order of the paths are the same. A root that preserves unknown fields, or a body carrying
    a field the server owns, goes the long way."""
    if schema.get("x-kubernetes-preserve-unknown-fields") or any(
        _is_server_owned(key, value) for key, value in body.items()
    ):
        whole = StructuralSchema(dict(schema))
        before = whole.apply_defaults(body)
        after = whole.prune(before)
        return after, _dropped_paths(before, after)
    defaulted = dict(body)
    properties: Mapping[str, Any] = schema.get("properties", {})
    for key, prop in properties.items():
        if key not in defaulted:
            if "default" in prop:
                defaulted[key] = copy.deepcopy(prop["default"])
        elif _is_non_nullable_null(defaulted[key], prop):
            if "default" in prop:
                defaulted[key] = copy.deepcopy(prop["default"])
            else:
                del defaulted[key]
    extra = _additional(schema)
    pruned: Json = {}
    dropped: list[str] = []
    for key in list(defaulted):
        value = defaulted[key]
        if key in properties:
            field_schema = properties[key]
        elif extra is not None:
            if _is_non_nullable_null(value, extra):
                if "default" not in extra:
                    continue
                value = copy.deepcopy(extra["default"])
            field_schema = extra
        else:
            dropped.append(key)  # an unknown top-level field
            continue
        pruned[key], field_dropped = _normalized_field(key, value, field_schema)
        dropped += field_dropped
    return pruned, dropped


_NORMALIZED = JsonMemo()
"""A top-level field's normalized JSON and the paths pruned, by schema node and field name."""


def _normalized_field(key: str, value: Any, schema: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """A top-level field (``spec``, ``status``) defaulted and pruned, and the paths pruned.

    Every write of a custom resource normalizes the whole object and most change one part of
    it, so a field's result is remembered (:class:`~devtools.cluster.storage.jsonmemo.JsonMemo`)
    by its schema node, its name (the paths start with it) and its JSON: defaulting and pruning
    depend on nothing else. A hit answers a fresh decode (the write owns and changes it), and
    only a result that JSON carries exactly is remembered."""
    memo_key = _NORMALIZED.key(schema, [key, value])
    if memo_key is not None:
        found, held = _NORMALIZED.get(memo_key, schema, [key, value])
        if found:
            return _memo_decoder.decode(held[0]), list(held[1])
    result, dropped = _normalized_slowly(key, value, schema)
    if memo_key is None:
        return result, dropped
    try:
        result_json = _memo_encoder.encode(result)
    except (TypeError, ValueError, OverflowError):
        return result, dropped
    if _memo_decoder.decode(result_json) == result:
        _NORMALIZED.put(memo_key, schema, (result_json, list(dropped)), len(result_json))
    return result, dropped


_memo_encoder = msgspec.json.Encoder()
_memo_decoder = msgspec.json.Decoder()


def _normalized_slowly(key: str, value: Any, schema: Mapping[str, Any]) -> tuple[Any, list[str]]:
    defaulted = copy_tree(value)
    _default(defaulted, schema)
    pruned = copy_tree(defaulted)
    _prune(pruned, schema, key, [], root=False)
    return pruned, _dropped_paths(defaulted, pruned, key)


def _dropped_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Dotted paths of fields present in ``before`` but pruned from ``after``."""
    out: list[str] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for key, value in before.items():
            path = f"{prefix}.{key}" if prefix else key
            if key not in after:
                out.append(path)
            else:
                out += _dropped_paths(value, after[key], path)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            out += _dropped_paths(b, a, f"{prefix}[{i}]")
    return out
