"""The detector's shortcuts find exactly what full scans find.

Detection skips work: a recognizer searches only the windows (the stretches of a line
around digits and ``@``) where its RE2 prefilter matches, and runs only if a context
word it needs is in the text; the IPv6, secret and e-mail recognizers try their pattern
only where a match can begin; patterns begin with a character, not a look-behind, so that
re can skip to where one can begin; the name rules run only where their RE2 gate
matches, and jieba segments only the stretches that hold Chinese (long runs of other
text between them are left out, cut after a space or a newline), where alone the cued
name rule looks for its cues and titles. Each shortcut is exact
only while its assumption holds (a prefilter or gate matches wherever its rule finds
something; no windowed pattern crosses a newline; the start positions include every
possible start; jieba cuts between words at every space and newline); these properties
check the findings against the same rules run without the shortcuts, on generated texts
dense with identifiers, names and look-alikes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

import pytest
from bench.detection import corpus_texts, dense_text
from bench.pii.generate import load_corpus
from bench.pii.timing import with_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localgate.redaction import names, recognizers
from localgate.redaction.detector import Detector, _resolve
from localgate.redaction.findings import Finding
from localgate.redaction.fold import fold
from localgate.redaction.names import NameRecognizer
from localgate.redaction.recognizers import PatternRecognizer, Scan, builtin_recognizers
from localgate.redaction.reveal import reveal
from tests.redaction.test_fold import translated_whole
from tests.redaction.values import VALUES

DETECTOR = Detector.builtin(names=False)
NOISE = st.text(
    alphabet=st.sampled_from(list("0123456789abcdefABCDEF:.-_ @号卡手机身份证，。 \nsk-AKIAeyJ")),
    max_size=40,
)


@st.composite
def dense_texts(draw: st.DrawFn) -> str:
    pieces = [draw(NOISE)]
    for _ in range(draw(st.integers(1, 6))):
        pieces += [draw(VALUES[draw(st.sampled_from(sorted(VALUES)))]), draw(NOISE)]
    return "".join(pieces)


def unshortcut(text: str) -> list[Finding]:
    """Every recognizer over the whole text, every pattern tried at every position."""
    scan = Scan(fold(text), None)
    found = []
    for recognizer in DETECTOR.recognizers:
        if isinstance(recognizer, PatternRecognizer):
            recognizer = dataclasses.replace(
                recognizer, anchored=False, starts=None, window_starts=None
            )
        found += [f for f in recognizer.find(scan) if f.score >= DETECTOR.min_score]
    return _resolve(found)


# Prose between identifiers, long enough to put them in separate windows or not.
FILLER = st.text(alphabet=st.sampled_from(list("ab Z手机号码，。\n-:")), max_size=300)


@st.composite
def sparse_texts(draw: st.DrawFn) -> str:
    pieces = [draw(FILLER)]
    for _ in range(draw(st.integers(1, 4))):
        pieces += [draw(VALUES[draw(st.sampled_from(sorted(VALUES)))]), draw(FILLER)]
    return "".join(pieces)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_texts())
def test_shortcuts_find_what_full_scans_find(text: str) -> None:
    assert DETECTOR.detect(text) == unshortcut(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sparse_texts())
def test_windows_hold_every_match_in_sparse_text(text: str) -> None:
    assert DETECTOR.detect(text) == unshortcut(text)


# What each built-in pattern was before its first character was moved in front of its
# look-behind (so that re can skip in C to where a match can begin), in the order of
# builtin_recognizers(): they must find the same. None: not rewritten.
_CARDS = (
    r"(?<![0-9A-Za-z])(?:[0-9]{13,19}|[0-9]{4}(?:[- ][0-9]{4}){2,3}(?:[- ][0-9]{1,4})?"
    r"|[0-9]{4}[- ][0-9]{6}[- ][0-9]{4,5})(?![0-9A-Za-z])(?!\.[0-9])"
)
PLAIN_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (
        "CN_MOBILE",
        r"(?<![0-9A-Za-z])(?<!\+)(?<![0-9A-Za-z]-)(?:(?:\+|00)86[- ]?|86[- ]?)?1[3-9][0-9]"
        r"(?:[- ]?[0-9]{4}[- ]?|\.[0-9]{4}\.)[0-9]{4}(?![0-9A-Za-z])(?!\.[0-9])(?!-[0-9A-Za-z])",
    ),
    (
        "CN_MOBILE",
        r"(?<![0-9A-Za-z])1(?:[3-9][0-9]([/_\u00b7\u30fb\t])[0-9]{4}\1[0-9]{4}"
        r"|(?<![0-9][- ./_\u00b7]1)([- ./_\u00b7])[3-9](?:\2[0-9]){9}(?!\2?[0-9]))(?![0-9A-Za-z])"
        r"|(?<![0-9A-Za-z])\(1[3-9][0-9]\)[- ]?[0-9]{4}[- ]?[0-9]{4}(?![0-9A-Za-z])",
    ),
    (
        "CN_LANDLINE",
        r"(?<![0-9A-Za-z])(?:[(（]0(?:10|2[0-9]|[3-9][0-9]{2})[)）][- ]?"
        r"|0(?:10|2[0-9]|[3-9][0-9]{2})[- ]|(?:\+|00)86[- ]?(?:10|2[0-9]|[3-9][0-9]{2})[- ]?)"
        r"[2-9][0-9]{6,7}(?:(?:-|转| ?ext\.? ?| ?x)[0-9]{1,5})?(?![0-9A-Za-z])",
    ),
    (
        "CN_LANDLINE",
        r"(?<![0-9A-Za-z])0(?:10|2[0-9]|[3-9][0-9]{2})[2-9][0-9]{6,7}(?![0-9A-Za-z])",
    ),
    ("CN_RESIDENT_ID", r"(?<![0-9A-Za-z])[0-9]{17}[0-9Xx](?![0-9A-Za-z])"),
    ("CN_RESIDENT_ID", r"(?<=[A-Za-z_])[0-9]{17}[0-9Xx](?![0-9A-Za-z])"),
    (
        "CN_RESIDENT_ID",
        r"(?<![0-9A-Za-z])[0-9]{6}([- ])[0-9]{8}\1[0-9]{3}[0-9Xx](?![0-9A-Za-z])",
    ),
    ("CN_RESIDENT_ID", r"(?<![0-9A-Za-z])[0-9]{15}(?![0-9A-Za-z])"),
    ("CN_BANK_CARD", _CARDS),
    ("CN_BANK_CARD", _CARDS),
    ("CREDIT_CARD", _CARDS),
    (
        "CN_USCC",
        r"(?<![0-9A-Za-z])[0-9A-HJ-NPQRTUWXY]{2}[0-9]{6}[0-9A-HJ-NPQRTUWXY]{10}(?![0-9A-Za-z])",
    ),
    ("CN_PASSPORT", r"(?<![0-9A-Za-z])E(?:[0-9]{8}|[A-HJ-NP-Z][0-9]{7})(?![0-9A-Za-z])"),
    ("CN_PASSPORT", r"(?<![0-9A-Za-z])[GDSP][0-9]{7,8}(?![0-9A-Za-z])"),
    (
        "CN_TRAVEL_PERMIT",
        r"(?<![0-9A-Za-z])(?:[HM][0-9]{8}(?:[0-9]{2})?|C[A-Z0-9][0-9]{7}|[0-9]{8})"
        r"(?![0-9A-Za-z])",
    ),
    ("HK_ID", r"(?<![0-9A-Za-z])[A-Z]{1,2}[0-9]{6}(?:\([0-9A]\)|[0-9A])(?![0-9A-Za-z])"),
    ("TW_ID", r"(?<![0-9A-Za-z])[A-Z][12][0-9]{8}(?![0-9A-Za-z])"),
    ("CN_LICENSE_PLATE", None),
    (
        "EMAIL",
        r'(?:(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+|"[^"\n@]{1,64}")'
        r"@[A-Za-z0-9\u00c0-\u024f\u0300-\u04ff-]+"
        r"(?:\.[A-Za-z0-9\u00c0-\u024f\u0300-\u04ff-]+)*\.[A-Za-z\u00c0-\u024f\u0370-\u04ff]{2,24}"
        r"(?![A-Za-z0-9\u00c0-\u024f\u0300-\u04ff-])",
    ),
    ("IPV4", r"(?<![0-9.])(?<![vV])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9]|\.[0-9])"),
    ("IPV6", None),
    ("US_SSN", r"(?<![0-9A-Za-z])(?<!-)[0-9]{3}-[0-9]{2}-[0-9]{4}(?!-)(?![0-9A-Za-z])"),
    (
        "IBAN",
        r"(?<![0-9A-Za-z])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?"
        r"(?![0-9A-Za-z])",
    ),
    ("API_SECRET", None),
)
LOOK_ALIKES = st.lists(
    st.sampled_from(
        [*"0123456789012345678901234567890123456789", *"ABCDEGHMPSXaxvV.-- ()（）+@_%号卡转/·\t",
         "+86", "0086", "86", "010", "0755", "138", "62", "4111", "GB82", "ext", "a@b.cn",
         "192.168.1.1", "123-45-6789", "13812345678", "1234567", "12345678", "C", "H", "E",
         "HX1234567", "CX1234567", "MD12345678"]
    ),
    max_size=30,
).map("".join)  # fmt: skip
PATTERNS = [r for r in builtin_recognizers() if isinstance(r, PatternRecognizer)]


def test_every_pattern_has_its_plain_form() -> None:
    assert [r.type for r in PATTERNS] == [entity_type for entity_type, _ in PLAIN_PATTERNS]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LOOK_ALIKES, st.integers(0, 60), st.integers(0, 60))
def test_first_character_before_the_look_behind_finds_the_same(
    text: str, low: int, high: int
) -> None:
    for recognizer, (entity_type, plain) in zip(PATTERNS, PLAIN_PATTERNS, strict=True):
        if plain is None:
            continue
        reference = re.compile(plain)
        # Windows are searched with pos and endpos: the look-behind still sees before pos.
        for args in ((text,), (text, low, max(low, high))):
            expected = [m.span() for m in reference.finditer(*args)]
            assert [m.span() for m in recognizer.pattern.finditer(*args)] == expected, entity_type


NAMES = NameRecognizer()
WITH_NAMES = Detector([NAMES])
# Pieces that wake every name rule and its gate, with the line breaks and whitespace
# that the gates and the line-by-line segmentation must get right.
NAME_PIECES = st.sampled_from(
    ["客户", "联系人：", "法定代表人:", "Hi", "您好", "张伟", "欧阳娜娜", "东方", "彭志强", "先生",
     "经理",
     "北京市朝阳区建国路88号", "上海市静安区南京西路337号东方大厦702室", "2单元1202室",
     "住在", "来电", "的", "，", "。", "：", " ", "\n", "\n", "\r\n", "\u2028", "\x85",
     "\u3000", "\t", "Mr.", "Dr ", "Dear ", "customer: ", "John Smith", "Kevin Q. Jones",
     "Patricia King", "Susan O'Brien", "Susan O\u2019Brien", "Hello ",
     "1600 Amphitheatre Parkway, Mountain View, CA 94043", " St",
     "The quarterly review showed that most customers like the new dashboard. ",
     "order 2024051218657353846 ", "SKU-17705608089-128G",
     "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFU",
     "Please call back before Friday,\r\nthe parcel is waiting at the depot to collect.\r\n"]
)  # fmt: skip


def unskipped_names(text: str) -> list[Finding]:
    """Every name rule over the whole text: no gates, the whole text segmented at once."""
    found = list(names._chinese(text, [(0, len(text))])) if names._CJK.search(text) else []
    return found + list(names._english_people(text)) + list(names._english_addresses(text))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NAME_PIECES, max_size=30).map("".join))
def test_name_shortcuts_find_what_the_rules_find_everywhere(text: str) -> None:
    folded = fold(text)
    expected = unskipped_names(folded)
    # The gates run by the recognizer itself, and as part of the detector's prefilter pass.
    prefilters = WITH_NAMES._prefilters
    prepared = Scan(folded, prefilters, frozenset(prefilters.hits(folded)))

    assert list(NAMES.find(Scan(folded))) == expected
    assert list(NAMES.find(prepared)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A Chinese line between English ones is segmented; the others are not.
        ("Order notes\n客户张伟来电\nThanks", [("张伟", "PERSON")]),
        ("Ship to:\r\n北京市朝阳区建国路88号\r\nASAP", [("北京市朝阳区建国路88号", "CN_ADDRESS")]),
        ("Dear team\n欧阳娜娜已到", [("欧阳娜娜", "PERSON")]),
        # A cue at the end of an English line still introduces a name on the next.
        ("Hi\n彭志强", [("彭志强", "PERSON")]),
        # Whitespace that Python's \s knows and RE2's does not.
        ("Mr.\u2028Smith called", [("Smith", "PERSON")]),
        (
            "Office: 1600\u2028Amphitheatre Parkway",
            [("1600\u2028Amphitheatre Parkway", "CN_ADDRESS")],
        ),
        ("customer:\x85Patricia King", [("Patricia King", "PERSON")]),
        # A surname with an apostrophe after its first letter wakes the English rule.
        ("Reference letter: Susan O'Brien worked here", [("Susan O'Brien", "PERSON")]),
        ("Reference letter: Susan O\u2019Brien worked", [("Susan O\u2019Brien", "PERSON")]),
    ],
)
def test_shortcuts_do_not_skip_real_names(text: str, expected: list[tuple[str, str]]) -> None:
    detector = Detector.builtin()

    assert [(text[f.start : f.end], f.type) for f in detector.detect(text)] == expected


# Chinese, letters and digits (jieba's blocks), the signs it keeps in them, whitespace
# (CR LF is one word) and characters it makes words of their own.
SEGMENTED = st.lists(
    st.sampled_from(
        [*"张伟北京市朝阳区号路的了客户联系电话欧阳娜先生", *"abcXYZ019", *"+#&._%-", " ", "  ",
         "\n", "\r\n", "\r", "\t", "\u3000", "，", "。", "(", "é", "ア", "한", "\U00020000"]
    ),
    max_size=400,
).map("".join)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            SEGMENTED,
            # Long lines: runs of other text long enough to be cut out of them.
            SEGMENTED.map(lambda text: text.replace("\n", " ").replace("\r", " ")),
            st.just("Please call back before Friday, " * 3),
        ),
        max_size=8,
    )
)
def test_stretches_are_segmented_as_in_the_whole_text(pieces: list[str]) -> None:
    text = "".join(pieces)
    whole = names._Words(text, [(0, len(text))])
    stretches = names._cjk_stretches(text)
    cut = names._Words(text, stretches)

    # Every Chinese character is in a stretch, and the stretches' words are the whole
    # text's words there.
    assert all(
        any(low <= m.start() < high for low, high in stretches) for m in names._CJK.finditer(text)
    )
    expected = [
        (start, word)
        for start, word in zip(whole.starts, whole.tagged, strict=True)
        if any(low <= start < high for low, high in stretches)
    ]
    assert list(zip(cut.starts, cut.tagged, strict=True)) == expected


def test_address_endings_are_tested_by_their_last_one_or_two_characters() -> None:
    # _chinese_addresses looks a word's last one and two characters up instead of calling
    # endswith with every ending: exact while no ending is longer.
    assert {len(ending) for ending in names._ADDRESS_ENDINGS} <= {1, 2}
    assert set(names._ADDRESS_ENDINGS) == names._ADDRESS_ENDINGS_1 | names._ADDRESS_ENDINGS_2


def reference_english_people(text: str) -> list[Finding]:
    """The English name rule as first written: every candidate, one word or more, through
    the whole rule."""

    def after_title(before: str) -> bool:
        title = before.rstrip()
        return len(title) < len(before) and reference_ends_in_word(
            title.removesuffix("."), names._TITLE_WORDS
        )

    def after_cue(before: str) -> bool:
        cue = before.rstrip(names._WHITESPACE_CHARS + ":,-")
        return len(cue) < len(before) and reference_ends_in_word(cue, names._EN_CUES)

    found = []
    for match in names._EN_CANDIDATE.finditer(text):
        words = [word for word in match.group().split(" ") if not word.endswith(".")]
        offset = 0
        while words and (
            words[0].lower() in names._EN_CUES
            or words[0] in names._TITLES
            or (words[0] in names._GREETINGS and len(words) > 1)
        ):
            offset = match.group().index(words[1]) if len(words) > 1 else len(match.group())
            words = words[1:]
        while words and words[-1] in names._EN_NOT_SURNAMES:
            words.pop()
        if not words:
            continue
        start = match.start() + offset
        before = text[max(0, start - 16) : start]
        usable = words[0] not in names._EN_NOT_SURNAMES and words[0] not in names._TITLES
        first_named = words[0] in names._FIRST_NAMES
        named = usable and len(words) > 1 and (first_named or after_cue(before.lower()))
        if not named and not (usable and after_title(before)):
            # The name starts at the first common first name followed only by first
            # names and one surname.
            spans = [
                (m.group(), match.start() + m.start())
                for m in re.finditer(r"[^ ]+", match.group())
                if not m.group().endswith(".") and match.start() + m.start() >= start
            ]
            later = [
                k
                for k, (word, _) in enumerate(spans[: len(words)])
                if 0 < k < len(words) - 1
                and word in names._FIRST_NAMES
                and set(words[k + 1 : -1]) <= names._FIRST_NAMES
            ]
            if not later:
                continue
            start = spans[later[0]][1]
            words = words[later[0] :]
        end = match.start() + match.group().rfind(words[-1]) + len(words[-1])
        found.append(Finding(start, end, "PERSON", 0.8))
    return found


ENGLISH_PIECES = st.sampled_from(
    [*names._TITLE_WORDS, "Dear", *sorted(names._EN_CUES), "Customer", "NAME", "Street",
     "The", "Friday", "John", "Smith", "Patricia", "King", "Q.", "O'Neil", "Smith-Jones",
     "Hi", "Hello", "Thanks", "McDonald", "MacBook", "O'", "O\u2019", "Mc", "Mac", "Partner",
     "Wang", "Fang", "Mrs", "xMr", "_Dr", "1Dr", "张Mr", "é", "Zoë", " ", " ", "  ", ".",
     ". ", ":", ",", "-", ": ", "\n", "\t", "\u2028", "\x85", "\x1c", "\u00a0", "\u3000",
     "a", "b", "says", "called"]
)  # fmt: skip


SEPARATORS = st.lists(
    st.sampled_from([" ", ".", ":", ",", "-", "\t", "\u2028", "\x1c"]), max_size=4
)


@st.composite
def named_texts(draw: st.DrawFn) -> str:
    """Text, then a cue or title (or a look-alike), separators and one to three words."""
    pieces = draw(st.lists(ENGLISH_PIECES, max_size=6))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(
            st.sampled_from(
                [*names._TITLE_WORDS, *sorted(names._EN_CUES), *sorted(names._GREETINGS), "Sirs"]
            )
        )
        name = st.sampled_from(["John", "Wang", "Fang", "Smith", "Street", "O'Brien", "McKay"])
        words = draw(st.lists(name, min_size=1, max_size=3))
        pieces += [draw(st.sampled_from(["", " ", "x", "_", "张"])), key]
        pieces += [*draw(SEPARATORS), " ".join(words), draw(st.sampled_from(["", " ", "."]))]
    return "".join(pieces)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.lists(ENGLISH_PIECES, max_size=25).map("".join), named_texts()))
def test_english_names_as_first_written(text: str) -> None:
    assert list(names._english_people(text)) == reference_english_people(text)


def reference_detect(text: str) -> list[Finding]:
    """The built-in detector with no shortcut at all: the whole text folded, every pattern
    tried at every position of it, the name rules without gates, jieba over the whole
    text, every English candidate through the whole rule."""
    revealed = reveal(text)
    folded = translated_whole(text if revealed is None else revealed.text)
    scan = Scan(folded, None)
    found: list[Finding] = []
    for recognizer in FULL.recognizers:
        if isinstance(recognizer, NameRecognizer):
            chinese = (
                names._chinese(folded, [(0, len(folded))]) if names._CJK.search(folded) else ()
            )
            found += [*chinese, *reference_english_people(folded)]
            found += names._english_addresses(folded)
            continue
        if isinstance(recognizer, PatternRecognizer):
            recognizer = dataclasses.replace(
                recognizer, anchored=False, starts=None, window_starts=None
            )
        found += recognizer.find(scan)
    kept = _resolve([f for f in found if f.score >= FULL.min_score])
    if revealed is None:
        return kept
    return [Finding(*revealed.original_span(f.start, f.end), f.type, f.score) for f in kept]


FULL = Detector.builtin()


def test_the_whole_corpus_is_found_as_without_shortcuts() -> None:
    texts = [dense_text(), *corpus_texts()]
    texts += [with_records(load_corpus(), 2048, every, 3) for every in (0, 300, 4000)]

    for text in texts:
        assert FULL.detect(text) == reference_detect(text), text[:80]


def reference_ends_in_word(text: str, words: Iterable[str]) -> bool:
    """``names._ends_in_word`` as first written: every word tried in turn."""
    for word in words:
        if text.endswith(word):
            previous = text[-len(word) - 1 : -len(word)]
            if not (previous.isalnum() or previous == "_"):
                return True
    return False


@settings(max_examples=600, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [*names._TITLE_WORDS, *sorted(names._EN_CUES), "x", "_", "1", "张", "é", "Ｍｒ",
             " ", ".", "-", "\n", "\u3000", "MR", "Name", "ms", "s", "rs", "user_"]
        ),
        max_size=6,
    ).map("".join)
)  # fmt: skip
def test_ends_in_word_rejects_early_as_the_loop_does(text: str) -> None:
    for words in (names._TITLE_WORDS, names._EN_CUE_WORDS):
        assert names._ends_in_word(text, words) == reference_ends_in_word(text, words)


# Gap classes written as ranges instead of negated (re tests a negated class more
# slowly): the same matches as the negated forms, around every range boundary, at the
# ends of the code space, with long runs and pos/endpos.
BOUNDARY_TEXTS = st.lists(
    st.one_of(
        st.sampled_from(
            ["\x00", "\t", "\n", "\x0b", "/", "0", "9", ":", "?", "@", "A", "\u4dff", "\u4e00",
             "\u9fff", "\ua000", "\U0010ffff", "\U00020000", "１", "＠", "张", "\u3000", " "]
        ),
        st.sampled_from(["x" * 70, "1" * 20, "张伟" * 40, "@" * 3, " " * 200, "a-b " * 60]),
        st.characters(exclude_categories=["Cs"]),
    ),
    max_size=40,
).map("".join)  # fmt: skip


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BOUNDARY_TEXTS, st.integers(0, 400), st.integers(0, 400))
def test_range_classes_match_as_the_negated_ones(text: str, low: int, high: int) -> None:
    pad = 2 * recognizers._PAD
    pairs = (
        (recognizers._ANCHORS, rf"[0-9@][0-9@]*(?:[^0-9@\n]{{1,{pad}}}+[0-9@]+)*"),
        (names._CJK_GAP, r"[\u4e00-\u9fff][^\u4e00-\u9fff]{64,}"),
    )
    for pattern, negated in pairs:
        reference = re.compile(negated)
        for args in ((text,), (text, low, max(low, high))):
            expected = [m.span() for m in reference.finditer(*args)]
            assert [m.span() for m in pattern.finditer(*args)] == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sparse_texts())
def test_windows_for_a_prefilter_are_those_it_matches_in(text: str) -> None:
    folded = fold(text)
    prefilters = DETECTOR._prefilters
    # In the order the recognizers ask, and again (answers are filed on the first call).
    asked = [r.prefilter for r in PATTERNS if r.prefilter] + ["not a prefilter"]
    scan = Scan(folded, prefilters, frozenset(prefilters.hits(folded)))
    windows = scan.windows
    for prefilter in asked * 2:
        if len(windows) < 2 or prefilter not in prefilters.index:
            expected = windows
        else:
            index = prefilters.index[prefilter]
            expected = tuple(w for w in windows if index in prefilters.hits(folded[w[0] : w[1]]))
        assert scan.windows_for(prefilter) == expected
