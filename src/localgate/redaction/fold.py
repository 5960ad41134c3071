"""Width folding: the one-to-one part of NFKC, so folded offsets are original offsets.

Chinese text often carries full-width digits and letters (U+FF11 for ``1``) and full-width
punctuation. Patterns match on folded text; because every character folds to exactly
one character, a span found in the folded text is the same span in the original.
Characters whose NFKC form is longer than one character (ligatures, ``㈱``) are left
as they are.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

__all__ = ["fold"]


@cache
def _table() -> dict[int, int]:
    table: dict[int, int] = {}
    for code in range(0x80, 0x10000):
        char = chr(code)
        folded = unicodedata.normalize("NFKC", char)
        if len(folded) == 1 and folded != char:
            table[code] = ord(folded)
    return table


# The full-width characters that can change what is detected: digits, letters, and the
# joiners of identifiers. Chinese punctuation (，。：) cannot, so text with only those is
# not rewritten — the common case, and the expensive one.
_MATTERS = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a\uff20\uff0b\uff0d\uff0e\u3000]")


def fold(text: str) -> str:
    """``text`` with every character replaced by its single-character NFKC form, if any."""
    if text.isascii() or not _MATTERS.search(text):
        return text
    return text.translate(_table())
