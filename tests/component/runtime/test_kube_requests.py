"""What the Kubernetes client sends, on real sockets. :class:`KubeApi` sends its requests itself
(services/runtime/kube.py: over its lean HTTP/1.1 pool, services/runtime/http1.py, or the
``ApiClient``'s aiohttp session through a proxy) instead of through
kubernetes_asyncio's ``call_api``, and must send what ``call_api`` sent: the same method, path,
query and JSON body, the same headers (the ``ApiClient``'s User-Agent, default headers and
cookie, and the bearer token as the configuration has it at that moment, after its refresh hook
ran), over the same TLS settings (the cluster's CA, a client certificate, insecure, the TLS
server name) and proxy; and it must answer as before: a failure status is a KubeError with the
server's reason and message, no answer in time is a Timeout.

A recording aiohttp server stands for the API server; the TLS tests make their certificates
with openssl (certificates.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from kubernetes_asyncio.config import incluster_config

from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError
from services.runtime.kubeclient import ApiClient, Configuration, kube_config, new_api_client
from tests.component.runtime.certificates import certificates, needs_openssl

NS = "default"
KEY = ObjectKey("ConfigMap", NS, "c")
ANSWER = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "items": []}


@pytest.fixture(autouse=True)
def no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Seen:
    method: str
    url: str
    """The request's target as the server saw it (absolute when it came through a proxy)."""
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    """Names in lower case."""
    body: Any


@dataclass
class ApiServer:
    """Records every request and answers ``answer`` (status, body); a watch gets one event."""

    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    answer: tuple[int, bytes] = (200, msgspec.json.encode(ANSWER))
    hang: bool = False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.seen.append(
            Seen(
                request.method,
                str(request.url),
                request.path,
                list(request.query.items()),
                {name.lower(): value for name, value in request.headers.items()},
                msgspec.json.decode(raw) if raw else None,
            )
        )
        if self.hang:
            await asyncio.sleep(3600)
        if request.query.get("watch") == "true":
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await response.write(msgspec.json.encode({"type": "ADDED", "object": ANSWER}) + b"\n")
            await response.write_eof()
            return response
        status, body = self.answer
        return web.Response(status=status, body=body, content_type="application/json")

    @property
    def last(self) -> Seen:
        return self.seen[-1]


@contextlib.asynccontextmanager
async def serving(tls: ssl.SSLContext | None = None) -> AsyncIterator[ApiServer]:
    api = ApiServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
    api.url = f"{'https' if tls else 'http'}://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield api
    finally:
        await runner.cleanup()


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with serving() as server:
        yield server


@contextlib.asynccontextmanager
async def client_of(configuration: Configuration, **kwargs: Any) -> AsyncIterator[ApiClient]:
    """An ApiClient as the services make theirs (new_api_client)."""
    client = new_api_client(configuration)
    for name, value in kwargs.items():
        setattr(client, name, value)
    try:
        yield client
    finally:
        await client.close()


def bearer(host: str, token: str = "Bearer t0ken") -> Configuration:
    """A configuration as a kubeconfig with a token leaves it (the prefix in the token)."""
    configuration = Configuration(host=host)
    configuration.api_key["BearerToken"] = token
    return configuration


# --- the same request as call_api made --------------------------------------------------------

Call = Callable[[KubeApi], Awaitable[Any]]


async def watched(kube: KubeApi) -> Any:
    async with kube.watch("ConfigMap", resource_version="41", timeout_seconds=30) as stream:
        return await stream.next_event(5.0)


CALLS: dict[str, Call] = {
    "create": lambda kube: kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}}
    ),
    "patch": lambda kube: kube.patch(KEY, {"data": {"a": "é", "b": None}, "metadata": {}}),
    "patch status": lambda kube: kube.patch(
        ObjectKey("Sandbox", NS, "s.1"), {"status": {"replicas": 1}}, subresource="status"
    ),
    "empty patch": lambda kube: kube.patch(KEY, {}),
    "replace": lambda kube: kube.replace(
        {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS, "resourceVersion": "7"}}
    ),
    "delete": lambda kube: kube.delete(KEY, uid="u-1", resource_version="7", propagation="Orphan"),
    "get": lambda kube: kube.get(KEY),
    "list": lambda kube: kube.list("ConfigMap", NS),
    "list page": lambda kube: kube.list_page(
        "Pod", limit=500, continue_token="eyJ2IjoxfQ==", label_selector="a in (b,c),!d"
    ),
    "get as of": lambda kube: kube.get_as_of(KEY, "41"),
    "watch": watched,
}


