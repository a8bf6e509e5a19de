"""The built-in resources the development cluster serves, and their write rules.

One :class:`~devtools.cluster.apirules.strategy.Strategy` subclass per kind that differs from the
generic registry, each citing the upstream strategy it follows. What is deliberately missing:
admission plugins that need a controller we do not run (the PVC protection finalizer, the
ServiceAccount token volume), Event TTLs, and the Endpoints/EndpointSlices of Services.

What a deployment applies besides (ServiceAccounts, RBAC, Deployments, StatefulSets,
PodDisruptionBudgets) is stored and validated but never acted on: see
:class:`WorkloadStrategy`.

core/v1 and events.k8s.io/v1 Events are one set of objects (storage ``events``), stored in the
core/v1 shape; :func:`event_to_events_v1` / :func:`event_from_events_v1` convert the fields the
two versions name differently.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import re
from typing import TYPE_CHECKING, Any

from api.objects import Json
from devtools.cluster.apirules import errors
from devtools.cluster.apirules.crds import CRDStrategy
from devtools.cluster.apirules.errors import (
    Cause,
    field_forbidden,
    field_invalid,
    field_not_supported,
    field_required,
)
from devtools.cluster.apirules.meta import (
    dns1035_label_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    path_segment_errors,
    qualified_name_errors,
)
from devtools.cluster.apirules.pods import PodStrategy, default_pod_spec
from devtools.cluster.apirules.resources import ResourceType
from devtools.cluster.apirules.selectors import LabelSelector, SelectorError, field_selectors_for
from devtools.cluster.apirules.storageclasses import admit_default_class, storage_class_type
from devtools.cluster.apirules.strategy import Strategy, WriteContext

if TYPE_CHECKING:
    from devtools.cluster.apirules.resources import Registry

__all__ = [
    "SERVICE_CIDR",
    "builtin_types",
    "event_from_events_v1",
    "event_to_events_v1",
]

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
_NODE_PORTS = range(30000, 32768)


# -- namespaces --------------------------------------------------------------------------------


class NamespaceStrategy(Strategy):
    """``registry/core/namespace``: spec.finalizers ["kubernetes"], phase Active/Terminating."""

    return_deleted_object = True

    def name_errors(self, name: str, prefix: bool) -> list[str]:
        return dns1123_label_errors(name, prefix)

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        name = (obj.get("metadata") or {}).get("name")
        if name:
            labels = obj["metadata"].setdefault("labels", {}) or {}
            labels["kubernetes.io/metadata.name"] = name
            obj["metadata"]["labels"] = labels
        return []

    def prepare_for_create(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> None:
        obj["spec"] = {"finalizers": ["kubernetes"]}
        super().prepare_for_create(rtype, obj, ctx)

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        return {"phase": "Active"}

    def prepare_for_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> None:
        new["spec"] = copy.deepcopy(old.get("spec") or {})
        super().prepare_for_update(rtype, new, old, ctx)


# -- services ----------------------------------------------------------------------------------


def _allocate_cluster_ip(ctx: WriteContext) -> str:
    used = {
        ip
        for svc in ctx.store.items("services")
        for ip in (svc.get("spec") or {}).get("clusterIPs") or []
    }
    used |= set(ctx.allocations.get("cluster_ips", ()))
    hosts = SERVICE_CIDR.num_addresses - 2
    for _ in range(64):
        candidate = str(SERVICE_CIDR.network_address + ctx.rng.randrange(10, hosts))
        if candidate not in used:
            ctx.allocations.setdefault("cluster_ips", set()).add(candidate)
            return candidate
    for offset in range(10, hosts):  # pragma: no cover - a nearly full range
        candidate = str(SERVICE_CIDR.network_address + offset)
        if candidate not in used:
            return candidate
    raise errors.internal_error("failed to allocate a serviceIP: range is full")


def _allocate_node_port(ctx: WriteContext) -> int:
    used = {
        port.get("nodePort")
        for svc in ctx.store.items("services")
        for port in (svc.get("spec") or {}).get("ports") or []
    }
    while True:
        candidate = ctx.rng.choice(_NODE_PORTS)
        if candidate not in used:
            return candidate


class ServiceStrategy(Strategy):
    """``registry/core/service``: clusterIP allocation, port defaults, DNS-1035 names."""

    return_deleted_object = True

    def name_errors(self, name: str, prefix: bool) -> list[str]:
        return dns1035_label_errors(name, prefix)

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return []
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                port.setdefault("targetPort", port.get("port"))
        if spec["type"] in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        if spec["type"] == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        if spec["type"] != "ExternalName":
            spec.setdefault("internalTrafficPolicy", "Cluster")
        return []

    def _allocate(self, spec: Json, old_spec: Json | None, ctx: WriteContext) -> None:
        if spec.get("type") == "ExternalName":
            return
        if old_spec is not None:
            for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
                if not spec.get(key) and old_spec.get(key):
                    spec[key] = copy.deepcopy(old_spec[key])
        ip = spec.get("clusterIP") or ""
        if not ip:
            ip = _allocate_cluster_ip(ctx)
        spec["clusterIP"] = ip
        spec.setdefault("clusterIPs", [ip])
        if ip != "None":
            spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            old_ports = {
                (p.get("port"), p.get("protocol")): p.get("nodePort")
                for p in (old_spec or {}).get("ports") or []
            }
            for port in spec.get("ports") or []:
                if not port.get("nodePort"):
                    kept = old_ports.get((port.get("port"), port.get("protocol")))
                    port["nodePort"] = kept or _allocate_node_port(ctx)

    def prepare_for_create(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> None:
        super().prepare_for_create(rtype, obj, ctx)
        spec = obj.get("spec")
        if isinstance(spec, dict) and not self._spec_causes(spec):
            self._allocate(spec, None, ctx)

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        return {"loadBalancer": {}}

    def prepare_for_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> None:
        super().prepare_for_update(rtype, new, old, ctx)
        spec = new.get("spec")
        if isinstance(spec, dict):
            self._allocate(spec, old.get("spec") or {}, ctx)

    def _spec_causes(self, spec: Any) -> list[Cause]:
        if not isinstance(spec, dict):
            return [field_required("spec")]
        causes: list[Cause] = []
        kinds = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
        if spec.get("type") not in kinds:
            causes.append(field_not_supported("spec.type", spec.get("type"), kinds))
        ports = spec.get("ports") or []
        if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
            causes.append(field_required("spec.ports"))
        for i, port in enumerate(ports):
            if not isinstance(port, dict) or not isinstance(port.get("port"), int):
                causes.append(field_required(f"spec.ports[{i}].port"))
            elif not 1 <= port["port"] <= 65535:
                causes.append(
                    field_invalid(
                        f"spec.ports[{i}].port",
                        port["port"],
                        "must be between 1 and 65535, inclusive",
                    )
                )
            if len(ports) > 1 and isinstance(port, dict) and not port.get("name"):
                causes.append(field_required(f"spec.ports[{i}].name"))
        ip = spec.get("clusterIP")
        if ip and ip != "None":
            try:
                if ipaddress.ip_address(ip) not in SERVICE_CIDR:
                    causes.append(
                        field_invalid(
                            "spec.clusterIPs",
                            [ip],
                            f"failed to allocate IP {ip}: the provided IP ({ip}) is not in the "
                            "valid range. The range of valid IPs is 10.96.0.0/12",
                        )
                    )
            except ValueError:
                causes.append(field_invalid("spec.clusterIPs[0]", ip, "must be a valid IP address"))
        return causes

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return super().validate(rtype, obj, ctx) + self._spec_causes(obj.get("spec"))

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx) + self._spec_causes(new.get("spec"))
        old_ip = (old.get("spec") or {}).get("clusterIP")
        new_ip = (new.get("spec") or {}).get("clusterIP")
        if old_ip and new_ip != old_ip and (new.get("spec") or {}).get("type") != "ExternalName":
            causes.append(field_invalid("spec.clusterIPs[0]", new_ip, "may not change once set"))
        return causes


# -- persistent volume claims ------------------------------------------------------------------


class PersistentVolumeClaimStrategy(Strategy):
    return_deleted_object = True

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("volumeMode", "Filesystem")
        return []

    def prepare_for_create(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> None:
        admit_default_class(obj, ctx)  # the DefaultStorageClass admission plugin
        super().prepare_for_create(rtype, obj, ctx)

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        return {"phase": "Pending"}

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        causes = super().validate(rtype, obj, ctx)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = {}
        if not spec.get("accessModes"):
            causes.append(field_required("spec.accessModes"))
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if storage is None:
            causes.append(field_required("spec.resources[storage]"))
        return causes

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx)
        new_spec = copy.deepcopy(new.get("spec") or {})
        old_spec = old.get("spec") or {}
        # Only a bound claim may grow its request; resources are otherwise immutable too.
        if (old.get("status") or {}).get("phase") == "Bound":
            new_spec["resources"] = copy.deepcopy(old_spec.get("resources"))
            for key in ("volumeAttributesClassName",):
                if key in old_spec:
                    new_spec[key] = old_spec[key]
                else:
                    new_spec.pop(key, None)
        if not old_spec.get("volumeName") and new_spec.get("volumeName"):
            new_spec.pop("volumeName")
        if new_spec != old_spec:
            causes.append(
                field_forbidden(
                    "spec",
                    "spec is immutable after creation except resources.requests and "
                    "volumeAttributesClassName for bound claims",
                )
            )
        return causes


# -- config maps and secrets -------------------------------------------------------------------

_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_CONFIG_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"


def _key_causes(data: Any, field: str) -> list[Cause]:
    if data is None:
        return []
    if not isinstance(data, dict):
        return [field_invalid(field, data, "must be a map")]
    causes = []
    for key in data:
        if not _CONFIG_KEY.fullmatch(key) or len(key) > 253:
            causes.append(
                field_invalid(
                    field,
                    key,
                    f"{_CONFIG_KEY_MSG} (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex "
                    "used for validation is '[-._a-zA-Z0-9]+')",
                )
            )
    return causes


def _immutable_data_causes(new: Json, old: Json, keys: tuple[str, ...]) -> list[Cause]:
    causes: list[Cause] = []
    if old.get("immutable") is True:
        for key in keys:
            if new.get(key) != old.get(key):
                causes.append(field_forbidden(key, "field is immutable when `immutable` is set"))
        if new.get("immutable") is not True:
            causes.append(
                field_forbidden("immutable", "field is immutable when `immutable` is set")
            )
    return causes


class ConfigMapStrategy(Strategy):
    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return (
            super().validate(rtype, obj, ctx)
            + _key_causes(obj.get("data"), "data")
            + _key_causes(obj.get("binaryData"), "binaryData")
        )

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        return (
            super().validate_update(rtype, new, old, ctx)
            + _key_causes(new.get("data"), "data")
            + _immutable_data_causes(new, old, ("data", "binaryData"))
        )


class SecretStrategy(Strategy):
    """Secret: ``stringData`` folds into base64 ``data`` on decode; ``type`` is immutable."""

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        obj.setdefault("type", "Opaque")
        data = obj.get("data")
        if data is not None and not isinstance(data, dict):
            raise errors.bad_request("json: cannot unmarshal data into Go struct field Secret.data")
        for key, value in (data or {}).items():
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise errors.bad_request(
                    f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data '
                    f"at input byte 0 (key {key!r}): {exc}"
                ) from None
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            merged = dict(data or {})
            for key, value in string_data.items():
                merged[key] = base64.b64encode(str(value).encode()).decode()
            obj["data"] = merged
        return []

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return super().validate(rtype, obj, ctx) + _key_causes(obj.get("data"), "data")

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx) + _key_causes(
            new.get("data"), "data"
        )
        if new.get("type") != old.get("type"):
            causes.append(field_invalid("type", new.get("type"), "field is immutable"))
        return causes + _immutable_data_causes(new, old, ("data",))


# -- events ------------------------------------------------------------------------------------

_EVENTS_V1_RENAMES = (
    # (core/v1 field, events.k8s.io/v1 field)
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("source", "deprecatedSource"),
)


def event_to_events_v1(obj: Json) -> Json:
    """A stored (core/v1) Event as events.k8s.io/v1 presents it. Only top-level keys change,
    so the result shares its nested values with ``obj`` (present() gives up ``obj``)."""
    out = dict(obj)
    for core, v1 in _EVENTS_V1_RENAMES:
        if core in out:
            out[v1] = out.pop(core)
    out["apiVersion"] = "events.k8s.io/v1"
    return out


def event_from_events_v1(obj: Json) -> Json:
    """An events.k8s.io/v1 Event in the stored (core/v1) shape; shares nested values with
    ``obj`` like :func:`event_to_events_v1`."""
    out = dict(obj)
    for core, v1 in _EVENTS_V1_RENAMES:
        if v1 in out:
            out[core] = out.pop(v1)
    out["apiVersion"] = "v1"
    return out


_EVENT_LIMITS = (("reportingInstance", 128), ("action", 128), ("reason", 128))
_NOTE_LENGTH_LIMIT = 1024
_EVENT_IMMUTABLE = (
    # ValidateEventUpdate's order; paths name the internal (core/v1) fields, as upstream's do
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
)


def _event_qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName, whose empty name fails both the emptiness and the pattern check."""
    if not value:
        return [
            "name part must be non-empty",
            qualified_name_errors("-")[-1],
        ]
    return qualified_name_errors(value)


