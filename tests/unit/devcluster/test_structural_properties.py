"""Properties of the structural-schema functions over arbitrary input: the development cluster
hands them whatever a client sends, so they must never crash, and defaulting and pruning must
settle after one application."""

from __future__ import annotations

import ast
import copy
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.agents import Sandbox, SandboxClaim, SandboxWarmPool
from api.crd import openapi_schema
from devtools.cluster.apirules.structural import StructuralSchema, _go_float, _go_quote
from tests.unit.api.manifests import EXAMPLES_DIR, OBSERVED_DIR, load_documents

SCHEMAS = {
    kind.KIND.kind: StructuralSchema(openapi_schema(kind))
    for kind in (Sandbox, SandboxClaim, SandboxWarmPool)
}
BASES = [
    document
    for path in (
        EXAMPLES_DIR / "agents" / "sandbox.yaml",
        EXAMPLES_DIR / "agents" / "sandboxclaim.yaml",
        OBSERVED_DIR / "sandboxwarmpool-status.yaml",
    )
    for document in load_documents(path)
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
field_names = st.sampled_from(
    [
        "spec",
        "status",
        "replicas",
        "podTemplate",
        "lifecycle",
        "env",
        "conditions",
        "service",
        "shutdownPolicy",
        "updateStrategy",
        "type",
        "name",
        "metadata",
        "x",
    ]
)


@st.composite
def mangled_manifests(draw: st.DrawFn) -> dict[str, Any]:
    """An example manifest with arbitrary JSON written at a few arbitrary places in it."""
    manifest = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        node: Any = manifest
        for _ in range(draw(st.integers(min_value=0, max_value=4))):
            if isinstance(node, dict) and node:
                node = node[draw(st.sampled_from(sorted(node)))]
            elif isinstance(node, list) and node:
                node = node[draw(st.integers(min_value=0, max_value=len(node) - 1))]
        if isinstance(node, dict):
            node[draw(field_names)] = draw(json_values)
        elif isinstance(node, list):
            node.append(draw(json_values))
    return manifest


@settings(max_examples=150, deadline=None)
@given(mangled_manifests())
def test_admission_never_crashes_and_settles(manifest: dict[str, Any]) -> None:
    schema = SCHEMAS[manifest["kind"]]

    admission = schema.admit(manifest)

    assert schema.apply_defaults(admission.object) == admission.object
    assert schema.prune(admission.object) == admission.object
    assert schema.unknown_fields(admission.object) == []
    assert schema.validate(admission.object) == admission.causes
    assert all(cause.field and cause.message for cause in admission.causes)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_go_float_formatting_round_trips(value: float) -> None:
    printed = _go_float(value)

    assert float(printed) == value
    assert printed.startswith("-") == (math.copysign(1.0, value) < 0)
    assert ("e" in printed) == (value != 0 and not 1e-4 <= abs(value) < 1e6)


@given(st.text())
def test_go_quoting_round_trips(text: str) -> None:
    assert ast.literal_eval(_go_quote(text)) == text


def test_go_float_examples() -> None:
    assert [_go_float(v) for v in (0, 1, 0.5, 1e6, 123456, 1234567.0, 1e-5, -2.5, math.pi)] == [
        "0",
        "1",
        "0.5",
        "1e+06",
        "123456",
        "1.234567e+06",
        "1e-05",
        "-2.5",
        "3.141592653589793",
    ]
