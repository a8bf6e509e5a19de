"""The two template hashes a warm pool stamps on its Sandboxes, bit for bit as the Go controller
computes them (spec/agent-sandbox.md §4.3, §4.6; upstream ``computeSandboxBlueprintHash`` and
``computePodTemplateHash`` in extensions/controllers/sandboxwarmpool_controller.go).

Upstream hashes a *typed Go value*: ``agents.x-k8s.io/sandbox-template-hash`` is
``NameHash(string(json.Marshal(template.Spec.SandboxBlueprint)))`` and the deprecated
``agents.x-k8s.io/sandbox-pod-template-hash`` is the same over ``template.Spec.PodTemplate``.
We receive the template spec as the API server serves it (camelCase JSON, CRD defaults applied),
so these functions re-encode it the way Go's ``encoding/json`` would after decoding it into the
agent-sandbox v1beta1 structs and k8s.io/api core/v1 types:

* keys in Go struct-field declaration order, from the tables at the bottom of this module
  (``SandboxBlueprint``: podTemplate, volumeClaimTemplates, service; ``PodTemplate``: ``spec``
  *before* ``metadata``, which is always emitted, ``{}`` when empty; the blueprint's PVC template:
  ``metadata`` before ``spec``; only the three blueprint fields, never template-only fields such
  as ``networkPolicy``);
* ``omitempty`` as Go applies it to the decoded value: ``""``, ``0``, ``false``, a nil pointer and
  an empty slice or map are dropped, a struct value never is (so a container always carries
  ``"resources":{}``), a pointer to a zero value is kept (``automountServiceAccountToken: false``);
  a field without ``omitempty`` that is absent is emitted as its zero value (``"containers":null``,
  ``"name":""``); ``omitzero`` (only ObjectMeta.creationTimestamp) drops the zero time;
* map keys sorted; compact; strings escaped as Go ≥ 1.22 does (``<``, ``>``, ``&``, U+2028 and
  U+2029 as ``\\u003c``-style escapes, ``\\b``/``\\f``/``\\n``/``\\r``/``\\t`` short, other control
  characters ``\\u00XX``, other non-ASCII raw);
* ``resource.Quantity`` re-rendered by the rules of apimachinery's ``ParseQuantity`` and
  ``MarshalJSON`` — including its quirk that a string already "in canonical form" by its cheap
  test is kept verbatim (``"1.500"`` stays, ``"1024Mi"`` becomes ``"1Gi"``, ``"1000m"`` becomes
  ``"1"``); a JSON number is first written back as Go writes a float64;
* ``intstr.IntOrString`` as given (a number or a string); ``metav1.Time`` as RFC 3339 in UTC to
  the second.

The field tables were generated from k8s.io/api v0.36.3 ``core/v1/types.go`` and
k8s.io/apimachinery v0.36.3 ``pkg/apis/meta/v1/types.go`` (the versions upstream's go.mod pins)
by a throwaway ``go/ast`` walk from ``PodSpec`` and ``PersistentVolumeClaimSpec`` that resolves
named types to their JSON shape and flattens inline embedded structs; the agent-sandbox structs
are copied by hand from api/v1beta1/sandbox_types.go. The test vectors in
tests/unit/pool/test_hashes.py come from a Go program that decodes the same input into those
types and calls ``json.Marshal``.

Best effort, by design: a field these tables do not know (a newer Kubernetes field, or a blueprint
field added upstream) is not dropped and does not fail; it is emitted after the known fields of
its object, keys sorted, values encoded as Go encodes decoded ``interface{}`` values. Go would put
it at its declaration position (or drop it), so the label then differs from the Go controller's.
The same holds for input Go could not decode at all (a string where an object belongs, a
malformed quantity; the CRD schema keeps both out): the Go controller cannot even read such a
template, we encode the value as it is. Both only cost label parity: wherever a template hash
disagrees, the controller falls back to comparing the blueprints semantically (spec §4.6, last
paragraph), so behaviour still converges. At the top level the blueprint's three fields are the
only ones encoded, since every other key of a template spec is a template-only field.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from api.keys import name_hash

__all__ = [
    "blueprint_hash",
    "blueprint_json",
    "go_quantity",
    "open_pool_revision",
    "pod_template_hash",
    "pod_template_json",
    "pod_template_spec_json",
]


def blueprint_hash(template_spec: Mapping[str, Any]) -> str:
    """``agents.x-k8s.io/sandbox-template-hash``: ``NameHash`` of the Go JSON of the template's
    ``SandboxBlueprint`` (podTemplate, volumeClaimTemplates, service)."""
    return name_hash(blueprint_json(template_spec))


def pod_template_hash(template_spec: Mapping[str, Any]) -> str:
    """The deprecated ``agents.x-k8s.io/sandbox-pod-template-hash``: ``NameHash`` of the Go JSON
    of the template's ``podTemplate`` alone."""
    return name_hash(pod_template_json(template_spec))


def blueprint_json(template_spec: Mapping[str, Any]) -> str:
    """``json.Marshal(template.Spec.SandboxBlueprint)`` as Go writes it, for a template spec as
    the API server serves it."""
    out: list[str] = []
    _encode_struct(template_spec, "v1beta1.SandboxBlueprint", out, extras=False)
    return "".join(out)


def pod_template_json(template_spec: Mapping[str, Any]) -> str:
    """``json.Marshal(template.Spec.PodTemplate)`` as Go writes it."""
    out: list[str] = []
    _encode(_present(template_spec.get("podTemplate")), "v1beta1.PodTemplate", out)
    return "".join(out)


def open_pool_revision(template: Mapping[str, Any] | None) -> str:
    """An OpenSandbox Pool's revision, as its Go controller computes it (spec/opensandbox.md
    §2.6): the first 8 bytes of the SHA-256 of ``json.Marshal(pool.Spec.Template)``, as 16
    lower-case hex characters. Matching it bit for bit is what lets sandbus take over a Pool
    without recreating its idle Pods once."""
    return hashlib.sha256(pod_template_spec_json(template).encode()).hexdigest()[:16]


def pod_template_spec_json(template: Mapping[str, Any] | None) -> str:
    """``json.Marshal`` of a ``*corev1.PodTemplateSpec`` as OpenSandbox's controller writes it.

    OpenSandbox pins k8s.io/apimachinery v0.33, whose ``ObjectMeta.creationTimestamp`` is
    ``omitempty`` only (``omitzero`` came later): a template without one still says
    ``"metadata":{"creationTimestamp":null}``. A nil template is ``null``."""
    if template is None:
        return "null"
    out: list[str] = []
    _encode_struct(template, "v1.PodTemplateSpec", out, extras=True)
    return "".join(out)


