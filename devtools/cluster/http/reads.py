"""GET and LIST: list options, selectors, resourceVersion semantics and pagination.

- **Query parameters** are decoded the way the apiserver's parameter codec does it: booleans
  with Go's ``strconv.ParseBool`` (the Python client sends ``True``), integers with
  ``ParseInt``; malformed values are 400s, inconsistent combinations 422 (``ListOptions``).
- **resourceVersion** (api-concepts "semantics for get and list"): unset = most recent, ``0`` =
  any (we are always fresh), ``NotOlderThan`` (the default for a non-zero RV) waits up to a few
  seconds for a future RV and then answers 504 "Too large resource version"; ``Exact`` serves
  the state at that RV, rebuilt from the change history, or 410 once it is compacted.
- **Pagination**: ``limit`` + ``continue``. The token records the snapshot RV and the last key,
  so every page is the list as it was at the first page's RV; an expired token is a 410 whose
  Status carries a fresh, inconsistent continue token, exactly as upstream. A page reads the
  store like etcd's range read: from the token's key onwards (:meth:`Store.snapshot`), decoding
  nothing without a selector and, with one, only until ``limit + 1`` objects matched.
  ``remainingItemCount`` is counted, not read, so a page's cost follows its size, not the
  collection's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from api.objects import Json
from devtools.cluster.apirules import errors
from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.apirules.resources import ResourceType
from devtools.cluster.apirules.scale import scale_of
from devtools.cluster.apirules.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from devtools.cluster.http import wire
from devtools.cluster.storage.store import Snapshot, Store, TooOld, decode

__all__ = [
    "ListOptions",
    "Page",
    "Reader",
    "go_bool",
    "go_int",
    "matches",
    "parse_list_options",
]

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


def go_bool(value: str | None, name: str) -> bool | None:
    """strconv.ParseBool; absent is None, garbage is a 400."""
    if value is None:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise errors.bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def go_int(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


@dataclass
class ListOptions:
    labels: LabelSelector | None = None
    fields: FieldSelector | None = None
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""
    watch: bool = False
    allow_bookmarks: bool = False
    timeout_seconds: int | None = None
    send_initial_events: bool | None = None

    @property
    def filtered(self) -> bool:
        return bool(
            (self.labels is not None and not self.labels.empty)
            or (self.fields is not None and not self.fields.empty)
        )


def _list_options_invalid(causes: list[errors.Cause]) -> StatusError:
    return errors.invalid("meta.k8s.io", "ListOptions", "", causes)


def parse_list_options(query: Mapping[str, str], rtype: ResourceType) -> ListOptions:
    opts = ListOptions()
    try:
        if query.get("labelSelector"):
            opts.labels = parse_label_selector(query["labelSelector"])
        if query.get("fieldSelector"):
            opts.fields = parse_field_selector(query["fieldSelector"], rtype.field_labels)
    except SelectorError as exc:
        raise errors.bad_request(str(exc)) from None
    opts.watch = bool(go_bool(query.get("watch"), "watch"))
    opts.allow_bookmarks = bool(go_bool(query.get("allowWatchBookmarks"), "allowWatchBookmarks"))
    opts.send_initial_events = go_bool(query.get("sendInitialEvents"), "sendInitialEvents")
    opts.limit = go_int(query.get("limit"), "limit") or 0
    opts.timeout_seconds = go_int(query.get("timeoutSeconds"), "timeoutSeconds")
    opts.continue_token = query.get("continue", "")
    opts.resource_version = query.get("resourceVersion", "")
    opts.resource_version_match = query.get("resourceVersionMatch", "")
    _validate_list_options(opts)
    return opts


def _validate_list_options(opts: ListOptions) -> None:
    """metainternalversion validation.ValidateListOptions."""
    causes: list[errors.Cause] = []
    match = opts.resource_version_match
    if opts.send_initial_events is not None:
        if not opts.watch:
            causes.append(
                errors.field_forbidden(
                    "sendInitialEvents", "sendInitialEvents is forbidden for list"
                )
            )
        else:
            if match != "NotOlderThan":
                causes.append(
                    errors.field_forbidden(
                        "resourceVersionMatch",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )
                )
            if not opts.allow_bookmarks:
                causes.append(
                    errors.field_forbidden(
                        "allowWatchBookmarks",
                        "sendInitialEvents requires setting allowWatchBookmarks to true",
                    )
                )
    elif opts.watch and match:
        causes.append(
            errors.field_forbidden(
                "resourceVersionMatch", "resourceVersionMatch is forbidden for watch"
            )
        )
    if match and not opts.watch:
        if not opts.resource_version:
            causes.append(
                errors.field_forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            )
        if opts.continue_token:
            causes.append(
                errors.field_forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                )
            )
        if match not in ("Exact", "NotOlderThan"):
            causes.append(
                errors.field_not_supported(
                    "resourceVersionMatch", match, ("Exact", "NotOlderThan", "")
                )
            )
        if match == "Exact" and opts.resource_version == "0":
            causes.append(
                errors.field_forbidden(
                    "resourceVersionMatch",
                    'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
            )
    if causes:
        raise _list_options_invalid(causes)


def parse_resource_version(value: str) -> int:
    try:
        rv = int(value)
    except ValueError:
        raise errors.bad_request(
            f'invalid resource version: strconv.ParseUint: parsing "{value}": invalid syntax'
        ) from None
    if rv < 0:
        raise errors.bad_request(
            f'invalid resource version: strconv.ParseUint: parsing "{value}": invalid syntax'
        )
    return rv


def matches(obj: Json, opts: ListOptions) -> bool:
    if opts.labels is not None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if not opts.labels.matches(labels):
            return False
    return opts.fields is None or opts.fields.matches(obj)


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    payload = {"v": "meta.k8s.io/v1", "rv": rv, "start": f"{start[0]}/{start[1]}\u0000"}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw)
        if payload.get("v") != "meta.k8s.io/v1":
            raise ValueError(
                "continue key is not valid: incorrect encoded start resourceVersion "
                "(version meta.k8s.io/v1)"
            )
        start = str(payload["start"]).rstrip("\u0000")
        namespace, _, name = start.partition("/")
        return int(payload["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise errors.bad_request(f"invalid continue token: {exc}") from None


class Reader:
    """Serves GET and LIST from the store."""

    def __init__(self, store: Store, *, too_large_wait: float = 3.0) -> None:
        self.store = store
        self.too_large_wait = too_large_wait

    async def wait_fresh(self, rv: int) -> None:
        """NotOlderThan a future RV: wait briefly, then 504 Too large resource version."""
        if rv <= self.store.resource_version:
            return
        if not await self.store.wait_for_resource_version(rv, self.too_large_wait):
            raise errors.too_large_resource_version(rv, self.store.resource_version)

    async def get(
        self, rtype: ResourceType, namespace: str, name: str, query: Mapping[str, str]
    ) -> Json:
        return rtype.present(decode(await self.get_stored(rtype, namespace, name, query)))

    async def get_stored(
        self, rtype: ResourceType, namespace: str, name: str, query: Mapping[str, str]
    ) -> bytes:
        """The stored bytes of one object (GET), after the resourceVersion wait."""
        rv = query.get("resourceVersion", "")
        if rv and rv != "0":
            await self.wait_fresh(parse_resource_version(rv))
        stored = self.store.get_raw(rtype.storage, namespace, name)
        if stored is None:
            raise errors.not_found(rtype.group, rtype.plural, name)
        return stored

    async def get_scale(self, rtype: ResourceType, namespace: str, name: str) -> Json:
        if rtype.scale is None:
            raise errors.path_not_found()
        stored = self.store.get(rtype.storage, namespace, name)
        if stored is None:
            raise errors.not_found(rtype.group, rtype.plural, name)
        return scale_of(rtype, rtype.present(stored))

    async def page(self, rtype: ResourceType, namespace: str | None, opts: ListOptions) -> Page:
        """One page of a LIST: the snapshot, then at most ``limit`` objects from its start key."""
        scope = namespace or None
        start: tuple[str, str] | None = None
        if opts.continue_token:
            if opts.resource_version and opts.resource_version != "0":
                raise errors.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
            rv, start = _decode_continue(opts.continue_token)
            try:
                snapshot = self.store.snapshot(rtype.storage, scope, None if rv < 0 else rv)
            except TooOld:
                raise StatusError(
                    410,
                    "Expired",
                    _EXPIRED_CONTINUE,
                    status_metadata={"continue": _encode_continue(-1, start)},
                ) from None
        else:
            snapshot = await self._snapshot(rtype, scope, opts)
        return _read_page(rtype, snapshot, start, opts)

    async def _snapshot(
        self, rtype: ResourceType, scope: str | None, opts: ListOptions
    ) -> Snapshot:
        value = opts.resource_version
        if not value or value == "0":
            return self.store.snapshot(rtype.storage, scope)
        rv = parse_resource_version(value)
        await self.wait_fresh(rv)
        if opts.resource_version_match == "Exact":
            try:
                return self.store.snapshot(rtype.storage, scope, rv)
            except TooOld as exc:
                raise errors.expired(
                    f"too old resource version: {exc.requested} ({exc.floor})"
                ) from None
        return self.store.snapshot(rtype.storage, scope)

    async def select(
        self, rtype: ResourceType, namespace: str | None, opts: ListOptions
    ) -> tuple[list[Json], int, str, int | None]:
        """The items of one page, the list RV, the continue token and remainingItemCount."""
        page = await self.page(rtype, namespace, opts)
        return page.objects(rtype), page.rv, page.token, page.remaining

    async def list_json(
        self, rtype: ResourceType, namespace: str | None, opts: ListOptions
    ) -> bytes:
        """The LIST response body, with the stored objects spliced in (:mod:`.wire`)."""
        page = await self.page(rtype, namespace, opts)
        items = [wire.presented(rtype, raw, type_meta=rtype.custom) for raw in page.raws]
        return wire.list_document(rtype.api_version, rtype.list_kind, page.metadata(), items)

    async def list(self, rtype: ResourceType, namespace: str | None, opts: ListOptions) -> Json:
        page = await self.page(rtype, namespace, opts)
        items = page.objects(rtype)
        if not rtype.custom:
            # Typed lists serialise their items without TypeMeta.
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return {
            "apiVersion": rtype.api_version,
            "items": items,
            "kind": rtype.list_kind,
            "metadata": page.metadata(),
        }


@dataclass
class Page:
    """One LIST response before encoding: stored bytes, plus the objects decoded on the way
    (only a selector decodes them), the list RV, the continue token, remainingItemCount."""

    rv: int
    raws: list[bytes] = field(default_factory=list)
    decoded: list[Json | None] = field(default_factory=list)
    token: str = ""
    remaining: int | None = None

    def objects(self, rtype: ResourceType) -> list[Json]:
        """The items as ``rtype`` presents them (decoded now if the selector did not)."""
        return [
            obj if obj is not None else rtype.present(decode(raw))
            for raw, obj in zip(self.raws, self.decoded, strict=True)
        ]

    def metadata(self) -> Json:
        meta: Json = {"resourceVersion": str(self.rv)}
        if self.token:
            meta["continue"] = self.token
        if self.remaining is not None:
            meta["remainingItemCount"] = self.remaining
        return meta


def _read_page(
    rtype: ResourceType, snapshot: Snapshot, start: tuple[str, str] | None, opts: ListOptions
) -> Page:
    """Read objects after ``start`` until the page is full and one more is known to exist."""
    wanted = opts.limit + 1 if opts.limit > 0 else None
    keys: list[tuple[str, str]] = []
    page = Page(snapshot.rv)
    filtered = opts.filtered
    for key, raw in snapshot.after(start):
        obj: Json | None = None
        if filtered:
            obj = rtype.present(decode(raw))
            if not matches(obj, opts):
                continue
        keys.append(key)
        page.raws.append(raw)
        page.decoded.append(obj)
        if wanted is not None and len(keys) == wanted:
            break
    if wanted is not None and len(keys) == wanted:
        del keys[-1], page.raws[-1], page.decoded[-1]
        page.token = _encode_continue(snapshot.rv, keys[-1])
        if not filtered:
            page.remaining = snapshot.count_after(keys[-1])
    return page
