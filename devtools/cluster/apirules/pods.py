"""Pod rules: server defaults, spec immutability, graceful deletion, binding.

Follows ``pkg/registry/core/pod/strategy.go`` and the defaulting in ``pkg/apis/core/v1``:

- **Defaults** (decode time and admission): restartPolicy Always, terminationGracePeriodSeconds
  30, dnsPolicy ClusterFirst, schedulerName default-scheduler, serviceAccountName ``default``,
  enableServiceLinks, priority 0 / preemptionPolicy, the two ``NoExecute`` tolerations for
  not-ready/unreachable nodes (DefaultTolerationSeconds admission), and per container
  imagePullPolicy (Always for ``:latest`` or no tag, else IfNotPresent), terminationMessagePath
  and -Policy, port protocol TCP. The ServiceAccount admission's projected token volume is not
  added.
- **Create** resets status to ``{phase: Pending, qosClass}``.
- **Update** may change only container images, activeDeadlineSeconds, added tolerations and
  terminationGracePeriodSeconds (from negative to 1); anything else is 422 "pod updates may not
  change fields other than ...".
- **pods/status** keeps the old spec and ownerReferences; labels and annotations may change.
- **Graceful delete**: the period is the request's gracePeriodSeconds, else the spec's
  terminationGracePeriodSeconds; 0 when the pod is unscheduled or already Succeeded/Failed.
- **pods/binding** sets ``spec.nodeName`` once and marks PodScheduled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from api.objects import Json
from devtools.cluster.apirules.errors import (
    Cause,
    field_duplicate,
    field_forbidden,
    field_invalid,
    field_not_supported,
    field_required,
)
from devtools.cluster.apirules.meta import dns1123_label_errors
from devtools.cluster.apirules.strategy import Strategy, WriteContext
from devtools.cluster.storage.jsontree import copy_stored, copy_tree

if TYPE_CHECKING:
    from devtools.cluster.apirules.resources import ResourceType

__all__ = ["PodStrategy", "qos_class"]


_CONTAINER_LISTS = ("initContainers", "containers")
_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_DEFAULT_TOLERATIONS = (
    {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "tolerationSeconds": 300,
    },
    {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "tolerationSeconds": 300,
    },
)
_IMMUTABLE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def _image_pull_policy(image: str) -> str:
    reference = image.rsplit("/", 1)[-1]
    if "@" in reference:
        return "IfNotPresent"
    if ":" not in reference or reference.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default_container(container: Json) -> None:
    if isinstance(container.get("image"), str):
        container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for env in container.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def default_pod_spec(spec: Json) -> None:
    """SetDefaults_PodSpec and container defaults, plus the admission-time defaults."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for key in _CONTAINER_LISTS:
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _default_container(container)


def default_pod_admission(spec: Json) -> None:
    """What ServiceAccount, Priority and DefaultTolerationSeconds admission add on create."""
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = account
    spec["serviceAccount"] = account
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = list(spec.get("tolerations") or [])
    for default in _DEFAULT_TOLERATIONS:
        if not any(
            isinstance(t, dict)
            and t.get("key") == default["key"]
            and t.get("effect")
            in (
                None,
                "",
                "NoExecute",
            )
            for t in tolerations
        ):
            tolerations.append(dict(default))
    spec["tolerations"] = tolerations


def qos_class(spec: Json) -> str:
    """Guaranteed if every container's cpu and memory limits equal requests; BestEffort if no
    container sets any; Burstable otherwise."""
    containers = [c for key in _CONTAINER_LISTS for c in spec.get(key) or [] if isinstance(c, dict)]
    any_set = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            limit = limits.get(name)
            request = requests.get(name, limit)
            if limit is None or request != limit:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _validate_spec(spec: Any) -> list[Cause]:
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not containers:
        causes.append(field_required("spec.containers"))
    seen: set[str] = set()
    for key in _CONTAINER_LISTS:
        for i, container in enumerate(spec.get(key) or []):
            here = f"spec.{key}[{i}]"
            if not isinstance(container, dict):
                causes.append(field_invalid(here, container, "must be an object"))
                continue
            name = container.get("name")
            if not name:
                causes.append(field_required(f"{here}.name"))
            else:
                causes += [
                    field_invalid(f"{here}.name", name, e) for e in dns1123_label_errors(name)
                ]
                if name in seen:
                    causes.append(field_duplicate(f"{here}.name", name))
                seen.add(name)
            if not container.get("image"):
                causes.append(field_required(f"{here}.image"))
    policy = spec.get("restartPolicy")
    if policy not in _RESTART_POLICIES:
        causes.append(field_not_supported("spec.restartPolicy", policy, _RESTART_POLICIES))
    return causes


