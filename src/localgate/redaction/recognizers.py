"""Built-in recognizers for identifiers that have a recognisable shape.

Every pattern uses explicit look-arounds instead of ``\\b`` (Python treats CJK
characters as word characters, so ``\\b`` never fires between ``号`` and ``1``), and
refuses a match that touches another digit or letter, so phone numbers do not match
inside order numbers. Types without a checksum need a context word nearby.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import re2

from localgate.redaction import validators
from localgate.redaction.findings import Finding

__all__ = [
    "PatternRecognizer",
    "PrefilterFailed",
    "Prefilters",
    "Scan",
    "builtin_recognizers",
    "matches_at",
    "occurrences",
]

# How far before (and after) a match a context word is looked for, in characters.
_CONTEXT_WINDOW = 24
_E = r"(?![0-9A-Za-z])"  # nothing alphanumeric just after


def _first(char: str, not_after: str = "[0-9A-Za-z]") -> str:
    """``char`` (a character or a one-character class), not right after ``not_after``.

    The look-behind comes after the character, not before it: ``re`` skips in C to
    where a pattern's first character can match, but tries a pattern that begins with a
    look-behind at every position of the text (measured: 23 against 10 us for the
    resident-ID pattern over a 2 KB prompt's windows). The matches are the same.
    """
    return f"{char}(?<!{not_after}{char})"


class Prefilters:
    """Every recognizer's prefilter in one RE2 set.

    One linear pass over a text (or a stretch of it) says which recognizers can match
    there at all. The indices are in the order the patterns were given.
    """

    def __init__(self, patterns: Sequence[str]) -> None:
        self._set = re2.Set.SearchSet(_re2_options())
        # A pattern given twice (the card shapes' prefilter, a context gate two
        # recognizers share) is added once: its index serves all.
        self.index: dict[str, int] = {}
        for pattern in patterns:
            if pattern not in self.index:
                self.index[pattern] = self._set.Add(pattern)
        # The start of the text matches in every text, an empty one too. RE2's set search
        # answers "no match" when it fails (its DFA out of memory), and the Python binding
        # does not tell that apart from nothing matching; every recognizer would then be
        # skipped and the text forwarded as it is. The sentinel missing from an answer is
        # that failure, and detection stops.
        self._sentinel = self._set.Add(r"\A")
        self._set.Compile()

    def hits(self, text: str) -> Sequence[int]:
        """Indices of the patterns that match somewhere in ``text`` (and the sentinel's);
        raises :class:`PrefilterFailed` if the set search failed."""
        found: Sequence[int] | None = self._set.Match(text)
        if not found or self._sentinel not in found:
            raise PrefilterFailed("the prefilter search failed; the text was not scanned")
        return found


class PrefilterFailed(Exception):
    """RE2's set search failed: what it found cannot be trusted (the request is refused).

    An ``Exception``, not a ``RuntimeError``: the compiled core (mypyc) cannot subclass the
    latter in a native class."""


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False
    # The combined DFA of all prefilters needs more than RE2's default 8 MB, or RE2
    # falls back to a much slower engine (measured: 48 us -> 2 us per 165-byte text).
    options.max_mem = 64 << 20
    return options


class Scan:
    """One text prepared for the recognizers, and the work they share.

    ``windows`` are the stretches around every digit and ``@`` (padded, and widened to
    whole tokens), where every identifier that contains one must lie; recognizers of
    such identifiers search only there, instead of the whole text each, and only in the
    windows where their prefilter matches. A pattern that several recognizers share (the
    card shapes) is searched once. Each is worked out on first use.
    """

    __slots__ = (
        "_hits",
        "_prefilters",
        "_surroundings",
        "_windows",
        "_windows_by_hit",
        "folded",
        "shared",
    )

    def __init__(
        self,
        folded: str,
        prefilters: Prefilters | None = None,
        hits: frozenset[int] | None = None,
    ) -> None:
        self.folded = folded
        self._prefilters = prefilters
        # Which of the prefilters match somewhere in the text, if the detector has run them.
        self._hits = hits
        self._windows: tuple[tuple[int, int], ...] | None = None
        # For each prefilter index, the windows it matches in (in order), once worked out.
        self._windows_by_hit: dict[int, tuple[tuple[int, int], ...]] | None = None
        self._surroundings: dict[tuple[int, int], str] = {}
        # Matches of each pattern searched so far, for recognizers that share one.
        self.shared: dict[object, list[re.Match[str]]] = {}

    def matching(self, patterns: Sequence[str]) -> list[bool] | None:
        """Whether each of ``patterns`` matches somewhere in the text, if the detector's
        prefilter pass (which then holds them all) has told."""
        prefilters, hits = self._prefilters, self._hits
        if prefilters is None or hits is None:
            return None
        index = prefilters.index
        if not all(pattern in index for pattern in patterns):
            return None
        return [index[pattern] in hits for pattern in patterns]

    @property
    def windows(self) -> tuple[tuple[int, int], ...]:
        """The stretches around digits and ``@``."""
        if self._windows is None:
            self._windows = _windows(self.folded)
        return self._windows

    def windows_for(self, prefilter: str | None) -> tuple[tuple[int, int], ...]:
        """The windows in which ``prefilter`` matches (all of them, if that is unknown).

        Exact: a match lies inside one window and the prefilter matches inside the match.
        """
        windows = self.windows
        prefilters = self._prefilters
        if len(windows) < 2 or prefilters is None or prefilter not in prefilters.index:
            return windows
        by_hit = self._windows_by_hit
        if by_hit is None:
            # Filed by index in one pass over the answers, instead of testing every
            # window's answer on each of the ten or so calls (windows and their
            # filtering for the 1.5 KB prompt: 305,000 -> 228,000 instructions).
            folded = self.folded
            lists: dict[int, list[tuple[int, int]]] = {}
            for window in windows:
                for index in prefilters.hits(folded[window[0] : window[1]]):
                    lists.setdefault(index, []).append(window)
            by_hit = self._windows_by_hit = {index: tuple(found) for index, found in lists.items()}
        return by_hit.get(prefilters.index[prefilter], ())

    def surroundings(self, window: tuple[int, int]) -> str:
        """The window and the context around its matches (``_has_context``), lower-cased.

        A context word of a match in the window is in it, if anywhere.
        """
        lowered = self._surroundings.get(window)
        if lowered is None:
            low, high = window
            lowered = self.folded[max(0, low - _CONTEXT_WINDOW) : high + 8].lower()
            self._surroundings[window] = lowered
        return lowered


def _windows(folded: str) -> tuple[tuple[int, int], ...]:
    length = len(folded)
    widened: list[tuple[int, int]] = []
    # Runs of digits and "@" on one line closer than twice the padding share one window.
    # No windowed pattern crosses a newline, so a window ends at one: a block of records
    # is a window per line, and each recognizer searches only the lines its prefilter
    # matches.
    # A window is widened to whole tokens at both ends: an e-mail address's local part
    # can start far before its "@" (dot leaders, a rule of dashes, a token glued on), and
    # a match cannot begin inside a token (the look-behinds). Windows a token runs
    # through are one. The last window's end is widened only once the next window's
    # start is known, and only up to it: each character is looked at once (widened
    # apart, every window in a long token would reach to its end, in quadratic time).
    pending: tuple[int, int] | None = None  # the last window, its end not yet widened
    for cluster in _ANCHORS.finditer(folded):
        start, end = cluster.span()
        line_start = folded.rfind("\n", 0, start) + 1
        line_end = folded.find("\n", end)
        high = min(length if line_end < 0 else line_end, end + _PAD)
        low = max(line_start, start - _PAD)
        floor = line_start
        if pending is not None:
            last_low, last_high = pending
            if low <= last_high:
                pending = (last_low, max(last_high, high))
                continue
            tail = _TOKEN_TAIL.match(folded, last_high, low)
            tail_end = tail.end() if tail else last_high
            if tail_end == low:  # one token from the last window to this one
                pending = (last_low, high)
                continue
            widened.append((last_low, tail_end))
            floor = max(floor, tail_end)
        pending = (_token_start(folded, floor, low), high)
    if pending is not None:
        last_low, last_high = pending
        tail = _TOKEN_TAIL.match(folded, last_high)
        widened.append((last_low, tail.end() if tail else last_high))
    return tuple(widened)


def _token_start(text: str, floor: int, at: int) -> int:
    """Where the run of token characters that ends at ``at`` starts (``floor`` at most),
    read back a short piece at a time: mostly the piece before ``at`` is prose."""
    while at > floor:
        piece = text[max(floor, at - 32) : at]
        kept = len(piece.rstrip(_TOKEN_CHARS))
        if kept:
            return at - len(piece) + kept
        at -= len(piece)
    return at


# Identifiers with a digit or "@" are at most this long on either side of one.
_PAD = 96
# Starting with a plain class (not "[0-9@]+") lets re skip to the first anchor in C.
# The gap is a class of ranges, not [^0-9@\n]: re tests a negated class more slowly
# (84,000 against 70,000 instructions for the 1.5 KB prompt).
_ANCHORS = re.compile(
    rf"[0-9@][0-9@]*(?:[\x00-\x09\x0b-\x2f\x3a-\x3f\x41-\U0010ffff]{{1,{2 * _PAD}}}+[0-9@]+)*"
)
_TOKEN_CHARS = string.ascii_letters + string.digits + ".:@_%+-"
_TOKEN_TAIL = re.compile(r"[0-9A-Za-z.:@_%+-]*")


@dataclass(frozen=True, slots=True)
class PatternRecognizer:
    """A regular expression, an optional validator and context words for one type."""

    type: str
    pattern: re.Pattern[str]
    validate: Callable[[str], bool] | None = None
    score: float = 0.85
    context: tuple[str, ...] = ()
    requires_context: bool = False
    # Identifiers without a digit or "@" are searched in the whole text.
    anchored: bool = True
    # For those: where in a text a match can begin (a superset, in order), if that is
    # cheaper to find than running the pattern everywhere; the pattern is tried there.
    starts: Callable[[str], Iterable[int]] | None = None
    # The same for an anchored pattern: where in ``text[low:high]`` (a window) a match can
    # begin, in order.
    window_starts: Callable[[str, int, int], Iterable[int]] | None = None
    # Skip the search unless one of these substrings occurs (cheap, exact).
    needs: tuple[str, ...] = ()
    # Words just before a match that mean it is something else (版本 10.0.0.1).
    not_after: tuple[str, ...] = ()
    # An RE2 pattern that matches inside every match of this recognizer: the detector
    # runs all prefilters in one linear pass and skips recognizers without a hit, and
    # windows without one.
    prefilter: str | None = None
    # What ``Scan.shared`` files this recognizer's matches under: the same for the
    # recognizers that share a pattern. Made of ids, because hashing a compiled pattern
    # hashes its whole program (up to 3 us for the plate pattern, on every call).
    _shared_key: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = (id(self.pattern), self.anchored, id(self.starts), id(self.window_starts))
        object.__setattr__(self, "_shared_key", key)

    @property
    def context_gate(self) -> str | None:
        """An RE2 pattern for any of the context words, if a match needs one nearby.

        Case-insensitive, so it matches wherever ``_has_context`` finds a word in the
        lower-cased text: a text it does not match has no match to keep.
        """
        if not self.requires_context:
            return None
        return "(?i)" + "|".join(map(re.escape, self.context))

    def find(self, scan: Scan) -> list[Finding]:
        """Findings of this type."""
        folded = scan.folded
        if self.needs and not any(needle in folded for needle in self.needs):
            return []
        # Recognizers that share a pattern (the card shapes) share its matches. A search
        # that needs a context word looks only in the windows with one, so what it finds is
        # not filed for the others: whichever order they run in, each sees every match.
        key = self._shared_key
        matches = scan.shared.get(key)
        if matches is None:
            matches = self._search(folded, scan)
            if not self.requires_context:
                scan.shared[key] = matches
        found = []
        validate = self.validate
        for match in matches:
            if validate is not None and not validate(match.group()):
                continue
            start, end = match.span()
            if self.not_after and _has_context(folded, start, start, self.not_after, 16):
                continue
            score = self.score
            if self.context:
                near = _has_context(folded, start, end, self.context)
                if self.requires_context and not near:
                    continue
                if near:
                    score = max(score, 0.95)
            found.append(Finding(start, end, self.type, score))
        return found

    def _search(self, folded: str, scan: Scan) -> list[re.Match[str]]:
        """What ``finditer`` over the windows (or the whole text) finds."""
        pattern = self.pattern
        if self.anchored:
            windows = scan.windows_for(self.prefilter)
            if self.requires_context:
                # A window with no context word around it has no match to keep.
                context = _any_of(self.context)
                windows = tuple(
                    window for window in windows if context.search(scan.surroundings(window))
                )
            if self.window_starts is None:
                return [
                    match for low, high in windows for match in pattern.finditer(folded, low, high)
                ]
            starts = self.window_starts
            return [
                match
                for low, high in windows
                for match in matches_at(pattern, folded, starts(folded, low, high), high)
            ]
        if self.starts is None:
            return list(pattern.finditer(folded))
        return matches_at(pattern, folded, self.starts(folded))


def _has_context(
    folded: str, start: int, end: int, words: tuple[str, ...], window: int = _CONTEXT_WINDOW
) -> bool:
    """Whether one of ``words`` is in the ``window`` characters before ``start`` or the 8
    after ``end`` (lower-cased)."""
    nearby = folded[max(0, start - window) : start].lower()
    if end > start:
        # No word holds a NUL, so none is found across the join.
        nearby += "\x00" + folded[end : end + 8].lower()
    return _any_of(words).search(nearby) is not None


@cache
def _any_of(words: tuple[str, ...]) -> re.Pattern[str]:
    """A pattern that finds any of ``words``: one search in C instead of one per word."""
    return re.compile("|".join(map(re.escape, words)) if words else "(?!)")


def occurrences(text: str, needles: Iterable[str]) -> list[int]:
    """Where in ``text`` any of ``needles`` begins, overlapping ones too, in order."""
    found = set()
    for needle in needles:
        at = text.find(needle)
        while at >= 0:
            found.add(at)
            at = text.find(needle, at + 1)
    return sorted(found)


def matches_at(
    pattern: re.Pattern[str], text: str, starts: Iterable[int], endpos: int | None = None
) -> list[re.Match[str]]:
    """What ``pattern.finditer(text, 0, endpos)`` finds, trying the pattern only at ``starts``.

    ``starts`` must hold every position where a match can begin (more does no harm), in
    order. finditer tries every position from where its last match ended, and a match
    at a position is the same whether searched for or tried there: so this finds the
    same matches, for a fraction of the work when the positions are few.
    """
    matches = []
    position = 0
    end = len(text) if endpos is None else endpos
    for start in starts:
        if start >= position and (match := pattern.match(text, start, end)) is not None:
            matches.append(match)
            position = match.end()
    return matches


def _secret_starts(text: str) -> list[int]:
    return occurrences(text, _SECRET_PREFIXES)


def _email_starts(text: str, low: int, high: int) -> list[int]:
    """Where an e-mail address in ``text[low:high]`` can begin.

    An address is a run of local-part characters, an ``@`` and a domain, and the run
    starts where no such character is before it: at the start of the run that ends at an
    ``@`` (or at ``low``, where the pattern's look-behind decides). The pattern is tried
    at the few ``@`` there are instead of at every letter of the prose around them.
    """
    starts = []
    after = low  # no run reaches back past the last "@"
    at = text.find("@", low, high)
    while at >= 0:
        start = after + len(text[after:at].rstrip(_EMAIL_LOCAL))
        if start < at:
            starts.append(start)
        elif at > after and text[at - 1] == '"':  # a quoted local part: "zhang wei"@…
            quote = text.rfind('"', max(after, at - 66), at - 1)
            if quote >= 0:
                starts.append(quote)
        after = at + 1
        at = text.find("@", after, high)
    return starts


_EMAIL_LOCAL = string.ascii_letters + string.digits + "._%+-"
# A domain's labels and top-level domain: internationalised ones too (Latin with accents,
# combining marks, Greek, Cyrillic: bücher.de, пример.рф, and a look-alike letter from
# another script in an ASCII name), not CJK, which would swallow the Chinese after an
# address.
_LABEL = "A-Za-z0-9\u00c0-\u024f\u0300-\u04ff"
_TLD = "A-Za-z\u00c0-\u024f\u0370-\u04ff"


def _ipv6_starts(text: str) -> list[int]:
    """Where an IPv6 address can begin.

    The pattern's look-behind puts the start at the beginning of a run of hex digits and
    colons, at most four hex digits before the run's first colon, and ``:h:`` (``h`` up
    to four hex digits) starts at that colon; ``re`` finds such pairs by skipping from
    colon to colon in C.
    """
    starts = []
    for pair in _IPV6_PAIR.finditer(text):
        colon = start = pair.start()
        while start > 0 and colon - start < 4 and text[start - 1] in _HEX:
            start -= 1
        if start == 0 or text[start - 1] not in _HEX_OR_COLON:
            starts.append(start)
    return starts


_IPV6_PAIR = re.compile(r":[0-9A-Fa-f]{0,4}:")
_HEX = frozenset("0123456789abcdefABCDEF")
_HEX_OR_COLON = _HEX | {":"}


_MOBILE_PREFIXES = re.compile(r"1(?:3\d|4[5-9]|5[0-35-9]|6[2567]|7[0-8]|8\d|9[0-35-9])")


def _mobile(value: str) -> bool:
    digits = validators.digits_of(value)
    return _MOBILE_PREFIXES.match(digits[-11:]) is not None


def _mobile_exactly(value: str) -> bool:
    digits = validators.digits_of(value)
    return len(digits) == 11 and _mobile(digits)


def _glued_resident_id(value: str) -> bool:
    return validators.cn_resident_id(value)


def _bank_card(value: str) -> bool:
    # The prefix first: most candidates (order numbers, phone numbers) fail it cheaply.
    return validators.credit_card_issuer(value) == "unionpay" and validators.luhn(value)


def _bank_card_by_context(value: str) -> bool:
    # Domestic debit cards outside the 62 range, or old cards that fail Luhn: only with
    # a context word (required below). A valid international card is a CREDIT_CARD.
    return 16 <= len(validators.digits_of(value)) <= 19 and not _credit_card(value)


def _credit_card(value: str) -> bool:
    issuer = validators.credit_card_issuer(value)
    return validators.luhn(value) and issuer is not None and issuer != "unionpay"


def _plate(value: str) -> bool:
    return any(char.isdigit() for char in value)


def _secret(value: str) -> bool:
    if value.startswith("eyJ"):
        return validators.jwt(value)
    if value.startswith("sk-"):
        # "sk-" also starts ordinary identifiers; a key mixes letters and digits.
        tail = value.removeprefix("sk-")
        return any(c.isdigit() for c in tail) and any(c.isalpha() for c in tail)
    return True


_SECRET_PREFIXES = (
    "AKIA", "ASIA", "AIza", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "xox", "eyJ",
)  # fmt: skip
_CARD_CONTEXT = ("卡号", "银行卡", "信用卡", "借记卡", "储蓄卡", "card", "账号", "帐号")
_ID_CONTEXT = ("身份证", "证件号", "公民身份", "id card", "id no", "identity")
_PHONE_CONTEXT = ("电话", "座机", "固话", "手机", "联系方式", "tel", "phone", "fax", "传真")
_PASSPORT_CONTEXT = ("护照", "passport")
_PERMIT_CONTEXT = ("通行证", "回乡证", "台胞证", "往来", "permit")


def _grouped_resident_id(value: str) -> bool:
    return validators.cn_resident_id(value.replace(" ", "").replace("-", ""))


# After the first digit.
_CARD_SHAPES = (
    r"[0-9]{12,18}"  # contiguous
    r"|[0-9]{3}(?:[- ][0-9]{4}){2,3}(?:[- ][0-9]{1,4})?"  # groups of four
    r"|[0-9]{3}[- ][0-9]{6}[- ][0-9]{4,5}"  # Amex / Diners 4-6-5
)
_AREA = r"(?:10|2[0-9]|[3-9][0-9]{2})"  # area codes without their leading 0
_USCC = "[0-9A-HJ-NPQRTUWXY]"
_CARD_PREFILTER = r"[0-9]{13}|[0-9]{4}[- ][0-9]{4}[- ][0-9]{4}|[0-9]{4}[- ][0-9]{6}"


def builtin_recognizers() -> tuple[PatternRecognizer | PrivateKeyRecognizer, ...]:
    """Every built-in pattern recognizer, compiled."""
    c = re.compile
    # One pattern object for the three card recognizers: a text is searched for it once.
    card = c(_first("[0-9]") + r"(?:" + _CARD_SHAPES + r")" + _E + r"(?!\.[0-9])")
    return (
        PrivateKeyRecognizer(),
        PatternRecognizer(
            "CN_MOBILE",
            c(
                # +86, 0086 or 86 (a space or dash may follow), or none; before it
                # nothing alphanumeric, no "+", no alphanumeric and a dash.
                r"(?:"
                + "|".join(
                    f"{first}(?<![0-9A-Za-z+]{first})(?<![0-9A-Za-z]-{first}){rest}"
                    for first, rest in (
                        (r"\+", "86[- ]?1"),
                        ("0", "086[- ]?1"),
                        ("8", "6[- ]?1"),
                        ("1", ""),
                    )
                )
                + r")[3-9][0-9](?:[- ]?[0-9]{4}[- ]?|\.[0-9]{4}\.)[0-9]{4}"
                + _E
                + r"(?!\.[0-9])(?!-[0-9A-Za-z])"
            ),
            _mobile,
            score=0.85,
            context=_PHONE_CONTEXT,
            prefilter=r"1[3-9][0-9][-. ]?[0-9]{4}[-. ]?[0-9]{4}",
        ),
        PatternRecognizer(
            # Written unusually: groups split by a slash, underscore, middle dot or tab,
            # the prefix in brackets, or digit by digit with one separator throughout.
            "CN_MOBILE",
            c(
                _first("1")
                + r"(?:[3-9][0-9]([/_\u00b7\u30fb\t])[0-9]{4}\1[0-9]{4}"
                # Exactly eleven digits: not part of a longer list of single digits.
                + r"|(?<![0-9][- ./_\u00b7]1)([- ./_\u00b7])[3-9](?:\2[0-9]){9}(?!\2?[0-9]))"
                + _E
                + "|"
                + _first(r"\(")
                + r"1[3-9][0-9]\)[- ]?[0-9]{4}[- ]?[0-9]{4}"
                + _E
            ),
            _mobile_exactly,
            score=0.8,
            context=_PHONE_CONTEXT,
            prefilter=(
                r"1[3-9][0-9][/_\x{b7}\x{30fb}\t][0-9]{4}"
                r"|1[- ./_\x{b7}][3-9][- ./_\x{b7}][0-9][- ./_\x{b7}][0-9]"
                r"|\(1[3-9][0-9]\)"
            ),
        ),
        PatternRecognizer(
            "CN_LANDLINE",
            c(
                r"(?:"
                + "|".join(
                    _first(first) + rest
                    for first, rest in (
                        (r"\(", "0" + _AREA + "[)）][- ]?"),
                        ("（", "0" + _AREA + "[)）][- ]?"),
                        ("0", _AREA + "[- ]"),
                        (r"\+", "86[- ]?" + _AREA + "[- ]?"),
                        ("0", "086[- ]?" + _AREA + "[- ]?"),
                    )
                )
                + r")[2-9][0-9]{6,7}(?:(?:-|转| ?ext\.? ?| ?x)[0-9]{1,5})?"
                + _E
            ),
            score=0.8,
            context=_PHONE_CONTEXT,
            prefilter=r"(?:0|86[- ]?)(?:10|2[0-9]|[3-9][0-9]{2})[)）]?[- ]?[2-9][0-9]{6}",
        ),
        PatternRecognizer(
            "CN_LANDLINE",
            c(_first("0") + _AREA + r"[2-9][0-9]{6,7}" + _E),
            context=_PHONE_CONTEXT,
            requires_context=True,
            prefilter=r"0(?:10|2[0-9]|[3-9][0-9]{2})[2-9][0-9]{6}",
        ),
        PatternRecognizer(
            "CN_RESIDENT_ID",
            c(_first("[0-9]") + r"[0-9]{16}[0-9Xx]" + _E),
            validators.cn_resident_id,
            score=0.95,
            context=_ID_CONTEXT,
            prefilter=r"[0-9]{17}[0-9Xx]",
        ),
        PatternRecognizer(
            # Glued to a word (userid110105…): the check character, a real birth date and
            # a province leave no doubt that it is one.
            "CN_RESIDENT_ID",
            c(r"(?<=[A-Za-z_])[0-9]{17}[0-9Xx]" + _E),
            _glued_resident_id,
            score=0.9,
            context=_ID_CONTEXT,
            prefilter=r"[A-Za-z_][0-9]{17}[0-9Xx]",
        ),
        PatternRecognizer(
            # Grouped as printed on forms: region, birth date, sequence and check.
            "CN_RESIDENT_ID",
            c(_first("[0-9]") + r"[0-9]{5}([- ])[0-9]{8}\1[0-9]{3}[0-9Xx]" + _E),
            _grouped_resident_id,
            score=0.95,
            context=_ID_CONTEXT,
            prefilter=r"[0-9]{6}[- ][0-9]{8}[- ][0-9]{3}[0-9Xx]",
        ),
        PatternRecognizer(
            "CN_RESIDENT_ID",
            c(_first("[0-9]") + r"[0-9]{14}" + _E),
            validators.cn_resident_id_15,
            context=_ID_CONTEXT,
            requires_context=True,
            prefilter=r"[0-9]{15}",
        ),
        PatternRecognizer(
            "CN_BANK_CARD",
            card,
            _bank_card,
            score=0.9,
            context=_CARD_CONTEXT,
            prefilter=_CARD_PREFILTER,
        ),
        PatternRecognizer(
            "CN_BANK_CARD",
            card,
            _bank_card_by_context,
            score=0.6,
            context=_CARD_CONTEXT[:5],
            requires_context=True,
            prefilter=_CARD_PREFILTER,
        ),
        PatternRecognizer(
            "CREDIT_CARD",
            card,
            _credit_card,
            score=0.9,
            context=_CARD_CONTEXT,
            prefilter=_CARD_PREFILTER,
        ),
        PatternRecognizer(
            "CN_USCC",
            c(_first(_USCC) + _USCC + r"[0-9]{6}" + _USCC + "{10}" + _E),
            validators.uscc,
            score=0.95,
            context=("统一社会信用代码", "信用代码", "税号", "credit code"),
            prefilter=r"[0-9A-HJ-NPQRTUWXY]{2}[0-9]{6}[0-9A-HJ-NPQRTUWXY]{10}",
        ),
        PatternRecognizer(
            "CN_PASSPORT",
            c(_first("E") + r"(?:[0-9]{8}|[A-HJ-NP-Z][0-9]{7})" + _E),
            context=_PASSPORT_CONTEXT,
            requires_context=True,
            prefilter=r"E(?:[0-9]{8}|[A-HJ-NP-Z][0-9]{7})",
        ),
        PatternRecognizer(
            "CN_PASSPORT",
            c(_first("[GDSP]") + r"[0-9]{7,8}" + _E),
            context=_PASSPORT_CONTEXT,
            requires_context=True,
            prefilter=r"[GDSP][0-9]{7}",
        ),
        PatternRecognizer(
            "CN_TRAVEL_PERMIT",
            c(
                # The first character is read once; the look-behinds pick the shape.
                _first("[0-9CHM]")
                + r"(?:(?<=[HM])[0-9]{8}(?:[0-9]{2})?|(?<=C)[A-Z0-9][0-9]{7}|(?<=[0-9])[0-9]{7})"
                + _E
            ),
            context=_PERMIT_CONTEXT,
            requires_context=True,
            prefilter=r"[HM][0-9]{8}|C[A-Z0-9][0-9]{7}|[0-9]{8}",
        ),
        PatternRecognizer(
            "HK_ID",
            c(_first("[A-Z]") + r"[A-Z]?[0-9]{6}(?:\([0-9A]\)|[0-9A])" + _E),
            validators.hk_id,
            score=0.85,
            context=("香港身份证", "hkid", "身份证"),
            prefilter=r"[A-Z][0-9]{6}",
        ),
        PatternRecognizer(
            "TW_ID",
            c(_first("[A-Z]") + r"[12][0-9]{8}" + _E),
            validators.taiwan_id,
            score=0.85,
            context=("身分證", "身份证", "台湾"),
            prefilter=r"[A-Z][12][0-9]{8}",
        ),
        PatternRecognizer(
            "CN_LICENSE_PLATE",
            c(
                r"[京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼]"
                r"[A-HJ-NP-Z][·• ]?(?:[DF][A-HJ-NP-Z0-9][0-9]{4}|[0-9]{5}[DF]"
                r"|[A-HJ-NP-Z0-9]{4}[A-HJ-NP-Z0-9挂学警港澳])" + _E
            ),
            _plate,
            score=0.85,
            context=("车牌", "牌照", "号牌", "plate"),
            anchored=False,
            prefilter=r"[京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼][A-HJ-NP-Z]",
        ),
        PatternRecognizer(
            "EMAIL",
            c(
                "(?:"
                + _first("[A-Za-z0-9._%+-]", "[A-Za-z0-9._%+-]")
                + r'[A-Za-z0-9._%+-]*|"[^"\n@]{1,64}")@'
                + f"[{_LABEL}-]+(?:\\.[{_LABEL}-]+)*\\.[{_TLD}]{{2,24}}(?![{_LABEL}-])"
            ),
            score=0.95,
            needs=("@",),
            window_starts=_email_starts,
            prefilter=r'[A-Za-z0-9._%+"-]@[A-Za-z0-9\x{c0}-\x{24f}\x{300}-\x{4ff}-]',
        ),
        PatternRecognizer(
            "IPV4",
            c(
                _first("[0-9]", "[0-9.vV]")
                + r"[0-9]{0,2}\.(?:[0-9]{1,3}\.){2}[0-9]{1,3}(?![0-9]|\.[0-9])"
            ),
            validators.ipv4,
            score=0.8,
            not_after=("version", "版本", "firmware", "固件", "build", "release"),
            prefilter=r"[0-9]\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]",
        ),
        PatternRecognizer(
            "IPV6",
            c(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Fa-f:])"),
            validators.ipv6,
            score=0.8,
            anchored=False,
            starts=_ipv6_starts,
            needs=(":",),
            prefilter=r"[0-9A-Fa-f]{0,4}:[0-9A-Fa-f]{0,4}:",
        ),
        PatternRecognizer(
            "US_SSN",
            c(_first("[0-9]", "[0-9A-Za-z-]") + r"[0-9]{2}-[0-9]{2}-[0-9]{4}(?!-)" + _E),
            validators.us_ssn,
            score=0.7,
            context=("ssn", "social security"),
            prefilter=r"[0-9]{3}-[0-9]{2}-[0-9]{4}",
        ),
        PatternRecognizer(
            "IBAN",
            c(_first("[A-Z]") + r"[A-Z][0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?" + _E),
            validators.iban,
            score=0.95,
            prefilter=r"[A-Z]{2}[0-9]{2} ?[A-Z0-9]{4}",
        ),
        PatternRecognizer(
            "API_SECRET",
            c(
                r"(?<![A-Za-z0-9_-])(?:"
                r"(?:AKIA|ASIA)[A-Z0-9]{16}"
                r"|AIza[0-9A-Za-z_-]{35}"
                r"|sk-(?:proj-|ant-(?:api[0-9][0-9]-)?)?[A-Za-z0-9_-]{20,}"
                r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,}"
                r"|xox[abposr]-[A-Za-z0-9-]{10,}"
                r"|eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}"
                r")(?![A-Za-z0-9_-])"
            ),
            _secret,
            score=0.95,
            anchored=False,
            starts=_secret_starts,
            needs=_SECRET_PREFIXES,
            prefilter=r"AKIA|ASIA|AIza|sk-|gh[pousr]_|github_pat_|xox[abposr]-|eyJ",
        ),
    )


class PrivateKeyRecognizer:
    """PEM private-key blocks, found in linear time.

    A lazy ``BEGIN … END`` regular expression rescans the rest of the text for every
    BEGIN without an END: quadratic, and a ready denial of service. Here each BEGIN
    marker is followed by one forward search for its END, and the scan resumes after it.
    """

    type = "API_SECRET"
    prefilter = "-----BEGIN"

    def find(self, scan: Scan) -> Iterator[Finding]:
        """PEM blocks whose label ends in PRIVATE KEY (public keys are not secrets)."""
        text = scan.folded
        position = 0
        while True:
            begin = _PEM_BEGIN.search(text, position)
            if begin is None:
                return
            label = begin.group(1)
            end_marker = f"-----END {label}-----"
            end = text.find(end_marker, begin.end())
            if end < 0:
                # No END: the rest is the key's body as far as anyone can tell.
                yield Finding(begin.start(), len(text), self.type, 0.9)
                return
            yield Finding(begin.start(), end + len(end_marker), self.type, 0.95)
            position = end + len(end_marker)


_PEM_BEGIN = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY)-----")
