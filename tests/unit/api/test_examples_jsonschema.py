"""A second opinion on the CRD schemas from the jsonschema library.

Our own validator (:mod:`devtools.cluster.apirules.structural`) reproduces the API server's
messages; this test checks the same manifests with an independent implementation of JSON Schema, so
a bug shared by the generator and our validator cannot hide. OpenAPI v3.0 schemas are close to JSON
Schema draft 4; the ``x-kubernetes-*`` extensions are annotations that draft 4 ignores.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from api.kinds import kind_for
from devtools.cluster.apirules.structural import StructuralSchema
from tests.unit.api.manifests import CRD_DIR, example_documents, load_documents

EXAMPLES = example_documents()


def crd_of(manifest: dict[str, Any]) -> dict[str, Any]:
    kind = kind_for(manifest["apiVersion"], manifest["kind"])
    assert kind is not None
    (crd,) = load_documents(CRD_DIR / f"{kind.KIND.group}_{kind.KIND.plural}.yaml")
    return crd


def validator_for(crd: dict[str, Any]) -> jsonschema.Draft4Validator:
    (version,) = crd["spec"]["versions"]
    return jsonschema.Draft4Validator(
        version["schema"]["openAPIV3Schema"], format_checker=jsonschema.FormatChecker()
    )


def errors(manifest: dict[str, Any]) -> list[str]:
    crd = crd_of(manifest)
    # Defaults first, as the API server does: a field with a default may be omitted.
    defaulted = StructuralSchema.from_crd(crd).apply_defaults(copy.deepcopy(manifest))
    return [
        "/".join(map(str, error.absolute_path)) + ": " + error.message
        for error in validator_for(crd).iter_errors(defaulted)
    ]


@pytest.mark.parametrize(("name", "manifest"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_validates_with_jsonschema(name: str, manifest: dict[str, Any]) -> None:
    assert errors(manifest) == []


def _sandbox() -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "s1"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }


def test_wrong_type_missing_field_and_bad_enum_are_named() -> None:
    wrong_type = _sandbox()
    wrong_type["spec"]["service"] = "yes"
    missing = _sandbox()
    del missing["spec"]["podTemplate"]
    bad_enum = _sandbox()
    bad_enum["spec"]["shutdownPolicy"] = "Later"

    assert any(
        e.startswith("spec/service: 'yes' is not of type 'boolean'") for e in errors(wrong_type)
    )
    assert any(e.startswith("spec: 'podTemplate' is a required property") for e in errors(missing))
    assert any(e.startswith("spec/shutdownPolicy: 'Later' is not one of") for e in errors(bad_enum))
