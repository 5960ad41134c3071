"""Detection sees what the model will see: JSON escapes, percent-encoding, character
references and invisible characters hide nothing, and the redacted text keeps its form."""

from __future__ import annotations

import html
import json
import re
import unicodedata
import urllib.parse
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localgate.config import RedactionSettings
from localgate.redaction import reveal as reveal_module
from localgate.redaction.detector import Detector
from localgate.redaction.reveal import _SHORT_TRIGGER, INVISIBLE, _trigger, plain, reveal
from localgate.redaction.session import RedactionSession
from tests.redaction.values import VALUES

DETECTOR = Detector.builtin()
SURROUNDINGS = st.text(
    alphabet=st.sampled_from(list("客户来电反映订单未到货请联系处理的是了，。：；、 \n号码卡手机")),
    max_size=20,
)
INVISIBLES = [
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",
    "\u00ad",
    "\u200e",
    "\u202e",
    "\u2066",
    "\u034f",
    "\ufe0f",
    "\U000e0041",
]
_INVISIBLE_CHARS = re.compile(f"[{INVISIBLE}]")


def session() -> RedactionSession:
    return RedactionSession(RedactionSettings(), DETECTOR)


# -- the map back to the original ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "revealed"),
    [
        ("\\u624b\\u673a13812345678", "手机13812345678"),
        ("\\ud83d\\ude00 ok", "\U0001f600 ok"),
        ('a\\"b\\\\c\\/d\\ne\\tf', 'a"b\\c/d\ne\tf'),
        ("phone=%2B86%20138", "phone=+86 138"),
        ("%E6%89%8B%E6%9C%BA", "手机"),
        ("&#49;&#x33;&#X38;", "138"),
        ("1381\u200b2345\u00ad678", "13812345678"),
        ("\\\\u0031", "1"),  # two layers: an escaped backslash, then the escape it made
        ("%255Cu0031", "1"),  # a percent-encoded percent sign, then an escape
    ],
)
def test_reveal_undoes_each_form(text: str, revealed: str) -> None:
    assert plain(text) == revealed


@pytest.mark.parametrize(
    "text",
    [
        "plain text 13812345678",
        "客户张伟，手机13812345678",
        "C:\\Users\\zhang",  # a backslash that escapes nothing
        "100% sure, 50%off",
        "AT&T and &amp;",
        "%zz %4 %",
        "\\ud800 lone",  # left alone: a lone surrogate decodes to U+FFFD
    ],
)
def test_text_without_encodings_maps_to_itself_or_reveals_harmlessly(text: str) -> None:
    revealed = reveal(text)
    if revealed is None:
        return
    for index in range(len(revealed.text)):
        start, end = revealed.original_span(index, index + 1)
        assert 0 <= start < end <= len(text)


def test_bytes_that_are_not_utf8_stay_as_they_were() -> None:
    assert plain("%FF%E6%89%8B%C3") == "%FF手%C3"


def test_a_lone_surrogate_escape_is_not_passed_on_as_a_surrogate() -> None:
    assert plain("\\ud800x") == "\ufffdx"
    plain("\\ud800x").encode("utf-8")  # the segmenter needs valid UTF-8


def test_spans_cover_whole_escapes() -> None:
    text = "tel \\u0031\\u0033\\u0038\\u0031\\u0032\\u0033\\u0034\\u0035\\u0036\\u0037\\u0038 end"

    [finding] = DETECTOR.detect(text)

    assert text[finding.start : finding.end].startswith("\\u0031")
    assert text[finding.start : finding.end].endswith("\\u0038")


# -- redaction through every form -----------------------------------------------


def test_json_dumps_output_keeps_its_form_and_loses_its_values() -> None:
    body = json.dumps({"msg": "手机13812345678，身份证11010519491231002X，客户张伟"})
    s = session()

    redacted = s.redact(body, "contents[0].parts[0].text")

    assert json.loads(redacted) == {
        "msg": "手机[CN_MOBILE_1]，身份证[CN_RESIDENT_ID_1]，客户[PERSON_1]"
    }
    # One value, one placeholder, however it was written; restored readable.
    assert s.redact("13812345678", "x") == "[CN_MOBILE_1]"
    assert s.pseudonyms.restore("[CN_MOBILE_1]") == "13812345678"


def test_a_url_keeps_its_form() -> None:
    redacted = session().redact("https://crm.example.com/c?phone=%2B8613812345678&x=1", "x")

    assert redacted == "https://crm.example.com/c?phone=[CN_MOBILE_1]&x=1"


def test_masking_keeps_the_revealed_ends() -> None:
    policy = RedactionSettings.model_validate(
        {"default_action": "mask", "mask": {"keep_start": 3, "keep_end": 4}}
    )
    redacted = RedactionSession(policy, DETECTOR).redact('{"m": "\\u0031\\u0033812345678"}', "x")

    # Not a cut-off escape (which would break the JSON): the digits the model would read.
    assert json.loads(redacted) == {"m": "138****5678"}


def test_an_answer_value_escaped_differently_is_still_the_requests_own() -> None:
    policy = RedactionSettings(scan_answers=True)
    s = RedactionSession(policy, DETECTOR)
    s.redact("call 13812345678", "x")

    assert s.mask_new_values("\\u0031\\u00338\\u00312345678") == "\\u0031\\u00338\\u00312345678"
    assert s.mask_new_values("call 13912345678") == "call [REDACTED]"


# -- properties: nothing valid survives any encoding -----------------------------


