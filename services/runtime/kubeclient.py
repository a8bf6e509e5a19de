"""kubernetes_asyncio without the generated API classes and models it imports up front.

Importing ``kubernetes_asyncio`` (or any module of it) runs its package ``__init__`` files,
which import every generated API class and model: about 850 modules, 35 MiB of resident
memory in every service process and most of a second of its start. The services use four of
its modules: the ``ApiClient`` and its ``Configuration``, the exceptions, and the kubeconfig
loader (``config``); they build and read JSON themselves (:mod:`services.runtime.kube`).

This module makes those importable alone, and is where the services import them from. It
registers ``kubernetes_asyncio``,
``kubernetes_asyncio.client`` and ``kubernetes_asyncio.client.models`` as packages over the
installed files without running their ``__init__``, so that a submodule imports as usual and
costs only itself. Whoever asks one of those packages for a name its ``__init__`` defines
(``client.CoreV1Api``, ``models.V1Pod``) gets the whole ``__init__`` run at that moment, so
code that wants the full client still has it. Two of their imports, dateutil's parser and
urllib3, are put off until they are used. A process that imported kubernetes_asyncio before is
left as it is.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import ssl
import sys
import types
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp

__all__ = [
    "ApiClient",
    "ApiException",
    "ConfigException",
    "Configuration",
    "kube_config",
    "new_api_client",
]

_PACKAGE = "kubernetes_asyncio"


def _register_lean_packages() -> None:
    if _PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return  # not installed: the imports below say so
    root = Path(next(iter(spec.submodule_search_locations)))
    top = _package(_PACKAGE, root)
    top.__version__ = importlib.metadata.version(_PACKAGE)  # type: ignore[attr-defined]
    client = _package(f"{_PACKAGE}.client", root / "client")
    models = _package(f"{_PACKAGE}.client.models", root / "client" / "models")
    top.client, client.models = client, models  # type: ignore[attr-defined]
    # What kubernetes_asyncio.config and the ApiClient import from the client package.
    with _on_first_use("urllib3"):
        from kubernetes_asyncio.client import configuration, exceptions

    client.Configuration = configuration.Configuration  # type: ignore[attr-defined]
    client.ApiException = exceptions.ApiException  # type: ignore[attr-defined]
    with _on_first_use("dateutil.parser", functions=("parse",)):
        from kubernetes_asyncio.client import api_client

    client.ApiClient = api_client.ApiClient  # type: ignore[attr-defined]


@contextlib.contextmanager
def _on_first_use(name: str, functions: tuple[str, ...] = ()) -> Iterator[None]:
    """While kubernetes_asyncio imports a module the services never make it use, ``name`` is a
    stand-in: the module's ``functions`` (what ``from name import f`` takes at once) import
    the real module when called, anything else when it is first asked for. The stand-in is
    gone once the import is done, so whoever imports ``name`` later gets the real module. (The
    ApiClient imports dateutil's parser, 1.2 MiB, to deserialize into models; the
    Configuration imports urllib3, 1.2 MiB, for basic auth tokens.)"""
    if name in sys.modules:
        yield
        return
    stand_in = types.ModuleType(name)

    def real() -> Any:
        if sys.modules.get(name) is stand_in:
            raise ImportError(f"{name} is asked for while it is put off")
        return importlib.import_module(name)

    def __getattr__(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return getattr(real(), attribute)

    def put_off(function: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(real(), function)(*args, **kwargs)

        return call

    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    for function in functions:
        setattr(stand_in, function, put_off(function))
    sys.modules[name] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]


def _package(name: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    module.__file__ = str(path / "__init__.py")
    module.__package__ = name
    init_ran = False

    def __getattr__(attribute: str) -> object:
        nonlocal init_ran
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        if (path / f"{attribute}.py").is_file() or (path / attribute).is_dir():
            return importlib.import_module(f"{name}.{attribute}")
        if init_ran:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        init_ran = True
        source = (path / "__init__.py").read_text()
        exec(compile(source, module.__file__ or name, "exec"), module.__dict__)
        if attribute not in module.__dict__:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        return module.__dict__[attribute]

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = module
    return module


_register_lean_packages()

from kubernetes_asyncio import config as kube_config  # noqa: E402
from kubernetes_asyncio.client.api_client import ApiClient  # noqa: E402
from kubernetes_asyncio.client.configuration import Configuration  # noqa: E402
from kubernetes_asyncio.client.exceptions import ApiException  # noqa: E402
from kubernetes_asyncio.config import ConfigException  # noqa: E402


def new_api_client(configuration: Configuration) -> ApiClient:
    """An ApiClient whose HTTP session does not look for ``~/.netrc`` on every request.

    kubernetes_asyncio's session trusts the environment, and so aiohttp reads ``~/.netrc``, in
    a thread, for every request that carries no aiohttp auth; ours carry their credentials in
    headers or a client certificate. That thread hop was a fifth of a worker's CPU. The other
    thing the environment gave, a proxy (``HTTPS_PROXY``, ``NO_PROXY``), is read once here."""
    if configuration.proxy is None:
        configuration.proxy = environment_proxy(str(configuration.host))
    with _no_ca_store_for_plain_http(str(configuration.host)):
        client = ApiClient(configuration)
    rest = client.rest_client
    trusting: aiohttp.ClientSession = rest.pool_manager
    connector = trusting.connector
    trusting.detach()
    # kubernetes_asyncio's read buffer: a watch event may carry an object of up to 1.5 MiB.
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=2**21
    )
    return client


@contextlib.contextmanager
def _no_ca_store_for_plain_http(host: str) -> Iterator[None]:
    """kubernetes_asyncio's REST client makes a TLS context for any host, and without the
    cluster's own CA (a kubeconfig's ``certificate-authority``, the in-cluster ``ca.crt``) it
    loads the system's whole CA store into it: 0.8 MiB and 20-30 ms of every service's start,
    for a plain-http API server (the development cluster) that never uses it. For such a host
    the client gets an empty context instead. It trusts no CA: were it ever used, every
    handshake would fail, not pass."""
    if urllib.parse.urlsplit(host).scheme != "http":
        yield
        return
    rest: Any = importlib.import_module("kubernetes_asyncio.client.rest")
    real = rest.ssl
    stand_in = types.ModuleType("ssl")
    stand_in.__dict__.update(vars(real))

    def empty_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    stand_in.create_default_context = empty_context  # type: ignore[attr-defined]
    rest.ssl = stand_in
    try:
        yield
    finally:
        rest.ssl = real


def environment_proxy(host: str) -> str | None:
    """The proxy the environment names for ``host`` (a URL), unless ``NO_PROXY`` exempts it."""
    url = urllib.parse.urlsplit(host)
    proxy = urllib.request.getproxies().get(url.scheme)
    if not proxy or urllib.request.proxy_bypass(url.hostname or ""):
        return None
    return proxy