def _legacy_event_causes(event: Json, controller_field: str) -> list[Cause]:
    """``legacyValidateEvent`` (pkg/apis/core/validation/events.go) on an Event in the stored
    (core/v1) shape; ``controller_field`` is how the request's version names the reporter."""
    causes: list[Cause] = []
    namespace = (event.get("metadata") or {}).get("namespace") or ""
    involved = event.get("involvedObject")
    involved_ns = str((involved if isinstance(involved, dict) else {}).get("namespace") or "")
    mismatch = field_invalid(
        "involvedObject.namespace", involved_ns, "does not match event.namespace"
    )
    if not event.get("eventTime"):
        if not involved_ns:
            if namespace not in ("", "default"):
                causes.append(mismatch)
        elif namespace != involved_ns:
            causes.append(mismatch)
        return causes
    if not involved_ns and namespace not in ("default", "kube-system"):
        causes.append(mismatch)
    controller = str(event.get("reportingComponent") or "")
    if not controller:
        causes.append(field_required(controller_field))
    causes += [
        field_invalid(controller_field, controller, e)
        for e in _event_qualified_name_errors(controller)
    ]
    for key, limit in _EVENT_LIMITS:
        value = str(event.get(key) or "")
        if not value:
            causes.append(field_required(key))
        if len(value.encode()) > limit:
            causes.append(field_invalid(key, "", f"can have at most {limit} characters"))
    if len(str(event.get("message") or "").encode()) > _NOTE_LENGTH_LIMIT:
        causes.append(
            field_invalid("message", "", f"can have at most {_NOTE_LENGTH_LIMIT} characters")
        )
    return causes


