"""What external subscribers see (events/redaction.py): every env value, a Secret's data and the
last-applied annotation are redacted, wherever they are in the object; nothing else changes."""

from __future__ import annotations

import copy

import pytest

from events.redaction import REDACTED, public_subject, redacted_object
from events.subjects import event_subject


def test_env_values_are_redacted_at_any_depth_and_names_stay() -> None:
    claim = {
        "kind": "SandboxClaim",
        "metadata": {"name": "ada", "annotations": {"note": "kept"}},
        "spec": {
            "env": [
                {"name": "TOKEN", "value": "s3cret"},
                {"name": "FROM", "valueFrom": {"secretKeyRef": {"name": "k", "key": "v"}}},
            ]
        },
    }
    pod = {
        "kind": "Pod",
        "spec": {
            "containers": [{"name": "main", "env": [{"name": "PASSWORD", "value": "hunter2"}]}],
            "initContainers": [{"name": "init", "env": [{"name": "A", "value": "1"}]}],
        },
    }
    batch = {
        "kind": "BatchSandbox",
        "spec": {"taskTemplate": {"spec": {"process": {"env": [{"name": "K", "value": "v"}]}}}},
    }
    before = copy.deepcopy([claim, pod, batch])
    shown = [redacted_object(o) for o in (claim, pod, batch)]
    assert [claim, pod, batch] == before, "the original is not changed"
    assert shown[0]["spec"]["env"] == [
        {"name": "TOKEN", "value": REDACTED},
        {"name": "FROM", "valueFrom": {"secretKeyRef": {"name": "k", "key": "v"}}},
    ]
    assert shown[0]["metadata"]["annotations"] == {"note": "kept"}
    assert shown[1]["spec"]["containers"][0]["env"] == [{"name": "PASSWORD", "value": REDACTED}]
    assert shown[1]["spec"]["initContainers"][0]["env"][0]["value"] == REDACTED
    assert shown[2]["spec"]["taskTemplate"]["spec"]["process"]["env"][0]["value"] == REDACTED
    assert "s3cret" not in repr(shown) and "hunter2" not in repr(shown)


def test_a_secret_and_the_last_applied_configuration() -> None:
    secret = {
        "kind": "Secret",
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": '{"data":1}'}
        },
        "data": {"key": "c2VjcmV0"},
        "stringData": {"other": "plain"},
    }
    shown = redacted_object(secret)
    assert shown["data"] == {"key": REDACTED}
    assert shown["stringData"] == {"other": REDACTED}
    annotations = shown["metadata"]["annotations"]
    assert annotations["kubectl.kubernetes.io/last-applied-configuration"] == REDACTED


def test_the_public_subject_mirrors_the_log_subject() -> None:
    subject = event_subject("SandboxClaim", "team-a", "ada")
    assert public_subject(subject) == "sandbus.public." + subject.removeprefix("sandbus.")
    with pytest.raises(ValueError, match="not an event subject"):
        public_subject("sandbus.state.x")
