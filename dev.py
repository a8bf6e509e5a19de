#!/usr/bin/env python3
"""Developer tasks that need nothing but Python: ``python3 dev.py TASK [ARGS...]``.

Each task makes sure ``.venv/`` exists with the project installed (editable, with the dev extra,
which includes the test, sdk and docs extras), then runs the tool from it. Extra arguments go to
the tool, e.g. ``python3 dev.py test tests/unit -k hash``.

Tasks:
  test      run the test suite (pytest, in parallel)
  lint      ruff (lint and format check), mypy, the import-linter layering contracts, and a
            strict build of the user guide (mkdocs: a broken link or anchor fails)
  docs      build the user guide into site/ (``python3 dev.py docs serve``: serve it locally)
  generate  regenerate the checked-in CRDs and event schemas
  sandbus   run the sandbus command line from the virtual environment
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("SANDBUS_VENV", ROOT / ".venv"))
BIN = VENV / "bin"
STAMP = VENV / ".installed-from"


def ensure_venv() -> None:
    """Create the virtual environment and (re)install when pyproject.toml changed."""
    if not (BIN / "python").exists():
        print(f"dev.py: creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    fingerprint = (ROOT / "pyproject.toml").read_bytes()
    if STAMP.exists() and STAMP.read_bytes() == fingerprint:
        return
    print("dev.py: installing the project and its test tools", flush=True)
    run([BIN / "python", "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    run([BIN / "python", "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[dev]"])
    STAMP.write_bytes(fingerprint)


def run(command: list[str | Path], check: bool = True) -> int:
    code = subprocess.call([str(part) for part in command], cwd=ROOT)
    if check and code != 0:
        sys.exit(code)
    return code


def test(args: list[str]) -> int:
    # pytest exits 5 when it collected nothing: that is a failure here, never a silent pass.
    return run([BIN / "pytest", "-n", "auto", *args], check=False)


def lint(args: list[str]) -> int:
    failures = 0
    for command in (
        [BIN / "ruff", "check", "."],
        [BIN / "ruff", "format", "--check", "."],
        [BIN / "mypy"],
        [BIN / "lint-imports"],
    ):
        print(f"dev.py: {Path(command[0]).name} {' '.join(map(str, command[1:]))}", flush=True)
        failures += run([*command, *args], check=False) != 0
    # The guide, built strictly into a scratch directory: mkdocs.yml turns every unresolved link,
    # anchor or page left out of the nav into a warning, and --strict makes a warning fail.
    with tempfile.TemporaryDirectory(prefix="sandbus-site-") as site:
        build = [BIN / "mkdocs", "build", "--strict", "--site-dir", site]
        print("dev.py: mkdocs build --strict", flush=True)
        failures += run(build, check=False) != 0
    return 1 if failures else 0


def docs(args: list[str]) -> int:
    return run([BIN / "mkdocs", *(args or ["build", "--strict"])], check=False)


def generate(args: list[str]) -> int:
    failures = 0
    for target in ("crds", "schemas"):
        failures += run([BIN / "sandbus", "generate", target, *args], check=False) != 0
    return 1 if failures else 0


def sandbus(args: list[str]) -> int:
    return run([BIN / "sandbus", *args], check=False)


TASKS = {"test": test, "lint": lint, "docs": docs, "generate": generate, "sandbus": sandbus}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in TASKS:
        print(__doc__, file=sys.stderr)
        return 2
    ensure_venv()
    return TASKS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
