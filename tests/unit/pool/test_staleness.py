"""Staleness of warm pool members: ``is_stale`` and the semantic blueprint comparison
(docs/agent-sandbox.md §4.5)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from api.agents import SandboxBlueprint
from api.keys import LABEL_SANDBOX_TEMPLATE_HASH, LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash
from services.domain.agentsandbox.blueprint import pool_sandbox
from services.domain.agentsandbox.hashes import blueprint_hash
from services.domain.agentsandbox.secure_defaults import apply_secure_defaults
from services.domain.agentsandbox.staleness import blueprints_match, is_stale

Spec = dict[str, Any]
TEMPLATE = "test-template"


def template(spec: Spec, name: str = TEMPLATE) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def pool(template_ref: str = TEMPLATE) -> dict[str, Any]:
    return {
        "metadata": {"name": "test-pool", "namespace": "default", "uid": "warmpool-uid-456"},
        "spec": {"sandboxTemplateRef": {"name": template_ref}},
    }


def member(tmpl: dict[str, Any]) -> dict[str, Any]:
    """A member as the pool made it from ``tmpl``, after the API server named it."""
    body = pool_sandbox(pool(tmpl["metadata"]["name"]), tmpl)
    body["metadata"]["name"] = "test-pool-abcde"
    return body


def pod_template(image: str = "image-v1", **pod_spec: Any) -> Spec:
    return {
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "app", "image": image}],
            **pod_spec,
        }
    }


def vct(name: str, storage_class: str) -> Spec:
    """Upstream's ``createVolumeClaimTemplate``."""
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def unmanaged(**blueprint: Any) -> Spec:
    blueprint.setdefault("podTemplate", pod_template())
    return {"networkPolicyManagement": "Unmanaged", **blueprint}


# --- The pod spec comparison ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template_pod_spec", "actual_pod_spec", "secure_by_default", "equal"),
    [
        pytest.param(
            {"containers": [{"name": "test", "image": "img"}]},
            {"containers": [{"name": "test", "image": "img"}]},
            True,
            True,
            id="identical",
        ),
        pytest.param(
            {"automountServiceAccountToken": None},
            {"automountServiceAccountToken": False},
            True,
            True,
            id="automount-nil-vs-false",
        ),
        pytest.param(
            {"automountServiceAccountToken": True},
            {"automountServiceAccountToken": False},
            True,
            False,
            id="automount-true-vs-false-drift",
        ),
        pytest.param(
            {"dnsPolicy": ""},
            {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["8.8.8.8", "1.1.1.1"]}},
            True,
            True,
            id="dns-empty-vs-none-secure-default",
        ),
        pytest.param(
            {"dnsPolicy": "ClusterFirst"},
            {"dnsPolicy": "Default"},
            False,
            False,
            id="dns-default-to-clusterfirst-drift",
        ),
    ],
)
def test_compare_pod_specs_normalization(
    template_pod_spec: Spec, actual_pod_spec: Spec, secure_by_default: bool, equal: bool
) -> None:
    """Upstream TestComparePodSpecsNormalization: identical specs match; automount nil in the
    template matches false; true vs false is drift; an empty dnsPolicy matches the secure
    default's None + nameservers; Default → ClusterFirst is drift. As upstream, the secure
    defaults are applied to the actual spec in the cases expected to match (a member made
    with them)."""
    template_spec = {
        "networkPolicyManagement": "Managed" if secure_by_default else "Unmanaged",
        "podTemplate": {"spec": template_pod_spec},
    }
    actual = apply_secure_defaults(actual_pod_spec, template_spec) if equal else actual_pod_spec
    assert blueprints_match({"podTemplate": {"spec": actual}}, template_spec) is equal


