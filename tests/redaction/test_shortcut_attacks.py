"""Attacks on the detector's shortcuts: each identifier sits where a shortcut cuts.

jieba segments only the stretches of a long line that hold Chinese, cut after a space or
a newline; width folding translates only the runs outside ASCII and the CJK ideographs;
the e-mail pattern is tried only at the start of the run before each ``@``; the name
rules' gates run in the detector's prefilter pass; one-word English candidates go
straight to the title check. Here names are glued to (or cut from) 2 KB of base64 or URL
text by tabs, no-break and ideographic spaces, zero-width and bidirectional characters;
full-width and mathematical forms sit inside otherwise-ASCII lines; addresses have
unusual local parts and neighbours. Every value must be found whole.
"""

from __future__ import annotations

import itertools

import pytest

from localgate.redaction.detector import Detector
from localgate.redaction.fold import fold
from localgate.redaction.recognizers import _windows

B64 = "QUJDREVGR0g" * 200  # 2.2 KB, no space: jieba's block runs on into the name
PROSE = "lorem ipsum " * 30  # long enough to be cut out of the line


@pytest.fixture(scope="module")
def detector() -> Detector:
    return Detector.builtin()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (B64 + "张伟说明天到", [("张伟", "PERSON")]),
        (B64 + " 张伟说明天到", [("张伟", "PERSON")]),
        ("客户张伟" + B64, [("张伟", "PERSON")]),
        ("a " * 150 + "客户张伟" + " b" * 150, [("张伟", "PERSON")]),
        (B64 + "\t张伟先生\t" + B64, [("张伟", "PERSON")]),
        (B64 + "\u00a0张伟先生\u00a0" + B64, [("张伟", "PERSON")]),
        (B64 + "\u3000张伟先生\u3000" + B64, [("张伟", "PERSON")]),
        (B64 + "\u200b张伟先生\u200b" + B64, [("张伟", "PERSON")]),
        (B64 + "\u202e张伟先生\u202c" + B64, [("张伟", "PERSON")]),
        ("https://example.com/search?q=" + "a%20b" * 400 + "&n=张伟先生", [("张伟", "PERSON")]),
        ("张伟说" + "x" * 300 + " 欧阳娜娜来电", [("张伟", "PERSON"), ("欧阳娜娜", "PERSON")]),
        ("张伟说 " + "x" * 300 + " 欧阳娜娜来电", [("张伟", "PERSON"), ("欧阳娜娜", "PERSON")]),
        ("x" * 300 + "\r\n联系人：彭志强\r\n" + "y" * 300, [("彭志强", "PERSON")]),
        (PROSE + "北京市朝阳区建国路88号" + PROSE, [("北京市朝阳区建国路88号", "CN_ADDRESS")]),
        (
            "a b" * 100 + " 上海市静安区南京西路337号东方大厦702室 " + "c d" * 100,
            [("上海市静安区南京西路337号东方大厦702室", "CN_ADDRESS")],
        ),
    ],
)
def test_names_and_addresses_where_segmentation_is_cut(
    detector: Detector, text: str, expected: list[tuple[str, str]]
) -> None:
    assert [(text[f.start : f.end], f.type) for f in detector.detect(text)] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            PROSE + "call １３８\u3000１２３４\u3000５６７８ or zhang＠example．com " + PROSE,
            [("１３８\u3000１２３４\u3000５６７８", "CN_MOBILE"), ("zhang＠example．com", "EMAIL")],
        ),
        (
            PROSE + "𝟏𝟑𝟖𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖 ①③⑧①②③④⑤⑥⑦⑧ " + PROSE,
            [("𝟏𝟑𝟖𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖", "CN_MOBILE"), ("①③⑧①②③④⑤⑥⑦⑧", "CN_MOBILE")],
        ),
        (
            PROSE + "身份证１１０１０５１９４９１２３１００２Ｘ " + PROSE,
            [("１１０１０５１９４９１２３１００２Ｘ", "CN_RESIDENT_ID")],
        ),
        (
            "x@y@zhang.wei@example.com a@@li.na@example.cn <wang+tag@example.org>",
            [
                ("y@zhang.wei", "EMAIL"),
                ("li.na@example.cn", "EMAIL"),
                ("wang+tag@example.org", "EMAIL"),
            ],
        ),
        (
            "mailto:zhang.wei@example.com," + "a" * 300 + " zhang_wei-01%x@example.co.uk",
            [("zhang.wei@example.com", "EMAIL"), ("zhang_wei-01%x@example.co.uk", "EMAIL")],
        ),
        (
            "Dear Mr.\u00a0Smith, Dr\u3000Watson and Patricia King wrote",
            [("Smith", "PERSON"), ("Watson", "PERSON"), ("Patricia King", "PERSON")],
        ),
    ],
)
def test_identifiers_in_forms_the_shortcuts_skip_over(
    detector: Detector, text: str, expected: list[tuple[str, str]]
) -> None:
    assert [(text[f.start : f.end], f.type) for f in detector.detect(text)] == expected


@pytest.mark.parametrize(
    "text",
    [
        ("a" * 200 + "13812345678.") * 500,  # one long token with a number every 212 characters
        ("a" * 200 + "1 ") * 500,
        "x" * 300 + ("b" * 250 + "@") * 200 + "example.com",
    ],
)
def test_windows_in_a_long_token_do_not_overlap(text: str) -> None:
    # Widened apart, every window in a long token reached to its end: the recognizers
    # searched the token once per window (2 s of CPU for 420 KB).
    windows = _windows(fold(text))

    assert all(high <= low for (_, high), (low, _) in itertools.pairwise(windows))
    assert sum(high - low for low, high in windows) <= len(text)
