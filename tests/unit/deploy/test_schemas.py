"""Every manifest deploy/ renders is valid against the Kubernetes API's own schemas.

kubernetes-validate ships the JSON Schemas of each Kubernetes release's OpenAPI, so this needs no
cluster and no network. In strict mode it refuses any field the API does not define. The API
server would drop such a field silently, or refuse it under ``fieldValidation=Strict``, so a
misspelt securityContext field fails here instead of going unnoticed in production. Two releases
are checked: the one the development cluster reports, which the server dry-run
(tests/component/deploy/test_kubectl_apply.py) applies to, and the newest the tool knows, where an
API that was removed or changed since shows first.

Both the default deployment (``deploy/``: the CRDs and base) and base with every component of
``deploy/components`` switched on are checked, so a component is valid before anyone enables it.

CRDs are validated as what they are to the API: apiextensions.k8s.io/v1 objects, their versions'
``openAPIV3Schema`` included (JSONSchemaProps, strict too). What kubernetes-validate cannot do is
validate a custom resource (a Sandbox, a Pool...). It has no schema for a kind that a CRD
defines, and says so (the last test here keeps that limitation in view). The custom resources of
examples/ are checked against the CRDs' own schemas instead, by the server dry-run of examples/
and by tests/unit/api/test_examples.py.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from devtools.cluster.http.discovery import SERVER_VERSION
from tests.unit.api.manifests import example_documents
from tests.unit.deploy.manifests import (
    COMPONENTS,
    DEPLOY,
    Doc,
    enable_components,
    of_kind,
    render,
    render_uncached,
)

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="the Kubernetes schemas come with kubernetes-validate"
)

DEVELOPMENT_CLUSTER = f"{SERVER_VERSION['major']}.{SERVER_VERSION['minor']}"
VERSIONS = sorted({DEVELOPMENT_CLUSTER, kubernetes_validate.latest_version()})


def _every_component(tmp_path: Path) -> tuple[Doc, ...]:
    names = sorted(
        path.name for path in COMPONENTS.iterdir() if (path / "kustomization.yaml").is_file()
    )
    copied = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copied)
    enable_components(copied, names)
    return tuple(render_uncached(copied))


def _problems(docs: tuple[Doc, ...], version: str) -> list[str]:
    problems = []
    for doc in docs:
        name = f"{doc['kind']} {doc['metadata'].get('namespace', '')}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            problems.append(f"{name}: {path}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError as error:
            # Everything deploy/ renders is a built-in kind (a CRD is one): none may be skipped.
            problems.append(f"{name}: {error.message}")
    return problems


@pytest.mark.parametrize("version", VERSIONS)
def test_the_deployment_validates_strictly(version: str) -> None:
    docs = render(DEPLOY)

    assert of_kind(docs, "CustomResourceDefinition"), "the CRDs are validated too"
    assert _problems(docs, version) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_every_component_validates_strictly(version: str, tmp_path: Path) -> None:
    assert _problems(_every_component(tmp_path), version) == []


def test_strict_validation_refuses_a_field_the_api_does_not_have() -> None:
    # What a pass of the tests above is worth: a misspelt field in a container, and in a CRD's
    # schema, do not validate.
    deployment = copy.deepcopy(next(iter(of_kind(render(DEPLOY), "Deployment").values())))
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    crd = copy.deepcopy(next(iter(of_kind(render(DEPLOY), "CustomResourceDefinition").values())))
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["propertiess"] = {}

    problems = _problems((deployment, crd), DEVELOPMENT_CLUSTER)

    assert len(problems) == 2
    assert "'imagePullPolicyy' was unexpected" in problems[0]
    assert "'propertiess' was unexpected" in problems[1]


def test_custom_resources_are_beyond_kubernetes_validate() -> None:
    # If this starts failing, the tool has learnt custom kinds: validate examples/ with it too.
    documents = [document for _, document in example_documents()]
    assert documents
    for document in documents:
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(document, DEVELOPMENT_CLUSTER, strict=True)
