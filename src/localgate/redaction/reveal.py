"""What the model will read: encodings undone before detection, positions mapped back.

Text reaches the model in forms a pattern does not see through: ``json.dumps`` output
(``\\u624b\\u673a13812345678`` is 手机13812345678 to the model, but a letter glued to the
number to a pattern), URL query values (``%2B8613812345678``), HTML character references
(``&#49;``), and numbers split by invisible characters (``1381\\u200b2345678``).
``reveal`` undoes all of these — repeatedly, so ``json.dumps`` of ``json.dumps`` output is
seen through too — and says, for every character of the result, which stretch of the
original it came from. A finding in the revealed text then replaces the *whole* encoded
stretch in the original, so the text stays valid JSON (or a valid URL) for the model.

Text with none of these forms (almost all of it) costs one scan and is not copied.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import re2

__all__ = ["INVISIBLE", "Revealed", "plain", "reveal"]

# Characters that render as nothing (or nothing a reader notices) but split a number for
# a pattern: every format character (category Cf: zero-width space, joiners, soft hyphen,
# bidirectional controls, the BOM, tags), the combining grapheme joiner, variation
# selectors and Hangul fillers. Removed before detection.
INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
    "\U000110bd\U000110cd\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f\U000e0100-\U000e01ef"
)
# Rounds of decoding: json.dumps of json.dumps of a URL is three layers.
_MAX_ROUNDS = 4

_SEQUENCE = re.compile(
    r"\\u(?P<high>[dD][89abAB][0-9a-fA-F]{2})\\u(?P<low>[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|\\u(?P<unit>[0-9a-fA-F]{4})"
    r"|\\(?P<escape>[\"\\/bfnrt])"
    r"|(?P<percent>(?:%[0-9A-Fa-f]{2})+)"
    r"|&#(?:[xX](?P<hex>[0-9a-fA-F]{1,6})|(?P<decimal>[0-9]{1,7}));"
    f"|(?P<invisible>[{INVISIBLE}]+)"
)
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_REPLACEMENT = "\ufffd"


@cache
def _trigger() -> Any:
    """Any character that can start an encoded form (an RE2 pattern: one linear pass)."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(f"[\\\\%&{INVISIBLE}]", options)


class Revealed:
    """The revealed form of one text, and where each of its characters came from."""

    __slots__ = ("_ends", "_starts", "text")

    def __init__(self, text: str, starts: list[int], ends: list[int]) -> None:
        self.text = text
        # Character i of ``text`` came from ``original[starts[i]:ends[i]]``.
        self._starts = starts
        self._ends = ends

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """The stretch of the original that ``text[start:end]`` (non-empty) came from."""
        return self._starts[start], self._ends[end - 1]


def reveal(text: str) -> Revealed | None:
    """``text`` with escapes, percent-encoding, character references and invisible
    characters undone; None if it has none of them."""
    if text.isascii():
        if "\\" not in text and "%" not in text and "&#" not in text:
            return None
    elif not _trigger().search(text):
        return None
    current: Revealed | None = None
    source = text
    for _ in range(_MAX_ROUNDS):
        decoded = _decode_once(source)
        if decoded is None:
            break
        current = decoded if current is None else _compose(current, decoded)
        source = decoded.text
    return current


def plain(text: str) -> str:
    """The revealed form of ``text`` (itself if nothing is encoded)."""
    revealed = reveal(text)
    return text if revealed is None else revealed.text


def _decode_once(text: str) -> Revealed | None:
    """One layer of encodings undone; None if there was nothing to undo."""
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    position = 0
    changed = False
    for match in _SEQUENCE.finditer(text):
        start, end = match.span()
        if start > position:
            pieces.append(text[position:start])
            starts.extend(range(position, start))
            ends.extend(range(position + 1, start + 1))
        position = end
        kind = match.lastgroup
        if kind == "percent":
            _percent(match.group(), start, pieces, starts, ends)
            changed = True
            continue
        if kind == "invisible":
            changed = True  # removed: maps to nothing
            continue
        char = _character(match)
        if char is None:  # not a character (a reference past U+10FFFF): left as it was
            pieces.append(match.group())
            starts.extend(range(start, end))
            ends.extend(range(start + 1, end + 1))
            continue
        pieces.append(char)
        starts.append(start)
        ends.append(end)
        changed = True
    if not changed:
        return None
    if position < len(text):
        pieces.append(text[position:])
        starts.extend(range(position, len(text)))
        ends.extend(range(position + 1, len(text) + 1))
    return Revealed("".join(pieces), starts, ends)


def _character(match: re.Match[str]) -> str | None:
    """The one character an escape or character reference stands for."""
    high, unit, escape = match.group("high"), match.group("unit"), match.group("escape")
    if high is not None:
        code = 0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(match.group("low"), 16) - 0xDC00)
    elif unit is not None:
        code = int(unit, 16)
    elif escape is not None:
        return _ESCAPES[escape]
    else:
        number = match.group("hex")
        code = int(number, 16) if number is not None else int(match.group("decimal"))
        if code > 0x10FFFF:
            return None
    # A lone surrogate is not text (and cannot be encoded as UTF-8 for the segmenter).
    return _REPLACEMENT if 0xD800 <= code <= 0xDFFF else chr(code)


def _percent(run: str, offset: int, pieces: list[str], starts: list[int], ends: list[int]) -> None:
    """A run of ``%XX`` as the UTF-8 characters it encodes; bytes that are not UTF-8 are
    left as they were."""
    data = bytes.fromhex(run.replace("%", ""))
    index = 0
    while index < len(data):
        lead = data[index]
        length = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        at = offset + 3 * index
        try:
            char = data[index : index + length].decode("utf-8")
        except UnicodeDecodeError:
            pieces.append(run[3 * index : 3 * index + 3])
            starts.extend(range(at, at + 3))
            ends.extend(range(at + 1, at + 4))
            index += 1
            continue
        pieces.append(char)
        starts.append(at)
        ends.append(at + 3 * length)
        index += length


def _compose(outer: Revealed, inner: Revealed) -> Revealed:
    """``inner`` (a decoding of ``outer.text``) with positions in ``outer``'s original."""
    first, last = outer._starts, outer._ends
    starts = [first[start] for start in inner._starts]
    ends = [last[end - 1] for end in inner._ends]
    return Revealed(inner.text, starts, ends)
