"""What the model will read: encodings undone before detection, positions mapped back.

Text reaches the model in forms a pattern does not see through: ``json.dumps`` output
(``\\u624b\\u673a13812345678`` is 手机13812345678 to the model, but a letter glued to the
number to a pattern), other escape syntaxes (``\\x31``, ``\\U00000031``, ``%u0031``, octal
``\\061``), URL query values (``%2B8613812345678``), HTML character references (``&#49;``,
``&#x31``, ``&commat;``), numbers split by invisible characters (``1381\\u200b2345678``) and
digits dressed in combining marks (keycaps ``1\\ufe0f\\u20e3``, underlines ``1\\u0332``).
``reveal`` undoes all of these — repeatedly, so ``json.dumps`` of ``json.dumps`` output is
seen through too — and says, for every character of the result, which stretch of the
original it came from. A finding in the revealed text then replaces the *whole* encoded
stretch in the original, so the text stays valid JSON (or a valid URL) for the model.

Text with none of these forms (almost all of it) costs one scan and is not copied.
"""

from __future__ import annotations

import html.entities
import re
from array import array
from functools import cache
from itertools import accumulate
from typing import Any

import re2

__all__ = ["INVISIBLE", "Revealed", "plain", "reveal"]

# Characters that render as nothing (or nothing a reader notices) but split a number for
# a pattern: every format character (category Cf, as of Unicode 14: zero-width space,
# joiners, soft hyphen, bidirectional controls, Arabic number signs, the BOM, tags; a
# test holds the list to the running Python's table), the combining grapheme joiner,
# variation selectors, Mongolian free variation selectors and Hangul fillers. Removed
# before detection.
INVISIBLE = (
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f\u1160"
    "\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f\U000e0100-\U000e01ef"
)
# Combining marks right after a digit (keycaps, underlines, accents): the model reads
# the digit.
_MARKS = "\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
# Rounds of decoding: json.dumps of json.dumps of a URL is three layers.
_MAX_ROUNDS = 4

_SEQUENCE = re.compile(
    r"\\u(?P<high>[dD][89abAB][0-9a-fA-F]{2})\\u(?P<low>[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?:\\u|%u)(?P<unit>[0-9a-fA-F]{4})"
    r"|\\U(?P<long>[0-9a-fA-F]{8})"
    r"|\\x(?P<byte>[0-9a-fA-F]{2})"
    r"|\\(?P<octal>[0-3][0-7]{2})"
    r"|\\(?P<escape>[\"\\/bfnrt])"
    r"|(?P<percent>(?:%[0-9A-Fa-f]{2})+)"
    r"|&#(?:[xX]0*(?P<hex>[0-9a-fA-F]{1,6})|0*(?P<decimal>[0-9]{1,7}));?"
    r"|&(?P<entity>[A-Za-z][A-Za-z0-9]{1,31};)"
    f"|(?P<invisible>[{INVISIBLE}]+)"
    f"|(?<=[0-9])(?P<marks>[{_MARKS}]+)"
)
# What a percent run decodes to that stays encoded: bytes that are not UTF-8 (lone
# surrogates, with surrogateescape) and control characters (see _control).
# (The surrogates by chr(): the compiled core, mypyc, refuses them in string literals.)
_UNREADABLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + chr(0xDC80) + "-" + chr(0xDCFF) + "]+"
)
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_REPLACEMENT = "\ufffd"


