"""Answers remembered by a JSON value, for the write path's pure functions of one.

Every write of an object validates, defaults, prunes and checks the whole object, and most
writes change one part of it (a status write leaves ``spec`` as it was): what a pure function
of a value (and of a schema node, a rule: its *owner*) answered can be remembered by the value's
JSON and given again. Three rules keep that exact:

- the key is the owner's identity and the value's JSON (msgspec, insertion order: values that
  differ give different bytes, ``1``, ``1.0`` and ``true`` included), and the owner is held, so
  its id is not reused while the entry lives;
- a hit also compares the value with the decode of that JSON, so a value that is not plain JSON
  but encodes like one (a YAML date and its string, NaN and null) is never answered from memory;
- the memory is bounded by the bytes it holds (oldest first out): objects come and go, and a
  memo that grew with them would show in the cluster's resident memory per object.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["JsonMemo"]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

Key = tuple[int, bytes]


class JsonMemo:
    """(owner, JSON value) -> answer, holding at most ``budget`` bytes of keys and answers."""

    def __init__(self, budget: int = 1 << 20) -> None:
        self._budget = budget
        self._held = 0
        self._entries: dict[Key, tuple[object, Any, int]] = {}

    @staticmethod
    def key(owner: object, value: Any) -> Key | None:
        """The key of ``value`` for ``owner``; None if it has no JSON (then it is not
        remembered: compute it every time)."""
        try:
            return id(owner), _encoder.encode(value)
        except (TypeError, ValueError, OverflowError):
            return None

    def get(self, key: Key, owner: object, value: Any) -> tuple[bool, Any]:
        """(True, the answer) if ``value`` under ``owner`` was remembered, else (False, None)."""
        held = self._entries.get(key)
        if held is None or held[0] is not owner or _decoder.decode(key[1]) != value:
            return False, None
        return True, held[1]

    def put(self, key: Key, owner: object, answer: Any, size: int = 0) -> None:
        """Remember ``answer``; ``size`` is the bytes it holds besides the key."""
        cost = len(key[1]) + size
        if cost > self._budget:
            return
        previous = self._entries.pop(key, None)
        if previous is not None:
            self._held -= previous[2]
        while self._entries and self._held + cost > self._budget:
            oldest = next(iter(self._entries))
            self._held -= self._entries.pop(oldest)[2]
        self._entries[key] = (owner, answer, cost)
        self._held += cost

    def __len__(self) -> int:
        return len(self._entries)
