"""Kubernetes resource quantities (``500m``, ``1Gi``, ``129e6``): the amount one stands for, and
the text Go's ``resource.Quantity`` writes for it.

Two readers need a quantity differently. A comparison of requests wants the exact amount
(:func:`parse_quantity`, a :class:`~decimal.Decimal` in base units). A hash of a template as
Go marshals it wants Go's text, quirks included (:func:`canonical_quantity`): apimachinery's
``ParseQuantity`` then ``MarshalJSON`` (k8s.io/apimachinery pkg/api/resource), which rounds up
to the nanounit, caps binary amounts at 2^63-1 and keeps some input verbatim. Both read the same
suffixes. A quantity served as a JSON number is read as the text Go writes for that number
(:func:`go_float`), since the API server re-encodes custom resources with Go's encoder.

Pure and dependency-free, like the rest of the API vocabulary.
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from typing import Final

__all__ = [
    "QUANTITY_ARITHMETIC",
    "QuantityError",
    "canonical_quantity",
    "go_float",
    "parse_quantity",
]


class QuantityError(ValueError):
    """A value that is not a Kubernetes resource quantity."""


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
"""Decimal SI suffix -> power of ten."""

_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
"""Binary SI suffix -> power of two."""


# --- the amount ----------------------------------------------------------------------------------

_QUANTITY: Final = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)"
)

QUANTITY_ARITHMETIC: Final = Context(prec=64, Emax=MAX_EMAX, Emin=MIN_EMIN)
"""Exact for every quantity a request can hold, and passed explicitly, so that no thread's
decimal context changes a result. Sums of parsed quantities belong in it too."""


def parse_quantity(value: object) -> Decimal:
    """The amount a Kubernetes quantity stands for, in base units: ``"500m"`` → 0.5,
    ``"1Gi"`` → 1073741824, ``"129e6"`` → 129000000. A JSON number is taken as it is (an
    embedded template keeps ``cpu: 1`` as a number). Anything else raises
    :class:`QuantityError`.

    Exact, unlike Go's ``Quantity``: no rounding to the nanounit and no cap on binary
    amounts."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        return Decimal(repr(value))
    match = _QUANTITY.fullmatch(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    number, suffix = Decimal(match["number"]), match["suffix"]
    try:
        if suffix in _BINARY_SUFFIXES:
            return QUANTITY_ARITHMETIC.multiply(number, Decimal(2 ** _BINARY_SUFFIXES[suffix]))
        if suffix in _DECIMAL_SUFFIXES:
            return number.scaleb(_DECIMAL_SUFFIXES[suffix], QUANTITY_ARITHMETIC)
        return number.scaleb(int(suffix[1:]), QUANTITY_ARITHMETIC)
    except (ArithmeticError, ValueError):  # an exponent out of any range
        raise QuantityError(f"{value!r} is not a quantity") from None


# --- Go's text -----------------------------------------------------------------------------------

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


def canonical_quantity(value: str | int | float) -> str:
    """The text Go's ``resource.Quantity`` marshals to after unmarshalling ``value`` from JSON:
    ``"1024Mi"`` → ``"1Gi"``, ``"0.5"`` → ``"500m"``, ``1`` → ``"1"``. Text that passes the
    parser's cheap canonical test is kept verbatim (``"1.500"`` stays, while ``"1000m"`` becomes
    ``"1"``). Input Go rejects is returned unchanged: Go would fail the whole marshal, and a
    caller that hashes a template would rather hash it as it is."""
    if isinstance(value, bool):
        return str(value).lower()
    text = str(value) if isinstance(value, int) else value
    if isinstance(text, float):
        text = go_float(text)
    text = _go_trim_space(text)
    try:
        return _canonical_quantity(text)
    except _BadQuantity:
        return text


def go_float(f: float) -> str:
    """A float64 as Go's ``encoding/json`` writes it: shortest round-trip digits, fixed notation
    unless the magnitude is below 1e-6 or at least 1e21, ``e-7`` rather than ``e-07``. The API
    server writes a custom resource's numbers so, hence the text a Go controller reads."""
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


def _go_trim_space(s: str) -> str:
    """Go's ``strings.TrimSpace``, which the Quantity decoder applies first."""

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
