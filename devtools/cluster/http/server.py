"""The HTTP face of the development cluster: URL grammar, verbs, options, Status errors.

The resource table changes at run time (a CRD POSTed now is served a moment later), so requests
are not routed by aiohttp's router but parsed here against the
:class:`~devtools.cluster.apirules.resources.Registry`::

    /api/v1[/namespaces/NS]/PLURAL[/NAME[/SUB]]
    /apis/GROUP/VERSION[/namespaces/NS]/PLURAL[/NAME[/SUB]]
    (and the legacy /api/v1/watch/... form)

HTTP method plus shape gives the verb (get, list, watch, create, update, patch, delete,
deletecollection). Every failure leaves as a metav1.Status with the right code and reason;
an unexpected exception becomes a 500 InternalError Status with no traceback on the wire.
``pods/exec`` (GET for a WebSocket, POST for SPDY) is served by
:class:`~devtools.cluster.http.podexec.PodExec` once the faults and the latency have had their say.

Before a request is served the fault engine decides what happens to it (an injected error, a
racing writer, a dropped connection) and the latency model sleeps for its verb class.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from random import Random
from typing import Any

from aiohttp import web

from api.objects import Json
from devtools.cluster.apirules import errors
from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.apirules.resources import Registry, ResourceType
from devtools.cluster.http import discovery, openapi_docs, tables, wire
from devtools.cluster.http.faults import Decision, Faults, LatencyModel, RequestInfo
from devtools.cluster.http.podexec import PodExec
from devtools.cluster.http.reads import Reader, go_bool, go_int, parse_list_options
from devtools.cluster.http.watch import Watch, WatchHub, WatchInfo, WatchSettings
from devtools.cluster.http.writes import Outcome, Target, WriteOptions, Writer, parse_body
from devtools.cluster.storage.store import Store, decode

__all__ = ["ApiServer", "Route", "parse_route"]

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
_WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
_OPTIONS_KIND = {
    "create": "CreateOptions",
    "update": "UpdateOptions",
    "patch": "PatchOptions",
    "delete": "DeleteOptions",
    "deletecollection": "DeleteOptions",
}


@dataclass
class Route:
    """A parsed resource URL."""

    group: str
    version: str
    plural: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    legacy_watch: bool = False


def parse_route(path: str) -> Route | None:
    """Split a resource path into its parts; None if it is not one."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    legacy_watch = False
    if rest and rest[0] == "watch":
        legacy_watch, rest = True, rest[1:]
    if not rest:
        return None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    else:
        namespace = ""
    if len(rest) > 3:
        return None
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    return Route(group, version, rest[0], namespace, name, subresource, legacy_watch)


def _verb(method: str, route: Route, watch: bool) -> str:
    if method == "GET":
        if watch or route.legacy_watch:
            return "watch"
        return "get" if route.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if route.name else "deletecollection"
    return ""


def _method_not_allowed() -> StatusError:
    return StatusError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


def _json_response(code: int, body: Any, warnings: list[str] | None = None) -> web.Response:
    """A JSON response; ``body`` is a JSON-able value or already encoded bytes."""
    response = web.Response(
        status=code,
        body=body if isinstance(body, bytes) else wire.dumps(body),
        content_type="application/json",
    )
    for warning in warnings or []:
        # RFC 7234 warn-text is a quoted-string: backslash-escape quotes and backslashes.
        text = warning.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{text}"')
    return response


def _representation(request: web.Request) -> str:
    """What the client accepts: plain "json", or a Table or PartialObjectMetadata view."""
    kind, _ = tables.negotiate(request.headers.get("Accept", ""))
    return kind


def _status_response(error: StatusError) -> web.Response:
    response = _json_response(error.code, error.body())
    for key, value in error.headers.items():
        response.headers[key] = value
    return response


