"""Server-side printing: the ``meta.k8s.io`` Table and PartialObjectMetadata representations.

``kubectl get`` asks for ``application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
columns the server chooses, so what a user sees (READY/STATUS for pods, a CRD's
additionalPrinterColumns) is decided here, as by the API server's TableConvertors:

- custom resources (apiextensions ``tableconvertor``): Name, then each
  ``additionalPrinterColumns`` entry evaluated on the object; a CRD without any gets Age;
- built-ins: the columns of ``pkg/printers/internalversion`` for the kinds we serve (pods,
  services, namespaces, nodes, jobs, config maps, secrets, PVCs, events, leases, network
  policies), with ages rendered server-side like ``duration.HumanDuration``;
- anything else (CRDs): the default convertor, Name and Created At.

Rows carry the object as PartialObjectMetadata unless ``includeObject=Object``. Metadata-only
clients (``as=PartialObjectMetadata[List]``) get just that.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from api.objects import Json
from devtools.cluster.apirules.resources import ResourceType

__all__ = ["Representation", "negotiate", "partial_metadata", "table"]

Representation = tuple[
    str, str
]  # (kind: "json" | "Table" | "PartialObjectMetadata[List]", version)

_NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)


def negotiate(accept: str) -> Representation:
    """Pick the first acceptable representation of an Accept header."""
    for clause in accept.split(","):
        params = dict(part.strip().split("=", 1) for part in clause.split(";")[1:] if "=" in part)
        wanted = params.get("as")
        if wanted is None:
            return "json", ""
        if params.get("g") != "meta.k8s.io":
            continue
        version = params.get("v", "v1")
        if wanted in (
            "Table",
            "PartialObjectMetadata",
            "PartialObjectMetadataList",
        ) and version in (
            "v1",
            "v1beta1",
        ):
            return wanted, version
    return "json", ""


def partial_metadata(obj: Json, version: str = "v1") -> Json:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj.get("metadata", {}),
    }


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _age(stamp: str | None, now: datetime) -> str:
    if not stamp:
        return "<unknown>"
    try:
        then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    return human_duration((now - then).total_seconds())


def _column(name: str, ctype: str = "string", *, fmt: str = "", priority: int = 0) -> Json:
    description = _NAME_DESCRIPTION if fmt == "name" else ""
    return {
        "name": name,
        "type": ctype,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


def _jsonpath(obj: Any, path: str) -> Any:
    """The simple JSONPath subset CRD printer columns use: ``.a.b``, ``.a[0].b``,
    ``.a[?(@.type=="Ready")].status``."""
    tokens = re.findall(
        r"\.([^.\[]+)|\[\?\(@\.(\w+)\s*==\s*[\"']([^\"']*)[\"']\)\]|\[(\d+)\]", path.strip("{}")
    )
    current = obj
    for key, filter_field, filter_value, index in tokens:
        if key:
            current = current.get(key) if isinstance(current, dict) else None
        elif filter_field:
            matches = (
                [
                    item
                    for item in current or []
                    if isinstance(item, dict) and str(item.get(filter_field)) == filter_value
                ]
                if isinstance(current, list)
                else []
            )
            current = matches[0] if matches else None
        else:
            position = int(index)
            current = (
                current[position] if isinstance(current, list) and position < len(current) else None
            )
        if current is None:
            return None
    return current


def _custom_columns(
    rtype: ResourceType,
) -> tuple[list[Json], Callable[[Json, datetime], list[Any]]]:
    printer = list(rtype.printer_columns) or [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]
    columns = [_column("Name", fmt="name")] + [
        {
            "name": c["name"],
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "description": c.get("description", ""),
            "priority": c.get("priority", 0),
        }
        for c in printer
    ]

    def cells(obj: Json, now: datetime) -> list[Any]:
        row: list[Any] = [obj["metadata"]["name"]]
        for c in printer:
            value = _jsonpath(obj, c["jsonPath"])
            if c.get("type") == "date" and isinstance(value, str):
                value = _age(value, now)  # the CR convertor renders dates as ages
            elif isinstance(value, dict | list):
                value = json.dumps(value, separators=(",", ":"))
            row.append(value)
        return row

    return columns, cells


def _pod_cells(obj: Json, now: datetime) -> list[Any]:
    """printPod, for the states our kubelet produces."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    meta = obj["metadata"]
    total = len(spec.get("containers") or [])
    reason = status.get("reason") or status.get("phase") or ""
    restarts = 0
    ready = 0
    running = False
    for init in status.get("initContainerStatuses") or []:
        restarts += init.get("restartCount", 0)
        state = init.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode", 1) == 0:
            continue
        waiting = (state.get("waiting") or {}).get("reason")
        count = len(spec.get("initContainers") or [])
        reason = (
            f"Init:{waiting}" if waiting and waiting != "PodInitializing" else f"Init:0/{count}"
        )
        break
    else:
        for container in reversed(status.get("containerStatuses") or []):
            restarts += container.get("restartCount", 0)
            state = container.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif "terminated" in state:
                terminated = state["terminated"]
                reason = terminated.get("reason") or (
                    f"Signal:{terminated['signal']}"
                    if terminated.get("signal")
                    else f"ExitCode:{terminated.get('exitCode', 0)}"
                )
            elif container.get("ready") and "running" in state:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running"
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return [
        meta["name"],
        f"{ready}/{total}",
        reason,
        restarts,
        _age(meta.get("creationTimestamp"), now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _service_cells(obj: Json, now: datetime) -> list[Any]:
    spec = obj.get("spec") or {}
    ports = ",".join(
        f"{p.get('port')}"
        + (f":{p['nodePort']}" if p.get("nodePort") else "")
        + f"/{p.get('protocol', 'TCP')}"
        for p in spec.get("ports") or []
    )
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    external = ",".join(i.get("ip") or i.get("hostname", "") for i in ingress)
    if not external:
        external = "<pending>" if spec.get("type") == "LoadBalancer" else "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [
        obj["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        external,
        ports or "<none>",
        _age(obj["metadata"].get("creationTimestamp"), now),
        selector or "<none>",
    ]


def _node_cells(obj: Json, now: datetime) -> list[Any]:
    conditions = {
        c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions") or []
    }
    state = {"True": "Ready", "False": "NotReady"}.get(conditions.get("Ready") or "", "Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = obj["metadata"].get("labels") or {}
    roles = ",".join(
        sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    )
    info = (obj.get("status") or {}).get("nodeInfo") or {}
    return [
        obj["metadata"]["name"],
        state,
        roles or "<none>",
        _age(obj["metadata"].get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
    ]


def _job_cells(obj: Json, now: datetime) -> list[Any]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Complete") == "True":
        state = "Complete"
    elif conditions.get("Failed") == "True":
        state = "Failed"
    elif obj["metadata"].get("deletionTimestamp"):
        state = "Terminating"
    elif spec.get("suspend"):
        state = "Suspended"
    else:
        state = "Running"
    completions = spec.get("completions")
    done = status.get("succeeded", 0)
    shown = (
        f"{done}/{completions}"
        if completions is not None
        else f"{done}/1 of {spec.get('parallelism', 1)}"
    )
    duration = ""
    if status.get("startTime"):
        start = datetime.strptime(status["startTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        end = now
        if status.get("completionTime"):
            end = datetime.strptime(status["completionTime"], "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=UTC
            )
        duration = human_duration((end - start).total_seconds())
    return [
        obj["metadata"]["name"],
        state,
        shown,
        duration,
        _age(obj["metadata"].get("creationTimestamp"), now),
    ]


def _simple(*extract: Callable[[Json], Any]) -> Callable[[Json, datetime], list[Any]]:
    def cells(obj: Json, now: datetime) -> list[Any]:
        return [
            obj["metadata"]["name"],
            *(f(obj) for f in extract),
            _age(obj["metadata"].get("creationTimestamp"), now),
        ]

    return cells


def _event_cells(obj: Json, now: datetime) -> list[Any]:
    involved = obj.get("involvedObject") or obj.get("regarding") or {}
    last = (
        obj.get("lastTimestamp") or obj.get("eventTime") or obj["metadata"].get("creationTimestamp")
    )
    return [
        _age(str(last)[:19] + "Z" if last else None, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        obj.get("message") or obj.get("note") or "",
    ]


def _storage_class_cells(obj: Json, now: datetime) -> list[Any]:
    """printers.go ``printStorageClass``: the default class's name says ``(default)``."""
    meta = obj["metadata"]
    annotations = meta.get("annotations") or {}
    default = any(
        annotations.get(k) == "true"
        for k in (
            "storageclass.kubernetes.io/is-default-class",
            "storageclass.beta.kubernetes.io/is-default-class",
        )
    )
    return [
        meta["name"] + (" (default)" if default else ""),
        obj.get("provisioner", ""),
        obj.get("reclaimPolicy") or "Delete",
        obj.get("volumeBindingMode") or "Immediate",
        bool(obj.get("allowVolumeExpansion")),
        _age(meta.get("creationTimestamp"), now),
    ]


def _builtin(
    rtype: ResourceType,
) -> tuple[list[Json], Callable[[Json, datetime], list[Any]]] | None:
    name = _column("Name", fmt="name")
    age = _column("Age")
    key = (rtype.group, rtype.plural)
    if key == ("", "pods"):
        return [
            name,
            _column("Ready"),
            _column("Status"),
            _column("Restarts", "string"),
            age,
            _column("IP", priority=1),
            _column("Node", priority=1),
            _column("Nominated Node", priority=1),
            _column("Readiness Gates", priority=1),
        ], _pod_cells
    if key == ("", "services"):
        return [
            name,
            _column("Type"),
            _column("Cluster-IP"),
            _column("External-IP"),
            _column("Port(s)"),
            age,
            _column("Selector", priority=1),
        ], _service_cells
    if key == ("", "namespaces"):
        return [name, _column("Status"), age], _simple(
            lambda o: (o.get("status") or {}).get("phase", "")
        )
    if key == ("", "nodes"):
        return [name, _column("Status"), _column("Roles"), age, _column("Version")], _node_cells
    if key == ("", "configmaps"):
        return [name, _column("Data", "integer"), age], _simple(
            lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})
        )
    if key == ("", "secrets"):
        return [name, _column("Type"), _column("Data", "integer"), age], _simple(
            lambda o: o.get("type", ""), lambda o: len(o.get("data") or {})
        )
    if key == ("", "persistentvolumeclaims"):
        return [
            name,
            _column("Status"),
            _column("Volume"),
            _column("Capacity"),
            _column("Access Modes"),
            _column("StorageClass"),
            age,
        ], _simple(
            lambda o: (o.get("status") or {}).get("phase", ""),
            lambda o: (o.get("spec") or {}).get("volumeName", ""),
            lambda o: ((o.get("status") or {}).get("capacity") or {}).get("storage", ""),
            lambda o: ",".join(
                {
                    "ReadWriteOnce": "RWO",
                    "ReadOnlyMany": "ROX",
                    "ReadWriteMany": "RWX",
                    "ReadWriteOncePod": "RWOP",
                }.get(m, m)
                for m in (o.get("status") or {}).get("accessModes") or []
            ),
            lambda o: (o.get("spec") or {}).get("storageClassName") or "<unset>",
        )
    if key == ("batch", "jobs"):
        return [
            name,
            _column("Status"),
            _column("Completions"),
            _column("Duration"),
            age,
        ], _job_cells
    if key == ("", "events"):
        return [
            _column("Last Seen"),
            _column("Type"),
            _column("Reason"),
            _column("Object"),
            _column("Message"),
        ], _event_cells
    if key == ("coordination.k8s.io", "leases"):
        return [name, _column("Holder"), age], _simple(
            lambda o: (o.get("spec") or {}).get("holderIdentity", "")
        )
    if key == ("storage.k8s.io", "storageclasses"):
        return [
            name,
            _column("Provisioner"),
            _column("ReclaimPolicy"),
            _column("VolumeBindingMode"),
            _column("AllowVolumeExpansion", "boolean"),
            age,
        ], _storage_class_cells
    if key == ("networking.k8s.io", "networkpolicies"):
        return [name, _column("Pod-Selector"), age], _simple(
            lambda o: (
                ",".join(
                    f"{k}={v}"
                    for k, v in sorted(
                        ((o.get("spec") or {}).get("podSelector") or {})
                        .get("matchLabels", {})
                        .items()
                    )
                )
                or "<none>"
            )
        )
    return None


def _default_columns() -> tuple[list[Json], Callable[[Json, datetime], list[Any]]]:
    def cells(obj: Json, now: datetime) -> list[Any]:
        return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp")]

    return [_column("Name", fmt="name"), _column("Created At", "date")], cells


def table(
    rtype: ResourceType,
    objects: list[Json],
    list_metadata: Json,
    *,
    version: str = "v1",
    include_object: str = "Metadata",
    now: datetime | None = None,
) -> Json:
    if rtype.custom:
        columns, cells = _custom_columns(rtype)
    else:
        columns, cells = _builtin(rtype) or _default_columns()
    moment = now or datetime.now(UTC)
    rows = []
    for obj in objects:
        row: Json = {"cells": cells(obj, moment)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj, version)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": list_metadata,
        "columnDefinitions": columns,
        "rows": rows,
    }
