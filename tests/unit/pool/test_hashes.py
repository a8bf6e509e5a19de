"""Bit-exact template hashes (docs/agent-sandbox.md §4.6): ``sandbox-template-hash`` and the
deprecated ``sandbox-pod-template-hash`` as upstream's ``computeSandboxBlueprintHash`` and
``computePodTemplateHash`` compute them.

How the vectors were produced: a Go program (go1.19, Debian's golang-go, kept outside the repo)
that compiles k8s.io/api v0.36.3 ``core/v1/types.go`` and k8s.io/apimachinery v0.36.3's
``resource.Quantity`` and ``intstr.IntOrString`` sources (their CBOR and logging imports stubbed;
metav1 cut down to the types PodSpec reaches, ``metav1.Time`` and ``FieldsV1`` with their real
JSON methods), plus agent-sandbox's v1beta1
``SandboxBlueprint``, ``PodTemplate`` and ``PersistentVolumeClaimTemplate`` copied with their
field order and tags. It ``json.Unmarshal``s each input below into ``SandboxTemplateSpec`` and
prints ``json.Marshal`` of the blueprint and of the podTemplate with their FNV-1a hashes: the
literals here are its output. The same program agreed with
:mod:`services.domain.agentsandbox.hashes` on about a thousand random blueprints touching every
field of the tables, and its quantity half on about 100,000 random quantities.

Two things Go 1.19 does differently from the Go that builds the controller, so those vectors are
derived by hand from the newer rules: ``\\b`` and ``\\f`` are escaped short since Go 1.22 (1.19
wrote ``\\u0008``), and ``omitzero`` (Go 1.24; ObjectMeta.creationTimestamp) drops a zero time.
The NameHash vectors (TestNameHash_Correctness) are covered in tests/unit/sandbox/test_wakes.py.
"""

from __future__ import annotations

import copy
import hashlib
import random
from typing import Any

import pytest

from api.keys import name_hash
from api.quantity import canonical_quantity
from services.domain.agentsandbox.hashes import (
    blueprint_hash,
    blueprint_json,
    open_pool_revision,
    pod_template_hash,
    pod_template_json,
    pod_template_spec_json,
)

