"""CRD validation rules (``x-kubernetes-validations``) as the development cluster evaluates them
(devtools/cluster/apirules/celrules.py): where ``self`` is bound, when a transition rule runs,
which message and reason a failure gets, and how a rule that fails at run time is reported."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.cluster.apirules import celrules
from devtools.cluster.apirules.structural import Cause, schema_problems

pytestmark = pytest.mark.skipif(not celrules.AVAILABLE, reason="CEL comes with the test extra")

Json = dict[str, Any]
SANDBOX_CRD = Path(__file__).resolve().parents[3] / "deploy/crds/agents.x-k8s.io_sandboxes.yaml"


def obj(spec: Json, name: str = "o1", **meta: Any) -> Json:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": name, "namespace": "default", **meta},
        "spec": spec,
    }


def tree(spec_schema: Json, **root: Any) -> celrules.RuleTree:
    schema = {"type": "object", "properties": {"spec": spec_schema}, **root}
    compiled = celrules.compile_rules(schema)
    assert compiled is not None
    return compiled


def invalid(field: str, detail: str, kind: str = "object") -> Cause:
    return Cause(
        field=field, reason="FieldValueInvalid", message=f'Invalid value: "{kind}": {detail}'
    )


def rule(expression: str, **extra: Any) -> Json:
    return {"rule": expression, **extra}


# -- compiling ------------------------------------------------------------------------------


def test_a_schema_without_rules_compiles_to_nothing() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    assert celrules.compile_rules(schema) is None
    assert celrules.compile_rules(None) is None


def test_a_rule_that_does_not_compile_is_reported_on_every_write() -> None:
    rules = tree({"type": "object", "x-kubernetes-validations": [rule("self.a ==")]})
    (cause,) = rules.validate(obj({"a": 1}), None).causes
    assert cause.field == "spec"
    assert cause.message.startswith('Invalid value: "object": rule compile error: ')
    assert celrules.compile_problem("self.a ==").startswith("compilation failed: ")
    assert celrules.compile_problem("self.a == 1") == ""


def test_a_crd_schema_with_a_rule_that_does_not_compile_is_a_problem() -> None:
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [rule("self.a ==")]}},
    }
    (problem,) = schema_problems(schema)
    assert problem.startswith(
        "openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: "
        '"self.a ==": compilation failed: '
    )


def test_only_the_fields_a_rule_reads_are_handed_to_it() -> None:
    assert celrules._fields_read("has(self.a) && self.b == oldSelf.b") == {"a", "b"}
    assert celrules._fields_read("self.items.all(i, i.n > 0)") == {"items"}
    for whole in ("self == oldSelf", "size(self) > 1", "self.all(k, k != '')", "self['a'] == 1"):
        assert celrules._fields_read(whole) is None, whole


def test_reading_the_whole_value_sees_every_field() -> None:
    rules = tree(
        {
            "type": "object",
            "x-kubernetes-validations": [rule("size(self) <= 2", message="at most two fields")],
        }
    )
    assert rules.validate(obj({"a": 1, "b": 2}), None).causes == []
    assert rules.validate(obj({"a": 1, "b": 2, "c": 3}), None).causes == [
        invalid("spec", "at most two fields")
    ]


# -- where self is bound --------------------------------------------------------------------


def test_a_rule_on_list_items_runs_on_each_item_at_its_index() -> None:
    rules = tree(
        {
            "type": "object",
            "properties": {
                "ports": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"port": {"type": "integer"}},
                        "x-kubernetes-validations": [
                            rule("self.port > 1024", message="must be unprivileged")
                        ],
                    },
                }
            },
        }
    )
    spec = {"ports": [{"port": 8080}, {"port": 80}, {"port": 443}]}
    assert rules.validate(obj(spec), None).causes == [
        invalid("spec.ports[1]", "must be unprivileged"),
        invalid("spec.ports[2]", "must be unprivileged"),
    ]


def test_a_rule_on_map_values_is_reported_under_the_key() -> None:
    rules = tree(
        {
            "type": "object",
            "properties": {
                "limits": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "integer",
                        "x-kubernetes-validations": [rule("self >= 0")],
                    },
                }
            },
        }
    )
    (cause,) = rules.validate(obj({"limits": {"cpu": 1, "gpu": -1}}), None).causes
    assert cause == invalid("spec.limits[gpu]", "failed rule: self >= 0", kind="integer")


def test_a_null_value_is_not_evaluated() -> None:
    rules = tree({"type": "object", "nullable": True, "x-kubernetes-validations": [rule("false")]})
    assert rules.validate(obj(None), None).causes == []  # type: ignore[arg-type]


def test_at_the_root_metadata_has_only_name_and_generate_name() -> None:
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"service": {"type": "boolean"}}}},
        "x-kubernetes-validations": [
            rule(
                "!has(self.spec.service) || !self.spec.service || size(self.metadata.name) <= 63",
                message="a Sandbox with a service needs a name of at most 63 characters",
            ),
            rule("self.metadata.labels.size() >= 0", message="labels are not visible"),
        ],
    }
    rules = celrules.compile_rules(schema)
    assert rules is not None
    long_name = "s" * 64
    causes = rules.validate(obj({"service": True}, name=long_name, labels={"a": "b"}), None).causes
    assert causes == [
        invalid("<nil>", "a Sandbox with a service needs a name of at most 63 characters"),
        invalid("<nil>", "no such key: labels evaluating rule: labels are not visible"),
    ]
    assert rules.validate(obj({"service": False}, name=long_name), None).causes == [
        invalid("<nil>", "no such key: labels evaluating rule: labels are not visible")
    ]


# -- transition rules -----------------------------------------------------------------------


def sandbox_rules() -> celrules.RuleTree:
    crd = yaml.safe_load(SANDBOX_CRD.read_text())
    compiled = celrules.compile_rules(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert compiled is not None
    return compiled


VCT = [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]
IMMUTABLE = invalid("spec", "volumeClaimTemplates is immutable")


def test_the_sandbox_volume_claim_templates_rule_is_a_transition_rule() -> None:
    rules = sandbox_rules()
    sandbox = obj({"podTemplate": {}, "volumeClaimTemplates": VCT})
    assert rules.validate(sandbox, None).causes == []  # create: not evaluated
    assert rules.validate(sandbox, sandbox).causes == []
    changed = copy.deepcopy(sandbox)
    changed["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] = "scratch"
    assert rules.validate(changed, sandbox).causes == [IMMUTABLE]
    bare = obj({"podTemplate": {}})
    assert rules.validate(sandbox, bare).causes == [IMMUTABLE]  # added
    assert rules.validate(bare, sandbox).causes == [IMMUTABLE]  # removed
    other = copy.deepcopy(sandbox)
    other["spec"]["operatingMode"] = "Suspended"
    assert rules.validate(other, sandbox).causes == []


def list_schema(list_type: str, **extra: Any) -> Json:
    return {
        "type": "object",
        "properties": {
            "volumes": {
                "type": "array",
                "x-kubernetes-list-type": list_type,
                **extra,
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
                    "x-kubernetes-validations": [
                        rule("self.size >= oldSelf.size", message="a volume may only grow")
                    ],
                },
            }
        },
    }


def test_transition_rules_on_map_list_items_correlate_by_key() -> None:
    rules = tree(list_schema("map", **{"x-kubernetes-list-map-keys": ["name"]}))
    old = obj({"volumes": [{"name": "a", "size": 5}, {"name": "b", "size": 5}]})
    new = obj(
        {"volumes": [{"name": "c", "size": 1}, {"name": "b", "size": 4}, {"name": "a", "size": 6}]}
    )
    assert rules.validate(new, old).causes == [invalid("spec.volumes[1]", "a volume may only grow")]


def test_transition_rules_on_atomic_list_items_are_skipped() -> None:
    rules = tree(list_schema("atomic"))
    old = obj({"volumes": [{"name": "a", "size": 5}]})
    new = obj({"volumes": [{"name": "a", "size": 1}]})
    assert rules.validate(new, old).causes == []


def test_transition_rules_below_an_atomic_map_are_skipped() -> None:
    rules = tree(
        {
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "size": {"type": "integer", "x-kubernetes-validations": [rule("self >= oldSelf")]}
            },
        }
    )
    assert rules.validate(obj({"size": 1}), obj({"size": 2})).causes == []


def test_an_optional_old_self_rule_runs_on_create_too() -> None:
    rules = tree(
        {
            "type": "object",
            "properties": {
                "size": {
                    "type": "integer",
                    "x-kubernetes-validations": [
                        rule(
                            "oldSelf.hasValue() ? self >= oldSelf.value() : self <= 10",
                            optionalOldSelf=True,
                            message="too big or shrinking",
                        )
                    ],
                }
            },
        }
    )
    assert rules.validate(obj({"size": 11}), None).causes == [
        invalid("spec.size", "too big or shrinking", kind="integer")
    ]
    assert rules.validate(obj({"size": 20}), obj({"size": 12})).causes == []
    assert len(rules.validate(obj({"size": 3}), obj({"size": 12})).causes) == 1


# -- messages, reasons, paths ---------------------------------------------------------------


def test_message_expression_wins_over_message_when_it_gives_a_line() -> None:
    def with_expression(expression: str) -> list[Cause]:
        rules = tree(
            {
                "type": "object",
                "x-kubernetes-validations": [
                    rule(
                        "self.replicas <= 5",
                        message="too many",
                        messageExpression=expression,
                    )
                ],
            }
        )
        return rules.validate(obj({"replicas": 7}), None).causes

    assert with_expression("'replicas ' + string(self.replicas) + ' > 5'") == [
        invalid("spec", "replicas 7 > 5")
    ]
    assert with_expression("'  '") == [invalid("spec", "too many")]  # empty after trimming
    assert with_expression("self.replicas") == [invalid("spec", "too many")]  # not a string
    assert with_expression("self.missing") == [invalid("spec", "too many")]  # an error


def test_a_rule_without_message_reports_the_rule() -> None:
    rules = tree({"type": "object", "x-kubernetes-validations": [rule(" self.a > 1 ")]})
    assert rules.validate(obj({"a": 0}), None).causes == [
        invalid("spec", "failed rule: self.a > 1")
    ]


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("FieldValueForbidden", "Forbidden: no b"),
        ("FieldValueRequired", "Required value: no b"),
        ("FieldValueDuplicate", 'Duplicate value: "object"'),
        ("FieldValueInvalid", 'Invalid value: "object": no b'),
    ],
)
def test_reason_picks_the_error_type(reason: str, message: str) -> None:
    rules = tree(
        {
            "type": "object",
            "properties": {"a": {"type": "object"}},
            "x-kubernetes-validations": [
                rule("!has(self.b)", message="no b", reason=reason, fieldPath=".a")
            ],
        }
    )
    assert rules.validate(obj({"b": 1}), None).causes == [
        Cause(field="spec.a", reason=reason, message=message)
    ]


def test_field_path_with_brackets() -> None:
    rules = tree(
        {
            "type": "object",
            "x-kubernetes-validations": [rule("false", message="no", fieldPath=".a['b.c']")],
        }
    )
    assert [c.field for c in rules.validate(obj({}), None).causes] == ["spec.a.b.c"]


# -- run-time errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "detail"),
    [
        ("self.missing == 1", "no such key: missing evaluating rule: {r}"),
        ("self.a / 0 == 1", "division by zero evaluating rule: {r}"),
        ("self.big + 1 > 0", "integer overflow evaluating rule: {r}"),
        ("self.list[3] == 1", "index out of bounds: 3 evaluating rule: {r}"),
        (
            "self.a + 'x' == 'y'",
            "'no such overload': call arguments did not match a supported operator, function or "
            "macro signature for rule: {r}",
        ),
    ],
)
def test_a_rule_that_fails_at_run_time_is_invalid(expression: str, detail: str) -> None:
    rules = tree({"type": "object", "x-kubernetes-validations": [rule(expression)]})
    spec = {"a": 1, "big": 2**63 - 1, "list": [1]}
    assert rules.validate(obj(spec), None).causes == [invalid("spec", detail.format(r=expression))]


def test_the_message_names_the_rule_in_a_run_time_error() -> None:
    rules = tree(
        {"type": "object", "x-kubernetes-validations": [rule("self.x == 1", message="x is one")]}
    )
    assert rules.validate(obj({}), None).causes == [
        invalid("spec", "no such key: x evaluating rule: x is one")
    ]


def test_a_rule_calling_a_function_the_library_lacks_is_skipped() -> None:
    rules = tree(
        {"type": "object", "x-kubernetes-validations": [rule("self.n.lowerAscii() == 'a'")]}
    )
    assert rules.validate(obj({"n": "B"}), None).causes == []


# -- ratcheting -----------------------------------------------------------------------------


def test_an_unchanged_invalid_value_is_a_warning_not_an_error() -> None:
    rules = tree(
        {
            "type": "object",
            "properties": {
                "a": {
                    "type": "integer",
                    "x-kubernetes-validations": [rule("self < 10", message="below ten")],
                },
                "b": {"type": "integer"},
            },
        }
    )
    old = obj({"a": 12, "b": 1})
    kept = rules.validate(obj({"a": 12, "b": 2}), old)
    assert kept.causes == []
    assert kept.warnings == ['spec.a: Invalid value: "integer": below ten']
    changed = rules.validate(obj({"a": 13, "b": 1}), old)
    assert changed.causes == [invalid("spec.a", "below ten", kind="integer")]
    assert changed.warnings == []
    created = rules.validate(obj({"a": 12}), None)
    assert created.causes == [invalid("spec.a", "below ten", kind="integer")]


def test_transition_rules_are_never_ratcheted() -> None:
    rules = tree(
        {"type": "object", "x-kubernetes-validations": [rule("self != oldSelf", message="x")]}
    )
    same = obj({"a": 1})
    assert rules.validate(same, same).causes == [invalid("spec", "x")]
