"""Width folding: the one-to-one part of NFKC, so folded offsets are original offsets.

Chinese text often carries full-width digits and letters (U+FF11 for ``1``) and full-width
punctuation; text pasted from word processors carries no-break and thin spaces and en
dashes; other scripts have their own decimal digits. Each of these folds to one ASCII
character (dashes and digits beyond what NFKC does). Patterns match on folded text;
because every character folds to exactly one character, a span found in the folded text
is the same span in the original. Zero-width characters and soft hyphens need removing,
which changes offsets: ``reveal`` does that before folding, with its own position map.
Characters whose NFKC form is longer than one character (ligatures, ``㈱``) are left
as they are.
"""

from __future__ import annotations

import re
import string
import unicodedata
from functools import cache
from typing import Any

import re2

__all__ = ["fold"]


@cache
def _table() -> dict[int, int]:
    table: dict[int, int] = {}
    for code in range(0x80, 0x20000):
        char = chr(code)
        folded = unicodedata.normalize("NFKC", char)
        if len(folded) == 1 and folded != char:
            table[code] = ord(folded)
        elif unicodedata.digit(char, -1) >= 0:
            # Digits of other scripts (Arabic-Indic ٣, Devanagari ३ …) and digits dressed
            # up (dingbat ❶, parenthesised ⑴, with a stop ⒈) count.
            table[code] = ord(str(unicodedata.digit(char)))
    for dash in _DASHES:
        table[ord(dash)] = ord("-")
    return table


@cache
def _lookup() -> str:
    """The table as a string indexed by code point: ``str.translate`` reads it twice as
    fast as the dict (0.9 against 1.9 ms for 40,000 characters of Chinese prose)."""
    table = _table()
    return "".join(chr(table.get(code, code)) for code in range(0x20000))


# Dashes NFKC leaves alone but people (and word processors) put in phone numbers.
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63"


@cache
def _matters() -> Any:
    """Characters whose folding can change what a pattern sees (an RE2 pattern)."""
    relevant = set("0123456789@+-. ()") | set(string.ascii_letters)
    codes = sorted(code for code, folded in _table().items() if chr(folded) in relevant)
    # As ranges, searched by RE2: Python's re checks a class range by range for every
    # character (12 us for a 165-character text, 3 ms for 33,000), RE2's automaton does not.
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    parts = "".join(
        f"\\x{{{low:x}}}" if low == high else f"\\x{{{low:x}}}-\\x{{{high:x}}}"
        for low, high in ranges
    )
    options = re2.Options()
    options.log_errors = False
    return re2.compile(f"[{parts}]", options)


# Every character the table changes is outside ASCII and the CJK Unified Ideographs (a
# test holds the table to that): only the runs of other characters are translated.
# str.translate reads the table for every character; re skips the rest in C (12 against
# 18 us for a 1.5 KB mixed Chinese and English prompt, 1.2 against 1.9 ms for 110 KB of
# mostly Chinese records). The run is a class and a starred class, not "class+": re
# skips in C to where a match can begin only if the pattern begins with a plain class
# (or a literal); a pattern that begins with a repeat is tried at every character. That
# cost fold 336,000 instructions on the 1.5 KB prompt, now 186,000 (callgrind).
_FOLDABLE = "[\x80-\u4dff\ua000-\U0010ffff]"
_FOLDABLE_RUNS = re.compile(f"({_FOLDABLE}{_FOLDABLE}*)")


def fold(text: str) -> str:
    """``text`` with every character replaced by its single-character NFKC form, if any."""
    if text.isascii() or not _matters().search(text):
        return text
    parts = _FOLDABLE_RUNS.split(text)
    lookup = _lookup()
    parts[1::2] = [run.translate(lookup) for run in parts[1::2]]
    return "".join(parts)