def _event_series_causes(event: Json) -> list[Cause]:
    series = event.get("series")
    if not isinstance(series, dict):
        return []
    causes: list[Cause] = []
    count = series.get("count")
    if not isinstance(count, int) or count < 2:
        causes.append(field_invalid("series.count", "", "should be at least 2"))
    if not series.get("lastObservedTime"):
        causes.append(field_required("series.lastObservedTime"))
    return causes


def _event_v1_create_causes(event: Json) -> list[Cause]:
    """What ``ValidateEventCreate`` adds for events.k8s.io/v1 (strict) on top of the legacy
    rules: a DNS-subdomain name, a sane series, eventTime, a Normal/Warning type, and none of
    the deprecated core/v1 fields."""
    meta = event.get("metadata") or {}
    causes = [
        field_invalid("metadata.name", meta["name"], e)
        for e in (dns1123_subdomain_errors(meta["name"]) if meta.get("name") else [])
    ]
    causes += _event_series_causes(event)
    if not event.get("eventTime"):
        causes.append(field_required("eventTime"))
    kind = event.get("type")
    if kind not in ("Normal", "Warning"):
        shown = "" if kind is None else kind
        causes.append(field_invalid("type", "", f"has invalid value: {shown}"))
    for key in ("firstTimestamp", "lastTimestamp"):
        if event.get(key):
            causes.append(field_invalid(key, "", "needs to be unset"))
    if event.get("count"):
        causes.append(field_invalid("count", "", "needs to be unset"))
    source = event.get("source")
    if isinstance(source, dict) and (source.get("component") or source.get("host")):
        causes.append(field_invalid("source", "", "needs to be unset"))
    return causes