GO_VECTORS: list[tuple[str, dict[str, Any], str, str, str]] = [
    # (name, template spec as served, Go's json.Marshal of its blueprint, the blueprint hash,
    # the pod template hash)
    # One container, image only: ``resources`` (a struct value) is always emitted; ``spec`` before
    # ``metadata``, which is ``{}``.
    (
        "minimal",
        {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "nginx"}]}}},
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"nginx",'
            '"resources":{}}]},"metadata":{}}}'
        ),
        "08805cb2",
        "d9df2897",
    ),
    # Upstream TestComputeSandboxBlueprintHash's base template (createTemplate).
    (
        "upstream_base",
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            }
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"test-container",'
            '"image":"test-image","resources":{}}]},"metadata":{}}}'
        ),
        "c972d31f",
        "2473a66c",
    ),
    # TestComputeSandboxBlueprintHash, pod spec change: image-v2 changes both hashes.
    (
        "upstream_image_v2",
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "image-v2"}]}
            }
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"test-container",'
            '"image":"image-v2","resources":{}}]},"metadata":{}}}'
        ),
        "8ba0b06f",
        "c6d5021c",
    ),
    # TestComputeSandboxBlueprintHash, VCT addition (createVolumeClaimTemplate): the blueprint
    # hash changes, the pod template hash does not.
    (
        "upstream_with_vct",
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": "standard",
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"test-container",'
            '"image":"test-image","resources":{}}]},"metadata":{}},'
            '"volumeClaimTemplates":[{"metadata":{"name":"data"},'
            '"spec":{"accessModes":["ReadWriteOnce"],'
            '"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"standard"}}]}'
        ),
        "4e9d3d6d",
        "2473a66c",
    ),
    # TestComputeSandboxBlueprintHash, Service toggle: the blueprint hash changes, the pod
    # template hash does not.
    (
        "upstream_service_true",
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            },
            "service": True,
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"test-container",'
            '"image":"test-image","resources":{}}]},"metadata":{}},"service":true}'
        ),
        "80224234",
        "2473a66c",
    ),
    # ``service: false`` is a non-nil *bool, so it is emitted (absent, true and false all differ).
    (
        "upstream_service_false",
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            },
            "service": False,
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"test-container",'
            '"image":"test-image","resources":{}}]},"metadata":{}},"service":false}'
        ),
        "10094a53",
        "2473a66c",
    ),
    # Quantities re-rendered (1024Mi -> 1Gi, 1000m -> 1, 1.5Gi -> 1536Mi, the JSON number 1 ->
    # "1"); ResourceList keys sorted.
    (
        "resources",
        {
            "podTemplate": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "python:3.12",
                            "resources": {
                                "requests": {
                                    "memory": "1024Mi",
                                    "cpu": "500m",
                                    "ephemeral-storage": "1.5Gi",
                                },
                                "limits": {"cpu": "1000m", "memory": "2Gi", "nvidia.com/gpu": 1},
                            },
                        }
                    ]
                }
            }
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"python:3.12",'
            '"resources":{"limits":{"cpu":"1","memory":"2Gi","nvidia.com/gpu":"1"},'
            '"requests":{"cpu":"500m","ephemeral-storage":"1536Mi","memory":"1Gi"}}}]},'
            '"metadata":{}}}'
        ),
        "dfbbdfcc",
        "61c3e08d",
    ),
    # env and ports in declaration order (name before containerPort); an empty value dropped;
    # fieldRef's apiVersion before fieldPath.
    (
        "env_ports",
        {
            "podTemplate": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "img",
                            "env": [
                                {"name": "MODE", "value": "dev"},
                                {"name": "EMPTY", "value": ""},
                                {
                                    "name": "POD",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "fieldPath": "metadata.name",
                                            "apiVersion": "v1",
                                        }
                                    },
                                },
                            ],
                            "ports": [
                                {"containerPort": 8888, "protocol": "TCP", "name": "http"},
                                {"protocol": "UDP", "containerPort": 53},
                            ],
                        }
                    ]
                }
            }
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"img",'
            '"ports":[{"name":"http","containerPort":8888,"protocol":"TCP"},'
            '{"containerPort":53,"protocol":"UDP"}],"env":[{"name":"MODE","value":"dev"},'
            '{"name":"EMPTY"},{"name":"POD","valueFrom":{"fieldRef":{"apiVersion":"v1",'
            '"fieldPath":"metadata.name"}}}],"resources":{}}]},"metadata":{}}}'
        ),
        "22f56025",
        "fb2c1dde",
    ),
    # podTemplate labels and annotations, keys sorted.
    (
        "metadata_labels",
        {
            "podTemplate": {
                "metadata": {
                    "labels": {"zeta": "1", "app": "web", "agents.x-k8s.io/x": "y"},
                    "annotations": {"b": "2", "a": "1"},
                },
                "spec": {"containers": [{"name": "app", "image": "img"}]},
            }
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"img",'
            '"resources":{}}]},"metadata":{"labels":{"agents.x-k8s.io/x":"y","app":"web",'
            '"zeta":"1"},"annotations":{"a":"1","b":"2"}}}}'
        ),
        "8dba5623",
        "c277a800",
    ),
    # A PVC template: metadata (name, labels, annotations) before spec; 10240Mi -> 10Gi; readOnly
    # false dropped.
    (
        "vct_full",
        {
            "podTemplate": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "img",
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/data", "readOnly": False}
                            ],
                        }
                    ]
                }
            },
            "volumeClaimTemplates": [
                {
                    "spec": {
                        "resources": {"requests": {"storage": "10240Mi"}},
                        "accessModes": ["ReadWriteOnce"],
                    },
                    "metadata": {
                        "annotations": {"k": "v"},
                        "labels": {"tier": "fast"},
                        "name": "data",
                    },
                }
            ],
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"img",'
            '"resources":{},"volumeMounts":[{"name":"data","mountPath":"/data"}]}]},'
            '"metadata":{}},"volumeClaimTemplates":[{"metadata":{"name":"data",'
            '"labels":{"tier":"fast"},"annotations":{"k":"v"}},'
            '"spec":{"accessModes":["ReadWriteOnce"],'
            '"resources":{"requests":{"storage":"10Gi"}}}}]}'
        ),
        "b8d0d668",
        "86cee42a",
    ),
    # Go's HTML escaping of < > & and U+2028/U+2029, short escapes, \u0001, non-ASCII raw.
    (
        "html_chars",
        {
            "podTemplate": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "img",
                            "args": [
                                "a<b",
                                "c>d",
                                "e&f",
                                "line\u2028sep\u2029",
                                'quote"back\\slash\nnl\ttab',
                                "ü😀",
                                "\x01",
                            ],
                        }
                    ]
                },
                "metadata": {"annotations": {"note": "<script>&amp;</script>"}},
            }
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"img",'
            '"args":["a\\u003cb","c\\u003ed","e\\u0026f","line\\u2028sep\\u2029",'
            '"quote\\"back\\\\slash\\nnl\\ttab","ü😀","\\u0001"],"resources":{}}]},'
            '"metadata":{"annotations":{"note":"\\u003cscript\\u003e\\u0026amp;\\u003c/script'
            '\\u003e"}}}}'
        ),
        "74601a79",
        "955196e2",
    ),
    # Pointers to zero values kept (automountServiceAccountToken false,
    # terminationGracePeriodSeconds 0); omitempty zeroes and empty slices and maps dropped.
    (
        "pointers_and_zeroes",
        {
            "podTemplate": {
                "spec": {
                    "automountServiceAccountToken": False,
                    "hostNetwork": False,
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {},
                    "tolerations": [],
                    "restartPolicy": "",
                    "containers": [
                        {
                            "name": "app",
                            "image": "img",
                            "workingDir": "",
                            "command": [],
                            "stdin": False,
                            "securityContext": {
                                "runAsNonRoot": True,
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                }
            }
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"img",'
            '"resources":{},"securityContext":{"capabilities":{"drop":["ALL"]},'
            '"runAsNonRoot":true,"allowPrivilegeEscalation":false}}],'
            '"terminationGracePeriodSeconds":0,"automountServiceAccountToken":false},'
            '"metadata":{}}}'
        ),
        "a8b532ce",
        "e8446843",
    ),
    # No podTemplate: Go's zero PodTemplate; ``containers`` has no omitempty, so it is null.
    (
        "empty_pod_template",
        {},
        '{"podTemplate":{"spec":{"containers":null},"metadata":{}}}',
        "e0a51307",
        "ba167cb4",
    ),
    # networkPolicy and networkPolicyManagement are template-only: the same hashes as
    # upstream_base.
    (
        "template_only_fields",
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            },
            "networkPolicy": {"ingress": [{}], "egress": []},
            "networkPolicyManagement": "Managed",
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"test-container",'
            '"image":"test-image","resources":{}}]},"metadata":{}}}'
        ),
        "c972d31f",
        "2473a66c",
    ),
    # Probes: the inline ProbeHandler's fields first; IntOrString ports as an int and as a string.
    (
        "probes",
        {
            "podTemplate": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "img",
                            "readinessProbe": {
                                "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                                "periodSeconds": 10,
                                "failureThreshold": 3,
                            },
                            "livenessProbe": {
                                "tcpSocket": {"port": "http"},
                                "initialDelaySeconds": 5,
                            },
                        }
                    ]
                }
            }
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"img",'
            '"resources":{},"livenessProbe":{"tcpSocket":{"port":"http"},'
            '"initialDelaySeconds":5},"readinessProbe":{"httpGet":{"path":"/healthz",'
            '"port":8080,"scheme":"HTTP"},"periodSeconds":10,"failureThreshold":3}}]},'
            '"metadata":{}}}'
        ),
        "a6a73ac7",
        "1795754c",
    ),
    # volumes before containers; an ephemeral volume's metav1.ObjectMeta; emptyDir's sizeLimit (a
    # *Quantity).
    (
        "ephemeral_volume",
        {
            "podTemplate": {
                "spec": {
                    "containers": [{"name": "app", "image": "img"}],
                    "volumes": [
                        {
                            "name": "scratch",
                            "ephemeral": {
                                "volumeClaimTemplate": {
                                    "metadata": {"labels": {"a": "b"}},
                                    "spec": {
                                        "accessModes": ["ReadWriteOnce"],
                                        "resources": {"requests": {"storage": "1Gi"}},
                                    },
                                }
                            },
                        },
                        {"name": "cache", "emptyDir": {"sizeLimit": "500Mi", "medium": "Memory"}},
                    ],
                }
            }
        },
        (
            '{"podTemplate":{"spec":{"volumes":[{"name":"scratch",'
            '"ephemeral":{"volumeClaimTemplate":{"metadata":{"labels":{"a":"b"}},'
            '"spec":{"accessModes":["ReadWriteOnce"],'
            '"resources":{"requests":{"storage":"1Gi"}}}}}},{"name":"cache",'
            '"emptyDir":{"medium":"Memory","sizeLimit":"500Mi"}}],'
            '"containers":[{"name":"app","image":"img","resources":{}}]},"metadata":{}}}'
        ),
        "2e2a8fdb",
        "2a47c580",
    ),
    # JSON nulls decode to Go zero values: omitted where omitempty, ``metadata`` still ``{}``.
    (
        "null_values",
        {
            "podTemplate": {
                "metadata": None,
                "spec": {
                    "containers": [{"name": "app", "image": "img", "env": None, "resources": None}],
                    "volumes": None,
                },
            },
            "service": None,
        },
        (
            '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"img",'
            '"resources":{}}]},"metadata":{}}}'
        ),
        "97666ed3",
        "08e9f190",
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected_json", "expected_hash", "expected_pod_hash"),
    [v[1:] for v in GO_VECTORS],
    ids=[v[0] for v in GO_VECTORS],
)
def test_matches_go(
    spec: dict[str, Any], expected_json: str, expected_hash: str, expected_pod_hash: str
) -> None:
    """The bytes and both hashes Go produces for the same template spec."""
    assert blueprint_json(spec) == expected_json
    assert blueprint_hash(spec) == expected_hash == name_hash(expected_json)
    pod_json = pod_template_json(spec)
    assert expected_json.startswith('{"podTemplate":' + pod_json)
    assert pod_template_hash(spec) == expected_pod_hash == name_hash(pod_json)


