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
