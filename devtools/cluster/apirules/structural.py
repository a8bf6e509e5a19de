"""What a Kubernetes API server does to a custom resource with a structural schema: defaulting,
pruning and validation, as pure functions over the plain JSON objects of a request.

The development cluster's custom-resource strategy (:mod:`.strategy`, through
:func:`~.strategy.load_schema`) uses this to answer a create or update exactly as kube-apiserver
would: the same fields dropped, the same defaults filled in, the same 422 causes with the same
wording, because controllers and SDKs branch on those causes and tests compare them. The rules
are those of ``k8s.io/apiextensions-apiserver`` (structuraldefaulting, structuralpruning,
structurallisttype) and ``k8s.io/kube-openapi`` (the validator), with messages built by
``k8s.io/apimachinery`` ``field.Error``:

* **Defaulting** (:meth:`StructuralSchema.apply_defaults`) walks the incoming object: a missing
  property with a ``default`` gets it, also inside list items and inside nested objects that
  exist (a default never creates its parent, but a defaulted object is itself defaulted). A
  ``null`` for a property that is not ``nullable`` is dropped first, or replaced by the default
  if there is one; a nullable ``null`` is kept and never defaulted.
* **Pruning** (:meth:`StructuralSchema.prune`) drops every field the schema does not name,
  except below ``x-kubernetes-preserve-unknown-fields`` (where named fields are still pruned
  inside) and except ``apiVersion``, ``kind`` and ``metadata`` at the root, which the server
  handles itself. :meth:`StructuralSchema.unknown_fields` lists what would go, for the
  ``unknown field "spec.foo"`` warnings and for ``fieldValidation=Strict``.
* **Validation** (:meth:`StructuralSchema.validate`) returns one :class:`Cause` per violation, in
  the validator's order per node (type, string, format, number, array, enum, object), then the
  list-type (``set``/``map``) duplicate checks. A type mismatch stops the checks below that node.
  ``x-kubernetes-validations`` (CEL) rules are evaluated by :mod:`.celrules`, after these checks
  (the custom-resource strategy runs both); :func:`schema_problems` only checks that they
  compile.

A :class:`Cause` is what a ``Status``' ``details.causes[]`` entry carries: ``message`` is the
body without the field (``Invalid value: -1: spec.replicas in body should be greater than or
equal to 0``); :attr:`Cause.error` is the full ``field: message`` line, and
:func:`invalid_message` builds the ``Status.message`` of the whole 422.

All functions return new objects; the input is never modified. The JSON type names come from
:func:`api.meta.json_type`, which the CRD generator uses too, so the two cannot disagree.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any, Final

import msgspec

from api.meta import json_type
from devtools.cluster.storage.jsonmemo import JsonMemo
from devtools.cluster.storage.jsontree import copy_tree

__all__ = [
    "DUPLICATE",
    "INVALID",
    "NOT_SUPPORTED",
    "REQUIRED",
    "TOO_LONG",
    "TOO_MANY",
    "TYPE_INVALID",
    "Admission",
    "Cause",
    "StructuralSchema",
    "invalid_message",
    "is_date_time",
    "schema_problems",
]

Schema = Mapping[str, Any]

REQUIRED: Final = "FieldValueRequired"
INVALID: Final = "FieldValueInvalid"
TYPE_INVALID: Final = "FieldValueTypeInvalid"
NOT_SUPPORTED: Final = "FieldValueNotSupported"
DUPLICATE: Final = "FieldValueDuplicate"
TOO_LONG: Final = "FieldValueTooLong"
TOO_MANY: Final = "FieldValueTooMany"

# How field.Error spells each type in a message.
_TYPE_WORDS: Final = {
    REQUIRED: "Required value",
    INVALID: "Invalid value",
    TYPE_INVALID: "Invalid value",
    NOT_SUPPORTED: "Unsupported value",
    DUPLICATE: "Duplicate value",
    TOO_LONG: "Too long",
    TOO_MANY: "Too many",
}

# Marks a cause whose message carries no value (``Required value``, ``Too long: …``).
_NO_VALUE: Final = object()

# Root fields the API server owns: never pruned, never validated against the schema.
_ROOT_META_FIELDS: Final = frozenset({"apiVersion", "kind", "metadata"})


class Cause(msgspec.Struct, frozen=True, kw_only=True):
    """One violation, as a ``StatusCause``: ``{reason, message, field}``."""

    field: str
    reason: str
    message: str

    @property
    def error(self) -> str:
        """The full line, as it appears in ``Status.message``: ``<field>: <message>``."""
        return f"{self.field}: {self.message}"


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :meth:`StructuralSchema.admit`: the object as it would be stored, why it
    would be refused (empty if it would not), and the fields that pruning dropped."""

    object: dict[str, Any]
    causes: list[Cause]
    unknown_fields: list[str]


