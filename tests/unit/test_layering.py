"""The import-linter contracts in pyproject.toml catch the imports they forbid.

A contract that matches no module, or that a wildcard stops covering, is kept forever and says
nothing. So the tree is copied into a temporary directory and checked twice: untouched, every
contract is kept; with one forbidden import per contract, each of those contracts is reported
broken. The bad imports are the ones the contracts exist for: a new service package (one the
contract does not name) importing the development cluster, the API types importing a service,
a planner importing asyncio, and a planner in that new package's core (which the purity
contract does not name either) importing asyncio. Contracts are found by what they forbid, not
by name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "events", "services")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

Contract = dict[str, Any]


def contract_name(where: Callable[[Contract], bool]) -> str:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (name,) = [contract["name"] for contract in contracts["contracts"] if where(contract)]
    return str(name)


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH comes before the editable install's finder, so the copy is what gets analysed.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_each_contract_is_broken_by_the_import_it_forbids(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)

    clean = lint_imports(tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    # A service package that does not exist yet, so that no contract can name it.
    newcomer = tmp_path / "services" / "newcomer"
    (newcomer / "core").mkdir(parents=True)
    (newcomer / "__init__.py").write_text("import services.devcluster.cluster\n")
    (newcomer / "core" / "__init__.py").write_text("")
    (newcomer / "core" / "plan.py").write_text("import asyncio\n")
    (tmp_path / "api" / "upward.py").write_text("import services.cli\n")
    with (tmp_path / "services" / "sandbox" / "core" / "plan.py").open("a") as plan:
        plan.write("\nimport asyncio\n")

    broken = lint_imports(tmp_path)
    output = broken.stdout + broken.stderr
    assert broken.returncode != 0, output
    expected = [
        contract_name(lambda c: c["type"] == "layers"),
        contract_name(lambda c: "services.devcluster" in c.get("forbidden_modules", ())),
        contract_name(lambda c: "asyncio" in c.get("forbidden_modules", ())),
    ]
    for name in expected:
        assert f"{name} BROKEN" in output, output
    # Both planners are named in the purity contract's report, the new one by the wildcard alone.
    purity = output[output.index(f"{expected[-1]}\n") :]
    for planner in ("services.sandbox.core.plan", "services.newcomer.core.plan"):
        assert f"{planner} -> asyncio" in purity, output