@pytest.mark.parametrize("name", CALLS)
async def test_every_call_sends_what_call_api_sent(api: ApiServer, name: str) -> None:
    call = CALLS[name]
    configuration = bearer(api.url)
    async with client_of(configuration, cookie="session=abc") as client:
        client.set_default_header("X-Extra", "1")
        old = KubeApi(client, field_manager="sandbus-test", via_call_api=True)
        lean = KubeApi(client, field_manager="sandbus-test")
        answer_to_call_api = await call(old)
        assert await call(lean) == answer_to_call_api
    sent_by_call_api, sent = api.seen
    assert (sent.method, sent.path, sent.query, sent.body) == (
        sent_by_call_api.method,
        sent_by_call_api.path,
        sent_by_call_api.query,
        sent_by_call_api.body,
    )
    # The body's bytes differ (json.dumps puts spaces in), and so its length; and aiohttp asks
    # for a compressed answer, which the lean transport (services/runtime/http1.py) does not.
    # Nothing else.
    sent_by_call_api.headers.pop("content-length", None)
    assert "accept-encoding" not in sent.headers
    sent_by_call_api.headers.pop("accept-encoding")
    assert int(sent.headers.pop("content-length", "0")) == (
        len(msgspec.json.encode(sent.body)) if sent.body is not None else 0
    )
    assert sent.headers == sent_by_call_api.headers
    assert sent.headers["authorization"] == "Bearer t0ken"
    assert sent.headers["user-agent"] == client.user_agent
    assert sent.headers["cookie"] == "session=abc" and sent.headers["x-extra"] == "1"
    assert sent.headers["accept"] == "application/json"


async def test_writes_name_the_field_manager_and_reads_do_not(api: ApiServer) -> None:
    async with client_of(bearer(api.url)) as client:
        kube = KubeApi(client, field_manager="sandbus-claim")
        for write in ("create", "patch", "replace"):
            await CALLS[write](kube)
            assert api.last.query == [("fieldManager", "sandbus-claim")], write
        assert api.last.headers["content-type"] == "application/json"
        await CALLS["patch"](kube)
        assert api.last.headers["content-type"] == "application/merge-patch+json"
        assert api.last.body == {"data": {"a": "é", "b": None}, "metadata": {}}
        for read in ("get", "delete", "list"):
            await CALLS[read](kube)
            assert api.last.query == [], read
        kube.field_manager = "someone else"
        await CALLS["patch"](kube)
        assert api.last.query == [("fieldManager", "someone else")]
        kube.field_manager = None
        await CALLS["patch"](kube)
        assert api.last.query == []


async def test_the_query_of_lists_and_watches(api: ApiServer) -> None:
    async with client_of(bearer(api.url)) as client:
        kube = KubeApi(client)
        await CALLS["list page"](kube)
        assert api.last.path == "/api/v1/pods"
        assert api.last.query == [
            ("limit", "500"),
            ("labelSelector", "a in (b,c),!d"),
            ("continue", "eyJ2IjoxfQ=="),
        ]
        await CALLS["get as of"](kube)
        assert api.last.query == [
            ("fieldSelector", "metadata.name=c"),
            ("resourceVersion", "41"),
            ("resourceVersionMatch", "Exact"),
        ]
        event = await watched(kube)
        assert event == {"type": "ADDED", "object": ANSWER}
        assert api.last.query == [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", "41"),
            ("timeoutSeconds", "30"),
        ]


# --- the token -----------------------------------------------------------------------------


async def test_the_token_is_the_configurations_at_each_request(api: ApiServer) -> None:
    """An exec plugin's token, renewed by kubernetes_asyncio's ``config.refresh_token``, is
    replaced in the configuration: the next request sends the new one."""
    configuration = bearer(api.url, "Bearer one")
    async with client_of(configuration) as client:
        kube = KubeApi(client)
        await kube.get(KEY)
        assert api.last.headers["authorization"] == "Bearer one"
        configuration.api_key["BearerToken"] = "Bearer two"
        await kube.patch(KEY, {"data": {}})
        assert api.last.headers["authorization"] == "Bearer two"
        # A token kept without its prefix, and the prefix apart (Configuration's api_key_prefix).
        configuration.api_key["BearerToken"] = "three"
        configuration.api_key_prefix["BearerToken"] = "Bearer"
        await kube.get(KEY)
        assert api.last.headers["authorization"] == "Bearer three"