def test_dns_isolation_is_expected_of_a_secure_by_default_member() -> None:
    """The comparison applies the defaults to the template side: a member lacking the DNS
    isolation a Managed template implies is drift, and one with it matches."""
    template_spec: Spec = {"podTemplate": {"spec": {"containers": [{"name": "a"}]}}}
    plain = {"automountServiceAccountToken": False, "containers": [{"name": "a"}]}
    isolated = {**plain, "dnsPolicy": "None", "dnsConfig": {"nameservers": ["8.8.8.8", "1.1.1.1"]}}
    assert not blueprints_match({"podTemplate": {"spec": plain}}, template_spec)
    assert blueprints_match({"podTemplate": {"spec": isolated}}, template_spec)


_APP = {"name": "app", "image": "image-v1"}


@pytest.mark.parametrize(
    ("actual_pod_spec", "equal"),
    [
        pytest.param(
            {
                "automountServiceAccountToken": False,
                "containers": [{**_APP, "ports": [], "env": None, "resources": {}}],
                "nodeSelector": {},
                "hostname": "",
                "hostNetwork": False,
                "priority": None,
            },
            True,
            id="what-go-decoding-erases",
        ),
        pytest.param(
            {"automountServiceAccountToken": False, "containers": [_APP], "volumes": []},
            True,
            id="empty-slice-is-nil-slice",
        ),
        pytest.param({"containers": [_APP]}, False, id="pointer-false-is-not-unset"),
        pytest.param(
            {
                "automountServiceAccountToken": False,
                "containers": [_APP],
                "terminationGracePeriodSeconds": 0,
            },
            False,
            id="pointer-zero-is-not-unset",
        ),
        pytest.param(
            {"automountServiceAccountToken": False, "containers": [_APP], "securityContext": {}},
            False,
            id="empty-pointer-struct-is-not-unset",
        ),
        pytest.param(
            {"automountServiceAccountToken": False, "containers": [_APP, {}]},
            False,
            id="list-elements-count",
        ),
        pytest.param(
            {"automountServiceAccountToken": False, "containers": [_APP], "newField": "x"},
            False,
            id="unknown-field-compared",
        ),
    ],
)
def test_semantic_equality_reads_json_as_go_decodes_it(actual_pod_spec: Spec, equal: bool) -> None:
    """Semantic equality over the Go types, on JSON: null, empty strings, lists and maps and a
    false in a plain field are what Go decodes an absent field to; a false, a 0 or an empty
    object in a pointer field is not; list elements are never dropped; a field Go does not
    know is compared as it is."""
    template_spec = unmanaged()
    assert blueprints_match({"podTemplate": {"spec": actual_pod_spec}}, template_spec) is equal


def test_an_empty_slice_is_a_nil_slice() -> None:
    """Semantic equality does not tell ``[]`` from unset even where Go's JSON does (a field
    without ``omitempty``: ``containers`` is written ``null`` when unset)."""
    template_spec = unmanaged(podTemplate={"spec": {}})
    empty = {"podTemplate": {"spec": {"automountServiceAccountToken": False, "containers": []}}}
    assert blueprints_match(empty, template_spec)
    one = {"podTemplate": {"spec": {"automountServiceAccountToken": False, "containers": [{}]}}}
    assert not blueprints_match(one, template_spec)


