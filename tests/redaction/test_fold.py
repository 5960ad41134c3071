"""Width folding: only runs of characters the table can change are translated."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from localgate.redaction import fold as folding
from localgate.redaction.fold import fold


def test_no_ascii_or_unified_ideograph_folds() -> None:
    # fold translates only the runs of other characters.
    changed = folding._table()
    assert not [code for code in changed if code < 0x80 or 0x4E00 <= code <= 0x9FFF]


def translated_whole(text: str) -> str:
    """Folding as the whole text's translation (what fold did before it skipped runs)."""
    if text.isascii() or not folding._matters().search(text):
        return text
    return text.translate(folding._lookup())


TEXTS = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("１２３ＡＢｃ＠（）：，。　\u00a0\u2013٣❶⑴张伟手机号 \n-1a")),
        # Lone surrogates never reach it: request bodies are parsed as UTF-8 JSON.
        st.characters(max_codepoint=0x2FFFF, exclude_categories=["Cs"]),
    ),
    max_size=200,
)


@settings(max_examples=500, deadline=None)
@given(TEXTS)
def test_fold_is_the_whole_text_translated(text: str) -> None:
    folded = fold(text)

    assert folded == translated_whole(text)
    assert len(folded) == len(text)


# Long ASCII and ideograph stretches between the characters that fold (what the run
# pattern skips in C), astral ones among them, at either end of the text.
STRETCHES = st.lists(
    st.one_of(
        st.sampled_from(["a" * 300, "x1 " * 90, "张伟" * 80, "\n" * 70]),
        st.sampled_from(list("１Ａ＠（）：，　\u00a0\u2013٣❶𝟗𝐀\U0001f600")),
        st.characters(min_codepoint=0x80, max_codepoint=0x2FFFF, exclude_categories=["Cs"]),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(STRETCHES)
def test_fold_skips_long_stretches_exactly(pieces: list[str]) -> None:
    text = "".join(pieces)

    assert fold(text) == translated_whole(text)
