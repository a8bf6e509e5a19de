"""ObjectMeta rules shared by every resource: system fields, names, labels, finalizers, owners.

Pure functions over JSON dicts that return :class:`~devtools.cluster.apirules.errors.Cause` lists;
the write pipeline turns a non-empty list into a 422 Invalid. Messages are the ones
apimachinery's ``api/validation/objectmeta.go`` and ``util/validation`` produce, because clients
and people grep for them.

- **Names.** ``generateName`` gives ``prefix[:58]`` plus 5 characters of
  ``bcdfghjklmnpqrstvwxz2456789`` (``storage/names/generate.go``, ``util/rand``).
- **System fields.** ``uid`` is a UUID4; ``creationTimestamp`` is RFC 3339 in whole seconds
  with ``Z``. An update can never change uid, creationTimestamp, deletionTimestamp, name or
  namespace (``rest.BeforeUpdate`` copies what is missing, ``ValidateObjectMetaUpdate`` rejects
  what differs).
- **Finalizers.** None may be added once ``deletionTimestamp`` is set; ``orphan`` and
  ``foregroundDeletion`` exclude each other.
- **Owner references.** Every field required; at most one ``controller: true``.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from random import Random
from typing import Any

from devtools.cluster.apirules.errors import (
    Cause,
    field_forbidden,
    field_invalid,
    field_required,
)

__all__ = [
    "FINALIZER_FOREGROUND",
    "FINALIZER_ORPHAN",
    "GENERATE_ALPHABET",
    "SYSTEM_FIELDS",
    "dns1035_label_errors",
    "dns1123_label_errors",
    "dns1123_subdomain_errors",
    "generate_name",
    "new_uid",
    "now_rfc3339",
    "path_segment_errors",
    "qualified_name_errors",
    "validate_object_meta",
    "validate_object_meta_update",
]

FINALIZER_ORPHAN = "orphan"
FINALIZER_FOREGROUND = "foregroundDeletion"
GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_NAME = 63
_RANDOM_LENGTH = 5
_MAX_GENERATED_PREFIX = _MAX_NAME - _RANDOM_LENGTH

SYSTEM_FIELDS = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")


def new_uid() -> str:
    return str(uuid.uuid4())


def now_rfc3339(at: datetime | None = None) -> str:
    moment = at or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def generate_name(prefix: str, rng: Random) -> str:
    """SimpleNameGenerator: the prefix cut to 58 characters plus five random characters."""
    suffix = "".join(rng.choice(GENERATE_ALPHABET) for _ in range(_RANDOM_LENGTH))
    return prefix[:_MAX_GENERATED_PREFIX] + suffix


# -- name formats (apimachinery util/validation) --------------------------------------------

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + r")*"
_DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = r"(" + _QUALIFIED_NAME_PART + r")?"

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{_DNS1123_LABEL}')"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_DNS1123_SUBDOMAIN}')"
)
_DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    f"'abc-123', regex used for validation is '{_DNS1035_LABEL}')"
)
_QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    f"used for validation is '{_QUALIFIED_NAME_PART}')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{_LABEL_VALUE}')"
)


def _max_len(limit: int) -> str:
    return f"must be no more than {limit} characters"


# The name checks below are pure functions of a string, run on every write for its name and
# on each label and annotation key and value, which repeat from write to write: their answers
# for strings are remembered (as tuples; each caller gets a list of its own).
_REMEMBERED = 8192


def _check(
    value: str, pattern: str, message: str, limit: int, *, prefix: bool = False
) -> list[str]:
    """Errors for ``value``; with ``prefix`` (generateName) a trailing '-' is allowed."""
    if type(value) is str:
        return list(_remembered_check(value, pattern, message, limit, prefix))
    return _check_once(value, pattern, message, limit, prefix)


@functools.lru_cache(maxsize=_REMEMBERED)
def _remembered_check(
    value: str, pattern: str, message: str, limit: int, prefix: bool
) -> tuple[str, ...]:
    return tuple(_check_once(value, pattern, message, limit, prefix))


def _check_once(value: str, pattern: str, message: str, limit: int, prefix: bool) -> list[str]:
    if prefix:
        value = value.removesuffix("-")
        if not value:
            return []
    errors = []
    if len(value) > limit:
        errors.append(_max_len(limit))
    if not re.fullmatch(pattern, value):
        errors.append(message)
    return errors


def dns1123_label_errors(value: str, prefix: bool = False) -> list[str]:
    return _check(value, _DNS1123_LABEL, _DNS1123_LABEL_MSG, 63, prefix=prefix)


def dns1123_subdomain_errors(value: str, prefix: bool = False) -> list[str]:
    return _check(value, _DNS1123_SUBDOMAIN, _DNS1123_SUBDOMAIN_MSG, 253, prefix=prefix)


def dns1035_label_errors(value: str, prefix: bool = False) -> list[str]:
    return _check(value, _DNS1035_LABEL, _DNS1035_LABEL_MSG, 63, prefix=prefix)


def path_segment_errors(value: str, prefix: bool = False) -> list[str]:
    """path.IsValidPathSegmentName: the only rule for names of e.g. Events."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    for bad in ("/", "%"):
        if bad in value:
            return [f"may not contain '{bad}'"]
    return []


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: ``[prefix/]name`` with a DNS-subdomain prefix (label keys, finalizers)."""
    if type(value) is str:
        return list(_remembered_qualified_name_errors(value))
    return _qualified_name_errors(value)


@functools.lru_cache(maxsize=_REMEMBERED)
def _remembered_qualified_name_errors(value: str) -> tuple[str, ...]:
    return tuple(_qualified_name_errors(value))


def _qualified_name_errors(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        errors = []
    elif len(parts) == 2:
        prefix_part, name = parts
        if not prefix_part:
            errors = ["prefix part must be non-empty"]
        else:
            errors = [f"prefix part {e}" for e in dns1123_subdomain_errors(prefix_part)]
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
            "or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
            "[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. "
            "'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    else:
        if len(name) > 63:
            errors.append("name part " + _max_len(63))
        if not re.fullmatch(_QUALIFIED_NAME_PART, name):
            errors.append(_QUALIFIED_NAME_MSG)
    return errors


def _label_value_errors(value: str) -> list[str]:
    if type(value) is str:
        return list(_remembered_label_value_errors(value))
    return _label_value_errors_once(value)


@functools.lru_cache(maxsize=_REMEMBERED)
def _remembered_label_value_errors(value: str) -> tuple[str, ...]:
    return tuple(_label_value_errors_once(value))


def _label_value_errors_once(value: str) -> list[str]:
    errors = []
    if len(value) > 63:
        errors.append(_max_len(63))
    if not re.fullmatch(_LABEL_VALUE, value):
        errors.append(_LABEL_VALUE_MSG)
    return errors


def _validate_labels(labels: Any, field: str) -> list[Cause]:
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [field_invalid(field, labels, "must be a map of strings")]
    causes: list[Cause] = []
    for key, value in labels.items():
        causes += [field_invalid(field, key, e) for e in qualified_name_errors(key)]
        if not isinstance(value, str):
            causes.append(field_invalid(field, value, "must be a string"))
            continue
        causes += [field_invalid(field, value, e) for e in _label_value_errors(value)]
    return causes


def _validate_annotations(annotations: Any, field: str) -> list[Cause]:
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return [field_invalid(field, annotations, "must be a map of strings")]
    causes: list[Cause] = []
    total = 0
    for key, value in annotations.items():
        causes += [field_invalid(field, key, e) for e in qualified_name_errors(key.lower())]
        total += len(key) + len(str(value))
    if total > 256 * 1024:
        causes.append(Cause("FieldValueTooLong", "Too long: must have at most 262144 bytes", field))
    return causes


def _validate_finalizers(finalizers: Any, field: str) -> list[Cause]:
    if finalizers is None:
        return []
    if not isinstance(finalizers, list):
        return [field_invalid(field, finalizers, "must be a list of strings")]
    causes: list[Cause] = []
    for i, name in enumerate(finalizers):
        for error in qualified_name_errors(str(name)):
            causes.append(field_invalid(f"{field}[{i}]", name, error))
    if FINALIZER_ORPHAN in finalizers and FINALIZER_FOREGROUND in finalizers:
        causes.append(
            field_invalid(
                field,
                finalizers,
                f"finalizer {FINALIZER_ORPHAN} and {FINALIZER_FOREGROUND} cannot be both set",
                raw_value=_go_string_slice(finalizers),
            )
        )
    return causes


def _go_string_slice(values: Sequence[Any]) -> str:
    return "[]string{" + ", ".join(f'"{v}"' for v in values) + "}"


def _validate_owner_references(refs: Any, field: str) -> list[Cause]:
    if refs is None:
        return []
    if not isinstance(refs, list):
        return [field_invalid(field, refs, "must be a list")]
    causes: list[Cause] = []
    controllers = []
    for i, ref in enumerate(refs):
        here = f"{field}[{i}]"
        if not isinstance(ref, Mapping):
            causes.append(field_invalid(here, ref, "must be an object"))
            continue
        if not ref.get("apiVersion"):
            causes.append(field_invalid(f"{here}.apiVersion", "", "version must not be empty"))
        if not ref.get("kind"):
            causes.append(field_invalid(f"{here}.kind", "", "kind must not be empty"))
        if not ref.get("name"):
            causes.append(field_invalid(f"{here}.name", "", "name must not be empty"))
        if not ref.get("uid"):
            causes.append(field_invalid(f"{here}.uid", "", "uid must not be empty"))
        if ref.get("kind") == "List":
            causes.append(field_invalid(f"{here}.kind", "List", "kind must not be 'List'"))
        if ref.get("controller") is True:
            controllers.append(f"{ref.get('kind')}/{ref.get('name')}")
    if len(controllers) > 1:
        causes.append(
            field_invalid(
                field,
                refs,
                'Only one reference can have Controller set to true. Found "true" in '
                "references for " + " and ".join(controllers),
                raw_value="[]v1.OwnerReference{...}",
            )
        )
    return causes


def validate_object_meta(
    meta: Mapping[str, Any],
    *,
    namespaced: bool,
    name_errors: Any = dns1123_subdomain_errors,
) -> list[Cause]:
    """ValidateObjectMeta for a create (and the shared part of an update)."""
    causes: list[Cause] = []
    name = meta.get("name") or ""
    generate = meta.get("generateName") or ""
    if generate:
        causes += [
            field_invalid("metadata.generateName", generate, e) for e in name_errors(generate, True)
        ]
    if not name:
        causes.append(field_required("metadata.name", "name or generateName is required"))
    else:
        causes += [field_invalid("metadata.name", name, e) for e in name_errors(name, False)]
    if namespaced and not meta.get("namespace"):
        causes.append(field_required("metadata.namespace"))
    if not namespaced and meta.get("namespace"):
        causes.append(field_forbidden("metadata.namespace", "not allowed on this type"))
    causes += _validate_labels(meta.get("labels"), "metadata.labels")
    causes += _validate_annotations(meta.get("annotations"), "metadata.annotations")
    causes += _validate_owner_references(meta.get("ownerReferences"), "metadata.ownerReferences")
    causes += _validate_finalizers(meta.get("finalizers"), "metadata.finalizers")
    return causes


def _immutable(field: str, new: Any, old: Any) -> list[Cause]:
    if new == old:
        return []
    return [field_invalid(field, new, "field is immutable")]


def validate_object_meta_update(
    new: Mapping[str, Any], old: Mapping[str, Any], *, namespaced: bool, name_errors: Any
) -> list[Cause]:
    """ValidateObjectMetaUpdate: what an update may not do to metadata."""
    causes = validate_object_meta(new, namespaced=namespaced, name_errors=name_errors)
    if old.get("deletionTimestamp"):
        added = [f for f in new.get("finalizers") or [] if f not in (old.get("finalizers") or [])]
        if added:
            causes.append(
                field_forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, found new "
                    f"finalizers {_go_string_slice(added)}",
                )
            )
    if int(new.get("generation") or 0) < int(old.get("generation") or 0):
        causes.append(
            field_invalid("metadata.generation", new.get("generation"), "must not be decremented")
        )
    for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp"):
        causes += _immutable(f"metadata.{key}", new.get(key), old.get(key))
    return causes


def as_str_dict(value: Any) -> dict[str, str]:
    """Labels or annotations as a dict of strings (empty when absent or malformed)."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}