def _event_v1_update_causes(new: Json, old: Json) -> list[Cause]:
    """What ``ValidateEventUpdate`` adds for events.k8s.io/v1: a changed series is validated,
    and nothing an Event says may change (eventTime only below a microsecond)."""
    causes = _event_series_causes(new) if new.get("series") != old.get("series") else []
    for key in _EVENT_IMMUTABLE:
        before, after = old.get(key), new.get(key)
        if key == "eventTime" and _micro_time(before) == _micro_time(after):
            continue
        if key == "count":
            before, after = before or 0, after or 0
        elif key != "eventTime":
            before, after = before or None, after or None
        if before != after:
            name = "reportingController" if key == "reportingComponent" else key
            causes.append(field_invalid(name, new.get(key), "field is immutable"))
    return causes


def _micro_time(value: Any) -> str:
    """A MicroTime to the microsecond (what an update of eventTime may not change)."""
    text = str(value or "")
    if "." not in text:
        return text.removesuffix("Z")
    whole, fraction = text.split(".", 1)
    digits = "".join(c for c in fraction if c.isdigit())
    return f"{whole}.{digits[:6].ljust(6, '0')}"


class EventStrategy(Strategy):
    """``registry/core/event``: ``ValidateEventCreate`` / ``ValidateEventUpdate`` for the
    request's version. core/v1 gets only the legacy rules (a namespace that matches the
    involved object's; with eventTime set, a reporter, action and reason within their limits);
    events.k8s.io/v1 adds the strict ones (eventTime required, type Normal or Warning, a valid
    series, the deprecated fields unset, a DNS-subdomain name, and immutability on update).
    The rules read the stored (core/v1) shape; an events.k8s.io/v1 body is converted first."""

    allow_create_on_update = True

    def name_errors(self, name: str, prefix: bool) -> list[str]:
        return path_segment_errors(name, prefix)

    @staticmethod
    def _internal(rtype: ResourceType, obj: Json) -> tuple[Json, bool, str]:
        if rtype.group == "events.k8s.io":
            return event_from_events_v1(obj), True, "reportingController"
        return obj, False, "reportingComponent"

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        event, strict, controller_field = self._internal(rtype, obj)
        causes = _legacy_event_causes(event, controller_field)
        if strict:
            causes += _event_v1_create_causes(event)
        # BeforeCreate checks the generic metadata only once the strategy's rules pass.
        return causes or super().validate(rtype, obj, ctx)

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        event, strict, controller_field = self._internal(rtype, new)
        causes = super().validate_update(rtype, new, old, ctx)
        causes += _legacy_event_causes(event, controller_field)
        if strict:
            causes += _event_v1_update_causes(event, self._internal(rtype, old)[0])
        return causes


