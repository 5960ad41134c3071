"""Values that cannot be rewritten (the model name, list parameters): what refuses them."""

from __future__ import annotations

import pytest

from localgate.config import RedactionSettings
from localgate.redaction.detector import Detector
from localgate.redaction.session import RedactionSession


@pytest.fixture(scope="module")
def session() -> RedactionSession:
    return RedactionSession(RedactionSettings(), Detector.builtin())


@pytest.mark.parametrize(
    ("value", "types"),
    [
        ("gemini-MTM4MTIzNDU2Nzg", ["CN_MOBILE"]),  # a prefix, then the number in base64
        ("gemini_MTEwMTA1MTk0OTEyMzEwMDJY", ["CN_RESIDENT_ID"]),
        ("MTEwMTA1MTk0OTEyMzEwMDJY", ["CN_RESIDENT_ID"]),  # whole, check character kept
        ("gemini-2.5-flash-ZW1haWwgemhhbmcud2VpQGV4YW1wbGUuY29t", ["EMAIL"]),
    ],
)
def test_a_base64_part_of_a_value_is_read(
    session: RedactionSession, value: str, types: list[str]
) -> None:
    assert session.refusals(value) == types


@pytest.mark.parametrize(
    "model",
    [
        "gemini-2.5-flash", "gemini-2.5-flash-preview-05-20", "gemini-2.0-flash-thinking-exp-01-21",
        "text-embedding-004", "gemini-embedding-exp-03-07", "learnlm-2.0-flash-experimental",
        "gemini-1.5-flash-8b-001", "gemini-2.5-flash-preview-native-audio-dialog",
        "imagen-4.0-generate-preview-06-06", "gemini-2.5-computer-use-preview-10-2025",
    ],
)  # fmt: skip
def test_model_names_are_not_refused(session: RedactionSession, model: str) -> None:
    assert session.refusals(model) == []
