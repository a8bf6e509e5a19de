"""deploy/Dockerfile builds the project from what the build context holds, and runs as non-root."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.unit.deploy.manifests import (
    DOCKERIGNORE,
    REPO,
    dockerfile_instructions,
    entrypoint,
    final_stage,
)


def _regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over slash-separated paths (Go filepath.Match + **)."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def _rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        rules.append((negated, _regex(line.removeprefix("!").strip("/"))))
    return rules


def excluded(path: str) -> bool:
    """Whether .dockerignore keeps PATH out of the build context (the last matching rule wins; a
    rule that matches a directory applies to everything in it)."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negated, rule in _rules():
        if any(rule.fullmatch(candidate) for candidate in candidates):
            result = not negated
    return result


def test_the_ignore_rules_mean_what_the_build_needs() -> None:
    assert not excluded("services/runtime/bus.py")
    assert not excluded("deploy/crds/agents.x-k8s.io_sandboxes.yaml")
    assert excluded("services/__pycache__/cli.cpython-311.pyc")
    assert excluded(".venv/bin/python")
    assert excluded(".env")
    assert excluded("tests/unit/deploy/test_dockerfile.py")
    assert excluded("deploy/base/nats/nats.conf")


def test_the_base_image_is_python_311_slim() -> None:
    instructions = dockerfile_instructions()
    arguments = dict(
        arguments.split("=", 1) for keyword, arguments in instructions if keyword == "ARG"
    )

    assert arguments["PYTHON_IMAGE"] == "python:3.11-slim"
    for keyword, argument in instructions:
        if keyword == "FROM":
            assert argument.split()[0] == "${PYTHON_IMAGE}"


def test_every_copied_source_is_in_the_build_context() -> None:
    copied = []
    for keyword, arguments in dockerfile_instructions():
        if keyword == "COPY" and "--from" not in arguments:
            copied += arguments.split()[:-1]

    assert copied
    for source in copied:
        assert (REPO / source).exists(), source
        assert not excluded(source), f"{source} is excluded by .dockerignore"


def test_everything_pip_needs_to_build_the_project_is_copied() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {
        pattern.rstrip("*")
        for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    copied = set()
    for keyword, arguments in dockerfile_instructions():
        if keyword == "COPY" and "--from" not in arguments:
            copied |= {source.rstrip("/") for source in arguments.split()[:-1]}

    assert {"pyproject.toml", project["project"]["readme"], *packages} <= copied


def test_the_installed_modules_are_compiled_so_a_start_does_not_compile_them() -> None:
    (install,) = [a for keyword, a in final_stage() if keyword == "RUN" and "pip install" in a]
    assert "--compile" in install.split()
    assert "--no-compile" not in install.split()


def test_it_runs_the_sandbus_command_as_a_numeric_non_root_user() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    (user,) = [arguments for keyword, arguments in final_stage() if keyword == "USER"]
    uid = user.split(":")[0]

    assert uid.isdigit() and int(uid) != 0  # numeric, so Kubernetes can check runAsNonRoot
    assert entrypoint() == ["sandbus"]
    assert "sandbus" in project["project"]["scripts"]


@pytest.mark.parametrize("path", ["deploy/base/nats/nats.conf", "tests", "bench", ".git"])
def test_what_the_image_does_not_need_stays_out(path: str) -> None:
    assert excluded(path)
