"""Go's ``encoding/json`` over Kubernetes types, for a value as the API server serves it.

``marshal(value, "PodSpec")`` is what a Go program writes after ``json.Unmarshal``-ing
``value`` into a ``corev1.PodSpec`` and ``json.Marshal``-ing it back: the text upstream's Go
controllers hash. We only ever hold the served JSON (camelCase keys, CRD defaults applied), so
the Go types are described by the field tables of :mod:`.gofields`, and Go's rules are applied
to them:

* keys in Go struct-field declaration order; a struct value is always written (``{}`` when
  empty), which is why a container always carries ``"resources":{}``;
* ``omitempty`` as Go applies it to the decoded value: ``""``, ``0``, ``false``, a nil pointer and
  an empty slice or map are dropped, a struct value never is, a pointer to a zero value is kept
  (``automountServiceAccountToken: false``); a field without ``omitempty`` that is absent is
  written as its zero value (``"containers":null``, ``"name":""``); ``omitzero`` drops a zero
  time;
* map keys sorted; compact; strings escaped as Go ≥ 1.22 does (``<``, ``>``, ``&``, U+2028 and
  U+2029 as ``\\u003c``-style escapes, ``\\b``/``\\f``/``\\n``/``\\r``/``\\t`` short, other control
  characters ``\\u00XX``, other non-ASCII raw);
* ``resource.Quantity`` in its canonical text (:func:`api.quantity.canonical_quantity`);
  ``intstr.IntOrString`` as given (a number or a string); ``metav1.Time`` as RFC 3339 in UTC to
  the second; ``metav1.FieldsV1`` verbatim.

Best effort, by design: a field the tables do not know (a newer Kubernetes field) is not
dropped and does not fail; it is written after the known fields of its object, keys sorted,
values encoded as Go encodes decoded ``interface{}`` values. Go would put it at its declaration
position (or drop it). The same holds for input Go could not decode at all (a string where an
object belongs, a malformed quantity): it is encoded as it is. A caller comparing the output
with Go's must tolerate both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from api.quantity import canonical_quantity, go_float
from services.domain.agentsandbox.gofields import CORE_STRUCTS, OPENSANDBOX_STRUCTS, SANDBOX_STRUCTS

__all__ = ["marshal", "marshal_fields"]


def marshal(value: Any, shape: str) -> str:
    """Go's JSON of ``value`` decoded into a Go value of ``shape``: a struct name of the
    tables, or ``*T``, ``[]T``, ``map[]T`` or a leaf (see :mod:`.gofields`). ``None`` is an
    absent value: the zero value of ``shape``."""
    out: list[str] = []
    _encode(_present(value), shape, out)
    return "".join(out)


def marshal_fields(value: Mapping[str, Any], struct: str) -> str:
    """Go's JSON of the struct ``struct`` decoded from ``value``, from its known fields only:
    keys of ``value`` the struct does not have are left out rather than written after them
    (a type embedding the struct serves more fields than the struct has)."""
    out: list[str] = []
    _encode_struct(value, struct, out, extras=False)
    return "".join(out)


_STRUCTS: Final = {**SANDBOX_STRUCTS, **CORE_STRUCTS, **OPENSANDBOX_STRUCTS}
_FIELD_NAMES: Final = {name: frozenset(f[0] for f in fields) for name, fields in _STRUCTS.items()}

_MISSING: Final[Any] = object()
"""An absent key or a JSON ``null``: Go decodes both to the zero value of the field's type."""

_LEAF_ZERO: Final = {
    "string": '""',
    "bool": "false",
    "int": "0",
    "float": "0",
    "Quantity": '"0"',
    "IntOrString": "0",
    "Time": "null",
    "Raw": "null",
    "any": "null",
}
"""What the zero value of each leaf shape encodes to."""

_STRUCT_LEAVES: Final = frozenset({"Quantity", "IntOrString", "Time"})
"""Leaves that are Go structs, so never empty for ``omitempty``."""


def _present(value: Any) -> Any:
    return _MISSING if value is None else value


def _encode(value: Any, shape: str, out: list[str]) -> None:
    """Append Go's encoding of ``value`` decoded into a field of ``shape``."""
    if shape.startswith("*"):
        if value is _MISSING:
            out.append("null")
        else:
            _encode(value, shape[1:], out)
    elif shape.startswith("[]"):
        if value is _MISSING:
            out.append("null")
        elif isinstance(value, list):
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(",")
                _encode(_present(item), shape[2:], out)
            out.append("]")
        else:
            _encode_any(value, out)
    elif shape.startswith("map[]"):
        if value is _MISSING:
            out.append("null")
        elif isinstance(value, Mapping):
            out.append("{")
            for i, key in enumerate(sorted(value)):
                if i:
                    out.append(",")
                out.append(_go_string(str(key)))
                out.append(":")
                _encode(_present(value[key]), shape[5:], out)
            out.append("}")
        else:
            _encode_any(value, out)
    elif shape in _STRUCTS:
        if value is _MISSING:
            value = {}
        if isinstance(value, Mapping):
            _encode_struct(value, shape, out, extras=True)
        else:
            _encode_any(value, out)
    elif value is _MISSING:
        out.append(_LEAF_ZERO[shape])
    else:
        _encode_leaf(value, shape, out)


