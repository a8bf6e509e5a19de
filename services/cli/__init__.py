"""The ``sandbus`` command line.

Each subcommand lives beside the code it drives, in a module that exposes
``register(subparsers)``; this file only maps each command to that module, so adding a command
is one line here and nothing else. A command's handler is ``args.func(args) -> int`` (the exit
code).

``sandbus COMMAND ...`` imports only COMMAND's module: a service started with ``sandbus run``
does not carry the development cluster's or the history tools' code (about 2 MiB and 40
modules per process). Anything else (``--help``, a misspelled command) builds the whole parser,
so the usage lists every command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "generate": "services.cli.generate",
    "devcluster": "services.cli.devcluster",
    "run": "services.cli.run",
    "up": "services.cli.up",
    "demo": "services.cli.demo",
    "events": "services.cli.history.arguments",
    "state": "services.cli.history.arguments",
    "explain": "services.cli.history.arguments",
    "queue": "services.cli.history.arguments",
    "task-executor": "services.taskexecutor.cli",
    "bench": "services.cli.bench",
}
"""Each command, and the module whose ``register`` adds it."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with ``command`` only, or with every command (``None`` or not a command)."""
    parser = argparse.ArgumentParser(
        prog="sandbus",
        description="An event-sourced control plane for pre-warmed Kubernetes sandboxes.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for name in modules:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    code: int = args.func(args)
    return code
