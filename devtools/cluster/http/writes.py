"""The write pipeline: create, update, patch, delete, for every resource and subresource.

One pipeline, the generic registry's (``registry/generic/registry/store.go``), parameterised by
the resource's :class:`~devtools.cluster.apirules.strategy.Strategy`:

- **create**: decode → kind/namespace checks → normalize (defaults, CR pruning) → system fields
  (uid, creationTimestamp, generateName with up to 8 retries) → ``prepare_for_create`` →
  validate (422) → namespace lifecycle (404 / 403) → AlreadyExists (409) → commit → 201.
- **update** (PUT, and the tail of every PATCH): resourceVersion precondition (409 Conflict; 422
  for kinds without unconditional update) → ``rest.BeforeUpdate`` (server-owned metadata kept)
  → strategy → validate → managedFields → commit. Removing the last finalizer of an object
  being deleted deletes it. A write that changes nothing keeps the RV.
- **patch**: the content type picks merge / JSON / strategic merge / apply (helper functions in
  :mod:`~devtools.cluster.apirules.patching`), the result goes through update; apply may create
  (201).
- **delete**: :func:`~devtools.cluster.apirules.deletion.plan_delete` decides (graceful periods,
  GC finalizers, deletionTimestamp or removal); this module writes the plan and answers with
  the object or a Success Status, as the kind's registry does.

Every step runs under the store's commit lock, so a precondition and the write it guards are
atomic. ``dryRun=All`` runs everything and commits nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from random import Random
from typing import Any

import msgspec
import yaml

from api.objects import Json
from api.patching.errors import ApplyConflict, PatchError
from api.patching.strategic import strategic_merge_patch
from devtools.cluster.apirules import errors
from devtools.cluster.apirules.deletion import (
    plan_delete,
    should_delete_during_update,
    validate_delete_options,
)
from devtools.cluster.apirules.errors import Cause, StatusError, field_invalid
from devtools.cluster.apirules.knownfields import unknown_fields
from devtools.cluster.apirules.meta import (
    generate_name,
    new_uid,
    now_rfc3339,
)
from devtools.cluster.apirules.patching.apply import server_side_apply
from devtools.cluster.apirules.patching.json_patches import json_patch, merge_patch
from devtools.cluster.apirules.patching.managed import record_update
from devtools.cluster.apirules.pods import bind
from devtools.cluster.apirules.resources import Registry, ResourceType
from devtools.cluster.apirules.scale import object_with_scale, scale_of
from devtools.cluster.apirules.strategy import WriteContext
from devtools.cluster.http import wire
from devtools.cluster.http.protobuf import decode_object, is_protobuf
from devtools.cluster.storage.jsontree import copy_tree
from devtools.cluster.storage.store import Store, decode

__all__ = [
    "IMMORTAL_NAMESPACES",
    "PATCH_APPLY",
    "PATCH_JSON",
    "PATCH_MERGE",
    "PATCH_SMP",
    "Outcome",
    "Target",
    "WriteOptions",
    "Writer",
    "parse_body",
]


PATCH_JSON = "application/json-patch+json"
PATCH_MERGE = "application/merge-patch+json"
PATCH_SMP = "application/strategic-merge-patch+json"
PATCH_APPLY = "application/apply-patch+yaml"
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
_GENERATE_NAME_ATTEMPTS = 8
_PROPAGATION = ("Orphan", "Background", "Foreground")


@dataclass(frozen=True)
class Target:
    """What a request addresses: a resource type, a namespace, a name, a subresource."""

    rtype: ResourceType
    namespace: str = ""
    name: str = ""
    subresource: str = ""


@dataclass
class WriteOptions:
    dry_run: bool = False
    field_manager: str = ""
    field_validation: str = ""
    force: bool | None = None
    user_agent: str = ""

    def manager(self) -> str:
        """The field manager; upstream defaults it to the user agent's first segment."""
        return self.field_manager or (self.user_agent.split("/")[0] if self.user_agent else "")


