"""``DevCluster``: the development cluster as one object, in-process for tests or as a service.

::

    async with DevCluster(port=0, crd_dirs=..., data_dir=None, latency=..., seed=0) as cluster:
        cluster.write_kubeconfig(tmp_path / "kubeconfig")  # for kubectl, load_kube_config
        ...  # cluster.url, cluster.store, cluster.faults

Start-up order: open the store (loading ``data_dir`` if given), serve the CRDs already stored,
create the initial namespaces (default, kube-system, kube-public, kube-node-lease), the
``default/kubernetes`` Service and the default StorageClass ``standard`` on a fresh store,
install sandbus's own CRDs and then those of ``crd_dirs`` (create or update, then wait until
they are Established), start listening, then start the simulated node components
(:mod:`.controllers`). Stop reverses it.

sandbus's CRDs are generated from the API types at start (:func:`api.crd.crd_for` over
:data:`api.kinds.ALL_KINDS`), not read from ``deploy/crds``: the types are the source of truth
(deploy/crds is generated from them and a test keeps the two equal), and an installed wheel has
no ``deploy/`` directory. By default a cluster installs them and nothing else; ``crd_dirs``
alone replaces them (the conformance suite serves only its test CRD), and ``sandbus_crds=True``
keeps them beside ``crd_dirs`` (the CLI's ``--crds``, for extra CRDs).

Addresses: the server listens on ``host``; clients are told ``url``, which is
``advertise_url``, else ``http://ADVERTISE_HOST:PORT`` (``advertise_host`` defaulting to
``host``). A cluster listening on ``0.0.0.0`` in a container advertises the name other
containers know it by; the in-process controllers connect through :attr:`DevCluster.local_url`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from random import Random
from types import TracebackType
from typing import Any, cast

import yaml
from aiohttp import web

from devtools.cluster.apirules.builtins import register_builtins
from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.apirules.resources import Registry
from devtools.cluster.apirules.storageclasses import DEFAULT_STORAGE_CLASS
from devtools.cluster.controllers.informer import SharedInformers
from devtools.cluster.controllers.lifecycle import CRD_STORAGE, Lifecycle
from devtools.cluster.controllers.plug import (
    ControllerContext,
    ControllerFactory,
    SimulationSettings,
    resolve_controllers,
)
from devtools.cluster.http.admin import admin_routes
from devtools.cluster.http.faults import Faults, LatencyModel
from devtools.cluster.http.kubeconfig import write_kubeconfig
from devtools.cluster.http.reads import Reader
from devtools.cluster.http.server import ApiServer
from devtools.cluster.http.watch import WatchHub, WatchSettings
from devtools.cluster.http.writes import Target, WriteOptions, Writer
from devtools.cluster.storage.persistence import SqliteBackend
from devtools.cluster.storage.store import Store

__all__ = ["INITIAL_NAMESPACES", "DevCluster", "sandbus_crd_documents"]

log = logging.getLogger(__name__)

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_DEFAULT = object()
_SYSTEM = WriteOptions(user_agent="kube-apiserver/v1.33.0")


def sandbus_crd_documents() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of sandbus's kinds, generated from their types."""
    # Imported here: only a cluster that installs them pays for the schema generator.
    from api.crd import crd_for
    from api.kinds import ALL_KINDS

    return [crd_for(kind) for kind in ALL_KINDS]