def test_quantities_compare_by_value() -> None:
    """A VCT size written as ``1024Mi`` equals ``1Gi`` (``resource.Quantity`` semantics), and
    the blueprint hash agrees, so an owned member and an orphan get the same answer."""
    template_spec = unmanaged(volumeClaimTemplates=[vct("data", "standard")])
    rewritten = copy.deepcopy(template_spec)
    rewritten["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "1024Mi"
    assert blueprints_match(rewritten, template_spec)
    assert blueprint_hash(rewritten) == blueprint_hash(template_spec)
    rewritten["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "2Gi"
    assert not blueprints_match(rewritten, template_spec)


# --- The blueprint comparison --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template_blueprint", "actual_blueprint", "equal"),
    [
        pytest.param({}, {}, True, id="identical-no-vcts-no-service"),
        pytest.param(
            {"volumeClaimTemplates": [vct("data", "standard")]},
            {"volumeClaimTemplates": [vct("data", "standard")]},
            True,
            id="identical-with-vcts",
        ),
        pytest.param(
            {"volumeClaimTemplates": [vct("data", "standard")], "service": True},
            {"volumeClaimTemplates": [vct("data", "standard")], "service": True},
            True,
            id="identical-with-service",
        ),
        pytest.param(
            {"volumeClaimTemplates": [vct("data", "standard")]},
            {
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data", "labels": {"extra": "label"}},
                        "spec": vct("data", "standard")["spec"],
                    }
                ]
            },
            True,
            id="vct-label-drift",
        ),
        pytest.param(
            {"volumeClaimTemplates": [vct("data", "standard")]},
            {
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data", "annotations": {"extra": "annotation"}},
                        "spec": vct("data", "standard")["spec"],
                    }
                ]
            },
            True,
            id="vct-annotation-drift",
        ),
        pytest.param(
            {"podTemplate": pod_template("image-v1")},
            {"podTemplate": pod_template("image-v2")},
            False,
            id="image-drift",
        ),
        pytest.param(
            {"volumeClaimTemplates": [vct("data", "standard"), vct("cache", "standard")]},
            {"volumeClaimTemplates": [vct("data", "standard")]},
            False,
            id="vct-count-drift",
        ),
        pytest.param(
            {"volumeClaimTemplates": [vct("data", "standard"), vct("cache", "standard")]},
            {"volumeClaimTemplates": [vct("cache", "standard"), vct("data", "standard")]},
            False,
            id="vcts-reordered",
        ),
        pytest.param(
            {"volumeClaimTemplates": [vct("data", "standard")]},
            {"volumeClaimTemplates": [vct("renamed-data", "standard")]},
            False,
            id="vct-name-drift",
        ),
        pytest.param(
            {"volumeClaimTemplates": [vct("data", "standard")]},
            {"volumeClaimTemplates": [vct("data", "fast-ssd")]},
            False,
            id="vct-storage-class-drift",
        ),
        pytest.param({"service": True}, {"service": False}, False, id="service-on-vs-off"),
        pytest.param({"service": True}, {}, False, id="service-set-vs-nil"),
        pytest.param({"service": False}, {"service": None}, False, id="service-off-vs-nil"),
    ],
)
def test_compare_sandbox_blueprint(
    template_blueprint: Spec, actual_blueprint: Spec, equal: bool
) -> None:
    """Upstream TestCompareSandboxBlueprint: equal with no VCTs, with VCTs, with a Service and
    despite VCT label/annotation drift; different on image, VCT count, order, name and storage
    class, and on the Service on/off/unset."""
    actual = {"podTemplate": pod_template(), **actual_blueprint}
    assert blueprints_match(actual, unmanaged(**template_blueprint)) is equal


_DRIFTS: dict[str, Any] = {
    "podTemplate": pod_template("image-v2"),
    "volumeClaimTemplates": [vct("data", "standard")],
    "service": True,
}
"""A change of each known SandboxBlueprint field; any other field gets ``_UNKNOWN_DRIFT``."""
_UNKNOWN_DRIFT = {"drifted": True}


@pytest.mark.parametrize(
    "field", [field.encode_name for field in msgspec.structs.fields(SandboxBlueprint)]
)
def test_sandbox_blueprint_fields_are_compared(field: str) -> None:
    """Upstream TestSandboxBlueprintFieldsAreCompared, made behavioural: every field of
    ``api.agents.SandboxBlueprint`` (read from the struct, so a new field is a new case)
    participates in the comparison: changing it on the member, or on the template, is drift."""
    template_spec = unmanaged()
    actual = {"podTemplate": pod_template()}
    assert blueprints_match(actual, template_spec)
    drift = copy.deepcopy(_DRIFTS.get(field, _UNKNOWN_DRIFT))

    assert not blueprints_match({**actual, field: drift}, template_spec), (
        f"SandboxBlueprint field {field!r} is not compared: a warm member would not be found "
        "stale when it changes. Compare it in services/domain/agentsandbox/staleness.py."
    )
    assert not blueprints_match(actual, {**template_spec, field: drift})