@cache
def _trigger() -> Any:
    """Any character that can start an encoded form (an RE2 pattern: one linear pass)."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(f"[\\\\%&{INVISIBLE}{_MARKS}]", options)


# The same character class for short texts (a found value, a placeholder's text): the
# standard engine takes a fraction of a microsecond where RE2's binding first copies the
# text to UTF-8; over a long text RE2's scan is the faster (by about five times at 2 KB).
_SHORT_TRIGGER = re.compile(f"[\\\\%&{INVISIBLE}{_MARKS}]")
_SHORT = 128


class Revealed:
    """The revealed form of one text, and where each of its characters came from."""

    __slots__ = ("_ends", "_starts", "text")

    def __init__(self, text: str, starts: array[int], ends: array[int]) -> None:
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
        if "\\" not in text and "%" not in text and "&" not in text:
            return None
    elif not (_SHORT_TRIGGER if len(text) <= _SHORT else _trigger()).search(text):
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
    starts: array[int] = array("q")
    ends: array[int] = array("q")
    position = 0
    changed = False
    for match in _SEQUENCE.finditer(text):
        start, end = match.span()
        kind = match.lastgroup
        if kind == "percent":
            decoded = _percent(match.group(), start)
            if decoded is None:
                continue  # nothing in the run decodes: it stays as it is
            _keep(text, position, start, pieces, starts, ends)
            run, run_starts, run_ends = decoded
            pieces.append(run)
            starts.extend(run_starts)
            ends.extend(run_ends)
        elif kind in ("invisible", "marks"):
            _keep(text, position, start, pieces, starts, ends)  # removed: maps to nothing
        else:
            char = _character(match)
            if char is None:
                continue  # not a character the model would read in its place
            _keep(text, position, start, pieces, starts, ends)
            pieces.append(char)
            starts.append(start)
            ends.append(end)
        position = end
        changed = True
    if not changed:
        return None
    _keep(text, position, len(text), pieces, starts, ends)
    return Revealed("".join(pieces), starts, ends)


def _keep(
    text: str, start: int, end: int, pieces: list[str], starts: array[int], ends: array[int]
) -> None:
    """``text[start:end]`` unchanged: each character maps to itself."""
    if start < end:
        pieces.append(text[start:end])
        starts.extend(range(start, end))
        ends.extend(range(start + 1, end + 1))


def _character(match: re.Match[str]) -> str | None:
    """The one character an escape or reference stands for; None to leave it alone."""
    group = match.group
    if (escape := group("escape")) is not None:
        return _ESCAPES[escape]
    if (entity := group("entity")) is not None:
        named = html.entities.html5.get(entity)
        return named if named is not None and len(named) == 1 else None
    if (high := group("high")) is not None:
        code = 0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(group("low"), 16) - 0xDC00)
    else:
        number = group("unit") or group("long") or group("byte") or group("hex")
        if number is not None:
            code = int(number, 16)
        elif (octal := group("octal")) is not None:
            code = int(octal, 8)
        else:
            code = int(group("decimal"))
    if code > 0x10FFFF or _control(code):
        return None
    # A lone surrogate is not text (and cannot be encoded as UTF-8 for the segmenter).
    return _REPLACEMENT if 0xD800 <= code <= 0xDFFF else chr(code)


def _control(code: int) -> bool:
    """A control character other than a line break or a tab: decoding ``%13`` to one
    would glue it to the number behind it (``%13812345678``), which the model still reads
    as a number, so such a sequence is left as it was."""
    return (code < 0x20 and code not in (0x09, 0x0A, 0x0D)) or 0x7F <= code <= 0x9F


def _percent(run: str, offset: int) -> tuple[str, list[int], list[int]] | None:
    """A run of ``%XX`` as the UTF-8 characters it encodes (bytes that are not UTF-8, and
    control characters, stay as they were); None if nothing in it decodes."""
    # Undecodable bytes come back as lone surrogates, one per byte: one pass, no
    # exception per bad byte (a flood of ``%ff`` costs what a plain run costs).
    decoded = bytes.fromhex(run.replace("%", "")).decode("utf-8", "surrogateescape")
    if _UNREADABLE.fullmatch(decoded):
        return None
    if not _UNREADABLE.search(decoded):  # the usual case: every byte decodes
        lengths = [
            1 if char < "\x80" else 2 if char < "\u0800" else 3 if char < "\U00010000" else 4
            for char in decoded
        ]
        bounds = list(accumulate((3 * length for length in lengths), initial=offset))
        return decoded, bounds[:-1], bounds[1:]
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    at = offset
    changed = False
    for char in decoded:
        code = ord(char)
        length = 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
        if 0xDC80 <= code <= 0xDCFF or _control(code):
            length = 1
            pieces.append(run[at - offset : at - offset + 3])
            starts.extend(range(at, at + 3))
            ends.extend(range(at + 1, at + 4))
        else:
            pieces.append(char)
            starts.append(at)
            ends.append(at + 3 * length)
            changed = True
        at += 3 * length
    return ("".join(pieces), starts, ends) if changed else None


def _compose(outer: Revealed, inner: Revealed) -> Revealed:
    """``inner`` (a decoding of ``outer.text``) with positions in ``outer``'s original."""
    first, last = outer._starts, outer._ends
    starts = array("q", [first[start] for start in inner._starts])
    ends = array("q", [last[end - 1] for end in inner._ends])
    return Revealed(inner.text, starts, ends)
