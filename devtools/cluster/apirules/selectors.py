"""Label and field selectors, parsed and matched the way apimachinery does it.

Label selectors (``?labelSelector=``, and the ``metav1.LabelSelector`` inside Services, Jobs and
NetworkPolicies) follow apimachinery ``pkg/labels/selector.go``: the same lexer (identifiers end at
whitespace or one of ``=!(),<>``; ``in``/``notin`` are keywords only where an operator may stand),
the same grammar, the same validation of keys (qualified names) and values (≤ 63 characters,
alphanumeric at both ends), and the same error texts, because clients and people read them.
``!=`` and ``notin`` match objects that lack the key; ``gt``/``lt`` compare integers.

Field selectors (``?fieldSelector=``) follow ``pkg/fields/selector.go``: ``a=b``, ``a==b``, ``a!=b``
joined by commas, with ``\\`` escapes. Which fields a resource supports is a per-resource table
(:data:`FIELD_SELECTORS`, from the field label conversion functions registered for each kind);
custom resources get only ``metadata.name`` and ``metadata.namespace``. Values are read from the
object by dotted path; an absent field reads as the empty string, except for the few boolean
fields upstream always renders (``spec.hostNetwork``, ``spec.unschedulable``).

Both parsers raise :class:`SelectorError`; the HTTP layer turns it into a 400 BadRequest.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.objects import labels_of

__all__ = [
    "FIELD_SELECTORS",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "SelectorError",
    "field_selectors_for",
    "parse_field_selector",
    "parse_label_selector",
]


class SelectorError(ValueError):
    """A selector that does not parse or names something unsupported."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --------------------------------------------------------------------------------------------
# Validation (apimachinery pkg/util/validation)
# --------------------------------------------------------------------------------------------

_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(f"^{_QUALIFIED_NAME_FMT}$")
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = f"{_DNS1123_LABEL_FMT}(\\.{_DNS1123_LABEL_FMT})*"
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_NAME_MAX = 63
_SUBDOMAIN_MAX = 253


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """RegexError in validation.go, example list and all."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: ``[prefix/]name``, prefix a DNS subdomain, name ≤ 63 characters."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix) > _SUBDOMAIN_MAX:
                errors.append("prefix part " + _max_len_error(_SUBDOMAIN_MAX))
            if not _DNS1123_SUBDOMAIN.match(prefix):
                errors.append(
                    "prefix part "
                    + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > _NAME_MAX:
        errors.append("name part " + _max_len_error(_NAME_MAX))
    if not _QUALIFIED_NAME.match(name):
        errors.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """IsValidLabelValue: empty, or ≤ 63 characters of ``[-A-Za-z0-9_.]`` alphanumeric at ends."""
    errors: list[str] = []
    if len(value) > _NAME_MAX:
        errors.append(_max_len_error(_NAME_MAX))
    if not _LABEL_VALUE.match(value):
        errors.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errors


def _go_quote(value: str) -> str:
    """Go's %q for the strings a selector can hold (printable ASCII plus escapes)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f'"{escaped}"'


def _invalid(path: str, value: str, detail: str) -> str:
    """field.Invalid(...).Error()."""
    return f"{path}: Invalid value: {_go_quote(value)}: {detail}"


# --------------------------------------------------------------------------------------------
# Label selectors
# --------------------------------------------------------------------------------------------

EXISTS = "exists"
DOES_NOT_EXIST = "!"
EQUALS = "="
DOUBLE_EQUALS = "=="
NOT_EQUALS = "!="
IN = "in"
NOT_IN = "notin"
GREATER_THAN = "gt"
LESS_THAN = "lt"

_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: ``key <operator> values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator in (IN, EQUALS, DOUBLE_EQUALS):
            return present and labels[self.key] in self.values
        if self.operator in (NOT_IN, NOT_EQUALS):
            return not present or labels[self.key] not in self.values
        if self.operator == EXISTS:
            return present
        if self.operator == DOES_NOT_EXIST:
            return not present
        if self.operator in (GREATER_THAN, LESS_THAN):
            if not present or len(self.values) != 1:
                return False
            try:
                actual, bound = _parse_int64(labels[self.key]), _parse_int64(self.values[0])
            except ValueError:
                return False
            return actual > bound if self.operator == GREATER_THAN else actual < bound
        return False

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return "!" + self.key
        values = ",".join(sorted(self.values))
        if self.operator in (IN, NOT_IN):
            return f"{self.key} {self.operator} ({values})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{values}"