def invalid_message(kind: str, group: str, name: str, causes: Sequence[Cause]) -> str:
    """``Status.message`` of a 422 Invalid: ``Sandbox.agents.x-k8s.io "s1" is invalid: …``.

    Like apimachinery's error aggregate: one cause is printed alone, several in brackets, and a
    line repeated word for word is printed once.
    """
    qualified = f"{kind}.{group}" if group else kind
    lines = list(dict.fromkeys(cause.error for cause in causes))
    if not lines:
        return f"{qualified} {_go_quote(name)} is invalid"
    joined = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    return f"{qualified} {_go_quote(name)} is invalid: {joined}"


class StructuralSchema:
    """The ``openAPIV3Schema`` of one CRD version, and what the API server does with it."""

    def __init__(self, openapi_v3_schema: Schema) -> None:
        self.schema: Schema = openapi_v3_schema

    @classmethod
    def from_crd(cls, crd: Mapping[str, Any], version: str | None = None) -> StructuralSchema:
        """The schema of ``version`` (the storage version when None) of a CRD manifest."""
        versions = crd["spec"]["versions"]
        for entry in versions:
            if entry["name"] == version or (version is None and entry.get("storage")):
                return cls(entry["schema"]["openAPIV3Schema"])
        raise KeyError(f"CRD {crd['metadata']['name']} has no version {version!r}")

    # --- the pipeline -----------------------------------------------------------------------

    def admit(self, obj: Mapping[str, Any]) -> Admission:
        """Default, then prune, then validate, the order of a create or update request."""
        working = copy.deepcopy(dict(obj))
        _default(working, self.schema)
        dropped: list[str] = []
        _prune(working, self.schema, "", dropped, root=True)
        return Admission(
            object=working, causes=self.validate(working), unknown_fields=sorted(dropped)
        )

    def apply_defaults(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        out = copy_tree(dict(obj))
        _default(out, self.schema)
        return out

    def prune(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        out = copy_tree(dict(obj))
        _prune(out, self.schema, "", [], root=True)
        return out

    def unknown_fields(self, obj: Mapping[str, Any]) -> list[str]:
        """The paths :meth:`prune` drops, e.g. ``spec.foo`` or ``spec.env[0].bar``: the API
        server warns ``unknown field "spec.foo"`` for each, or refuses the request with
        ``fieldValidation=Strict``."""
        dropped: list[str] = []
        _prune(copy_tree(dict(obj)), self.schema, "", dropped, root=True)
        return sorted(dropped)

    def validate(self, obj: Mapping[str, Any]) -> list[Cause]:
        validator = _Validator()
        validator.node(obj, self.schema, "", root=True)
        return validator.causes + validator.list_type_causes

    def validate_value(self, value: Any, path: str = "") -> list[Cause]:
        """Validate a value that is not a whole object (a default, a fragment at ``path``)."""
        validator = _Validator()
        validator.node(value, self.schema, path)
        return validator.causes + validator.list_type_causes


# --- defaulting ----------------------------------------------------------------------------------


def _default(value: Any, schema: Schema | None) -> None:
    if schema is None:
        return
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        for key, prop in properties.items():
            if key not in value:
                if "default" in prop:
                    value[key] = copy.deepcopy(prop["default"])
            elif _is_non_nullable_null(value[key], prop):
                if "default" in prop:
                    value[key] = copy.deepcopy(prop["default"])
                else:
                    del value[key]
        extra = _additional(schema)
        for key in list(value):
            if key in properties:
                _default(value[key], properties[key])
            elif extra is not None:
                if _is_non_nullable_null(value[key], extra):
                    if "default" in extra:
                        value[key] = copy.deepcopy(extra["default"])
                    else:
                        del value[key]
                        continue
                _default(value[key], extra)
    elif isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return
        for index, item in enumerate(value):
            if _is_non_nullable_null(item, items) and "default" in items:
                value[index] = copy.deepcopy(items["default"])
            _default(value[index], items)


def _is_non_nullable_null(value: Any, schema: Schema) -> bool:
    return value is None and not schema.get("nullable", False)


def _additional(schema: Schema) -> Schema | None:
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


# --- pruning -------------------------------------------------------------------------------------


def _prune(value: Any, schema: Schema | None, path: str, dropped: list[str], root: bool) -> None:
    if schema is not None and schema.get("x-kubernetes-preserve-unknown-fields"):
        _prune_known_only(value, schema, path, dropped)
        return
    if isinstance(value, dict):
        properties: Mapping[str, Any] = {} if schema is None else schema.get("properties", {})
        extra = None if schema is None else _additional(schema)
        embedded = root or bool(schema and schema.get("x-kubernetes-embedded-resource"))
        for key in sorted(value):
            if embedded and _is_server_owned(key, value[key]):
                continue
            if key in properties:
                _prune(value[key], properties[key], _child(path, key), dropped, root=False)
            elif extra is not None:
                _prune(value[key], extra, _child(path, key), dropped, root=False)
            else:
                dropped.append(_child(path, key))
                del value[key]
    elif isinstance(value, list):
        items = None if schema is None else schema.get("items")
        for index, item in enumerate(value):
            _prune(item, items, f"{path}[{index}]", dropped, root=False)


def _prune_known_only(value: Any, schema: Schema, path: str, dropped: list[str]) -> None:
    """Below x-kubernetes-preserve-unknown-fields: unknown fields stay, named ones are pruned."""
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = _additional(schema)
        for key in sorted(value):
            if key in properties:
                _prune(value[key], properties[key], _child(path, key), dropped, root=False)
            elif extra is not None:
                _prune(value[key], extra, _child(path, key), dropped, root=False)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _prune(item, items, f"{path}[{index}]", dropped, root=False)


def _is_server_owned(key: str, value: Any) -> bool:
    if key in ("apiVersion", "kind"):
        return isinstance(value, str)
    return key == "metadata" and isinstance(value, dict)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --- validation ----------------------------------------------------------------------------------


class _Validator:
    """One pass over an object; collects causes in the order kube-openapi reports them."""

    def __init__(self) -> None:
        self.causes: list[Cause] = []
        self.list_type_causes: list[Cause] = []

    def add(self, path: str, reason: str, value: Any, detail: str = "") -> None:
        self.causes.append(_cause(path, reason, value, detail))

    def node(self, value: Any, schema: Schema, path: str, root: bool = False) -> None:
        if value is None and schema.get("nullable", False):
            return
        if not self.type_matches(value, schema, path):
            self.enum(value, schema, path)
            return
        if isinstance(value, str):
            self.string(value, schema, path)
        if _is_number(value):
            self.number(value, schema, path)
        if isinstance(value, list):
            self.array(value, schema, path)
        self.enum(value, schema, path)
        if isinstance(value, dict):
            self.object(value, schema, path, root)

    def type_matches(self, value: Any, schema: Schema, path: str) -> bool:
        """kube-openapi's type validator, quirks included: with a (supported) ``format``, a
        string or an array passes any non-numeric type, and a wrong other kind is reported
        against the format (``must be of type date-time: "int64"``)."""
        if schema.get("x-kubernetes-int-or-string"):
            allowed = ["integer", "string"]
        elif "type" in schema:
            allowed = [schema["type"]]
        else:
            allowed = []
        declared_format = _supported_format(schema)
        if not allowed and not declared_format:
            return True  # x-kubernetes-preserve-unknown-fields without a type: anything goes
        actual, actual_format = _go_kind(value)
        if value is None:
            if allowed:
                self._type_error(path, ",".join(allowed), "null")
                return False
            return True
        float_int = actual == "number" and float(value).is_integer() and "integer" in allowed
        int_float = actual == "integer" and "number" in allowed
        string_or_array = actual in ("string", "array")
        if (
            declared_format
            and not string_or_array
            and not (
                actual in allowed or actual_format == declared_format or float_int or int_float
            )
        ):
            self._type_error(path, str(schema["format"]), actual_format)
            return False
        numeric = "number" in allowed or "integer" in allowed
        if declared_format and string_or_array and not numeric:
            return True
        if actual in allowed or float_int or int_float:
            return True
        self._type_error(path, ",".join(allowed), actual)
        return False

    def _type_error(self, path: str, expected: str, actual: str) -> None:
        self.add(
            path,
            TYPE_INVALID,
            actual,
            f"{path} in body must be of type {expected}: {_go_quote(actual)}",
        )

    def string(self, value: str, schema: Schema, path: str) -> None:
        length = len(value)
        if "maxLength" in schema and length > schema["maxLength"]:
            limit = int(schema["maxLength"])
            unit = "byte" if limit == 1 else "bytes"
            self.add(path, TOO_LONG, _NO_VALUE, f"may not be more than {limit} {unit}")
        if "minLength" in schema and length < schema["minLength"]:
            self.add(
                path,
                INVALID,
                value,
                f"{path} in body should be at least {int(schema['minLength'])} chars long",
            )
        if "pattern" in schema and not _compiled(schema["pattern"]).search(value):
            self.add(path, INVALID, value, f"{path} in body should match '{schema['pattern']}'")
        checker = _FORMATS.get(_supported_format(schema))
        if checker is not None and not checker(value):
            self.add(
                path,
                TYPE_INVALID,
                value,
                f"{path} in body must be of type {schema['format']}: {_go_quote(value)}",
            )

    def number(self, value: float, schema: Schema, path: str) -> None:
        if schema.get("multipleOf"):
            quotient = Decimal(str(value)) / Decimal(str(schema["multipleOf"]))
            if quotient != quotient.to_integral_value():
                self.add(
                    path,
                    INVALID,
                    value,
                    f"{path} in body should be a multiple of {_go_float(schema['multipleOf'])}",
                )
        if "maximum" in schema:
            limit = schema["maximum"]
            if schema.get("exclusiveMaximum") and value >= limit:
                self.add(
                    path, INVALID, value, f"{path} in body should be less than {_go_float(limit)}"
                )
            elif value > limit:
                self.add(
                    path,
                    INVALID,
                    value,
                    f"{path} in body should be less than or equal to {_go_float(limit)}",
                )
        if "minimum" in schema:
            limit = schema["minimum"]
            if schema.get("exclusiveMinimum") and value <= limit:
                self.add(
                    path,
                    INVALID,
                    value,
                    f"{path} in body should be greater than {_go_float(limit)}",
                )
            elif value < limit:
                self.add(
                    path,
                    INVALID,
                    value,
                    f"{path} in body should be greater than or equal to {_go_float(limit)}",
                )

    def array(self, value: list[Any], schema: Schema, path: str) -> None:
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                self.node(item, items, f"{path}[{index}]")
        size = len(value)
        if "minItems" in schema and size < schema["minItems"]:
            self.add(
                path,
                INVALID,
                size,
                f"{path} in body should have at least {int(schema['minItems'])} items",
            )
        if "maxItems" in schema and size > schema["maxItems"]:
            limit = int(schema["maxItems"])
            self.add(path, TOO_MANY, size, f"must have at most {limit} item{_plural(limit)}")
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            self.list_type_causes.extend(_duplicates_in_set(value, path))
        elif list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys", [])
            self.list_type_causes.extend(_duplicates_in_map(value, keys, path))

    def enum(self, value: Any, schema: Schema, path: str) -> None:
        allowed = schema.get("enum")
        if allowed is None or any(_enum_equal(value, option) for option in allowed):
            return
        supported = ", ".join(
            _go_quote(option if isinstance(option, str) else _go_json(option)) for option in allowed
        )
        self.add(path, NOT_SUPPORTED, value, f"supported values: {supported}" if allowed else "")

    def object(self, value: dict[str, Any], schema: Schema, path: str, root: bool) -> None:
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            limit = int(schema["maxProperties"])
            self.add(path, TOO_MANY, len(value), f"must have at most {limit} item{_plural(limit)}")
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            self.add(
                path,
                INVALID,
                len(value),
                f"{path} in body should have at least {int(schema['minProperties'])} properties",
            )
        for key in schema.get("required", []):
            if key not in value:
                self.add(_child(path, key), REQUIRED, _NO_VALUE)
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = _additional(schema)
        embedded = root or bool(schema.get("x-kubernetes-embedded-resource"))
        for key in sorted(value):
            if embedded and key in _ROOT_META_FIELDS:
                continue
            if root and key in properties:
                self.remembered(value[key], properties[key], _child(path, key))
            elif key in properties:
                self.node(value[key], properties[key], _child(path, key))
            elif extra is not None:
                self.node(value[key], extra, _child(path, key))

    def remembered(self, value: Any, schema: Schema, path: str) -> None:
        """:meth:`node` for a top-level field (``spec``, ``status``), skipped when the same
        value already passed under the same schema node (:class:`~.jsonmemo.JsonMemo`: a
        status write leaves ``spec`` as it was). Validation depends on nothing else: the path
        only names the causes, and a value that passed has none."""
        key = _PASSED.key(schema, value)
        if key is not None and _PASSED.get(key, schema, value)[0]:
            return
        causes, list_type_causes = len(self.causes), len(self.list_type_causes)
        self.node(value, schema, path)
        passed = len(self.causes) == causes and len(self.list_type_causes) == list_type_causes
        if key is not None and passed:
            _PASSED.put(key, schema, True)


_PASSED = JsonMemo()
"""Top-level values that validated without a cause, by schema node."""


def _duplicates_in_set(items: list[Any], path: str) -> Iterable[Cause]:
    seen: dict[Any, int] = {}
    for index, item in enumerate(items):
        key = _identity(item)
        if seen.get(key) == 1:
            yield _cause(f"{path}[{index}]", DUPLICATE, item)
        seen[key] = seen.get(key, 0) + 1


def _duplicates_in_map(items: list[Any], keys: Sequence[str], path: str) -> Iterable[Cause]:
    malformed = [
        _cause(f"{path}[{index}]", INVALID, item, "must be an object for an array of list-type map")
        for index, item in enumerate(items)
        if item is not None and not isinstance(item, dict)
    ]
    if malformed:
        yield from malformed
        return
    absent = object()
    seen: dict[Any, int] = {}
    for index, item in enumerate(items):
        fields = {} if item is None else item
        identity = tuple(_identity(fields.get(key, absent)) for key in keys)
        if seen.get(identity) == 1:
            shown = {key: fields[key] for key in keys if key in fields}
            yield _cause(f"{path}[{index}]", DUPLICATE, shown)
        seen[identity] = seen.get(identity, 0) + 1


def _identity(value: Any) -> Any:
    """A hashable key under which two JSON values collide exactly when Go would say equal."""
    if isinstance(value, (dict, list)):
        return ("json", _compact_json(value))
    return (json_type(value), value)


def _cause(path: str, reason: str, value: Any, detail: str = "") -> Cause:
    words = _TYPE_WORDS[reason]
    if reason in (REQUIRED, TOO_LONG) or value is _NO_VALUE:
        body = words
    else:
        body = f"{words}: {_go_value(value)}"
    if detail:
        body = f"{body}: {detail}"
    return Cause(field=path, reason=reason, message=body)


# --- is the schema structural? -------------------------------------------------------------------

_SCALAR_TYPES: Final = frozenset({"string", "integer", "number", "boolean"})
_TYPES: Final = _SCALAR_TYPES | {"object", "array"}
_NUMBER: Final = (int, float)
_KEYWORD_VALUE_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "description": (str,),
    "type": (str,),
    "format": (str,),
    "title": (str,),
    "pattern": (str,),
    "maximum": _NUMBER,
    "minimum": _NUMBER,
    "multipleOf": _NUMBER,
    "exclusiveMaximum": (bool,),
    "exclusiveMinimum": (bool,),
    "nullable": (bool,),
    "maxLength": (int,),
    "minLength": (int,),
    "maxItems": (int,),
    "minItems": (int,),
    "maxProperties": (int,),
    "minProperties": (int,),
    "enum": (list,),
    "required": (list,),
    "properties": (dict,),
    "items": (dict,),
    "additionalProperties": (dict, bool),
    "default": (object,),
    "example": (object,),
    "externalDocs": (dict,),
    "x-kubernetes-preserve-unknown-fields": (bool,),
    "x-kubernetes-embedded-resource": (bool,),
    "x-kubernetes-int-or-string": (bool,),
    "x-kubernetes-list-type": (str,),
    "x-kubernetes-list-map-keys": (list,),
    "x-kubernetes-map-type": (str,),
    "x-kubernetes-validations": (list,),
}
_FORBIDDEN_KEYWORDS: Final = {
    "$ref": "$ref is not supported",
    "$schema": "$schema is not supported",
    "id": "id is not supported",
    "definitions": "definitions is not supported",
    "dependencies": "dependencies is not supported",
    "patternProperties": "patternProperties is not supported",
    "additionalItems": "additionalItems is not supported",
}
_INT_OR_STRING_MEMBERS: Final = [{"type": "integer"}, {"type": "string"}]


def schema_problems(openapi_v3_schema: Schema) -> list[str]:
    """Why a CRD's ``openAPIV3Schema`` would be refused: the structural-schema rules of
    apiextensions.k8s.io/v1, plus value validations (``anyOf``/``allOf``/``oneOf``/``not`` other
    than the int-or-string form) that :class:`StructuralSchema` does not evaluate, and
    ``x-kubernetes-validations`` rules that do not compile (when CEL is installed). Each problem
    reads like the API server's ``<path>: <reason>: <detail>``; an empty list means acceptable.
    """
    problems: list[str] = []
    _check_node(openapi_v3_schema, "openAPIV3Schema", problems, root=True)
    return problems


def _check_node(node: Any, path: str, problems: list[str], root: bool = False) -> None:
    if not isinstance(node, Mapping):
        problems.append(f"{path}: Invalid value: {_go_value(node)}: must be a schema object")
        return
    for key, value in node.items():
        if key in _FORBIDDEN_KEYWORDS:
            problems.append(f"{path}.{key}: Forbidden: {_FORBIDDEN_KEYWORDS[key]}")
        elif key in ("anyOf", "allOf", "oneOf", "not"):
            if not (key == "anyOf" and node.get("x-kubernetes-int-or-string")):
                problems.append(
                    f"{path}.{key}: Forbidden: value validation with {key} is not implemented"
                )
        elif key not in _KEYWORD_VALUE_TYPES:
            problems.append(f"{path}.{key}: Forbidden: unknown field")
        elif not _keyword_value_ok(value, _KEYWORD_VALUE_TYPES[key]):
            problems.append(f"{path}.{key}: Invalid value: {_go_value(value)}: wrong type")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    kind = node.get("type")
    if preserve is False:
        problems.append(
            f"{path}.x-kubernetes-preserve-unknown-fields: Invalid value: false: "
            "must be true or undefined"
        )
    if int_or_string:
        if kind is not None:
            problems.append(
                f"{path}.type: Invalid value: {_go_value(kind)}: "
                "must be empty if x-kubernetes-int-or-string is true"
            )
        if "anyOf" in node and node["anyOf"] != _INT_OR_STRING_MEMBERS:
            problems.append(
                f"{path}.anyOf: Invalid value: must be [{{type: integer}}, {{type: string}}] "
                "if x-kubernetes-int-or-string is true"
            )
    elif kind is None:
        if not preserve:
            problems.append(
                f"{path}.type: Required value: must not be empty for specified object fields"
            )
    elif kind not in _TYPES:
        problems.append(
            f"{path}.type: Unsupported value: {_go_value(kind)}: supported values: "
            + ", ".join(_go_quote(name) for name in sorted(_TYPES))
        )
    if root:
        _check_root(node, path, problems)
    if node.get("uniqueItems") is True:
        problems.append(
            f"{path}.uniqueItems: Forbidden: uniqueItems cannot be set to true since the "
            "runtime complexity becomes quadratic"
        )
    properties = node.get("properties")
    extra = node.get("additionalProperties")
    if extra is False:
        problems.append(f"{path}.additionalProperties: Forbidden: must not be false")
    if properties and isinstance(extra, Mapping):
        problems.append(
            f"{path}.additionalProperties: Forbidden: additionalProperties and properties are "
            "mutual exclusive"
        )
    if isinstance(properties, Mapping):
        for name, child in properties.items():
            _check_node(child, f"{path}.properties[{name}]", problems)
    if isinstance(extra, Mapping):
        _check_node(extra, f"{path}.additionalProperties", problems)
    if "items" in node:
        _check_node(node["items"], f"{path}.items", problems)
    elif kind == "array":
        problems.append(f"{path}.items: Required value: must be specified")
    if isinstance(node.get("pattern"), str):
        try:
            _compiled(node["pattern"])
        except re.error as error:
            problems.append(f"{path}.pattern: Invalid value: {_go_quote(node['pattern'])}: {error}")
    _check_enum(node, path, problems)
    _check_list_type(node, path, problems)
    _check_default(node, path, problems)
    for index, rule in enumerate(node.get("x-kubernetes-validations") or []):
        if not isinstance(rule, Mapping) or not isinstance(rule.get("rule"), str):
            problems.append(
                f"{path}.x-kubernetes-validations[{index}].rule: Required value: "
                "rule is not specified"
            )
            continue
        # Imported here: celrules builds on this module's Cause.
        from devtools.cluster.apirules.celrules import compile_problem

        problem = compile_problem(rule["rule"])
        if problem:
            problems.append(
                f"{path}.x-kubernetes-validations[{index}].rule: Invalid value: "
                f"{_go_quote(rule['rule'])}: {problem}"
            )


def _keyword_value_ok(value: Any, allowed: tuple[type, ...]) -> bool:
    if object in allowed:
        return True
    # JSON has no bool-is-an-int: ``maxLength: true`` is the wrong type.
    if isinstance(value, bool):
        return bool in allowed
    return isinstance(value, allowed)


def _check_root(node: Mapping[str, Any], path: str, problems: list[str]) -> None:
    if node.get("type") != "object":
        problems.append(
            f"{path}.type: Invalid value: {_go_value(node.get('type'))}: must be object"
        )
    if "default" in node or node.get("nullable"):
        problems.append(f"{path}: Forbidden: the root must have neither default nor nullable")
    metadata = (node.get("properties") or {}).get("metadata")
    if isinstance(metadata, Mapping):
        allowed = {"type", "description"}
        named = set((metadata.get("properties") or {}).keys())
        if set(metadata) - allowed - {"properties"} or named - {"name", "generateName"}:
            problems.append(
                f"{path}.properties[metadata]: Forbidden: must not specify anything other than "
                "name and generateName, but metadata is implicitly specified"
            )


def _check_enum(node: Mapping[str, Any], path: str, problems: list[str]) -> None:
    kind = node.get("type")
    for index, option in enumerate(node.get("enum") or []):
        actual = json_type(option)
        if kind is not None and actual != kind and not (actual == "integer" and kind == "number"):
            problems.append(
                f"{path}.enum[{index}]: Invalid value: {_go_value(option)}: must be of type {kind}"
            )


def _check_list_type(node: Mapping[str, Any], path: str, problems: list[str]) -> None:
    list_type = node.get("x-kubernetes-list-type")
    keys = node.get("x-kubernetes-list-map-keys")
    raw_items = node.get("items")
    items: Mapping[str, Any] = raw_items if isinstance(raw_items, Mapping) else {}
    if list_type is not None and node.get("type") != "array":
        problems.append(
            f"{path}.x-kubernetes-list-type: Invalid value: must only be used on arrays"
        )
    if list_type not in (None, "atomic", "set", "map"):
        problems.append(
            f"{path}.x-kubernetes-list-type: Unsupported value: {_go_value(list_type)}: "
            'supported values: "atomic", "set", "map"'
        )
    if keys is not None and list_type != "map":
        problems.append(
            f"{path}.x-kubernetes-list-map-keys: Forbidden: must not be set if "
            "x-kubernetes-list-type is not map"
        )
    if list_type == "set" and items.get("type") not in _SCALAR_TYPES | {None}:
        problems.append(
            f"{path}.items.type: Invalid value: {_go_value(items.get('type'))}: must be a scalar "
            "type if x-kubernetes-list-type is set"
        )
    if list_type == "map":
        if items.get("type") != "object":
            problems.append(
                f"{path}.items.type: Invalid value: {_go_value(items.get('type'))}: must be object "
                "if x-kubernetes-list-type is map"
            )
        if not keys:
            problems.append(
                f"{path}.x-kubernetes-list-map-keys: Required value: must not be empty if "
                "x-kubernetes-list-type is map"
            )
        properties = items.get("properties") or {}
        required = items.get("required") or []
        for key in keys or []:
            field = properties.get(key)
            if field is None:
                problems.append(
                    f"{path}.x-kubernetes-list-map-keys: Invalid value: {_go_quote(key)}: "
                    "entries must all be names of item properties"
                )
            elif key not in required and "default" not in field:
                problems.append(
                    f"{path}.items.properties[{key}]: Required value: this property is in "
                    "x-kubernetes-list-map-keys, so it must have a default or be a required "
                    "property"
                )


def _check_default(node: Mapping[str, Any], path: str, problems: list[str]) -> None:
    if "default" not in node:
        return
    default = node["default"]
    schema = {key: value for key, value in node.items() if key != "default"}
    for cause in StructuralSchema(schema).validate_value(default):
        problems.append(f"{path}.default: Invalid value: {cause.error}")
    pruned: list[str] = []
    _prune(copy.deepcopy(default), schema, "", pruned, root=False)
    if pruned:
        problems.append(
            f"{path}.default: Invalid value: must not have unknown fields: {', '.join(pruned)}"
        )


# --- formats -------------------------------------------------------------------------------------

_TIME_OF_DAY = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")


def is_date(text: str) -> bool:
    """Go ``time.Parse("2006-01-02", text)``: a real calendar date, zero-padded."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def is_date_time(text: str) -> bool:
    """kube-openapi's ``strfmt.IsDateTime``: RFC 3339, ``T`` and ``Z`` in either case."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2 or not is_date(parts[0]):
        return False
    match = _TIME_OF_DAY.fullmatch(parts[1])
    if match is None:
        return False
    return match[1] <= "23" and match[2] <= "59" and match[3] <= "59"


_FORMATS: Final = {"datetime": is_date_time, "date": is_date}
"""The formats whose values are checked here; the other supported ones are accepted unchecked."""

# apiextensions' StripUnsupportedFormatsPostProcess: any other format (int32, int64, …) is
# ignored by validation altogether. Names are compared without dashes.
_SUPPORTED_FORMATS: Final = frozenset(
    {
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
    }
)


def _supported_format(schema: Schema) -> str:
    """The schema's format, normalised, if validation honours it; else ``""``."""
    normalized = str(schema.get("format", "")).replace("-", "")
    return normalized if normalized in _SUPPORTED_FORMATS else ""


# --- Go's ways of printing values ----------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _enum_equal(value: Any, option: Any) -> bool:
    """Go converts the value to the enum entry's type: numbers compare by value."""
    if _is_number(value) and _is_number(option):
        return bool(value == option)
    return bool(_identity(value) == _identity(option))


def _go_kind(value: Any) -> tuple[str, str]:
    """The JSON type and the Go format kube-openapi infers for a decoded JSON value."""
    kind = json_type(value)
    if kind == "integer":
        return kind, "int64"
    if kind == "number":
        return kind, "float64"
    return kind, ""


def _go_json(value: Any) -> str:
    """Go's ``json.Marshal`` of a decoded JSON value (integral floats print without ``.0``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return _compact_json(value)


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _plural(count: int) -> str:
    return "" if count == 1 else "s"


def _go_value(value: Any) -> str:
    """A field.Error's bad value: ``%q`` for strings, ``%v`` for numbers, ``%#v`` otherwise."""
    if value is None:
        return _go_quote("null")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_quote(value)
    return _go_sharp_v(value)


def _go_sharp_v(value: Any) -> str:
    """``%#v`` of the value an unstructured JSON decode gives (``map[string]interface {}`` …)."""
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, dict):
        entries = ", ".join(f"{_go_quote(k)}:{_go_sharp_v(value[k])}" for k in sorted(value))
        return "map[string]interface {}{" + entries + "}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_sharp_v(item) for item in value) + "}"
    return _go_value(value)