def _vector(name: str) -> tuple[str, str]:
    """(blueprint hash, pod template hash) of the named Go vector."""
    _, _, _, blueprint, pod = next(v for v in GO_VECTORS if v[0] == name)
    return blueprint, pod


def test_upstream_hash_changes() -> None:
    """Upstream TestComputeSandboxBlueprintHash: a pod spec change, a VCT addition and the Service
    toggle each change the blueprint hash; only the pod spec change moves the deprecated pod
    template hash."""
    base, base_pod = _vector("upstream_base")
    for name in ("upstream_image_v2", "upstream_with_vct", "upstream_service_true"):
        assert _vector(name)[0] != base
    assert _vector("upstream_image_v2")[1] != base_pod
    assert _vector("upstream_with_vct")[1] == _vector("upstream_service_true")[1] == base_pod
    hashes = {
        _vector(n)[0] for n in ("upstream_base", "upstream_service_true", "upstream_service_false")
    }
    assert len(hashes) == 3


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = [(k, _shuffled(v, rng)) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@pytest.mark.parametrize("seed", range(5))
def test_deterministic_under_key_order(seed: int) -> None:
    """Upstream TestComputeSandboxBlueprintHash "same template produces same hash", and more: the
    served key order of any object does not matter, since Go decodes into structs and maps."""
    rng = random.Random(seed)
    for _, spec, expected, _, _ in GO_VECTORS:
        assert blueprint_json(_shuffled(copy.deepcopy(spec), rng)) == expected


def test_input_not_mutated() -> None:
    spec = {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "img"}]}}}
    before = copy.deepcopy(spec)
    blueprint_hash(spec)
    pod_template_hash(spec)
    assert spec == before