# -- nodes, leases -----------------------------------------------------------------------------


class NodeStrategy(Strategy):
    """Nodes may carry status on create (the kubelet registers itself with it)."""

    def prepare_for_create(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> None:
        status = obj.get("status")
        super().prepare_for_create(rtype, obj, ctx)
        if status is not None:
            obj["status"] = status

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        return {}


def _lease_spec_causes(spec: Any) -> list[Cause]:
    """``ValidateLeaseSpec`` (pkg/apis/coordination/validation): a positive duration and
    non-negative transitions when set. (strategy and preferredHolder belong to the
    CoordinatedLeaderElection gate, off by default, and are not checked here.)"""
    if not isinstance(spec, dict):
        return []
    causes: list[Cause] = []
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and not isinstance(duration, bool) and duration <= 0:
        causes.append(
            field_invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")
        )
    transitions = spec.get("leaseTransitions")
    if isinstance(transitions, int) and not isinstance(transitions, bool) and transitions < 0:
        causes.append(
            field_invalid(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    return causes


class LeaseStrategy(Strategy):
    """``registry/coordination/lease``: ``ValidateLease`` / ``ValidateLeaseUpdate``."""

    allow_create_on_update = True

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return super().validate(rtype, obj, ctx) + _lease_spec_causes(obj.get("spec"))

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx)
        return causes + _lease_spec_causes(new.get("spec"))


# -- jobs --------------------------------------------------------------------------------------

_JOB_DELETE_WARNING = (
    "child pods are preserved by default when jobs are deleted; set "
    "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress "
    "this warning"
)


class JobStrategy(Strategy):
    """``registry/batch/job``: selector generation, template defaults, orphan-by-default."""

    tracks_generation = True
    default_orphan = True
    delete_warning = _JOB_DELETE_WARNING

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return []
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
            spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            default_pod_spec(template["spec"])
        return []

    def prepare_for_create(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> None:
        super().prepare_for_create(rtype, obj, ctx)
        spec = obj.get("spec")
        if not isinstance(spec, dict) or spec.get("manualSelector"):
            return
        uid = obj["metadata"]["uid"]
        name = obj["metadata"]["name"]
        generated = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        if spec.get("selector") is None:
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template = spec.setdefault("template", {})
        if isinstance(template, dict):
            meta = template.setdefault("metadata", {})
            labels = meta.setdefault("labels", {})
            for key, value in generated.items():
                labels.setdefault(key, value)

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        return {}

    def _spec_causes(self, spec: Any) -> list[Cause]:
        if not isinstance(spec, dict):
            return [field_required("spec")]
        causes: list[Cause] = []
        template = spec.get("template") or {}
        pod_spec = template.get("spec") if isinstance(template, dict) else None
        if not isinstance(pod_spec, dict) or not pod_spec.get("containers"):
            causes.append(field_required("spec.template.spec.containers"))
        policy = (pod_spec or {}).get("restartPolicy")
        if policy not in ("OnFailure", "Never"):
            causes.append(
                field_not_supported(
                    "spec.template.spec.restartPolicy", policy, ("OnFailure", "Never")
                )
            )
        for key in ("parallelism", "completions", "backoffLimit"):
            value = spec.get(key)
            if isinstance(value, int) and value < 0:
                causes.append(
                    field_invalid(f"spec.{key}", value, "must be greater than or equal to 0")
                )
        return causes

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return super().validate(rtype, obj, ctx) + self._spec_causes(obj.get("spec"))

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx) + self._spec_causes(new.get("spec"))
        new_spec = new.get("spec") or {}
        old_spec = old.get("spec") or {}
        for key in ("selector", "completionMode"):
            if new_spec.get(key) != old_spec.get(key):
                causes.append(field_invalid(f"spec.{key}", new_spec.get(key), "field is immutable"))
        if new_spec.get("template") != old_spec.get("template") and not old_spec.get("suspend"):
            causes.append(
                field_invalid(
                    "spec.template",
                    new_spec.get("template"),
                    "field is immutable",
                    raw_value="core.PodTemplateSpec{...}",
                )
            )
        return causes


# -- network policies --------------------------------------------------------------------------


class NetworkPolicyStrategy(Strategy):
    tracks_generation = True

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        spec = obj.get("spec")
        if isinstance(spec, dict) and not spec.get("policyTypes"):
            types = ["Ingress"]
            if spec.get("egress"):
                types.append("Egress")
            spec["policyTypes"] = types
        for direction in ("ingress", "egress"):
            for rule in (spec or {}).get(direction) or [] if isinstance(spec, dict) else []:
                for port in (rule or {}).get("ports") or []:
                    if isinstance(port, dict):
                        port.setdefault("protocol", "TCP")
        return []

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        causes = super().validate(rtype, obj, ctx)
        spec = obj.get("spec")
        if not isinstance(spec, dict) or "podSelector" not in spec:
            causes.append(field_required("spec.podSelector"))
        return causes

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx)
        spec = new.get("spec")
        if not isinstance(spec, dict) or "podSelector" not in spec:
            causes.append(field_required("spec.podSelector"))
        return causes


# -- stored, not run: what a deployment of sandbus applies besides -----------------------------


class WorkloadStrategy(Strategy):
    """``registry/apps/deployment`` and ``statefulset``, stored only: no controller makes their
    Pods, no scale subresource, no rollout. They are here so that a deployment's manifests apply
    (and dry-run) as against a real cluster, with the generation and the one rule a manifest
    breaks most: the selector is required, selects the template's own labels and never changes
    (apps validation, ``ValidateDeploymentSpec``, ``ValidateStatefulSetSpec``)."""

    tracks_generation = True

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        return {}

    def _spec_causes(self, spec: Any) -> list[Cause]:
        if not isinstance(spec, dict):
            return [field_required("spec")]
        selector = spec.get("selector")
        if not isinstance(selector, dict):
            return [field_required("spec.selector")]
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            return [field_invalid("spec.selector", selector, "empty selector is invalid")]
        template = spec.get("template")
        metadata = template.get("metadata") if isinstance(template, dict) else None
        labels = (metadata or {}).get("labels") if isinstance(metadata, dict) else None
        try:
            selected = LabelSelector.from_label_selector(selector).matches(labels or {})
        except SelectorError as error:
            return [field_invalid("spec.selector", selector, str(error))]
        if not selected:
            return [
                field_invalid(
                    "spec.template.metadata.labels",
                    labels or {},
                    "`selector` does not match template `labels`",
                )
            ]
        return []

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return super().validate(rtype, obj, ctx) + self._spec_causes(obj.get("spec"))

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx) + self._spec_causes(new.get("spec"))
        selector = (new.get("spec") or {}).get("selector")
        if selector != (old.get("spec") or {}).get("selector"):
            causes.append(field_invalid("spec.selector", selector, "field is immutable"))
        return causes