async def test_the_refresh_hook_runs_before_every_request(api: ApiServer) -> None:
    configuration = bearer(api.url, "Bearer stale")
    ran: list[str] = []

    def refresh(config: Configuration) -> None:
        ran.append("sync")
        config.api_key["BearerToken"] = f"Bearer fresh-{len(ran)}"

    async def refresh_async(config: Configuration) -> None:
        await asyncio.sleep(0)
        ran.append("async")
        config.api_key["BearerToken"] = f"Bearer fresh-{len(ran)}"

    configuration.refresh_api_key_hook = refresh
    async with client_of(configuration) as client:
        kube = KubeApi(client, field_manager="m")
        await kube.create({"kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}})
        assert api.last.headers["authorization"] == "Bearer fresh-1"
        await kube.patch(KEY, {"data": {}})
        assert api.last.headers["authorization"] == "Bearer fresh-2"
        configuration.refresh_api_key_hook = refresh_async
        await kube.delete(KEY)
        assert api.last.headers["authorization"] == "Bearer fresh-3"
    assert ran == ["sync", "sync", "async"]


async def test_a_refresh_that_hangs_is_a_timeout(api: ApiServer) -> None:
    configuration = bearer(api.url)

    async def hang(config: Configuration) -> None:
        await asyncio.sleep(3600)

    configuration.refresh_api_key_hook = hang
    async with client_of(configuration) as client:
        started = time.monotonic()
        with pytest.raises(KubeError) as raised:
            await KubeApi(client, request_timeout=0.3).patch(KEY, {"data": {}})
    assert (raised.value.status, raised.value.reason) == (0, "Timeout")
    assert time.monotonic() - started < 5.0
    assert api.seen == []


async def test_no_token_no_authorization_header(api: ApiServer) -> None:
    async with client_of(Configuration(host=api.url)) as client:
        await KubeApi(client).get(KEY)
    assert "authorization" not in api.last.headers


# --- answers: errors and timeouts ------------------------------------------------------------


def status(code: int, reason: str, message: str) -> bytes:
    return msgspec.json.encode(
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    )


@pytest.mark.parametrize("via_call_api", [False, True], ids=["lean", "call_api"])
async def test_a_failure_status_is_a_kube_error_with_the_servers_reason(
    api: ApiServer, via_call_api: bool
) -> None:
    async with client_of(bearer(api.url)) as client:
        kube = KubeApi(client, field_manager="m", via_call_api=via_call_api)
        api.answer = (409, status(409, "AlreadyExists", 'configmaps "c" already exists'))
        with pytest.raises(KubeError) as exists:
            await CALLS["create"](kube)
        assert exists.value.already_exists
        assert exists.value.message == 'configmaps "c" already exists'
        api.answer = (409, status(409, "Conflict", "the object has been modified"))
        with pytest.raises(KubeError) as conflict:
            await CALLS["replace"](kube)
        assert conflict.value.conflict and conflict.value.reason == "Conflict"
        api.answer = (422, status(422, "Invalid", 'ConfigMap "c" is invalid: data: Invalid'))
        with pytest.raises(KubeError) as invalid:
            await CALLS["patch"](kube)
        assert (invalid.value.status, invalid.value.reason) == (422, "Invalid")
        assert invalid.value.message == 'ConfigMap "c" is invalid: data: Invalid'
        api.answer = (404, status(404, "NotFound", 'configmaps "c" not found'))
        with pytest.raises(KubeError) as gone:
            await CALLS["get"](kube)
        assert gone.value.not_found
        api.answer = (502, b"<html>bad gateway</html>")
        with pytest.raises(KubeError) as gateway:
            await CALLS["delete"](kube)
        assert (gateway.value.status, gateway.value.reason) == (502, "Bad Gateway")
        assert gateway.value.message == "<html>bad gateway</html>"


async def test_a_write_that_outlasts_the_timeout_is_a_timeout(api: ApiServer) -> None:
    api.hang = True
    async with client_of(bearer(api.url)) as client:
        kube = KubeApi(client, request_timeout=0.3)
        for write in ("create", "patch", "delete"):
            started = time.monotonic()
            with pytest.raises(KubeError) as raised:
                await CALLS[write](kube)
            assert (raised.value.status, raised.value.reason) == (0, "Timeout"), write
            assert "no answer within 0.3 s" in raised.value.message
            assert time.monotonic() - started < 5.0


# --- proxy and TLS -------------------------------------------------------------------------


async def test_requests_go_through_the_configured_proxy(api: ApiServer) -> None:
    configuration = bearer("http://kube.invalid:6443")
    configuration.proxy = api.url
    async with client_of(configuration) as client:
        await KubeApi(client, field_manager="m").patch(KEY, {"data": {}})
    assert api.last.url == (
        "http://kube.invalid:6443/api/v1/namespaces/default/configmaps/c?fieldManager=m"
    )
    assert api.last.headers["host"] == "kube.invalid:6443"
    assert api.last.headers["authorization"] == "Bearer t0ken"


def server_tls(files: dict[str, Path], *, client_certificate: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files["server"], files["server-key"])
    if client_certificate:
        context.load_verify_locations(files["ca"])
        context.verify_mode = ssl.CERT_REQUIRED
    return context


async def answered(configuration: Configuration) -> KubeError | None:
    """None when a patch through ``configuration`` was answered, else its error."""
    async with client_of(configuration) as client:
        try:
            await KubeApi(client, request_timeout=5.0).patch(KEY, {"data": {}})
        except KubeError as error:
            return error
    return None


@needs_openssl
async def test_tls_with_the_clusters_ca_and_a_client_certificate(tmp_path: Path) -> None:
    files = certificates(tmp_path)
    async with serving(server_tls(files, client_certificate=True)) as api:
        configuration = bearer(api.url)
        configuration.ssl_ca_cert = str(files["ca"])
        configuration.cert_file = str(files["client"])
        configuration.key_file = str(files["client-key"])
        assert await answered(configuration) is None
        assert api.last.headers["authorization"] == "Bearer t0ken"
        # The server refuses a client without a certificate; a client without the CA refuses
        # the server.
        without_certificate = bearer(api.url)
        without_certificate.ssl_ca_cert = str(files["ca"])
        refused = await answered(without_certificate)
        assert refused is not None and refused.reason == "Unreachable"
        untrusted = await answered(bearer(api.url))
        assert untrusted is not None and "CERTIFICATE_VERIFY_FAILED" in untrusted.message
    assert len(api.seen) == 1


@needs_openssl
async def test_tls_insecure_and_the_tls_server_name(tmp_path: Path) -> None:
    files = certificates(tmp_path, server_name="DNS:kube.internal")
    async with serving(server_tls(files)) as api:
        trusting = bearer(api.url)
        trusting.ssl_ca_cert = str(files["ca"])
        mismatch = await answered(trusting)  # a certificate for kube.internal, not 127.0.0.1
        assert mismatch is not None and "CERTIFICATE_VERIFY_FAILED" in mismatch.message
        trusting.tls_server_name = "kube.internal"  # a kubeconfig's tls-server-name
        assert await answered(trusting) is None
        insecure = bearer(api.url)
        insecure.verify_ssl = False  # a kubeconfig's insecure-skip-tls-verify
        assert await answered(insecure) is None
    assert len(api.seen) == 2


@needs_openssl
async def test_in_cluster_the_service_account_token_is_read_again_when_it_rotates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a Pod the token file is rotated by the kubelet; kubernetes_asyncio's refresh hook
    reads it again once its period passed (here: at every request)."""
    monkeypatch.setattr(incluster_config, "TOKEN_REFRESH_PERIOD", datetime.timedelta(0))
    files = certificates(tmp_path)
    token = tmp_path / "token"
    token.write_text("first")
    async with serving(server_tls(files)) as api:
        port = api.url.rsplit(":", 1)[1]
        configuration = Configuration()
        kube_config.load_incluster_config(
            client_configuration=configuration,
            token_filename=str(token),
            cert_filename=str(files["ca"]),
            environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port},
        )
        async with client_of(configuration) as client:
            kube = KubeApi(client, field_manager="m")
            await kube.get(KEY)
            assert api.last.headers["authorization"] == "Bearer first"
            token.write_text("second")
            await kube.patch(KEY, {"data": {}})
            assert api.last.headers["authorization"] == "Bearer second"
