"""The snapshot worker's settings from its environment (``services.snapshot.service.
settings_from``), against upstream's controller flags and their defaults (docs/opensandbox.md
§4.3): every variable read, a blank one the default, and a value that does not parse stopping
the service with the variable named."""

from __future__ import annotations

from typing import Any

import pytest

from events.envelope import ObjectKey
from services.runtime.worker_api import ObjectCache, Observed, Reconciler
from services.snapshot.core.jobs import CommitterSettings
from services.snapshot.core.plan import SnapshotSettings, plan_snapshot
from services.snapshot.service import definition, settings_from

VARIABLES = (
    "SANDBUS_SNAPSHOT_REGISTRY",
    "SANDBUS_SNAPSHOT_PUSH_SECRET",
    "SANDBUS_SNAPSHOT_REGISTRY_INSECURE",
    "SANDBUS_SNAPSHOT_COMMITTER_IMAGE",
    "SANDBUS_SNAPSHOT_CONTAINERD_SOCKET",
    "SANDBUS_SNAPSHOT_COMMIT_TIMEOUT",
    "SANDBUS_SNAPSHOT_EVENTS",
)


def test_the_defaults_are_upstreams() -> None:
    """No registry (every snapshot fails ``RegistryNotConfigured``), no push secret, a secure
    registry, ``image-committer:dev``, containerd's usual socket, a 10 minute commit deadline
    (``--commit-job-timeout``), Events on."""
    settings = settings_from({})
    assert settings == SnapshotSettings(
        registry="",
        committer=CommitterSettings(
            image="image-committer:dev",
            push_secret="",
            registry_insecure=False,
            containerd_socket="/var/run/containerd/containerd.sock",
            commit_timeout=600.0,
        ),
        events=True,
    )
    assert settings.digest_grace == 30.0
    assert settings_from({name: " " for name in VARIABLES}) == settings, "blank: the default"


def test_every_variable_is_read() -> None:
    """Each of upstream's flags as its variable (trimmed; the flags ``true``/``false`` in any
    case; the timeout in seconds, fractions allowed)."""
    settings = settings_from(
        {
            "SANDBUS_SNAPSHOT_REGISTRY": " registry.example.com/sandboxes ",
            "SANDBUS_SNAPSHOT_PUSH_SECRET": "registry-push",
            "SANDBUS_SNAPSHOT_REGISTRY_INSECURE": "true",
            "SANDBUS_SNAPSHOT_COMMITTER_IMAGE": "example.com/image-committer:v1",
            "SANDBUS_SNAPSHOT_CONTAINERD_SOCKET": "/run/k3s/containerd/containerd.sock",
            "SANDBUS_SNAPSHOT_COMMIT_TIMEOUT": "90.5",
            "SANDBUS_SNAPSHOT_EVENTS": "false",
        }
    )
    assert settings == SnapshotSettings(
        registry="registry.example.com/sandboxes",
        committer=CommitterSettings(
            image="example.com/image-committer:v1",
            push_secret="registry-push",
            registry_insecure=True,
            containerd_socket="/run/k3s/containerd/containerd.sock",
            commit_timeout=90.5,
        ),
        events=False,
    )
    insecure = settings_from({"SANDBUS_SNAPSHOT_REGISTRY_INSECURE": " TRUE "})
    assert insecure.committer.registry_insecure is True
    assert settings_from({"SANDBUS_SNAPSHOT_EVENTS": "True"}).events is True
    assert settings_from({"SANDBUS_SNAPSHOT_COMMIT_TIMEOUT": "1"}).committer.commit_timeout == 1.0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SANDBUS_SNAPSHOT_REGISTRY_INSECURE", "maybe"),
        ("SANDBUS_SNAPSHOT_REGISTRY_INSECURE", "1"),
        ("SANDBUS_SNAPSHOT_REGISTRY_INSECURE", "yes"),
        ("SANDBUS_SNAPSHOT_EVENTS", "off"),
        ("SANDBUS_SNAPSHOT_COMMIT_TIMEOUT", "0"),
        ("SANDBUS_SNAPSHOT_COMMIT_TIMEOUT", "0.5"),
        ("SANDBUS_SNAPSHOT_COMMIT_TIMEOUT", "-600"),
        ("SANDBUS_SNAPSHOT_COMMIT_TIMEOUT", "10m"),
        ("SANDBUS_SNAPSHOT_COMMIT_TIMEOUT", "nan"),
        ("SANDBUS_SNAPSHOT_COMMIT_TIMEOUT", "inf"),
    ],
)
def test_a_bad_value_stops_the_service_naming_the_variable(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sandbus: a value that does not parse (a flag not ``true``/``false``, a timeout under
    a second, not finite, or not in seconds) stops the service at start, with the variable
    named, rather than being read as a default."""
    with pytest.raises(ValueError, match=name):
        settings_from({name: value})
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        definition()


def settings_of(reconciler: Reconciler[Any]) -> SnapshotSettings:
    """The settings the reconciler's observe hands its planner."""
    key = ObjectKey("SandboxSnapshot", "default", "snap")
    return reconciler.observe(key, Observed(cache=ObjectCache())).settings


def test_the_worker_runs_with_the_settings_of_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sandbus: ``definition()`` reads the process's environment."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SANDBUS_SNAPSHOT_REGISTRY", "registry.example.com/x")
    monkeypatch.setenv("SANDBUS_SNAPSHOT_COMMIT_TIMEOUT", "42")
    built = definition()
    assert built.name == "snapshot"
    (reconciler,) = built.reconcilers
    assert reconciler.plan is plan_snapshot
    assert settings_of(reconciler).registry == "registry.example.com/x"
    assert settings_of(reconciler).committer.commit_timeout == 42.0
