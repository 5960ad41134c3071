"""What the gateway sends upstream is a request Google's API accepts, by the SDK's own types.

Redaction replaces values, retrieval adds context, signatures are sealed and opened: none of
it may leave a field Gemini does not know or a value of the wrong type. Each body the fake
upstream received is read with the official google-genai SDK's types (which forbid unknown
fields), field by field as the REST API names them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google import genai
from google.genai import types
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from localgate.testing import FakeGemini
from tests.conftest import RunningGateway


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class GenerateContentWire(_Wire):
    """The body of models.generateContent and streamGenerateContent on the wire."""

    contents: list[types.Content]
    system_instruction: types.Content | None = None
    tools: list[types.Tool] | None = None
    tool_config: types.ToolConfig | None = None
    safety_settings: list[types.SafetySetting] | None = None
    generation_config: types.GenerationConfig | None = None
    cached_content: str | None = None


class CountTokensWire(_Wire):
    contents: list[types.Content] | None = None
    generate_content_request: dict[str, Any] | None = None


class EmbedContentWire(_Wire):
    content: types.Content
    model: str | None = None
    task_type: str | None = None
    title: str | None = None
    output_dimensionality: int | None = None


class BatchEmbedContentsWire(_Wire):
    requests: list[EmbedContentWire]


_WIRE: dict[str, type[_Wire]] = {
    "generateContent": GenerateContentWire,
    "streamGenerateContent": GenerateContentWire,
    "countTokens": CountTokensWire,
    "embedContent": EmbedContentWire,
    "batchEmbedContents": BatchEmbedContentsWire,
}


def conforms(body: Any, verb: str) -> None:
    """Raise unless ``body`` reads as the SDK's types for ``verb``."""
    _WIRE[verb].model_validate_json(json.dumps(body))


@pytest.fixture
def sdk(gateway: RunningGateway) -> Any:
    client = genai.Client(
        api_key=gateway.key,
        http_options=types.HttpOptions(base_url=gateway.base_url, api_version="v1beta"),
    )
    yield client
    client.close()


def test_the_reader_refuses_what_gemini_would() -> None:
    # The check itself: a field Gemini does not know, or a part of the wrong type, fails.
    with pytest.raises(ValidationError):
        conforms({"contents": [{"parts": [{"text": "x"}]}], "redacted": True}, "generateContent")
    with pytest.raises(ValidationError):
        conforms({"contents": [{"parts": [{"text": 1}]}]}, "generateContent")
    conforms({"contents": [{"role": "user", "parts": [{"text": "x"}]}]}, "generateContent")


def test_redacted_requests_of_every_kind_keep_geminis_shape(
    sdk: genai.Client, upstream: FakeGemini
) -> None:
    personal = "张伟 13812345678, 身份证 110101199003078515, zhang.wei@example.com"
    weather = types.FunctionDeclaration(
        name="lookup_customer",
        description=f"Find the customer {personal}",
        parameters=types.Schema(
            type=types.Type.OBJECT,
            properties={"phone": types.Schema(type=types.Type.STRING, description=personal)},
        ),
    )
    config = types.GenerateContentConfig(
        system_instruction=f"You serve {personal}",
        tools=[types.Tool(function_declarations=[weather])],
        temperature=0.2,
        max_output_tokens=256,
        stop_sequences=["13812345678"],
        response_mime_type="application/json",
        response_schema=types.Schema(
            type=types.Type.OBJECT,
            properties={"answer": types.Schema(type=types.Type.STRING, description=personal)},
        ),
    )
    conversation = [
        types.Content(role="user", parts=[types.Part(text=f"Call {personal}")]),
        types.Content(
            role="model",
            parts=[
                types.Part(
                    function_call=types.FunctionCall(
                        name="lookup_customer", args={"phone": "13812345678"}
                    )
                )
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        name="lookup_customer", response={"owner": personal}
                    )
                )
            ],
        ),
    ]

    sdk.models.generate_content(model="gemini-2.5-flash", contents=conversation, config=config)
    list(
        sdk.models.generate_content_stream(
            model="gemini-2.5-flash", contents=f"Stream for {personal}"
        )
    )
    sdk.models.count_tokens(model="gemini-2.5-flash", contents=f"Count {personal}")
    sdk.models.embed_content(model="text-embedding-004", contents=f"Embed {personal}")

    verbs = []
    for received in upstream.requests:
        verb = received.path.rsplit(":", 1)[-1]
        verbs.append(verb)
        conforms(received.body, verb)
        assert "13812345678" not in json.dumps(received.body, ensure_ascii=False)
    # The SDK sends embed_content as batchEmbedContents.
    assert verbs == [
        "generateContent",
        "streamGenerateContent",
        "countTokens",
        "batchEmbedContents",
    ]
