"""Request shapes: what is accepted, and what a refusal says."""

from __future__ import annotations

from typing import Any

import pytest

from localgate.errors import InvalidArgument
from localgate.gemini.routes import GeminiMethod
from localgate.gemini.schemas import validate_body

MODEL = "models/gemini-2.5-flash"
TEXT = {"parts": [{"text": "hi"}]}


@pytest.mark.parametrize(
    ("method", "body"),
    [
        (GeminiMethod.GENERATE_CONTENT, {"contents": [TEXT], "futureField": {"x": [1]}}),
        (
            GeminiMethod.GENERATE_CONTENT,
            {
                "contents": [{"parts": [{"inline_data": {"mime_type": "text/plain", "data": ""}}]}],
                "system_instruction": TEXT,
                "generation_config": {"temperature": 0},
            },
        ),
        (GeminiMethod.GENERATE_CONTENT, {"contents": [TEXT], "systemInstruction": None}),
        (GeminiMethod.EMBED_CONTENT, {"content": TEXT, "outputDimensionality": 3.0}),
        (
            GeminiMethod.COUNT_TOKENS,
            {"generateContentRequest": {"model": MODEL, "contents": [TEXT]}},
        ),
        (GeminiMethod.BATCH_EMBED_CONTENTS, {"requests": [{"model": MODEL, "content": TEXT}]}),
        # Parts without text that Google takes: a call, a result, an empty text beside the
        # signature Gemini 3 sends back in history, fields localgate does not know.
        (
            GeminiMethod.GENERATE_CONTENT,
            {
                "contents": [
                    TEXT,
                    {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                    {"parts": [{"functionResponse": {"name": "f", "response": {"r": 1}}}]},
                    {"role": "model", "parts": [{"text": "", "thoughtSignature": "c2ln"}]},
                    {"parts": [{"toolCall": {"id": "1"}}, {"text": " "}]},
                ]
            },
        ),
    ],
)
def test_accepted(method: GeminiMethod, body: dict[str, Any]) -> None:
    validate_body(method, MODEL, body)


@pytest.mark.parametrize(
    ("method", "body", "message"),
    [
        (GeminiMethod.GENERATE_CONTENT, {"contents": []}, "'contents': must not be empty"),
        (GeminiMethod.GENERATE_CONTENT, {"contents": [{"parts": None}]}, "'contents[0].parts'"),
        (
            GeminiMethod.GENERATE_CONTENT,
            {"contents": [TEXT, {"parts": []}]},
            "'contents[1].parts': must not be empty",
        ),
        (
            GeminiMethod.STREAM_GENERATE_CONTENT,
            {"contents": [{"role": "user"}]},
            "'contents[0].parts': is required",
        ),
        (
            GeminiMethod.GENERATE_CONTENT,
            {"contents": [{"parts": [{"text": "a"}, {}]}]},
            "'contents[0].parts[1]': a part must carry data",
        ),
        (
            GeminiMethod.GENERATE_CONTENT,
            {"contents": [TEXT, {"parts": [{"text": ""}]}]},
            "'contents[1].parts[0]': a part must carry data",
        ),
        (
            GeminiMethod.GENERATE_CONTENT,
            {"contents": [{"parts": [{"text": None, "inlineData": None}]}]},
            "'contents[0].parts[0]': a part must carry data",
        ),
        (
            GeminiMethod.COUNT_TOKENS,
            {"contents": [{"parts": [{}]}]},
            "'contents[0].parts[0]': a part must carry data",
        ),
        (
            GeminiMethod.COUNT_TOKENS,
            {"generateContentRequest": {"model": MODEL, "contents": [{"parts": [{"text": ""}]}]}},
            "'generateContentRequest.contents[0].parts[0]': a part must carry data",
        ),
        (
            GeminiMethod.GENERATE_CONTENT,
            {"contents": [{"parts": [{"inlineData": {"data": "x"}}]}]},
            "'contents[0].parts[0].inlineData.mimeType': is required",
        ),
        (
            GeminiMethod.GENERATE_CONTENT,
            {"contents": [{"parts": [{"inline_data": {"mime_type": "a", "mimeType": "b"}}]}]},
            "give 'mimeType' or 'mime_type', not both",
        ),
        (
            GeminiMethod.EMBED_CONTENT,
            {"content": TEXT, "outputDimensionality": 3.5},
            "'outputDimensionality'",
        ),
        (
            GeminiMethod.COUNT_TOKENS,
            {"contents": [TEXT], "generateContentRequest": {"model": MODEL, "contents": [TEXT]}},
            "exactly one of",
        ),
        (
            GeminiMethod.BATCH_EMBED_CONTENTS,
            {"requests": [{"model": "models/other", "content": TEXT}]},
            "'requests[0].model'",
        ),
    ],
)
def test_refused_naming_the_field(method: GeminiMethod, body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        validate_body(method, MODEL, body)
    assert message in refused.value.message
