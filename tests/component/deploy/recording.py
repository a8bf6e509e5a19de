"""Every API request a sandbus service makes, recorded where the development cluster receives it,
under the ServiceAccount that sent it, as the authorization checks a real API server would make.

A real API server authenticates a request by its bearer token (in a Pod, the ServiceAccount's
projected token) and authorizes the user it names. The development cluster checks neither, so
the recording has to tell the services apart by something else. The field manager is not
enough, because it only comes with writes. The user agent is not enough either, because every
service's ApiClient sends kubernetes_asyncio's default. So each service is given a kubeconfig of
its own (:func:`write_account_kubeconfig`), whose token is the user name of its ServiceAccount,
as a Pod of its Deployment would be given its token. An aiohttp middleware in front of the
cluster's handler reads the token of every request, refused ones included (those were
authorized too). Requests with another token (the cluster's own simulated kubelet and garbage
collector, the test's client) are not recorded.

What is checked for one request (:func:`checks`), as k8s.io/apiserver does it:

* **the request itself**, as RequestInfoFactory derives it from the URL and the method. GET is
  get, list or watch (``watch`` in the query or the legacy ``/watch/`` prefix), a list narrowed
  by ``fieldSelector=metadata.name=...`` carries that name, and DELETE without a name is
  deletecollection. A WebSocket exec (a GET on ``pods/exec``) is authorized as get and, since
  Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission, KEP-4006), also as create, so
  it needs both to work on every version;
* **owner references**, where the OwnerReferencesPermissionEnforcement admission plugin is on
  (plugin/pkg/admission/gc; OpenShift, for one, turns it on). An update or patch that
  changes an object's ``ownerReferences`` needs delete on that object. A reference newly
  blocking its owner's deletion (``blockOwnerDeletion: true``) needs update on the owner's
  ``finalizers`` subresource. Which references change is decided against the object the
  cluster holds when the request arrives, as the plugin compares the old object with the new.
  A merge patch replaces the whole list, so the patch's list is the new one;
* **the read back** that every write of sandbus may be followed by: the workers' executor
  (services/runtime/reconcile/executing.py) gets the object when its create answers
  AlreadyExists or a write with ``on_conflict="refresh"`` answers Conflict, and the Lease loop
  (services/runtime/election.py) when its create of the Lease loses a race. A scenario seldom
  meets those answers, so each recorded create, update or patch counts as a get of its object
  too: granting the write without the read would fail exactly when the read is needed.

Requests to paths that are no resource (discovery, /version, health) are kept apart. The default
ClusterRoles let every authenticated user read those, and the services make none.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from aiohttp import web

from api.objects import Json
from devtools.cluster import DevCluster
from devtools.cluster.http.kubeconfig import kubeconfig_document
from devtools.cluster.http.server import Route, parse_route
from tests.unit.deploy.manifests import NAMESPACE, Access

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Resolve = Callable[[str, str], str | None]
"""(apiVersion, kind) of an owner → its resource (plural), as the API server's RESTMapper."""

_TOKEN_PREFIX = "system:serviceaccount:"
_TRUE = ("true", "1")
_WRITES = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def account_token(account: str, namespace: str = NAMESPACE) -> str:
    """The token that identifies the ServiceAccount here: its user name
    (``system:serviceaccount:NS:NAME``), which is what its real token authenticates as."""
    return f"{_TOKEN_PREFIX}{namespace}:{account}"


def write_account_kubeconfig(path: Path, server: str, account: str) -> Path:
    """A kubeconfig for the development cluster at ``server`` that sends ``account``'s token."""
    document = kubeconfig_document(server)
    users = document["users"]
    assert isinstance(users, list)
    users[0]["user"]["token"] = account_token(account)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@dataclass(frozen=True)
class Check:
    access: Access
    why: str
    """``request`` (the request itself), ``owner references``, ``blocking owner`` or
    ``read back``."""


def request_access(method: str, route: Route, query: Mapping[str, str]) -> list[Access]:
    """The authorization of the request itself: one access, two for a WebSocket exec."""
    resource = f"{route.plural}/{route.subresource}" if route.subresource else route.plural
    name = route.name
    if method == "GET":
        if route.legacy_watch or query.get("watch", "").lower() in _TRUE:
            verb = "watch"
        else:
            verb = "get" if name else "list"
        selector = query.get("fieldSelector", "")
        if not name and selector.startswith("metadata.name=") and "," not in selector:
            name = selector.removeprefix("metadata.name=")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    elif method in _WRITES:
        verb = _WRITES[method]
    else:
        return []
    access = Access(verb, route.group, resource, route.namespace, name)
    if resource == "pods/exec" and verb == "get":
        return [access, Access("create", route.group, resource, route.namespace, name)]
    return [access]


