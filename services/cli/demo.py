"""``sandbus demo``: what a warm pool is for, in one command and a minute.

It starts what ``sandbus up`` starts (:func:`services.cli.up.running`: an embedded NATS and the
development cluster, or those of ``--nats``/``--kubeconfig``, and every service, each its own
process unless ``--one-process``), then:

1. applies a SandboxTemplate and a SandboxWarmPool of ``--pool`` replicas, both ``sandbus-demo``
   in ``--namespace``, and shows the pool warming: its members Ready, and each one queued on
   the bus for a claim to adopt (the claim worker takes only what is queued, so a member Ready
   but not yet queued would make a claim cold);
2. creates ``--claims`` SandboxClaims on the pool, at most ``--concurrency`` of them waiting
   at a time (a claim's slot is freed when it is Ready, as a client pool would), and times
   each from its create request to the watch event that shows it Ready;
3. prints the latency table, split by how each claim was served, warm or cold (the pool
   refills behind the claims, so with more claims than pool some of them start cold), and with
   ``--plot FILE`` draws the latencies when matplotlib is there (``pip install sandbus[plot]``);
4. deletes what it created, claims first (so that none is served while the pool goes) and in
   the foreground (so that a claim or the pool is gone only once its Sandboxes and Pods are),
   then the pool, then the template; ``--keep`` leaves them.

The state directory (``--dir``) is a temporary one unless given, and goes with the demo: with
``--dir`` and ``--keep`` the objects stay in it, and ``sandbus up --dir DIR`` serves them again.

Shape: what to apply, when a claim counts as Ready and how the figures are summed up is pure
(:mod:`services.cli.demo_core`); this module does the requests, the watch and the printing. On a
terminal the progress is a bar (rich); elsewhere, a line now and then, so a log stays short.
The services log warnings and errors only, unless ``SANDBUS_LOG_LEVEL`` says otherwise, so their
INFO lines do not bury the demo's output. Every ``sandbus`` command builds its parser from this
module: kubernetes_asyncio (through :mod:`services.runtime.kube`), rich and matplotlib are
imported only when the demo runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nats
import yaml

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import Json, is_ready
from events.envelope import ObjectKey
from events.subjects import warm_queue_filter
from services.cli import demo_core
from services.cli.demo_core import DEMO_NAME, MANAGED_BY, Sample
from services.cli.run import SERVICES
from services.cli.up import (
    DevClusterOptions,
    Mode,
    UpError,
    add_cluster_args,
    add_mode_args,
    cluster_options,
    running,
    whole_number,
)
from services.runtime.bus import BusConfig
from services.runtime.runner import LOG_LEVEL_ENV, configure_logging
from services.runtime.settings import Settings, kube_api_client

if TYPE_CHECKING:
    from rich.console import Console

    from services.runtime.kube import KubeApi

__all__ = ["DemoError", "DemoOptions", "demo", "register"]


_SELECTOR = "=".join(MANAGED_BY)
_KINDS = "sandboxclaims,sandboxwarmpools,sandboxtemplates"
_POLL = 0.25
"""Seconds between two looks at the pool while it warms, and at what is left while deleting."""
_PLAIN_EVERY = 1.0
"""Seconds between two progress lines where there is no terminal."""
_CLEAN_UP_WITHIN = 60.0
"""Seconds the cleanup may take at least (``--timeout`` when longer): a pool that could not
warm within a short ``--timeout`` still has to go."""
_INACTIVITY = 30.0
"""Seconds a watch may stay silent (the API server sends bookmarks) before it is restarted."""


class DemoError(Exception):
    """What went wrong, in words for the person who ran the demo."""


@dataclasses.dataclass(frozen=True)
class DemoOptions:
    directory: Path | None
    """None: a temporary directory, removed at the end."""
    nats_url: str | None
    kubeconfig: Path | None
    cluster: DevClusterOptions
    namespace: str
    pool: int
    claims: int
    concurrency: int
    timeout: float
    plot: Path | None
    keep: bool
    mode: Mode = dataclasses.field(default_factory=Mode)
    """Each part its own process (the default), or ``--one-process``."""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="warm a pool, fire claims at it and print their latency (on its own sandbus)",
        description=(
            "Start what `sandbus up` starts, apply a SandboxTemplate and a SandboxWarmPool, "
            "time SandboxClaims from create to Ready, print p50/p90/p99/max split warm and cold, "
            "then delete what it made."
        ),
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="state directory of the embedded NATS and cluster (default: a temporary one)",
    )
    add_cluster_args(parser)
    add_mode_args(parser)
    parser.add_argument(
        "--namespace", default="default", help="where the objects go (default: default)"
    )
    parser.add_argument(
        "--pool",
        type=whole_number(0),
        default=10,
        metavar="N",
        help="warm pool replicas (default 10)",
    )
    parser.add_argument(
        "--claims",
        type=whole_number(1),
        default=20,
        metavar="N",
        help="claims to time (default 20)",
    )
    parser.add_argument(
        "--concurrency",
        type=whole_number(1),
        default=5,
        metavar="C",
        help="claims waiting to be Ready at a time (default 5)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=120.0,
        metavar="SECONDS",
        help="the longest the pool may take to warm, and the claims to be Ready (default 120)",
    )
    parser.add_argument(
        "--plot", type=Path, metavar="FILE", help="also draw the latencies into this PNG"
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the claims, the pool and the template"
    )
    parser.set_defaults(func=lambda args: _main(parser, args))


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    options = DemoOptions(
        directory=args.dir,
        nats_url=args.nats,
        kubeconfig=args.kubeconfig,
        cluster=cluster_options(parser, args),
        namespace=args.namespace,
        pool=args.pool,
        claims=args.claims,
        concurrency=args.concurrency,
        timeout=args.timeout,
        plot=args.plot,
        keep=args.keep,
        mode=Mode.from_args(args),
    )
    if options.kubeconfig is not None and not options.kubeconfig.is_file():
        parser.error(f"--kubeconfig: no such file: {options.kubeconfig}")
    # The services' INFO lines are for `sandbus up`'s log; here they would bury the table.
    os.environ.setdefault(LOG_LEVEL_ENV, "WARNING")
    configure_logging()
    try:
        return asyncio.run(demo(options))
    except (DemoError, UpError) as error:
        print(f"sandbus demo: error: {error}", file=sys.stderr, flush=True)
        return 1


# --- the shell -----------------------------------------------------------------------------


async def demo(options: DemoOptions) -> int:
    """Run the demo; the exit code. Ctrl-C or SIGTERM stops it, cleaning up as at the end."""
    from rich.console import Console

    console = Console(highlight=False)
    if options.kubeconfig is not None:
        # Before anything starts: a wrong cluster is told in a second, not as the services'
        # retries in the log.
        await _probe(options.kubeconfig, options.namespace)
    if options.plot is not None and importlib.util.find_spec("matplotlib") is None:
        print(
            f"note: --plot {options.plot}: matplotlib is not installed "
            "(pip install 'sandbus[plot]'), so there will be the table only",
            flush=True,
        )
        options = dataclasses.replace(options, plot=None)
    if options.kubeconfig is None:
        needed = demo_core.nodes_needed(options.pool, options.claims)
        if needed > options.cluster.nodes:
            print(
                f"note: up to {options.pool + options.claims} Pods at once, more than "
                f"{options.cluster.nodes} simulated node(s) of {demo_core.PODS_PER_NODE} hold: "
                f"some stay Pending (try --nodes {needed})",
                flush=True,
            )

    main = asyncio.current_task()
    assert main is not None
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        main.cancel()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, interrupt)
    try:
        with _state_directory(options) as directory:
            print("sandbus demo: starting sandbus", flush=True)
            async with running(
                directory,
                sorted(SERVICES),
                nats_url=options.nats_url,
                kubeconfig=options.kubeconfig,
                cluster=options.cluster,
                mode=options.mode,
            ) as handle:
                await handle.guard(_workload(handle.kubeconfig, handle.nats_url, options, console))
                print("sandbus demo: stopping sandbus", flush=True)
    except asyncio.CancelledError:
        if not interrupted:
            raise
        print("sandbus demo: interrupted", file=sys.stderr, flush=True)
        return 130
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    return 0


@contextlib.contextmanager
def _state_directory(options: DemoOptions) -> Iterator[Path]:
    if options.directory is not None:
        yield options.directory
        return
    if options.keep:
        # The objects live in the embedded cluster's store: keeping them means keeping it.
        directory = Path(tempfile.mkdtemp(prefix="sandbus-demo-"))
        try:
            yield directory
        finally:
            print(f"kept: the state directory {directory} (sandbus up --dir {directory})")
        return
    with tempfile.TemporaryDirectory(prefix="sandbus-demo-") as name:
        yield Path(name)


@contextlib.asynccontextmanager
async def _kube(kubeconfig: Path, *, request_timeout: float = 30.0) -> AsyncIterator[KubeApi]:
    from services.runtime.kube import KubeApi
    from services.runtime.kubeclient import ConfigException

    try:
        client = await kube_api_client(Settings(kubeconfig=str(kubeconfig)))
    except (ConfigException, OSError, ValueError, yaml.YAMLError) as error:
        raise DemoError(f"cannot use the kubeconfig {kubeconfig}: {error}") from None
    async with client:
        yield KubeApi(client, field_manager=DEMO_NAME, request_timeout=request_timeout)


async def _probe(kubeconfig: Path, namespace: str) -> None:
    """That the cluster answers and serves SandboxTemplates."""
    from services.runtime.kube import KubeError

    async with _kube(kubeconfig, request_timeout=10.0) as api:
        try:
            await api.list_page("SandboxTemplate", limit=1, namespace=namespace)
        except KubeError as error:
            if error.unanswered:
                # The client library's own words (e.g. "Cannot connect to host ..."), not the
                # repr the message carries.
                why = error.__cause__ or error.message
                raise DemoError(f"cannot reach the cluster of {kubeconfig}: {why}") from None
            if error.not_found:
                raise DemoError(
                    f"the cluster of {kubeconfig} does not serve agent-sandbox's kinds "
                    f"(install deploy/crds): {error}"
                ) from None
            raise DemoError(f"the cluster of {kubeconfig} refused: {error}") from None


async def _workload(
    kubeconfig: Path, nats_url: str, options: DemoOptions, console: Console
) -> None:
    from services.runtime.kube import KubeError

    created: list[str] = []
    failure: BaseException | None = None
    async with _kube(kubeconfig) as api:
        try:
            await _refuse_leftovers(api, options.namespace)
            for body in (
                demo_core.template(options.namespace),
                demo_core.warm_pool(options.namespace, options.pool),
            ):
                await _create(api, body, created)
            print(
                f"applied: SandboxTemplate and SandboxWarmPool {options.namespace}/{DEMO_NAME} "
                f"({options.pool} replicas)",
                flush=True,
            )
            await _warm(api, nats_url, options, console)
            samples, wall = await _fire(api, options, console, created)
            _report(samples, wall, options, console)
        except KubeError as error:
            failure = DemoError(f"the Kubernetes API refused: {error}")
            raise failure from None
        except BaseException as error:
            failure = error
            raise
        finally:
            if options.keep:
                print(
                    f"kept: the claims, the pool and the template in {options.namespace} "
                    f"(kubectl get {_KINDS} -n {options.namespace} -l {_SELECTOR})",
                    flush=True,
                )
            elif created:  # else what carries the label is someone's, found by the check
                try:
                    await _clean_up(api, options)
                except DemoError as error:
                    if failure is None:
                        raise
                    # The first failure is the one to tell; this one only adds to it.
                    print(f"sandbus demo: also: {error}", file=sys.stderr, flush=True)


async def _create(api: KubeApi, body: Json, created: list[str]) -> None:
    """Create ``body`` and note it in ``created``, but refuse to go on beside an object of the
    same name that is not the demo's (it has not the label the cleanup deletes by)."""
    from services.runtime.kube import KubeError

    what = f"{body['kind']} {body['metadata']['namespace']}/{body['metadata']['name']}"
    try:
        await api.create(body)
    except KubeError as error:
        if error.already_exists:
            raise DemoError(
                f"{what} already exists and is not the demo's: delete it or pick another "
                "--namespace"
            ) from None
        raise
    created.append(what)


