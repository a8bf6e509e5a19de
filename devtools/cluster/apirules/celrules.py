"""CRD validation rules (``x-kubernetes-validations``): CEL, evaluated as kube-apiserver does.

The CEL itself is the ``common-expression-language`` package (import name ``cel``, a Rust
implementation behind a Python binding, a test dependency): each rule is compiled once per CRD
schema (:func:`compile_rules`, cached by the strategy) and evaluated on every write of a custom
resource. Without the package installed no rule is evaluated (:data:`AVAILABLE` is False), the
way :mod:`.knownfields` does without ``kubernetes-validate``.

What is reproduced, after ``apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go`` and
``registry/customresource/strategy.go``:

* A rule sits on a schema node and is evaluated with ``self`` bound to the value at every place
  the node occurs: inside list items and ``additionalProperties`` values too. A ``null`` value
  is never evaluated. At the root of the resource (and of an ``x-kubernetes-embedded-resource``)
  ``self.metadata`` has only ``name`` and ``generateName``, besides ``apiVersion`` and ``kind``.
* A rule that mentions ``oldSelf`` is a transition rule: evaluated only on an update, and only
  where an old value exists at the same place. Object properties correlate by name (not below
  ``x-kubernetes-map-type: atomic``), list items only in ``x-kubernetes-list-type: map`` lists, by
  their ``x-kubernetes-list-map-keys``; elsewhere transition rules are skipped. With
  ``optionalOldSelf: true`` it is also evaluated without an old value, ``oldSelf`` being
  ``optional.none()``.
* A failing rule is a cause at the node's path (``<nil>`` for the root, as ``field.Path`` prints
  a nil path), extended by ``fieldPath``; ``reason`` picks the error type (``FieldValueInvalid``
  by default, ``Forbidden``, ``Required``, ``Duplicate``); the detail is ``messageExpression``'s
  value when it evaluates to a non-empty one-line string, else ``message``, else ``failed rule:
  <rule>``. An Invalid's value is the node's schema type: ``Invalid value: "object": …``.
* A rule that fails at run time gives ``<error> evaluating rule: <message or rule>``
  (``no such key: foo``, ``division by zero``, ``integer overflow``, ``index out of bounds: 3``);
  a type mismatch gives ``'no such overload': call arguments did not match a supported operator,
  function or macro signature for rule: …``.
* Ratcheting (CRDValidationRatcheting, on by default since 1.30): on an update, a non-transition
  rule that fails on a value equal to the old one (or, where values do not correlate, whose
  nearest correlatable ancestor is unchanged) is not an error but a warning.

Cost: a conversion of ``self`` into CEL values dominates the evaluation, so a rule that only
reads ``self.<field>`` (and ``oldSelf.<field>``) is handed only those fields of the node
(:func:`_fields_read`); the result is the same, since the rule cannot see the others.

Not evaluated: the functions of Kubernetes' CEL library that the package lacks (``lowerAscii``,
``split``, ``quantity``, ``isURL``, the ``format`` and ``ip``/``cidr`` libraries …): a rule that
calls one is skipped. Values are plain JSON ones: a ``date-time``, ``duration`` or ``byte``
string stays a string (the real server gives a ``timestamp``, ``duration``, ``bytes``), a
``number`` field holding an integer is a CEL ``int``, an int-or-string is the bare value rather
than ``{intVal, strVal}``, list equality is order-sensitive for ``set`` and ``map`` lists too,
property names are not escaped (``foo-bar`` is not ``foo__dash__bar``), and there is no cost
budget.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from devtools.cluster.apirules.structural import Cause
from devtools.cluster.storage.jsonmemo import JsonMemo


def _load_cel() -> Any:
    """The ``cel`` module, a test dependency: without it, rules are not evaluated."""
    try:
        import cel
    except ImportError:  # pragma: no cover - exercised only without the test extra
        return None
    return cel


_cel: Any = _load_cel()

__all__ = [
    "AVAILABLE",
    "BLOCKING_REASONS",
    "RuleTree",
    "compile_problem",
    "compile_rules",
    "not_checked_cause",
]

AVAILABLE: Final = _cel is not None

# strategy.go's hasBlockingErr: with one of these schema errors, the rules are not evaluated.
BLOCKING_REASONS: Final = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)

# celconfig.MaxEvaluatedMessageExpressionSizeBytes
_MAX_MESSAGE_BYTES: Final = 5 * 1024
_NIL_PATH: Final = "<nil>"
_MISSING: Final = object()


def not_checked_cause() -> Cause:
    """What hasBlockingErr adds: ``field.Invalid(nil, nil, …)``."""
    return Cause(
        field=_NIL_PATH,
        reason="FieldValueInvalid",
        message='Invalid value: "null": some validation rules were not checked because the '
        "object was invalid; correct the existing errors to complete validation",
    )


@dataclass(frozen=True)
class _Rule:
    source: str
    program: Any
    message: str
    message_program: Any
    reason: str
    field_path: str
    uses_old_self: bool
    optional_old_self: bool
    fields: frozenset[str] | None  # the fields of self/oldSelf it reads; None: the whole value
    compile_error: str

    @property
    def error_string(self) -> str:
        """ruleErrorString: the message if there is one, else the rule."""
        return self.message or self.source.strip()


@dataclass
class _Node:
    schema_type: str
    rules: list[_Rule] = field(default_factory=list)
    properties: dict[str, _Node] = field(default_factory=dict)
    items: _Node | None = None
    additional: _Node | None = None
    resource_root: bool = False
    list_map_keys: tuple[str, ...] = ()
    atomic_map: bool = False


# `self.name` / `oldSelf.name` not followed by a call: a field read. Any other use of the
# variables (`self == oldSelf`, `self.all(...)`, `self['x']`, `size(self)`) reads the whole value.
_VAR = re.compile(r"(?<![\w.])(self|oldSelf)\b")
_FIELD_READ = re.compile(r"(?<![\w.])(?:self|oldSelf)\.([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()")
_USES_OLD_SELF = re.compile(r"(?<![\w.])oldSelf\b")


def _fields_read(*expressions: str) -> frozenset[str] | None:
    fields: set[str] = set()
    for expression in expressions:
        reads = _FIELD_READ.findall(expression)
        if len(reads) != len(_VAR.findall(expression)):
            return None
        fields.update(reads)
    return frozenset(fields)


def compile_problem(rule: str) -> str:
    """Why ``rule`` does not compile (``""`` if it does, or if CEL is not installed)."""
    if _cel is None:
        return ""
    try:
        _cel.compile(rule)
    except ValueError as error:
        return f"compilation failed: {error}"
    return ""


def _compile_rule(raw: Mapping[str, Any]) -> _Rule:
    source = str(raw.get("rule") or "")
    message = str(raw.get("message") or "").strip()
    message_expression = str(raw.get("messageExpression") or "")
    program = message_program = None
    error = ""
    assert _cel is not None
    try:
        program = _cel.compile(source)
    except ValueError as exc:
        error = str(exc)
    if message_expression:
        try:
            message_program = _cel.compile(message_expression)
        except ValueError:
            message_program = None
    return _Rule(
        source=source,
        program=program,
        message=message,
        message_program=message_program,
        reason=str(raw.get("reason") or "FieldValueInvalid"),
        field_path=_normalize_field_path(str(raw.get("fieldPath") or "")),
        uses_old_self=bool(_USES_OLD_SELF.search(source)),
        optional_old_self=bool(raw.get("optionalOldSelf")),
        fields=_fields_read(source, message_expression),
        compile_error=error,
    )


def _normalize_field_path(path: str) -> str:
    """``.spec.foo['bar.baz']`` → ``spec.foo.bar.baz`` (a named child each, as the real server
    renders a ``fieldPath`` into a field.Path), or ``""``."""
    parts = re.findall(r"\.([^.\[\]]+)|\['((?:[^'\\]|\\.)*)'\]", path)
    return ".".join(name or quoted for name, quoted in parts)


def _compile_node(schema: Mapping[str, Any], resource_root: bool) -> _Node | None:
    node = _Node(
        schema_type=str(schema.get("type") or ""),
        resource_root=resource_root,
        list_map_keys=tuple(schema.get("x-kubernetes-list-map-keys") or ())
        if schema.get("x-kubernetes-list-type") == "map"
        else (),
        atomic_map=schema.get("x-kubernetes-map-type") == "atomic",
    )
    node.rules = [
        _compile_rule(raw)
        for raw in schema.get("x-kubernetes-validations") or []
        if isinstance(raw, Mapping)
    ]
    for name, child in (schema.get("properties") or {}).items():
        if isinstance(child, Mapping):
            compiled = _compile_node(child, bool(child.get("x-kubernetes-embedded-resource")))
            if compiled is not None:
                node.properties[name] = compiled
    items = schema.get("items")
    if isinstance(items, Mapping):
        node.items = _compile_node(items, bool(items.get("x-kubernetes-embedded-resource")))
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        node.additional = _compile_node(extra, bool(extra.get("x-kubernetes-embedded-resource")))
    if node.rules or node.properties or node.items or node.additional:
        return node
    return None


def compile_rules(openapi_v3_schema: Mapping[str, Any] | None) -> RuleTree | None:
    """The rules of a CRD version's schema, compiled; None when it has none (or without CEL)."""
    if _cel is None or not openapi_v3_schema:
        return None
    root = _compile_node(openapi_v3_schema, resource_root=True)
    return None if root is None else RuleTree(root)


