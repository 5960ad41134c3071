"""RE2's set search answers "no match" when it fails, the same as when nothing matched; the
detector must not read that as a clean text. Its failure cannot be provoked with real input
(RE2 refuses a budget too small at construction), so the search is made to fail here."""

from __future__ import annotations

from typing import Any

import pytest
import re2

from localgate.redaction.detector import Detector
from localgate.redaction.recognizers import PrefilterFailed, Prefilters, builtin_recognizers
from localgate.testing import FakeGemini
from tests.conftest import RunningGateway

PHONE = "13812345678"


def _failing_search(self: Any, text: Any) -> None:
    return None  # what google-re2's Set.Match gives when RE2's search fails


def test_a_clean_text_and_an_empty_one_are_scanned_without_a_failure() -> None:
    prefilters = Prefilters([r"[0-9]{11}"])
    assert prefilters.index[r"[0-9]{11}"] not in prefilters.hits("")
    assert prefilters.index[r"[0-9]{11}"] not in prefilters.hits("no digits here")
    assert prefilters.index[r"[0-9]{11}"] in prefilters.hits(f"call {PHONE}")


def test_a_failed_set_search_stops_detection_instead_of_finding_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    detector = Detector(builtin_recognizers())
    assert detector.detect(f"call {PHONE}")  # found while the search works
    monkeypatch.setattr(re2.Set, "Match", _failing_search)
    with pytest.raises(PrefilterFailed):
        detector.detect(f"call {PHONE}")


def test_the_gateway_refuses_the_request_and_forwards_nothing_when_the_search_fails(
    gateway: RunningGateway, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(re2.Set, "Match", _failing_search)
    response = gateway.generate({"contents": [{"parts": [{"text": f"call me on {PHONE}"}]}]})
    assert response.status_code >= 500, response.text
    assert response.json()["error"]["status"] in {"INTERNAL", "UNAVAILABLE"}
    assert upstream.requests == []
