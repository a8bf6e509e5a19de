"""Kinds, object references and the subject filters a history command reads."""

from __future__ import annotations

import pytest

from events.envelope import ObjectRef
from services.cli.history.selection import (
    KNOWN_KINDS,
    Selection,
    UnknownKind,
    parse_object_ref,
    resolve_kind,
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Sandbox", "Sandbox"),
        ("sandbox", "Sandbox"),
        ("SANDBOXES", "Sandbox"),
        ("swp", "SandboxWarmPool"),
        ("sandboxclaims", "SandboxClaim"),
        ("bsbx", "BatchSandbox"),
        ("pool", "Pool"),
        ("po", "Pod"),
        ("svc", "Service"),
    ],
)
def test_kinds_resolve_from_any_name_kubectl_accepts(text: str, kind: str) -> None:
    assert resolve_kind(text) == kind


def test_the_seven_kinds_and_the_builtins_the_watcher_follows_are_known() -> None:
    assert {
        "Sandbox",
        "SandboxTemplate",
        "SandboxClaim",
        "SandboxWarmPool",
        "Pool",
        "BatchSandbox",
        "SandboxSnapshot",
        "Pod",
        "Service",
        "Job",
    } <= set(KNOWN_KINDS)


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(UnknownKind) as raised:
        resolve_kind("deployment")
    message = str(raised.value)
    assert "'deployment'" in message
    for kind in KNOWN_KINDS:
        assert kind in message


def test_object_refs_default_to_the_default_namespace() -> None:
    assert parse_object_ref("sandbox/my.app") == ObjectRef(
        kind="Sandbox", namespace="default", name="my.app"
    )
    assert parse_object_ref("SandboxClaim/team-a/c1") == ObjectRef(
        kind="SandboxClaim", namespace="team-a", name="c1"
    )


@pytest.mark.parametrize(
    "text", ["sandbox", "sandbox/a/b/c", "sandbox//c1", "/default/c1", "sandbox/"]
)
def test_malformed_object_refs_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="KIND/NAMESPACE/NAME"):
        parse_object_ref(text)


def test_an_object_ref_with_an_unknown_kind_is_refused() -> None:
    with pytest.raises(UnknownKind):
        parse_object_ref("widget/default/w1")


def test_selection_filters_on_the_server_by_subject_tokens() -> None:
    assert Selection().subjects() == ["sandbus.events.*.*.*"]
    assert Selection(kind="Sandbox", namespace="default").subjects() == [
        "sandbus.events.sandbox.default.*"
    ]
    # Names with dots are encoded the way the watcher encodes them.
    assert Selection(kind="Sandbox", name="my.app", decisions=True).subjects() == [
        "sandbus.events.sandbox.*.my_app",
        "sandbus.decisions.*.sandbox.*.my_app",
    ]