class RuleTree:
    """The compiled ``x-kubernetes-validations`` of one schema, mirroring its shape."""

    def __init__(self, root: _Node) -> None:
        self.root = root

    def validate(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> _Outcome:
        """Evaluate every rule against ``obj`` (the whole custom resource, metadata included)
        and, on an update, ``old``; the causes, and the warnings of ratcheted failures."""
        outcome = _Outcome()
        if old is None:
            _Walk(outcome, ratcheting=False).node(self.root, obj, _MISSING, "", _never)
        else:
            _Walk(outcome, ratcheting=True).node(self.root, obj, old, "", _never)
        return outcome


@dataclass
class _Outcome:
    causes: list[Cause] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _never() -> bool:
    return False


class _Walk:
    def __init__(self, outcome: _Outcome, ratcheting: bool) -> None:
        self.outcome = outcome
        self.ratcheting = ratcheting

    def node(
        self, node: _Node, value: Any, old: Any, path: str, parent_unchanged: Callable[[], bool]
    ) -> None:
        if value is None:
            return
        if old is _MISSING:
            unchanged = parent_unchanged
        else:
            cache: list[bool] = []

            def unchanged() -> bool:
                if not cache:
                    cache.append(bool(value == old))
                return cache[0]

        if node.rules:
            self.expressions(node, value, old, path, unchanged)
        if isinstance(value, dict):
            correlate = isinstance(old, dict) and not node.atomic_map
            for key, child in node.properties.items():
                if key in value:
                    child_old = old.get(key, _MISSING) if correlate else _MISSING
                    self.node(child, value[key], child_old, _child(path, key), unchanged)
            if node.additional is not None:
                for key, item in value.items():
                    child_old = old.get(key, _MISSING) if correlate else _MISSING
                    self.node(node.additional, item, child_old, f"{path}[{key}]", unchanged)
        elif isinstance(value, list) and node.items is not None:
            olds = self.old_items(node, old)
            for index, item in enumerate(value):
                item_old = olds(item) if olds is not None else _MISSING
                self.node(node.items, item, item_old, f"{path}[{index}]", unchanged)

    @staticmethod
    def old_items(node: _Node, old: Any) -> Callable[[Any], Any] | None:
        """Only map-type lists correlate their items with the old ones, by the map keys."""
        if not node.list_map_keys or not isinstance(old, list):
            return None
        keys = node.list_map_keys
        by_key = {
            tuple(_key_part(item.get(k)) for k in keys): item
            for item in old
            if isinstance(item, dict)
        }

        def lookup(item: Any) -> Any:
            if not isinstance(item, dict):
                return _MISSING
            return by_key.get(tuple(_key_part(item.get(k)) for k in keys), _MISSING)

        return lookup

    def expressions(
        self, node: _Node, value: Any, old: Any, path: str, unchanged: Callable[[], bool]
    ) -> None:
        for rule in node.rules:
            if rule.compile_error:
                self.add(node, path, f"rule compile error: {rule.compile_error}")
                continue
            has_old = old is not _MISSING
            if rule.uses_old_self and not has_old and not rule.optional_old_self:
                continue
            activation = {"self": _self_value(node, value, rule.fields)}
            if rule.uses_old_self:
                old_self = _self_value(node, old, rule.fields) if has_old else None
                if rule.optional_old_self:
                    assert _cel is not None
                    activation["oldSelf"] = (
                        _cel.OptionalValue.of(old_self) if has_old else _cel.OptionalValue.none()
                    )
                else:
                    activation["oldSelf"] = old_self
            passed = _PASSED.key(rule, activation)
            if passed is not None and _PASSED.get(passed, rule, activation)[0]:
                continue
            try:
                result = rule.program.execute(activation)
            except Exception as error:  # CEL runtime errors arrive as Python exceptions
                detail = _runtime_error(error, rule)
                if detail:
                    self.add(node, path, detail)
                continue
            if result is True:
                if passed is not None:
                    _PASSED.put(passed, rule, True)
                continue
            detail = self.message(rule, activation) or (
                rule.message or f"failed rule: {rule.source.strip()}"
            )
            target = _child(path, rule.field_path) if rule.field_path else path
            cause = _cause(target, node.schema_type, detail, rule.reason)
            if self.ratcheting and not rule.uses_old_self and unchanged():
                self.outcome.warnings.append(f"{cause.field}: {cause.message}")
            else:
                self.outcome.causes.append(cause)

    @staticmethod
    def message(rule: _Rule, activation: dict[str, Any]) -> str:
        if rule.message_program is None:
            return ""
        try:
            text = rule.message_program.execute(activation)
        except Exception:
            return ""
        if not isinstance(text, str):
            return ""
        text = text.strip()
        if not text or "\n" in text or len(text.encode()) > _MAX_MESSAGE_BYTES:
            return ""
        return text

    def add(self, node: _Node, path: str, detail: str) -> None:
        """An error that is never ratcheted (a compile or run-time error)."""
        self.outcome.causes.append(_cause(path, node.schema_type, detail, "FieldValueInvalid"))


def _key_part(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# A rule is a pure function of its activation (``self``, ``oldSelf``), and most writes of a
# custom resource hand most rules the same values as the write before (a status write leaves
# ``spec`` as it was), while converting ``self`` into CEL values is most of an evaluation. So an
# activation that passed is remembered by the rule and its JSON, and passes again without being
# evaluated. A hit also compares the values themselves (JSON alone equates a YAML date with its
# string, NaN with null), and only passes are remembered: a failure's message is built anew.
_PASSED = JsonMemo()
"""Activations that passed, by rule."""


def _self_value(node: _Node, value: Any, fields: frozenset[str] | None) -> Any:
    if node.resource_root and isinstance(value, dict):
        # model.WithTypeAndObjectMeta: of metadata, CEL sees name and generateName only.
        meta = value.get("metadata")
        visible = {
            k: meta[k] for k in ("name", "generateName") if isinstance(meta, dict) and k in meta
        }
        value = {**value, "metadata": visible}
    if fields is not None and isinstance(value, dict):
        return {k: value[k] for k in fields if k in value}
    return value


def _runtime_error(error: Exception, rule: _Rule) -> str:
    """The detail the real server gives for a rule that failed to evaluate; ``""`` to skip."""
    text = str(error)
    if isinstance(error, KeyError):
        key = error.args[0] if error.args else text
        return f"no such key: {key} evaluating rule: {rule.error_string}"
    if isinstance(error, TypeError):
        return (
            "'no such overload': call arguments did not match a supported operator, function or "
            f"macro signature for rule: {rule.error_string}"
        )
    if isinstance(error, OverflowError):
        return f"integer overflow evaluating rule: {rule.error_string}"
    if isinstance(error, ZeroDivisionError):
        return f"division by zero evaluating rule: {rule.error_string}"
    if text.startswith("Undefined variable or function"):
        return ""  # a Kubernetes library function the package lacks: not evaluated
    return f"{text} evaluating rule: {rule.error_string}"


def _cause(path: str, schema_type: str, detail: str, reason: str) -> Cause:
    """fieldErrorForReason: the field.Error a failed rule becomes."""
    where = path or _NIL_PATH
    value = json.dumps(schema_type)
    if reason == "FieldValueForbidden":
        return Cause(field=where, reason=reason, message=f"Forbidden: {detail}")
    if reason == "FieldValueRequired":
        return Cause(field=where, reason=reason, message=f"Required value: {detail}")
    if reason == "FieldValueDuplicate":
        return Cause(field=where, reason=reason, message=f"Duplicate value: {value}")
    return Cause(
        field=where, reason="FieldValueInvalid", message=f"Invalid value: {value}: {detail}"
    )