def _go_float(value: float) -> str:
    """Go's ``%v`` of a float64 (``strconv`` ``'g'``, shortest): exponent form below 1e-4 and
    from 1e6, so ``1e+06`` but ``123456``."""
    number = float(value)
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    sign, digits, exponent = Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(str(digit) for digit in digits)
    point = len(mantissa) + exponent  # the value is 0.<mantissa> x 10**point
    decimal_exponent = point - 1
    prefix = "-" if sign else ""
    if decimal_exponent < -4 or decimal_exponent >= 6:
        fraction = f".{mantissa[1:]}" if len(mantissa) > 1 else ""
        return (
            f"{prefix}{mantissa[0]}{fraction}e{'-' if decimal_exponent < 0 else '+'}"
            f"{abs(decimal_exponent):02d}"
        )
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{mantissa}"
    if point >= len(mantissa):
        return f"{prefix}{mantissa}{'0' * (point - len(mantissa))}"
    return f"{prefix}{mantissa[:point]}.{mantissa[point:]}"


_GO_ESCAPES: Final = {
    "\a": r"\a",
    "\b": r"\b",
    "\f": r"\f",
    "\n": r"\n",
    "\r": r"\r",
    "\t": r"\t",
    "\v": r"\v",
    "\\": r"\\",
    '"': r"\"",
}


