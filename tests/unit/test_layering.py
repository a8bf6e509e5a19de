"""The import-linter contracts in pyproject.toml catch the imports they forbid.

A contract that matches no module, or that a wildcard stops covering, is kept forever and says
nothing. So the tree is copied into a temporary directory and checked twice: untouched, every
contract is kept; with one forbidden import per contract, each of those contracts is reported
broken. The bad imports are the ones the contracts exist for: one controller importing another
(the claim worker taking the pool worker's code), a service package that no contract names
importing another service and the development cluster, the runtime importing a controller, the
API types importing a service, development tooling importing the event contract, the event
contract doing I/O, the task executor importing the runtime, and planners (a named one and one
in the new package's core) and a domain rule importing asyncio. Contracts are found by what
they say, not by name.
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
PACKAGES = ("api", "events", "services", "devtools")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

Contract = dict[str, Any]


def contracts() -> list[Contract]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return list(config["contracts"])


def contract_name(where: Callable[[Contract], bool]) -> str:
    (name,) = [contract["name"] for contract in contracts() if where(contract)]
    return " ".join(str(name).split())


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
    (newcomer / "__init__.py").write_text("import devtools.cluster\nimport services.sandbox\n")
    (newcomer / "core" / "__init__.py").write_text("")
    (newcomer / "core" / "plan.py").write_text("import asyncio\n")
    bad_imports = {
        "services/claim/core/borrowed.py": "import services.pool.core.plan\n",
        "services/runtime/upward.py": "import services.claim.worker\n",
        "services/domain/agentsandbox/waiting.py": "import asyncio\n",
        "services/taskexecutor/heavy.py": "import services.runtime.cache\n",
        "api/upward.py": "import services.cli\n",
        "devtools/contract.py": "import events.types\n",
        "events/io.py": "import nats\n",
    }
    for path, line in bad_imports.items():
        (tmp_path / path).write_text(line)
    with (tmp_path / "services" / "sandbox" / "core" / "plan.py").open("a") as plan:
        plan.write("\nimport asyncio\n")

    broken = lint_imports(tmp_path)
    # The report wraps long contract names: compare with the whitespace made single spaces.
    output = " ".join((broken.stdout + broken.stderr).split())
    assert broken.returncode != 0, output
    layers = [c for c in contracts() if c["type"] == "layers"]
    expected = {
        "the product's layers": contract_name(lambda c: c == layers[0]),
        "the layers inside services": contract_name(lambda c: c.get("containers") == ["services"]),
        "the services' independence": contract_name(lambda c: c["type"] == "independence"),
        "devtools knows only api": contract_name(lambda c: c.get("source_modules") == ["devtools"]),
        "only the command line starts devtools": contract_name(
            lambda c: c.get("forbidden_modules") == ["devtools"]
        ),
        "no I/O in the contract": contract_name(
            lambda c: (
                "nats" in c.get("forbidden_modules", ()) and "events" in c.get("source_modules", ())
            )
        ),
        "the task executor alone": contract_name(
            lambda c: c.get("source_modules") == ["services.taskexecutor"]
        ),
        "pure planners": contract_name(lambda c: "asyncio" in c.get("forbidden_modules", ())),
    }
    for what, name in expected.items():
        assert f"{name} BROKEN" in output, (what, output)
    # The controllers' independence names the claim worker's import of the pool's planner, and
    # the newcomer's import of the sandbox worker, found by the wildcard alone.
    assert "services.claim.core.borrowed -> services.pool.core.plan" in output, output
    assert "services.newcomer -> services.sandbox" in output, output
    # The newcomer is refused a place among the layers until it says which it is on.
    assert "services.newcomer" in output[output.index(expected["the layers inside services"]) :]
    # Every planner is named in the purity contract's report, the new one by the wildcard alone.
    purity = output[output.index(f"{expected['pure planners']} BROKEN") :]
    for planner in (
        "services.sandbox.core.plan",
        "services.newcomer.core.plan",
        "services.domain.agentsandbox.waiting",
    ):
        assert f"{planner} -> asyncio" in purity, output