class BindingStrategy(Strategy):
    """``registry/rbac/rolebinding`` and ``clusterrolebinding``: the roleRef is required and never
    changes. No authorizer reads any RBAC object here (the development cluster has no users)."""

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        causes = super().validate(rtype, obj, ctx)
        ref = obj.get("roleRef")
        if not isinstance(ref, dict) or not ref.get("name"):
            causes.append(field_required("roleRef.name"))
        return causes

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx)
        if new.get("roleRef") != old.get("roleRef"):
            causes.append(field_invalid("roleRef", new.get("roleRef"), "cannot change roleRef"))
        return causes


class BudgetStrategy(Strategy):
    """``registry/policy/poddisruptionbudget``: the generation and an empty status, no more (no
    eviction consults a budget here)."""

    tracks_generation = True

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        return {}


def _stored_kinds() -> list[ResourceType]:
    """What a deployment applies besides pods, services and the rest: stored and validated,
    never acted on."""
    rbac = "rbac.authorization.k8s.io"
    return [
        ResourceType(
            "",
            "v1",
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
            namespaced=True,
            strategy=Strategy(),
            short_names=("sa",),
        ),
        ResourceType(
            "apps",
            "v1",
            "deployments",
            "deployment",
            "Deployment",
            namespaced=True,
            strategy=WorkloadStrategy(),
            short_names=("deploy",),
            categories=("all",),
            status_subresource=True,
        ),
        ResourceType(
            "apps",
            "v1",
            "statefulsets",
            "statefulset",
            "StatefulSet",
            namespaced=True,
            strategy=WorkloadStrategy(),
            short_names=("sts",),
            categories=("all",),
            status_subresource=True,
        ),
        ResourceType(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            "PodDisruptionBudget",
            namespaced=True,
            strategy=BudgetStrategy(),
            short_names=("pdb",),
            status_subresource=True,
        ),
        ResourceType(rbac, "v1", "roles", "role", "Role", namespaced=True, strategy=Strategy()),
        ResourceType(
            rbac,
            "v1",
            "rolebindings",
            "rolebinding",
            "RoleBinding",
            namespaced=True,
            strategy=BindingStrategy(),
        ),
        ResourceType(
            rbac,
            "v1",
            "clusterroles",
            "clusterrole",
            "ClusterRole",
            namespaced=False,
            strategy=Strategy(),
            field_labels=("metadata.name",),
        ),
        ResourceType(
            rbac,
            "v1",
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
            namespaced=False,
            strategy=BindingStrategy(),
            field_labels=("metadata.name",),
        ),
    ]


