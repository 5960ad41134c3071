"""Reversible placeholders: ``[CN_MOBILE_1]`` out, the original value back in the answer.

A ``Pseudonyms`` table lives in the memory of one request only: the same value gets
the same placeholder wherever it appears in that request (every turn, the system
instruction, function arguments), and nothing of it is logged or stored.

Placeholders are ``[TYPE_N]``: the closing bracket makes ``[CN_MOBILE_1]`` and
``[CN_MOBILE_10]`` distinct tokens. Restoration replaces only placeholders this
request issued, matched exactly; anything else that looks like one — a placeholder
the model invented (``[CN_MOBILE_7]``), changed in case (``[cn_mobile_1]``) or
brackets (``(CN_MOBILE_1)``) — passes through unchanged.

In a stream a placeholder can be split across events anywhere (``…[CN_MO`` |
``BILE_1]…``). ``TextRestorer`` holds back only the tail of the text that could still
be the start of an issued placeholder — at most one placeholder's length — and emits
everything else at once.
"""

from __future__ import annotations

import re

__all__ = ["PLACEHOLDER", "Pseudonyms", "TextRestorer"]

PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]*_[1-9][0-9]*\]")
# The same, captured: ``split`` puts every placeholder-shaped token at an odd index.
_SPLIT = re.compile(f"({PLACEHOLDER.pattern})")


class Pseudonyms:
    """The placeholder table of one request."""

    def __init__(self) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._values: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._prefixes: frozenset[str] | None = frozenset()

    def placeholder(self, entity_type: str, value: str) -> str:
        """The placeholder for ``value``: the same one every time within this request."""
        key = (entity_type, value)
        found = self._by_value.get(key)
        if found is not None:
            return found
        number = self._counts.get(entity_type, 0) + 1
        self._counts[entity_type] = number
        placeholder = f"[{entity_type}_{number}]"
        self._by_value[key] = placeholder
        self._values[placeholder] = value
        self._prefixes = None
        return placeholder

    def __len__(self) -> int:
        return len(self._values)

    def restore(self, text: str) -> str:
        """``text`` with every placeholder issued here replaced by its value."""
        values = self._values
        if not values or "[" not in text:
            return text
        # One split and one lookup per token: no Python call per match, as ``sub`` with a
        # function makes (a few times faster on an answer repeating twenty placeholders).
        pieces = _SPLIT.split(text)
        if len(pieces) == 1:
            return text
        get = values.get
        pieces[1::2] = [get(token, token) for token in pieces[1::2]]
        return "".join(pieces)

    def pending_tail(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is an unfinished issued placeholder."""
        start = text.rfind("[")
        if start < 0 or "]" in text[start:]:
            return 0
        tail = text[start:]
        return len(tail) if tail in self._prefix_set() else 0

    def _prefix_set(self) -> frozenset[str]:
        if self._prefixes is None:
            self._prefixes = frozenset(
                placeholder[:cut]
                for placeholder in self._values
                for cut in range(1, len(placeholder))
            )
        return self._prefixes


class TextRestorer:
    """Restores one stream of text (one candidate's text) that arrives in pieces."""

    def __init__(self, pseudonyms: Pseudonyms) -> None:
        self._pseudonyms = pseudonyms
        self._held = ""

    def feed(self, piece: str) -> str:
        """The restored text that can be emitted now; the rest waits for the next piece."""
        if not self._held and "[" not in piece:
            return piece  # nothing held, nothing to restore or hold: most pieces
        text = self._held + piece
        hold = self._pseudonyms.pending_tail(text)
        ready, self._held = (text[:-hold], text[-hold:]) if hold else (text, "")
        return self._pseudonyms.restore(ready)

    def flush(self) -> str:
        """Whatever is held back, as it is: a fragment that never completed is not a value."""
        held, self._held = self._held, ""
        return held

    @property
    def holding(self) -> bool:
        """Whether text is held back waiting for the rest of a placeholder."""
        return bool(self._held)
