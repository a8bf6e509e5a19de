"""Label and field selectors (docs/devcluster.md §2 row 14), checked against apimachinery's rules.

The error texts are the ones a real API server returns in the 400 body, so a client or a person
sees the same words against the development cluster as against a cluster.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.cluster.apirules.selectors import (
    FIELD_SELECTORS,
    LabelSelector,
    SelectorError,
    field_selectors_for,
    parse_field_selector,
    parse_label_selector,
    selector_matches,
)

LABELS = {"app": "web", "tier": "front", "version": "3", "example.com/team": "core"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),  # != matches objects without the key
        ("app in (web,db)", True),
        ("app in (db)", False),
        ("missing in (x)", False),
        ("app notin (db)", True),
        ("app notin (web)", False),
        ("missing notin (x)", True),  # notin matches objects without the key
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("example.com/team=core", True),
        ("version>2", True),
        ("version>3", False),
        ("version<4", True),
        ("app>1", False),  # not an integer: no match
        ("missing>1", False),
        ("  app  =  web  ,  tier  ", True),  # whitespace around tokens is free
        ("app in ( web , db )", True),
        ("app=", False),  # empty value
        ("x in (foo,,baz),app,missing notin ()", False),
    ],
)
def test_label_selector_matching(text: str, expected: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is expected


def test_empty_value_matches_an_empty_label() -> None:
    assert parse_label_selector("app=").matches({"app": ""})
    assert parse_label_selector("app in ()").matches({"app": ""})


def test_keywords_are_plain_values_inside_value_lists() -> None:
    assert parse_label_selector("x in (in,notin)").matches({"x": "notin"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "x IN (a)",
            "unable to parse requirement: found 'IN', expected: in, notin, =, ==, !=, gt, lt",
        ),
        (
            "e!!!!!ss",
            "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt",
        ),
        (
            "type=app,versionv1.0.1)",
            "unable to parse requirement: found ')', expected: in, notin, =, ==, !=, gt, lt",
        ),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        (
            "x>a",
            'unable to parse requirement: values[0]: Invalid value: "a": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
    ],
)
def test_syntax_errors_have_apimachinery_messages(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_label_selector(text)
    assert caught.value.message == message


def test_invalid_key_is_reported_with_the_nil_field_path() -> None:
    with pytest.raises(SelectorError) as caught:
        parse_label_selector("-bad=x")
    assert caught.value.message.startswith(
        'unable to parse requirement: <nil>: Invalid value: "-bad": name part must consist of '
        "alphanumeric characters"
    )
    assert "(e.g. 'MyName',  or 'my.name',  or '123-abc'" in caught.value.message


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("a/b/c", "a qualified name must consist of"),
        ("/x", "prefix part must be non-empty"),
        ("Example.com/x", "prefix part a lowercase RFC 1123 subdomain"),
        ("x/", "name part must be non-empty"),
        ("k" * 64, "name part must be no more than 63 characters"),
    ],
)
def test_key_validation(key: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_label_selector(key)
    assert fragment in caught.value.message


def test_value_longer_than_63_characters_is_rejected() -> None:
    with pytest.raises(SelectorError) as caught:
        parse_label_selector("a=" + "v" * 64)
    assert caught.value.message.startswith("unable to parse requirement: values[0][a]: Invalid")
    assert "must be no more than 63 characters" in caught.value.message


def test_value_with_a_bad_character_is_rejected() -> None:
    with pytest.raises(SelectorError) as caught:
        parse_label_selector("a=b/c")
    assert "a valid label must be an empty string" in caught.value.message


def test_selector_renders_canonically() -> None:
    rendered = str(parse_label_selector("z notin (b,a), !y, x==1, w"))
    assert rendered == "w,x==1,!y,z notin (a,b)"


def test_from_match_builds_a_metav1_label_selector() -> None:
    selector = LabelSelector.from_match(
        {"app": "web"},
        [
            {"key": "tier", "operator": "In", "values": ["front", "back"]},
            {"key": "canary", "operator": "DoesNotExist"},
            {"key": "version", "operator": "Exists"},
            {"key": "zone", "operator": "NotIn", "values": ["eu"]},
        ],
    )
    assert selector.matches(LABELS)
    assert not selector.matches({**LABELS, "canary": "1"})
    assert not selector.matches({**LABELS, "zone": "eu"})


def test_from_match_rejects_an_unknown_operator_and_bad_values() -> None:
    with pytest.raises(SelectorError) as caught:
        LabelSelector.from_match(None, [{"key": "a", "operator": "Equals", "values": ["b"]}])
    assert caught.value.message == '"Equals" is not a valid label selector operator'
    with pytest.raises(SelectorError, match="values set can't be empty"):
        LabelSelector.from_match(None, [{"key": "a", "operator": "In", "values": []}])
    with pytest.raises(SelectorError, match="values set must be empty"):
        LabelSelector.from_match(None, [{"key": "a", "operator": "Exists", "values": ["x"]}])


def test_nil_selector_selects_nothing_and_empty_selector_everything() -> None:
    assert not LabelSelector.from_label_selector(None).matches(LABELS)
    assert LabelSelector.from_label_selector({}).matches(LABELS)
    assert LabelSelector.from_label_selector({}).empty


_label_keys = st.sampled_from(["a", "b", "app", "x.io/k"])
_label_values = st.sampled_from(["", "1", "v", "web"])
_labels = st.dictionaries(_label_keys, _label_values, max_size=4)


@st.composite
def _requirements(draw: st.DrawFn) -> tuple[str, Any]:
    key = draw(_label_keys)
    operator = draw(st.sampled_from(["exists", "!", "=", "==", "!=", "in", "notin"]))
    values = draw(st.lists(_label_values, min_size=1, max_size=3, unique=True))
    if operator == "exists":
        return key, lambda labels: key in labels
    if operator == "!":
        return f"!{key}", lambda labels: key not in labels
    if operator in ("=", "=="):
        return f"{key}{operator}{values[0]}", lambda labels: labels.get(key) == values[0]
    if operator == "!=":
        return f"{key}!={values[0]}", lambda labels: labels.get(key) != values[0]
    joined = ",".join(values)
    if operator == "in":
        return f"{key} in ({joined})", lambda labels: key in labels and labels[key] in values
    return f"{key} notin ({joined})", lambda labels: labels.get(key) not in values


@settings(max_examples=300, deadline=None)
@given(clauses=st.lists(_requirements(), min_size=1, max_size=4), labels=_labels)
def test_selector_is_the_and_of_its_clauses(clauses: list[tuple[str, Any]], labels: Any) -> None:
    text = ",".join(clause for clause, _ in clauses)
    expected = all(predicate(labels) for _, predicate in clauses)
    selector = parse_label_selector(text)
    assert selector.matches(labels) is expected
    # Rendering and reparsing keeps the meaning.
    assert parse_label_selector(str(selector)).matches(labels) is expected


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="ab=!(), in", max_size=12))
def test_any_text_either_fails_cleanly_or_round_trips(text: str) -> None:
    try:
        selector = parse_label_selector(text)
    except SelectorError:
        return
    assert parse_label_selector(str(selector)) == selector


# ----------------------------------------------------------------------------- field selectors

POD: dict[str, Any] = {
    "metadata": {"name": "p1", "namespace": "ns"},
    "spec": {"nodeName": "node-1", "restartPolicy": "Always"},
    "status": {"phase": "Running", "podIP": "10.0.0.5"},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name!=p1", False),
        ("spec.nodeName=node-1,status.phase=Running", True),
        ("spec.nodeName=", False),
        ("status.nominatedNodeName=", True),  # absent reads as ""
        ("spec.hostNetwork=false", True),  # absent boolean renders "false", as upstream
        ("status.phase!=Pending", True),
        ("status.podIP=10.0.0.5", True),
    ],
)
def test_field_selector_on_pods(text: str, expected: bool) -> None:
    assert parse_field_selector(text, FIELD_SELECTORS["pods"]).matches(POD) is expected


def test_unsupported_field_is_the_upstream_400_message() -> None:
    with pytest.raises(SelectorError) as caught:
        parse_field_selector("spec.x=1", field_selectors_for("widgets.example.com"))
    assert caught.value.message == "field label not supported: spec.x"


def test_custom_resources_support_only_name_and_namespace() -> None:
    supported = field_selectors_for("widgets.example.com")
    assert supported == {"metadata.name", "metadata.namespace"}
    assert parse_field_selector("metadata.namespace=ns", supported).matches(POD)


def test_event_field_labels_map_to_their_paths() -> None:
    event = {
        "involvedObject": {"kind": "Pod", "name": "p1"},
        "source": {"component": "kubelet"},
        "reportingController": "kubelet",
        "type": "Warning",
    }
    supported = field_selectors_for("events")
    selector = parse_field_selector(
        "involvedObject.kind=Pod,source=kubelet,reportingComponent=kubelet,type=Warning",
        supported,
    )
    assert selector.matches(event)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
        ("metadata.name=a=b", "invalid field selector: unescaped character in value: 61"),
        ("metadata.name=a\\x", "invalid field selector: invalid escape sequence: \\x"),
    ],
)
def test_field_selector_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_field_selector(text, FIELD_SELECTORS["pods"])
    assert caught.value.message == message


def test_escaped_characters_are_part_of_the_value() -> None:
    obj = {"metadata": {"name": "a,b=c"}}
    selector = parse_field_selector("metadata.name=a\\,b\\=c", {"metadata.name"})
    assert selector.matches(obj)
    assert str(selector) == "metadata.name=a\\,b\\=c"


def test_labels_and_fields_together() -> None:
    obj = {"metadata": {"name": "p1", "labels": {"app": "web"}}}
    labels = parse_label_selector("app=web")
    fields = parse_field_selector("metadata.name=p1", {"metadata.name"})
    assert selector_matches(obj, labels, fields)
    assert not selector_matches(obj, parse_label_selector("app=db"), fields)
    assert selector_matches({"metadata": {"name": "p1"}}, None, fields)