# -- the table ---------------------------------------------------------------------------------


def builtin_types() -> list[ResourceType]:
    """Every built-in resource type, in discovery order."""

    def core(plural: str, singular: str, kind: str, strategy: Strategy, **kw: Any) -> ResourceType:
        kw.setdefault("field_labels", tuple(sorted(field_selectors_for(plural))))
        return ResourceType("", "v1", plural, singular, kind, strategy=strategy, **kw)

    return [
        core(
            "namespaces",
            "namespace",
            "Namespace",
            NamespaceStrategy(),
            namespaced=False,
            short_names=("ns",),
            status_subresource=True,
            extra_subresources=("finalize",),
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        ),
        core(
            "pods",
            "pod",
            "Pod",
            PodStrategy(),
            namespaced=True,
            short_names=("po",),
            categories=("all",),
            status_subresource=True,
            extra_subresources=("binding", "exec"),
        ),
        core(
            "services",
            "service",
            "Service",
            ServiceStrategy(),
            namespaced=True,
            short_names=("svc",),
            categories=("all",),
            status_subresource=True,
            verbs=(
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ),
        ),
        core(
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            "PersistentVolumeClaim",
            PersistentVolumeClaimStrategy(),
            namespaced=True,
            short_names=("pvc",),
            status_subresource=True,
        ),
        core(
            "configmaps",
            "configmap",
            "ConfigMap",
            ConfigMapStrategy(),
            namespaced=True,
            short_names=("cm",),
        ),
        core("secrets", "secret", "Secret", SecretStrategy(), namespaced=True),
        core("events", "event", "Event", EventStrategy(), namespaced=True, short_names=("ev",)),
        core(
            "nodes",
            "node",
            "Node",
            NodeStrategy(),
            namespaced=False,
            short_names=("no",),
            status_subresource=True,
        ),
        ResourceType(
            "events.k8s.io",
            "v1",
            "events",
            "event",
            "Event",
            namespaced=True,
            strategy=EventStrategy(),
            short_names=("ev",),
            storage="events",
            field_labels=("metadata.name", "metadata.namespace"),
            storage_version="v1",
            to_external=event_to_events_v1,
            to_internal=event_from_events_v1,
        ),
        ResourceType(
            "coordination.k8s.io",
            "v1",
            "leases",
            "lease",
            "Lease",
            namespaced=True,
            strategy=LeaseStrategy(),
        ),
        ResourceType(
            "batch",
            "v1",
            "jobs",
            "job",
            "Job",
            namespaced=True,
            strategy=JobStrategy(),
            categories=("all",),
            status_subresource=True,
            field_labels=tuple(sorted(field_selectors_for("jobs"))),
        ),
        ResourceType(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "networkpolicy",
            "NetworkPolicy",
            namespaced=True,
            strategy=NetworkPolicyStrategy(),
            short_names=("netpol",),
        ),
        storage_class_type(),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "customresourcedefinition",
            "CustomResourceDefinition",
            namespaced=False,
            strategy=CRDStrategy(),
            short_names=("crd", "crds"),
            categories=("api-extensions",),
            status_subresource=True,
            field_labels=("metadata.name",),
        ),
        *_stored_kinds(),
    ]


def register_builtins(registry: Registry) -> None:
    for rtype in builtin_types():
        registry.add(rtype)