def _full_percent(text: str) -> str:
    return "".join(f"%{byte:02X}" for byte in text.encode("utf-8"))


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(char):04x}" if ord(char) < 0x10000 else char for char in text)


def _references(text: str) -> str:
    return "".join(f"&#{ord(char)};" for char in text)


ENCODINGS: dict[str, Callable[[str], str]] = {
    "json": lambda text: json.dumps(text)[1:-1],
    "json twice": lambda text: json.dumps(json.dumps(text))[1:-1],
    "url": lambda text: urllib.parse.quote(text, safe=""),
    "percent every byte": _full_percent,
    "escape every char": _escaped,
    "references": _references,
    "json of url": lambda text: json.dumps(urllib.parse.quote(text, safe=""))[1:-1],
}
DECODERS: dict[str, Callable[[str], str]] = {
    "json": lambda text: json.loads(f'"{text}"'),
    "json twice": lambda text: json.loads(json.loads(f'"{text}"')),
    "url": urllib.parse.unquote,
    "percent every byte": urllib.parse.unquote,
    "escape every char": lambda text: json.loads(f'"{text}"'),
    "references": html.unescape,
    "json of url": lambda text: urllib.parse.unquote(json.loads(f'"{text}"')),
}


@st.composite
def hidden_values(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Text with valid identifiers, some split by invisible characters."""
    values: list[str] = []
    pieces = [draw(SURROUNDINGS)]
    for _ in range(draw(st.integers(1, 3))):
        value = draw(VALUES[draw(st.sampled_from(sorted(VALUES)))])
        values.append(value)
        cuts = draw(st.lists(st.integers(1, len(value) - 1), max_size=3, unique=True))
        hidden = value
        for cut in sorted(cuts, reverse=True):
            hidden = hidden[:cut] + draw(st.sampled_from(INVISIBLES)) + hidden[cut:]
        pieces += [" " if not pieces[-1] else "", hidden, "，", draw(SURROUNDINGS)]
    return "".join(pieces), values


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hidden_values(), st.sampled_from(sorted(ENCODINGS)))
def test_no_valid_identifier_survives_any_encoding(
    case: tuple[str, list[str]], encoding: str
) -> None:
    text, values = case
    encoded = ENCODINGS[encoding](text)

    redacted = session().redact(encoded, "contents[0].parts[0].text")

    # Decoded independently of the gateway's own decoder, the text is still well-formed
    # and holds none of the values.
    decoded = _INVISIBLE_CHARS.sub("", DECODERS[encoding](redacted))
    for value in values:
        assert value not in decoded


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hidden_values())
def test_no_valid_identifier_survives_invisible_characters(case: tuple[str, list[str]]) -> None:
    text, values = case

    redacted = session().redact(text, "contents[0].parts[0].text")

    for value in values:
        assert value not in _INVISIBLE_CHARS.sub("", redacted)


# -- no new false positives -------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "uuid 123e4567-e89b-12d3-a456-426614174000 in %7B%22id%22%3A1%7D",
        "订单号 202611301234567890，折扣 50%，\\u8ba2\\u5355 2026113012",
        "https://example.com/a%20b?page=2&size=100&ts=1764547200",
        "git 4b825dc642cb6eb9a060e54bf8d69288fbee4904 &#8203; done",
    ],
)
def test_decoding_adds_no_findings_to_hashes_ids_and_order_numbers(text: str) -> None:
    assert DETECTOR.detect(text) == []


def test_every_format_character_of_this_python_is_invisible() -> None:
    # The list is written out (building it at start-up scans 1.1M code points); a newer
    # Unicode table with new format characters must extend it.
    invisible = re.compile(f"[{INVISIBLE}]")
    missing = [
        f"U+{code:04X}"
        for code in range(0x110000)
        if unicodedata.category(chr(code)) == "Cf" and not invisible.match(chr(code))
    ]

    assert missing == []


@pytest.mark.parametrize(
    ("text", "revealed"),
    [
        ("&#49&#51&#x38", "138"),  # no semicolons, as HTML5 allows
        ("&#0000049;&#x0000031;", "11"),  # leading zeros
        ("zhang.wei&commat;example&period;com", "zhang.wei@example.com"),
        ("&amp;#49;", "1"),  # escaped twice, as templates do
        ("\\x31\\U00000033%u0038\\061", "1381"),
        ("1\ufe0f\u20e33\u03328", "138"),  # a keycap and an underline
        ("编号%13812345678", "编号%13812345678"),  # %13 is a control character: left alone
    ],
)
def test_reveal_undoes_the_forms_an_attack_round_found(text: str, revealed: str) -> None:
    assert plain(text) == revealed


def test_the_short_text_trigger_finds_exactly_what_the_re2_one_finds() -> None:
    # Every code point but the surrogates (which neither engine is given as text), alone
    # and after a letter: the two engines' character classes are the same set.
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        text = "号" + chr(code)
        assert bool(_SHORT_TRIGGER.search(text)) == bool(_trigger().search(text)), hex(code)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("号码1 %&\\u200b\u0301x;#")), max_size=160))
def test_reveal_gives_the_same_with_either_engine(text: str) -> None:
    short = reveal(text)
    saved = reveal_module._SHORT
    reveal_module._SHORT = -1  # every text to RE2
    try:
        long = reveal(text)
    finally:
        reveal_module._SHORT = saved
    assert (short is None) == (long is None)
    if short is not None and long is not None:
        assert short.text == long.text
        spans = [short.original_span(i, i + 1) for i in range(len(short.text))]
        assert spans == [long.original_span(i, i + 1) for i in range(len(long.text))]
