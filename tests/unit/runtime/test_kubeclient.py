"""The services import kubernetes_asyncio's client without its generated API classes and
models (services/runtime/kubeclient.py), and whoever wants those still gets them; nor aiohttp's
server, unless they serve a metrics endpoint."""

from __future__ import annotations

import ssl
import subprocess
import sys
import textwrap

import pytest
from kubernetes_asyncio.client import rest

from services.runtime.kubeclient import Configuration, environment_proxy, new_api_client


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_service_loads_a_few_modules_of_the_client() -> None:
    loaded = run(
        """
        import sys
        import services.runtime.kube, services.runtime.settings
        names = [name for name in sys.modules if name.startswith("kubernetes_asyncio")]
        print(len(names), "kubernetes_asyncio.client.models.v1_pod" in sys.modules)
        """
    )
    count, models = loaded.split()
    assert int(count) < 40 and models == "False", loaded


def test_the_whole_client_is_there_for_who_asks() -> None:
    answer = run(
        """
        import services.runtime.kube
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client import CoreV1Api, V1Pod
        import kubernetes_asyncio.client.models as models
        assert models.V1Pod is V1Pod and client.ApiClient is services.runtime.kube.ApiClient
        try:
            from kubernetes_asyncio.client import NoSuchThing
        except ImportError as error:
            print(type(error).__name__, CoreV1Api.__name__)
        """
    )
    assert answer == "ImportError CoreV1Api"


def test_a_process_that_imported_the_client_first_keeps_it() -> None:
    answer = run(
        """
        import kubernetes_asyncio.client
        full = kubernetes_asyncio.client
        import services.runtime.kube
        print(kubernetes_asyncio.client is full, hasattr(full, "CoreV1Api"))
        """
    )
    assert answer == "True True"


def test_the_proxy_of_the_environment_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session no longer reads the environment per request; its proxy still applies."""
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "internal.example")
    assert environment_proxy("https://api.example:6443") == "http://proxy.example:3128"
    assert environment_proxy("https://internal.example:6443") is None
    monkeypatch.delenv("https_proxy")
    assert environment_proxy("https://api.example:6443") is None


async def test_an_api_client_asks_no_netrc_and_keeps_a_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    configuration = Configuration()
    configuration.host = "https://api.example:6443"
    client = new_api_client(configuration)
    try:
        assert client.rest_client.pool_manager.trust_env is False
        assert client.rest_client.proxy == "http://proxy.example:3128"
    finally:
        await client.close()
    assert client.rest_client.pool_manager.closed


async def _tls_context_of(host: str) -> ssl.SSLContext:
    configuration = Configuration()
    configuration.host = host
    client = new_api_client(configuration)
    context: ssl.SSLContext = client.rest_client.pool_manager.connector._ssl
    await client.close()
    return context


async def test_a_plain_http_api_server_costs_no_ca_store_and_https_keeps_it() -> None:
    """The development cluster speaks plain HTTP: its client's TLS context, never used, loads
    no CA at all (so it could verify nothing); an https host keeps kubernetes_asyncio's."""
    plain = await _tls_context_of("http://127.0.0.1:8080")
    assert plain.cert_store_stats()["x509_ca"] == 0
    assert plain.verify_mode == ssl.CERT_REQUIRED and plain.check_hostname
    assert rest.ssl is ssl, "the client's module is given back its ssl"
    secure = await _tls_context_of("https://api.example:6443")
    system = ssl.create_default_context()
    assert secure.cert_store_stats() == system.cert_store_stats()


def test_a_service_without_a_metrics_endpoint_does_not_load_the_http_server() -> None:
    loaded = run(
        """
        import sys
        import services.runtime.reconcile.serving, services.watcher.service
        import services.sandbox.service, services.claim.service
        print("aiohttp.web" in sys.modules)
        """
    )
    assert loaded == "False", "aiohttp's server is loaded only to serve an endpoint"


def test_dateutils_parser_loads_only_when_the_api_client_parses_a_date() -> None:
    loaded = run(
        """
        import sys
        import services.runtime.kubeclient
        from kubernetes_asyncio.client import api_client
        print("dateutil.parser._parser" in sys.modules)
        when = api_client.parse("2026-03-01T12:00:00Z")  # what it deserializes dates with
        print(when.isoformat(), "dateutil.parser._parser" in sys.modules)
        import dateutil.parser
        print(dateutil.parser.isoparse("2026-03-01").year)
        """
    )
    assert loaded.split() == ["False", "2026-03-01T12:00:00+00:00", "True", "2026"], loaded


def test_urllib3_loads_only_when_the_configuration_makes_a_basic_auth_token() -> None:
    loaded = run(
        """
        import sys
        import services.runtime.kubeclient
        from kubernetes_asyncio.client.configuration import Configuration
        print("urllib3" in sys.modules)
        configuration = Configuration()
        configuration.username, configuration.password = "ada", "secret"
        print(configuration.get_basic_auth_token(), "urllib3" in sys.modules)
        import urllib3
        print(urllib3.util.make_headers(basic_auth="a:b")["authorization"])
        """
    )
    assert loaded.split() == ["False", "Basic", "YWRhOnNlY3JldA==", "True", "Basic", "YTpi"]
