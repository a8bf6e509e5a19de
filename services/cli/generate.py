"""``sandbus generate <target>``: write the checked-in files that are derived from the code.

Each target is a pure ``render() -> {file name: text}`` plus the directory it lives in; this
module only writes those files, or with ``--check`` reports which of them are stale (exit 1),
so CI and a pre-commit hook can hold the tree to the code. Adding a target is one entry in
:data:`TARGETS`.

Targets:

* ``crds`` → ``deploy/crds``: one CustomResourceDefinition per kind (:mod:`api.crd`).
* ``schemas`` → ``schemas``: JSON Schemas of the events and an AsyncAPI document
  (:mod:`events.schema_gen`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from api.crd import render_crds
from events.schema_gen import render_schemas

__all__ = ["TARGETS", "Target", "register", "stale_files", "write_files"]


@dataclass(frozen=True)
class Target:
    """One kind of generated file set."""

    name: str
    help: str
    default_out: str
    render: Callable[[], Mapping[str, str]]


TARGETS: Mapping[str, Target] = {
    target.name: target
    for target in (
        Target(
            name="crds",
            help="CustomResourceDefinitions of the seven kinds, from the API types",
            default_out="deploy/crds",
            render=render_crds,
        ),
        Target(
            name="schemas",
            help="JSON Schemas and the AsyncAPI document of the events, from the event types",
            default_out="schemas",
            render=render_schemas,
        ),
    )
}


def write_files(files: Mapping[str, str], out: Path) -> list[Path]:
    """Write every file under ``out``, creating directories; returns the paths written."""
    written = []
    for name, text in sorted(files.items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def stale_files(files: Mapping[str, str], out: Path) -> list[Path]:
    """The files under ``out`` that are missing or differ from what would be generated."""
    stale = []
    for name, text in sorted(files.items()):
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
    return stale


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "generate", help="write the files derived from the code (CRDs, schemas)"
    )
    targets = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    for target in TARGETS.values():
        sub = targets.add_parser(target.name, help=target.help)
        sub.add_argument(
            "--out",
            type=Path,
            default=Path(target.default_out),
            help=f"directory to write into (default: {target.default_out})",
        )
        sub.add_argument(
            "--check",
            action="store_true",
            help="write nothing; exit 1 if any file is missing or out of date",
        )
        sub.set_defaults(func=_run, generate_target=target)


def _run(args: argparse.Namespace) -> int:
    target: Target = args.generate_target
    out: Path = args.out
    files = target.render()
    if args.check:
        stale = stale_files(files, out)
        for path in stale:
            print(f"out of date: {path}", file=sys.stderr)
        if stale:
            print(f"run: sandbus generate {target.name} --out {out}", file=sys.stderr)
            return 1
        print(f"{len(files)} {target.name} files up to date in {out}")
        return 0
    for path in write_files(files, out):
        print(path)
    return 0