@dataclass
class Outcome:
    code: int
    body: Json | bytes
    """The response body: an object, or (a create or update that committed) the stored object
    already encoded as served, :func:`~devtools.cluster.http.wire.presented`."""
    warnings: list[str] = field(default_factory=list)


_body_decoder = msgspec.json.Decoder()


def _json_loads(raw: bytes) -> Any:
    """``json.loads(raw)``, through msgspec where it can: several times faster on every write's
    body. msgspec accepts only standard UTF-8 JSON and gives the same values for it; anything
    else (a BOM, ``NaN``, a lone surrogate, a malformed body) goes to ``json.loads``, for the
    values or the error message it has always given."""
    try:
        return _body_decoder.decode(raw)
    except msgspec.DecodeError:
        return json.loads(raw)


def parse_body(raw: bytes, content_type: str) -> Any:
    """Decode a JSON (or YAML) request body; a malformed one is a 400, never a 500."""
    if not raw.strip():
        raise errors.bad_request("the object provided is unrecognized (must be of type Object)")
    if is_protobuf(content_type):
        return decode_object(raw)
    media = content_type.split(";")[0].strip().lower()
    try:
        if media.endswith("yaml"):
            return yaml.safe_load(raw)
        return _json_loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        detail = str(exc).splitlines()[0]
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {detail}") from None