def _parse_int64(text: str) -> int:
    """strconv.ParseInt(text, 10, 64): optional sign, decimal digits only, 64-bit range."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(text)
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(text)
    return value


@dataclass(frozen=True)
class LabelSelector:
    """An AND of requirements; ``nothing`` is the selector that matches no object at all."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        present = labels or {}
        return all(requirement.matches(present) for requirement in self.requirements)

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (it selects everything)."""
        return not self.nothing and not self.requirements

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)

    @classmethod
    def everything(cls) -> LabelSelector:
        return cls()

    @classmethod
    def match_nothing(cls) -> LabelSelector:
        return cls(nothing=True)

    @classmethod
    def from_match(
        cls,
        match_labels: Mapping[str, str] | None = None,
        match_expressions: Sequence[Mapping[str, Any]] | None = None,
    ) -> LabelSelector:
        """metav1.LabelSelectorAsSelector for the two halves of a metav1.LabelSelector.

        Both halves empty selects everything; callers holding a *nil* selector (which selects
        nothing) should use :meth:`from_label_selector` or :meth:`match_nothing`.
        """
        requirements: list[Requirement] = []
        for key, value in (match_labels or {}).items():
            requirements.append(_new_requirement(key, EQUALS, [str(value)]))
        for expression in match_expressions or ():
            key = str(expression.get("key", ""))
            operator = expression.get("operator")
            values = [str(value) for value in expression.get("values") or ()]
            mapped = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}
            if operator not in mapped:
                raise SelectorError(
                    f"{_go_quote(str(operator))} is not a valid label selector operator"
                )
            requirements.append(_new_requirement(key, mapped[str(operator)], values))
        return cls(tuple(sorted(requirements, key=lambda requirement: requirement.key)))

    @classmethod
    def from_label_selector(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """A whole metav1.LabelSelector object: ``None`` matches nothing, ``{}`` everything."""
        if selector is None:
            return cls.match_nothing()
        return cls.from_match(selector.get("matchLabels"), selector.get("matchExpressions"))


def _new_requirement(key: str, operator: str, values: Sequence[str]) -> Requirement:
    """NewRequirement: validate the key, the number of values and each value."""
    errors: list[str] = []
    key_errors = qualified_name_errors(key)
    if key_errors:
        errors.append(_invalid("key", key, "; ".join(key_errors)))
    rendered = "[" + " ".join(values) + "]"
    if operator in (IN, NOT_IN) and not values:
        errors.append(
            f"values: Invalid value: {rendered}: "
            "for 'in', 'notin' operators, values set can't be empty"
        )
    if operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS) and len(values) != 1:
        errors.append(
            f"values: Invalid value: {rendered}: "
            "exact-match compatibility requires one single value"
        )
    if operator in (EXISTS, DOES_NOT_EXIST) and values:
        errors.append(
            f"values: Invalid value: {rendered}: "
            "values set must be empty for exists and does not exist"
        )
    if operator in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            errors.append(
                f"values: Invalid value: {rendered}: "
                "for 'Gt', 'Lt' operators, exactly one value is required"
            )
        for index, value in enumerate(values):
            try:
                _parse_int64(value)
            except ValueError:
                errors.append(
                    _invalid(
                        f"values[{index}]",
                        value,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                )
    for index, value in enumerate(values):
        value_errors = label_value_errors(value)
        if value_errors:
            errors.append(_invalid(f"values[{index}][{key}]", value, "; ".join(value_errors)))
    if errors:
        # field.ErrorList.ToAggregate(): one error alone, several in brackets.
        raise SelectorError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return Requirement(key, operator, tuple(values))


# Lexer tokens.
_END = "END"
_IDENTIFIER = "IDENTIFIER"
_ERROR = "ERROR"
_SYMBOLS = {
    ")": ")",
    ",": ",",
    "!": "!",
    "==": "==",
    "=": "=",
    ">": ">",
    "<": "<",
    "!=": "!=",
    "(": "(",
}
_KEYWORDS = {"in": IN, "notin": NOT_IN}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")


def _lex(text: str) -> list[tuple[str, str]]:
    """Tokenise like labels.Lexer: whitespace-separated identifiers and operator symbols."""
    tokens: list[tuple[str, str]] = []
    position = 0
    while True:
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        if position >= len(text):
            tokens.append((_END, ""))
            return tokens
        if text[position] in _SPECIAL:
            # Longest run of special characters that is still a known symbol.
            buffer = ""
            last: tuple[str, str] | None = None
            while position < len(text) and text[position] in _SPECIAL:
                candidate = buffer + text[position]
                if candidate in _SYMBOLS:
                    buffer = candidate
                    last = (_SYMBOLS[candidate], candidate)
                    position += 1
                elif last is not None:
                    break
                else:
                    buffer = candidate
                    position += 1
            if last is None:
                tokens.append((_ERROR, f"error expected: keyword found '{buffer}'"))
            else:
                tokens.append(last)
            continue
        start = position
        while (
            position < len(text)
            and text[position] not in _SPECIAL
            and text[position] not in _WHITESPACE
        ):
            position += 1
        word = text[start:position]
        tokens.append((_KEYWORDS.get(word, _IDENTIFIER), word))


class _Parser:
    """The recursive-descent parser of labels.Parser, token for token."""

    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.position = 0

    def _token(self, values_context: bool, advance: bool) -> tuple[str, str]:
        kind, literal = self.tokens[self.position]
        if advance:
            self.position += 1
        # In a value position the keywords are plain identifiers: `x in (in, notin)` is valid.
        if values_context and kind in (IN, NOT_IN):
            kind = _IDENTIFIER
        return kind, literal

    def lookahead(self, values_context: bool = True) -> tuple[str, str]:
        return self._token(values_context, advance=False)

    def consume(self, values_context: bool = True) -> tuple[str, str]:
        return self._token(values_context, advance=True)

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            kind, literal = self.lookahead()
            if kind in (_IDENTIFIER, "!"):
                try:
                    requirements.append(self.parse_requirement())
                except SelectorError as error:
                    raise SelectorError(f"unable to parse requirement: {error.message}") from None
                kind, literal = self.consume()
                if kind == _END:
                    return requirements
                if kind == ",":
                    next_kind, next_literal = self.lookahead()
                    if next_kind not in (_IDENTIFIER, "!"):
                        raise SelectorError(
                            f"found '{next_literal}', expected: identifier after ','"
                        )
                    continue
                raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            if kind == _END:
                return requirements
            raise SelectorError(f"found '{literal}', expected: !, identifier, or 'end of string'")

    def parse_requirement(self) -> Requirement:
        key, operator = self.parse_key_and_infer_operator()
        if operator in (EXISTS, DOES_NOT_EXIST):
            return _new_requirement(key, operator, [])
        operator = self.parse_operator()
        values = self.parse_values() if operator in (IN, NOT_IN) else self.parse_exact_value()
        return _new_requirement(key, operator, sorted(values))

    def parse_key_and_infer_operator(self) -> tuple[str, str]:
        operator = ""
        kind, literal = self.consume()
        if kind == "!":
            operator = DOES_NOT_EXIST
            kind, literal = self.consume()
        if kind != _IDENTIFIER:
            raise SelectorError(f"found '{literal}', expected: identifier")
        key_errors = qualified_name_errors(literal)
        if key_errors:
            # The parser validates with a nil field path, which Go prints as "<nil>".
            raise SelectorError(_invalid("<nil>", literal, "; ".join(key_errors)))
        next_kind, _ = self.lookahead()
        if next_kind in (_END, ",") and operator != DOES_NOT_EXIST:
            operator = EXISTS
        return literal, operator

    def parse_operator(self) -> str:
        kind, literal = self.consume(values_context=False)
        operators = {
            IN: IN,
            NOT_IN: NOT_IN,
            "=": EQUALS,
            "==": DOUBLE_EQUALS,
            "!=": NOT_EQUALS,
            ">": GREATER_THAN,
            "<": LESS_THAN,
        }
        if kind not in operators:
            raise SelectorError(f"found '{literal}', expected: {_BINARY_OPERATORS}")
        return operators[kind]

    def parse_values(self) -> set[str]:
        kind, literal = self.consume()
        if kind != "(":
            raise SelectorError(f"found '{literal}' expected: '('")
        kind, literal = self.lookahead()
        if kind in (_IDENTIFIER, ","):
            values = self.parse_identifiers_list()
            closing, _ = self.consume()
            if closing != ")":
                raise SelectorError(f"found '{literal}', expected: ')'")
            return values
        if kind == ")":
            self.consume()
            return {""}
        raise SelectorError(f"found '{literal}', expected: ',', ')' or identifier")

    def parse_identifiers_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            kind, literal = self.consume()
            if kind == _IDENTIFIER:
                values.add(literal)
                next_kind, next_literal = self.lookahead()
                if next_kind == ",":
                    continue
                if next_kind == ")":
                    return values
                raise SelectorError(f"found '{next_literal}', expected: ',' or ')'")
            if kind == ",":
                if not values:
                    values.add("")
                next_kind, _ = self.lookahead()
                if next_kind == ")":
                    values.add("")
                    return values
                if next_kind == ",":
                    self.consume()
                    values.add("")
                continue
            raise SelectorError(f"found '{literal}', expected: ',', or identifier")

    def parse_exact_value(self) -> set[str]:
        kind, _ = self.lookahead()
        if kind in (_END, ","):
            return {""}
        kind, literal = self.consume()
        if kind == _IDENTIFIER:
            return {literal}
        raise SelectorError(f"found '{literal}', expected: identifier")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``?labelSelector=`` text; an empty string selects everything."""
    requirements = _Parser(text or "").parse()
    return LabelSelector(tuple(sorted(requirements, key=lambda requirement: requirement.key)))