# --- Go encoding/json over the typed structs ----------------------------------------------------

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


def _present(value: Any) -> Any:
    return _MISSING if value is None else value


def _encode(value: Any, shape: str, out: list[str]) -> None:
    """Append Go's encoding of ``value`` decoded into a field of ``shape``.

    Shapes are Go-like: ``*T`` a pointer, ``[]T`` a slice, ``map[]T`` a map with string keys,
    a struct name from :data:`_STRUCTS`, or a leaf (:data:`_LEAF_ZERO`).
    """
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


_STRUCT_LEAVES: Final = frozenset({"Quantity", "IntOrString", "Time"})
"""Leaves that are Go structs, so never empty for ``omitempty``."""


def _encode_leaf(value: Any, shape: str, out: list[str]) -> None:
    if shape == "string" and isinstance(value, str):
        out.append(_go_string(value))
    elif shape == "bool" and isinstance(value, bool):
        out.append("true" if value else "false")
    elif shape == "int" and _integral(value):
        out.append(str(int(value)))
    elif shape == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        out.append(_go_float(float(value)))
    elif (
        shape == "Quantity" and isinstance(value, str | int | float) and not isinstance(value, bool)
    ):
        out.append(_go_string(go_quantity(value)))
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
        out.append(_go_float(value))
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


def _go_float(f: float) -> str:
    """A float64 as Go's ``encoding/json`` writes it: shortest round-trip digits, fixed notation
    unless the magnitude is below 1e-6 or at least 1e21, ``e-7`` rather than ``e-07``."""
    if not math.isfinite(f):
        return "null"  # Go fails here; JSON input cannot carry these anyway.
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    shortest = Decimal(repr(f)).normalize()
    if 1e-6 <= abs(f) < 1e21:
        return format(shortest, "f")
    mantissa, _, exponent = f"{shortest:e}".partition("e")
    sign = "-" if exponent.startswith("-") else "+"
    digits = exponent.lstrip("+-").lstrip("0") or "0"
    return f"{mantissa}e{sign}{digits.zfill(2) if sign == '+' else digits}"


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


# --- resource.Quantity ---------------------------------------------------------------------------