@dataclass
class ApiServer:
    """Everything a request needs, and the aiohttp application that serves it."""

    store: Store
    registry: Registry
    writer: Writer
    reader: Reader
    hub: WatchHub
    faults: Faults
    latency: LatencyModel
    watch_settings: WatchSettings
    rng: Random
    extra_routes: list[Callable[[web.Application], object]] = field(default_factory=list)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    pod_exec: PodExec = field(init=False)

    def __post_init__(self) -> None:
        self.pod_exec = PodExec(self.store, self.registry, self.writer)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        for add in self.extra_routes:
            add(app)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except StatusError as exc:
            return _status_response(exc)
        except web.HTTPException:
            raise
        except ConnectionError:
            raise
        except Exception as exc:  # a bug: answer like the apiserver's panic handler, no traceback
            log.exception("unexpected error serving %s %s", request.method, request.path)
            return _status_response(errors.internal_error(f"{type(exc).__name__}: {exc}"))

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if self.faults.paused:
            raise self.faults.decide(RequestInfo(verb="")).error or errors.service_unavailable("")
        served = self._non_resource(request, path)
        if served is not None:
            return served
        route = parse_route(path)
        if route is None:
            raise errors.path_not_found()
        rtype = self.registry.lookup(route.group, route.version, route.plural)
        if rtype is None:
            raise errors.path_not_found()
        query = request.query
        watch = bool(go_bool(query.get("watch"), "watch"))
        verb = _verb(request.method, route, watch)
        if not verb:
            raise _method_not_allowed()
        return await self._serve_resource(request, rtype, route, verb, query)

    # -- non-resource paths -----------------------------------------------------------------

    def _non_resource(self, request: web.Request, path: str) -> web.StreamResponse | None:
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/openapi/v3" and request.method == "GET":
            return _json_response(200, openapi_docs.root_document(self.registry))
        if path.startswith("/openapi/v3/") and request.method == "GET":
            parts = [p for p in path.removeprefix("/openapi/v3/").split("/") if p]
            doc = None
            if parts[:1] == ["api"] and len(parts) == 2:
                doc = openapi_docs.group_version_document(self.registry, "", parts[1])
            elif parts[:1] == ["apis"] and len(parts) == 3:
                doc = openapi_docs.group_version_document(self.registry, parts[1], parts[2])
            if doc is None:
                raise errors.path_not_found()
            return _json_response(200, doc)
        if path == "/openapi/v2" and request.method == "GET":
            return openapi_docs.v2_response(request.headers.get("Accept", ""))
        if path.startswith("/openapi/"):
            raise errors.path_not_found()
        if request.method != "GET":
            if path in ("/version", "/api", "/apis", "/api/v1") or (
                path.startswith("/apis/") and len([p for p in path.split("/") if p]) <= 3
            ):
                raise _method_not_allowed()
            return None
        if path == "/version":
            return _json_response(200, discovery.version())
        if path == "/api":
            return _json_response(200, discovery.api_versions(request.host))
        if path == "/apis":
            return _json_response(200, discovery.group_list(self.registry))
        parts = [p for p in path.split("/") if p]
        if parts == ["api", "v1"]:
            doc = discovery.api_resource_list(self.registry, "", "v1")
            return _json_response(200, doc)
        if len(parts) == 2 and parts[0] == "apis":
            group_doc = discovery.group(self.registry, parts[1])
            if group_doc is None:
                raise errors.path_not_found()
            return _json_response(200, group_doc)
        if len(parts) == 3 and parts[0] == "apis":
            doc = discovery.api_resource_list(self.registry, parts[1], parts[2])
            if doc is None:
                raise errors.path_not_found()
            return _json_response(200, doc)
        return None

    # -- resources --------------------------------------------------------------------------

    async def _serve_resource(
        self,
        request: web.Request,
        rtype: ResourceType,
        route: Route,
        verb: str,
        query: Mapping[str, str],
    ) -> web.StreamResponse:
        if rtype.namespaced and not route.namespace and verb not in ("list", "watch"):
            raise errors.path_not_found()
        if not rtype.namespaced and route.namespace:
            raise errors.path_not_found()
        if route.subresource and route.subresource not in rtype.subresources():
            if rtype.custom and route.name:
                # crdHandler answers an undeclared subresource with NotFound for the object.
                raise errors.not_found(rtype.group, rtype.plural, route.name)
            raise errors.path_not_found()
        if route.subresource and verb in ("list", "deletecollection"):
            raise errors.path_not_found()
        if route.subresource == "exec" and verb not in ("get", "create"):
            raise _method_not_allowed()
        base_verb = "get" if verb == "watch" and route.name else verb
        if base_verb not in ("get",) and not rtype.supports(verb) and not route.subresource:
            raise _method_not_allowed()
        if route.subresource == "binding" and verb != "create":
            raise _method_not_allowed()
        if verb == "create" and route.name and route.subresource not in ("binding", "exec"):
            raise _method_not_allowed()
        if route.subresource == "finalize" and verb != "update":
            raise _method_not_allowed()
        if route.subresource in ("status", "scale") and verb not in ("get", "update", "patch"):
            raise _method_not_allowed()

        opts = self._write_options(request, verb, query)
        info = RequestInfo(
            verb=verb,
            resource=rtype.plural,
            namespace=route.namespace,
            name=route.name,
            subresource=route.subresource,
            user_agent=request.headers.get("User-Agent", ""),
            field_manager=opts.field_manager,
            storage=rtype.storage,
        )
        decision = self.faults.decide(info)
        if decision.error is not None:
            raise decision.error
        await self.sleep(self.latency.draw("write" if verb in _WRITE_VERBS else "read"))
        if decision.drop_before:
            return self._drop(request)
        if decision.conflict and route.name:
            async with self.store.writing():
                self.store.touch(rtype.storage, route.namespace, route.name)

        if route.subresource == "exec":
            return await self.pod_exec.serve(request, route.namespace, route.name)
        target = Target(rtype, route.namespace, route.name, route.subresource)
        if verb == "watch":
            return await self._watch(request, rtype, route, query, decision)
        response = await self._execute(request, target, verb, query, opts)
        if decision.drop_after:
            return self._drop(request)
        return response

    def _drop(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            transport.abort()
        return web.Response(status=500)

    @staticmethod
    def _write_options(request: web.Request, verb: str, query: Mapping[str, str]) -> WriteOptions:
        opts = WriteOptions(
            field_manager=query.get("fieldManager", ""),
            field_validation=query.get("fieldValidation", ""),
            force=go_bool(query.get("force"), "force"),
            user_agent=request.headers.get("User-Agent", ""),
        )
        if verb not in _WRITE_VERBS:
            return opts
        causes = []
        dry_run = query.getall("dryRun", []) if hasattr(query, "getall") else []
        for value in dry_run:
            if value != "All":
                causes.append(errors.field_not_supported("dryRun", dry_run, ("All",)))
                break
        opts.dry_run = "All" in dry_run
        if opts.field_validation not in ("", "Ignore", "Warn", "Strict"):
            causes.append(
                errors.field_not_supported(
                    "fieldValidation", opts.field_validation, ("Ignore", "Strict", "Warn")
                )
            )
        if len(opts.field_manager) > 128:
            causes.append(
                errors.Cause(
                    "FieldValueTooLong", "Too long: may not be more than 128 bytes", "fieldManager"
                )
            )
        if causes:
            raise errors.invalid("meta.k8s.io", _OPTIONS_KIND[verb], "", causes)
        return opts

    async def _execute(
        self,
        request: web.Request,
        target: Target,
        verb: str,
        query: Mapping[str, str],
        opts: WriteOptions,
    ) -> web.StreamResponse:
        rtype = target.rtype
        if verb == "get":
            if target.subresource == "scale":
                return _json_response(
                    200, await self.reader.get_scale(rtype, target.namespace, target.name)
                )
            raw = await self.reader.get_stored(rtype, target.namespace, target.name, query)
            if _representation(request) == "json":
                return _json_response(200, wire.presented(rtype, raw))
            obj = rtype.present(decode(raw))
            return _json_response(200, self._render(request, rtype, [obj], None))
        if verb == "list":
            list_opts = parse_list_options(query, rtype)
            scope = target.namespace or None
            if _representation(request) == "json":
                return _json_response(200, await self.reader.list_json(rtype, scope, list_opts))
            body = await self.reader.list(rtype, scope, list_opts)
            return _json_response(200, self._render(request, rtype, body["items"], body))
        raw = await request.read()
        content_type = request.headers.get("Content-Type", "application/json")
        outcome: Outcome
        if verb == "create":
            outcome = await self.writer.create(target, parse_body(raw, content_type), opts)
        elif verb == "update":
            outcome = await self.writer.update(target, parse_body(raw, content_type), opts)
        elif verb == "patch":
            outcome = await self.writer.patch(target, raw, content_type, opts)
        elif verb == "delete":
            outcome = await self.writer.delete(target, self._delete_options(raw, query), opts)
        else:
            outcome = await self._delete_collection(target, raw, query, opts)
        return _json_response(outcome.code, outcome.body, outcome.warnings)

    @staticmethod
    def _render(
        request: web.Request, rtype: ResourceType, objects: list[Json], listed: Json | None
    ) -> Json:
        """The object (``listed`` None) or list in the representation the client accepts."""
        kind, version = tables.negotiate(request.headers.get("Accept", ""))
        if kind == "json":
            return listed if listed is not None else objects[0]
        metadata = (
            listed["metadata"]
            if listed is not None
            else {"resourceVersion": objects[0]["metadata"].get("resourceVersion", "")}
        )
        if kind == "Table":
            include = request.query.get("includeObject", "Metadata")
            return tables.table(rtype, objects, metadata, version=version, include_object=include)
        if listed is None:
            return tables.partial_metadata(objects[0], version)
        return {
            "kind": "PartialObjectMetadataList",
            "apiVersion": f"meta.k8s.io/{version}",
            "metadata": metadata,
            "items": [tables.partial_metadata(o, version) for o in objects],
        }

    @staticmethod
    def _delete_options(raw: bytes, query: Mapping[str, str]) -> Json:
        """DeleteOptions from the query string, overridden by a JSON body if one is sent."""
        options: Json = {}
        grace = go_int(query.get("gracePeriodSeconds"), "gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if query.get("propagationPolicy"):
            options["propagationPolicy"] = query["propagationPolicy"]
        orphan = go_bool(query.get("orphanDependents"), "orphanDependents")
        if orphan is not None:
            options["orphanDependents"] = orphan
        if raw.strip():
            body = parse_body(raw, "application/json")
            if not isinstance(body, dict):
                raise errors.bad_request(
                    "the object provided is unrecognized (must be of type DeleteOptions)"
                )
            for key in (
                "gracePeriodSeconds",
                "propagationPolicy",
                "orphanDependents",
                "preconditions",
            ):
                if body.get(key) is not None:
                    options[key] = body[key]
        return options

    async def _delete_collection(
        self, target: Target, raw: bytes, query: Mapping[str, str], opts: WriteOptions
    ) -> Outcome:
        rtype = target.rtype
        list_opts = parse_list_options(query, rtype)
        items, rv, _token, _remaining = await self.reader.select(
            rtype, target.namespace or None, list_opts
        )
        options = self._delete_options(raw, query)
        names = [(i["metadata"].get("namespace") or "", i["metadata"]["name"]) for i in items]
        for namespace, name in names:
            scoped = Target(rtype, namespace, "")
            await self.writer.delete_collection(scoped, [name], options, opts)
        if not rtype.custom:
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        body = {
            "apiVersion": rtype.api_version,
            "items": items,
            "kind": rtype.list_kind,
            "metadata": {"resourceVersion": str(rv)},
        }
        return Outcome(200, body)

    async def _watch(
        self,
        request: web.Request,
        rtype: ResourceType,
        route: Route,
        query: Mapping[str, str],
        decision: Decision,
    ) -> web.StreamResponse:
        list_opts = parse_list_options(query, rtype)
        list_opts.watch = True
        if route.name:
            from devtools.cluster.apirules.selectors import parse_field_selector

            by_name = parse_field_selector(f"metadata.name={route.name}", ("metadata.name",))
            if list_opts.fields is None:
                list_opts.fields = by_name
            else:
                both = list_opts.fields
                list_opts.fields = _AllOf(both, by_name)  # type: ignore[assignment]
        extra_delay = decision.event_delay
        render_kind, _ = tables.negotiate(request.headers.get("Accept", ""))
        watch = Watch(
            render=(lambda obj: self._render(request, rtype, [obj], None))
            if render_kind != "json"
            else None,
            store=self.store,
            rtype=rtype,
            namespace=route.namespace,
            opts=list_opts,
            settings=self.watch_settings,
            rng=self.rng,
            event_delay=lambda: self.latency.draw("watch") + extra_delay,
            info=WatchInfo(
                resource=rtype.plural,
                group=rtype.group,
                namespace=route.namespace,
                user_agent=request.headers.get("User-Agent", ""),
            ),
        )
        for action, after_events in decision.watch_actions:
            watch.schedule(action, after_events=after_events)
        self.hub.add(watch)
        try:
            return await watch.serve(request)
        finally:
            self.hub.discard(watch)


class _AllOf:
    """Two field selectors that must both match (a fieldSelector on a single-object watch)."""

    def __init__(self, *selectors: Any) -> None:
        self._selectors = selectors

    def matches(self, obj: Json) -> bool:
        return all(s.matches(obj) for s in self._selectors)

    @property
    def empty(self) -> bool:
        return False