# --------------------------------------------------------------------------------------------
# Field selectors
# --------------------------------------------------------------------------------------------

_OBJECT_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})

# Field labels each built-in resource accepts (the AddFieldLabelConversionFunc registrations).
FIELD_SELECTORS: Mapping[str, frozenset[str]] = {
    "pods": _OBJECT_META_FIELDS
    | {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "events": _OBJECT_META_FIELDS
    | {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
    "nodes": frozenset({"metadata.name", "spec.unschedulable"}),
    "namespaces": frozenset({"metadata.name", "status.phase"}),
    "secrets": _OBJECT_META_FIELDS | {"type"},
    "services": _OBJECT_META_FIELDS | {"spec.clusterIP", "spec.type"},
    "replicationcontrollers": _OBJECT_META_FIELDS | {"status.replicas"},
    "persistentvolumeclaims": _OBJECT_META_FIELDS,
    "configmaps": _OBJECT_META_FIELDS,
    "serviceaccounts": _OBJECT_META_FIELDS,
    "endpoints": _OBJECT_META_FIELDS,
    "jobs": _OBJECT_META_FIELDS | {"status.successful"},
    "certificatesigningrequests": frozenset({"metadata.name", "spec.signerName"}),
}

# Field labels that are not the object's own path (events' "source" is source.component, ...).
_FIELD_PATHS: Mapping[str, str] = {
    "source": "source.component",
    "reportingComponent": "reportingController",
    "status.successful": "status.succeeded",
}
# Booleans upstream always renders, so an absent field reads as "false", not "".
_FIELD_DEFAULTS: Mapping[str, str] = {"spec.hostNetwork": "false", "spec.unschedulable": "false"}


def field_selectors_for(resource: str) -> frozenset[str]:
    """The field labels a resource (by plural) supports; custom resources get the meta pair."""
    return FIELD_SELECTORS.get(resource, _OBJECT_META_FIELDS)


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _lookup(obj: Mapping[str, Any], label: str) -> str:
    current: Any = obj
    for part in _FIELD_PATHS.get(label, label).split("."):
        if not isinstance(current, Mapping) or part not in current or current[part] is None:
            return _FIELD_DEFAULTS.get(label, "")
        current = current[part]
    if isinstance(current, Mapping):
        return ""
    return _render(current)


@dataclass(frozen=True)
class FieldTerm:
    """One ``field=value`` or ``field!=value`` term."""

    field: str
    value: str
    negated: bool = False

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (_lookup(obj, self.field) == self.value) != self.negated

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
        return f"{self.field}{'!=' if self.negated else '='}{escaped}"


@dataclass(frozen=True)
class FieldSelector:
    """An AND of field terms."""

    terms: tuple[FieldTerm, ...] = field(default_factory=tuple)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(term.matches(obj) for term in self.terms)

    @property
    def empty(self) -> bool:
        return not self.terms

    def __str__(self) -> str:
        return ",".join(str(term) for term in self.terms)


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not escaped by a backslash."""
    terms: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            current.append(char)
            escaped = True
        elif char == ",":
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """The first operator in the term wins; ``!=`` and ``==`` are tried before ``=``."""
    for index in range(len(term)):
        for operator in ("!=", "==", "="):
            if term.startswith(operator, index):
                return term[:index], operator, term[index + len(operator) :]
    return None


def _unescape(value: str) -> str:
    """fields.UnescapeValue: ``\\\\``, ``\\,`` and ``\\=`` only; bare ``,``/``=`` are errors."""
    out: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise SelectorError(
                f"invalid field selector: unescaped character in value: {ord(char)}"
            )
        else:
            out.append(char)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(text: str | None, supported: Collection[str]) -> FieldSelector:
    """Parse ``?fieldSelector=`` text, rejecting fields outside ``supported``."""
    source = text or ""
    terms: list[FieldTerm] = []
    for part in sorted(_split_terms(source)):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{source}'; can't understand '{part}'")
        label, operator, raw_value = split
        value = _unescape(raw_value)
        if label not in supported:
            raise SelectorError(f"field label not supported: {label}")
        terms.append(FieldTerm(label, value, negated=operator == "!="))
    return FieldSelector(tuple(terms))


def selector_matches(
    obj: Mapping[str, Any], labels: LabelSelector | None, fields: FieldSelector | None
) -> bool:
    """Both selectors together, as a list or watch applies them."""
    if labels is not None and not labels.matches(labels_of(obj)):
        return False
    return fields is None or fields.matches(obj)
