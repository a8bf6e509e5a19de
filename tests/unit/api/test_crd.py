"""The CRD generator: the checked-in CRDs are current and structural, and each rewrite rule
from msgspec's JSON Schema to a structural schema does what api/crd.py says."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import pytest

from api.crd import SchemaNotStructural, crd_for, openapi_schema, render_crds, write_crds
from api.kinds import ALL_KINDS
from api.meta import (
    ATOMIC,
    LIST_SET,
    DateTime,
    Embedded,
    Int32,
    IntOrString,
    KindInfo,
    PrinterColumn,
    Resource,
    ScaleSubresource,
    Spec,
    cel,
    list_map,
)
from devtools.cluster.apirules.structural import schema_problems
from tests.unit.api.manifests import CRD_DIR

# --- deploy/crds ---------------------------------------------------------------------------------


def test_checked_in_crds_are_exactly_what_the_generator_writes() -> None:
    expected = render_crds()
    on_disk = {path.name: path.read_text(encoding="utf-8") for path in CRD_DIR.glob("*.yaml")}

    assert sorted(on_disk) == sorted(expected), "run: sandbus generate crds"
    for name, text in expected.items():
        assert on_disk[name] == text, f"{name} is stale; run: sandbus generate crds"


def test_file_names_follow_controller_gen() -> None:
    assert sorted(render_crds()) == [
        "agents.x-k8s.io_sandboxes.yaml",
        "extensions.agents.x-k8s.io_sandboxclaims.yaml",
        "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
        "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
        "sandbox.opensandbox.io_batchsandboxes.yaml",
        "sandbox.opensandbox.io_pools.yaml",
        "sandbox.opensandbox.io_sandboxsnapshots.yaml",
    ]


def test_generation_is_deterministic() -> None:
    assert render_crds() == render_crds()


def test_write_crds_writes_one_file_per_kind(tmp_path: Path) -> None:
    written = write_crds(tmp_path / "crds")

    expected = render_crds()
    assert sorted(path.name for path in written) == sorted(expected)
    assert all(path.read_text() == expected[path.name] for path in written)


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda kind: kind.__name__)
def test_every_crd_schema_is_structural(kind: type[Resource]) -> None:
    assert schema_problems(openapi_schema(kind)) == []


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda kind: kind.__name__)
def test_every_crd_is_namespaced_and_serves_one_storage_version(kind: type[Resource]) -> None:
    crd = crd_for(kind)

    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == kind.KIND.crd_name
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["listKind"] == f"{kind.KIND.kind}List"
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == (
        kind.KIND.version,
        True,
        True,
    )
    root = version["schema"]["openAPIV3Schema"]
    assert root["properties"]["apiVersion"]["type"] == "string"
    assert root["properties"]["kind"]["type"] == "string"
    assert root["properties"]["metadata"] == {"type": "object"}


# --- What KindInfo becomes -----------------------------------------------------------------------


class WidgetSpec(Spec, kw_only=True):
    replicas: Annotated[Int32, msgspec.Meta(ge=0)] = 1


class WidgetStatus(Spec, kw_only=True):
    replicas: int | None = None
    selector: str | None = None


class Widget(Resource, kw_only=True):
    """A widget."""

    KIND = KindInfo(
        group="example.com",
        version="v1",
        kind="Widget",
        plural="widgets",
        singular="widget",
        short_names=("wd", "wdg"),
        scale=ScaleSubresource(),
        printer_columns=(
            PrinterColumn(name="Desired", type="integer", json_path=".spec.replicas"),
            PrinterColumn(
                name="Selector",
                type="string",
                json_path=".status.selector",
                priority=1,
                description="Pods of the widget.",
            ),
        ),
    )

    spec: WidgetSpec
    status: WidgetStatus | None = None


class Gadget(Resource, kw_only=True):
    KIND = KindInfo(
        group="example.com",
        version="v1",
        kind="Gadget",
        plural="gadgets",
        singular="gadget",
        status_subresource=False,
    )

    spec: WidgetSpec | None = None


def test_names_subresources_and_printer_columns_come_from_kind_info() -> None:
    crd = crd_for(Widget)

    assert crd["spec"]["names"] == {
        "kind": "Widget",
        "listKind": "WidgetList",
        "plural": "widgets",
        "singular": "widget",
        "shortNames": ["wd", "wdg"],
    }
    (version,) = crd["spec"]["versions"]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    assert version["additionalPrinterColumns"] == [
        {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
        {
            "name": "Selector",
            "type": "string",
            "jsonPath": ".status.selector",
            "priority": 1,
            "description": "Pods of the widget.",
        },
    ]


def test_a_kind_without_status_or_columns_has_neither_key() -> None:
    (version,) = crd_for(Gadget)["spec"]["versions"]

    assert "subresources" not in version
    assert "additionalPrinterColumns" not in version
    assert "shortNames" not in crd_for(Gadget)["spec"]["names"]
    assert "required" not in version["schema"]["openAPIV3Schema"]


def test_required_spec_is_required_at_the_root() -> None:
    assert openapi_schema(Widget)["required"] == ["spec"]


# --- The rewrite rules ---------------------------------------------------------------------------


class Inner(Spec, kw_only=True):
    """Inner thing.

    Second paragraph."""

    name: str


class Everything(Spec, kw_only=True):
    required_ref: Inner
    optional_ref: Inner | None = None
    mode: Literal["Fast", "Slow"] = "Slow"
    optional_mode: Literal["On", "Off"] | None = None
    # Not optional: Python's typing caches ``Literal[...] | None`` by value set, which would
    # hand back the union of the field above with its order.
    same_set_other_order: Literal["Off", "On"] = "Off"
    count: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3
    above_zero: Annotated[float, msgspec.Meta(gt=0)] | None = None
    flag: bool = False
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=5, pattern="^[a-z]+$")] = "abc"
    max_unavailable: IntOrString | None = None
    when: DateTime | None = None
    labels: dict[str, str] | None = None
    items: Annotated[list[Inner], ATOMIC] | None = None
    keyed: Annotated[list[Inner], list_map("name")] | None = None
    tags: Annotated[list[str], LIST_SET] | None = None
    unique: frozenset[str] | None = None
    embedded: Embedded | None = None
    anything: Any = None
    listed: list[str] = msgspec.field(default_factory=list)
    guarded: Annotated[Inner | None, cel("self.name != ''", "name must be set")] = None


class Holder(Resource, kw_only=True):
    KIND = KindInfo(
        group="example.com", version="v1", kind="Holder", plural="holders", singular="holder"
    )

    spec: Everything


@pytest.fixture(scope="module")
def spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = openapi_schema(Holder)["properties"]["spec"]
    return schema


def test_refs_are_inlined_with_docstrings_as_descriptions(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["properties"]["requiredRef"] == {
        "description": "Inner thing.\n\nSecond paragraph.",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "type": "object",
    }


def test_optional_becomes_the_inner_type_and_is_not_required(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["properties"]["optionalRef"] == spec_schema["properties"]["requiredRef"]
    assert spec_schema["required"] == ["requiredRef"]


def test_literal_becomes_string_enum_and_scalar_defaults_are_kept(
    spec_schema: dict[str, Any],
) -> None:
    properties = spec_schema["properties"]
    assert properties["mode"] == {"default": "Slow", "enum": ["Fast", "Slow"], "type": "string"}
    assert properties["optionalMode"] == {"enum": ["On", "Off"], "type": "string"}
    assert properties["flag"] == {"default": False, "type": "boolean"}
    assert properties["count"] == {"default": 3, "maximum": 10, "minimum": 0, "type": "integer"}


def test_enums_keep_the_order_each_field_declares(spec_schema: dict[str, Any]) -> None:
    # msgspec sorts enum values; the declared order is what "supported values" messages print.
    assert spec_schema["properties"]["optionalMode"]["enum"] == ["On", "Off"]
    assert spec_schema["properties"]["sameSetOtherOrder"]["enum"] == ["Off", "On"]


def test_non_scalar_defaults_are_dropped(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["properties"]["listed"] == {"items": {"type": "string"}, "type": "array"}


def test_exclusive_bounds_use_the_openapi_3_0_spelling(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["properties"]["aboveZero"] == {
        "exclusiveMinimum": True,
        "minimum": 0,
        "type": "number",
    }


def test_string_constraints_pass_through(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["properties"]["text"] == {
        "default": "abc",
        "maxLength": 5,
        "minLength": 1,
        "pattern": "^[a-z]+$",
        "type": "string",
    }


def test_int_or_string_and_date_time(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["properties"]["maxUnavailable"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    assert spec_schema["properties"]["when"] == {"format": "date-time", "type": "string"}


def test_maps_lists_and_list_types(spec_schema: dict[str, Any]) -> None:
    properties = spec_schema["properties"]
    assert properties["labels"] == {"additionalProperties": {"type": "string"}, "type": "object"}
    assert properties["items"]["x-kubernetes-list-type"] == "atomic"
    assert properties["keyed"]["x-kubernetes-list-type"] == "map"
    assert properties["keyed"]["x-kubernetes-list-map-keys"] == ["name"]
    assert properties["tags"]["x-kubernetes-list-type"] == "set"
    assert properties["unique"] == {
        "items": {"type": "string"},
        "type": "array",
        "x-kubernetes-list-type": "set",
    }


def test_embedded_and_any_preserve_unknown_fields(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["properties"]["embedded"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert spec_schema["properties"]["anything"] == {"x-kubernetes-preserve-unknown-fields": True}


def test_keywords_beside_a_ref_are_kept(spec_schema: dict[str, Any]) -> None:
    assert spec_schema["properties"]["guarded"]["x-kubernetes-validations"] == [
        {"message": "name must be set", "rule": "self.name != ''"}
    ]
    assert spec_schema["properties"]["guarded"]["required"] == ["name"]


def test_the_sandbox_spec_carries_the_immutability_rule() -> None:
    from api.agents import Sandbox

    rules = openapi_schema(Sandbox)["properties"]["spec"]["x-kubernetes-validations"]
    assert [rule["message"] for rule in rules] == ["volumeClaimTemplates is immutable"]


def test_the_sandbox_root_carries_the_service_name_rule() -> None:
    """Upstream v1.0.6: at the root, since it reads ``metadata.name`` beside ``spec.service``."""
    from api.agents import SERVICE_NAME_LENGTH, Sandbox, SandboxTemplate

    rule, message = SERVICE_NAME_LENGTH
    assert openapi_schema(Sandbox)["x-kubernetes-validations"] == [
        {"message": message, "rule": rule}
    ]
    assert "size(self.metadata.name) <= 63" in rule
    assert "x-kubernetes-validations" not in openapi_schema(SandboxTemplate)


def test_the_generated_schema_is_structural(spec_schema: dict[str, Any]) -> None:
    assert schema_problems(openapi_schema(Holder)) == []


class Unmarked(Spec, kw_only=True):
    value: int | str


class Union(Spec, kw_only=True):
    value: bool | list[str]


class Node(Spec, kw_only=True):
    children: list[Node] | None = None


class LostRule(Spec, kw_only=True):
    guarded: Annotated[Inner, cel("self.name != ''", "name must be set")] | None = None


def _holding(spec_type: type[Spec]) -> type[Resource]:
    info = KindInfo(group="example.com", version="v1", kind="Bad", plural="bads", singular="bad")
    return type(  # a Resource whose spec is spec_type, built at run time for parametrisation
        "Bad",
        (Resource,),
        {"__annotations__": {"spec": spec_type}, "KIND": info},
        kw_only=True,
    )


@pytest.mark.parametrize(
    ("spec_type", "complaint"),
    [
        (Unmarked, "mark it api.meta.IntOrString"),
        (Union, "has no structural schema"),
        (Node, "recursive type Node"),
        (LostRule, r"write Annotated\[Inner \| None, ...\]"),
    ],
)
def test_types_without_a_structural_schema_are_refused(
    spec_type: type[Spec], complaint: str
) -> None:
    with pytest.raises(SchemaNotStructural, match=complaint):
        openapi_schema(_holding(spec_type))
