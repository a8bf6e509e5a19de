"""The ``sandbus`` command line: each command from its own module, and only that module."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from collections import defaultdict

import pytest

from services.cli import COMMANDS, build_parser, main


def test_each_module_registers_exactly_the_commands_mapped_to_it() -> None:
    mapped: dict[str, set[str]] = defaultdict(set)
    for command, module in COMMANDS.items():
        mapped[module].add(command)
    for module, commands in mapped.items():
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(subparsers)
        assert set(subparsers.choices) == commands, module


def test_a_command_imports_its_own_module_and_no_other_command_module() -> None:
    others = sorted(set(COMMANDS.values()) - {COMMANDS["run"]})
    probe = (
        "import sys\n"
        "from services.cli import build_parser\n"
        "build_parser('run').parse_args(['run', 'sandbox'])\n"
        f"print([m for m in {others!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_misspelled_command_is_refused_with_every_command_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["rnu", "sandbox"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'rnu'" in err
    assert all(f"'{command}'" in err for command in COMMANDS)


def test_the_whole_parser_knows_every_command() -> None:
    parser = build_parser()
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subparsers.choices) == set(COMMANDS)
