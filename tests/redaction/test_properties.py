"""Properties: a valid identifier anywhere in any text never survives redaction, and the
placeholders in an echoed answer come back as exactly the original text, however the
stream is cut."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localgate.config import RedactionSettings
from localgate.redaction.detector import Detector
from localgate.redaction.placeholders import TextRestorer
from localgate.redaction.session import RedactionSession
from tests.redaction.values import VALUES

DETECTOR = Detector.builtin()
# Surroundings that cannot glue onto an identifier: Chinese text, punctuation, spaces.
SURROUNDINGS = st.text(
    alphabet=st.sampled_from(list("客户来电反映订单未到货请联系处理的是了，。：；、 \n号码卡手机")),
    max_size=30,
)


@st.composite
def texts_with_values(draw: st.DrawFn) -> tuple[str, list[str]]:
    values = []
    pieces = [draw(SURROUNDINGS)]
    for _ in range(draw(st.integers(1, 4))):
        entity_type = draw(st.sampled_from(sorted(VALUES)))
        value = draw(VALUES[entity_type])
        values.append(value)
        pieces += [" " if not pieces[-1] else "", value, "，", draw(SURROUNDINGS)]
    return "".join(pieces), values


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts_with_values(), st.lists(st.integers(1, 9), min_size=1, max_size=50))
def test_values_never_leave_and_any_chunking_restores_them(
    case: tuple[str, list[str]], cuts: list[int]
) -> None:
    text, values = case
    session = RedactionSession(RedactionSettings(), DETECTOR)

    redacted = session.redact(text, "contents[0].parts[0].text")

    for value in values:
        assert value not in redacted
    echoed = f"回复：{redacted}"
    restorer = TextRestorer(session.pseudonyms)
    pieces, position = [], 0
    for size in cuts * (len(echoed) // max(sum(cuts), 1) + 1):
        if position >= len(echoed):
            break
        pieces.append(restorer.feed(echoed[position : position + size]))
        position += size
    pieces.append(restorer.feed(echoed[position:]))
    pieces.append(restorer.flush())
    assert "".join(pieces) == f"回复：{text}"
