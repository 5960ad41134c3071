"""Placeholders: stable within a request, exact on restore, safe when split anywhere."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localgate.redaction.placeholders import PLACEHOLDER, Pseudonyms, TextRestorer


@pytest.fixture
def table() -> Pseudonyms:
    table = Pseudonyms()
    for index in range(12):
        table.placeholder("CN_MOBILE", f"138000000{index:02d}")
    table.placeholder("PERSON", 'He said "hi" \\ bye')
    return table


def test_same_value_same_placeholder_and_numbering_per_type() -> None:
    table = Pseudonyms()

    assert table.placeholder("CN_MOBILE", "13812345678") == "[CN_MOBILE_1]"
    assert table.placeholder("EMAIL", "a@b.cn") == "[EMAIL_1]"
    assert table.placeholder("CN_MOBILE", "13912345678") == "[CN_MOBILE_2]"
    assert table.placeholder("CN_MOBILE", "13812345678") == "[CN_MOBILE_1]"


def test_one_is_never_confused_with_ten(table: Pseudonyms) -> None:
    assert table.restore("[CN_MOBILE_1] [CN_MOBILE_10]") == "13800000000 13800000009"


def test_unknown_and_mangled_placeholders_pass_through(table: Pseudonyms) -> None:
    text = "[CN_MOBILE_99] [cn_mobile_1] (CN_MOBILE_1) [CN_MOBILE_1 ] [EMAIL_1] [CN_MOBILE_01]"

    assert table.restore(text) == text


def test_values_with_quotes_and_backslashes_are_restored_verbatim(table: Pseudonyms) -> None:
    assert table.restore("[PERSON_1]") == 'He said "hi" \\ bye'


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 13])
def test_any_chunking_restores_the_same_text(table: Pseudonyms, size: int) -> None:
    text = "致电[CN_MOBILE_1]，不是[CN_MOBILE_10]或[CN_MOBILE_99]，[PERSON_1][CN_MO"
    restorer = TextRestorer(table)

    out = "".join(restorer.feed(text[i : i + size]) for i in range(0, len(text), size))
    out += restorer.flush()

    assert out == table.restore(text)


def test_holds_back_at_most_one_placeholder(table: Pseudonyms) -> None:
    restorer = TextRestorer(table)

    assert restorer.feed("abc [CN_MO") == "abc "
    assert restorer.holding
    assert restorer.feed("BILE_1] def [") == "13800000000 def "
    assert restorer.feed("not a placeholder") == "[not a placeholder"
    assert not restorer.holding


def test_nothing_held_when_no_placeholders_were_issued() -> None:
    restorer = TextRestorer(Pseudonyms())

    assert restorer.feed("a [CN_MO") == "a [CN_MO"


_TOKENS = st.sampled_from(
    [
        "[CN_MOBILE_1]",
        "[CN_MOBILE_10]",
        "[CN_MOBILE_12]",
        "[CN_MOBILE_13]",  # never issued
        "[PERSON_1]",
        "[person_1]",
        "[PERSON_1",
        "(PERSON_1)",
        "[[PERSON_1]]",
        "[",
        "]",
        "_1]",
        "号码",
        " ",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_TOKENS, st.text(max_size=6)), max_size=20))
def test_restore_replaces_exactly_what_a_substitution_per_match_would(pieces: list[str]) -> None:
    # The reference: every placeholder-shaped token looked up on its own.
    table = Pseudonyms()
    for index in range(12):
        table.placeholder("CN_MOBILE", f"138000000{index:02d}")
    table.placeholder("PERSON", 'He said "hi" \\ bye [PERSON_1]')
    text = "".join(pieces)
    expected = PLACEHOLDER.sub(lambda m: table._values.get(m.group(), m.group()), text)
    assert table.restore(text) == expected