class Writer:
    """Executes writes against the store; owns nothing but the randomness it is given."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        rng: Random,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.registry = registry
        self.rng = rng
        self.clock = clock

    def _ctx(self) -> WriteContext:
        return WriteContext(
            now=now_rfc3339(self.clock()), rng=self.rng, store=self.store, registry=self.registry
        )

    # -- shared checks ----------------------------------------------------------------------

    @staticmethod
    def _require_object(body: Any) -> Json:
        if not isinstance(body, dict):
            kind = "array" if isinstance(body, list) else type(body).__name__
            raise errors.bad_request(
                f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
            )
        return body

    @staticmethod
    def _check_type_meta(rtype: ResourceType, obj: Json) -> None:
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if rtype.custom and (not api_version or not kind):
            what = "apiVersion" if not api_version else "kind"
            raise errors.bad_request(f"Object '{what}' is missing in '{json.dumps(obj)[:200]}'")
        if api_version and api_version != rtype.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rtype.api_version})"
            )
        if kind and kind != rtype.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
            )
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        meta = obj.get("metadata")
        if meta is None:
            obj["metadata"] = {}
        elif not isinstance(meta, dict):
            raise errors.bad_request(
                "json: cannot unmarshal into Go struct field Object.metadata of type v1.ObjectMeta"
            )

    @staticmethod
    def _check_namespace(target: Target, obj: Json) -> None:
        meta = obj["metadata"]
        if target.rtype.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != target.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = target.namespace
        else:
            meta.pop("namespace", None)

    def _check_namespace_lifecycle(self, target: Target, name: str) -> None:
        """NamespaceLifecycle admission for creates: the namespace must exist and be active."""
        if not target.rtype.namespaced:
            return
        namespace = self.store.get("namespaces", "", target.namespace)
        if namespace is None:
            raise errors.not_found("", "namespaces", target.namespace)
        if namespace["metadata"].get("deletionTimestamp"):
            rtype = target.rtype
            raise errors.forbidden(
                rtype.group,
                rtype.plural,
                name,
                f"unable to create new content in namespace {target.namespace} because it is "
                "being terminated",
                causes=[
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {target.namespace} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            )

    def _normalize(self, rtype: ResourceType, obj: Json, opts: WriteOptions) -> list[str]:
        """Decode-time defaulting/pruning plus the fieldValidation verdict on unknown fields:
        a built-in kind's strict decode (:mod:`~devtools.cluster.apirules.knownfields`), then
        the strategy's defaults (a custom resource's schema prunes there)."""
        dropped = (
            [] if rtype.custom else unknown_fields(rtype.group, rtype.version, rtype.kind, obj)
        )
        dropped += rtype.strategy.normalize(rtype, obj)
        if not dropped or opts.field_validation == "Ignore":
            return []
        if opts.field_validation == "Strict":
            listed = ", ".join(f'unknown field "{p}"' for p in dropped)
            raise errors.bad_request(f"strict decoding error: {listed}")
        return [f'unknown field "{p}"' for p in dropped]

    @staticmethod
    def _invalid(rtype: ResourceType, name: str, causes: list[Cause]) -> StatusError:
        return errors.invalid(rtype.group, rtype.kind, name, causes)

    def _stored(self, target: Target) -> Json | None:
        return self.store.get(target.rtype.storage, target.namespace, target.name)

    def _present(self, rtype: ResourceType, stored: Json) -> Json:
        return rtype.present(stored)

    @staticmethod
    def _served(rtype: ResourceType, result: Json | bytes) -> Json | bytes:
        """A write's result as its response serves it. Stored bytes are presented without
        decoding them (byte for byte what encoding ``rtype.present(decode(raw))`` gives): a
        committed write's answer was a decode, a present and an encode of what it had just
        encoded."""
        if isinstance(result, bytes):
            return wire.presented(rtype, result)
        return rtype.present(result)

    # -- create -----------------------------------------------------------------------------

    async def create(self, target: Target, body: Any, opts: WriteOptions) -> Outcome:
        rtype = target.rtype
        if target.subresource == "binding":
            return await self._bind(target, body, opts)
        if target.subresource or target.name:
            raise errors.method_not_supported(rtype.group, rtype.plural, "create")
        if rtype.custom and rtype.crd_name in self.registry.terminating:
            raise errors.method_not_supported(rtype.group, rtype.plural, "create")
        obj = self._require_object(body)
        self._check_type_meta(rtype, obj)
        self._check_namespace(target, obj)
        warnings = self._normalize(rtype, obj, opts)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise StatusError(500, "", "resourceVersion should not be set on objects to be created")
        async with self.store.writing():
            ctx = self._ctx()
            result = self._create_locked(target, obj, opts, ctx)
        return Outcome(201, self._served(rtype, result), warnings + ctx.warnings)

    def _create_locked(
        self,
        target: Target,
        obj: Json,
        opts: WriteOptions,
        ctx: WriteContext,
        *,
        record: bool = True,
    ) -> Json | bytes:
        """The created object: its stored bytes, or the object itself for a dry run."""
        wants_name = not obj["metadata"].get("name") and bool(obj["metadata"].get("generateName"))
        attempts = _GENERATE_NAME_ATTEMPTS if wants_name else 1
        last_error: StatusError | None = None
        for _ in range(attempts):
            # A create changes the object it is given; only a retry needs the original again.
            candidate = copy_tree(obj) if wants_name else obj
            try:
                return self._create_once(target, candidate, opts, ctx, record=record)
            except StatusError as exc:
                if exc.reason != "AlreadyExists" or not wants_name:
                    raise
                last_error = exc
        assert last_error is not None
        raise last_error

    def _create_once(
        self, target: Target, obj: Json, opts: WriteOptions, ctx: WriteContext, *, record: bool
    ) -> Json | bytes:
        rtype = target.rtype
        meta = obj["metadata"]
        meta["creationTimestamp"] = ctx.now
        meta["uid"] = new_uid()
        meta.pop("deletionTimestamp", None)
        meta.pop("deletionGracePeriodSeconds", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = generate_name(meta["generateName"], ctx.rng)
        name = meta.get("name") or ""
        rtype.strategy.prepare_for_create(rtype, obj, ctx)
        causes = rtype.strategy.validate(rtype, obj, ctx)
        if causes:
            raise self._invalid(rtype, name, causes)
        self._check_namespace_lifecycle(target, name)
        existing_raw = self.store.get_raw(rtype.storage, target.namespace, name)
        if existing_raw is not None:
            existing = decode(existing_raw)
            error = errors.already_exists(rtype.group, rtype.plural, name)
            if existing["metadata"].get("deletionTimestamp"):
                error.message = f"object is being deleted: {error.message}"
            raise error
        if record:  # an apply that creates has recorded its own managedFields entry
            ignore = ("status",) if rtype.status_subresource else ()
            obj = record_update(
                None, obj, manager=opts.manager(), now=ctx.now, ignore_fields=ignore
            )
        internal = rtype.internal(obj)
        if opts.dry_run:
            internal["metadata"].pop("resourceVersion", None)
            return internal
        return self.store.create_encoded(rtype.storage, internal)

    # -- update -----------------------------------------------------------------------------

    async def update(self, target: Target, body: Any, opts: WriteOptions) -> Outcome:
        rtype = target.rtype
        if target.subresource == "scale":
            return await self._update_scale(target, lambda scale: body, opts)
        if target.subresource == "finalize":
            return await self._finalize_namespace(target, body, opts)
        obj = self._require_object(body)
        self._check_type_meta(rtype, obj)
        name = obj["metadata"].get("name")
        if name != target.name:
            raise errors.bad_request(
                f"the name of the object ({name or ''}) does not match the name on the URL "
                f"({target.name})"
            )
        warnings = self._normalize(rtype, obj, opts)
        outcome = await self._update(target, lambda current: obj, opts, allow_create=True)
        outcome.warnings = warnings + outcome.warnings
        return outcome

    async def _update(
        self,
        target: Target,
        produce: Callable[[Json], Json],
        opts: WriteOptions,
        *,
        allow_create: bool = False,
        create_from: Callable[[], Json] | None = None,
        manager_operation: str = "Update",
        via: str = "",
    ) -> Outcome:
        """Read the live object, let ``produce`` compute the desired one, commit the update.

        ``via`` names the subresource the write came through when it is not ``target``'s own
        (a /scale write updates the main object), for the managedFields entry.
        """
        rtype = target.rtype
        async with self.store.writing():
            ctx = self._ctx()
            stored = self.store.get_raw(rtype.storage, target.namespace, target.name)
            if stored is None:
                if create_from is not None:
                    obj = create_from()
                elif (
                    allow_create
                    and rtype.strategy.allow_create_on_update
                    and not target.subresource
                ):
                    obj = produce({})
                else:
                    raise errors.not_found(rtype.group, rtype.plural, target.name)
                self._check_namespace(target, obj)
                created = self._create_locked(
                    target, obj, opts, ctx, record=manager_operation == "Update"
                )
                result, code = created, 201
            else:
                # Two decodes of the stored bytes: the old state to compare with, and a copy
                # for ``produce`` to change (cheaper than copying the first).
                old = self._present(rtype, decode(stored))
                desired = produce(self._present(rtype, decode(stored)))
                result = self._commit_update(
                    target, desired, old, opts, ctx, manager_operation, via or target.subresource
                )
                code = 200
        return Outcome(code, self._served(rtype, result), ctx.warnings)

    def _check_precondition(self, rtype: ResourceType, new: Json, old: Json) -> None:
        wanted = new["metadata"].get("resourceVersion")
        current = old["metadata"]["resourceVersion"]
        if not wanted:
            if not rtype.strategy.allow_unconditional_update:
                raise errors.invalid(
                    rtype.group,
                    rtype.plural,
                    old["metadata"]["name"],
                    [
                        field_invalid(
                            "metadata.resourceVersion",
                            None,
                            "must be specified for an update",
                            raw_value="0x0",
                        )
                    ],
                )
            return
        try:
            int(wanted)
        except (TypeError, ValueError):
            raise errors.bad_request(
                f'invalid resource version: strconv.ParseUint: parsing "{wanted}": invalid syntax'
            ) from None
        if str(wanted) != current:
            raise errors.conflict(
                rtype.group,
                rtype.plural,
                old["metadata"]["name"],
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
            )

    def _commit_update(
        self,
        target: Target,
        new: Json,
        old: Json,
        opts: WriteOptions,
        ctx: WriteContext,
        operation: str = "Update",
        via: str = "",
    ) -> Json | bytes:
        """The updated object: its stored bytes, or the object itself when nothing is stored
        (a dry run, a delete at the last finalizer)."""
        rtype = target.rtype
        strategy = rtype.strategy
        if not isinstance(new.get("metadata"), dict):
            new["metadata"] = {}
        self._check_precondition(rtype, new, old)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        self._check_namespace(target, new)
        meta, old_meta = new["metadata"], old["metadata"]
        meta["generation"] = old_meta.get("generation")
        if meta["generation"] is None:
            del meta["generation"]
        if not meta.get("uid"):
            meta["uid"] = old_meta.get("uid")
        meta["creationTimestamp"] = old_meta.get("creationTimestamp")
        if old_meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = old_meta["deletionTimestamp"]
        if "deletionGracePeriodSeconds" in old_meta and "deletionGracePeriodSeconds" not in meta:
            meta["deletionGracePeriodSeconds"] = old_meta["deletionGracePeriodSeconds"]
        if target.subresource == "status":
            new = strategy.prepare_for_status_update(rtype, new, old, ctx)
            causes = strategy.validate_status_update(rtype, new, old, ctx)
            ignore: tuple[str, ...] = ()
        else:
            strategy.prepare_for_update(rtype, new, old, ctx)
            causes = strategy.validate_update(rtype, new, old, ctx)
            ignore = ("status",) if rtype.status_subresource else ()
        if causes:
            raise self._invalid(rtype, old_meta["name"], causes)
        if operation == "Update":
            new = record_update(
                old,
                new,
                manager=opts.manager(),
                now=ctx.now,
                subresource=via,
                ignore_fields=ignore,
            )
        internal = rtype.internal(new)
        if should_delete_during_update(internal, old):
            # The DELETED event carries the last *stored* state (etcd's prevKV), while the
            # client gets back the object it sent, as deleteWithoutFinalizers returns it.
            if not opts.dry_run:
                self.store.delete(rtype.storage, target.namespace, target.name)
            return internal
        if opts.dry_run:
            return internal
        return self.store.update_encoded(rtype.storage, internal)

    # -- patch ------------------------------------------------------------------------------

    async def patch(
        self, target: Target, raw: bytes, content_type: str, opts: WriteOptions
    ) -> Outcome:
        rtype = target.rtype
        media = content_type.split(";")[0].strip().lower()
        accepted = [PATCH_JSON, PATCH_MERGE]
        if rtype.strategy.accepts_strategic_merge or target.subresource == "scale":
            accepted.append(PATCH_SMP)
        accepted.append(PATCH_APPLY)
        if media not in accepted:
            raise errors.unsupported_media_type(accepted)
        if media == PATCH_APPLY and not opts.field_manager:
            raise errors.invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                [errors.field_required("fieldManager", "is required for apply patch")],
            )
        if media != PATCH_APPLY and opts.force is not None:
            raise errors.invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                [errors.field_forbidden("force", "may not be specified for non-apply patch")],
            )
        if media == PATCH_APPLY:
            applied = parse_body(raw, "application/yaml")
        else:
            try:
                body = _json_loads(raw) if raw.strip() else None
            except ValueError as exc:
                raise errors.bad_request(f"error decoding patch: {exc}") from None

        def apply_patch(current: Json) -> Json:
            try:
                # ``current`` and the decoded body belong to this request: patch in place.
                if media == PATCH_MERGE:
                    return merge_patch(current, body, in_place=True)
                if media == PATCH_JSON:
                    return json_patch(current, body, in_place=True)
                return strategic_merge_patch(current, body, in_place=True)
            except PatchError as exc:
                raise StatusError(exc.code, exc.reason, exc.message) from None

        if target.subresource == "scale":
            return await self._update_scale(target, apply_patch, opts)
        if media == PATCH_APPLY:
            return await self._apply(target, applied, opts)
        warnings: list[str] = []

        def produce(current: Json) -> Json:
            patched = apply_patch(current)
            if not isinstance(patched.get("metadata"), dict):
                patched["metadata"] = {}
            warnings.extend(self._normalize(rtype, patched, opts))
            return patched

        outcome = await self._update(target, produce, opts)
        outcome.warnings = warnings + outcome.warnings
        return outcome

    async def _apply(self, target: Target, applied: Any, opts: WriteOptions) -> Outcome:
        rtype = target.rtype
        config = self._require_object(applied)
        self._check_type_meta(rtype, config)
        name = config["metadata"].get("name")
        if name != target.name:
            raise errors.bad_request(
                f"the name of the object ({name or ''}) does not match the name on the URL "
                f"({target.name})"
            )
        ignore = ("status",) if rtype.status_subresource and not target.subresource else ()
        now = now_rfc3339(self.clock())

        def run_apply(live: Json | None) -> Json:
            try:
                result = server_side_apply(
                    live,
                    config,
                    manager=opts.field_manager,
                    force=bool(opts.force),
                    now=now,
                    ignore_fields=ignore,
                )
            except ApplyConflict as exc:
                raise StatusError(409, "Conflict", exc.message, {"causes": exc.causes}) from None
            except PatchError as exc:
                raise StatusError(exc.code, exc.reason, exc.message) from None
            self._normalize(rtype, result, opts)
            return result

        def create_from() -> Json:
            if target.subresource:
                raise errors.not_found(rtype.group, rtype.plural, target.name)
            created = run_apply(None)
            self._check_type_meta(rtype, created)
            return created

        def produce(current: Json) -> Json:
            result = run_apply(current)
            # An apply never carries a precondition unless the config names one.
            if not config["metadata"].get("resourceVersion"):
                result["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return result

        return await self._update(
            target, produce, opts, create_from=create_from, manager_operation="Apply"
        )

    async def _update_scale(
        self, target: Target, produce_scale: Callable[[Json], Any], opts: WriteOptions
    ) -> Outcome:
        rtype = target.rtype
        if rtype.scale is None:
            raise errors.path_not_found()
        main = Target(rtype, target.namespace, target.name)

        def produce(current: Json) -> Json:
            scale = produce_scale(scale_of(rtype, current))
            return object_with_scale(rtype, current, scale)

        outcome = await self._update(main, produce, opts, via="scale")
        body = outcome.body
        outcome.body = scale_of(rtype, decode(body) if isinstance(body, bytes) else body)
        return outcome

    # -- pods/binding, namespaces/finalize --------------------------------------------------

    async def _bind(self, target: Target, body: Any, opts: WriteOptions) -> Outcome:
        rtype = target.rtype
        if rtype.storage != "pods":
            raise errors.path_not_found()
        binding = self._require_object(body)
        binding_name = (binding.get("metadata") or {}).get("name")
        if binding_name and binding_name != target.name:
            raise errors.bad_request(
                f"the name of the object ({binding_name}) does not match the name on the URL "
                f"({target.name})"
            )
        async with self.store.writing():
            ctx = self._ctx()
            stored = self._stored(Target(rtype, target.namespace, target.name))
            if stored is None:
                raise errors.not_found(rtype.group, rtype.plural, target.name)
            old = self._present(rtype, stored)
            result = bind(old, binding, ctx.now)  # ``old`` is this request's own decode
            if isinstance(result, str):
                raise errors.conflict("", "pods/binding", target.name, result)
            if not opts.dry_run:
                self.store.update(rtype.storage, rtype.internal(result))
        return Outcome(
            201,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
        )

    async def _finalize_namespace(self, target: Target, body: Any, opts: WriteOptions) -> Outcome:
        """PUT namespaces/NAME/finalize: only ``spec.finalizers`` changes."""
        rtype = target.rtype
        if rtype.storage != "namespaces":
            raise errors.path_not_found()
        obj = self._require_object(body)
        finalizers = list((obj.get("spec") or {}).get("finalizers") or [])

        def produce(current: Json) -> Json:
            current["spec"] = {"finalizers": finalizers} if finalizers else {}
            return current

        return await self.finalize_namespace(target.name, produce, opts)

    async def finalize_namespace(
        self, name: str, produce: Callable[[Json], Json], opts: WriteOptions
    ) -> Outcome:
        """Rewrite a namespace's spec.finalizers; delete it once nothing holds it any more."""
        rtype = self.registry.lookup("", "v1", "namespaces")
        assert rtype is not None
        async with self.store.writing():
            stored = self.store.get("namespaces", "", name)
            if stored is None:
                raise errors.not_found("", "namespaces", name)
            new = produce(stored)  # ``stored`` is this request's own decode
            if opts.dry_run:
                return Outcome(200, self._present(rtype, new))
            result = self.store.update("namespaces", new)
            if (
                result["metadata"].get("deletionTimestamp")
                and not (result.get("spec") or {}).get("finalizers")
                and not result["metadata"].get("finalizers")
            ):
                self.store.delete("namespaces", "", name)
        return Outcome(200, self._present(rtype, result))

    # -- delete -----------------------------------------------------------------------------

    async def delete(self, target: Target, options: Json, opts: WriteOptions) -> Outcome:
        rtype = target.rtype
        if target.subresource:
            raise errors.method_not_supported(
                rtype.group, f"{rtype.plural}/{target.subresource}", "delete"
            )
        validate_delete_options(options)
        if rtype.storage == "namespaces" and target.name in IMMORTAL_NAMESPACES:
            raise errors.forbidden(
                "", "namespaces", target.name, "this namespace may not be deleted"
            )
        async with self.store.writing():
            ctx = self._ctx()
            outcome = self._delete_locked(target, options, opts, ctx)
        if (
            rtype.strategy.delete_warning
            and not options.get("propagationPolicy")
            and (options.get("orphanDependents") is None)
        ):
            outcome.warnings.append(rtype.strategy.delete_warning)
        return outcome

    def _delete_locked(
        self, target: Target, options: Json, opts: WriteOptions, ctx: WriteContext
    ) -> Outcome:
        """Carry out :func:`~devtools.cluster.apirules.deletion.plan_delete` on the live object."""
        rtype = target.rtype
        stored = self._stored(target)
        if stored is None:
            raise errors.not_found(rtype.group, rtype.plural, target.name)
        live = self._present(rtype, stored)
        plan = plan_delete(rtype, live, options, now=self.clock())
        if plan.pending:
            return self._finalize_delete(rtype, live)
        current = plan.obj
        if plan.write and not opts.dry_run:
            current = self._present(
                rtype, self.store.update(rtype.storage, rtype.internal(plan.obj))
            )
        if not plan.remove:
            # 202 only when the caller explicitly asked for cascading (handlers/delete.go).
            return Outcome(202 if options.get("orphanDependents") is False else 200, current)
        if opts.dry_run:
            return self._finalize_delete(rtype, current)
        last = self.store.delete(rtype.storage, target.namespace, target.name)
        return self._finalize_delete(rtype, self._present(rtype, last))

    @staticmethod
    def _finalize_delete(rtype: ResourceType, obj: Json) -> Outcome:
        """The deleted object for stores with ReturnDeletedObject, else a Success Status."""
        if rtype.strategy.return_deleted_object:
            return Outcome(200, obj)
        meta = obj["metadata"]
        return Outcome(
            200, errors.success_status(rtype.group, rtype.plural, meta["name"], meta.get("uid", ""))
        )

    async def delete_collection(
        self,
        target: Target,
        names: list[str],
        options: Json,
        opts: WriteOptions,
    ) -> list[Json]:
        """Delete each named object as a DELETE would; NotFound in between is ignored."""
        validate_delete_options(options)
        deleted = []
        for name in names:
            try:
                outcome = await self.delete(
                    Target(target.rtype, target.namespace, name), copy_tree(options), opts
                )
            except StatusError as exc:
                if exc.code == 404:
                    continue
                raise
            body = outcome.body  # a delete answers with an object, never stored bytes
            deleted.append(decode(body) if isinstance(body, bytes) else body)
        return deleted