def _references(obj: Json | None) -> list[Json]:
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences")
    return [ref for ref in refs or () if isinstance(ref, dict)]


def owner_access(
    verb: str,
    route: Route,
    old: Json | None,
    new_references: list[Json] | None,
    resolve: Resolve,
) -> list[Check]:
    """What the OwnerReferencesPermissionEnforcement plugin asks for a create, update or patch
    (``new_references``: the object's references after the write; None: unchanged)."""
    if route.subresource or verb not in ("create", "update", "patch") or new_references is None:
        return []
    before = _references(old)
    if old is not None and before == new_references:
        return []
    if old is None and not new_references:
        return []
    checks: list[Check] = []
    if verb != "create":
        checks.append(
            Check(
                Access("delete", route.group, route.plural, route.namespace, route.name),
                "owner references",
            )
        )
    was_blocking = {ref.get("uid") for ref in before if ref.get("blockOwnerDeletion")}
    for ref in new_references:
        if not ref.get("blockOwnerDeletion") or ref.get("uid") in was_blocking:
            continue
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        plural = resolve(api_version, kind)
        group = api_version.rpartition("/")[0]
        if plural is None:
            raise AssertionError(f"an owner reference to an unknown kind: {api_version} {kind}")
        checks.append(
            Check(
                Access("update", group, f"{plural}/finalizers", route.namespace, str(ref["name"])),
                "blocking owner",
            )
        )
    return checks


def checks(
    method: str,
    path: str,
    query: Mapping[str, str],
    body: bytes,
    *,
    old: Json | None,
    resolve: Resolve,
) -> list[Check] | None:
    """Every authorization check of one request; None for a path that is no resource."""
    route = parse_route(path)
    if route is None:
        return None
    found = [Check(access, "request") for access in request_access(method, route, query)]
    verb = _WRITES.get(method)
    if verb is not None and body:
        try:
            written = json.loads(body)
        except ValueError:
            written = None  # not JSON (an apply patch in YAML): sandbus sends none
        if isinstance(written, dict):
            metadata = written.get("metadata") or {}
            references = (
                _references(written) if verb != "patch" or "ownerReferences" in metadata else None
            )
            found += owner_access(verb, route, old, references, resolve)
            name = route.name or str(metadata.get("name") or "")
            if route.subresource in ("", "status"):
                read = Access("get", route.group, route.plural, route.namespace, name)
                found.append(Check(read, "read back"))
    return found


@dataclass(frozen=True)
class Recorded:
    account: str
    check: Check
    request: str
    """``METHOD path?query``, for a failure's message."""

    @property
    def access(self) -> Access:
        return self.check.access


@dataclass
class RequestRecorder:
    """Install it on a cluster before the cluster starts; then read what it recorded."""

    accounts: Iterable[str]
    requests: list[Recorded] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)
    """Requests of an account to paths that are no resource."""

    def __post_init__(self) -> None:
        self._by_token = {f"Bearer {account_token(account)}": account for account in self.accounts}

    def install(self, cluster: DevCluster) -> None:
        def resolve(api_version: str, kind: str) -> str | None:
            group = api_version.rpartition("/")[0]
            for rtype in cluster.registry.all():
                if rtype.group == group and rtype.kind == kind:
                    return rtype.plural
            return None

        @web.middleware
        async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
            account = self._by_token.get(request.headers.get("Authorization", ""))
            if account is not None:
                writing = request.method in _WRITES
                # aiohttp keeps the body it read, so the handler reads it again unchanged.
                body = await request.read() if writing else b""
                query = dict(request.query)
                found = checks(
                    request.method,
                    request.path,
                    query,
                    body,
                    old=_stored(cluster, request.path) if writing else None,
                    resolve=resolve,
                )
                shown = f"{request.method} {request.path}" + (f"?{_query(query)}" if query else "")
                if found is None:
                    self.elsewhere.append(shown)
                for check in found or ():
                    self.requests.append(Recorded(account, check, shown))
            return await handler(request)

        # The cluster builds its aiohttp application when it starts, and first calls each of
        # these with it: the one place to put a middleware in front of its handler.
        cluster.api.extra_routes.append(lambda app: app.middlewares.append(record))

    def of(self, account: str) -> list[Recorded]:
        return [recorded for recorded in self.requests if recorded.account == account]


def _stored(cluster: DevCluster, path: str) -> Json | None:
    route = parse_route(path)
    if route is None or not route.name:
        return None
    rtype = cluster.registry.lookup(route.group, route.version, route.plural)
    if rtype is None:
        return None
    return cluster.store.get(rtype.storage, route.namespace, route.name)


def _query(query: Mapping[str, str]) -> str:
    return "&".join(f"{key}={value}" for key, value in sorted(query.items()))
