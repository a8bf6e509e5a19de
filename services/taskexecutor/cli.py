"""``sandbus task-executor`` and ``python -m services.taskexecutor``: the same flags.

::

    sandbus task-executor [--host 0.0.0.0] [--port 5758] [--data-dir DIR]
                          [--reconcile-interval S] [--stop-grace S]
    sandbus task-executor [--data-dir DIR] --kill-tasks

Upstream's spellings are accepted too: ``-listen-addr=HOST:PORT`` (what OpenSandbox's sample
manifests pass), ``--listen-addr``, ``-data-dir``; so are its environment variables
``LISTEN_ADDR`` and ``DATA_DIR``, which the flags override. ``--host`` and ``--port`` override
the listen address's parts.

``--kill-tasks`` serves nothing: it SIGKILLs the process group of every task of the data dir
(:func:`~services.taskexecutor.processes.kill_supervisors`: the supervisor, its hooks and its
process), prints the group ids signalled, one a line, and exits 0. It is for whoever removes a
data dir whose tasks must not outlive it, since supervisors outlive their executor on purpose:
the development cluster's kubelet runs it when a Pod that ran an executor goes.

The executor runs in every sandbox Pod, so this module imports only the settings until a
command runs (``services/cli/__init__.py`` imports it to build its parser), and
``python -m services.taskexecutor`` imports nothing of sandbus beyond this package.
``sandbus task-executor`` runs the same code, after ``services/cli/__init__.py`` has imported every
command's module to build its parser: slower to start, and the reason a Pod had better run
the ``-m`` form.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from services.taskexecutor.core.settings import (
    DEFAULT_DATA_DIR,
    DEFAULT_HOST,
    DEFAULT_PORT,
    ExecutorSettings,
    parse_listen_addr,
)

__all__ = ["add_arguments", "main", "register", "settings_from"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to listen on (default 5758; 0: any)")
    parser.add_argument(
        "--listen-addr",
        "-listen-addr",
        dest="listen_addr",
        metavar="HOST:PORT",
        help="upstream's form of --host and --port (environment LISTEN_ADDR)",
    )
    parser.add_argument(
        "--data-dir",
        "-data-dir",
        dest="data_dir",
        metavar="DIR",
        help="where tasks are kept (default /var/lib/sandbox/tasks; environment DATA_DIR)",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=float,
        default=0.5,
        metavar="S",
        help="seconds between reconcile passes (default 0.5)",
    )
    parser.add_argument(
        "--stop-grace",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds a stopped task gets between SIGTERM and SIGKILL (default 10)",
    )
    parser.add_argument(
        "--kill-tasks",
        action="store_true",
        help="serve nothing: SIGKILL every task of the data dir (its supervisor's process "
        "group), print the group ids signalled and exit",
    )


def _data_dir(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    return str(args.data_dir or env.get("DATA_DIR", "") or DEFAULT_DATA_DIR)


def settings_from(args: argparse.Namespace, env: Mapping[str, str]) -> ExecutorSettings:
    """The settings of parsed ``args`` over ``env``. Raises ValueError."""
    host, port = DEFAULT_HOST, DEFAULT_PORT
    listen = args.listen_addr or env.get("LISTEN_ADDR", "")
    if listen:
        host, port = parse_listen_addr(listen)
    return ExecutorSettings(
        host=args.host if args.host is not None else host,
        port=args.port if args.port is not None else port,
        data_dir=_data_dir(args, env),
        reconcile_interval=args.reconcile_interval,
        stop_grace=args.stop_grace,
    )


def _kill_tasks(data_dir: str) -> int:
    # Imported here, as the server is below: not needed to build a parser.
    from services.taskexecutor.processes import kill_supervisors

    for group in kill_supervisors(Path(data_dir)):
        print(group)
    return 0


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.kill_tasks:
        return _kill_tasks(_data_dir(args, os.environ))
    # Imported here: the server and the executor are not needed to build a parser.
    from services.taskexecutor.service import run

    try:
        settings = settings_from(args, os.environ)
    except ValueError as error:
        parser.error(str(error))
    return run(settings)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "task-executor",
        help="run OpenSandbox's in-pod task executor (what a sandbox Pod runs on port 5758)",
        description="Serve OpenSandbox's task executor API until SIGTERM; exit 0 on a clean "
        "stop, leaving the tasks' supervisors running.",
        allow_abbrev=False,
    )
    add_arguments(parser)
    parser.set_defaults(func=lambda args: _run(args, parser))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.taskexecutor",
        description="OpenSandbox's in-pod task executor (the same as `sandbus task-executor`).",
        allow_abbrev=False,
    )
    add_arguments(parser)
    return _run(parser.parse_args(argv), parser)