async def _refuse_leftovers(api: KubeApi, namespace: str) -> None:
    """Refuse to start beside a demo's objects: they are someone's (an earlier ``--keep``)."""
    found = []
    for kind in ("SandboxClaim", "SandboxWarmPool", "SandboxTemplate"):
        found += [
            f"{kind} {item['metadata']['name']}" for item in await _list(api, kind, namespace)
        ]
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise DemoError(
            f"{namespace} already holds a demo's objects ({shown}), from `sandbus demo --keep`? "
            f"Delete them (kubectl delete {_KINDS} -n {namespace} -l {_SELECTOR}) or pick "
            "another --namespace"
        )


async def _list(api: KubeApi, kind: str, namespace: str, selector: str = _SELECTOR) -> list[Json]:
    items, _ = await _listing(api, kind, namespace, selector)
    return items


async def _listing(
    api: KubeApi, kind: str, namespace: str, selector: str
) -> tuple[list[Json], str]:
    """Every object of ``kind`` that ``selector`` selects, page by page, and the version of the
    list (its first page's: the pages are one snapshot)."""
    items: list[Json] = []
    token: str | None = None
    version = ""
    while True:
        page = await api.list_page(
            kind, limit=500, continue_token=token, label_selector=selector, namespace=namespace
        )
        items += page.get("items") or ()
        metadata = page.get("metadata") or {}
        version = version or str(metadata.get("resourceVersion") or "")
        token = metadata.get("continue") or None
        if token is None:
            return items, version