def test_go_1_22_short_escapes() -> None:
    """By hand: since Go 1.22 ``\\b`` and ``\\f`` are written short; other control characters
    stay ``\\u00XX``."""
    spec = {"podTemplate": {"spec": {"containers": [{"name": "a\bb\fc\x0bd", "image": "i"}]}}}
    assert blueprint_json(spec) == (
        '{"podTemplate":{"spec":{"containers":[{"name":"a\\bb\\fc\\u000bd","image":"i",'
        '"resources":{}}]},"metadata":{}}}'
    )


def test_omitzero_creation_timestamp() -> None:
    """By hand (Go 1.24 ``omitzero``): an ephemeral volume's ObjectMeta drops an absent
    creationTimestamp and writes a present one in UTC to the second."""

    def volume(meta: dict[str, Any]) -> dict[str, Any]:
        template = {"metadata": meta, "spec": {}}
        return {
            "podTemplate": {
                "spec": {
                    "containers": [],
                    "volumes": [{"name": "v", "ephemeral": {"volumeClaimTemplate": template}}],
                }
            }
        }

    prefix = '{"podTemplate":{"spec":{"volumes":[{"name":"v","ephemeral":{"volumeClaimTemplate":'
    suffix = '}}],"containers":[]},"metadata":{}}}'
    assert blueprint_json(volume({"name": "x"})) == (
        prefix + '{"metadata":{"name":"x"},"spec":{"resources":{}}}' + suffix
    )
    assert blueprint_json(volume({"creationTimestamp": "2024-01-02T03:04:05.5+02:00"})) == (
        prefix
        + '{"metadata":{"creationTimestamp":"2024-01-02T01:04:05Z"},"spec":{"resources":{}}}'
        + suffix
    )