def _crd_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.glob("*.y*ml")) if path.is_dir() else [path]
        for file in files:
            for doc in yaml.safe_load_all(file.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    docs.append(doc)
    return docs


class DevCluster:
    """A Kubernetes API server stand-in with its control loops and simulated node components."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        crd_dirs: Sequence[Path | str] | Path | str | object | None = _DEFAULT,
        data_dir: Path | str | None = None,
        latency: LatencyModel | None = None,
        seed: int = 0,
        history_size: int = 5000,
        history_age: float = 75.0,
        watch: WatchSettings | None = None,
        too_large_wait: float = 3.0,
        controllers: Sequence[ControllerFactory] | None = None,
        simulation: SimulationSettings | None = None,
        sandbus_crds: bool | None = None,
        advertise_host: str | None = None,
        advertise_url: str | None = None,
    ) -> None:
        self.host = host
        self.advertise_host = advertise_host
        self.advertise_url = advertise_url
        self._requested_port = port
        # None: sandbus's CRDs exactly when no crd_dirs are given (see the module docstring).
        self.sandbus_crds = crd_dirs is _DEFAULT if sandbus_crds is None else sandbus_crds
        if crd_dirs is _DEFAULT or crd_dirs is None:
            self.crd_paths: list[Path] = []
        elif isinstance(crd_dirs, str | Path):
            self.crd_paths = [Path(crd_dirs)]
        else:
            self.crd_paths = [Path(p) for p in cast("Sequence[Path | str]", crd_dirs)]
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.seed = seed
        self.latency = latency if latency is not None else LatencyModel(seed=seed)
        self.simulation = simulation or SimulationSettings()
        self._controllers = controllers
        self.store = Store(
            history_size=history_size,
            history_age=history_age,
            backend=SqliteBackend(self.data_dir) if self.data_dir else None,
        )
        self.registry = Registry()
        register_builtins(self.registry)
        self.rng = Random(seed)
        self.writer = Writer(self.store, self.registry, rng=self.rng)
        self.reader = Reader(self.store, too_large_wait=too_large_wait)
        self.watches = WatchHub()
        self.faults = Faults(self.store, self.watches, seed=seed)
        self.watch_settings = watch or WatchSettings(too_large_wait=too_large_wait)
        self.lifecycle = Lifecycle(self.store, self.registry, self.writer)
        self.api = ApiServer(
            store=self.store,
            registry=self.registry,
            writer=self.writer,
            reader=self.reader,
            hub=self.watches,
            faults=self.faults,
            latency=self.latency,
            watch_settings=self.watch_settings,
            rng=self.rng,
            extra_routes=[lambda app: app.add_routes(self._admin_routes())],
        )
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._port: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._informers: SharedInformers | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.kubeconfig_path: Path | None = None

    def _admin_routes(self) -> list[web.RouteDef]:
        return admin_routes(self.store, self.faults, self.latency, self.watches)

    # -- addresses --------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the cluster is not started")
        return self._port

    @property
    def url(self) -> str:
        """The server URL clients are given (the kubeconfig's): advertised, else listened on."""
        if self.advertise_url:
            return self.advertise_url
        return _http_url(self.advertise_host or self.host, self.port)

    @property
    def local_url(self) -> str:
        """A URL that reaches the server from this process, whatever it advertises."""
        return _http_url(_WILDCARDS.get(self.host, self.host), self.port)

    def write_kubeconfig(self, path: Path | str) -> Path:
        """A kubeconfig for this cluster (server URL + dummy token), for kubectl and clients."""
        written = write_kubeconfig(Path(path), self.url)
        self.kubeconfig_path = written
        return written

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> DevCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        await self.store.open()
        self.lifecycle.register_existing()
        self.lifecycle.start()
        if not self.store.get("namespaces", "", "default"):
            await self._bootstrap()
        if self.sandbus_crds:
            await self.install_crd_documents(sandbus_crd_documents())
        await self.install_crds(self.crd_paths)
        self._runner = web.AppRunner(self.api.app(), handle_signals=False, access_log=None)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, self._requested_port)
        await self._site.start()
        self._port = int(self._runner.addresses[0][1])
        await self._start_controllers()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._informers is not None:  # after the controllers that read them
            await self._informers.close()
            self._informers = None
        for watch in self.watches.active():
            watch.inject("close")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.lifecycle.stop()
        await self.store.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def _bootstrap(self) -> None:
        namespaces = self.registry.lookup("", "v1", "namespaces")
        services = self.registry.lookup("", "v1", "services")
        assert namespaces is not None and services is not None
        for name in INITIAL_NAMESPACES:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            await self.writer.create(Target(namespaces), body, _SYSTEM)
        kubernetes = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kubernetes",
                "labels": {"component": "apiserver", "provider": "kubernetes"},
            },
            "spec": {
                "clusterIP": "10.96.0.1",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
            },
        }
        await self.writer.create(Target(services, "default"), kubernetes, _SYSTEM)
        storage_classes = self.registry.lookup("storage.k8s.io", "v1", "storageclasses")
        assert storage_classes is not None
        default_class = copy.deepcopy(DEFAULT_STORAGE_CLASS)
        await self.writer.create(Target(storage_classes), default_class, _SYSTEM)

    async def install_crds(self, paths: Iterable[Path | str]) -> list[str]:
        """Create or update the CRDs found in ``paths`` and wait until they are served."""
        return await self.install_crd_documents(_crd_documents(Path(p) for p in paths))

    async def install_crd_documents(self, docs: Iterable[dict[str, Any]]) -> list[str]:
        """Create or update these CRDs (which are consumed) and wait until they are served."""
        crd_type = self.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crd_type is not None
        names: list[str] = []
        for doc in docs:
            name = doc["metadata"]["name"]
            current = self.store.get(CRD_STORAGE, "", name)
            wanted = copy.deepcopy(doc)
            crd_type.strategy.normalize(crd_type, wanted)
            try:
                if current is None:
                    await self.writer.create(Target(crd_type), doc, _SYSTEM)
                elif current.get("spec") != wanted.get("spec"):
                    body = {**current, "spec": doc["spec"]}
                    await self.writer.update(Target(crd_type, "", name), body, _SYSTEM)
            except StatusError as exc:
                raise ValueError(f"CRD {name} was rejected: {exc.message}") from None
            await self.lifecycle.establish(name)
            names.append(name)
        return names

    async def _start_controllers(self) -> None:
        factories = (
            list(self._controllers)
            if self._controllers is not None
            else resolve_controllers(self.simulation)
        )
        if not factories:
            return
        self._tmp = tempfile.TemporaryDirectory(prefix="devcluster-")
        kubeconfig = write_kubeconfig(Path(self._tmp.name) / "kubeconfig", self.local_url)
        # One watch of the Pods for the kubelet and the garbage collector (see SharedInformers).
        self._informers = SharedInformers(self.local_url)
        context = ControllerContext(
            url=self.local_url,
            kubeconfig=kubeconfig,
            settings=self.simulation,
            seed=self.seed,
            store=self.store,
            informers=self._informers,
        )
        for factory in factories:
            name = getattr(factory, "__module__", "controller")
            self._tasks.append(
                asyncio.create_task(self._run_controller(factory, context), name=name)
            )

    async def _run_controller(self, factory: ControllerFactory, context: ControllerContext) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await factory(context)
            except Exception:
                log.exception("controller %r crashed", factory)


# A server listening on every address is reached locally through the loopback one.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _http_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
