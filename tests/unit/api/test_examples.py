"""Every manifest under examples/ (both API families) is what the API server would accept and
store unchanged, and what our types carry without loss."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from api.kinds import kind_for
from api.meta import Resource
from devtools.cluster.apirules.structural import StructuralSchema
from tests.unit.api.manifests import CRD_DIR, example_documents, load_documents

EXAMPLES = example_documents()
IDS = [name for name, _ in EXAMPLES]


def resource_type(manifest: dict[str, Any]) -> type[Resource]:
    kind = kind_for(manifest["apiVersion"], manifest["kind"])
    assert kind is not None, f"{manifest['apiVersion']} {manifest['kind']} is not one of ours"
    return kind


def checked_in_schema(kind: type[Resource]) -> StructuralSchema:
    """The schema of the CRD file in deploy/crds, which is what a cluster would be given."""
    (crd,) = load_documents(CRD_DIR / f"{kind.KIND.group}_{kind.KIND.plural}.yaml")
    return StructuralSchema.from_crd(crd)


def test_there_are_examples_of_all_seven_kinds() -> None:
    assert len({resource_type(manifest) for _, manifest in EXAMPLES}) == 7


@pytest.mark.parametrize(("name", "manifest"), EXAMPLES, ids=IDS)
def test_example_is_admitted_without_causes_or_unknown_fields(
    name: str, manifest: dict[str, Any]
) -> None:
    admission = checked_in_schema(resource_type(manifest)).admit(manifest)

    assert admission.causes == []
    assert admission.unknown_fields == []


@pytest.mark.parametrize(("name", "manifest"), EXAMPLES, ids=IDS)
def test_example_round_trips_through_its_type(name: str, manifest: dict[str, Any]) -> None:
    kind = resource_type(manifest)
    schema = checked_in_schema(kind)

    decoded = msgspec.json.decode(json.dumps(manifest), type=kind)
    encoded = json.loads(msgspec.json.encode(decoded))

    # Encoding omits a field that holds its default and the API server puts it back, so the
    # comparison is between the objects the server would store; any other field lost on the
    # way would make them differ.
    assert schema.admit(encoded).object == schema.admit(manifest).object
