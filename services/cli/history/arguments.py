"""``sandbus events tail|replay``, ``sandbus state`` and ``sandbus explain``: argument parsing,
signals and exit codes around :mod:`services.cli.history.commands`.

Bad input is refused while parsing, by argparse, with exit code 2 and a message that says what
was expected: an unreadable time (see :mod:`.core.instants`), a kind that is not known (the message
lists the known kinds), a malformed ``KIND/NAMESPACE/NAME``. Relative times (``10m``) are taken
relative to the moment the arguments are parsed.

Ctrl-C and SIGTERM end every command cleanly: the running command is cancelled, its consumer
and connection are closed, and no traceback is printed. ``tail`` exits 0 that way, since that
is how it is meant to end; the bounded commands exit 130, since their output is incomplete.

Each parser sets ``func`` (the synchronous handler ``services.cli`` calls) and ``run`` (the
async command, which tests call in-process with their own output streams).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO

from services.cli.history import commands, queues
from services.cli.history.core.instants import InstantError, parse_instant
from services.cli.history.selection import Selection, UnknownKind, parse_object_ref, resolve_kind
from services.cli.run import load_worker
from services.runtime.bus import BusConfig
from services.runtime.settings import DEFAULT_NATS_URL, NATS_URL_ENV, Settings

__all__ = ["register"]

INTERRUPTED: Final = 130

AsyncCommand = Callable[..., Coroutine[Any, Any, int]]


def _instant(text: str) -> datetime:
    try:
        return parse_instant(text, now=datetime.now(UTC))
    except InstantError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _kind(text: str) -> str:
    try:
        return resolve_kind(text)
    except UnknownKind as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _sequence(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a stream sequence (an integer ≥ 1)")
    return value


def _object(text: str) -> Any:
    try:
        return parse_object_ref(text)
    except ValueError as error:  # UnknownKind included: its message lists the known kinds
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_nats(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nats",
        metavar="URL",
        help=f"NATS server URL (default: ${NATS_URL_ENV}, else {DEFAULT_NATS_URL})",
    )
    parser.add_argument(
        "--stream",
        default=BusConfig().event_log_stream,
        help="the event log stream (default: %(default)s)",
    )
    parser.set_defaults(kubeconfig=None)


def _add_filters(parser: argparse.ArgumentParser, *, name: bool = True) -> None:
    parser.add_argument("--kind", type=_kind, help="only this kind (kind, plural or short name)")
    parser.add_argument("--namespace", "-n", help="only this namespace")
    if name:
        parser.add_argument("--name", help="only objects with this name")


def _nats_url(args: argparse.Namespace) -> str:
    return Settings.from_args(args).nats_url


def _selection(args: argparse.Namespace, *, decisions: bool) -> Selection:
    return Selection(
        kind=args.kind,
        namespace=args.namespace,
        name=getattr(args, "name", None),
        decisions=decisions,
    )


async def _run_tail(args: argparse.Namespace, *, out: TextIO, err: TextIO) -> int:
    options = commands.TailOptions(
        nats_url=_nats_url(args),
        stream=args.stream,
        selection=_selection(args, decisions=args.decisions),
        since=args.since,
        json=args.json,
    )
    return await commands.tail(options, out=out, err=err)


async def _run_replay(args: argparse.Namespace, *, out: TextIO, err: TextIO) -> int:
    if args.since and args.until and args.until < args.since:
        print("error: --until is before --since", file=err)
        return 2
    options = commands.ReplayOptions(
        nats_url=_nats_url(args),
        stream=args.stream,
        selection=_selection(args, decisions=args.decisions or args.into is not None),
        since=args.since,
        since_seq=args.since_seq,
        until=args.until,
        json=args.json,
        into=args.into,
    )
    return await commands.replay(options, out=out, err=err)


async def _run_state(args: argparse.Namespace, *, out: TextIO, err: TextIO) -> int:
    options = commands.StateOptions(
        nats_url=_nats_url(args),
        stream=args.stream,
        at=args.at,
        kind=args.kind,
        namespace=args.namespace,
        output=args.output,
    )
    return await commands.state(options, out=out, err=err)


async def _run_explain(args: argparse.Namespace, *, out: TextIO, err: TextIO) -> int:
    options = commands.ExplainOptions(
        nats_url=_nats_url(args),
        stream=args.stream,
        target=args.object,
        rerun=args.rerun,
        definitions=load_worker,
    )
    return await commands.explain(options, out=out, err=err)


def _execute(command: AsyncCommand, args: argparse.Namespace, *, on_signal: int) -> int:
    """Run ``command`` until it ends or a SIGINT/SIGTERM arrives (then cancel it cleanly)."""

    async def supervised() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        work: asyncio.Task[int] = asyncio.create_task(command(args, out=sys.stdout, err=sys.stderr))
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if work.done():
            return work.result()
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return on_signal

    try:
        return asyncio.run(supervised())
    except BrokenPipeError:
        # The reader went away (`sandbus events replay | head`); that is not an error, but
        # Python would complain when flushing stdout at exit, so point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _handler(command: AsyncCommand, *, on_signal: int) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        return _execute(command, args, on_signal=on_signal)

    return handle


def register(subparsers: Any) -> None:
    """Add ``events`` (``tail``, ``replay``), ``state``, ``explain`` and ``queue`` (``ls``)."""
    _register_queue(subparsers)
    events = subparsers.add_parser(
        "events",
        help="read the event log: follow it live or replay its history",
        description="Read the event log (observed changes and worker decisions).",
    )
    events_commands = events.add_subparsers(dest="events_command", metavar="COMMAND", required=True)

    tail = events_commands.add_parser(
        "tail",
        help="follow events live",
        description="Print events as they reach the log, until Ctrl-C or SIGTERM.",
    )
    _add_filters(tail)
    tail.add_argument("--decisions", action="store_true", help="also print worker decisions")
    tail.add_argument(
        "--json", action="store_true", help="print raw CloudEvents JSON, one per line"
    )
    tail.add_argument(
        "--since",
        type=_instant,
        metavar="TIME",
        help="start with the events observed since TIME (RFC 3339 or a duration ago: 10m)",
    )
    _add_nats(tail)
    tail.set_defaults(func=_handler(_run_tail, on_signal=0), run=_run_tail)

    replay = events_commands.add_parser(
        "replay",
        help="print the history of the log, or load it into SQLite",
        description=(
            "Print the log in order, from --since (or --since-seq, or the beginning) to --until "
            "(or the current end of the log). Times select by observation time, the event's "
            "'time' attribute."
        ),
    )
    start = replay.add_mutually_exclusive_group()
    start.add_argument(
        "--since", type=_instant, metavar="TIME", help="RFC 3339 or a duration ago (10m, 1h30m)"
    )
    start.add_argument("--since-seq", type=_sequence, metavar="N", help="from stream sequence N")
    replay.add_argument("--until", type=_instant, metavar="TIME", help="up to TIME (inclusive)")
    _add_filters(replay)
    replay.add_argument("--decisions", action="store_true", help="also print worker decisions")
    output = replay.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print raw CloudEvents JSON")
    output.add_argument(
        "--into",
        type=Path,
        metavar="FILE.db",
        help="load into this SQLite file (with decisions) instead of printing; safe to repeat",
    )
    _add_nats(replay)
    replay.set_defaults(func=_handler(_run_replay, on_signal=INTERRUPTED), run=_run_replay)

    state = subparsers.add_parser(
        "state",
        help="every object as it was at an instant",
        description=(
            "Fold the event log up to --at: every object that existed then, in its state then. "
            "An event counts when it was observed (its 'time' attribute) at or before --at."
        ),
    )
    state.add_argument(
        "--at", type=_instant, default="now", metavar="TIME", help="RFC 3339 or a duration ago"
    )
    _add_filters(state, name=False)
    state.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table", help="output format"
    )
    _add_nats(state)
    state.set_defaults(func=_handler(_run_state, on_signal=INTERRUPTED), run=_run_state)

    explain = subparsers.add_parser(
        "explain",
        help="the timeline of one object, with the decisions that touched it",
        description=(
            "Print the changes of one object, each with what changed since the version before, "
            "interleaved with the worker decisions about it or acting on it, in time order."
        ),
    )
    explain.add_argument(
        "object",
        type=_object,
        metavar="KIND/NAMESPACE/NAME",
        help="the object; KIND/NAME means the default namespace",
    )
    explain.add_argument(
        "--rerun",
        action="store_true",
        help=(
            "re-run each recorded decision about the object through today's planner and say "
            "whether it still decides the same (exit 3 when one differs)"
        ),
    )
    _add_nats(explain)
    explain.set_defaults(func=_handler(_run_explain, on_signal=INTERRUPTED), run=_run_explain)


async def _run_ls(args: argparse.Namespace, *, out: TextIO, err: TextIO) -> int:
    options = queues.QueueOptions(
        nats_url=Settings.from_args(args).nats_url, namespace=args.namespace, json=args.json
    )
    return await queues.list_queues(options, out=out, err=err)


def _register_queue(subparsers: Any) -> None:
    """Add ``queue`` (``ls``)."""
    queue = subparsers.add_parser(
        "queue",
        help="the warm queues: what they hold against what they should hold",
        description="Inspect the warm queues (one per namespace, template and pool).",
    )
    queue_commands = queue.add_subparsers(dest="queue_command", metavar="COMMAND", required=True)
    ls = queue_commands.add_parser(
        "ls",
        help="list the warm queues",
        description=(
            "One row per warm queue: its depth (entries on the stream, in-flight ones included), "
            "the age of its oldest entry, the entries its consumer has handed out and not had "
            "acked, and the adoptable Sandboxes of its pool in the state table. MISMATCH says "
            "when the depth is not the number of adoptable members."
        ),
    )
    ls.add_argument("--namespace", "-n", help="only this namespace's queues")
    ls.add_argument("--json", action="store_true", help="print a JSON array, one object per queue")
    ls.add_argument(
        "--nats",
        metavar="URL",
        help=f"NATS server URL (default: ${NATS_URL_ENV}, else {DEFAULT_NATS_URL})",
    )
    ls.set_defaults(func=_handler(_run_ls, on_signal=INTERRUPTED), run=_run_ls, kubeconfig=None)