def _encode_struct(value: Mapping[str, Any], name: str, out: list[str], *, extras: bool) -> None:
    out.append("{")
    first = True
    for key, shape, omit in _STRUCTS[name]:
        field = _present(value.get(key))
        if omit and _omitted(field, shape, omit):
            continue
        if not first:
            out.append(",")
        first = False
        out.append(_go_string(key))
        out.append(":")
        _encode(field, shape, out)
    if extras:
        known = _FIELD_NAMES[name]
        for key in sorted(k for k in value if k not in known and value[k] is not None):
            if not first:
                out.append(",")
            first = False
            out.append(_go_string(str(key)))
            out.append(":")
            _encode_any(value[key], out)
    out.append("}")


def _omitted(value: Any, shape: str, omit: str) -> bool:
    """Go's ``isEmptyValue`` (``omitempty``) or ``IsZero`` (``omitzero``) on the decoded value."""
    if value is _MISSING:
        # A nil pointer, slice, map or interface, or a zero leaf: all empty. A struct value is
        # never empty for omitempty, but is zero for omitzero.
        return omit == "omitzero" or not (shape in _STRUCTS or shape in _STRUCT_LEAVES)
    if shape.startswith("*"):
        return False
    if omit == "omitzero" and shape == "Time":
        return _go_time(value) == _ZERO_TIME
    if shape in _STRUCTS or shape in _STRUCT_LEAVES:
        return False
    if shape.startswith(("[]", "map[]")):
        return isinstance(value, list | Mapping) and len(value) == 0
    if shape == "string":
        return value == ""
    if shape == "bool":
        return value is False
    if shape in ("int", "float"):
        return not isinstance(value, bool) and isinstance(value, int | float) and value == 0
    return False


def _encode_leaf(value: Any, shape: str, out: list[str]) -> None:
    if shape == "string" and isinstance(value, str):
        out.append(_go_string(value))
    elif shape == "bool" and isinstance(value, bool):
        out.append("true" if value else "false")
    elif shape == "int" and _integral(value):
        out.append(str(int(value)))
    elif shape == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        out.append(go_float(float(value)))
    elif (
        shape == "Quantity" and isinstance(value, str | int | float) and not isinstance(value, bool)
    ):
        out.append(_go_string(canonical_quantity(value)))
    elif shape == "IntOrString" and (isinstance(value, str) or _integral(value)):
        out.append(_go_string(value) if isinstance(value, str) else str(int(value)))
    elif shape == "Time" and isinstance(value, str):
        parsed = _go_time(value)
        if parsed is None:
            out.append(_go_string(value))
        elif parsed == _ZERO_TIME:
            out.append("null")
        else:
            out.append(_go_string(parsed.strftime("%Y-%m-%dT%H:%M:%SZ")))
    elif shape == "Raw":
        # metav1.FieldsV1 marshals its raw bytes verbatim: keep the served key order.
        _encode_any(value, out, sort_keys=False)
    else:
        _encode_any(value, out)


def _integral(value: Any) -> bool:
    """Whether Go would decode ``value`` into an integer field (JSON has one number type)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _encode_any(value: Any, out: list[str], *, sort_keys: bool = True) -> None:
    """Go's encoding of a decoded ``interface{}`` (and our fallback for unknown fields)."""
    if value is None or value is _MISSING:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(go_float(value))
    elif isinstance(value, str):
        out.append(_go_string(value))
    elif isinstance(value, Mapping):
        out.append("{")
        keys = sorted(value, key=str) if sort_keys else list(value)
        for i, key in enumerate(keys):
            if i:
                out.append(",")
            out.append(_go_string(str(key)))
            out.append(":")
            _encode_any(value[key], out, sort_keys=sort_keys)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode_any(item, out, sort_keys=sort_keys)
        out.append("]")
    else:
        out.append(_go_string(str(value)))


_SHORT_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_NEEDS_ESCAPE: Final = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029\ud800-\udfff]')


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[ch]
    if "\ud800" <= ch <= "\udfff":
        # A lone surrogate (only a JSON "\\ud800" escape makes one): Go decodes it to U+FFFD.
        return "\ufffd"
    return f"\\u{ord(ch):04x}"


def _go_string(s: str) -> str:
    """A JSON string as Go's ``json.Marshal`` writes it (HTML-escaping, Go ≥ 1.22)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, s) + '"'


_ZERO_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)


def _go_time(value: str) -> datetime | None:
    """``metav1.Time`` decoding: RFC 3339, to the second (Go's encoder drops fractions)."""
    try:
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            return None
        return parsed.astimezone(UTC).replace(microsecond=0)
    except (ValueError, OverflowError):
        return None