def _go_quote(text: str) -> str:
    """Go's ``strconv.Quote``: printable characters as they are, the rest escaped."""
    out = ['"']
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif _go_printable(char):
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def _go_printable(char: str) -> bool:
    if char == " ":
        return True
    return unicodedata.category(char)[0] not in ("C", "Z")


# --- patterns ------------------------------------------------------------------------------------


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(_from_go_regex(pattern))


def _from_go_regex(pattern: str) -> str:
    """RE2 → Python ``re``: ``$`` and ``\\z`` mean the very end of the text in Go, whereas
    Python's ``$`` also matches before a final newline; both become ``\\Z``."""
    out: list[str] = []
    index = 0
    in_class = False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            escaped = pattern[index + 1]
            out.append(r"\Z" if escaped == "z" and not in_class else char + escaped)
            index += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            # A ']' right after '[' or '[^' is a literal member, not the end of the class.
            lookahead = index + 1
            if pattern[lookahead : lookahead + 1] == "^":
                lookahead += 1
            if pattern[lookahead : lookahead + 1] == "]":
                out.append(pattern[index : lookahead + 1])
                index = lookahead + 1
                continue
        elif char == "$":
            out.append(r"\Z")
            index += 1
            continue
        out.append(char)
        index += 1
    return "".join(out)
