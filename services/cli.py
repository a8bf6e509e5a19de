"""The ``sandbus`` command line.

Each subcommand lives beside the code it drives, in a module that exposes
``register(subparsers)``; this file only lists those modules, so adding a command is one line
here and nothing else. A command's handler is ``args.func(args) -> int`` (the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "services.generate",
    "services.devcluster.cli",
    "services.runtime.runner",
    "services.up",
    "services.demo",
    "services.history.cli",
    "services.history.queues",
    "services.taskexecutor.cli",
    "services.benchcmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandbus",
        description="An event-sourced control plane for pre-warmed Kubernetes sandboxes.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