def _mutable_view(new_spec: Json, old_spec: Json) -> Json:
    """``new_spec`` with every field an update may change set back to the old value."""
    view = copy_tree(new_spec)
    for key in _CONTAINER_LISTS:
        new_list = view.get(key) or []
        old_list = old_spec.get(key) or []
        if len(new_list) == len(old_list):
            for new_c, old_c in zip(new_list, old_list, strict=True):
                if isinstance(new_c, dict) and isinstance(old_c, dict) and "image" in old_c:
                    new_c["image"] = old_c["image"]
    old_deadline = old_spec.get("activeDeadlineSeconds")
    new_deadline = view.get("activeDeadlineSeconds")
    if new_deadline is not None and (old_deadline is None or new_deadline <= old_deadline):
        if old_deadline is None:
            view.pop("activeDeadlineSeconds", None)
        else:
            view["activeDeadlineSeconds"] = old_deadline
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = view.get("tolerations") or []
    if all(t in new_tolerations for t in old_tolerations):
        if "tolerations" in old_spec:
            view["tolerations"] = copy_stored(old_spec["tolerations"])
        else:
            view.pop("tolerations", None)
    old_grace = old_spec.get("terminationGracePeriodSeconds")
    if old_grace is not None and old_grace < 0 and view.get("terminationGracePeriodSeconds") == 1:
        view["terminationGracePeriodSeconds"] = old_grace
    if not view.get("schedulingGates") and old_spec.get("schedulingGates"):
        view["schedulingGates"] = old_spec["schedulingGates"]
    return view


class PodStrategy(Strategy):
    graceful = True
    return_deleted_object = True

    def normalize(self, rtype: ResourceType, obj: Json) -> list[str]:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            default_pod_spec(spec)
        return []

    def prepare_for_create(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            default_pod_admission(spec)
        super().prepare_for_create(rtype, obj, ctx)

    def initial_status(self, rtype: ResourceType, obj: Json) -> Json | None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = {}
        return {"phase": "Pending", "qosClass": qos_class(spec)}

    def validate(self, rtype: ResourceType, obj: Json, ctx: WriteContext) -> list[Cause]:
        return super().validate(rtype, obj, ctx) + _validate_spec(obj.get("spec"))

    def validate_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        causes = super().validate_update(rtype, new, old, ctx)
        causes += _validate_spec(new.get("spec"))
        new_spec = new.get("spec") or {}
        old_spec = old.get("spec") or {}
        if _mutable_view(new_spec, old_spec) != old_spec:
            causes.append(field_forbidden("spec", _IMMUTABLE_MESSAGE))
        return causes

    def prepare_for_status_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> Json:
        result = super().prepare_for_status_update(rtype, new, old, ctx)
        refs = old["metadata"].get("ownerReferences")
        if refs is None:
            result["metadata"].pop("ownerReferences", None)
        else:
            result["metadata"]["ownerReferences"] = copy_stored(refs)
        return result

    def validate_status_update(
        self, rtype: ResourceType, new: Json, old: Json, ctx: WriteContext
    ) -> list[Cause]:
        return Strategy.validate_update(self, rtype, new, old, ctx)

    def grace_period(self, obj: Json, requested: int | None) -> int:
        spec = obj.get("spec") or {}
        if requested is not None:
            period = requested
        else:
            period = int(spec.get("terminationGracePeriodSeconds") or 0)
        if not spec.get("nodeName"):
            period = 0
        if (obj.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
            period = 0
        return period


def bind(pod: Json, binding: Json, now: str) -> Json | str:
    """Apply a Binding to a pod; returns the new pod, or the reason the binding is refused."""
    target = binding.get("target") or {}
    node = target.get("name")
    if not node:
        return "target.name: Required value"
    spec = pod.setdefault("spec", {})
    if spec.get("nodeName"):
        return f'pod {pod["metadata"]["name"]} is already assigned to node "{spec["nodeName"]}"'
    if pod["metadata"].get("deletionTimestamp"):
        return f"pod {pod['metadata']['name']} is being deleted, cannot be assigned to a host"
    spec["nodeName"] = node
    annotations = (binding.get("metadata") or {}).get("annotations") or {}
    if annotations:
        pod["metadata"].setdefault("annotations", {}).update(annotations)
    status = pod.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append(
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
    )
    status["conditions"] = conditions
    return pod
