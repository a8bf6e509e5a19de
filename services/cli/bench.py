"""``sandbus bench SCENARIO``: the benchmark scenarios (``bench/`` at the repository root, run on
purpose; see bench/README.md), forwarded to ``python -m bench`` with this interpreter.

The benchmarks are not part of the installed package: they live next to ``services/`` in a
checkout (the project is installed editable), so the command finds ``bench/`` beside this
package and runs it there, its arguments unchanged (``sandbus bench --help`` lists the
scenarios, ``sandbus bench SCENARIO --help`` a scenario's options). Without a checkout it says
so.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["bench_dir", "register", "run_bench"]

PROG_ENV = "SANDBUS_BENCH_PROG"
"""Read by bench/suite.py for its usage lines."""


def bench_dir() -> Path:
    """Where ``bench/`` is: beside the ``services`` package, at the repository root."""
    return Path(__file__).resolve().parents[2] / "bench"


def run_bench(arguments: Sequence[str]) -> int:
    """``python -m bench ARGUMENTS`` from the repository root; its exit code."""
    folder = bench_dir()
    if not (folder / "__main__.py").is_file():
        print(
            f"sandbus bench: no benchmarks at {folder}: they are in a checkout of the "
            "repository (bench/), not in an installed package",
            file=sys.stderr,
        )
        return 2
    env = {**os.environ, PROG_ENV: "sandbus bench"}
    try:
        return subprocess.call(
            [sys.executable, "-m", "bench", *arguments], cwd=folder.parent, env=env
        )
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    forwarded = list(args.arguments)
    if args.help:
        forwarded = [*forwarded, "--help"] if forwarded else ["--help"]
    if args.list:
        forwarded = ["--list", *forwarded]
    return run_bench(forwarded)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # Everything after `bench` goes to `python -m bench` as it is, its --help included: the
    # scenarios and their options are defined there, in one place.
    parser = subparsers.add_parser(
        "bench",
        add_help=False,
        help="run a benchmark scenario (bench/, in a checkout): `sandbus bench --help` lists them",
        description="Run a benchmark scenario of bench/ (python -m bench).",
    )
    parser.add_argument("-h", "--help", action="store_true", help="the scenarios and options")
    parser.add_argument("--list", action="store_true", help="list the scenarios")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, metavar="SCENARIO [OPTIONS]")
    parser.set_defaults(func=_run)
