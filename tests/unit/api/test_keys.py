"""The agent-sandbox name hash against the vectors of docs/agent-sandbox.md §4.6, and the properties
label values need."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api import keys
from api.keys import name_hash

# docs/agent-sandbox.md §4.6: the standard 32-bit FNV-1a vectors the Go controller is tested with.
SPEC_VECTORS = [
    ("", "811c9dc5"),
    ("a", "e40c292c"),
    ("foobar", "bf9cf968"),
    ("pool", "91dd7983"),
    ("tpl", "9d22159f"),
    ("test-pool", "59733166"),
    ("my-sandbox", "374de8f5"),
    ("test-template", "69155462"),
]

EIGHT_LOWER_HEX = re.compile(r"[0-9a-f]{8}")


@pytest.mark.parametrize(("name", "expected"), SPEC_VECTORS)
def test_name_hash_matches_the_go_controller(name: str, expected: str) -> None:
    assert name_hash(name) == expected


def test_template_names_get_distinct_eight_character_hashes() -> None:
    # The upstream TestSandboxTemplateRefHash case.
    hashes = {name_hash(n) for n in ("sandbox-name", "other-template", "")}
    assert len(hashes) == 3
    assert all(len(h) == 8 for h in hashes)


@given(st.text())
def test_name_hash_is_always_eight_lowercase_hex_digits(name: str) -> None:
    # A label value must be stable in length and case: Go renders %08x, zero-padded.
    assert EIGHT_LOWER_HEX.fullmatch(name_hash(name))


@given(
    prefix=st.text(),
    last=st.lists(st.sampled_from(string.printable), min_size=2, max_size=2, unique=True),
)
def test_names_differing_only_in_their_last_ascii_character_never_collide(
    prefix: str, last: list[str]
) -> None:
    # Each FNV-1a step is a bijection of the state (xor a byte, multiply by an odd prime), so two
    # names that share everything but the final byte always hash apart: pool members named
    # "p-1" … "p-9" can never share a label value.
    assert name_hash(prefix + last[0]) != name_hash(prefix + last[1])


# Names are ASCII DNS labels, but the template hashes run over JSON, where Go leaves non-ASCII
# characters raw: the hash must consume their UTF-8 bytes. These two vectors were computed with
# an independent FNV-1a implementation (the fnv1a-pure package), not with this code.
NON_ASCII_VECTORS = [("é", "1e9de8c1"), ("sandbox-ü-日本", "4312da13")]


@pytest.mark.parametrize(("text", "expected"), NON_ASCII_VECTORS)
def test_name_hash_runs_over_utf8_bytes(text: str, expected: str) -> None:
    assert name_hash(text) == expected


def test_key_constants_are_the_spec_strings() -> None:
    # A typo here makes every object of the Go controller invisible, so pin the prefixes and
    # the few keys that selectors are built from.
    assert keys.LABEL_SANDBOX_NAME_HASH == "agents.x-k8s.io/sandbox-name-hash"
    assert keys.LABEL_WARM_POOL_SANDBOX == "agents.x-k8s.io/warm-pool-sandbox"
    assert keys.LABEL_SANDBOX_TEMPLATE_REF_HASH == "agents.x-k8s.io/sandbox-template-ref-hash"
    assert keys.ANNOTATION_SANDBOX_NAME == keys.LEGACY_LABEL_SANDBOX_NAME
    label_and_annotation_keys = [
        value
        for name, value in vars(keys).items()
        if name.startswith(("LABEL_", "ANNOTATION_", "LEGACY_LABEL_"))
    ]
    for key in label_and_annotation_keys:
        prefix, _, rest = key.partition("/")
        assert rest, key
        assert prefix in {
            "agents.x-k8s.io",
            "api.agents.x-k8s.io",
            "opentelemetry.io",
            "cluster-autoscaler.kubernetes.io",
        }, key