def test_upstream_blueprint_fields() -> None:
    """The SandboxBlueprint fields upstream's test lists (its expected field names)."""
    assert sorted(field.encode_name for field in msgspec.structs.fields(SandboxBlueprint)) == [
        "podTemplate",
        "service",
        "volumeClaimTemplates",
    ]


# --- is_stale ------------------------------------------------------------------------------------


def test_is_sandbox_stale_orphaned_sandbox_vetting() -> None:
    """Upstream TestIsSandboxStale_OrphanedSandboxVetting: an orphan with the current hash
    label (spoofed) but a modified pod spec is stale; a genuine one (the template's spec with
    the secure defaults) is fresh. The same spoofed labels on an owned member pass the hash
    shortcut, which is why orphans always get the full comparison."""
    tmpl = template(
        {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "genuine-image"}]}}}
    )
    labels = {
        LABEL_SANDBOX_TEMPLATE_HASH: blueprint_hash(tmpl["spec"]),
        LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
    }
    spoofed_spec = copy.deepcopy(tmpl["spec"]["podTemplate"]["spec"])
    spoofed_spec["containers"][0]["image"] = "malicious-image"
    spoofed = {
        "metadata": {"name": "spoofed-orphan", "labels": labels},
        "spec": {"podTemplate": {"spec": spoofed_spec}},
    }
    genuine_spec = apply_secure_defaults(tmpl["spec"]["podTemplate"]["spec"], tmpl["spec"])
    genuine = {
        "metadata": {"name": "genuine-orphan", "labels": labels},
        "spec": {"podTemplate": {"spec": genuine_spec}},
    }

    assert is_stale(spoofed, tmpl, orphan=True) is True
    assert is_stale(genuine, tmpl, orphan=True) is False
    assert is_stale(spoofed, tmpl, orphan=False) is False


_BASE = unmanaged(podTemplate=pod_template("image-v1"))
_WITH_DATA = unmanaged(
    podTemplate=pod_template("image-v1"), volumeClaimTemplates=[vct("data", "standard")]
)


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[Spec], None]:
    def update(spec: Spec) -> None:
        target: Any = spec
        for step in path[:-1]:
            target = target.setdefault(step, {}) if isinstance(step, str) else target[step]
        target[path[-1]] = value

    return update


def _unset(key: str) -> Callable[[Spec], None]:
    return lambda spec: spec.pop(key)


