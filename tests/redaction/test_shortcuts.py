"""The detector's shortcuts find exactly what full scans find.

Detection skips work: a recognizer searches only the windows where its RE2 prefilter
matches, and the IPv6 and secret recognizers try their pattern only where a match can
begin. Each shortcut is exact only while its assumption holds (a prefilter matches
inside every match of its recognizer; the start positions include every possible
start); these properties check the findings against the same recognizers run without
the shortcuts, on generated texts dense with identifiers and look-alikes.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localgate.redaction.detector import Detector, _resolve
from localgate.redaction.findings import Finding
from localgate.redaction.fold import fold
from localgate.redaction.recognizers import PatternRecognizer, Scan
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
    """Every recognizer over every window, every pattern tried at every position."""
    scan = Scan(fold(text), None)
    found = []
    for recognizer in DETECTOR.recognizers:
        if isinstance(recognizer, PatternRecognizer) and recognizer.starts is not None:
            recognizer = dataclasses.replace(recognizer, starts=None)
        found += [f for f in recognizer.find(scan) if f.score >= DETECTOR.min_score]
    return _resolve(found)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_texts())
def test_shortcuts_find_what_full_scans_find(text: str) -> None:
    assert DETECTOR.detect(text) == unshortcut(text)