async def _warm(api: KubeApi, nats_url: str, options: DemoOptions, console: Console) -> None:
    """Until every member is Ready and queued, with a progress bar."""
    size = options.pool
    if size == 0:
        return
    members = f"{LABEL_WARM_POOL_SANDBOX}={name_hash(DEMO_NAME)}"
    queue = warm_queue_filter(options.namespace, name_hash(DEMO_NAME), DEMO_NAME)
    connection = await nats.connect(nats_url)
    try:
        js = connection.jetstream()
        stream = BusConfig().warm_stream
        deadline = time.monotonic() + options.timeout
        with _Meter(console, "warming the pool", size) as meter:
            while True:
                items = await _list(api, "Sandbox", options.namespace, members)
                ready = sum(1 for item in items if is_ready(item))
                info = await js.stream_info(stream, subjects_filter=queue)
                queued = sum((info.state.subjects or {}).values())
                meter.update(min(ready, queued), f"{ready} Ready, {queued} queued")
                if ready >= size and queued >= size:
                    return
                if time.monotonic() > deadline:
                    raise DemoError(
                        f"the pool did not warm within {options.timeout:g} s: {ready} of {size} "
                        f"members Ready, {queued} queued (see `sandbus queue ls`)"
                    )
                await asyncio.sleep(_POLL)
    finally:
        await connection.close()