_DECIMAL_SUFFIXES: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX_OF: Final = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIX_OF: Final = {exp // 10: suffix for suffix, exp in _BINARY_SUFFIXES.items()}
_DIGITS: Final = frozenset("0123456789")
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_MAX_INT64: Final = (1 << 63) - 1
_NANO: Final = -9
_GO_SPACE: Final = " \t\n\v\f\r\x85\xa0"

_DECIMAL_SI: Final = "DecimalSI"
_BINARY_SI: Final = "BinarySI"
_DECIMAL_EXPONENT: Final = "DecimalExponent"


class _BadQuantity(ValueError):
    pass


def go_quantity(value: str | int | float) -> str:
    """The text Go's ``resource.Quantity`` marshals to after unmarshalling ``value`` from JSON:
    ``"1024Mi"`` → ``"1Gi"``, ``"0.5"`` → ``"500m"``, ``1`` → ``"1"``. Input Go rejects is
    returned unchanged (Go would fail the whole marshal; see the module docstring)."""
    if isinstance(value, bool):
        return str(value).lower()
    text = str(value) if isinstance(value, int) else value
    if isinstance(text, float):
        text = _go_float(text)
    text = _go_trim_space(text)
    try:
        return _canonical_quantity(text)
    except _BadQuantity:
        return text


def _go_trim_space(s: str) -> str:
    def is_space(ch: str) -> bool:
        return ch in _GO_SPACE or (ch > "\x7f" and ch.isspace())

    start, end = 0, len(s)
    while start < end and is_space(s[start]):
        start += 1
    while end > start and is_space(s[end - 1]):
        end -= 1
    return s[start:end]


def _scan_quantity(s: str) -> tuple[bool, str, str, str, str]:
    """apimachinery's ``parseQuantityString``: (positive, value, num, denom, suffix)."""
    positive, pos, end = True, 0, len(s)
    if pos < end and s[0] in "+-":
        positive = s[0] == "+"
        pos += 1
    while pos < end and s[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    if pos >= end:
        return positive, s, s[start:], "", ""
    num = s[start:pos] or "0"
    denom = ""
    if s[pos] == ".":
        pos += 1
        start = pos
        while pos < end and s[pos] in _DIGITS:
            pos += 1
        denom = s[start:pos]
        if pos >= end:
            return positive, s, num, denom, ""
    value = s[:pos]
    suffix_start = pos
    while pos < end and s[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, s[suffix_start:]
    if s[pos] in "+-":
        pos += 1
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise _BadQuantity(s)
    return positive, value, num, denom, s[suffix_start:]


def _interpret_suffix(suffix: str) -> tuple[int, int, str]:
    """(base, exponent, format) of a quantity suffix."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], _DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], _BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        if not re.fullmatch(r"[+-]?[0-9]+", digits):
            raise _BadQuantity(suffix)
        parsed = int(digits)
        if not -(1 << 63) <= parsed <= _MAX_INT64:
            raise _BadQuantity(suffix)
        return 10, ((parsed + (1 << 31)) % (1 << 32)) - (1 << 31), _DECIMAL_EXPONENT  # int32()
    raise _BadQuantity(suffix)


def _canonical_quantity(s: str) -> str:
    """``ParseQuantity`` then ``MarshalJSON``, on (mantissa, exponent) integers so that a huge
    exponent costs nothing."""
    if not s:
        raise _BadQuantity(s)
    if s == "0":
        return "0"
    positive, value, num, denom, suffix = _scan_quantity(s)
    base, exponent, fmt = _interpret_suffix(suffix)

    # The int64 fast path: exact, and it keeps the input text when that looks canonical.
    precision, scale, multiplier = 0, 0, 1
    if fmt in (_DECIMAL_EXPONENT, _DECIMAL_SI):
        scale = exponent
        precision = 18 - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        multiplier = 1 << exponent
        precision = 15 - len(num) - (exponent * 3 // 10) - 1
    else:
        precision = -1
    if precision >= 0:
        scale -= len(denom)
        if scale >= _NANO:
            shifted = num + denom
            result = int(shifted) * multiplier
            if result <= _MAX_INT64:
                if fmt == _BINARY_SI:
                    if exponent % 10 == 0 and int(shifted) & 0x07:
                        return s
                elif scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0":
                    return s
                return _format_quantity(result if positive else -result, scale, fmt)

    # The inf.Dec path: arbitrary precision, rounded up (away from zero) to the nanounit.
    if not any(ch in _DIGITS for ch in value):
        raise _BadQuantity(s)
    sign = -1 if value.startswith("-") else 1
    int_part, _, frac_part = value.lstrip("+-").partition(".")
    mantissa = int((int_part + frac_part) or "0")
    exp10 = -len(frac_part)
    if base == 10:
        exp10 += exponent
    else:
        mantissa <<= exponent
    if mantissa and exp10 < _NANO:
        drop = _NANO - exp10
        mantissa = 1 if drop > len(str(mantissa)) else -(-mantissa // 10**drop)
        exp10 = _NANO
    if fmt == _BINARY_SI and mantissa * 10 ** max(0, exp10) > _MAX_INT64 * 10 ** max(0, -exp10):
        mantissa, exp10 = _MAX_INT64, 0
    return _format_quantity(sign * mantissa, exp10, fmt)


def _format_quantity(mantissa: int, exp10: int, fmt: str) -> str:
    """``CanonicalizeBytes`` of ``mantissa * 10**exp10``."""
    if mantissa == 0:
        return "0"
    if fmt == _BINARY_SI:
        # Binary quantities never carry a decimal exponent, so exp10 <= 0 here.
        unit = 10 ** max(0, -exp10)
        value = mantissa * 10 ** max(0, exp10)
        if -1024 * unit < value < 1024 * unit or value % unit:
            fmt = _DECIMAL_SI
        else:
            amount, times = abs(value // unit), 0
            while amount >= 1024 and amount % 1024 == 0:
                amount //= 1024
                times += 1
            return f"{'-' if value < 0 else ''}{amount}{_BINARY_SUFFIX_OF.get(times, '')}"
    negative, amount = mantissa < 0, abs(mantissa)
    while amount >= 10 and amount % 10 == 0:
        amount //= 10
        exp10 += 1
    shift = exp10 % 3
    amount *= 10**shift
    exp10 -= shift
    number = f"{'-' if negative else ''}{amount}"
    if fmt == _DECIMAL_EXPONENT:
        return number if exp10 == 0 else f"{number}e{exp10}"
    return number + _DECIMAL_SUFFIX_OF.get(exp10, "")


# --- Field tables ---------------------------------------------------------------------------------
# (json name, shape, "omitempty" | "omitzero" | "") in Go declaration order.

_SANDBOX_STRUCTS: Final[dict[str, tuple[tuple[str, str, str], ...]]] = {
    # agent-sandbox api/v1beta1/sandbox_types.go, copied by hand.
    "v1beta1.SandboxBlueprint": (
        ("podTemplate", "v1beta1.PodTemplate", ""),
        ("volumeClaimTemplates", "[]v1beta1.PersistentVolumeClaimTemplate", "omitempty"),
        ("service", "*bool", "omitempty"),
    ),
    "v1beta1.PodTemplate": (
        ("spec", "PodSpec", ""),
        ("metadata", "v1beta1.PodMetadata", ""),
    ),
    "v1beta1.PodMetadata": (
        ("labels", "map[]string", "omitempty"),
        ("annotations", "map[]string", "omitempty"),
    ),
    "v1beta1.PersistentVolumeClaimTemplate": (
        ("metadata", "v1beta1.EmbeddedObjectMetadata", ""),
        ("spec", "PersistentVolumeClaimSpec", ""),
    ),
    "v1beta1.EmbeddedObjectMetadata": (
        ("name", "string", "omitempty"),
        ("labels", "map[]string", "omitempty"),
        ("annotations", "map[]string", "omitempty"),
    ),
}

# Generated from k8s.io/api v0.36.3 core/v1/types.go and k8s.io/apimachinery v0.36.3
# pkg/apis/meta/v1/types.go (ObjectMeta and LabelSelector and what they reach): every struct
# reachable from PodSpec and PersistentVolumeClaimSpec, inline embedded structs flattened, named
# types resolved to their JSON shape (int = any Go integer type). When upstream moves to a newer
# k8s.io/api, regenerate it the same way rather than editing it by hand.
_CORE_STRUCTS: Final[dict[str, tuple[tuple[str, str, str], ...]]] = {
    "AWSElasticBlockStoreVolumeSource": (
        ("volumeID", "string", ""),
        ("fsType", "string", "omitempty"),
        ("partition", "int", "omitempty"),
        ("readOnly", "bool", "omitempty"),
    ),
    "Affinity": (
        ("nodeAffinity", "*NodeAffinity", "omitempty"),
        ("podAffinity", "*PodAffinity", "omitempty"),
        ("podAntiAffinity", "*PodAntiAffinity", "omitempty"),
    ),
    "AppArmorProfile": (
        ("type", "string", ""),
        ("localhostProfile", "*string", "omitempty"),
    ),
    "AzureDiskVolumeSource": (
        ("diskName", "string", ""),
        ("diskURI", "string", ""),
        ("cachingMode", "*string", "omitempty"),
        ("fsType", "*string", "omitempty"),
        ("readOnly", "*bool", "omitempty"),
        ("kind", "*string", "omitempty"),
    ),
    "AzureFileVolumeSource": (
        ("secretName", "string", ""),
        ("shareName", "string", ""),
        ("readOnly", "bool", "omitempty"),
    ),
    "CSIVolumeSource": (
        ("driver", "string", ""),
        ("readOnly", "*bool", "omitempty"),
        ("fsType", "*string", "omitempty"),
        ("volumeAttributes", "map[]string", "omitempty"),
        ("nodePublishSecretRef", "*LocalObjectReference", "omitempty"),
    ),
    "Capabilities": (
        ("add", "[]string", "omitempty"),
        ("drop", "[]string", "omitempty"),
    ),
    "CephFSVolumeSource": (
        ("monitors", "[]string", ""),
        ("path", "string", "omitempty"),
        ("user", "string", "omitempty"),
        ("secretFile", "string", "omitempty"),
        ("secretRef", "*LocalObjectReference", "omitempty"),
        ("readOnly", "bool", "omitempty"),
    ),
    "CinderVolumeSource": (
        ("volumeID", "string", ""),
        ("fsType", "string", "omitempty"),
        ("readOnly", "bool", "omitempty"),
        ("secretRef", "*LocalObjectReference", "omitempty"),
    ),
    "ClusterTrustBundleProjection": (
        ("name", "*string", "omitempty"),
        ("signerName", "*string", "omitempty"),
        ("labelSelector", "*LabelSelector", "omitempty"),
        ("optional", "*bool", "omitempty"),
        ("path", "string", ""),
    ),
    "ConfigMapEnvSource": (
        ("name", "string", "omitempty"),
        ("optional", "*bool", "omitempty"),
    ),
    "ConfigMapKeySelector": (
        ("name", "string", "omitempty"),
        ("key", "string", ""),
        ("optional", "*bool", "omitempty"),
    ),
    "ConfigMapProjection": (
        ("name", "string", "omitempty"),
        ("items", "[]KeyToPath", "omitempty"),
        ("optional", "*bool", "omitempty"),
    ),
    "ConfigMapVolumeSource": (
        ("name", "string", "omitempty"),
        ("items", "[]KeyToPath", "omitempty"),
        ("defaultMode", "*int", "omitempty"),
        ("optional", "*bool", "omitempty"),
    ),
    "Container": (
        ("name", "string", ""),
        ("image", "string", "omitempty"),
        ("command", "[]string", "omitempty"),
        ("args", "[]string", "omitempty"),
        ("workingDir", "string", "omitempty"),
        ("ports", "[]ContainerPort", "omitempty"),
        ("envFrom", "[]EnvFromSource", "omitempty"),
        ("env", "[]EnvVar", "omitempty"),
        ("resources", "ResourceRequirements", "omitempty"),
        ("resizePolicy", "[]ContainerResizePolicy", "omitempty"),
        ("restartPolicy", "*string", "omitempty"),
        ("restartPolicyRules", "[]ContainerRestartRule", "omitempty"),
        ("volumeMounts", "[]VolumeMount", "omitempty"),
        ("volumeDevices", "[]VolumeDevice", "omitempty"),
        ("livenessProbe", "*Probe", "omitempty"),
        ("readinessProbe", "*Probe", "omitempty"),
        ("startupProbe", "*Probe", "omitempty"),
        ("lifecycle", "*Lifecycle", "omitempty"),
        ("terminationMessagePath", "string", "omitempty"),
        ("terminationMessagePolicy", "string", "omitempty"),
        ("imagePullPolicy", "string", "omitempty"),
        ("securityContext", "*SecurityContext", "omitempty"),
        ("stdin", "bool", "omitempty"),
        ("stdinOnce", "bool", "omitempty"),
        ("tty", "bool", "omitempty"),
    ),
    "ContainerPort": (
        ("name", "string", "omitempty"),
        ("hostPort", "int", "omitempty"),
        ("containerPort", "int", ""),
        ("protocol", "string", "omitempty"),
        ("hostIP", "string", "omitempty"),
    ),
    "ContainerResizePolicy": (
        ("resourceName", "string", ""),
        ("restartPolicy", "string", ""),
    ),
    "ContainerRestartRule": (
        ("action", "string", "omitempty"),
        ("exitCodes", "*ContainerRestartRuleOnExitCodes", "omitempty"),
    ),
    "ContainerRestartRuleOnExitCodes": (
        ("operator", "string", "omitempty"),
        ("values", "[]int", "omitempty"),
    ),
    "DownwardAPIProjection": (("items", "[]DownwardAPIVolumeFile", "omitempty"),),
    "DownwardAPIVolumeFile": (
        ("path", "string", ""),
        ("fieldRef", "*ObjectFieldSelector", "omitempty"),
        ("resourceFieldRef", "*ResourceFieldSelector", "omitempty"),
        ("mode", "*int", "omitempty"),
    ),
    "DownwardAPIVolumeSource": (
        ("items", "[]DownwardAPIVolumeFile", "omitempty"),
        ("defaultMode", "*int", "omitempty"),
    ),
    "EmptyDirVolumeSource": (
        ("medium", "string", "omitempty"),
        ("sizeLimit", "*Quantity", "omitempty"),
    ),
    "EnvFromSource": (
        ("prefix", "string", "omitempty"),
        ("configMapRef", "*ConfigMapEnvSource", "omitempty"),
        ("secretRef", "*SecretEnvSource", "omitempty"),
    ),
    "EnvVar": (
        ("name", "string", ""),
        ("value", "string", "omitempty"),
        ("valueFrom", "*EnvVarSource", "omitempty"),
    ),
    "EnvVarSource": (
        ("fieldRef", "*ObjectFieldSelector", "omitempty"),
        ("resourceFieldRef", "*ResourceFieldSelector", "omitempty"),
        ("configMapKeyRef", "*ConfigMapKeySelector", "omitempty"),
        ("secretKeyRef", "*SecretKeySelector", "omitempty"),
        ("fileKeyRef", "*FileKeySelector", "omitempty"),
    ),
    "EphemeralContainer": (
        ("name", "string", ""),
        ("image", "string", "omitempty"),
        ("command", "[]string", "omitempty"),
        ("args", "[]string", "omitempty"),
        ("workingDir", "string", "omitempty"),
        ("ports", "[]ContainerPort", "omitempty"),
        ("envFrom", "[]EnvFromSource", "omitempty"),
        ("env", "[]EnvVar", "omitempty"),
        ("resources", "ResourceRequirements", "omitempty"),
        ("resizePolicy", "[]ContainerResizePolicy", "omitempty"),
        ("restartPolicy", "*string", "omitempty"),
        ("restartPolicyRules", "[]ContainerRestartRule", "omitempty"),
        ("volumeMounts", "[]VolumeMount", "omitempty"),
        ("volumeDevices", "[]VolumeDevice", "omitempty"),
        ("livenessProbe", "*Probe", "omitempty"),
        ("readinessProbe", "*Probe", "omitempty"),
        ("startupProbe", "*Probe", "omitempty"),
        ("lifecycle", "*Lifecycle", "omitempty"),
        ("terminationMessagePath", "string", "omitempty"),
        ("terminationMessagePolicy", "string", "omitempty"),
        ("imagePullPolicy", "string", "omitempty"),
        ("securityContext", "*SecurityContext", "omitempty"),
        ("stdin", "bool", "omitempty"),
        ("stdinOnce", "bool", "omitempty"),
        ("tty", "bool", "omitempty"),
        ("targetContainerName", "string", "omitempty"),
    ),
    "EphemeralVolumeSource": (
        ("volumeClaimTemplate", "*PersistentVolumeClaimTemplate", "omitempty"),
    ),
    "ExecAction": (("command", "[]string", "omitempty"),),
    "FCVolumeSource": (
        ("targetWWNs", "[]string", "omitempty"),
        ("lun", "*int", "omitempty"),
        ("fsType", "string", "omitempty"),
        ("readOnly", "bool", "omitempty"),
        ("wwids", "[]string", "omitempty"),
    ),
    "FileKeySelector": (
        ("volumeName", "string", ""),
        ("path", "string", ""),
        ("key", "string", ""),
        ("optional", "*bool", "omitempty"),
    ),
    "FlexVolumeSource": (
        ("driver", "string", ""),
        ("fsType", "string", "omitempty"),
        ("secretRef", "*LocalObjectReference", "omitempty"),
        ("readOnly", "bool", "omitempty"),
        ("options", "map[]string", "omitempty"),
    ),
    "FlockerVolumeSource": (
        ("datasetName", "string", "omitempty"),
        ("datasetUUID", "string", "omitempty"),
    ),
    "GCEPersistentDiskVolumeSource": (
        ("pdName", "string", ""),
        ("fsType", "string", "omitempty"),
        ("partition", "int", "omitempty"),
        ("readOnly", "bool", "omitempty"),
    ),
    "GRPCAction": (
        ("port", "int", ""),
        ("service", "*string", ""),
    ),
    "GitRepoVolumeSource": (
        ("repository", "string", ""),
        ("revision", "string", "omitempty"),
        ("directory", "string", "omitempty"),
    ),
    "GlusterfsVolumeSource": (
        ("endpoints", "string", ""),
        ("path", "string", ""),
        ("readOnly", "bool", "omitempty"),
    ),
    "HTTPGetAction": (
        ("path", "string", "omitempty"),
        ("port", "IntOrString", ""),
        ("host", "string", "omitempty"),
        ("scheme", "string", "omitempty"),
        ("httpHeaders", "[]HTTPHeader", "omitempty"),
    ),
    "HTTPHeader": (
        ("name", "string", ""),
        ("value", "string", ""),
    ),
    "HostAlias": (
        ("ip", "string", ""),
        ("hostnames", "[]string", "omitempty"),
    ),
    "HostPathVolumeSource": (
        ("path", "string", ""),
        ("type", "*string", "omitempty"),
    ),
    "ISCSIVolumeSource": (
        ("targetPortal", "string", ""),
        ("iqn", "string", ""),
        ("lun", "int", ""),
        ("iscsiInterface", "string", "omitempty"),
        ("fsType", "string", "omitempty"),
        ("readOnly", "bool", "omitempty"),
        ("portals", "[]string", "omitempty"),
        ("chapAuthDiscovery", "bool", "omitempty"),
        ("chapAuthSession", "bool", "omitempty"),
        ("secretRef", "*LocalObjectReference", "omitempty"),
        ("initiatorName", "*string", "omitempty"),
    ),
    "ImageVolumeSource": (
        ("reference", "string", "omitempty"),
        ("pullPolicy", "string", "omitempty"),
    ),
    "KeyToPath": (
        ("key", "string", ""),
        ("path", "string", ""),
        ("mode", "*int", "omitempty"),
    ),
    "LabelSelector": (
        ("matchLabels", "map[]string", "omitempty"),
        ("matchExpressions", "[]LabelSelectorRequirement", "omitempty"),
    ),
    "LabelSelectorRequirement": (
        ("key", "string", ""),
        ("operator", "string", ""),
        ("values", "[]string", "omitempty"),
    ),
    "Lifecycle": (
        ("postStart", "*LifecycleHandler", "omitempty"),
        ("preStop", "*LifecycleHandler", "omitempty"),
        ("stopSignal", "*string", "omitempty"),
    ),
    "LifecycleHandler": (
        ("exec", "*ExecAction", "omitempty"),
        ("httpGet", "*HTTPGetAction", "omitempty"),
        ("tcpSocket", "*TCPSocketAction", "omitempty"),
        ("sleep", "*SleepAction", "omitempty"),
    ),
    "LocalObjectReference": (("name", "string", "omitempty"),),
    "ManagedFieldsEntry": (
        ("manager", "string", "omitempty"),
        ("operation", "string", "omitempty"),
        ("apiVersion", "string", "omitempty"),
        ("time", "*Time", "omitempty"),
        ("fieldsType", "string", "omitempty"),
        ("fieldsV1", "*Raw", "omitempty"),
        ("subresource", "string", "omitempty"),
    ),
    "NFSVolumeSource": (
        ("server", "string", ""),
        ("path", "string", ""),
        ("readOnly", "bool", "omitempty"),
    ),
    "NodeAffinity": (
        ("requiredDuringSchedulingIgnoredDuringExecution", "*NodeSelector", "omitempty"),
        (
            "preferredDuringSchedulingIgnoredDuringExecution",
            "[]PreferredSchedulingTerm",
            "omitempty",
        ),
    ),
    "NodeSelector": (("nodeSelectorTerms", "[]NodeSelectorTerm", ""),),
    "NodeSelectorRequirement": (
        ("key", "string", ""),
        ("operator", "string", ""),
        ("values", "[]string", "omitempty"),
    ),
    "NodeSelectorTerm": (
        ("matchExpressions", "[]NodeSelectorRequirement", "omitempty"),
        ("matchFields", "[]NodeSelectorRequirement", "omitempty"),
    ),
    "ObjectFieldSelector": (
        ("apiVersion", "string", "omitempty"),
        ("fieldPath", "string", ""),
    ),
    "ObjectMeta": (
        ("name", "string", "omitempty"),
        ("generateName", "string", "omitempty"),
        ("namespace", "string", "omitempty"),
        ("selfLink", "string", "omitempty"),
        ("uid", "string", "omitempty"),
        ("resourceVersion", "string", "omitempty"),
        ("generation", "int", "omitempty"),
        ("creationTimestamp", "Time", "omitzero"),
        ("deletionTimestamp", "*Time", "omitempty"),
        ("deletionGracePeriodSeconds", "*int", "omitempty"),
        ("labels", "map[]string", "omitempty"),
        ("annotations", "map[]string", "omitempty"),
        ("ownerReferences", "[]OwnerReference", "omitempty"),
        ("finalizers", "[]string", "omitempty"),
        ("managedFields", "[]ManagedFieldsEntry", "omitempty"),
    ),
    "OwnerReference": (
        ("apiVersion", "string", ""),
        ("kind", "string", ""),
        ("name", "string", ""),
        ("uid", "string", ""),
        ("controller", "*bool", "omitempty"),
        ("blockOwnerDeletion", "*bool", "omitempty"),
    ),
    "PersistentVolumeClaimSpec": (
        ("accessModes", "[]string", "omitempty"),
        ("selector", "*LabelSelector", "omitempty"),
        ("resources", "VolumeResourceRequirements", "omitempty"),
        ("volumeName", "string", "omitempty"),
        ("storageClassName", "*string", "omitempty"),
        ("volumeMode", "*string", "omitempty"),
        ("dataSource", "*TypedLocalObjectReference", "omitempty"),
        ("dataSourceRef", "*TypedObjectReference", "omitempty"),
        ("volumeAttributesClassName", "*string", "omitempty"),
    ),
    "PersistentVolumeClaimTemplate": (
        ("metadata", "ObjectMeta", "omitempty"),
        ("spec", "PersistentVolumeClaimSpec", ""),
    ),
    "PersistentVolumeClaimVolumeSource": (
        ("claimName", "string", ""),
        ("readOnly", "bool", "omitempty"),
    ),
    "PhotonPersistentDiskVolumeSource": (
        ("pdID", "string", ""),
        ("fsType", "string", "omitempty"),
    ),
    "PodAffinity": (
        ("requiredDuringSchedulingIgnoredDuringExecution", "[]PodAffinityTerm", "omitempty"),
        (
            "preferredDuringSchedulingIgnoredDuringExecution",
            "[]WeightedPodAffinityTerm",
            "omitempty",
        ),
    ),
    "PodAffinityTerm": (
        ("labelSelector", "*LabelSelector", "omitempty"),
        ("namespaces", "[]string", "omitempty"),
        ("topologyKey", "string", ""),
        ("namespaceSelector", "*LabelSelector", "omitempty"),
        ("matchLabelKeys", "[]string", "omitempty"),
        ("mismatchLabelKeys", "[]string", "omitempty"),
    ),
    "PodAntiAffinity": (
        ("requiredDuringSchedulingIgnoredDuringExecution", "[]PodAffinityTerm", "omitempty"),
        (
            "preferredDuringSchedulingIgnoredDuringExecution",
            "[]WeightedPodAffinityTerm",
            "omitempty",
        ),
    ),
    "PodCertificateProjection": (
        ("signerName", "string", "omitempty"),
        ("keyType", "string", "omitempty"),
        ("maxExpirationSeconds", "*int", "omitempty"),
        ("credentialBundlePath", "string", "omitempty"),
        ("keyPath", "string", "omitempty"),
        ("certificateChainPath", "string", "omitempty"),
        ("userAnnotations", "map[]string", "omitempty"),
    ),
    "PodDNSConfig": (
        ("nameservers", "[]string", "omitempty"),
        ("searches", "[]string", "omitempty"),
        ("options", "[]PodDNSConfigOption", "omitempty"),
    ),
    "PodDNSConfigOption": (
        ("name", "string", "omitempty"),
        ("value", "*string", "omitempty"),
    ),
    "PodOS": (("name", "string", ""),),
    "PodReadinessGate": (("conditionType", "string", ""),),
    "PodResourceClaim": (
        ("name", "string", ""),
        ("resourceClaimName", "*string", "omitempty"),
        ("resourceClaimTemplateName", "*string", "omitempty"),
    ),
    "PodSchedulingGate": (("name", "string", ""),),
    "PodSchedulingGroup": (("podGroupName", "*string", "omitempty"),),
    "PodSecurityContext": (
        ("seLinuxOptions", "*SELinuxOptions", "omitempty"),
        ("windowsOptions", "*WindowsSecurityContextOptions", "omitempty"),
        ("runAsUser", "*int", "omitempty"),
        ("runAsGroup", "*int", "omitempty"),
        ("runAsNonRoot", "*bool", "omitempty"),
        ("supplementalGroups", "[]int", "omitempty"),
        ("supplementalGroupsPolicy", "*string", "omitempty"),
        ("fsGroup", "*int", "omitempty"),
        ("sysctls", "[]Sysctl", "omitempty"),
        ("fsGroupChangePolicy", "*string", "omitempty"),
        ("seccompProfile", "*SeccompProfile", "omitempty"),
        ("appArmorProfile", "*AppArmorProfile", "omitempty"),
        ("seLinuxChangePolicy", "*string", "omitempty"),
    ),
    "PodSpec": (
        ("volumes", "[]Volume", "omitempty"),
        ("initContainers", "[]Container", "omitempty"),
        ("containers", "[]Container", ""),
        ("ephemeralContainers", "[]EphemeralContainer", "omitempty"),
        ("restartPolicy", "string", "omitempty"),
        ("terminationGracePeriodSeconds", "*int", "omitempty"),
        ("activeDeadlineSeconds", "*int", "omitempty"),
        ("dnsPolicy", "string", "omitempty"),
        ("nodeSelector", "map[]string", "omitempty"),
        ("serviceAccountName", "string", "omitempty"),
        ("serviceAccount", "string", "omitempty"),
        ("automountServiceAccountToken", "*bool", "omitempty"),
        ("nodeName", "string", "omitempty"),
        ("hostNetwork", "bool", "omitempty"),
        ("hostPID", "bool", "omitempty"),
        ("hostIPC", "bool", "omitempty"),
        ("shareProcessNamespace", "*bool", "omitempty"),
        ("securityContext", "*PodSecurityContext", "omitempty"),
        ("imagePullSecrets", "[]LocalObjectReference", "omitempty"),
        ("hostname", "string", "omitempty"),
        ("subdomain", "string", "omitempty"),
        ("affinity", "*Affinity", "omitempty"),
        ("schedulerName", "string", "omitempty"),
        ("tolerations", "[]Toleration", "omitempty"),
        ("hostAliases", "[]HostAlias", "omitempty"),
        ("priorityClassName", "string", "omitempty"),
        ("priority", "*int", "omitempty"),
        ("dnsConfig", "*PodDNSConfig", "omitempty"),
        ("readinessGates", "[]PodReadinessGate", "omitempty"),
        ("runtimeClassName", "*string", "omitempty"),
        ("enableServiceLinks", "*bool", "omitempty"),
        ("preemptionPolicy", "*string", "omitempty"),
        ("overhead", "map[]Quantity", "omitempty"),
        ("topologySpreadConstraints", "[]TopologySpreadConstraint", "omitempty"),
        ("setHostnameAsFQDN", "*bool", "omitempty"),
        ("os", "*PodOS", "omitempty"),
        ("hostUsers", "*bool", "omitempty"),
        ("schedulingGates", "[]PodSchedulingGate", "omitempty"),
        ("resourceClaims", "[]PodResourceClaim", "omitempty"),
        ("resources", "*ResourceRequirements", "omitempty"),
        ("hostnameOverride", "*string", "omitempty"),
        ("schedulingGroup", "*PodSchedulingGroup", "omitempty"),
    ),
    "PortworxVolumeSource": (
        ("volumeID", "string", ""),
        ("fsType", "string", "omitempty"),
        ("readOnly", "bool", "omitempty"),
    ),
    "PreferredSchedulingTerm": (
        ("weight", "int", ""),
        ("preference", "NodeSelectorTerm", ""),
    ),
    "Probe": (
        ("exec", "*ExecAction", "omitempty"),
        ("httpGet", "*HTTPGetAction", "omitempty"),
        ("tcpSocket", "*TCPSocketAction", "omitempty"),
        ("grpc", "*GRPCAction", "omitempty"),
        ("initialDelaySeconds", "int", "omitempty"),
        ("timeoutSeconds", "int", "omitempty"),
        ("periodSeconds", "int", "omitempty"),
        ("successThreshold", "int", "omitempty"),
        ("failureThreshold", "int", "omitempty"),
        ("terminationGracePeriodSeconds", "*int", "omitempty"),
    ),
    "ProjectedVolumeSource": (
        ("sources", "[]VolumeProjection", ""),
        ("defaultMode", "*int", "omitempty"),
    ),
    "QuobyteVolumeSource": (
        ("registry", "string", ""),
        ("volume", "string", ""),
        ("readOnly", "bool", "omitempty"),
        ("user", "string", "omitempty"),
        ("group", "string", "omitempty"),
        ("tenant", "string", "omitempty"),
    ),
    "RBDVolumeSource": (
        ("monitors", "[]string", ""),
        ("image", "string", ""),
        ("fsType", "string", "omitempty"),
        ("pool", "string", "omitempty"),
        ("user", "string", "omitempty"),
        ("keyring", "string", "omitempty"),
        ("secretRef", "*LocalObjectReference", "omitempty"),
        ("readOnly", "bool", "omitempty"),
    ),
    "ResourceClaim": (
        ("name", "string", ""),
        ("request", "string", "omitempty"),
    ),
    "ResourceFieldSelector": (
        ("containerName", "string", "omitempty"),
        ("resource", "string", ""),
        ("divisor", "Quantity", "omitempty"),
    ),
    "ResourceRequirements": (
        ("limits", "map[]Quantity", "omitempty"),
        ("requests", "map[]Quantity", "omitempty"),
        ("claims", "[]ResourceClaim", "omitempty"),
    ),
    "SELinuxOptions": (
        ("user", "string", "omitempty"),
        ("role", "string", "omitempty"),
        ("type", "string", "omitempty"),
        ("level", "string", "omitempty"),
    ),
    "ScaleIOVolumeSource": (
        ("gateway", "string", ""),
        ("system", "string", ""),
        ("secretRef", "*LocalObjectReference", ""),
        ("sslEnabled", "bool", "omitempty"),
        ("protectionDomain", "string", "omitempty"),
        ("storagePool", "string", "omitempty"),
        ("storageMode", "string", "omitempty"),
        ("volumeName", "string", "omitempty"),
        ("fsType", "string", "omitempty"),
        ("readOnly", "bool", "omitempty"),
    ),
    "SeccompProfile": (
        ("type", "string", ""),
        ("localhostProfile", "*string", "omitempty"),
    ),
    "SecretEnvSource": (
        ("name", "string", "omitempty"),
        ("optional", "*bool", "omitempty"),
    ),
    "SecretKeySelector": (
        ("name", "string", "omitempty"),
        ("key", "string", ""),
        ("optional", "*bool", "omitempty"),
    ),
    "SecretProjection": (
        ("name", "string", "omitempty"),
        ("items", "[]KeyToPath", "omitempty"),
        ("optional", "*bool", "omitempty"),
    ),
    "SecretVolumeSource": (
        ("secretName", "string", "omitempty"),
        ("items", "[]KeyToPath", "omitempty"),
        ("defaultMode", "*int", "omitempty"),
        ("optional", "*bool", "omitempty"),
    ),
    "SecurityContext": (
        ("capabilities", "*Capabilities", "omitempty"),
        ("privileged", "*bool", "omitempty"),
        ("seLinuxOptions", "*SELinuxOptions", "omitempty"),
        ("windowsOptions", "*WindowsSecurityContextOptions", "omitempty"),
        ("runAsUser", "*int", "omitempty"),
        ("runAsGroup", "*int", "omitempty"),
        ("runAsNonRoot", "*bool", "omitempty"),
        ("readOnlyRootFilesystem", "*bool", "omitempty"),
        ("allowPrivilegeEscalation", "*bool", "omitempty"),
        ("procMount", "*string", "omitempty"),
        ("seccompProfile", "*SeccompProfile", "omitempty"),
        ("appArmorProfile", "*AppArmorProfile", "omitempty"),
    ),
    "ServiceAccountTokenProjection": (
        ("audience", "string", "omitempty"),
        ("expirationSeconds", "*int", "omitempty"),
        ("path", "string", ""),
    ),
    "SleepAction": (("seconds", "int", ""),),
    "StorageOSVolumeSource": (
        ("volumeName", "string", "omitempty"),
        ("volumeNamespace", "string", "omitempty"),
        ("fsType", "string", "omitempty"),
        ("readOnly", "bool", "omitempty"),
        ("secretRef", "*LocalObjectReference", "omitempty"),
    ),
    "Sysctl": (
        ("name", "string", ""),
        ("value", "string", ""),
    ),
    "TCPSocketAction": (
        ("port", "IntOrString", ""),
        ("host", "string", "omitempty"),
    ),
    "Toleration": (
        ("key", "string", "omitempty"),
        ("operator", "string", "omitempty"),
        ("value", "string", "omitempty"),
        ("effect", "string", "omitempty"),
        ("tolerationSeconds", "*int", "omitempty"),
    ),
    "TopologySpreadConstraint": (
        ("maxSkew", "int", ""),
        ("topologyKey", "string", ""),
        ("whenUnsatisfiable", "string", ""),
        ("labelSelector", "*LabelSelector", "omitempty"),
        ("minDomains", "*int", "omitempty"),
        ("nodeAffinityPolicy", "*string", "omitempty"),
        ("nodeTaintsPolicy", "*string", "omitempty"),
        ("matchLabelKeys", "[]string", "omitempty"),
    ),
    "TypedLocalObjectReference": (
        ("apiGroup", "*string", ""),
        ("kind", "string", ""),
        ("name", "string", ""),
    ),
    "TypedObjectReference": (
        ("apiGroup", "*string", ""),
        ("kind", "string", ""),
        ("name", "string", ""),
        ("namespace", "*string", "omitempty"),
    ),
    "Volume": (
        ("name", "string", ""),
        ("hostPath", "*HostPathVolumeSource", "omitempty"),
        ("emptyDir", "*EmptyDirVolumeSource", "omitempty"),
        ("gcePersistentDisk", "*GCEPersistentDiskVolumeSource", "omitempty"),
        ("awsElasticBlockStore", "*AWSElasticBlockStoreVolumeSource", "omitempty"),
        ("gitRepo", "*GitRepoVolumeSource", "omitempty"),
        ("secret", "*SecretVolumeSource", "omitempty"),
        ("nfs", "*NFSVolumeSource", "omitempty"),
        ("iscsi", "*ISCSIVolumeSource", "omitempty"),
        ("glusterfs", "*GlusterfsVolumeSource", "omitempty"),
        ("persistentVolumeClaim", "*PersistentVolumeClaimVolumeSource", "omitempty"),
        ("rbd", "*RBDVolumeSource", "omitempty"),
        ("flexVolume", "*FlexVolumeSource", "omitempty"),
        ("cinder", "*CinderVolumeSource", "omitempty"),
        ("cephfs", "*CephFSVolumeSource", "omitempty"),
        ("flocker", "*FlockerVolumeSource", "omitempty"),
        ("downwardAPI", "*DownwardAPIVolumeSource", "omitempty"),
        ("fc", "*FCVolumeSource", "omitempty"),
        ("azureFile", "*AzureFileVolumeSource", "omitempty"),
        ("configMap", "*ConfigMapVolumeSource", "omitempty"),
        ("vsphereVolume", "*VsphereVirtualDiskVolumeSource", "omitempty"),
        ("quobyte", "*QuobyteVolumeSource", "omitempty"),
        ("azureDisk", "*AzureDiskVolumeSource", "omitempty"),
        ("photonPersistentDisk", "*PhotonPersistentDiskVolumeSource", "omitempty"),
        ("projected", "*ProjectedVolumeSource", "omitempty"),
        ("portworxVolume", "*PortworxVolumeSource", "omitempty"),
        ("scaleIO", "*ScaleIOVolumeSource", "omitempty"),
        ("storageos", "*StorageOSVolumeSource", "omitempty"),
        ("csi", "*CSIVolumeSource", "omitempty"),
        ("ephemeral", "*EphemeralVolumeSource", "omitempty"),
        ("image", "*ImageVolumeSource", "omitempty"),
    ),
    "VolumeDevice": (
        ("name", "string", ""),
        ("devicePath", "string", ""),
    ),
    "VolumeMount": (
        ("name", "string", ""),
        ("readOnly", "bool", "omitempty"),
        ("recursiveReadOnly", "*string", "omitempty"),
        ("mountPath", "string", ""),
        ("subPath", "string", "omitempty"),
        ("mountPropagation", "*string", "omitempty"),
        ("subPathExpr", "string", "omitempty"),
    ),
    "VolumeProjection": (
        ("secret", "*SecretProjection", "omitempty"),
        ("downwardAPI", "*DownwardAPIProjection", "omitempty"),
        ("configMap", "*ConfigMapProjection", "omitempty"),
        ("serviceAccountToken", "*ServiceAccountTokenProjection", "omitempty"),
        ("clusterTrustBundle", "*ClusterTrustBundleProjection", "omitempty"),
        ("podCertificate", "*PodCertificateProjection", "omitempty"),
    ),
    "VolumeResourceRequirements": (
        ("limits", "map[]Quantity", "omitempty"),
        ("requests", "map[]Quantity", "omitempty"),
    ),
    "VsphereVirtualDiskVolumeSource": (
        ("volumePath", "string", ""),
        ("fsType", "string", "omitempty"),
        ("storagePolicyName", "string", "omitempty"),
        ("storagePolicyID", "string", "omitempty"),
    ),
    "WeightedPodAffinityTerm": (
        ("weight", "int", ""),
        ("podAffinityTerm", "PodAffinityTerm", ""),
    ),
    "WindowsSecurityContextOptions": (
        ("gmsaCredentialSpecName", "*string", "omitempty"),
        ("gmsaCredentialSpec", "*string", "omitempty"),
        ("runAsUserName", "*string", "omitempty"),
        ("hostProcess", "*bool", "omitempty"),
    ),
}

_OPENSANDBOX_STRUCTS: Final[dict[str, tuple[tuple[str, str, str], ...]]] = {
    # k8s.io/api v0.33 core/v1 PodTemplateSpec (metadata, then spec; both struct values, so
    # omitempty never drops them) and apimachinery v0.33 ObjectMeta, whose creationTimestamp
    # is omitempty only: a zero time is written as null.
    "v1.PodTemplateSpec": (
        ("metadata", "v1.ObjectMeta@0.33", "omitempty"),
        ("spec", "PodSpec", "omitempty"),
    ),
    "v1.ObjectMeta@0.33": tuple(
        ("creationTimestamp", "Time", "omitempty") if field[0] == "creationTimestamp" else field
        for field in _CORE_STRUCTS["ObjectMeta"]
    ),
}

_STRUCTS: Final = {**_SANDBOX_STRUCTS, **_CORE_STRUCTS, **_OPENSANDBOX_STRUCTS}
_FIELD_NAMES: Final = {name: frozenset(f[0] for f in fields) for name, fields in _STRUCTS.items()}