GO_QUANTITIES = [
    ("500m", "500m"),
    ("1Gi", "1Gi"),
    ("1024Mi", "1Gi"),
    ("1000m", "1"),
    ("1.5Gi", "1536Mi"),
    ("0.5", "500m"),
    ("1.1", "1100m"),
    ("2000000k", "2G"),
    ("12Mi", "12Mi"),
    ("1536Mi", "1536Mi"),
    ("3072Ki", "3Mi"),
    ("0.5Ki", "512"),
    ("1.500", "1.500"),
    ("+1", "+1"),
    ("1.", "1."),
    ("01Gi", "01Gi"),
    ("1e3", "1e3"),
    ("1E3", "1E3"),
    ("1e-10", "1e-9"),
    ("0.0000000001", "1n"),
    ("1000E", "1"),
    ("-1Gi", "-1Gi"),
    ("100Gi", "100Gi"),
    ("1Ei", "1Ei"),
    ("8Ei", "9223372036854775807"),
    ("0", "0"),
    ("00", "0"),
    ("-0", "0"),
    (".5", "500m"),
    ("1e+21", "1e+21"),
    (1, "1"),
    (1.5, "1500m"),
    (0.1, "100m"),
    (1e21, "1e+21"),
    ("  2Gi ", "2Gi"),
    ("10e3", "10e3"),
    ("1e2", "100"),
]


@pytest.mark.parametrize(("served", "expected"), GO_QUANTITIES)
def test_quantity_matches_go(served: str | int | float, expected: str) -> None:
    """``resource.Quantity`` after a JSON round trip in Go, quirks included: text that passes the
    parser's cheap canonical test is kept verbatim (``1.500``, ``+1``, ``01Gi``, ``1E3``), binary
    amounts are capped at 2^63-1 (``8Ei``), anything below a nanounit rounds up."""
    assert canonical_quantity(served) == expected


def test_unknown_fields_are_best_effort() -> None:
    """Fields the tables do not know never crash: they follow the known fields of their object,
    sorted, as generic JSON. Top-level keys other than the blueprint's three are template-only
    and ignored."""
    spec = {
        "networkPolicy": {"ingress": []},
        "futureTemplateField": 1,
        "podTemplate": {
            "spec": {
                "zFuture": {"b": [1, 2.5, None], "a": "<x>"},
                "containers": [{"image": "img", "name": "app", "aNewField": True}],
                "aFuture": None,
            },
        },
    }
    assert blueprint_json(spec) == (
        '{"podTemplate":{"spec":{"containers":[{"name":"app","image":"img","resources":{},'
        '"aNewField":true}],"zFuture":{"a":"\\u003cx\\u003e","b":[1,2.5,null]}},"metadata":{}}}'
    )


@pytest.mark.parametrize(
    "spec",
    [
        {"podTemplate": "not an object"},
        {"podTemplate": {"spec": {"containers": "nope", "volumes": [1, "x", None]}}},
        {
            "podTemplate": {
                "spec": {"containers": [{"name": 5, "resources": {"limits": {"cpu": "x"}}}]}
            }
        },
        {"podTemplate": {"spec": {"containers": [{"ports": [{"containerPort": "80"}]}]}}},
        {"podTemplate": {"metadata": {"labels": ["a"]}, "spec": {"nodeSelector": "x"}}},
        {"volumeClaimTemplates": {"a": 1}, "service": "yes"},
    ],
)
def test_undecodable_input_does_not_crash(spec: dict[str, Any]) -> None:
    """Input Go could not decode (upstream then writes no hash at all) still hashes."""
    assert len(blueprint_hash(spec)) == 8
    assert len(pod_template_hash(spec)) == 8


def test_an_open_pool_revision_hashes_the_template_as_opensandbox_marshals_it() -> None:
    """docs/opensandbox.md §2.6: ``sha256(json.Marshal(pool.Spec.Template))[:8]`` in hex, with
    k8s.io/api v0.33's encoding: ``metadata`` first with ``"creationTimestamp":null``, then the
    spec with every container's ``"resources":{}``, fields in Go declaration order, nothing
    defaulted (no protocol on a port)."""
    template = {
        "spec": {"containers": [{"image": "i", "ports": [{"containerPort": 80}], "name": "c"}]},
        "metadata": {"labels": {"b": "2", "a": "1"}},
    }
    expected = (
        '{"metadata":{"creationTimestamp":null,"labels":{"a":"1","b":"2"}},'
        '"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}],'
        '"resources":{}}]}}'
    )
    assert pod_template_spec_json(template) == expected
    assert open_pool_revision(template) == hashlib.sha256(expected.encode()).hexdigest()[:16]
    assert pod_template_spec_json(None) == "null"
    empty = '{"metadata":{"creationTimestamp":null},"spec":{"containers":null}}'
    assert pod_template_spec_json({}) == empty