class _ClaimWatch:
    """Follows the demo's claims and notes the moment each is first seen Ready."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.ready: dict[str, tuple[float, Json]] = {}
        self._waiters: dict[str, asyncio.Future[None]] = {}

    async def start(self) -> asyncio.Task[None]:
        """List first, so that the watch starts before any claim is made."""
        version = await self._relist()
        return asyncio.create_task(self._follow(version), name="demo-claims")

    def wait_for(self, name: str) -> asyncio.Future[None]:
        waiter = self._waiters[name] = asyncio.get_running_loop().create_future()
        if name in self.ready:
            waiter.set_result(None)
        return waiter

    def _seen(self, obj: Json) -> None:
        name = obj["metadata"]["name"]
        if name not in self.ready and demo_core.claim_ready(obj):
            self.ready[name] = (time.perf_counter(), obj)
            waiter = self._waiters.get(name)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _relist(self) -> str:
        items, version = await _listing(self.api, "SandboxClaim", self.namespace, _SELECTOR)
        for item in items:
            self._seen(item)
        return version

    async def _follow(self, version: str | None) -> None:
        from services.runtime.kube import Expired, KubeError

        while True:
            try:
                if version is None:
                    version = await self._relist()
                async with self.api.watch(
                    "SandboxClaim",
                    resource_version=version,
                    timeout_seconds=300,
                    label_selector=_SELECTOR,
                    namespace=self.namespace,
                ) as stream:
                    while (event := await stream.next_event(_INACTIVITY)) is not None:
                        obj = event["object"]
                        version = obj["metadata"].get("resourceVersion") or version
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._seen(obj)
            except Expired:
                version = None  # what happened meanwhile is in a new list
            except KubeError:
                # A broken stream: start again from the last version seen, a moment later.
                await asyncio.sleep(_POLL)


async def _fire(
    api: KubeApi, options: DemoOptions, console: Console, created: list[str]
) -> tuple[list[Sample], float]:
    """Create the claims, ``--concurrency`` waiting at a time; each one's latency, and the time
    from the first create to the last Ready."""
    names = [demo_core.claim_name(i, options.claims) for i in range(1, options.claims + 1)]
    sent: dict[str, float] = {}
    slots = asyncio.Semaphore(options.concurrency)
    watch = _ClaimWatch(api, options.namespace)
    following = await watch.start()
    print(
        f"claiming: {options.claims} SandboxClaims, {options.concurrency} at a time",
        flush=True,
    )
    with _Meter(console, "claims Ready", options.claims) as meter:

        async def one(name: str) -> None:
            async with slots:
                ready = watch.wait_for(name)
                sent[name] = time.perf_counter()
                await _create(api, demo_core.claim(options.namespace, name), created)
                await ready
                meter.update(len(watch.ready))

        tasks = [asyncio.create_task(one(name)) for name in names]
        try:
            async with asyncio.timeout(options.timeout):
                await asyncio.gather(*tasks)
        except TimeoutError:
            late = [name for name in names if name not in watch.ready] or names
            raise DemoError(
                f"{len(late)} of {len(names)} claims not Ready within {options.timeout:g} s "
                f"(kubectl describe sandboxclaim -n {options.namespace} {late[0]})"
            ) from None
        finally:
            # One that failed leaves the others running, unless told: none may create a claim
            # after this, while the demo cleans up.
            for task in [*tasks, following]:
                task.cancel()
            await asyncio.gather(*tasks, following, return_exceptions=True)
    sandboxes = {
        item["metadata"]["name"]: item
        for item in await _list(api, "Sandbox", options.namespace, "")
    }
    samples = []
    for index, name in enumerate(names, start=1):
        at, obj = watch.ready[name]
        sandbox = sandboxes.get(demo_core.claimed_sandbox(obj) or "")
        samples.append(Sample(index, name, at - sent[name], demo_core.launch_type(sandbox)))
    wall = max(at for at, _ in watch.ready.values()) - min(sent.values())
    return samples, wall


def _report(samples: list[Sample], wall: float, options: DemoOptions, console: Console) -> None:
    rows = demo_core.latency_rows(samples)
    print(
        f"\n{len(samples)} claims on a pool of {options.pool}, {options.concurrency} at a time: "
        f"first create to last Ready {wall:.2f} s\n",
        flush=True,
    )
    if console.is_terminal:
        from rich.table import Table

        table = Table(title="SandboxClaim create to Ready")
        for i, heading in enumerate(demo_core.HEADER):
            table.add_column(heading, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*demo_core.row_cells(row), end_section=row is rows[-2])
        console.print(table)
    else:
        for line in demo_core.table_lines(rows):
            print(line)
    print(flush=True)
    if options.plot is not None:
        _plot(options.plot, samples)
        print(f"plot: {options.plot}", flush=True)


def _plot(path: Path, samples: Sequence[Sample]) -> None:
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for launch, (xs, ys) in demo_core.plot_series(samples).items():
        axes.scatter(xs, ys, label=f"{launch} ({len(xs)})", s=18)
    everything = [sample.seconds * 1000 for sample in samples]
    for q, style in ((50, "--"), (99, ":")):
        value = demo_core.percentile(everything, q)
        axes.axhline(
            value, color="grey", linestyle=style, linewidth=1, label=f"p{q} {value:.1f} ms"
        )
    axes.set_xlabel("claim, in the order made")
    axes.set_ylabel("create to Ready (ms)")
    axes.set_title("sandbus demo: SandboxClaim latency")
    axes.legend()
    figure.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=120)
    except OSError as error:
        raise DemoError(f"cannot write the plot {path}: {error}") from None
    finally:
        plt.close(figure)


async def _clean_up(api: KubeApi, options: DemoOptions) -> None:
    """Delete everything of the demo's (its label: a claim whose create was under way when the
    demo stopped is found too) and wait, bounded, until it is gone with what hangs off it.

    Claims first, so that none is served while the pool goes; the template last, as the pool
    names it. In the foreground: an object is gone only once its Sandboxes and their Pods are."""
    from services.runtime.kube import KubeError

    namespace = options.namespace
    gate = asyncio.Semaphore(16)
    deleted: set[str] = set()

    async def delete(kind: str, name: str) -> None:
        async with gate:
            try:
                await api.delete(ObjectKey(kind, namespace, name), propagation="Foreground")
            except KubeError as error:
                if not error.not_found:
                    raise
        deleted.add(f"{kind}/{name}")

    within = max(options.timeout, _CLEAN_UP_WITHIN)
    deadline = time.monotonic() + within
    for kind in ("SandboxClaim", "SandboxWarmPool", "SandboxTemplate"):
        while left := await _list(api, kind, namespace):
            await asyncio.gather(
                *(
                    delete(kind, item["metadata"]["name"])
                    for item in left
                    if not item["metadata"].get("deletionTimestamp")
                )
            )
            if time.monotonic() > deadline:
                names = ", ".join(item["metadata"]["name"] for item in left)
                raise DemoError(f"{kind}s still deleting after {within:g} s: {names}")
            await asyncio.sleep(_POLL)
    print(f"deleted: {len(deleted)} objects and what they made", flush=True)


class _Meter:
    """A progress bar on a terminal; elsewhere a line at most every :data:`_PLAIN_EVERY`
    seconds and one at the end."""

    def __init__(self, console: Console, what: str, total: int) -> None:
        self.console = console
        self.what = what
        self.total = total
        self.done = 0
        self.note = ""
        self.started = time.monotonic()
        self._printed = -1.0
        self._shown: tuple[int, str] | None = None
        self._bar: Any = None

    def __enter__(self) -> _Meter:
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[note]}"),
                console=self.console,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.what, total=self.total, note="")
        return self

    def update(self, done: int, note: str = "") -> None:
        self.done, self.note = done, note
        if self._bar is not None:
            self._bar.update(self._task, completed=done, note=note)
            return
        now = time.monotonic()
        if now - self._printed >= _PLAIN_EVERY:
            self._printed = now
            self._line()

    def _line(self) -> None:
        if self._shown == (self.done, self.note):
            return
        self._shown = (self.done, self.note)
        elapsed = time.monotonic() - self.started
        print(demo_core.progress_line(self.what, self.done, self.total, elapsed, self.note))

    def __exit__(self, *exc_info: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        else:
            self._line()
        sys.stdout.flush()
