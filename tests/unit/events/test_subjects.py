"""The subject scheme: reversible, readable token encoding, and filters that select as they say."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.subjects import (
    SubjectError,
    dead_letter_subject,
    decision_filter,
    decision_subject,
    decode_token,
    encode_token,
    event_filter,
    event_subject,
    parse_decision_subject,
    parse_event_subject,
    parse_state_subject,
    parse_warm_subject,
    state_filter,
    state_subject,
    warm_consumer_name,
    warm_queue_filter,
    warm_subject,
)

# Kubernetes object names: DNS subdomains, i.e. lower-case alphanumerics, '-' and '.'.
dns_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)
k8s_name = st.lists(dns_label, min_size=1, max_size=5).map(".".join)


def matches(filter_subject: str, subject: str) -> bool:
    """NATS wildcard matching: ``*`` is one token, ``>`` one or more trailing tokens."""
    pattern, tokens = filter_subject.split("."), subject.split(".")
    for index, part in enumerate(pattern):
        if part == ">":
            return len(tokens) > index
        if index >= len(tokens) or (part != "*" and part != tokens[index]):
            return False
    return len(tokens) == len(pattern)


def is_valid_nats_token(token: str) -> bool:
    return bool(token) and not re.search(r"[.*>\s]", token)


@given(st.text())
def test_any_text_round_trips_through_a_valid_token(text: str) -> None:
    token = encode_token(text)
    assert is_valid_nats_token(token)
    assert decode_token(token) == text


@given(k8s_name)
def test_kubernetes_names_with_dots_round_trip_through_event_subjects(name: str) -> None:
    subject = event_subject("Sandbox", "team-a", name)
    assert all(is_valid_nats_token(token) for token in subject.split("."))
    assert parse_event_subject(subject) == ("sandbox", "team-a", name)
    assert parse_state_subject(state_subject("Sandbox", "team-a", name)).name == name
    assert parse_decision_subject(decision_subject("claim", "Pod", "ns", name)).name == name
    assert parse_warm_subject(warm_subject("ns", "a1b2", "pool.x", "node.1", name)).sandbox == name


@given(k8s_name, k8s_name)
def test_distinct_names_get_distinct_subjects(first: str, second: str) -> None:
    if first != second:
        assert event_subject("Pod", "ns", first) != event_subject("Pod", "ns", second)


def test_ordinary_names_stay_readable() -> None:
    assert encode_token("python-sandbox-7xk2f") == "python-sandbox-7xk2f"
    assert encode_token("my.app.v1") == "my_app_v1"
    assert event_subject("SandboxWarmPool", "default", "web.pool") == (
        "sandbus.events.sandboxwarmpool.default.web_pool"
    )


def test_characters_that_nats_forbids_are_escaped() -> None:
    assert encode_token("a*b>c d\te") == "a=2Ab=3Ec=20d=09e"
    assert encode_token("under_score=eq") == "under=5Fscore=3Deq"
    assert encode_token("a.b_c") == "a_b=5Fc", "a dot beside an escaped character"
    assert encode_token("") == "="
    assert encode_token("ü") == "=C3=BC"


@pytest.mark.parametrize(
    "token",
    ["", "a.b", "a*", "=4", "=zz", "a b", "=41", "==", "=C3"],
    ids=[
        "empty",
        "dot",
        "star",
        "short-escape",
        "bad-hex",
        "space",
        "non-canonical",
        "double",
        "bad-utf8",
    ],
)
def test_malformed_tokens_are_rejected(token: str) -> None:
    with pytest.raises(SubjectError):
        decode_token(token)


def test_cluster_scoped_objects_use_the_empty_namespace_token() -> None:
    subject = event_subject("Namespace", None, "kube-system")
    assert subject == "sandbus.events.namespace.=.kube-system"
    assert parse_event_subject(subject).namespace == ""


@pytest.mark.parametrize(
    ("subject", "error"),
    [
        ("sandbus.state.pod.ns.name", "not under sandbus.events"),
        ("sandbus.events.pod.ns", "needs 3 tokens"),
        ("sandbus.events.pod.ns.a.b", "needs 3 tokens"),
    ],
)
def test_parsing_rejects_subjects_outside_the_scheme(subject: str, error: str) -> None:
    with pytest.raises(SubjectError, match=error):
        parse_event_subject(subject)


def test_builders_refuse_missing_identity() -> None:
    with pytest.raises(SubjectError):
        event_subject("", "ns", "name")
    with pytest.raises(SubjectError):
        event_subject("Pod", "ns", "")
    with pytest.raises(SubjectError):
        decision_subject("", "Pod", "ns", "name")
    with pytest.raises(SubjectError):
        warm_subject("ns", "", "pool", "node", "name")


def test_event_filters_select_by_any_combination_of_kind_namespace_and_name() -> None:
    sandbox = event_subject("Sandbox", "default", "my.app")
    pod = event_subject("Pod", "default", "my.app")
    other_ns = event_subject("Sandbox", "team-b", "my.app")
    assert event_filter() == "sandbus.events.*.*.*"
    assert event_filter(kind="Sandbox") == "sandbus.events.sandbox.*.*"
    cases = {
        event_filter(): {sandbox, pod, other_ns},
        event_filter(kind="Sandbox"): {sandbox, other_ns},
        event_filter(namespace="default"): {sandbox, pod},
        event_filter(name="my.app"): {sandbox, pod, other_ns},
        event_filter("Sandbox", "default", "my.app"): {sandbox},
        event_filter(namespace=""): set(),
    }
    for filter_subject, expected in cases.items():
        selected = {s for s in (sandbox, pod, other_ns) if matches(filter_subject, s)}
        assert selected == expected, filter_subject


def test_state_and_decision_filters_follow_the_same_rules() -> None:
    assert matches(state_filter(kind="Pod"), state_subject("Pod", "ns", "x"))
    assert not matches(state_filter(kind="Pod"), event_subject("Pod", "ns", "x"))
    decision = decision_subject("claim", "SandboxClaim", "ns", "c.1")
    assert matches(decision_filter(), decision)
    assert matches(decision_filter(worker="claim", name="c.1"), decision)
    assert not matches(decision_filter(worker="pool"), decision)


def test_warm_queue_filter_selects_exactly_one_queue_or_one_node_of_it() -> None:
    entry = warm_subject("default", "abc123", "python", "node-1", "python-7xk2f")
    assert matches(warm_queue_filter("default", "abc123", "python"), entry), "every node"
    assert matches(warm_queue_filter("default", "abc123", "python", "node-1"), entry)
    assert not matches(warm_queue_filter("default", "abc123", "python", "node-2"), entry)
    assert not matches(warm_queue_filter("default", "abc123", "python", ""), entry)
    nodeless = warm_subject("default", "abc123", "python", "", "python-9zz")
    assert matches(warm_queue_filter("default", "abc123", "python", ""), nodeless)
    assert not matches(warm_queue_filter("default", "abc123", "other-pool"), entry)
    assert not matches(warm_queue_filter("default", "abc12", "python"), entry)
    assert not matches(warm_queue_filter("other", "abc123", "python"), entry)
    assert matches(warm_queue_filter("default", "abc123"), entry), "every pool of the template"
    parsed = parse_warm_subject(entry)
    assert (parsed.template_hash, parsed.pool, parsed.node, parsed.sandbox) == (
        "abc123",
        "python",
        "node-1",
        "python-7xk2f",
    )


def test_warm_consumer_names_are_valid_and_unique_per_queue_and_node() -> None:
    names = {
        warm_consumer_name("a-b", "c", "p", "n"),
        warm_consumer_name("a", "b-c", "p", "n"),
        warm_consumer_name("a.b", "c", "p", "n"),
        warm_consumer_name("a.b", "c", "q", "n"),
        warm_consumer_name("a.b", "c", "q", ""),
        warm_consumer_name("a.b", "c", "q", "n.1"),
    }
    assert len(names) == 6
    assert all(not re.search(r"[.*>\s/\\]", name) for name in names)


def test_dead_letter_subject_keeps_the_identity_tokens() -> None:
    original = event_subject("Sandbox", "default", "x")
    assert dead_letter_subject(original) == "sandbus.dlq.events.sandbox.default.x"
    assert dead_letter_subject("elsewhere.thing") == "sandbus.dlq.elsewhere.thing"
    with pytest.raises(SubjectError):
        dead_letter_subject("")
