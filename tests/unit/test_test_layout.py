"""The tests' own layout: no module under tests/ imports a test module (``test_*``) or a
conftest.

What tests share lives in tests/support/ (or, for one directory, in a plain helper module of
that directory), and fixtures live in conftest.py files, which pytest finds by itself.
Importing a test module runs it a second time under another name (its module-level state
twice, its fixtures registered where they do not belong); importing a conftest does the same
to fixtures, and ties a directory's tests to another directory's setup.

The check reads every module with :mod:`ast`: ``import`` and ``from ... import`` statements
anywhere in a module (relative ones resolved), and the imports written in the source of a
program a test runs in another process (a string such as ``"from tests.x.test_y import Z"``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
IMPORT_IN_TEXT = re.compile(r"^\s*(?:from|import)\s+([\w.]+)", re.MULTILINE)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Is ``name`` a module (or package) of this repository?"""
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def forbidden(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree`` (prose, not programs)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def imports_of(source: str, module: str, *, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """Every module that ``source`` (the text of ``module``) imports, with its line: the
    modules named, and each imported name that is itself a module."""
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    prose = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:
                if is_module(f"{base}.{alias.name}"):
                    yield node.lineno, f"{base}.{alias.name}"
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
        ):
            for match in IMPORT_IN_TEXT.finditer(node.value):
                yield node.lineno, match.group(1)


def offences() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue  # its examples below are imports of test modules, as text
        module = module_name(path)
        source = path.read_text()
        for line, imported in imports_of(source, module, is_package=path.name == "__init__.py"):
            if imported.startswith("tests.") and forbidden(imported):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    return found


def test_no_module_under_tests_imports_a_test_module_or_a_conftest() -> None:
    assert offences() == [], (
        "move what is shared to tests/support/ (or a helper module that is neither a test "
        "module nor a conftest), and keep fixtures in conftest.py files"
    )


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from tests.unit.runtime.test_reconcile_actions import obj", "tests.unit.x.y"),
        ("import tests.component.sandbox.conftest", "tests.unit.x.y"),
        ("from tests.component.sandbox import conftest", "tests.unit.x.y"),
        ("from tests.unit.runtime import test_reconcile_actions", "tests.unit.x.y"),
        ("from .conftest import NS", "tests.component.sandbox.test_rerun"),
        ("from ..runtime.test_reconcile_worker import WIDGET", "tests.unit.sandbox.test_x"),
        ("def f():\n    from tests.e2e.test_up import SANDBUS\n", "tests.e2e.x"),
        ('PROGRAM = """\nfrom tests.component.devcluster.test_kubelet import FAST\n"""', "t.x"),
    ],
)
def test_the_check_finds_each_way_of_importing_one(source: str, module: str) -> None:
    assert any(
        name.startswith("tests.") and forbidden(name) for _, name in imports_of(source, module)
    )


@pytest.mark.parametrize(
    "source",
    [
        "from tests.support.waiting import until",
        "from tests.unit.sandbox.samples import FakeCluster",
        "from tests.component.watcher import harness",
        '"""The fixtures of tests.component.sandbox.conftest are declared again here."""',
        "from tests.support.samples import test_body_maker",
    ],
)
def test_the_check_leaves_helpers_and_prose_alone(source: str) -> None:
    assert not any(
        name.startswith("tests.") and forbidden(name)
        for _, name in imports_of(source, "tests.unit.x.y")
    )
