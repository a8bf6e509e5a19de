"""The store's snapshots, the engine of pagination: a page read from a key onwards at an older
resourceVersion is exactly the slice of the full list at that resourceVersion.

The reference is a model kept by hand: a dict of the objects after every write, so "the list at
RV r" is simply the model as it was when the store reached r.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from devtools.cluster.storage.store import Store, decode

NAMESPACES = ("a", "ab", "b")
NAMES = ("x", "y", "z", "zz")

write = st.tuples(
    st.sampled_from(("put", "put", "delete")),
    st.sampled_from(NAMESPACES),
    st.sampled_from(NAMES),
    st.integers(0, 3),
)


def _apply(store: Store, model: dict[tuple[str, str], int], op: tuple[str, str, str, int]) -> None:
    action, namespace, name, value = op
    key = (namespace, name)
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}, "v": value}
    if action == "delete":
        if key in model:
            store.delete("things", namespace, name)
            del model[key]
    elif key in model:
        store.update("things", obj)
        model[key] = value
    else:
        store.create("things", obj)
        model[key] = value


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(write, max_size=25),
    after=st.lists(write, max_size=25),
    scope=st.sampled_from((None, *NAMESPACES)),
    start=st.one_of(
        st.none(), st.tuples(st.sampled_from(("", *NAMESPACES)), st.sampled_from(NAMES))
    ),
    other_resource=st.booleans(),
)
# A continue key past the listed namespace (a cluster-wide token reused in a namespace).
@example(
    before=[], after=[("put", "ab", "x", 0)], scope="a", start=("ab", "x"), other_resource=False
)
def test_a_snapshot_page_is_the_slice_of_the_list_at_its_resource_version(
    before: list[tuple[str, str, str, int]],
    after: list[tuple[str, str, str, int]],
    scope: str | None,
    start: tuple[str, str] | None,
    other_resource: bool,
) -> None:
    store = Store()
    model: dict[tuple[str, str], int] = {}
    for op in before:
        _apply(store, model, op)
    if other_resource:  # writes to another resource are no part of this one's snapshot
        store.create("others", {"metadata": {"name": "o", "namespace": "a"}})
    at_rv = store.resource_version
    then = dict(model)
    for op in after:
        _apply(store, model, op)

    snapshot = store.snapshot("things", scope, at_rv)
    expected = [
        (key, value)
        for key, value in sorted(then.items())
        if (scope is None or key[0] == scope) and (start is None or key > start)
    ]
    got = [(key, store_value(raw)) for key, raw in snapshot.after(start)]
    assert got == expected
    assert snapshot.count_after(start) == len(expected)

    now = store.snapshot("things", scope)
    assert [key for key, _ in now.after(start)] == [
        key
        for key in sorted(model)
        if (scope is None or key[0] == scope) and (start is None or key > start)
    ]


def store_value(raw: bytes) -> int:
    value: int = decode(raw)["v"]
    return value