@pytest.mark.parametrize("orphan", [False, True], ids=["owned", "orphan"])
@pytest.mark.parametrize(
    ("base", "update", "stale"),
    [
        pytest.param(_BASE, None, False, id="unchanged"),
        pytest.param(
            _BASE,
            _set(("podTemplate", "metadata", "annotations"), {"new-annotation": "value"}),
            False,
            id="pod-annotation-drift",
        ),
        pytest.param(
            _BASE,
            _set(("podTemplate", "metadata", "labels"), {"new-label": "value"}),
            False,
            id="pod-label-drift",
        ),
        pytest.param(
            _WITH_DATA,
            _set(("volumeClaimTemplates", 0, "metadata", "annotations"), {"new-annotation": "v"}),
            False,
            id="vct-annotation-drift",
        ),
        pytest.param(
            _WITH_DATA,
            _set(("volumeClaimTemplates", 0, "metadata", "labels"), {"new-label": "value"}),
            False,
            id="vct-label-drift",
        ),
        pytest.param(
            _BASE,
            _set(("podTemplate", "spec", "containers", 0, "image"), "image-v2"),
            True,
            id="image-change",
        ),
        pytest.param(
            _BASE,
            _set(("volumeClaimTemplates",), [vct("data", "standard")]),
            True,
            id="vct-addition",
        ),
        pytest.param(
            _WITH_DATA,
            _set(("volumeClaimTemplates", 0, "spec", "storageClassName"), "fast-ssd"),
            True,
            id="vct-spec-change",
        ),
        pytest.param(_WITH_DATA, _unset("volumeClaimTemplates"), True, id="vct-removal"),
        pytest.param(_BASE, _set(("service",), True), True, id="service-addition"),
    ],
)
def test_reconcile_pool_template_update_recreate(
    base: Spec, update: Callable[[Spec], None] | None, stale: bool, orphan: bool
) -> None:
    """Upstream TestReconcilePool_TemplateUpdateRecreate, as the staleness decision the
    Recreate strategy acts on: no change, and pod-template or VCT label/annotation drift, keep
    the member (its hash label no longer matches, so the semantic comparison decides); an image
    change, a VCT added, changed or removed and a Service added make it stale. Every real
    change also changes the blueprint hash, as upstream asserts."""
    before = template(copy.deepcopy(base))
    sandbox = member(before)
    after = copy.deepcopy(before)
    if update is not None:
        update(after["spec"])
        assert blueprint_hash(after["spec"]) != blueprint_hash(before["spec"])

    assert is_stale(sandbox, after, orphan=orphan) is stale


def test_reconcile_pool_template_ref_update_same_spec() -> None:
    """Upstream TestReconcilePool_TemplateRefUpdate_SameSpec, as the staleness decision: after
    the pool's templateRef is renamed to a template with the identical spec, every member of
    the old ref is stale (even though its hash label and its spec match), and a member made
    from the new ref, which carries the new ref hash, is fresh."""
    spec = unmanaged(podTemplate=pod_template("image-v1"))
    old, new = template(spec, "test-template-1"), template(copy.deepcopy(spec), "test-template-2")
    old_member = member(old)
    assert old_member["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_HASH] == blueprint_hash(
        new["spec"]
    )
    assert blueprints_match(old_member["spec"], new["spec"])

    assert is_stale(old_member, new, orphan=False) is True
    assert is_stale(old_member, new, orphan=True) is True

    new_member = member(new)
    assert new_member["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash(
        "test-template-2"
    )
    assert new_member["spec"]["podTemplate"]["spec"]["containers"][0]["image"] == "image-v1"
    assert is_stale(new_member, new, orphan=False) is False


def test_missing_ref_hash_label_is_stale() -> None:
    """§4.5 step 1: a member without the ref-hash label does not match any template."""
    tmpl = template(unmanaged())
    sandbox = member(tmpl)
    del sandbox["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH]
    assert is_stale(sandbox, tmpl, orphan=False) is True


def test_owned_member_with_current_hash_is_fresh_without_comparison() -> None:
    """§4.5 step 3: an owned member whose hash label is the current hash is trusted."""
    tmpl = template(unmanaged())
    sandbox = member(tmpl)
    sandbox["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = "edited-by-hand"
    assert is_stale(sandbox, tmpl, orphan=False) is False
    assert is_stale(sandbox, tmpl, orphan=True) is True


def test_empty_current_hash_is_never_stale() -> None:
    """§4.5 step 4: without a current hash (upstream: the template failed to marshal) an owned
    member is kept, however it differs; ``current_hash`` given is used instead of hashing."""
    before = template(unmanaged())
    sandbox = member(before)
    after = template(unmanaged(podTemplate=pod_template("image-v2")))
    assert is_stale(sandbox, after, orphan=False) is True
    assert is_stale(sandbox, after, orphan=False, current_hash="") is False
    own_hash = sandbox["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_HASH]
    assert is_stale(sandbox, after, orphan=False, current_hash=own_hash) is False
