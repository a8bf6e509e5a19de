"""Shared building blocks of the API types: the Struct base, metadata, conditions, the markers
that shape a CRD schema, and how a kind describes its CRD.

Every kind is a msgspec Struct whose Python field names are snake_case and whose wire names are
the Kubernetes camelCase (``rename="camel"``; a name that camelCase cannot spell, such as
``podIPs``, is given with ``msgspec.field(name=...)``). Fields that the API leaves optional are
``T | None = None`` and are omitted when encoded (``omit_defaults``), so an object we encode
carries what a Go controller would serialise with ``omitempty``.

A scalar Python default that is not ``None`` is also the CRD's structural ``default:`` (the
generator in :mod:`api.crd` emits it), so the type and the CRD can never disagree about a
default. A field that has no CRD default but needs a Python value must therefore use ``None``.
Because of ``omit_defaults`` such a field is left out when it holds its default; the API server
puts it back when it defaults the object, so nothing is lost on the way through the server.

msgspec does not inherit ``kw_only`` from a base class, so every Struct here that puts a required
field after an optional one declares ``kw_only=True`` itself. And msgspec drops the ``Meta`` of a
Struct that is a member of a union: annotate an optional struct field as
``Annotated[Inner | None, cel(...)] = None``, not ``Annotated[Inner, cel(...)] | None`` (the CRD
generator refuses the latter rather than lose the rule).

The markers below carry the OpenAPI vocabulary that Python types cannot express:

* :data:`Embedded` — an embedded Kubernetes object we do not model field by field (PodSpec,
  PVCSpec, NetworkPolicy rules): a free-form object marked ``x-kubernetes-preserve-unknown-fields``.
* :data:`IntOrString` — ``x-kubernetes-int-or-string`` (e.g. ``maxUnavailable: 25%``).
* :data:`DateTime` — an RFC 3339 string with ``format: date-time``, kept as the string the client
  wrote so that it round-trips byte for byte.
* :data:`Int32` / :data:`Int64` — ``format: int32`` / ``int64``, as controller-gen writes them.
* :data:`ATOMIC`, :data:`LIST_SET`, :func:`list_map` — ``x-kubernetes-list-type`` (and map keys).
* :func:`cel` — ``x-kubernetes-validations`` rules.

:func:`json_type` names a JSON value's type as a schema does (``integer``, ``object``...); the
CRD generator and the development cluster's schema validation both use it.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

__all__ = [
    "ATOMIC",
    "CONDITION_REASON_PATTERN",
    "CONDITION_TYPE_PATTERN",
    "LIST_SET",
    "Condition",
    "DateTime",
    "Embedded",
    "Int32",
    "Int64",
    "IntOrString",
    "KindInfo",
    "ObjectMeta",
    "OwnerReference",
    "PrinterColumn",
    "Resource",
    "ScaleSubresource",
    "Spec",
    "cel",
    "json_type",
    "list_map",
]


class Spec(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """Base of every spec/status struct: camelCase on the wire, defaults omitted."""


Embedded = Annotated[
    dict[str, Any],
    msgspec.Meta(extra_json_schema={"x-kubernetes-preserve-unknown-fields": True}),
]
"""An embedded Kubernetes object (e.g. a PodSpec) kept as JSON; the CRD does not prune it."""

IntOrString = Annotated[
    int | str,
    msgspec.Meta(extra_json_schema={"x-kubernetes-int-or-string": True}),
]
"""A count or a percentage (``3`` or ``"25%"``), like Go's ``intstr.IntOrString``."""

DateTime = Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"})]
"""An RFC 3339 timestamp, kept as the string the client wrote so that it round-trips unchanged."""

Int32 = Annotated[int, msgspec.Meta(extra_json_schema={"format": "int32"})]
Int64 = Annotated[int, msgspec.Meta(extra_json_schema={"format": "int64"})]

ATOMIC = msgspec.Meta(extra_json_schema={"x-kubernetes-list-type": "atomic"})
"""``+listType=atomic``: the list is replaced whole by a server-side apply."""

LIST_SET = msgspec.Meta(extra_json_schema={"x-kubernetes-list-type": "set"})
"""``+listType=set``: scalar items, each at most once."""


def list_map(*keys: str) -> msgspec.Meta:
    """``+listType=map`` keyed by ``keys``: items are unique by those fields."""
    return msgspec.Meta(
        extra_json_schema={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": list(keys),
        }
    )


def cel(rule: str, message: str, *more: tuple[str, str]) -> msgspec.Meta:
    """``x-kubernetes-validations`` rules, put on the node they constrain (a struct field): one
    ``rule`` with its ``message``, and any ``more`` as (rule, message) pairs, in that order."""
    rules = [(rule, message), *more]
    return msgspec.Meta(
        extra_json_schema={
            "x-kubernetes-validations": [{"message": m, "rule": r} for r, m in rules]
        }
    )


def json_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


class OwnerReference(Spec, kw_only=True):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Spec, kw_only=True):
    """metav1.ObjectMeta: the fields a client may read or send (the CRD schema says only
    ``type: object``; the API server checks metadata itself)."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    managed_fields: list[Embedded] | None = None


class Condition(Spec, kw_only=True):
    """Condition contains details for one aspect of the current state of this API Resource."""

    type: Annotated[str, msgspec.Meta(max_length=316, pattern=CONDITION_TYPE_PATTERN)]
    status: Literal["True", "False", "Unknown"]
    observed_generation: Annotated[Int64, msgspec.Meta(ge=0)] | None = None
    last_transition_time: DateTime
    reason: Annotated[
        str, msgspec.Meta(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    ]
    message: Annotated[str, msgspec.Meta(max_length=32768)]


class PrinterColumn(msgspec.Struct, frozen=True, kw_only=True):
    """One ``additionalPrinterColumns`` entry."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    priority: int = 0
    description: str | None = None


class ScaleSubresource(msgspec.Struct, frozen=True, kw_only=True):
    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = ".status.selector"


class KindInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a CRD says about a kind beyond its schema."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...] = ()
    status_subresource: bool = True
    scale: ScaleSubresource | None = None
    printer_columns: tuple[PrinterColumn, ...] = ()
    validations: tuple[tuple[str, str], ...] = ()
    """``x-kubernetes-validations`` at the root of the schema, as (rule, message) pairs: the
    rules that read ``self.metadata`` (of which CEL sees ``name`` and ``generateName``) beside
    the spec. A rule about one field goes on that field instead (:func:`cel`)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


class Resource(Spec, kw_only=True):
    """Base of the seven top-level kinds; a subclass sets ``KIND`` and its spec/status.

    ``apiVersion`` and ``kind`` fill themselves in from ``KIND`` when left empty, so an object
    built in Python encodes as a complete request body.
    """

    KIND: ClassVar[KindInfo]

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)

    def __post_init__(self) -> None:
        if not self.api_version:
            self.api_version = self.KIND.api_version
        if not self.kind:
            self.kind = self.KIND.kind
